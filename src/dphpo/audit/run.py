"""Empirical privacy audit of the linear-head DP-GD / DP-SGD trainer with a canary record.

Many training runs of the real trainer (`train_linear_dpgd`, all runs of a world in one batched
call) on two neighbouring datasets: D (world 0) and D plus one canary record (world 1), with σ
calibrated exactly as the workflow calibrates it. Every run is scored by an attack; the scores give
lower bounds on ε (assumption-free, Clopper–Pearson) and on μ (GDP) through `dphpo.audit.bounds`.
A lower bound above the claimed ε (or μ) refutes the claim: the accounting or the trainer is wrong.

The canary (Nasr et al. 2021, 2023: the strongest practical canary is one whose gradient is
orthogonal to every other gradient) is a record x_c = s·e_c in a feature direction that no other
record uses: the audited data are D's features with one extra, all-zero column, and the canary is
nonzero only there. Its per-sample gradient (p_c − y_c)·x_cᵀ lives in column c of W, where no other
record's gradient reaches, so the noisy gradient's column c is the canary's clipped gradient (world 1)
or nothing (world 0), plus the Gaussian noise. With s large, the canary's gradient is always
clipped to norm C, the worst case the accountant assumes.

Threat models:
- white-box (Nasr et al. 2021, "adversary sees every intermediate update"): the attacker sees every
  step's model W_t and released noisy gradient (each a deterministic function of the sequence of
  models), computes the canary's clipped gradient g_t at W_t and sums the per-step log-likelihood
  ratios of "canary in" over "canary out". Full batch: LLR_t = a_t u_t − a_t²/2 with
  u_t = ⟨n·g̃_t[:, c], g_t⟩ / (‖g_t‖ σC), a_t = ‖g_t‖/(σC); the sum is N(±μ²/2, μ²) — the exact
  trade-off of μ-GDP, so the audit can approach the claim. Poisson rate q: LLR_t =
  log(1 − q + q·exp(a_t u_t − a_t²/2)) (the canary is in step t's batch with probability q).
- black-box: the attacker sees only the final model and scores the canary by minus its loss.

`noise_scale` < 1 trains with less noise than calibrated: a deliberately broken mechanism, to check
that the audit catches a false claim.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from dphpo.audit import CONFIG_DEFAULTS, THREAT_MODELS
from dphpo.audit.bounds import (
    achievable_bounds,
    eps_of_mu_lower,
    gaussian_achievable,
    threshold_bound,
)
from dphpo.errors import ConfigError
from dphpo.hpo.common import trial_seed
from dphpo.privacy.accountant import make_accountant
from dphpo.train.dpgd import TrialBatch, train_linear_dpgd

ACCOUNTANTS = ("gdp", "rdp", "prv")


@dataclass(frozen=True)
class AuditSpec:
    """One audit: a claimed (ε, δ), the trainer's settings, the number of runs and the attack's confidence."""

    eps: float
    delta: float = CONFIG_DEFAULTS["delta"]
    runs: int = CONFIG_DEFAULTS["runs"]  # training runs in all: half without the canary, half with it
    steps: int = CONFIG_DEFAULTS["steps"]
    lr: float = CONFIG_DEFAULTS["lr"]
    batch_size: int | None = None  # expected Poisson batch size (DP-SGD); None = full-batch DP-GD
    accountant: str | None = None  # gdp (full batch), prv or rdp (DP-SGD); None: gdp / prv
    alpha: float = CONFIG_DEFAULTS["alpha"]  # the bounds hold with confidence 1 − α
    clip_norm: float = 1.0
    momentum: float = 0.9
    free_step: bool = True
    canary_norm: float = CONFIG_DEFAULTS["canary_norm"]  # ‖x_c‖, large: its gradient is always clipped
    canary_label: int = 0
    noise_scale: float = 1.0  # σ used = noise_scale × calibrated σ (< 1: a broken mechanism)
    seed: int = CONFIG_DEFAULTS["seed"]

    def __post_init__(self) -> None:
        if not (self.eps > 0 and math.isfinite(self.eps)):
            raise ConfigError(f"audit.eps: expected a positive finite number, got {self.eps}")
        if not 0.0 < self.delta < 1.0:
            raise ConfigError(f"audit.delta: expected a number in (0, 1), got {self.delta}")
        if int(self.runs) < 8:
            raise ConfigError(f"audit.runs: expected at least 8 runs (2 per world and half), got {self.runs}")
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

    @property
    def n(self) -> int:
        return int(self.x.shape[0])


def load_audit_data(
    name: str = "digits", *, root: str = "data", max_train: int | None = None, features: str | None = None
) -> AuditData:
    """D: raw pixels of a registry image dataset (digits by default, offline), or a feature cache file."""
    if features:
        from dphpo.features.cache import load_feature_cache

        fs = load_feature_cache(features)
        x, y = fs.x_train.float(), fs.y_train.long()
        if max_train is not None and max_train < x.shape[0]:
            idx = torch.as_tensor(np.sort(np.random.default_rng(0).choice(x.shape[0], max_train, replace=False)))
            x, y = x[idx], y[idx]
        return AuditData(
            x, y, int(fs.num_classes), fs.checksum, f"feature cache {features} (train split, n={x.shape[0]})"
        )
    from dphpo.data.registry import load_dataset
    from dphpo.features.extractors import RawPixels

    ds = load_dataset(name, root, max_train=max_train, max_test=0, download=False)
    if ds.modality != "image":
        raise ConfigError(
            f"audit.data (--data) {name}: the audit trains on raw pixels of an image dataset; "
            f"pass --features for {ds.modality} data"
        )
    x = torch.from_numpy(RawPixels("raw").extract(ds.train_inputs, progress=False))
    return AuditData(
        x,
        torch.from_numpy(ds.train_labels),
        ds.num_classes,
        ds.checksum,
        f"{name} raw pixels ({ds.source}), n={ds.n_train}",
    )


def calibrate(spec: AuditSpec, n: int) -> dict[str, Any]:
    """σ making one run (ε, δ)-DP, as the workflow calibrates it (`dphpo.privacy.accountant`), and the claim it carries."""
    q = None if spec.batch_size is None else min(1.0, spec.batch_size / n)
    accountant = make_accountant(spec.account, spec.delta, sample_rate=q, batch_size=spec.batch_size)
    sigma = accountant.sigma_for_eps(spec.eps, spec.steps)
    mu = accountant.mu(sigma, spec.steps) if accountant.name == "gdp" else None
    return {"sigma": sigma, "q": q, "mu": mu, "accountant": accountant.describe()["formula"]}


def canary_worlds(data: AuditData, spec: AuditSpec) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(x0, y0, x1, y1): D with an extra all-zero feature column, and the same plus the canary record."""
    if not 0 <= spec.canary_label < data.num_classes:
        raise ConfigError(f"audit.canary_label: expected a class in 0..{data.num_classes - 1}, got {spec.canary_label}")
    x0 = torch.cat([data.x.float(), torch.zeros(data.n, 1)], 1)
    canary = torch.zeros(1, x0.shape[1])
    canary[0, -1] = spec.canary_norm
    x1 = torch.cat([x0, canary])
    y1 = torch.cat([data.y.long(), torch.tensor([spec.canary_label])])
    return x0, data.y.long(), x1, y1


