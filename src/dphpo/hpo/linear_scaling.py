"""The linear scaling rule (Panda et al., Algorithms 2–3; docs/methods.md §2).

Stage k runs n trials, each at a small standalone budget ε_k, with r = η·T sampled from the search
space, and picks the best r_k by an honest selection rule. A polynomial (a line by default) through
the points (ε_k, r_k) is extrapolated to the final run's standalone ε_f, which is what is left of
the total budget after every stage trial and every selection release. One final run at ε_f
releases the model. Stages are separate functions so the workflow can run each as its own job.

Targets whose stage budgets coincide (absolute stage budgets) share one search, paying for it once
(Panda et al., Fig. 2); each target's ledger still holds the whole shared search.

The rule runs on any `PrivateTrainer`: every run's σ comes from the trainer's accountant — stage
trials at their standalone ε_k (`sigma_for_eps`), the final run at what is left of the total
(`sigma_for_remaining`) — and every run enters the ledger as that accountant's entry. With the exact
GDP accountant (the method) all of this is closed form; the ablations of Panda et al. Table 15 that leave
exact GDP (minibatch DP-SGD, RDP accounting) and PRV-accounted trainers get RDP or PRV entries, so no
total of theirs is claimed as GDP. The final run is placed on the fitted line at the standalone ε of
the Gaussian that fills what is left (`gaussian_eps`), known before its T is.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dphpo.errors import ConfigError
from dphpo.hpo.common import MethodResult, released_model, result_metrics, trial_metrics
from dphpo.hpo.linear_scaling_guards import Guards
from dphpo.hpo.linear_scaling_plan import (
    NULL_RELEASE,
    FinalChoice,
    LinearScalingConfig,
    check_budgets,
    choose_final_r,
    fit_points,
    no_signal,
    prior_r,
    safeguarded_section,
    search_key,
    search_selection,
    stage_searches,
)
from dphpo.hpo.selection import SelectionRule, release_scores, selection_rule
from dphpo.hpo.space import Decomposed, SearchSpace
from dphpo.hpo.trial_queue import TrialQueue
from dphpo.privacy.accountant import sample_rate_for_remaining
from dphpo.privacy.ledger import Ledger, LedgerEntry
from dphpo.privacy.randomness import NoiseScope
from dphpo.provenance import config_hash
from dphpo.train.protocol import PrivateTrainer

METHOD = "linear_scaling"
#: the rule with `linear_scaling.safeguard` (the config's, else the recommended one), as its own method
SAFEGUARDED = "linear_scaling_safeguarded"


def run_stage(
    trainer: PrivateTrainer,
    lsc: LinearScalingConfig,
    space: SearchSpace,
    selection: SelectionRule,
    targets: Sequence[float],
    noise: NoiseScope,
    stage: int,
    previous: dict | None = None,
    progress: bool = True,
) -> dict:
    """Stage `stage` (1-based) for every search the targets need, trained as one batch of trials:
    the plan (each search's budget and trials), training, then each search's pick."""
    _check_stage(lsc, stage, previous)
    acc = trainer.accountant
    check_budgets(lsc, selection, targets, acc.delta, trainer.n_parameters)
    _check_accounting(lsc, acc)
    space = lsc.space(space)
    guards = lsc.guards
    prev = {s["key"]: s for s in previous["searches"]} if previous else {}
    searches = stage_searches(lsc, targets, stage)
    skipped = {key: why for key, s in searches.items() if (why := no_signal(lsc, selection, s, trainer.n_parameters))}
    queue = TrialQueue()
    for key, search in searches.items():
        if key in skipped:  # nothing trained, nothing released: the target's budget goes to its final run
            search.update(no_signal=skipped[key], trials=[], ledger=Ledger().to_dict(acc.delta))
            continue
        r_range = guards.stage_range(space, prev[key] if stage > 1 else None)
        _plan_stage_trials(search, acc, space, r_range, lsc.n_trials, noise, stage, queue)
    outcome = queue.run(trainer, progress=progress, desc=f"stage {stage}") if len(queue) else None
    null_test = _NullModelTest(trainer, stage, noise, guards) if lsc.tests_informative else _no_null_test
    for key, search in searches.items():
        if key in skipped:
            continue
        sel = search_selection(lsc, selection, search)
        if sel.planned:  # selection.noise_std: auto: the noise this search's scores were released with
            search["selection"] = sel.describe()
        ledger, pick_score = _pick_in_stage(search, trainer, outcome, queue.indices(key), guards, sel, noise, stage)
        null_test(search, pick_score, ledger, prev.get(key), sel)
        search["ledger"] = ledger.to_dict(acc.delta)
    return {
        "method": METHOD,
        "stage": stage,
        "seed": noise.study_seed,
        "selection": selection.describe(),
        "searches": list(searches.values()),
    }


def _check_stage(lsc: LinearScalingConfig, stage: int, previous: dict | None) -> None:
    if not 1 <= stage <= lsc.n_stages:
        raise ValueError(f"stage must be in 1..{lsc.n_stages}, got {stage}")
    if stage > 1 and previous is None:
        raise ValueError(f"stage {stage} needs the result of stage {stage - 1}")


def _plan_stage_trials(search: dict, acc, space: SearchSpace, r_range: tuple[float, float] | None, n_trials: int,
                       noise: NoiseScope, stage: int, queue: TrialQueue) -> None:
    """A search's trials at its stage budget: r drawn from `r_range` (None: the whole range), each
    trial's σ and ledger entry, queued for the stage's batch."""
    key = search["key"]
    search["mu"] = acc.mu_for_eps(search["eps"])
    rng = noise.rng(METHOD, stage, key)
    if r_range is None:
        r_values = space.sample_r(rng, n_trials)
    else:
        r_values = space.sample_r(rng, n_trials, lo=r_range[0], hi=r_range[1])
    search["trials"], search["entries"] = [], []
    for i, r in enumerate(r_values):
        trial, entry = _stage_trial(acc, space, search["eps"], r, stage, i)
        search["trials"].append(trial)
        search["entries"].append(entry)
        queue.add(trial["eta"], trial["steps"], trial["sigma"], noise.seed(METHOD, stage, key, i), key)


def _stage_trial(acc, space: SearchSpace, eps: float, r: float, stage: int, i: int) -> tuple[dict, LedgerEntry]:
    """Trial `i` of a stage: r decomposed into (η, T), σ for the standalone budget `eps`."""
    dec = space.decompose(r)
    sigma = acc.sigma_for_eps(eps, dec.steps)
    entry = acc.entry(
        f"stage {stage} trial {i}",
        sigma,
        dec.steps,
        {"eta": dec.eta, "steps": dec.steps, "sigma": sigma, "standalone_eps": eps},
    )
    trial = {
        "r_requested": float(r),
        "eta": dec.eta,
        "steps": dec.steps,
        "r": dec.r,
        "sigma": sigma,
        "mu": entry.mu,
    } | acc.trial_accounting()
    return trial, entry


def _pick_in_stage(search: dict, trainer: PrivateTrainer, outcome, idx: np.ndarray, guards: Guards,
                   selection: SelectionRule, noise: NoiseScope, stage: int) -> tuple[Ledger, float]:
    """A search's released scores and its pick (`Guards.pick`): its ledger, selection charged, and the
    pick's released score."""
    ledger = Ledger(search.pop("entries"))
    for i, trial in enumerate(search["trials"]):
        trial.update(trial_metrics(trainer, outcome, idx[i]))  # test metric: recorded, never selected on
    scores = release_scores(
        selection,
        train_scores=outcome.train_score_sums[idx],
        test_scores=outcome.test_score_sums[idx],
        rng=noise.rng(METHOD, "selection", stage, search["key"]),
        ledger=ledger,
        what=f"stage {stage} selection",
    )
    for trial, score in zip(search["trials"], scores):
        trial["score"] = float(score)
    best = guards.pick(scores, [t["r"] for t in search["trials"]], selection)
    search["selected"] = best
    search["selected_r"] = search["trials"][best]["r"]
    return ledger, float(scores[best])


def _no_null_test(search: dict, pick_score: float, ledger: Ledger, before: dict | None, selection: SelectionRule) -> None:
    """The paper's rule: every pick counts, no null model is released."""


class _NullModelTest:
    """`Safeguard.informative_margin`: whether each search's pick beats the null model. The null
    model's score is released at stage 1 (charged to the search's ledger) and carried to later stages."""

    def __init__(self, trainer: PrivateTrainer, stage: int, noise: NoiseScope, guards: Guards):
        self.null_exact = trainer.null_scores() if stage == 1 else None
        self.stage, self.metric, self.noise, self.guards = stage, trainer.metric, noise, guards

    def __call__(self, search: dict, pick_score: float, ledger: Ledger, before: dict | None, selection: SelectionRule) -> None:
        if self.stage == 1:
            search["null"] = _null_release(self.null_exact, self.metric, search["key"], selection, self.noise, ledger)
        else:
            search["null"] = before["null"]
        search["informative"] = self.guards.informative(pick_score, search["null"]["score"], selection)


def _null_release(null_exact: tuple[float, float, float], metric: str, key: str, selection: SelectionRule,
                  noise: NoiseScope, ledger: Ledger) -> dict:
    """The null model's released score for search `key` (charged to its stage-1 `ledger`, as one more
    trial's) and its test metric; `null_exact`: `PrivateTrainer.null_scores()`."""
    train_sum, test_sum, test_metric = null_exact
    score = release_scores(selection, train_scores=np.array([train_sum]), test_scores=np.array([test_sum]),
                           rng=noise.rng(METHOD, NULL_RELEASE, key), ledger=ledger, what=NULL_RELEASE)
    return {"score": float(score[0]), f"test_{metric}": test_metric}


def _check_accounting(lsc: LinearScalingConfig, accountant) -> None:
    if lsc.fit_in == "mu" and not accountant.exact_gdp:
        raise ConfigError(
            "linear_scaling.fit_in: 'mu' needs exact GDP runs; with training.batch_size or "
            f"privacy.accountant: {accountant.name} fit in 'eps'"
        )


@dataclass
class _FinalPlan:
    """One target's final run before training: its budget, its r (`FinalChoice`) as (η, T), its σ."""

    target: float
    key: str
    ledger: Ledger  # the whole search (every stage of the target's search); the final run is appended
    dec: Decomposed
    sigma: float
    fit: dict  # the fit as the result records it
    searches: list[dict]


def run_final(
    trainer: PrivateTrainer,
    lsc: LinearScalingConfig,
    space: SearchSpace,
    selection: SelectionRule,
    targets: Sequence[float],
    noise: NoiseScope,
    stages: Sequence[dict],
    progress: bool = True,
) -> list[MethodResult]:
    """Fit the rule, extrapolate to each target's final budget and train all final runs together."""
    if len(stages) != lsc.n_stages:
        raise ValueError(f"expected {lsc.n_stages} stage results, got {len(stages)}")
    acc = trainer.accountant
    _check_accounting(lsc, acc)
    space = lsc.space(space)
    by_key = [{s["key"]: s for s in st["searches"]} for st in stages]
    plans = []
    for target in targets:
        key = search_key(lsc, target)
        plans.append(_plan_final(acc, lsc, space, target, key, [stage_searches[key] for stage_searches in by_key], trainer))
    outcome = trainer.run_trials(
        [p.dec.eta for p in plans],
        [p.dec.steps for p in plans],
        [p.sigma for p in plans],
        [noise.seed(METHOD, "final", f"{p.target:.10g}") for p in plans],
        progress=progress,
        desc="final runs",
    )
    return [_final_result(trainer, outcome, j, p, lsc, search_selection(lsc, selection, p.searches[0])) for j, p in enumerate(plans)]


def _plan_final(acc, lsc: LinearScalingConfig, space: SearchSpace, target: float, key: str, searches: list[dict],
                trainer: PrivateTrainer) -> _FinalPlan:
    """What is left of the target after the search, the final r chosen from the picks, its (η, T) and σ
    (a search without signal: the whole budget, at the public prior r)."""
    ledger = Ledger()
    for s in searches:
        ledger.extend(Ledger.from_dict(s["ledger"]))
    mu_f = acc.remaining_mu(target, ledger, what=f"final run at target eps={target:g}")
    if searches[0].get("no_signal"):
        n, p = trainer.n_public, trainer.n_parameters
        choice = prior_r(lsc, space, mu_f, n, p)
        dec = choice.space.decompose(choice.r)
        fit = {"no_signal": searches[0]["no_signal"], "prior": f"r = {lsc.safeguard.no_signal_prior:g} * mu * N / sqrt(P)",
               "mu": mu_f, "n_public": n, "n_parameters": p, "r_prior": choice.r_extrapolated, "r_clamped": choice.r}
        if choice.space.steps != space.steps:  # a low mu*N/sqrt(P): at most the grid's middle T (Safeguard.no_signal_snr)
            fit["steps_at_most"] = max(choice.space.steps)
        return _FinalPlan(float(target), key, ledger, dec, acc.sigma_for_remaining(ledger, target, dec.steps), fit, searches)
    # μ_f: the Gaussian that fills the budget under the trainer's accountant; its standalone ε
    # places the final run on the fitted line (exact GDP: the final run itself).
    eps_f = acc.gaussian_eps(mu_f)
    xs, rs, x_f = fit_points(lsc, searches, mu_f, eps_f)
    informative = [s.get("informative", True) for s in searches]
    choice = choose_final_r(lsc, space, xs, rs, informative, x_f)
    dec = choice.space.decompose(choice.r)
    fit = _fit_record(lsc, space, xs, rs, x_f, choice, informative, searches)
    return _FinalPlan(float(target), key, ledger, dec, acc.sigma_for_remaining(ledger, target, dec.steps), fit, searches)


def _fit_record(lsc: LinearScalingConfig, space: SearchSpace, xs: list, rs: list, x_f: float, choice: FinalChoice,
                informative: list[bool], searches: list[dict]) -> dict:
    """The fit as a result records it: the picks, the line, and what each guard did."""
    g = lsc.safeguard
    return (
        {
            "x": lsc.fit_in,
            "points": [{"x": x, "r": r} for x, r in zip(xs, rs)],
            "degree": lsc.degree,
            "coefficients": choice.coefficients.tolist(),
            "x_final": x_f,
            "r_extrapolated": choice.r_extrapolated,
            "monotone_guard": lsc.monotone,
            "guard_applied": choice.r_guarded != choice.r_extrapolated,
            "r_clamped": choice.r,
            "clamped": not math.isclose(choice.r, choice.r_bounded),  # the space moved r (not a guard before it)
        }
        | ({"safeguard_bound": choice.r_bounded, "bounded": choice.r_bounded != choice.r_guarded} if g else {})
        | ({"beyond_grid": choice.r > space.r_max} if g and g.beyond_grid else {})
        | ({"informative": informative, "null_score": searches[0]["null"]["score"],
            "fallback_r_max": choice.fallback_r_max} if lsc.tests_informative else {})
    )


def _final_result(trainer: PrivateTrainer, outcome, j: int, p: _FinalPlan, lsc: LinearScalingConfig, selection: SelectionRule) -> MethodResult:
    """The release of target `p.target`: final run `j` of the batch, its ledger the search plus that run."""
    acc = trainer.accountant
    dec = p.dec
    eps_alone = acc.standalone_eps(p.sigma, dec.steps)
    final = acc.entry("final run", p.sigma, dec.steps, {"eta": dec.eta, "steps": dec.steps, "sigma": p.sigma, "standalone_eps": eps_alone})
    p.ledger.append(final)
    return MethodResult(
        method=METHOD,
        target_eps=p.target,
        delta=acc.delta,
        **released_model(trainer, outcome, j),
        **result_metrics(trainer, outcome, j),
        released={
            "eta": dec.eta,
            "steps": dec.steps,
            "r": dec.r,
            "r_requested": dec.r_requested,
            "sigma": p.sigma,
            "mu": final.mu,
            "standalone_eps": eps_alone,
        },
        ledger=p.ledger,
        selection=selection.describe(),
        trials=[t | {"stage": k + 1} for k, s in enumerate(p.searches) for t in s["trials"]],
        search={
            "config": lsc.describe(),
            "stage_budgets_eps": [s["eps"] for s in p.searches],
            "selected_r": [s.get("selected_r") for s in p.searches],  # None: no signal, no stage run
            "fit": p.fit,
            "shared_search_key": p.key,
        },
    )


REDUCTIONS = ("noise", "subsample")


def reduce_final(trainer, source: dict, target: float, how: str, noise: NoiseScope, progress: bool = False) -> MethodResult:
    """Panda et al. Table 14: the final run of a linear scaling result (`source`, its release record)
    redone at a lower total ε `target`, the same search (every stage trial and selection, read from its
    ledger) charged again. `how`:
    - "noise": full batch, the same η and T, σ raised so the search plus this run is (target, δ)-DP;
    - "subsample": the same η, T and σ, each step on a Poisson subsample of expected size B = q·N_pub
      (N_pub: the declared public size, never the private one), q the largest rate whose amplified
      accounting (`sample_rate_for_remaining`, under the trainer's accountant) meets the target.
    `trainer`: the study's full-batch trainer (a linear head: `with_batch_size` gives the subsampled one).
    """
    from_eps, search = _reducible_search(trainer, source, target, how)
    released = source["released"]
    eta, steps, sigma_src = float(released["eta"]), int(released["steps"]), float(released["sigma"])
    run_trainer, sigma, q, batch_size = _reduced_run(trainer, search, target, how, steps, sigma_src)
    run_acc = run_trainer.accountant
    delta = trainer.accountant.delta
    # labelled by the source release too: a reduction of another source (another from_eps, source variant or
    # version of it) under one key and variant draws independent noise
    seed = noise.seed(METHOD, "reduce", how, f"{target:.10g}", "source", config_hash(source))
    outcome = run_trainer.run_trials([eta], [steps], [sigma], [seed], progress=progress, desc=f"final run ({how})")
    eps_alone = run_acc.standalone_eps(sigma, steps)
    ledger = search.copy()
    final = run_acc.entry("final run", sigma, steps, {"eta": eta, "steps": steps, "sigma": sigma, "standalone_eps": eps_alone})
    ledger.append(final)
    total = float(ledger.total(delta)["eps"])
    if total > target * (1 + 1e-9):
        raise ValueError(f"reduce_eps ({how}): total eps={total:.6g} exceeds the target {target:g}")
    search_block = dict(source.get("search") or {})
    search_block["reduced"] = {
        "how": how,
        "from_eps": from_eps,
        "source_variant": (source.get("provenance") or {}).get("variant"),  # whose search this carries (dphpo.release)
        "from_sigma": sigma_src,  # the source's test metric is not copied: its final run is not in this ledger
        "sample_rate_bisected": q,
        "batch_size": batch_size,
        "sample_rate": run_acc.describe().get("sample_rate"),
        "accountant": run_acc.describe(),
    }
    return MethodResult(
        method=METHOD,
        target_eps=float(target),
        delta=delta,
        **released_model(run_trainer, outcome, 0),
        **result_metrics(run_trainer, outcome, 0),
        released={"eta": eta, "steps": steps, "r": eta * steps, "sigma": sigma, "mu": final.mu,
                  "standalone_eps": eps_alone, "batch_size": batch_size},
        ledger=ledger,
        selection=dict(source.get("selection") or {}),
        trials=list(source.get("trials") or []),
        search=search_block,
        notes=[f"Table 14: the eps={from_eps:g} result's final run redone at eps={target:g} by {how}"],
    )


def _reducible_search(trainer, source: dict, target: float, how: str) -> tuple[float, Ledger]:
    """The source's ε and the ledger of its search (every entry but its one final run), once the
    source, the study and the target are checked to allow a reduction."""
    if how not in REDUCTIONS:
        raise ConfigError(f"reduce_eps.how: expected one of {', '.join(REDUCTIONS)}, got {how!r}")
    if source.get("method") != METHOD:
        raise ConfigError(f"reduce_eps: the source must be a {METHOD} result, got {source.get('method')!r}")
    acc = trainer.accountant
    if (acc.describe().get("sample_rate") or 1.0) < 1.0:
        raise ConfigError("reduce_eps: the source study must train full batch (training.batch_size: null)")
    delta = acc.delta
    from_eps, source_delta = float(source["target"]["eps"]), float(source["target"]["delta"])
    if source_delta != delta:
        raise ConfigError(f"reduce_eps: the source result has delta={source_delta:g}, this config {delta:g}")
    if not target < from_eps:
        raise ConfigError(f"reduce_eps: the target eps={target:g} must lie below the source's eps={from_eps:g}")
    entries = Ledger.from_dict(source["privacy"]).entries
    search = Ledger([e for e in entries if e.what != "final run"])
    if len(search.entries) != len(entries) - 1:
        raise ValueError("reduce_eps: the source ledger must hold exactly one final run")
    return from_eps, search


def _reduced_run(trainer, search: Ledger, target: float, how: str, steps: int, sigma_src: float):
    """(trainer, σ, bisected sample rate q, batch size) of the reduced final run (`reduce_final`'s `how`)."""
    acc = trainer.accountant
    if how == "noise":
        return trainer, acc.sigma_for_remaining(search, target, steps), 1.0, None
    if acc.adjacency != "add_remove":  # before the bisection, which accounts add/remove
        raise ConfigError(f"{METHOD}: reduce_eps how=subsample amplifies by Poisson subsampling, accounted for add_remove "
                          f"adjacency only (privacy.adjacency is {acc.adjacency}); use how: noise")
    q = sample_rate_for_remaining(acc.name, acc.delta, search, target, sigma_src, steps,
                                  eps_error=float(acc.describe().get("eps_error") or 0.01))
    batch_size = None if q >= 1.0 else max(1, math.floor(q * trainer.n_public))
    return trainer.with_batch_size(batch_size), sigma_src, q, batch_size


def run(
    trainer: PrivateTrainer,
    lsc: LinearScalingConfig,
    space: SearchSpace,
    selection: SelectionRule,
    targets: Sequence[float],
    noise: NoiseScope,
    progress: bool = False,
) -> list[MethodResult]:
    """The whole method in one call (the workflow runs the same steps as separate jobs)."""
    stages: list[dict] = []
    for stage in range(1, lsc.n_stages + 1):
        stages.append(
            run_stage(trainer, lsc, space, selection, targets, noise, stage, stages[-1] if stages else None, progress)
        )
    return run_final(trainer, lsc, space, selection, targets, noise, stages, progress)


def run_from_config(trainer: PrivateTrainer, config: dict, noise: NoiseScope, progress: bool = False) -> list[MethodResult]:
    """The rule with every setting read off the config (dphpo.hpo.registry's interface)."""
    return run(
        trainer,
        LinearScalingConfig.from_config(config.get("linear_scaling", {})),
        SearchSpace.from_config(config["search_space"]),
        selection_rule(config, trainer.n_public),
        [float(e) for e in config["privacy"]["target_eps"]],
        noise,
        progress,
    )


def run_safeguarded_from_config(trainer: PrivateTrainer, config: dict, noise: NoiseScope, progress: bool = False) -> list[MethodResult]:
    """The safeguarded rule as a method of its own (language studies list it beside `linear_scaling`):
    the config's `linear_scaling.safeguard`, else the recommended guards; noise of its own scope."""
    section = safeguarded_section(config.get("linear_scaling"))
    results = run_from_config(trainer, config | {"linear_scaling": section}, noise.extend(rule="safeguarded"), progress)
    return [dataclasses.replace(r, method=SAFEGUARDED) for r in results]
