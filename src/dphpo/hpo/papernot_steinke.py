"""Papernot & Steinke (ICLR 2022): a random number K of trials, only the best released (docs/methods.md §4).

K is drawn from a truncated negative binomial (shape η > −1: η = 0 logarithmic, η = 1 geometric)
or a Poisson distribution with mean E[K]; each trial draws its (η, T) at random from the search
space and is one run of the *base mechanism*: train at μ_train and release the trial's noisy
training-accuracy count (Gaussian, std σ_s, μ_s = 1/σ_s). The trial with the best noisy score is
released with that score; nothing is retrained. The base mechanism is μ_base-GDP with
μ_base² = μ_train² + μ_s², and the tuned mechanism's RDP curve (P&S Thm. 2 / Thm. 6,
`dphpo.privacy.tuning.ps_gdp_rdp`) is the ledger's one entry. μ_base is calibrated
(`calibrate_ps_mu`) so that the tuned total hits the target ε.

Capping K (compute guard). The theorems hold for the exact distribution of K; running min(K, m)
trials is a different mechanism that no P&S theorem covers. We draw K from the exact distribution
and cap it at `max_trials` = m only when the draw exceeds m (logged, recorded in the internal log:
whether K was capped is a fact about the secret K, so the release does not say).
Coupling the capped mechanism M' with the uncapped M through the same draw of K (which does not
depend on the data), their outputs differ only on the event {K > m} of probability p, so for every
set S: P[M'(x) ∈ S] ≤ P[M(x) ∈ S] + p ≤ e^ε P[M(x') ∈ S] + δ' + p ≤ e^ε P[M'(x') ∈ S] + δ' + (1 + e^ε) p.
M' is therefore (ε, δ' + δ_cap)-DP with δ_cap = (1 + e^ε) p. We set δ_cap with ε = the target
(an upper bound on the released ε), require δ_cap ≤ `truncation_delta_fraction`·δ (else the plan is
refused: raise max_trials), and calibrate the RDP part at δ' = δ − δ_cap. `CappedTrialsLedger`
reports exactly that: ε converted at δ − δ_cap, total δ = δ. The same argument covers a capped P&S
tuning composed with further releases (Koskela–Kulkarni), since the coupling is on the whole run.

A bundle pays the cap at its own ε. Publishing n capped releases together differs from the uncapped
ones with probability at most Σp, so the bundle's composed (ε_b, δ_b) gains (1 + e^{ε_b})·Σp
(`dphpo.release.DatasetStatement.composed`). A cap sized for one release at its target (P[K > 200] =
6e-36 for E[K] = 3) leaves a bundle of ε_b > 80 with δ = 1. `max_trials: auto` (the default) therefore
caps where P[K > cap] ≤ AUTO_CAP_TAIL = 1e-250: a bundle of up to 10^6 capped releases then pays under
1e-10 of δ for any ε_b ≤ 530, and the cap still bounds the compute of a run (geometric E[K] = 3: 1,420
trials; E[K] = 10: 5,460), which a draw reaches with probability 1e-250.
"""

from __future__ import annotations

import functools
import logging
import math
from dataclasses import dataclass

import numpy as np

from dphpo.errors import ConfigError, InfeasibleBudgetError
from dphpo.hpo.candidates import baselines_section, candidate_sampling, check_iid_candidates, context, draw_candidates
from dphpo.hpo.common import MethodResult, released_model, result_metrics, trial_metrics
from dphpo.hpo.selection import SelectionRule, best_released
from dphpo.hpo.trial_queue import TrialQueue
from dphpo.privacy.randomness import NoiseScope
from dphpo.privacy.tuning import (
    POISSON_DELTA_BOUNDS,
    CappedTrialsLedger,
    calibrate_ps_mu,
    ps_ledger_entry,
    resolve_distribution,
    tnb_gamma,
)
from dphpo.train.protocol import PrivateTrainer

METHOD = "papernot_steinke"
log = logging.getLogger(__name__)
# The smallest per-step term of the pmf recursion that still counts towards a tail sum.
_TAIL_TOL = 1e-300
#: The largest Poisson mean whose pmf is summed by the recursion p_k = p_{k-1}·λ/k from e^{-λ}: up to it
#: e^{-λ} is a normal float (e^{-700} ≈ 1e-304; doubles stay normal down to 2.2e-308), so no term loses bits.
_POISSON_RECURSION_MAX = 700.0
#: `max_trials: auto` caps K where P[K > cap] ≤ this (module docstring: a bundle pays the cap at its ε).
AUTO_CAP_TAIL = 1e-250


