"""Koskela & Kulkarni (NeurIPS 2023): P&S tuning on a Poisson subsample, final run on all data.

RECONSTRUCTION (docs/methods.md §4: the paper's body text was not available; this follows its abstract
and the description in Panda et al. §5.2):
1. X1 ⊂ X: every training example kept independently with probability q (secret; the indices are
   never released).
2. Papernot–Steinke tuning on X1 (`papernot_steinke`): K random trials, each trains on X1 and
   releases its noisy score on X1; the best trial's hyperparameters are kept.
3. Hyperparameter transfer X1 → X for full-batch DP-GD (`transfer`):
   - "scale_sigma" (default): keep (η, T) and give the trials on X1 the noise σ1 = q·σ, where σ is
     what the final run on X uses at the same T, so the noise on the *averaged* gradient
     (σ1/|X1| ≈ σ/|X|) matches. Each trial is then (μ_f/q)-GDP before amplification.
   - "keep_sigma": trials use the final run's σ itself (μ_trial = μ_f).
4. Final run on X with the selected (η, T) at μ_f.
Accounting: the whole tuning procedure (an RDP curve, P&S Thm. 2/6) is amplified by Poisson
subsampling with the general bound of Zhu & Wang (2019) for integer orders
(`dphpo.privacy.tuning.subsampled_ps_gdp_rdp`), composed in RDP with the final run (λμ_f²/2) and
converted once. μ_f is the largest value whose total is at most the target (bisection; the total
is increasing in μ_f). A capped K is accounted as in `papernot_steinke` (δ_cap).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from dphpo.errors import ConfigError, InfeasibleBudgetError
from dphpo.hpo.candidates import baselines_section, candidate_sampling, check_iid_candidates, context
from dphpo.hpo.common import MethodResult, released_model, result_metrics
from dphpo.hpo.papernot_steinke import (
    PSConfig,
    draw_trials,
    noisy_scores,
    score_mu,
    secret_count_fields,
    trial_selection,
    truncation_delta,
)
from dphpo.hpo.selection import SelectionRule, best_released
from dphpo.hpo.trial_queue import TrialQueue
from dphpo.privacy.accountant import PlanningAccountant
from dphpo.privacy.ledger import LedgerEntry
from dphpo.privacy.planning import BUDGET_SAFETY
from dphpo.privacy.randomness import NoiseScope
from dphpo.privacy.tuning import CappedTrialsLedger, subsampled_ps_gdp_rdp
from dphpo.train.protocol import PrivateTrainer, require_kind

METHOD = "koskela"
TRANSFERS = ("scale_sigma", "keep_sigma")
#: Integer orders of the amplified tuning curve (Zhu & Wang's bound holds for integers ≥ 2). Each
#: order costs one log-sum-exp per evaluation; a grid up to 4096 gave the same μ_f to 5 digits on
#: the embedded study's budgets (0.25 ≤ ε ≤ 8, q = 0.1).
ORDERS = np.concatenate([np.arange(2.0, 65.0), np.round(np.geomspace(72, 1024, 16))])
#: Relative precision of μ_f (bisection in log μ_f; always on the feasible side).
MU_RTOL = 1e-6


@dataclass(frozen=True)
class KoskelaConfig:
    q: float = 0.1
    transfer: str = "scale_sigma"
    ps: PSConfig = PSConfig()

    def __post_init__(self) -> None:
        if not 0.0 < self.q < 1.0:
            raise ConfigError(f"baselines.{METHOD}.q: must lie in (0, 1), got {self.q}")
        if self.transfer not in TRANSFERS:
            raise ConfigError(f"baselines.{METHOD}.transfer: expected one of {TRANSFERS}, got {self.transfer!r}")

    @classmethod
    def from_config(cls, config: dict) -> KoskelaConfig:
        section = baselines_section(config, METHOD)
        return cls(
            q=float(section.get("q", 0.1)),
            transfer=section.get("transfer", "scale_sigma"),
            ps=PSConfig.from_section(section, candidate_sampling(config), f"baselines.{METHOD}"),
        )

    def trial_mu(self, mu_final: float) -> float:
        """μ of one tuning trial's training on X1 (before amplification)."""
        return mu_final / self.q if self.transfer == "scale_sigma" else mu_final

    def trial_sigma(self, accountant, mu_final: float, steps: int) -> float:
        sigma = accountant.sigma_for_mu(mu_final, steps)
        return self.q * sigma if self.transfer == "scale_sigma" else sigma


def tuning_entry(kc: KoskelaConfig, mu_final: float, mu_score: float) -> LedgerEntry:
    """RDP entry of P&S tuning on a Poisson subsample of rate q (amplified, Zhu & Wang 2019)."""
    mu_base = math.hypot(kc.trial_mu(mu_final), mu_score)
    d = kc.ps.k_dist
    values = subsampled_ps_gdp_rdp(kc.q, mu_base, d.distribution, d.mean_trials, d.eta, ORDERS, poisson_delta=kc.ps.poisson_delta)
    return LedgerEntry.rdp(
        f"Papernot-Steinke tuning on a Poisson subsample (q={kc.q:g}), amplified",
        ORDERS,
        values,
        details={
            "method": METHOD,
            "q": kc.q,
            "mu_base": mu_base,
            "mu_trial_train": kc.trial_mu(mu_final),
            "mu_score": mu_score,
            "distribution": d.distribution,
            "eta": d.shape,
            "mean_trials": d.mean_trials,
            "amplification": "Zhu & Wang 2019, general RDP bound for Poisson subsampling (integer orders)",
        },
    )