class WhiteBoxAttack:
    """Accumulates each run's log-likelihood ratio statistic from every step's release (see module docstring)."""

    def __init__(self, runs: int, spec: AuditSpec, sigma: float, q: float | None, normalizer: float, num_classes: int):
        self.score = np.zeros(runs)
        self.clipped = np.zeros(runs)  # steps at which the canary's gradient was clipped (a_t = 1/σ)
        self.spec, self.sigma, self.q, self.normalizer = spec, sigma, q, normalizer
        self.onehot = torch.nn.functional.one_hot(torch.tensor(spec.canary_label), num_classes).double()

    def __call__(self, t: int, index: np.ndarray, weights: torch.Tensor, noisy_grad: torch.Tensor) -> None:
        s, c = self.spec.canary_norm, self.spec.clip_norm
        w_c = weights[:, :, -1].detach().double().cpu()  # the canary column of each model
        obs = noisy_grad[:, :, -1].detach().double().cpu() * self.normalizer  # clipped sum + noise in that column
        resid = torch.softmax(s * w_c, dim=1) - self.onehot  # p_c − y_c
        g = resid * s  # the canary's gradient in column c
        norm = g.norm(dim=1).clamp_min(1e-300)
        g = g * (c / norm).clamp_max(1.0).unsqueeze(1)  # clipped, as the trainer clips it
        g_norm = g.norm(dim=1).clamp_min(1e-300)
        a = g_norm / (self.sigma * c)
        u = (obs * g).sum(dim=1) / (g_norm * self.sigma * c)
        z = a * u - a * a / 2.0
        llr = z if self.q is None else torch.logaddexp(torch.full_like(z, math.log1p(-self.q)), math.log(self.q) + z)
        self.score[index] += llr.numpy()
        self.clipped[index] += (norm >= c * (1 - 1e-9)).numpy()


def black_box_scores(weights: torch.Tensor, spec: AuditSpec) -> np.ndarray:
    """Minus the cross-entropy of the canary under each final model (high: the model fits the canary)."""
    logits = spec.canary_norm * weights[:, :, -1].double()
    return -torch.nn.functional.cross_entropy(
        logits, torch.full((logits.shape[0],), spec.canary_label, dtype=torch.long), reduction="none"
    ).numpy()


