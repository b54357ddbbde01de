"""Empirical privacy audit of the linear-head DP-GD / DP-SGD trainer with a canary record.

Many training runs of the real trainer (`train_linear_dpgd`, all runs of a world in one batched
call, divided by the trainer's normalizer) on two neighbouring datasets, with σ calibrated exactly
as the workflow calibrates it. Every run is scored by an attack; the scores give lower bounds on ε
(assumption-free, Clopper–Pearson) and on μ (GDP) through `dphpo.audit.bounds`. A lower bound above
the claimed ε (or μ) refutes the claim: the accounting or the trainer is wrong.

Neighbours (`neighbours`): add_remove, the workflow's adjacency, trains D (world 0) and D plus the
canary (world 1), so the worlds differ in size and any use of the private count shows; replace_one
trains D plus an all-zero record (world 0) and D with the canary in its place (world 1), the same
size in both worlds. The all-zero record has zero gradient, so both pairs differ by one clipped
gradient in the sum and the add/remove claim applies to both.

Normalizer (`normalizer`): public divides the noisy sum by the declared public size |D| = N, the
same constant in both worlds, as the workflow's trainer does. private_count divides by each world's
own record count (N vs N + 1 under add/remove): the old trainer, whose ÷N vs ÷(N + 1) leaks
membership through the scale of every update, a channel the accountant does not charge. It exists
so the audit can show it catches that bug; nothing in the workflow trains that way.

The canary (`canary`): gradient (default; Nasr et al. 2021, 2023: the strongest practical canary is
one whose gradient is orthogonal to every other gradient) is x_c = s·e_c in a feature direction no
other record uses: the audited data are D's features with one extra, all-zero column, and the canary
is nonzero only there, so its gradient lives in column c of W, always clipped to norm C for large s
(the worst case the accountant assumes). zero is an all-zero record: its gradient is zero, so the
worlds differ only in their size, the cleanest test of the normalizer.

Threat models:
- white-box (Nasr et al. 2021, "adversary sees every intermediate update"): the attacker knows both
  datasets and the mechanism and sees every step's model W_t and released noisy gradient g̃_t (each
  model a deterministic function of the earlier releases). Full batch: g̃_t is Gaussian with mean
  S_w(W_t)/n_w and covariance (σC/n_w)² I in world w (S_w the clipped gradient sum of world w's
  data, n_w its normalizer), so the attacker sums the exact per-step log-likelihood ratios
      LLR_t = D log(n_1/n_0) − (‖n_1 g̃_t − S_1‖² − ‖n_0 g̃_t − S_0‖²) / (2σ²C²),   D = K·d,
  the Neyman–Pearson statistic of the whole transcript. With a public normalizer (n_0 = n_1) it is
  a_t u_t − a_t²/2 of the canary's clipped gradient alone, and its sum is N(±μ²/2, μ²): the exact
  trade-off of μ-GDP, so the audit can approach the claim. Poisson rate q (the other records' batch is
  secret): LLR_t = log(1 − q + q·exp(a_t u_t − a_t²/2)) from the projection of g̃_t on the canary's
  clipped gradient (the canary is in step t's batch with probability q); it does not look at the
  normalizer, so audit the private-count normalizer with full batches.
- black-box: the attacker sees only the final model and scores the canary by minus its loss.

`noise_scale` < 1 trains with less noise than calibrated: another deliberately broken mechanism.

Every audit computes several bounds (ε and μ for each threat model); each is taken at level α/m
(Bonferroni, m bounds), so a correct mechanism fails the audit with probability at most α: the
reported confidence 1 − α is family-wise.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from dphpo.audit import CANARIES, CONFIG_DEFAULTS, MIN_RUNS, NEIGHBOURS, NORMALIZERS, THREAT_MODELS
from dphpo.audit.bounds import (
    achievable_bounds,
    eps_of_mu_lower,
    gaussian_achievable,
    refutable_bounds,
    threshold_bound,
)
from dphpo.audit.subset_canaries import check_subset_canaries
from dphpo.audit.subset_canaries import summary as subset_summary
from dphpo.data.registry import DATASETS, Dataset, load_dataset, subset
from dphpo.errors import ConfigError, FeatureCacheError
from dphpo.features.cache import load_feature_cache
from dphpo.features.extractors import RawPixels
from dphpo.privacy.accountant import ACCOUNTANTS, make_accountant
from dphpo.privacy.randomness import public_seed
from dphpo.provenance import provenance
from dphpo.train.dpgd import TrialBatch, clip_scales, clipped_sums, train_linear_dpgd

#: The audit's `max_train` subset: the workflow's per-record rule under this public salt.
AUDIT_SUBSET_SEED = 0
#: Runs per block of the white-box attack's float64 arithmetic (bounds its memory).
ATTACK_BLOCK = 4096


@dataclass(frozen=True)
class AuditSpec:
    """One audit: a claimed (ε, δ), the trainer's settings, the number of runs and the attack's confidence."""

    eps: float
    delta: float = CONFIG_DEFAULTS["delta"]
    runs: int = CONFIG_DEFAULTS["runs"]  # training runs in all: half in each world
    steps: int = CONFIG_DEFAULTS["steps"]
    lr: float = CONFIG_DEFAULTS["lr"]
    batch_size: int | None = None  # expected Poisson batch size (DP-SGD); None = full-batch DP-GD
    accountant: str | None = None  # gdp (full batch), prv or rdp (DP-SGD); None: gdp / prv
    alpha: float = CONFIG_DEFAULTS["alpha"]  # family-wise: all bounds together hold with confidence 1 − α
    clip_norm: float = 1.0
    momentum: float = 0.9
    free_step: bool = True
    canary_norm: float = CONFIG_DEFAULTS["canary_norm"]  # ‖x_c‖, large: its gradient is always clipped
    canary_label: int = 0
    noise_scale: float = 1.0  # σ used = noise_scale × calibrated σ (< 1: a broken mechanism)
    seed: int = CONFIG_DEFAULTS["seed"]
    neighbours: str = "add_remove"  # see NEIGHBOURS
    normalizer: str = "public"  # see NORMALIZERS; private_count is the old, leaking trainer
    canary: str = "gradient"  # see CANARIES

    def __post_init__(self) -> None:
        if not (self.eps > 0 and math.isfinite(self.eps)):
            raise ConfigError(f"audit.eps: expected a positive finite number, got {self.eps}")
        if not 0.0 < self.delta < 1.0:
            raise ConfigError(f"audit.delta: expected a number in (0, 1), got {self.delta}")
        if int(self.runs) < MIN_RUNS:
            raise ConfigError(f"audit.runs: expected at least {MIN_RUNS} runs (2 per world and half), got {self.runs}")
        if int(self.steps) < 1:
            raise ConfigError(f"audit.steps: expected an integer >= 1, got {self.steps}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ConfigError(f"audit.lr: expected a positive number, got {self.lr}")
        if self.batch_size is not None and int(self.batch_size) < 1:
            raise ConfigError(f"audit.batch_size: expected a positive integer or null, got {self.batch_size}")
        if self.accountant is not None and self.accountant not in ACCOUNTANTS:
            raise ConfigError(f"audit.accountant: expected one of {', '.join(ACCOUNTANTS)}, got {self.accountant!r}")
        if self.accountant == "gdp" and self.batch_size is not None:
            raise ConfigError("audit.accountant: gdp accounts full-batch runs only; use prv or rdp with a batch size")
        if self.accountant in ("prv", "rdp") and self.batch_size is None:
            raise ConfigError(f"audit.accountant: {self.accountant} is for DP-SGD; set a batch size or use gdp")
        if not 0.0 < self.alpha < 1.0:
            raise ConfigError(f"audit.alpha: expected a number in (0, 1), got {self.alpha}")
        if not (self.canary_norm > 0 and self.noise_scale > 0):
            raise ConfigError("audit.canary_norm and audit.noise_scale must be positive")
        for name, known in (("neighbours", NEIGHBOURS), ("normalizer", NORMALIZERS), ("canary", CANARIES)):
            if getattr(self, name) not in known:
                raise ConfigError(f"audit.{name}: expected one of {', '.join(known)}, got {getattr(self, name)!r}")

    @property
    def account(self) -> str:
        return self.accountant or ("gdp" if self.batch_size is None else "prv")

    @property
    def mechanism(self) -> str:
        return "DP-GD (full batch)" if self.batch_size is None else f"DP-SGD (Poisson, batch {self.batch_size})"


@dataclass
class AuditData:
    """The dataset D the audit trains on (features of its training split)."""

    x: torch.Tensor  # (N, d) float32
    y: torch.Tensor  # (N,) int64
    num_classes: int
    checksum: str
    source: str
    # the add/remove canaries through the subset path (dphpo.audit.subset_canaries), checked on loading
    subset_canaries: dict | None = None

    @property
    def n(self) -> int:
        return int(self.x.shape[0])


def load_audit_data(
    name: str = "digits", *, root: str = "data", max_train: int | None = None, features: str | None = None
) -> AuditData:
    """D: raw pixels of a registry image dataset (digits by default, offline), or a feature cache file.

    A `max_train` subset is the workflow's per-record subset (`registry.subset`, subset_seed 0), a share
    max_train / the dataset's published training size; for a feature cache of a dataset without one,
    a share of the cache's own training count (the audit's D is the auditor's: nothing about it is
    released as private). Before D is returned, the add/remove canaries through that subset path
    (`check_subset_canaries`) must pass: they raise SubsetCanaryError otherwise.
    """
    if features:
        try:
            fs = load_feature_cache(features)
        except FeatureCacheError as err:  # a user's file, not a workflow cache: "rerun" would not rebuild it
            reason = str(err).removesuffix("; delete it and rerun")
            raise ConfigError(
                f"--features {features}: not a dphpo feature cache ({reason}); pass a cache the workflow built "
                "(results/features/<dataset>/<extractor>.h5)"
            ) from None
        empty = np.zeros((0, fs.x_train.shape[1]), np.float32)
        full = Dataset(
            name=str(fs.attrs.get("dataset") or "features"), modality="features",
            train_inputs=fs.x_train.float().cpu().numpy(), train_labels=fs.y_train.long().cpu().numpy(),
            test_inputs=empty, test_labels=np.zeros(0, np.int64), num_classes=int(fs.num_classes),
            checksum=fs.checksum, source=f"feature cache {features} (train split)",
        )
        known = DATASETS.get(full.name)
        public_n = known.public_n_train if known is not None and known.public_n_train else full.n_train
        canaries = check_subset_canaries(full, max_train=max_train, seed=AUDIT_SUBSET_SEED, public_n_train=public_n)
        ds = subset(full, max_train, None, AUDIT_SUBSET_SEED, public_n_train=public_n)
        return AuditData(
            torch.from_numpy(ds.train_inputs), torch.from_numpy(ds.train_labels), ds.num_classes, ds.checksum,
            f"{ds.source}, n={ds.n_train}; {subset_summary(canaries)}", canaries,
        )

    full = load_dataset(name, root, download=False)
    spec = DATASETS[name]
    if full.modality != "image":
        raise ConfigError(
            f"audit.data (--data) {name}: the audit trains on raw pixels of an image dataset; "
            f"pass --features for {full.modality} data"
        )
    canaries = check_subset_canaries(full, max_train=max_train, seed=AUDIT_SUBSET_SEED, public_n_train=spec.public_n_train)
    ds = subset(full, max_train, 0, AUDIT_SUBSET_SEED, public_n_train=spec.public_n_train)  # as load_dataset draws it
    x = torch.from_numpy(RawPixels("raw").extract(ds.train_inputs, progress=False))
    return AuditData(
        x,
        torch.from_numpy(ds.train_labels),
        ds.num_classes,
        ds.checksum,
        f"{name} raw pixels ({ds.source}), n={ds.n_train}; {subset_summary(canaries)}",
        canaries,
    )


def check_spec_data(spec: AuditSpec, data: AuditData) -> None:
    """What can only be checked once D is loaded, before any run is trained."""
    if spec.batch_size is not None and spec.batch_size >= data.n:
        raise ConfigError(
            f"audit batch size (--batch-size, audit.batch_size) {spec.batch_size} is not below the audit set's "
            f"size {data.n}: Poisson batches need q = B/n < 1; omit it to audit full-batch DP-GD"
        )


def calibrate(spec: AuditSpec, n: int) -> dict[str, Any]:
    """σ making one run (ε, δ)-DP, as the workflow calibrates it (`dphpo.privacy.accountant`), and its claim.

    `n` is the declared public size: Poisson's rate q = batch size / n is public, like the normalizer.
    """
    q = None if spec.batch_size is None else min(1.0, spec.batch_size / n)
    accountant = make_accountant(spec.account, spec.delta, sample_rate=q, batch_size=spec.batch_size)
    sigma = accountant.sigma_for_eps(spec.eps, spec.steps)
    mu = accountant.run_mu(sigma, spec.steps)
    return {"sigma": sigma, "q": q, "mu": mu, "accountant": accountant.describe()["formula"]}


@dataclass
class World:
    """One of the two neighbouring datasets: D's N records first, then its extra record if it has one."""

    x: torch.Tensor  # (N or N + 1, d + 1) float32: D's features plus the canary's own, all-zero column
    y: torch.Tensor
    n_public: float  # what the trainer divides the noisy sum by (times q for Poisson)