@dataclass(frozen=True)
class TrialCountDistribution:
    """The distribution of the number of trials K (P&S Definition 1 and §3.3)."""

    distribution: str = "geometric"  # logarithmic (η=0), geometric (η=1), tnb (η given), poisson
    mean_trials: float = 3.0
    eta: float | None = None

    def __post_init__(self) -> None:
        try:
            resolve_distribution(self.distribution, self.eta)
        except ValueError as err:
            raise ConfigError(f"distribution of K: {err}") from None
        if not (self.mean_trials >= 1.0 and math.isfinite(self.mean_trials)):
            raise ConfigError(f"mean_trials (E[K]) must be a finite number >= 1, got {self.mean_trials}")

    @property
    def kind(self) -> str:
        return resolve_distribution(self.distribution, self.eta)[0]

    @property
    def shape(self) -> float:
        """η of the TNB (∞ for Poisson), as dp_accounting's RepeatAndSelectDpEvent names it."""
        return resolve_distribution(self.distribution, self.eta)[1]

    def pmf_terms(self):
        """Yield (k, P[K = k]) for k = k_min, k_min+1, ... (k_min = 1 for the TNB, 0 for Poisson)."""
        if self.kind == "poisson":
            lam = self.mean_trials
            if lam <= _POISSON_RECURSION_MAX:
                p, k = math.exp(-lam), 0
                while True:
                    yield k, p
                    k += 1
                    p *= lam / k
            # past it e^{-E[K]} is subnormal (few significant bits: every term off by one factor, the law no
            # longer Poisson; at E[K] = 744 the terms summed to 1.29) or 0: each term from its own logarithm
            k, log_lam = 0, math.log(lam)
            while True:
                yield k, math.exp(k * log_lam - lam - math.lgamma(k + 1))
                k += 1
        eta = self.shape
        gamma = tnb_gamma(self.mean_trials, eta)
        if gamma >= 1.0:  # E[K] = 1: K = 1 surely (and nothing after it: a tail sum ends)
            yield 1, 1.0
            return
        one_minus = 1.0 - gamma
        if eta == 0.0:
            p = one_minus / math.log(1.0 / gamma)
        else:
            # (1−γ)·η/(γ^{−η} − 1) = (1−γ)·η / expm1(η·log(1/γ))
            p = one_minus * eta / math.expm1(eta * math.log(1.0 / gamma))
        k = 1
        while True:
            yield k, p
            p *= one_minus * (k + eta) / (k + 1)
            k += 1

    def tail(self, m: int) -> float:
        """P[K > m], summed term by term (no 1 − CDF cancellation)."""
        total, previous = 0.0, math.inf
        for k, p in self.pmf_terms():
            rising, previous = p > previous, p
            if k <= m:
                continue
            total += p
            # stop on a small term only past the mode: below it (a cap under a large E[K]) the terms still grow
            if not rising and (p < _TAIL_TOL or (k > m + 10 and p < total * 1e-17)):
                return min(1.0, total)
            if k > m + 10_000_000:
                raise ValueError("tail sum did not converge")
        return total  # a distribution with finitely many values (E[K] = 1)

    @functools.cache  # noqa: B019 (frozen and hashable: one bisection per distribution, not per config read)
    def auto_cap(self) -> int:
        """The smallest m with P[K > m] ≤ AUTO_CAP_TAIL (`max_trials: auto`), by bisection on the
        nonincreasing tail."""
        lo, hi = 0, max(2, math.ceil(self.mean_trials))  # P[K > lo] > AUTO_CAP_TAIL ≥ P[K > hi] once found
        while self.tail(hi) > AUTO_CAP_TAIL:
            lo, hi = hi, 2 * hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if self.tail(mid) > AUTO_CAP_TAIL else (lo, mid)
        return max(hi, 1)

    def sample(self, rng: np.random.Generator, cap: int) -> tuple[int, bool]:
        """(min(K, cap), whether K exceeded cap) for one exact draw of K by the inverse CDF."""
        u = rng.random()
        cum = 0.0
        for k, p in self.pmf_terms():
            cum += p
            if cum >= u:
                return (k, False) if k <= cap else (cap, True)
            if k >= cap:
                return cap, True


