"""OSO-DPSGD as an HPO baseline (Galli et al., Algorithm 1 with the ν_q correction; docs/methods.md §4).

OSO adapts the clipping threshold C_t and the learning rate ρ_t online from the released noisy
quantities, so what is left to choose is the initial learning rate ρ_0 (Galli et al. grid-searches it:
k ∈ {5, 7, 9} values log-spaced over [10^-2.5, 10^1.5], the whole grid's budget composed) and the
number of steps; C_0 = 0.1, ρ_c = ρ_r = 2.5e-3 are the paper's defaults. Since C_0 = 0.1 clips every
per-sample gradient of a linear head on unnormalised features and exp(±ρ_c) moves C by only 0.25 %
a step, the effective step ρ·C is 10× smaller than DP-GD's at C = 1: ρ_0 needs the paper's range up
to 31.6, not the search space's η range (up to 3), and enough steps (config/README.md, measured).

- `oso_dpsgd` (linear head on cached features, full batch): candidates are `eta0_num` initial
  learning rates log-spaced over `eta0_range` (default the paper's) × `steps` (⊆ the T grid); every
  candidate is one trial at μ_run (T steps of one Gaussian mechanism of multiplier ν per step:
  μ = √T/ν), all trials of all targets trained as one batch (`dphpo.train.oso`), the best released
  by the honest selection rule; trials + selection compose to the target as in `random_search_k`.
- `oso_dpsgd_cnn` (small CNN on raw images, Poisson minibatches, opacus per-sample gradients;
  `dphpo.train.dpsgd`): one run per target at ρ_0 = `eta0` from the config (no search, nothing
  selected), ν calibrated with prv-accountant so that the run's PRV upper bound is at most the
  target; the ledger (a PRV entry) reports that bound. Opt-in: it runs only on the studies listed
  under `baselines.oso_dpsgd_cnn.studies` (raw-pixel feature caches). Its schedule is in epochs, so
  Galli et al.'s 10 epochs of batch 512 (1,170 steps on MNIST) are 29 steps on digits (N ≈ 1,440):
  with C_0 = 0.1 against per-sample gradient norms of 1.4–1.8 the clipped mean gradient is 16× smaller
  than the raw one and C moves by at most exp(29·ρ_c) = +7.5 %, so at ρ_0 = 10^-0.5 the CNN stayed at
  chance even without noise (issue 29: 12 % at σ → 0). ρ_0 = 10^0.5 and 40 epochs (113 steps) are
  chosen on a public MNIST proxy (config/config.yaml).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from dphpo.data import DATASETS
from dphpo.errors import ConfigError
from dphpo.hpo.candidates import baselines_section, context, run_composed
from dphpo.hpo.common import MethodResult
from dphpo.hpo.space import SearchSpace
from dphpo.privacy.accountant import make_accountant
from dphpo.privacy.ledger import Ledger
from dphpo.privacy.randomness import NoiseScope
from dphpo.train.dpsgd import accuracy, flat_parameters, images_from_features, train_cnn_oso
from dphpo.train.linear_head import LinearHeadTrainer
from dphpo.train.oso import NU_Q_RULE_OF_THUMB, OsoRule, noise_split, train_linear_oso
from dphpo.train.philox import require_mt
from dphpo.train.protocol import PrivateTrainer, TrialOutcome, require_kind

METHOD = "oso_dpsgd"
METHOD_CNN = "oso_dpsgd_cnn"
#: Galli et al.'s grid-search range of the learning rate: 10^-2.5 to 10^1.5
PAPER_ETA0_RANGE = (10**-2.5, 10**1.5)


def _rule(section: dict, where: str) -> OsoRule:
    try:
        return OsoRule(
            clip_init=float(section.get("clip_init", 0.1)),
            rho_c=float(section.get("rho_c", 2.5e-3)),
            rho_r=float(section.get("rho_r", 2.5e-3)),
            nu_q_ratio=float(section.get("nu_q_ratio", NU_Q_RULE_OF_THUMB)),
        )
    except ValueError as err:
        raise ConfigError(f"{where}: {err}") from None


@dataclass(frozen=True)
class OsoConfig:
    eta0_num: int = 5  # Galli et al.: k ∈ {5, 7, 9}
    steps: tuple[int, ...] = (50,)
    rule: OsoRule = OsoRule()
    momentum: float | None = None  # None: training.momentum
    eta0_range: tuple[float, ...] | None = PAPER_ETA0_RANGE  # None: the search space's η range

    @classmethod
    def from_config(cls, config: dict) -> OsoConfig:
        s = baselines_section(config, METHOD)
        eta0_range = s.get("eta0_range", PAPER_ETA0_RANGE)
        return cls(
            eta0_num=int(s.get("eta0_num", 5)),
            steps=tuple(int(t) for t in s.get("steps", (50,))),
            rule=_rule(s, f"baselines.{METHOD}"),
            momentum=None if s.get("momentum") is None else float(s["momentum"]),
            eta0_range=None if eta0_range is None else tuple(float(v) for v in eta0_range),
        )

    def candidates(self, space: SearchSpace) -> list[tuple[float, int]]:
        if self.eta0_num < 1:
            raise ConfigError(f"baselines.{METHOD}.eta0_num: must be >= 1, got {self.eta0_num}")
        outside = sorted(set(self.steps) - set(space.steps))
        if outside or not self.steps:
            raise ConfigError(f"baselines.{METHOD}.steps: must be a non-empty subset of search_space.steps; not in it: {outside}")
        lo_hi = (space.eta_min, space.eta_max) if self.eta0_range is None else self.eta0_range
        if len(lo_hi) != 2 or not 0 < lo_hi[0] <= lo_hi[1]:
            raise ConfigError(f"baselines.{METHOD}.eta0_range: expected [min, max] with 0 < min <= max, got {list(lo_hi)}")
        lo, hi = lo_hi
        if self.eta0_num == 1:
            etas = [math.sqrt(lo * hi)]
        else:
            etas = np.geomspace(lo, hi, self.eta0_num)
        return [(float(e), int(t)) for e in etas for t in sorted(set(self.steps))]


class OsoTrainer(LinearHeadTrainer):
    """The linear-head trainer with OSO-DPSGD's update rule instead of plain DP-GD (same accounting)."""

    def __init__(self, base: LinearHeadTrainer, oc: OsoConfig) -> None:
        super().__init__(base.features, base.settings, base.accountant)
        self.oc = oc

    def run_trials(self, eta, steps, sigma, seeds, *, progress=False, desc=METHOD) -> TrialOutcome:
        features, settings, oc = self.features, self.settings, self.oc
        momentum = settings.momentum if oc.momentum is None else oc.momentum
        weights, traces = train_linear_oso(
            features.x_train,
            features.y_train,
            features.num_classes,
            eta,
            steps,
            sigma,
            seeds,
            oc.rule,
            n_public=self.n_public,
            momentum=momentum,
            free_step=settings.free_step,
            progress=progress,
            desc=desc,
            noise_generator=settings.noise_generator,
        )
        extras = []
        for j, nu in enumerate(sigma):
            nu_g, nu_q = noise_split(nu, oc.rule.nu_q_ratio)
            extras.append(
                {"nu": nu, "nu_g": nu_g, "nu_q": nu_q, "final_clip": float(traces["clip"][j]), "final_lr": float(traces["lr"][j])}
            )
        return self.outcome(weights, extras)