def canary_worlds(data: AuditData, spec: AuditSpec) -> tuple[World, World]:
    """World 0 and world 1 of `spec.neighbours`, each with the divisor of `spec.normalizer` (module docstring)."""
    if not 0 <= spec.canary_label < data.num_classes:
        raise ConfigError(f"audit.canary_label: expected a class in 0..{data.num_classes - 1}, got {spec.canary_label}")
    x = torch.cat([data.x.float(), torch.zeros(data.n, 1)], 1)
    y = data.y.long()
    canary = torch.zeros(1, x.shape[1])
    if spec.canary == "gradient":
        canary[0, -1] = spec.canary_norm
    label = torch.tensor([spec.canary_label])
    x1, y1 = torch.cat([x, canary]), torch.cat([y, label])
    # replace_one: world 0 holds an all-zero record (zero gradient) where world 1 holds the canary.
    x0, y0 = (x, y) if spec.neighbours == "add_remove" else (torch.cat([x, torch.zeros_like(canary)]), y1)
    public = spec.normalizer == "public"
    return World(x0, y0, data.n if public else x0.shape[0]), World(x1, y1, data.n if public else x1.shape[0])


class WhiteBoxAttack:
    """Accumulates each run's log-likelihood ratio of world 1 over world 0 from every step's release.

    The attacker knows D, both extra records and the mechanism (the claimed σ, C and each world's
    divisor), and recomputes the clipped gradient sums with the trainer's own `clipped_sums` at the
    model each release was taken at; see the module docstring for the statistic.
    """

    def __init__(self, runs: int, worlds: tuple[World, World], n: int, sigma: float, spec: AuditSpec, q, classes: int):
        self.score = np.zeros(runs)
        self.clipped = np.zeros(runs)  # steps at which the canary's gradient was clipped
        self.sigma_c, self.clip_norm, self.q = sigma * spec.clip_norm, spec.clip_norm, q
        self.divisors = [w.n_public * (1.0 if q is None else q) for w in worlds]

        def records(x, y):
            x = x.double()
            return x, x.norm(dim=1), torch.nn.functional.one_hot(y, classes).double()

        self.base = records(worlds[0].x[:n], worlds[0].y[:n])  # D, in both worlds
        self.extra = [records(w.x[n:], w.y[n:]) for w in worlds]  # each world's own record (maybe none)

    def _sum(self, records, w: torch.Tensor) -> torch.Tensor:
        """Σ clip_C(∇ℓ) over `records` at every model w (H, K, d), as the trainer sums it."""
        if records[0].shape[0] == 0:
            return torch.zeros_like(w)
        return clipped_sums(*records, w, clip_scales(self.clip_norm))

    def __call__(self, t: int, index: np.ndarray, weights: torch.Tensor, noisy_grad: torch.Tensor) -> None:
        for lo in range(0, len(index), ATTACK_BLOCK):
            w = weights[lo : lo + ATTACK_BLOCK].detach().cpu().double()
            obs = noisy_grad[lo : lo + ATTACK_BLOCK].detach().cpu().double()
            e0, e1 = (self._sum(r, w) for r in self.extra)
            n0, n1 = self.divisors
            if self.q is None:
                base = self._sum(self.base, w)
                r0, r1 = n0 * obs - base - e0, n1 * obs - base - e1  # σC·ξ under world 0 / world 1
                # ‖r1‖² − ‖r0‖² as ⟨r1 − r0, r1 + r0⟩: no cancellation between two large norms.
                quad = ((r1 - r0) * (r1 + r0)).sum(dim=(1, 2))
                llr = obs[0].numel() * math.log(n1 / n0) - quad / (2.0 * self.sigma_c**2)
            else:
                g = e1 - e0  # the canary's clipped gradient (the record it replaces has none)
                g_norm = g.norm(dim=(1, 2)).clamp_min(1e-300)
                a = g_norm / self.sigma_c
                z = a * (n1 * obs * g).sum(dim=(1, 2)) / (g_norm * self.sigma_c) - a * a / 2.0
                llr = torch.logaddexp(torch.full_like(z, math.log1p(-self.q)), math.log(self.q) + z)
            idx = index[lo : lo + ATTACK_BLOCK]
            self.score[idx] += llr.numpy()
            self.clipped[idx] += self._canary_clipped(w)

    def _canary_clipped(self, w: torch.Tensor) -> np.ndarray:
        x, x_norm, onehot = (r[-1] for r in self.extra[1])  # the canary: world 1's last record
        norm = (torch.softmax(w @ x, dim=1) - onehot).norm(dim=1) * x_norm
        return (norm >= self.clip_norm * (1 - 1e-9)).numpy()