@dataclass(frozen=True)
class PSConfig:
    k_dist: TrialCountDistribution = TrialCountDistribution()
    max_trials: int | None = None  # None (`auto`): k_dist.auto_cap()
    poisson_delta: str = "gdp"
    truncation_delta_fraction: float = 0.01
    sampling: str = "grid"

    def __post_init__(self) -> None:
        if self.max_trials is None:
            object.__setattr__(self, "max_trials", self.k_dist.auto_cap())
        if self.max_trials < 1:
            raise ConfigError(f"max_trials: must be >= 1, got {self.max_trials}")
        if not 0.0 < self.truncation_delta_fraction < 1.0:
            raise ConfigError(f"truncation_delta_fraction: must lie in (0, 1), got {self.truncation_delta_fraction}")
        if self.poisson_delta not in POISSON_DELTA_BOUNDS:
            raise ConfigError(f"poisson_delta: expected one of {', '.join(POISSON_DELTA_BOUNDS)}, got {self.poisson_delta!r}")

    @classmethod
    def from_section(cls, section: dict, sampling: str, where: str) -> PSConfig:
        try:
            return cls(
                k_dist=TrialCountDistribution(
                    distribution=section.get("distribution", "geometric"),
                    mean_trials=float(section.get("mean_trials", 3.0)),
                    eta=None if section.get("eta") is None else float(section["eta"]),
                ),
                max_trials=None if section.get("max_trials", "auto") == "auto" else int(section["max_trials"]),
                poisson_delta=section.get("poisson_delta", "gdp"),
                truncation_delta_fraction=float(section.get("truncation_delta_fraction", 0.01)),
                sampling=sampling,
            )
        except ConfigError as err:
            raise ConfigError(f"{where}.{err}") from None

    @classmethod
    def from_config(cls, config: dict) -> PSConfig:
        return cls.from_section(baselines_section(config, METHOD), candidate_sampling(config), f"baselines.{METHOD}")

    def describe(self) -> dict:
        return {
            "distribution": self.k_dist.distribution,
            "eta": self.k_dist.shape,
            "mean_trials": self.k_dist.mean_trials,
            "max_trials": self.max_trials,
            "poisson_delta": self.poisson_delta,
            "sampling": self.sampling,
        }


def truncation_delta(psc: PSConfig, target_eps: float, delta: float, where: str) -> dict:
    """δ_cap = (1 + e^ε) P[K > max_trials] (module docstring); refuses a cap that costs too much δ."""
    p_tail = psc.k_dist.tail(psc.max_trials)
    delta_cap = (1.0 + math.exp(target_eps)) * p_tail
    if delta_cap > psc.truncation_delta_fraction * delta:
        raise InfeasibleBudgetError(
            f"infeasible {where} plan at target eps={target_eps:g}: capping K at max_trials={psc.max_trials} "
            f"(P[K > max_trials] = {p_tail:.3g}) costs delta_cap = (1 + e^eps)·P = {delta_cap:.3g}, more than "
            f"truncation_delta_fraction={psc.truncation_delta_fraction:g} of delta={delta:g}; raise baselines.{where}.max_trials "
            "(or set it to auto)."
        )
    return {
        "max_trials": psc.max_trials,
        "p_exceed": p_tail,
        "delta_cap": delta_cap,
        "argument": "TV coupling of min(K, max_trials) with K: (eps, delta' + (1 + e^eps) P[K > max_trials])-DP",
    }


def fitting_max_trials(psc: PSConfig, target_eps: float, delta: float) -> int:
    """The smallest cap, at least `psc.max_trials`, whose truncation δ_cap = (1 + e^ε)·P[K > cap] fits in
    truncation_delta_fraction·δ at `target_eps` (`dphpo init` sizes the copied cap for its own δ with it)."""
    allowed = psc.truncation_delta_fraction * delta / (1.0 + math.exp(target_eps))
    cap = psc.max_trials
    while psc.k_dist.tail(cap) > allowed:
        cap += 1
    return cap


def trial_selection(psc: PSConfig, selection: SelectionRule, target_eps: float) -> SelectionRule:
    """The selection of one target's trials (`selection.noise_std: auto`: planned for the mean number
    of trials, each releasing one score)."""
    return selection.at(target_eps, math.ceil(psc.k_dist.mean_trials))


def score_mu(selection: SelectionRule) -> float:
    """μ of the score each trial releases (0 for a free or a non-private rule)."""
    return selection.mu_per_release