def run(trainer: PrivateTrainer, config: dict, noise: NoiseScope, progress: bool = False) -> list[MethodResult]:
    require_kind(trainer, "linear_head", METHOD)
    _, space, selection, targets = context(config, trainer)
    settings = trainer.settings
    oc = OsoConfig.from_config(config)
    cands = oc.candidates(space)
    rule = oc.rule
    return run_composed(
        METHOD,
        OsoTrainer(trainer, oc),
        selection,
        {t: cands for t in targets},
        noise,
        search_info={
            "definition": "OSO-DPSGD (Galli et al. Alg. 1, nu_q per Eq. 17): candidates = initial learning rate x steps, "
            "each trial at mu_run (one Gaussian mechanism of multiplier nu per step), honest selection",
            "candidates": [list(c) for c in cands],
            "eta0_range": None if oc.eta0_range is None else list(oc.eta0_range),
            "clip_init": rule.clip_init,
            "rho_c": rule.rho_c,
            "rho_r": rule.rho_r,
            "nu_q_ratio": rule.nu_q_ratio,
            "momentum": settings.momentum if oc.momentum is None else oc.momentum,
        },
        progress=progress,
        mechanism="OSO-DPSGD run, (g, q) pair = one Gaussian of multiplier nu per step",
    )


def check(config: dict) -> None:
    accountant, space, selection, targets = context(config)
    cands = OsoConfig.from_config(config).candidates(space)
    for target in targets:
        accountant.runs_mu(target, len(cands), selection.at(target, len(cands)).mu_per_release, METHOD)