def train_world(
    x, y, num_classes, spec: AuditSpec, sigma_used: float, q: float | None, world: int, attack, progress: bool
):
    runs = spec.runs // 2
    trials = TrialBatch(
        [spec.lr] * runs,
        [spec.steps] * runs,
        [sigma_used] * runs,
        [trial_seed("audit", spec.seed, world, i) for i in range(runs)],
    )
    return train_linear_dpgd(
        x,
        y,
        num_classes,
        trials,
        clip_norm=spec.clip_norm,
        momentum=spec.momentum,
        free_step=spec.free_step,
        progress=progress,
        desc=f"audit eps={spec.eps:g} world {world}",
        sample_rate=q,
        on_step=attack,
    )


def ideal_llr_achievable(
    sigma: float, q: float, steps: int, n_eval: int, spec: AuditSpec, samples: int = 200_000
) -> dict:
    """Context for DP-SGD: the bounds the optimal white-box attack can expect, from its exact per-step model
    (canary in each batch with probability q, always clipped), sampled — not an audit."""
    rng = np.random.default_rng(trial_seed("audit-achievable", spec.seed))
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
        alpha=spec.alpha,
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
        return all(r["pass"] for r in self.rows)

    def to_dict(self) -> dict:
        return {
            "spec": asdict(self.spec),
            "claim": self.claim,
            "rows": self.rows,
            "diagnostics": self.diagnostics,
            "provenance": self.provenance,
            "passed": self.passed,
        }


def run_audit(spec: AuditSpec, data: AuditData, *, threat_models=THREAT_MODELS, progress: bool = False) -> AuditResult:
    """Train spec.runs runs (half with the canary), attack them, and bound ε and μ from below."""
    from dphpo.provenance import provenance

    unknown = sorted(set(threat_models) - set(THREAT_MODELS))
    if unknown:
        raise ConfigError(f"audit.threat_models: unknown {unknown}; known: {', '.join(THREAT_MODELS)}")
    started = time.perf_counter()
    claim = calibrate(spec, data.n)
    sigma_used = claim["sigma"] * spec.noise_scale
    q = claim["q"] if claim["q"] is not None and claim["q"] < 1.0 else None
    x0, y0, x1, y1 = canary_worlds(data, spec)
    # The attacker rescales the released average by the size of D ∪ {canary} (its hypothesis "in").
    normalizer = (data.n + 1) * (1.0 if q is None else q)
    half = spec.runs // 2
    scores: dict[str, list[np.ndarray]] = {m: [] for m in THREAT_MODELS}
    clipped = []
    for world, (x, y) in enumerate(((x0, y0), (x1, y1))):
        attack = WhiteBoxAttack(half, spec, claim["sigma"], q, normalizer, data.num_classes)
        weights = train_world(x, y, data.num_classes, spec, sigma_used, q, world, attack, progress)
        scores["white-box"].append(attack.score)
        scores["black-box"].append(black_box_scores(weights, spec))
        clipped.append(attack.clipped)
    train_s = time.perf_counter() - started

    n_eval = half - half // 2
    if q is None:
        ceiling = gaussian_achievable(claim["mu"], n_eval, n_eval, alpha=spec.alpha, delta=spec.delta)
    else:
        ceiling = ideal_llr_achievable(claim["sigma"], q, spec.steps, n_eval, spec)
    rows = []
    for model in threat_models:
        out, inn = scores[model]
        rng = np.random.default_rng(trial_seed("audit-split", spec.seed, model))
        eps_b = threshold_bound(out, inn, kind="eps", alpha=spec.alpha, delta=spec.delta, rng=rng)
        mu_b = threshold_bound(out, inn, kind="mu", alpha=spec.alpha, delta=spec.delta, rng=rng)
        eps_gdp = eps_of_mu_lower(mu_b.value, spec.delta)
        exact_gdp = claim["mu"] is not None
        ok = eps_b.value <= spec.eps and (not exact_gdp or mu_b.value <= claim["mu"])
        rows.append(
            {
                "mechanism": spec.mechanism,
                "threat_model": model,
                "claimed_eps": spec.eps,
                "delta": spec.delta,
                "claimed_mu": claim["mu"],
                "sigma": claim["sigma"],
                "sigma_used": sigma_used,
                "steps": spec.steps,
                "runs": 2 * half,
                "eval_runs_per_world": n_eval,
                "eps_lower": eps_b.value,
                "mu_lower": mu_b.value,
                "eps_lower_gdp": eps_gdp,
                "achievable_eps": ceiling["eps"],
                "achievable_eps_gdp": ceiling["eps_gdp"],
                "confidence": 1.0 - spec.alpha,
                "pass": bool(ok),
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
    }
    prov = provenance(
        asdict(spec),
        data=data.source,
        data_checksum=data.checksum,
        n_train=data.n,
        accountant=claim["accountant"],
        seeds={"audit": spec.seed, "trial_seed_keys": "('audit', seed, world, run)"},
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
    return [run_audit(spec, data, threat_models=tuple(cfg["threat_models"]), progress=progress) for spec in specs]