def planned_ledger(kc: KoskelaConfig, mu_final: float, mu_score: float, truncation: dict) -> CappedTrialsLedger:
    ledger = CappedTrialsLedger([tuning_entry(kc, mu_final, mu_score)], truncation)
    ledger.add("final run on all data", mu=mu_final)
    return ledger


def plan(kc: KoskelaConfig, selection: SelectionRule, target_eps: float, accountant: PlanningAccountant) -> dict:
    """The largest μ_f whose tuning + final run total is at most the target (bisection in log μ_f)."""
    delta = accountant.delta
    trunc = truncation_delta(kc.ps, target_eps, delta, METHOD)
    mu_s = score_mu(selection)

    def total(mu_f: float) -> float:
        return planned_ledger(kc, mu_f, mu_s, trunc).total(delta)["eps"]

    hi = accountant.mu_for_eps(target_eps)
    lo = hi * 1e-4
    if total(lo) > target_eps and total(lo := 1e-9) > target_eps:
        raise InfeasibleBudgetError(
            f"infeasible {METHOD} plan at target eps={target_eps:g}: the amplified tuning alone costs "
            f"eps={total(lo):.4g} even with noise-only trials (E[K]={kc.ps.k_dist.mean_trials:g}, q={kc.q:g}, "
            f"score mu={mu_s:.3g}); lower E[K] (baselines.{METHOD}.mean_trials) or raise privacy.target_eps"
        )
    for _ in range(200):
        if hi / lo - 1.0 < MU_RTOL:
            break
        mid = math.sqrt(lo * hi)
        if total(mid) <= target_eps:
            lo = mid
        else:
            hi = mid
    mu_f = lo * (1 - BUDGET_SAFETY)
    return {"mu_final": mu_f, "mu_score": mu_s, "truncation": trunc, "planned_eps": total(mu_f)}


def subsample(trainer, q: float, rng: np.random.Generator):
    """The trainer on X1: each training example kept independently with probability q (Poisson subsampling)."""
    # the subsample is secret (drawn from the noise key) and its size is never released: the trials
    # divide by q·N_pub, the expected size under the declared public N
    return trainer.subsample(np.flatnonzero(rng.random(trainer.n_train) < q), q * trainer.n_public)


@dataclass
class TargetTuning:
    """One target's tuning on its own subsample X1: the plan (`plan`), K, the trial records, the pick and
    the final run's settings. `best` and `subsample_size` are internal (the index bounds the secret K;
    the size is a private count)."""

    target: float
    plan: dict
    k_info: dict
    trials: list[dict]
    best: int | None = None
    final: dict = field(default_factory=dict)
    subsample_size: int = 0


def run(trainer: PrivateTrainer, config: dict, noise: NoiseScope, progress: bool = False) -> list[MethodResult]:
    # the hyperparameter transfer X1 -> X (σ1 = q·σ at the same T) is derived for full-batch DP-GD
    require_kind(trainer, "linear_head", METHOD)
    accountant, space, selection, targets = context(config, trainer)
    if accountant.adjacency != "add_remove":
        raise ConfigError(f"{METHOD}: amplification by Poisson subsampling is implemented for add_remove adjacency only")
    kc = KoskelaConfig.from_config(config)
    planned = []  # every target planned (an infeasible one refused) before any training
    for target in targets:
        queue = TrialQueue()
        planned.append((target, queue, _plan_tuning(kc, trial_selection(kc.ps, selection, target), accountant, space, noise, target, queue)))
    tunings = []
    for target, queue, tuned in planned:
        # a subsample of its own per target: the amplified tuning entries of the targets' releases compose
        # in a bundle's statement only if their subsamples are independent draws
        x1 = subsample(trainer, kc.q, noise.rng(METHOD, "subsample", f"{target:.10g}"))
        outcome = queue.run(x1, progress=progress, desc=f"{METHOD} tuning (eps={target:g})")
        tuned.best, (e, t) = _tuned_pick(trial_selection(kc.ps, selection, target), space, x1, outcome, tuned.trials, noise, target)
        tuned.subsample_size = x1.n_train
        mu_final = tuned.plan["mu_final"]
        tuned.final = {
            "eta": e,
            "steps": t,
            "r": e * t,
            "sigma": accountant.sigma_for_mu(mu_final, t),
            "mu": mu_final,
            "standalone_eps": accountant.gaussian_eps(mu_final),
        }
        tunings.append(tuned)
    final = trainer.run_trials(
        [tu.final["eta"] for tu in tunings],
        [tu.final["steps"] for tu in tunings],
        [tu.final["sigma"] for tu in tunings],
        [noise.seed(METHOD, "final", f"{tu.target:.10g}") for tu in tunings],
        progress=progress,
        desc=f"{METHOD} final",
    )
    return [_result(trainer, final, j, kc, trial_selection(kc.ps, selection, tu.target), tu) for j, tu in enumerate(tunings)]