# ---------------------------------------------------------------------------------------------
# the CNN version


@dataclass(frozen=True)
class CnnConfig:
    studies: tuple[tuple[str, str], ...] = ()
    eta0: float = 10**0.5  # eta0, epochs: chosen on a public MNIST proxy (config/config.yaml, issue 29)
    epochs: float = 40.0
    batch_size: int = 512  # Galli et al., Table 1
    momentum: float = 0.9
    channels: tuple[int, int] = (16, 32)
    eps_error: float = 0.01
    rule: OsoRule = OsoRule()

    @classmethod
    def from_config(cls, config: dict) -> CnnConfig:
        s = baselines_section(config, METHOD_CNN)
        where = f"baselines.{METHOD_CNN}"
        out = cls(
            studies=tuple((st["dataset"], st["extractor"]) for st in s.get("studies", [])),
            eta0=float(s.get("eta0", cls.eta0)),
            epochs=float(s.get("epochs", cls.epochs)),
            batch_size=int(s.get("batch_size", cls.batch_size)),
            momentum=float(s.get("momentum", 0.9)),
            channels=tuple(int(c) for c in s.get("channels", (16, 32))),
            eps_error=float(s.get("eps_error", 0.01)),
            rule=_rule(s, where),
        )
        if out.epochs <= 0 or out.batch_size < 1 or out.eta0 <= 0 or len(out.channels) != 2:
            raise ConfigError(f"{where}: need epochs > 0, batch_size >= 1, eta0 > 0 and two channel counts")
        return out

    def schedule(self, n_train: int) -> tuple[float, int]:
        """(sampling rate q, steps T) for a training set of n_train examples."""
        q = min(1.0, self.batch_size / n_train)
        return q, max(1, math.ceil(self.epochs / q))


def run_cnn(trainer: PrivateTrainer, config: dict, noise: NoiseScope, progress: bool = False) -> list[MethodResult]:
    require_kind(trainer, "linear_head", METHOD_CNN)  # raw-pixel feature caches, read as images
    require_mt(trainer.settings.noise_generator, METHOD_CNN)
    accountant, _, _, targets = context(config, trainer)
    features = trainer.features
    if accountant.adjacency != "add_remove":
        raise ConfigError(f"{METHOD_CNN}: the PRV accountant's Poisson-subsampled Gaussian assumes add_remove adjacency")
    cc = CnnConfig.from_config(config)
    x_train = images_from_features(features.x_train.cpu(), features.attrs)
    x_test = images_from_features(features.x_test.cpu(), features.attrs)
    data = (x_train, features.y_train.cpu(), x_test, features.y_test.cpu())
    q, steps = cc.schedule(trainer.n_public)
    # each (g, q) pair of a step is one Poisson-subsampled Gaussian: the PRV accountant of such runs
    run_accountant = make_accountant("prv", accountant.delta, sample_rate=q, eps_error=cc.eps_error)
    return [_run_cnn_target(trainer, cc, data, run_accountant, q, steps, target, noise, progress) for target in targets]