def split_base_mu(mu_base: float, mu_score: float, where: str, target_eps: float) -> float:
    """μ_train of a base run whose training and score release compose to μ_base."""
    if mu_base <= mu_score:
        raise InfeasibleBudgetError(
            f"infeasible {where} plan at target eps={target_eps:g}: each trial's score release alone "
            f"(mu={mu_score:.4g}) uses the whole per-trial budget mu_base={mu_base:.4g}; raise selection.noise_std"
        )
    return math.sqrt(mu_base**2 - mu_score**2)


def plan(psc: PSConfig, selection: SelectionRule, target_eps: float, delta: float) -> dict:
    """Per-trial budgets for one target: μ_base calibrated at δ − δ_cap, split into training and score."""
    trunc = truncation_delta(psc, target_eps, delta, METHOD)
    d = psc.k_dist
    try:
        mu_base = calibrate_ps_mu(
            target_eps, delta - trunc["delta_cap"], d.distribution, d.mean_trials, d.eta, poisson_delta=psc.poisson_delta
        )
    except InfeasibleBudgetError as err:  # the library names no config; here the keys are known
        raise InfeasibleBudgetError(f"{err} (baselines.{METHOD}.mean_trials, privacy.target_eps)") from None
    mu_s = score_mu(selection)
    return {"mu_base": mu_base, "mu_score": mu_s, "mu_train": split_base_mu(mu_base, mu_s, METHOD, target_eps), "truncation": trunc}