def _plan_tuning(kc: KoskelaConfig, selection: SelectionRule, accountant: PlanningAccountant, space, noise: NoiseScope,
                 target: float, queue: TrialQueue) -> TargetTuning:
    """The target's plan, K and trial records: the tuning trials on X1, queued for the batch."""
    p = plan(kc, selection, target, accountant)
    cands, k_info = draw_trials(kc.ps, space, noise, target, METHOD)
    trials = []
    for i, (e, t) in enumerate(cands):
        trial = {
            "eta": e,
            "steps": t,
            "r": e * t,
            "sigma": kc.trial_sigma(accountant, p["mu_final"], t),
            "mu_before_amplification": kc.trial_mu(p["mu_final"]),
        }
        trials.append(trial)
        queue.add(e, t, trial["sigma"], noise.seed(METHOD, f"{target:.10g}", i))
    return TargetTuning(float(target), p, k_info, trials)


def _tuned_pick(selection: SelectionRule, space, x1, tuning, trials: list[dict], noise: NoiseScope,
                target: float) -> tuple[int | None, tuple[float, int]]:
    """(index of the best trial by its noisy score on X1, its (η, T)); K = 0: (None, the middle of the grids)."""
    for i, trial in enumerate(trials):
        trial["train_accuracy_subsample"] = float(tuning.train_score_sums[i] / max(1, x1.n_train))  # internal
        trial["test_accuracy"] = float(tuning.test_metric[i])
    if not trials:  # Poisson K = 0: tuning returned ⊥; fall back to the middle of the grids (data-independent)
        return None, (float(space.eta_grid[len(space.eta_grid) // 2]), int(space.steps[len(space.steps) // 2]))
    idx = np.arange(len(trials))
    scores = noisy_scores(
        selection, tuning.train_score_sums[idx], tuning.test_score_sums[idx], noise.rng(METHOD, "score", f"{target:.10g}")
    )
    for trial, score in zip(trials, scores):
        trial["score"] = float(score)
    best = best_released(scores)
    return best, (trials[best]["eta"], trials[best]["steps"])


def _result(trainer: PrivateTrainer, final, j: int, kc: KoskelaConfig, selection: SelectionRule, tuned: TargetTuning) -> MethodResult:
    """The release at one target: final run `j` on all data; the tuning's amplified entry and that run."""
    p, fin = tuned.plan, tuned.final
    ledger = planned_ledger(kc, p["mu_final"], p["mu_score"], p["truncation"])
    ledger.entries[-1] = LedgerEntry(
        what="final run on all data",
        mu=p["mu_final"],
        details={k: fin[k] for k in ("eta", "steps", "sigma", "standalone_eps")},
    )
    notes = [
        "Koskela & Kulkarni (2023) as RECONSTRUCTED here (docs/methods.md §4): P&S tuning on a Poisson subsample, "
        f"hyperparameter transfer '{kc.transfer}', final run on all data"
    ]
    if tuned.best is None:
        notes.append("K = 0: tuning released nothing; the final run used the middle of the grids")
    return MethodResult(
        method=METHOD,
        target_eps=tuned.target,
        delta=trainer.accountant.delta,
        **released_model(trainer, final, j),
        **result_metrics(trainer, final, j),
        released=fin,
        ledger=ledger,
        selection=selection.describe() | {"scores_on": "the subsample X1", "cost": "inside each trial's mu_base"},
        trials=tuned.trials,
        search=kc.ps.describe()
        | tuned.k_info
        | {
            "q": kc.q,
            "transfer": kc.transfer,
            "mu_final": p["mu_final"],
            "mu_score": p["mu_score"],
            "reconstruction": True,
        },
        notes=notes,
        trials_released="selected",
        internal=secret_count_fields(tuned.k_info, tuned.best, kc.ps.max_trials) | {"subsample_size": tuned.subsample_size},
    )


def check(config: dict) -> None:
    accountant, space, selection, targets = context(config)
    kc = KoskelaConfig.from_config(config)
    if selection.rule == "public_validation":
        raise ConfigError(f"selection.rule=public_validation is not supported by {METHOD}")
    check_iid_candidates(space, kc.ps.sampling, METHOD)
    for target in targets:
        mu_s = score_mu(trial_selection(kc.ps, selection, target))
        # feasibility only (a full plan takes ~1 s per target): noise-only trials must fit the budget
        trunc = truncation_delta(kc.ps, target, accountant.delta, METHOD)
        spent = planned_ledger(kc, 1e-9, mu_s, trunc).total(accountant.delta)["eps"]
        if spent > target:
            plan(kc, trial_selection(kc.ps, selection, target), target, accountant)  # raises with the full message