def black_box_scores(weights: torch.Tensor, canary: torch.Tensor, label: int) -> np.ndarray:
    """Minus the cross-entropy of the canary under each final model (high: the model fits the canary)."""
    logits = weights.double() @ canary.double()
    return -torch.nn.functional.cross_entropy(
        logits, torch.full((logits.shape[0],), label, dtype=torch.long), reduction="none"
    ).numpy()


def train_world(world: World, index: int, num_classes, spec: AuditSpec, sigma_used: float, q, attack, progress: bool):
    """spec.runs // 2 runs of the workflow's trainer on one world, with that world's divisor."""
    runs = spec.runs // 2
    trials = TrialBatch(
        [spec.lr] * runs,
        [spec.steps] * runs,
        [sigma_used] * runs,
        [public_seed("audit", spec.seed, index, i) for i in range(runs)],
    )
    return train_linear_dpgd(
        world.x,
        world.y,
        num_classes,
        trials,
        n_public=world.n_public,
        clip_norm=spec.clip_norm,
        momentum=spec.momentum,
        free_step=spec.free_step,
        progress=progress,
        desc=f"audit eps={spec.eps:g} world {index}",
        sample_rate=q,
        on_step=attack,
    )


def ideal_llr_achievable(
    sigma: float, q: float, steps: int, n_eval: int, spec: AuditSpec, alpha: float, samples: int = 200_000
) -> dict:
    """Context for DP-SGD: the bounds the optimal white-box attack can expect, from its exact per-step model
    (canary in each batch with probability q, always clipped), sampled — not an audit."""
    rng = np.random.default_rng(public_seed("audit-achievable", spec.seed))
    a = 1.0 / sigma

    def llr(present: bool) -> np.ndarray:
        total = np.zeros(samples)
        for _ in range(steps):
            b = (rng.random(samples) < q) if present else np.zeros(samples, bool)
            z = a * (rng.standard_normal(samples) + a * b) - a * a / 2.0
            total += np.logaddexp(math.log1p(-q), math.log(q) + z)
        return np.sort(total)

    out, inn = llr(False), llr(True)
    grid = np.unique(np.quantile(np.concatenate([out, inn]), np.linspace(0.0, 1.0, 4001)))
    res = achievable_bounds(
        lambda t: 1.0 - np.searchsorted(out, t, side="left") / samples,
        lambda t: np.searchsorted(inn, t, side="left") / samples,
        grid,
        n_eval,
        n_eval,
        alpha=alpha,
        delta=spec.delta,
    )
    res["eps_gdp"] = eps_of_mu_lower(res["mu"], spec.delta)
    return res


