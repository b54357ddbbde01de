"""What the baselines share: their config, their run accountant, candidate draws, and composed candidates.

`run_composed` trains every candidate of a target at one planned μ (the candidates and their
selection releases compose to the target, `BudgetPlanner.runs_mu`), selects honestly and releases the
best (Panda et al. §2.1; docs/methods.md §4). It is random search's k-candidate version, the accounted
grid search and OSO-DPSGD's candidate search; one candidate at the full budget is random search itself.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dphpo.errors import ConfigError
from dphpo.hpo.common import MethodResult, released_model, result_metrics, trial_metrics
from dphpo.hpo.registry import SUPPORTED
from dphpo.hpo.selection import SelectionRule, select_best, selection_rule
from dphpo.hpo.space import IID_R_SAMPLINGS, SearchSpace
from dphpo.hpo.trial_queue import TrialQueue
from dphpo.privacy.accountant import PlanningAccountant, accountant_from_config
from dphpo.privacy.ledger import Ledger
from dphpo.privacy.randomness import NoiseScope
from dphpo.train.protocol import PrivateTrainer

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


def gdp_accountant(config: dict, trainer: PrivateTrainer | None = None) -> PlanningAccountant:
    """The exact-GDP run accountant every baseline plans with (the trainer's, else the config's).

    The baselines plan every run as exactly μ-GDP (their RDP bounds too start from that), so they
    refuse a trainer whose accountant is not exact GDP — the ablations of the linear scaling rule
    (minibatch runs, RDP accountant) and PRV-accounted trainers. Without a trainer (checks before any
    job) the accountant is read off the config.
    """
    if trainer is not None:
        accountant = trainer.accountant
    else:
        batch_size = (config.get("training", {}) or {}).get("batch_size")
        # a minibatch config is refused whatever N is: any size (here B itself) gives its accountant
        accountant = accountant_from_config(config, None if batch_size is None else int(batch_size))
    if accountant.exact_gdp:
        return accountant
    raise ConfigError(
        "baselines: every baseline trains full batch with exact GDP accounting; training.batch_size and "
        "privacy.accountant=rdp/prv are ablations of the linear scaling rule only (unset them for the baselines)"
    )


def context(
    config: dict, trainer: PrivateTrainer | None = None, method: str | None = None
) -> tuple[PlanningAccountant, SearchSpace, SelectionRule, list[float]]:
    """The parts of a config every baseline shares: run accountant (the trainer's own where `method`
    accepts any accountant in `hpo.registry.SUPPORTED` — methods of single full-budget runs —, else
    `gdp_accountant`), search space, selection, targets."""
    any_accountant = method is not None and SUPPORTED[method].accountants != ("gdp",)
    return (
        trainer.accountant if any_accountant and trainer is not None else gdp_accountant(config, trainer),
        SearchSpace.from_config(config["search_space"]),
        selection_rule(config, None if trainer is None else trainer.n_public),
        targets_of(config),
    )


def check_iid_candidates(space: SearchSpace, sampling: str, method: str) -> None:
    """Refuse, for a method whose number of trials K is secret (Papernot–Steinke, Koskela–Kulkarni), an r
    sampling that ties trial i's candidate to K (`log_grid`, `stratified_log_uniform`: slice i of K): the
    released best r would then tell K, and the repeated-mechanism theorem needs K independent draws."""
    if sampling == "r" and space.r_sampling not in IID_R_SAMPLINGS:
        raise ConfigError(
            f"search_space.r_sampling: {space.r_sampling} places trial i of K in slice i of K, so {method}'s released "
            f"r would reveal its secret number of trials K; use {' or '.join(IID_R_SAMPLINGS)} (independent draws), "
            "or baselines.sampling: grid"
        )


def draw_candidates(space: SearchSpace, rng: np.random.Generator, n: int, sampling: str = "grid") -> list[tuple[float, int]]:
    """n random (η, T) from the search space.

    grid: η uniform over the η grid and T uniform over the T grid, independently (Panda et al.: random
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
    mechanism: str | None = None,
) -> list[MethodResult]:
    """Train every target's candidates at one planned μ (all targets in one batch) and release the best
    (`mechanism`: what one trial is, as its ledger entries name it; default: the trainer's).

    Each target's ledger: one entry per trial plus the selection releases (when more than one
    candidate). The released model is the selected trial itself: nothing is retrained. An outcome
    with an `extras` list adds its dicts to the trial records.
    """
    single = all(len(c) == 1 for c in candidates.values())
    # One run at the full budget needs no composition plan: any run accountant calibrates it (the
    # PRV-accounted fine-tuning trainers, to the target ε); composed candidates are planned in exact GDP.
    accountant = trainer.accountant if single else gdp_accountant({}, trainer)
    queue = TrialQueue()
    plans = [
        (float(target), *_plan_candidates(method, accountant, selection, target, cands, noise, queue))
        for target, cands in candidates.items()
    ]
    outcome = queue.run(trainer, progress=progress, desc=method)
    results, offset = [], 0
    for target, mu, trials in plans:
        idx = np.arange(offset, offset + len(trials))
        offset += len(trials)
        ledger = _candidate_ledger(trainer, accountant, outcome, idx, trials, mu, mechanism or trainer.mechanism)
        rule = selection.at(target, len(trials))
        best, selection_info = _select_candidate(rule, outcome, idx, trials, ledger, noise.rng(method, "selection", f"{target:.10g}"))
        chosen = trials[best]
        results.append(
            MethodResult(
                method=method,
                target_eps=target,
                delta=accountant.delta,
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


def _plan_candidates(method: str, accountant: PlanningAccountant, selection: SelectionRule, target: float,
                     cands: Sequence[tuple[float, int]], noise: NoiseScope, queue: TrialQueue) -> tuple[float, list[dict]]:
    """(μ of each run, the trial records) of one target's candidates, queued for the batch."""
    mu = accountant.runs_mu(target, len(cands), selection.at(target, len(cands)).mu_per_release, method)
    trials = []
    for i, (e, t) in enumerate(cands):
        sigma_i = accountant.sigma_at(mu, target, int(t))
        trial = {
            "eta": float(e),
            "steps": int(t),
            "r": float(e) * int(t),
            "sigma": sigma_i,
            "mu": accountant.planned_mu(mu),
            "standalone_eps": accountant.planned_eps(mu, sigma_i, int(t)),
        }
        trials.append(trial)
        queue.add(trial["eta"], trial["steps"], trial["sigma"], noise.seed(method, f"{target:.10g}", i))
    return mu, trials


def _candidate_ledger(trainer: PrivateTrainer, accountant: PlanningAccountant, outcome, idx: np.ndarray, trials: list[dict],
                      mu: float, mechanism: str) -> Ledger:
    """Each trial's metrics (and the outcome's extras) added to its record, and its run to the ledger."""
    ledger = Ledger()
    for i, trial in enumerate(trials):
        trial.update(trial_metrics(trainer, outcome, idx[i]))  # test metric: recorded, never selected on
        if outcome.extras is not None:
            trial.update(outcome.extras[idx[i]])
        details = {k: trial[k] for k in ("eta", "steps", "sigma", "standalone_eps")}
        ledger.append(accountant.planned_entry(f"trial {i}: {mechanism}", mu, trial["sigma"], trial["steps"], details))
    return ledger


def _select_candidate(selection: SelectionRule, outcome, idx: np.ndarray, trials: list[dict], ledger: Ledger,
                      rng: np.random.Generator) -> tuple[int, dict]:
    """(index of the released trial, the selection as recorded): the honest selection, charged to the
    ledger, among several candidates; a single candidate is released as it is."""
    if len(trials) < 2:
        return 0, {"rule": "none", "private": True, "label": "single run, nothing selected"}
    best, scores = select_best(
        selection,
        train_scores=outcome.train_score_sums[idx],
        test_scores=outcome.test_score_sums[idx],
        rng=rng,
        ledger=ledger,
        what="selection",
    )
    for trial, score in zip(trials, scores):
        trial["score"] = float(score)
    return best, selection.describe()
