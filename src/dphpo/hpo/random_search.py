"""Random search (seed 000 §2.1; docs/methods.md §4) and the machinery of composed trials.

`random_search` is the paper's definition: draw (η, T) at random from the search space and do a
single run with the entire privacy budget — no selection, nothing else released.
`random_search_k` draws k candidates, trains each at μ_run and releases the best one chosen by the
honest selection rule; k·μ_run² plus the k selection releases compose to the target:
μ_run = √((μ(ε)² − k·μ_sel²)/k), planned with `plan_final_mu` and refused before training when
the selection releases alone exceed the budget.

`run_composed` (all candidates trained at one μ, honest selection, the best released) is shared by
`random_search_k`, `grid_accounted` and reused by OSO-DPSGD's planning.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from dphpo.errors import ConfigError
from dphpo.hpo.common import MethodResult, released_model, result_metrics, trial_metrics
from dphpo.hpo.selection import SelectionRule, select_best
from dphpo.hpo.space import SearchSpace
from dphpo.privacy.randomness import NoiseScope
from dphpo.privacy.accountant import GdpAccountant, check_accounting
from dphpo.privacy.gdp import eps_from_mu, mu_from_eps
from dphpo.privacy.ledger import Ledger, plan_final_mu
from dphpo.train.protocol import PrivateTrainer

METHOD = "random_search"
METHOD_K = "random_search_k"
# Every planned μ is shaved by this relative margin so that floating-point error can never push a
# reported total above its target (as in linear_scaling).
BUDGET_SAFETY = 1e-9
SAMPLINGS = ("grid", "r")


def baselines_section(config: dict, name: str | None = None) -> dict:
    """`baselines` (or `baselines.<name>`) of a config; {} when absent."""
    section = config.get("baselines", {}) or {}
    return section if name is None else (section.get(name, {}) or {})


def candidate_sampling(config: dict) -> str:
    sampling = baselines_section(config).get("sampling", "grid")
    if sampling not in SAMPLINGS:
        raise ConfigError(f"baselines.sampling: expected one of {SAMPLINGS}, got {sampling!r}")
    return sampling


def targets_of(config: dict) -> list[float]:
    return [float(e) for e in config["privacy"]["target_eps"]]


def gdp_accountant(config: dict, trainer: PrivateTrainer | None = None) -> GdpAccountant:
    """The exact-GDP run accountant every baseline plans with (the trainer's, else the config's).

    The baselines plan every run as exactly μ-GDP (their RDP bounds too start from that), so they
    refuse a trainer whose accountant is not exact GDP — the ablations of the linear scaling rule
    (minibatch runs, RDP accountant) and PRV-accounted trainers. Without a trainer (checks before any
    job) the accountant is read off the config.
    """
    if trainer is None:
        p, t = config.get("privacy", {}), config.get("training", {}) or {}
        name, adjacency, batch_size = p.get("accountant", "gdp"), p.get("adjacency", "add_remove"), t.get("batch_size")
        check_accounting(name, adjacency, batch_size)
        if name == "gdp" and batch_size is None:
            return GdpAccountant(float(p.get("delta", 1e-5)), adjacency)
    elif trainer.accountant.name == "gdp":
        return trainer.accountant
    raise ConfigError(
        "baselines: every baseline trains full batch with exact GDP accounting; training.batch_size and "
        "privacy.accountant=rdp/prv are ablations of the linear scaling rule only (unset them for the baselines)"
    )


def context(
    config: dict, trainer: PrivateTrainer | None = None, any_accountant: bool = False
) -> tuple[GdpAccountant, SearchSpace, SelectionRule, list[float]]:
    """The parts of a config every baseline shares: run accountant (`gdp_accountant`; with
    `any_accountant`, the trainer's own: methods of single full-budget runs), search space, selection, targets."""
    return (
        trainer.accountant if any_accountant and trainer is not None else gdp_accountant(config, trainer),
        SearchSpace.from_config(config["search_space"]),
        SelectionRule.from_config(config.get("selection", {})),
        targets_of(config),
    )


def draw_candidates(space: SearchSpace, rng: np.random.Generator, n: int, sampling: str = "grid") -> list[tuple[float, int]]:
    """n random (η, T) from the search space.

    grid: η uniform over the η grid and T uniform over the T grid, independently (seed 000: random
    search "draws hyperparameters from the search space randomly"); r: r = η·T sampled as the linear
    scaling rule's trials are (space.r_sampling) and decomposed by the same rule.
    """
    if sampling == "grid":
        etas = rng.choice(space.eta_grid, size=n)
        steps = rng.choice(np.asarray(space.steps), size=n)
        return [(float(e), int(t)) for e, t in zip(etas, steps)]
    if sampling == "r":
        out = []
        for r in space.sample_r(rng, n):
            dec = space.decompose(r)
            out.append((dec.eta, dec.steps))
        return out
    raise ConfigError(f"baselines.sampling: expected one of {SAMPLINGS}, got {sampling!r}")


def plan_run_mu(target_eps: float, delta: float, n_runs: int, selection: SelectionRule, what: str) -> float:
    """μ of each of n_runs equal runs such that the runs plus their selection releases compose to the target.

    One run (n_runs = 1) needs no selection: it gets the whole budget. Raises InfeasibleBudgetError
    (naming the plan) when the selection releases alone spend the target.
    """
    if n_runs < 1:
        raise ValueError(f"n_runs must be >= 1, got {n_runs}")
    spent = Ledger()
    if n_runs > 1 and selection.mu_per_release > 0:
        spent.add(f"{what}: selection releases", mu=selection.mu_per_release, count=n_runs)
    mu_all = plan_final_mu(target_eps, delta, spent, what=f"{n_runs} run(s) of {what} at target eps={target_eps:g}")
    return mu_all * (1 - BUDGET_SAFETY) / math.sqrt(n_runs)


@dataclass(frozen=True)
class RandomSearchConfig:
    k: int = 3
    sampling: str = "grid"

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ConfigError(f"baselines.random_search_k.k: must be >= 1, got {self.k}")
        if self.sampling not in SAMPLINGS:
            raise ConfigError(f"baselines.sampling: expected one of {SAMPLINGS}, got {self.sampling!r}")

    @classmethod
    def from_config(cls, config: dict) -> "RandomSearchConfig":
        return cls(k=int(baselines_section(config, METHOD_K).get("k", 3)), sampling=candidate_sampling(config))


def run_composed(
    method: str,
    trainer: PrivateTrainer,
    selection: SelectionRule,
    candidates: dict[float, Sequence[tuple[float, int]]],
    noise: NoiseScope,
    *,
    search_info: dict,
    progress: bool = False,
    notes: Sequence[str] = (),
    mechanism: str = "full-batch DP-GD run",
) -> list[MethodResult]:
    """Train every target's candidates at one planned μ (all targets in one batch) and release the best.

    Each target's ledger: one entry per trial plus the selection releases (when more than one
    candidate). The released model is the selected trial itself: nothing is retrained. An outcome
    with an `extras` list adds its dicts to the trial records.
    """
    single = all(len(c) == 1 for c in candidates.values())
    # One run at the full budget needs no composition plan: any run accountant calibrates it (the
    # PRV-accounted fine-tuning trainers); composed candidates are planned in exact GDP.
    accountant = trainer.accountant if single and trainer.accountant.name != "gdp" else gdp_accountant({}, trainer)
    delta = accountant.delta
    plans = []
    eta, steps, sigma, seeds = [], [], [], []
    for target, cands in candidates.items():
        mu = plan_run_mu(target, delta, len(cands), selection, method)
        trials = []
        for i, (e, t) in enumerate(cands):
            trial = {
                "eta": float(e),
                "steps": int(t),
                "r": float(e) * int(t),
                "sigma": accountant.sigma_for_mu(mu, int(t)) if accountant.name == "gdp" else accountant.sigma_for_eps(target, int(t)),
                "mu": mu if accountant.name == "gdp" else None,
                "standalone_eps": eps_from_mu(mu, delta),
            }
            if accountant.name != "gdp":
                trial["standalone_eps"] = accountant.standalone_eps(trial["sigma"], int(t))
            trials.append(trial)
            eta.append(trial["eta"])
            steps.append(trial["steps"])
            sigma.append(trial["sigma"])
            seeds.append(noise.seed(method, f"{target:.10g}", i))
        plans.append((float(target), mu, trials))
    outcome = trainer.run_trials(eta, steps, sigma, seeds, progress=progress, desc=method)
    extras = outcome.extras

    results, offset = [], 0
    for target, mu, trials in plans:
        idx = np.arange(offset, offset + len(trials))
        offset += len(trials)
        ledger = Ledger()
        for i, trial in enumerate(trials):
            trial.update(trial_metrics(trainer, outcome, idx[i]))  # test metric: recorded, never selected on
            if extras is not None:
                trial.update(extras[idx[i]])
            details = {k: trial[k] for k in ("eta", "steps", "sigma", "standalone_eps")}
            if accountant.name == "gdp":
                ledger.add(f"trial {i}: {mechanism}", mu=mu, **details)
            else:
                ledger.append(accountant.entry(f"trial {i}: {mechanism}", trial["sigma"], trial["steps"], details))
        if len(trials) > 1:
            best, scores = select_best(
                selection,
                train_scores=outcome.train_score_sums[idx],
                test_scores=outcome.test_score_sums[idx],
                rng=noise.rng(method, "selection", f"{target:.10g}"),
                ledger=ledger,
                what="selection",
            )
            for trial, score in zip(trials, scores):
                trial["score"] = float(score)
            selection_info = selection.describe()
        else:
            best = 0
            selection_info = {"rule": "none", "private": True, "label": "single run, nothing selected"}
        chosen = trials[best]
        results.append(
            MethodResult(
                method=method,
                target_eps=target,
                delta=delta,
                **released_model(trainer, outcome, idx[best]),
                **result_metrics(trainer, outcome, idx[best]),
                released={k: chosen[k] for k in ("eta", "steps", "r", "sigma", "mu", "standalone_eps")}
                | {"trial": best},
                ledger=ledger,
                selection=selection_info,
                trials=trials,
                search=dict(search_info) | {"n_trials": len(trials)},
                notes=list(notes),
            )
        )
    return results


def run(trainer: PrivateTrainer, config: dict, noise: NoiseScope, progress: bool = False) -> list[MethodResult]:
    """Random search, the paper's definition: one random (η, T), one run at the full budget."""
    _, space, selection, targets = context(config, trainer, any_accountant=True)
    rsc = RandomSearchConfig.from_config(config)
    candidates = {t: draw_candidates(space, noise.rng(METHOD, f"{t:.10g}"), 1, rsc.sampling) for t in targets}
    return run_composed(
        METHOD,
        trainer,
        selection,
        candidates,
        noise,
        search_info={"definition": "seed 000 §2.1: one run at the full budget with (eta, T) drawn at random", "sampling": rsc.sampling},
        progress=progress,
    )


def run_k(trainer: PrivateTrainer, config: dict, noise: NoiseScope, progress: bool = False) -> list[MethodResult]:
    """k random candidates composed, the best released by the honest selection rule."""
    _, space, selection, targets = context(config, trainer)
    rsc = RandomSearchConfig.from_config(config)
    candidates = {t: draw_candidates(space, noise.rng(METHOD_K, f"{t:.10g}"), rsc.k, rsc.sampling) for t in targets}
    return run_composed(
        METHOD_K,
        trainer,
        selection,
        candidates,
        noise,
        search_info={
            "definition": "k random candidates, each at mu_run = sqrt((mu(eps)^2 - k mu_sel^2)/k), best released",
            "k": rsc.k,
            "sampling": rsc.sampling,
        },
        progress=progress,
    )


def check(config: dict) -> None:
    """Refuse an infeasible random_search_k plan before any job runs."""
    accountant, _, selection, targets = context(config)
    rsc = RandomSearchConfig.from_config(config)
    for target in targets:
        plan_run_mu(target, accountant.delta, rsc.k, selection, METHOD_K)


def full_budget_mu(target: float, delta: float) -> float:
    return mu_from_eps(target, delta) * (1 - BUDGET_SAFETY)