def _run_cnn_target(trainer: PrivateTrainer, cc: CnnConfig, data: tuple, run_accountant, q: float, steps: int,
                    target: float, noise: NoiseScope, progress: bool) -> MethodResult:
    """One OSO-DPSGD run of the CNN at `target`: ν calibrated so the run's PRV bound meets it."""
    x_train, y_train, x_test, y_test = data
    nu = run_accountant.sigma_for_eps(target, steps)
    with torch.random.fork_rng(devices=[]):
        model, trace = train_cnn_oso(
            x_train,
            y_train,
            trainer.features.num_classes,
            sample_rate=q,
            steps=steps,
            nu=nu,
            eta0=cc.eta0,
            rule=cc.rule,
            momentum=cc.momentum,
            channels=cc.channels,
            seed=noise.seed(METHOD_CNN, f"{target:.10g}"),
            n_public=trainer.n_public,
            progress=progress,
        )
    ledger = Ledger(
        [run_accountant.entry("OSO-DPSGD run (CNN, Poisson minibatches): (g, q) pair = one subsampled Gaussian per step", nu, steps,
                              {"nu_g": trace["nu_g"], "nu_q": trace["nu_q"]})]
    )
    return MethodResult(
        method=METHOD_CNN,
        target_eps=float(target),
        delta=trainer.accountant.delta,
        weights=flat_parameters(model),
        test_accuracy=accuracy(model, x_test, y_test),
        train_accuracy=accuracy(model, x_train, y_train),
        released={
            "model": "SmallCNN",
            "channels": list(cc.channels),
            "eta0": cc.eta0,
            "steps": steps,
            "sample_rate": q,
            "expected_batch": q * trainer.n_public,
            "nu": nu,
        }
        | trace,
        ledger=ledger,
        selection={"rule": "none", "private": True, "label": "single run, nothing selected (OSO adapts C and lr online)"},
        trials=[],
        search=_cnn_search(cc),
        notes=["small CNN on raw pixels: not the linear-head features of the other methods"],
    )


def _cnn_search(cc: CnnConfig) -> dict:
    return {
        "definition": "one OSO-DPSGD run per target; C_t and lr_t adapted online, rho_0 from the config",
        "epochs": cc.epochs,
        "batch_size": cc.batch_size,
        "momentum": cc.momentum,
        "clip_init": cc.rule.clip_init,
        "rho_c": cc.rule.rho_c,
        "rho_r": cc.rule.rho_r,
        "nu_q_ratio": cc.rule.nu_q_ratio,
        "accountant": "prv_accountant upper bound",
    }


def check_cnn(config: dict) -> None:
    cc = CnnConfig.from_config(config)
    for i, (dataset, extractor) in enumerate(cc.studies):
        where = f"baselines.{METHOD_CNN}.studies[{i}]"
        if dataset not in DATASETS:
            raise ConfigError(f"{where}.dataset: unknown dataset {dataset!r}; known: {', '.join(sorted(DATASETS))}")
        if DATASETS[dataset].modality != "image":
            raise ConfigError(f"{where}.dataset: {dataset!r} is not an image dataset")
        kind = config.get("extractors", {}).get(extractor, {}).get("kind")
        if kind != "raw":
            raise ConfigError(f"{where}.extractor: {extractor!r} must be an extractor of kind 'raw' (got {kind!r})")
    if cc.studies and config["privacy"].get("adjacency", "add_remove") != "add_remove":
        raise ConfigError(f"baselines.{METHOD_CNN}: needs privacy.adjacency = add_remove (PRV accountant)")