@dataclass
class AuditResult:
    spec: AuditSpec
    claim: dict
    rows: list[dict] = field(default_factory=list)  # one per threat model
    diagnostics: dict = field(default_factory=dict)
    provenance: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """No lower bound above the claim (a claim too large for the runs to refute passes too: `conclusive`)."""
        return all(r["pass"] for r in self.rows)

    @property
    def conclusive(self) -> bool:
        """Whether this many runs could have refuted the claim (a perfect attack's bounds exceed it)."""
        return all(r["verdict"] != "inconclusive" for r in self.rows)

    def to_dict(self) -> dict:
        return {
            "spec": asdict(self.spec),
            "claim": self.claim,
            "rows": self.rows,
            "diagnostics": self.diagnostics,
            "provenance": self.provenance,
            "passed": self.passed,
            "conclusive": self.conclusive,
        }


def run_audit(spec: AuditSpec, data: AuditData, *, threat_models=THREAT_MODELS, progress: bool = False) -> AuditResult:
    """Train spec.runs runs (half in each world), attack them, and bound ε and μ from below (family-wise level α)."""
    unknown = sorted(set(threat_models) - set(THREAT_MODELS))
    if unknown:
        raise ConfigError(f"audit.threat_models: unknown {unknown}; known: {', '.join(THREAT_MODELS)}")
    started = time.perf_counter()
    claim = calibrate(spec, data.n)
    sigma_used = claim["sigma"] * spec.noise_scale
    q = claim["q"] if claim["q"] is not None and claim["q"] < 1.0 else None
    worlds = canary_worlds(data, spec)
    half = spec.runs // 2
    scores: dict[str, list[np.ndarray]] = {m: [] for m in THREAT_MODELS}
    clipped = []
    for index, world in enumerate(worlds):
        attack = WhiteBoxAttack(half, worlds, data.n, claim["sigma"], spec, q, data.num_classes)
        weights = train_world(world, index, data.num_classes, spec, sigma_used, q, attack, progress)
        scores["white-box"].append(attack.score)
        scores["black-box"].append(black_box_scores(weights, worlds[1].x[-1], spec.canary_label))
        clipped.append(attack.clipped)
    train_s = time.perf_counter() - started

    # Bonferroni: an ε and a μ bound per threat model, each at level α/m, so that a correct mechanism
    # passes every one of them with probability at least 1 − α (the reported, family-wise confidence).
    bounds_in_family = 2 * len(threat_models)
    alpha_bound = spec.alpha / bounds_in_family
    n_eval = half - half // 2
    if q is None:
        ceiling = gaussian_achievable(claim["mu"], n_eval, n_eval, alpha=alpha_bound, delta=spec.delta)
    else:
        ceiling = ideal_llr_achievable(claim["sigma"], q, spec.steps, n_eval, spec, alpha_bound)
    refutable = refutable_bounds(n_eval, n_eval, alpha=alpha_bound, delta=spec.delta)
    exact_gdp = claim["mu"] is not None
    # a claim no outcome of this many runs could refute: "inconclusive", never "pass"
    conclusive = spec.eps < refutable["eps"] or (exact_gdp and claim["mu"] < refutable["mu"])
    rows = []
    for model in threat_models:
        out, inn = scores[model]
        rng = np.random.default_rng(public_seed("audit-split", spec.seed, model))
        eps_b = threshold_bound(out, inn, kind="eps", alpha=alpha_bound, delta=spec.delta, rng=rng)
        mu_b = threshold_bound(out, inn, kind="mu", alpha=alpha_bound, delta=spec.delta, rng=rng)
        eps_gdp = eps_of_mu_lower(mu_b.value, spec.delta)
        ok = eps_b.value <= spec.eps and (not exact_gdp or mu_b.value <= claim["mu"])
        rows.append(
            {
                "mechanism": spec.mechanism,
                "neighbours": spec.neighbours,
                "normalizer": spec.normalizer,
                "divisors": [w.n_public for w in worlds],
                "canary": spec.canary,
                "threat_model": model,
                "claimed_eps": spec.eps,
                "delta": spec.delta,
                "claimed_mu": claim["mu"],
                "sigma": claim["sigma"],
                "sigma_used": sigma_used,
                "noise_scale": spec.noise_scale,
                "steps": spec.steps,
                "runs": 2 * half,
                "eval_runs_per_world": n_eval,
                "eps_lower": eps_b.value,
                "mu_lower": mu_b.value,
                "eps_lower_gdp": eps_gdp,
                "achievable_eps": ceiling["eps"],
                "achievable_eps_gdp": ceiling["eps_gdp"],
                "refutable_eps": refutable["eps"],
                "confidence": 1.0 - spec.alpha,
                "alpha_family": spec.alpha,
                "bounds_in_family": bounds_in_family,
                "alpha_per_bound": alpha_bound,
                "pass": bool(ok),
                "verdict": "fail" if not ok else "pass" if conclusive else "inconclusive",
                "eps_test": eps_b.to_dict(),
                "mu_test": mu_b.to_dict(),
            }
        )
    total_s = time.perf_counter() - started
    for r in rows:
        r["time_s"] = total_s
    steps_total = 2 * half * spec.steps
    diagnostics = {
        "canary_clipped_fraction": float(np.concatenate(clipped).sum() / steps_total),
        "train_seconds": train_s,
        "total_seconds": total_s,
        "achievable": ceiling,
        "refutable": refutable,
        "subset_canaries": data.subset_canaries,
        "family_wise": {
            "alpha": spec.alpha,
            "bounds": bounds_in_family,
            "alpha_per_bound": alpha_bound,
            "correction": "Bonferroni",
        },
    }
    prov = provenance(
        asdict(spec),
        data=data.source,
        data_checksum=data.checksum,
        n_train=data.n,
        accountant=claim["accountant"],
        seeds={"audit": spec.seed, "public_seed_labels": "('audit', seed, world, run)"},
    )
    return AuditResult(spec, claim, rows, diagnostics, prov)


def audits_from_config(section: dict | None, data_dir: str = "data", *, progress: bool = False) -> list[AuditResult]:
    """Run the audits of an `audit:` config section (one per claimed ε); every spec is checked before training."""
    cfg = CONFIG_DEFAULTS | dict(section or {})
    unknown = sorted(set(cfg) - set(CONFIG_DEFAULTS))
    if unknown:
        raise ConfigError(f"audit: unknown key(s) {unknown}; known: {sorted(CONFIG_DEFAULTS)}")
    keys = ("delta", "runs", "steps", "lr", "batch_size", "accountant", "alpha", "seed", "canary_norm")
    specs = [AuditSpec(eps=float(eps), **{k: cfg[k] for k in keys}) for eps in cfg["eps"]]
    data = load_audit_data(cfg["data"], root=data_dir, max_train=cfg["max_train"])
    for spec in specs:
        check_spec_data(spec, data)
    return [run_audit(spec, data, threat_models=tuple(cfg["threat_models"]), progress=progress) for spec in specs]