def noisy_scores(selection: SelectionRule, train_scores: np.ndarray, test_scores: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Each trial's released score from its score sums (its cost is inside μ_base, so nothing is charged here)."""
    train_scores = np.asarray(train_scores, dtype=np.float64)
    if selection.rule == "noisy_train_accuracy":
        return train_scores + rng.normal(0.0, selection.noise_std, size=train_scores.shape)
    if selection.rule == "test":
        return np.asarray(test_scores, dtype=np.float64)
    if selection.rule == "train_nonprivate":
        return train_scores
    raise ConfigError(f"selection.rule={selection.rule!r} is not supported by {METHOD} (no public validation split)")


def draw_trials(psc: PSConfig, space, noise: NoiseScope, target: float, method: str) -> tuple[list[tuple[float, int]], dict]:
    """K (capped only if the exact draw exceeds max_trials) and K random candidates, independent of K."""
    check_iid_candidates(space, psc.sampling, method)
    k, capped = psc.k_dist.sample(noise.rng(method, "K", f"{target:.10g}"), psc.max_trials)
    if capped:
        log.warning(
            "%s: drew K > max_trials=%d at target eps=%g (probability %.3g); ran %d trials, "
            "accounted by delta_cap (module docstring)",
            method, psc.max_trials, target, psc.k_dist.tail(psc.max_trials), psc.max_trials,
        )
    cands = draw_candidates(space, noise.rng(method, "candidates", f"{target:.10g}"), k, psc.sampling) if k else []
    return cands, {"K": k, "capped": capped}


def secret_count_fields(k_info: dict, selected: int | None, max_trials: int) -> dict:
    """What a method with a secret number of trials keeps in its internal log, never in its release
    (docs/privacy.md §3): K, whether it was capped (with the note saying so) and the index of the
    selected trial (K >= index + 1). Their keys are INTERNAL_KEYS, so `dphpo verify` fails a release
    that holds them."""
    notes = [f"K exceeded max_trials={max_trials}: capped, accounted by delta_cap"] if k_info["capped"] else []
    return {"K": k_info["K"], "capped": k_info["capped"], "selected_trial": selected, "notes": notes}


def run(trainer: PrivateTrainer, config: dict, noise: NoiseScope, progress: bool = False) -> list[MethodResult]:
    accountant, space, selection, targets = context(config, trainer)
    psc = PSConfig.from_config(config)
    delta = accountant.delta
    queue = TrialQueue()
    plans = [_plan_target(psc, trial_selection(psc, selection, target), accountant, space, noise, target, queue) for target in targets]
    outcome = queue.run(trainer, progress=progress, desc=METHOD)

    results, offset = [], 0
    for target, p, k_info, trials in plans:
        idx = np.arange(offset, offset + len(trials))
        offset += len(trials)
        ledger = _tuning_ledger(psc, p, k_info)
        rule = trial_selection(psc, selection, target)
        if trials:
            best, model, released, notes = _release_best(trainer, rule, outcome, idx, trials, noise, target)
        else:
            best, model, released, notes = _release_nothing(trainer)
        results.append(
            MethodResult(
                method=METHOD,
                target_eps=target,
                delta=delta,
                **model,
                released=released,
                ledger=ledger,
                selection=rule.describe() | {"released_score": True, "cost": "inside each trial's mu_base"},
                trials=trials,
                search=psc.describe()
                | k_info
                | {"mu_base": p["mu_base"], "mu_train": p["mu_train"], "mu_score": p["mu_score"], "retrained": False},
                notes=notes,
                trials_released="selected",
                internal=secret_count_fields(k_info, best, psc.max_trials),
            )
        )
    return results


def _plan_target(psc: PSConfig, selection: SelectionRule, accountant, space, noise: NoiseScope, target: float,
                 queue: TrialQueue) -> tuple[float, dict, dict, list[dict]]:
    """(target, its plan, K, the trial records): K random trials at μ_train, queued for the batch."""
    p = plan(psc, selection, target, accountant.delta)
    cands, k_info = draw_trials(psc, space, noise, target, METHOD)
    trials = []
    for i, (e, t) in enumerate(cands):
        trial = {
            "eta": e,
            "steps": t,
            "r": e * t,
            "sigma": accountant.sigma_for_mu(p["mu_train"], t),
            "mu": p["mu_train"],
        }
        trials.append(trial)
        queue.add(e, t, trial["sigma"], noise.seed(METHOD, f"{target:.10g}", i))
    return float(target), p, k_info, trials


def _tuning_ledger(psc: PSConfig, p: dict, k_info: dict) -> CappedTrialsLedger:
    """The tuned mechanism's one RDP entry (P&S Thm. 2/6), capped K accounted by δ_cap."""
    d = psc.k_dist
    entry = ps_ledger_entry(
        p["mu_base"],
        d.distribution,
        d.mean_trials,
        d.eta,
        poisson_delta=psc.poisson_delta,
        # K is secret (the theorem's randomness): in the entry's details, which only the internal log keeps
        what="Papernot-Steinke tuning: best of K random trials (train + noisy score each)",
        mu_train=p["mu_train"],
        mu_score=p["mu_score"],
        K=k_info["K"],
        capped=k_info["capped"],
    )
    return CappedTrialsLedger([entry], p["truncation"])


def _release_best(trainer: PrivateTrainer, selection: SelectionRule, outcome, idx: np.ndarray, trials: list[dict],
                  noise: NoiseScope, target: float) -> tuple[int, dict, dict, list[str]]:
    """(best trial, its model fields, what is released, notes): the trial with the best noisy score."""
    for i, trial in enumerate(trials):
        trial.update(trial_metrics(trainer, outcome, idx[i]))
    scores = noisy_scores(
        selection, outcome.train_score_sums[idx], outcome.test_score_sums[idx], noise.rng(METHOD, "score", f"{target:.10g}")
    )
    for trial, score in zip(trials, scores):
        trial["score"] = float(score)
    best = best_released(scores)
    chosen = trials[best]
    model = released_model(trainer, outcome, idx[best]) | result_metrics(trainer, outcome, idx[best])
    # the best trial's output only: not its index (K >= index + 1 would reveal the secret K)
    released = {k: chosen[k] for k in ("eta", "steps", "r", "sigma", "mu")} | {"score": chosen["score"]}
    if selection.rule == "noisy_train_accuracy":  # a noisy count over the declared public size (test/exact rules: not noisy)
        released["noisy_train_accuracy"] = chosen["score"] / trainer.n_public
    return best, model, released, []


def _release_nothing(trainer: PrivateTrainer) -> tuple[None, dict, dict, list[str]]:
    """Poisson K = 0: the mechanism outputs ⊥, reported as the untrained model (zero steps)."""
    untrained = trainer.run_trials([0.0], [0], [1.0], [0], progress=False, desc=f"{METHOD} (K = 0)")
    model = released_model(trainer, untrained, 0) | result_metrics(trainer, untrained, 0)
    notes = ["K = 0 was drawn: nothing is released; the reported model is the untrained one (zero head: predicts class 0)"]
    return None, model, {"output": "none (K = 0)"}, notes


def check(config: dict) -> None:
    accountant, space, selection, targets = context(config)
    psc = PSConfig.from_config(config)
    if selection.rule == "public_validation":
        raise ConfigError(f"selection.rule=public_validation is not supported by {METHOD}")
    check_iid_candidates(space, psc.sampling, METHOD)
    for target in targets:
        plan(psc, trial_selection(psc, selection, target), target, accountant.delta)
