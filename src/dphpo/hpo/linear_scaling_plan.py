"""The plan of the linear scaling rule (Panda et al., Algorithms 2-3; docs/methods.md §2), torch-free:
its settings, the search each target needs, the budget check that runs before any job
(dphpo.studies.config) and the pure steps of the rule: stage searches, fit and final choice, with the
safeguards as strategies (`LinearScalingConfig.guards`). Running it is dphpo.hpo.linear_scaling."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from dphpo.errors import ConfigError, InfeasibleBudgetError
from dphpo.hpo.linear_scaling_guards import (
    AbovePrevious,
    BeatsNull,
    Guards,
    LargestTied,
    MaxExtrapolation,
    PolynomialFit,
    best_score,
    beyond_grid,
    every_pick,
    monotone,
    origin_fit,
    unguarded,
    whole_range,
    within_grid,
)
from dphpo.hpo.selection import SIGNAL_FRACTION, SelectionRule
from dphpo.hpo.space import DECOMPOSE_POLICIES, R_SAMPLINGS, SearchSpace
from dphpo.privacy.ledger import Ledger, plan_final_mu
from dphpo.privacy.planning import BudgetPlanner

SAFEGUARD_FITS = ("origin",)
#: the ledger entry of the null model's released score (`Safeguard.informative_margin`)
NULL_RELEASE = "null model"


@dataclass(frozen=True)
class Safeguard:
    """Guards of the safeguarded rule (`linear_scaling.safeguard`; docs/methods.md, "The safeguarded
    rule"). Each is post-processing of released picks or a data-independent choice: no privacy cost.
    Off (None) leaves the paper's rule, exact but for `LinearScalingConfig.monotone` (on by default;
    `monotone: false` is Algorithm 2's raw line)."""

    # r -> (eta, T) of every stage trial and of the final run; overrides search_space.decompose_policy.
    # max_steps: at a fixed r and budget, more steps average the noise over more updates
    decompose: str | None = None
    # the final r is at most this multiple of the largest stage pick: a line through two noisy picks
    # made at a tenth of the budget must not send the release far beyond anything it measured
    max_extrapolation: float | None = None
    # how the stage trials draw r; overrides search_space.r_sampling. stratified_log_uniform: one draw
    # in each of n equal slices of the log range, so the n trials of a stage cannot all land in one end
    sampling: str | None = None
    # the rule through the stage picks. origin: r = a·x by least squares through the origin (the linear
    # scaling law itself, r ∝ ε). The paper's two-point line has slope (r2 - r1)/(x2 - x1), whose noise
    # is amplified by 1/(x2 - x1) and then extrapolated ~8 stage gaps; a line through the origin needs no
    # intercept and weights the picks by their budgets. None: the paper's polynomial of linear_scaling.degree
    fit: str | None = None
    # a stage pick counts only if its released score beats the null model's by this many standard
    # deviations of the difference of two noisy scores. The null model learns nothing from the inputs
    # (a classifier: the majority label; a language model: the pretrained one, untouched); its score is
    # released once, noised like a trial's, and charged. Where every stage trial ends at chance, the
    # pick is noise, and a line through it can release a model that learns nothing (docs/methods.md §2a, cause 6).
    # A stage without an informative pick drops out of the fit and lets the next stage search the whole
    # range; with none left the final run takes r_max (the rule's premise: r grows with ε). Needs fit:
    # origin (it fits any number of picks). None: every pick counts (the paper's rule)
    informative_margin: float | None = None
    # a stage picks the largest r whose released score is within this many standard deviations (of the
    # difference of two noisy scores) of the best one. Accuracy is scale-invariant, so at a stage budget
    # trials of very different r score alike and the best noisy score points at an r by chance; among
    # trials the noise cannot tell apart, the rule's premise (r grows with ε, and the final run has 5-10x
    # the stage budget) favours the largest. Post-processing of the released scores. None: the best score
    tie_margin: float | None = None
    # stage k >= 2 samples [r_{k-1}, later_stage_cap·r_max]; overrides linear_scaling.later_stage_cap (the
    # original code's 0.2). Where the optimum sits at the grid's edge, a wrong but clear stage-1 pick
    # bounds stage 2 at 0.2·r_max, and the line cannot climb back (docs/methods.md §2a, cause 6).
    # A data-independent range: no privacy cost. None: the paper's cap
    later_stage_cap: float | None = None
    # the final r may exceed the grid's r_max (run at the grid's most steps with η above η_max) up to
    # max_extrapolation × the largest stage pick, which it needs. The grid bounds what the stages
    # search; where the picks climb to its edge, the linear scaling law points past it (MiniLM, the
    # tiny GPT-2: docs/methods.md §2a). Post-processing of the released picks. None: clamped to the grid
    beyond_grid: bool | None = None
    # where the selection noise cannot rank trials (noise above SIGNAL_FRACTION of the public size N:
    # `SelectionRule.predicts_signal`), the target spends nothing on stages: its whole budget goes to one
    # final run at the public prior r = no_signal_prior·μ·N/√P (μ of that run, P the head's weights,
    # clamped to the grid: `prior_r`). Both the decision and r read public quantities only (N, P, ε, δ,
    # the configured noise): no privacy cost.
    # The slope came from public proxies (experiments/selection_planner.py). None: the stages always run
    no_signal_prior: float | None = None
    # the no-signal run's steps: where its public signal-to-noise μN/√P is below this, it takes at most
    # the grid's middle T (the largest grid T ≤ √(T_min·T_max): 20 on 5 … 100), else the decomposition's.
    # At such μN/√P accuracy hardly depends on r, and many small noisy steps lose 1-3 points to ~20
    # (public proxies: `NO_SIGNAL_SNR`). Public quantities only. None: the decomposition's T
    no_signal_snr: float | None = None
    # the stages run only where the first stage's own public signal-to-noise μ₁N/√P (μ₁ of its budget)
    # reaches this; below it the target takes the no-signal path as well. A stage trial at μ₁N/√P ≈ 1
    # learns about as much at any r, so its released scores rank noise, however fine the selection noise
    # (synthetic_shapes × Lite0 at N = 50,000, ε = 0.1: docs/methods.md §3). Public quantities only.
    # None: only the selection noise decides (`SelectionRule.predicts_signal`)
    stage_snr: float | None = None

    def __post_init__(self) -> None:
        key = "linear_scaling.safeguard"
        if self.decompose is not None and self.decompose not in DECOMPOSE_POLICIES:
            raise ConfigError(f"{key}.decompose: expected one of {', '.join(DECOMPOSE_POLICIES)}, got {self.decompose!r}")
        if self.sampling is not None and self.sampling not in R_SAMPLINGS:
            raise ConfigError(f"{key}.sampling: expected one of {', '.join(R_SAMPLINGS)}, got {self.sampling!r}")
        if self.fit is not None and self.fit not in SAFEGUARD_FITS:
            raise ConfigError(f"{key}.fit: expected one of {', '.join(SAFEGUARD_FITS)}, got {self.fit!r}")
        if self.informative_margin is not None:
            if not self.informative_margin >= 0:
                raise ConfigError(f"{key}.informative_margin: must be >= 0 (standard deviations), got {self.informative_margin}")
            if self.fit != "origin":
                raise ConfigError(f"{key}.informative_margin: needs {key}.fit: origin (a fit through any number of picks), got fit {self.fit!r}")
        if self.tie_margin is not None and not self.tie_margin >= 0:
            raise ConfigError(f"{key}.tie_margin: must be >= 0 (standard deviations), got {self.tie_margin}")
        if self.later_stage_cap is not None and not 0 < self.later_stage_cap <= 1:
            raise ConfigError(f"{key}.later_stage_cap: must be in (0, 1] (a fraction of r_max), got {self.later_stage_cap}")
        if self.beyond_grid and self.max_extrapolation is None:
            raise ConfigError(f"{key}.beyond_grid: needs {key}.max_extrapolation (a final r beyond the grid must stay bounded)")
        if self.no_signal_prior is not None and not self.no_signal_prior > 0:
            raise ConfigError(f"{key}.no_signal_prior: must be > 0 (r per unit of mu*N), got {self.no_signal_prior}")
        if self.no_signal_snr is not None and not self.no_signal_snr > 0:
            raise ConfigError(f"{key}.no_signal_snr: must be > 0 (a value of mu*N/sqrt(P)), got {self.no_signal_snr}")
        if self.stage_snr is not None:
            if not self.stage_snr > 0:
                raise ConfigError(f"{key}.stage_snr: must be > 0 (a value of mu_1*N/sqrt(P)), got {self.stage_snr}")
            if self.no_signal_prior is None:
                raise ConfigError(f"{key}.stage_snr: needs {key}.no_signal_prior (the r of the run that replaces the stages)")
        if self.max_extrapolation is not None and not self.max_extrapolation >= 1:
            raise ConfigError(f"{key}.max_extrapolation: must be >= 1 (a multiple of the largest stage pick), got {self.max_extrapolation}")

    @classmethod
    def from_config(cls, cfg: dict | bool | None) -> Safeguard | None:
        """`true`: the recommended guards (RECOMMENDED_SAFEGUARD); a mapping: these guards; else None."""
        if cfg is True:
            return RECOMMENDED_SAFEGUARD
        if not cfg:
            return None
        number = lambda k: None if cfg.get(k) is None else float(cfg[k])  # noqa: E731
        return cls(decompose=cfg.get("decompose"), max_extrapolation=number("max_extrapolation"), sampling=cfg.get("sampling"),
                   fit=cfg.get("fit"), informative_margin=number("informative_margin"), tie_margin=number("tie_margin"),
                   later_stage_cap=number("later_stage_cap"), beyond_grid=cfg.get("beyond_grid"),
                   no_signal_prior=number("no_signal_prior"), no_signal_snr=number("no_signal_snr"), stage_snr=number("stage_snr"))

    def to_dict(self) -> dict:
        out = {"decompose": self.decompose, "max_extrapolation": self.max_extrapolation}
        # keys appear only when set: results written before an option existed keep their bytes
        return out | {k: getattr(self, k) for k in ("sampling", "fit", "informative_margin", "tie_margin", "later_stage_cap", "beyond_grid", "no_signal_prior", "no_signal_snr", "stage_snr") if getattr(self, k) is not None}


#: The no-signal path's public prior r = NO_SIGNAL_PRIOR·μ·N/√P (P: the head's d·K weights): the grid
#: oracle's r on public subsets (3 seeds, N = 500 … 5,000, ε = 0.25 … 2) sits at a median 0.07 μN on
#: digits (P = 640) and 0.02 μN on MNIST pixels (P = 7,840): 1.8 μN/√P for both
#: (experiments/selection_planner.py; docs/methods.md §3). MNIST's subsets are of the training split the
#: embedded mnist study trains on: the configs label it (`design_notes: selection.noise_std`).
NO_SIGNAL_PRIOR = 1.8

#: Below this public signal-to-noise μN/√P the no-signal run takes at most the grid's middle T
#: (`Safeguard.no_signal_snr`). The mean test accuracy of runs at the prior r, per grid T (10 noise draws;
#: digits pixels N = 500, 1,000, synthetic_shapes × Lite0 N = 500 … 5,000, MiniLM on unread tweets
#: N = 500 … 4,890; ε = 0.1 … 4): below μN/√P ≈ 2.5 T = 10-20 beat the most steps in 9 of 10 cells (by up
#: to 2.6 points: tweets N = 500, ε = 0.1, 43.0 vs 40.5 %), above it the most steps won or tied
#: (docs/methods.md §3).
NO_SIGNAL_SNR = 2.5

#: The stages run only where the first stage's public μ₁N/√P reaches this (`Safeguard.stage_snr`). On
#: synthetic_shapes × Lite0 at N = 50,000, the one proxy whose planned selection noise lets stages run at
#: small ε (experiments/selection_planner.py --stage-snr; docs/methods.md §3): at μ₁N/√P = 1.0 (ε = 0.1)
#: and 2.3 (ε = 0.25) one run at the prior beat the stages by 4.5 and 0.7 points (20 seeds: 28.5 ± 0.6 vs
#: 24.0 ± 3.8 %, 37.9 ± 0.5 vs 37.2 ± 2.1 %); the same threshold as the no-signal run's steps
#: (NO_SIGNAL_SNR), where a run's accuracy stops depending on r.
STAGE_SNR = 2.5

#: `linear_scaling.safeguard: true` and the language method `linear_scaling_safeguarded`. Chosen on
#: public data only: experiments/safeguard_constants.py on synthetic_shapes, and tie_margin 1,
#: later_stage_cap 1 and beyond_grid on config/language_proxy.yaml (MiniLM on tweets its study never
#: reads: 54.9 % for the paper's rule, 62 % with these guards; on synthetic_shapes they are within
#: 0.4 points of the mean at ε >= 0.25); docs/methods.md §2a.
RECOMMENDED_SAFEGUARD = Safeguard(decompose="max_steps", max_extrapolation=4.0, sampling="stratified_log_uniform", fit="origin",
                                  tie_margin=1.0, later_stage_cap=1.0, beyond_grid=True, no_signal_prior=NO_SIGNAL_PRIOR,
                                  no_signal_snr=NO_SIGNAL_SNR, stage_snr=STAGE_SNR)


def safeguarded_section(section: dict | None) -> dict:
    """The `linear_scaling` section as the safeguarded method runs it: its `safeguard`, else (absent or
    false) the recommended guards. What the job runs and what its settings hash hold, in one place."""
    section = dict(section or {})
    section["safeguard"] = section.get("safeguard") or True
    return section


@dataclass(frozen=True)
class LinearScalingConfig:
    n_trials: int = 3
    stage_eps: tuple[float, ...] = (0.1, 0.2)
    budget_mode: str = "fraction"  # stage_eps are fractions of the target ε, or "absolute" ε values
    degree: int = 1  # Linear(k) = 1, Quadratic(3) = 2 (Panda et al., Table 10)
    fit_in: str = "eps"  # fit r against ε (paper text) or against μ (Algorithm 2)
    later_stage_range: str = "above_previous"  # original code: stage k samples [r_{k-1}, cap·r_max]
    later_stage_cap: float = 0.2
    # r(ε) is non-decreasing (Panda et al. §3: the optimal r grows with ε). A line through two noisy
    # picks can slope downwards and extrapolate below every observed r (down to r_min); the guard
    # takes max(extrapolation, largest stage pick) instead. Post-processing: no privacy cost. Not in the
    # paper's Algorithm 2: config/paper.yaml sets it false.
    monotone: bool = True
    safeguard: Safeguard | None = None  # None: the paper's rule, exact

    def __post_init__(self) -> None:
        key = "linear_scaling"
        if self.n_trials < 1:
            raise ConfigError(f"{key}.n_trials: must be >= 1, got {self.n_trials}")
        if len(self.stage_eps) < 2 or not all(math.isfinite(e) and e > 0 for e in self.stage_eps):
            raise ConfigError(f"{key}.stage_eps: need at least two positive, finite budgets, got {list(self.stage_eps)}")
        if len(set(self.stage_eps)) != len(self.stage_eps):  # two points at one ε fit any slope
            raise ConfigError(
                f"{key}.stage_eps: {list(self.stage_eps)} repeats a budget; the rule fits r against ε through one pick "
                "per stage, so each stage needs its own ε"
            )
        if self.budget_mode not in ("fraction", "absolute"):
            raise ConfigError(f"{key}.budget_mode: expected 'fraction' or 'absolute', got {self.budget_mode!r}")
        if not 1 <= self.degree <= len(self.stage_eps) - 1:
            raise ConfigError(
                f"{key}.degree: a degree-{self.degree} fit needs more than {self.degree} stages, "
                f"got {len(self.stage_eps)} stage budgets"
            )
        if self.fit_in not in ("eps", "mu"):
            raise ConfigError(f"{key}.fit_in: expected 'eps' or 'mu', got {self.fit_in!r}")
        if self.later_stage_range not in ("above_previous", "full"):
            raise ConfigError(
                f"{key}.later_stage_range: expected 'above_previous' or 'full', got {self.later_stage_range!r}"
            )

    @classmethod
    def from_config(cls, cfg: dict) -> LinearScalingConfig:
        return cls(
            n_trials=int(cfg.get("n_trials", 3)),
            stage_eps=tuple(float(e) for e in cfg.get("stage_eps", (0.1, 0.2))),
            budget_mode=cfg.get("budget_mode", "fraction"),
            degree=int(cfg.get("degree", 1)),
            fit_in=cfg.get("fit_in", "eps"),
            later_stage_range=cfg.get("later_stage_range", "above_previous"),
            later_stage_cap=float(cfg.get("later_stage_cap", 0.2)),
            monotone=bool(cfg.get("monotone", True)),
            safeguard=Safeguard.from_config(cfg.get("safeguard")),
        )

    def describe(self) -> dict:
        """The settings as a result records them (the paper's rule: without a safeguard key)."""
        out = {k: v for k, v in self.__dict__.items() if k != "safeguard"} | {"stage_eps": list(self.stage_eps)}
        return out | ({"safeguard": self.safeguard.to_dict()} if self.safeguard else {})

    def space(self, space: SearchSpace) -> SearchSpace:
        """The search space of the rule: the safeguard's decomposition and sampling, where it names them."""
        g = self.safeguard
        if g is None:
            return space
        return replace(space, decompose_policy=g.decompose or space.decompose_policy, r_sampling=g.sampling or space.r_sampling)

    @property
    def stage_cap(self) -> float:
        """The upper end of stage k >= 2's range, as a fraction of r_max: the safeguard's, else the paper's."""
        g = self.safeguard
        return g.later_stage_cap if g is not None and g.later_stage_cap is not None else self.later_stage_cap

    @property
    def guards(self) -> Guards:
        """The rule's steps as these settings select them (dphpo.hpo.linear_scaling_guards): the paper's,
        each replaced by its safeguard where `safeguard` names one."""
        g = self.safeguard or Safeguard()
        return Guards(
            stage_range=AbovePrevious(self.stage_cap) if self.later_stage_range == "above_previous" else whole_range,
            pick=best_score if g.tie_margin is None else LargestTied(g.tie_margin),
            informative=every_pick if g.informative_margin is None else BeatsNull(g.informative_margin),
            fit=origin_fit if g.fit == "origin" else PolynomialFit(self.degree),
            monotone=monotone if self.monotone else unguarded,
            bound=unguarded if g.max_extrapolation is None else MaxExtrapolation(g.max_extrapolation),
            final_space=beyond_grid if g.beyond_grid else within_grid,
        )

    def bound_r(self, r: float, picks: Sequence[float]) -> float:
        """The safeguard's bound on the extrapolated r (before the search-space clamp)."""
        return self.guards.bound(r, picks)

    def final_space(self, space: SearchSpace, r: float) -> SearchSpace:
        """The space the final r is clamped to and decomposed in: the search space, or with
        `Safeguard.beyond_grid` and r above r_max, one whose η_max reaches r at the grid's most steps."""
        return self.guards.final_space(space, r)

    def fit(self, xs: Sequence[float], rs: Sequence[float]) -> np.ndarray:
        """Polynomial coefficients (highest power first) of r(x) through the stage picks."""
        return self.guards.fit(xs, rs)

    @property
    def tests_informative(self) -> bool:
        """Whether stage picks must beat the null model (`Safeguard.informative_margin`)."""
        return self.safeguard is not None and self.safeguard.informative_margin is not None

    def informative(self, pick_score: float, null_score: float, selection: SelectionRule) -> bool:
        """Whether a stage pick's released score beats the null model's by the margin (in standard
        deviations of the difference of two released scores: 0 for exact, non-private scores)."""
        return self.guards.informative(pick_score, null_score, selection)

    def pick(self, scores: Sequence[float], rs: Sequence[float], selection: SelectionRule) -> int:
        """The stage pick: the best released score, or with `Safeguard.tie_margin` the largest r among the
        trials whose scores the noise cannot tell from the best."""
        return self.guards.pick(scores, rs, selection)

    @property
    def selection_releases(self) -> int:
        """Scores the search releases under the noisy selection rule (`planned_search_ledger`)."""
        return self.n_stages * self.n_trials + (1 if self.tests_informative else 0)

    @property
    def n_stages(self) -> int:
        return len(self.stage_eps)

    def stage_budgets(self, target_eps: float) -> tuple[float, ...]:
        if self.budget_mode == "fraction":
            return tuple(f * target_eps for f in self.stage_eps)
        return self.stage_eps


def search_key(lsc: LinearScalingConfig, target_eps: float) -> str:
    return "stage_eps=" + ",".join(f"{e:.10g}" for e in lsc.stage_budgets(target_eps))


def stage_searches(lsc: LinearScalingConfig, targets: Sequence[float], stage: int) -> dict[str, dict]:
    """The searches stage `stage` (1-based) runs, by key: targets whose stage budgets coincide share one."""
    searches: dict[str, dict] = {}
    for target in targets:
        key = search_key(lsc, target)
        searches.setdefault(key, {"key": key, "targets": [], "eps": lsc.stage_budgets(target)[stage - 1]})
        searches[key]["targets"].append(float(target))
    return searches


def fit_points(lsc: LinearScalingConfig, searches: Sequence[dict], mu_final: float, eps_final: float) -> tuple[list, list, float]:
    """The stage picks as points (x_k, r_k) of the fit and the final run's x, in ε or μ (`fit_in`)."""
    xs = [s["eps"] if lsc.fit_in == "eps" else s["mu"] for s in searches]
    rs = [s["selected_r"] for s in searches]
    return xs, rs, eps_final if lsc.fit_in == "eps" else mu_final


@dataclass(frozen=True)
class FinalChoice:
    """The final run's r from the stage picks, each guard's value recorded (Panda et al., Algorithm 3)."""

    coefficients: np.ndarray  # of the fit, highest power first (empty: nothing was fitted)
    r_extrapolated: float
    r_guarded: float  # after the monotone guard
    r_bounded: float  # after the safeguard's bound
    space: SearchSpace  # the space the final r is clamped to and decomposed in
    r: float  # clamped to `space`
    fallback_r_max: bool  # no pick beat the null model: r_max, nothing fitted


def choose_final_r(lsc: LinearScalingConfig, space: SearchSpace, xs: Sequence[float], rs: Sequence[float],
                   informative: Sequence[bool], x_final: float) -> FinalChoice:
    """Fit the picks that count (all of them without the informative test), extrapolate to `x_final`
    and apply the guards in order: monotone, the safeguard's bound, the clamp to the final space."""
    guards = lsc.guards
    xs_fit = [x for x, keep in zip(xs, informative) if keep]
    rs_fit = [r for r, keep in zip(rs, informative) if keep]
    if rs_fit:
        coeffs = guards.fit(xs_fit, rs_fit)
        r_extrapolated = float(np.polyval(coeffs, x_final))
        r_guarded = guards.monotone(r_extrapolated, rs_fit)
        r_bounded = guards.bound(r_guarded, rs_fit)
    else:  # no stage learned anything: r grows with ε (the rule's premise) and nothing measured bounds it
        coeffs = np.zeros(0)
        r_extrapolated = r_guarded = r_bounded = space.r_max
    final_space = guards.final_space(space, r_bounded)
    return FinalChoice(coeffs, r_extrapolated, r_guarded, r_bounded, final_space, final_space.clamp_r(r_bounded), not rs_fit)


def no_signal(lsc: LinearScalingConfig, selection: SelectionRule, search: Mapping, n_parameters: int | None) -> str | None:
    """Why the search's stages are skipped (`Safeguard.no_signal_prior`): its released scores could not
    rank trials at this public size, or (`Safeguard.stage_snr`) its first stage's trials learn too little
    to differ. None: the stages run (also for a trainer without a public prior)."""
    guard = lsc.safeguard
    if guard is None or guard.no_signal_prior is None or not n_parameters:
        return None
    sel = search_selection(lsc, selection, search)
    whole = "no stage trials; the whole budget to one run at the public prior r"
    if not sel.predicts_signal:
        return (f"no signal: selection noise {sel.noise_std:.4g} counts is {sel.noise_std / sel.n_public:.1%} of N = {sel.n_public} "
                f"(above {SIGNAL_FRACTION:.1%}): {whole}")
    if guard.stage_snr is not None and sel.n_public and sel.delta is not None:  # N and δ known: μ₁N/√P
        eps_1 = lsc.stage_budgets(search["targets"][0])[0]  # a search's targets share their stage budgets (`search_key`)
        snr = first_stage_snr(eps_1, sel.delta, sel.n_public, n_parameters)
        if snr < guard.stage_snr:
            return (f"no signal: stage 1 at eps={eps_1:.4g} has mu_1*N/sqrt(P) = {snr:.3g} (below {guard.stage_snr:g}), "
                    f"its trials would rank noise: {whole}")
    return None


def public_snr(mu: float, n_public: int, n_parameters: int) -> float:
    """μN/√P: a μ-GDP run's public signal-to-noise on N public-size records and a head of P weights
    (`prior_r`; the guards `no_signal_snr` and `stage_snr`)."""
    return mu * n_public / math.sqrt(n_parameters)


def first_stage_snr(eps_1: float, delta: float, n_public: int, n_parameters: int) -> float:
    """μ₁N/√P of a stage trial at (eps_1, δ) (`Safeguard.stage_snr`)."""
    return public_snr(BudgetPlanner(delta).mu_for_eps(eps_1), n_public, n_parameters)


def prior_r(lsc: LinearScalingConfig, space: SearchSpace, mu: float, n_public: int, n_parameters: int) -> FinalChoice:
    """The no-signal final run's r: no_signal_prior·μ·N/√(parameters), clamped to the grid (nothing fitted).
    Why this scale: T steps of DP-GD at σ = √T/μ move a head of P weights by noise of norm ~ r·√P/(μN)
    (r = ηT) against a clipped signal of norm ≤ r, so the r that balances them grows as μN/√P."""
    r = lsc.safeguard.no_signal_prior * mu * n_public / math.sqrt(n_parameters)  # this order: released r keep their bytes
    if lsc.safeguard.no_signal_snr is not None and public_snr(mu, n_public, n_parameters) < lsc.safeguard.no_signal_snr:
        space = middle_steps(space)
    return FinalChoice(np.zeros(0), r, r, r, space, space.clamp_r(r), False)


def middle_steps(space: SearchSpace) -> SearchSpace:
    """The space with the grid's T up to its middle, √(T_min·T_max) (`Safeguard.no_signal_snr`)."""
    middle = math.sqrt(space.steps[0] * space.steps[-1])
    return replace(space, steps=tuple(t for t in space.steps if t <= middle))


def search_selection(lsc: LinearScalingConfig, selection: SelectionRule, search: Mapping) -> SelectionRule:
    """The selection rule of one search: `selection.noise_std: auto` plans it at the smallest target
    the search serves (`stage_searches`), for the rule's released scores."""
    return selection.at(min(search["targets"]), lsc.selection_releases)


def planned_search_ledger(lsc: LinearScalingConfig, selection: SelectionRule, target_eps: float, planner: BudgetPlanner,
                          targets: Sequence[float] | None = None, n_parameters: int | None = None) -> Ledger:
    """The releases of the whole search as planned (before any training), each stage's trials at its μ;
    `targets`: every target of the run (a search shared by several plans its noise at their smallest)."""
    search = stage_searches(lsc, targets or [target_eps], 1)[search_key(lsc, target_eps)]
    selection = search_selection(lsc, selection, search)
    ledger = Ledger()
    if no_signal(lsc, selection, search, n_parameters):
        return ledger
    for k, eps_k in enumerate(lsc.stage_budgets(target_eps), start=1):
        ledger.add(f"stage {k} trials", mu=planner.mu_for_eps(eps_k), count=lsc.n_trials, standalone_eps=eps_k)
        if selection.mu_per_release > 0:
            ledger.add(f"stage {k} selection", mu=selection.mu_per_release, count=lsc.n_trials)
            if k == 1 and lsc.tests_informative:
                ledger.add(NULL_RELEASE, mu=selection.mu_per_release, count=1)
    return ledger


def check_budgets(lsc: LinearScalingConfig, selection: SelectionRule, targets: Sequence[float], delta: float,
                  n_parameters: int | None = None) -> dict:
    """Final-run budget of every target; raises InfeasibleBudgetError before any training."""
    planner = BudgetPlanner(delta)  # the plan needs δ only: checks run before any trainer exists
    plans = {}
    for target in targets:
        spent = planned_search_ledger(lsc, selection, target, planner, targets, n_parameters)
        try:
            mu_f = plan_final_mu(target, delta, spent, what=f"final run of linear scaling at target eps={target:g}")
        except InfeasibleBudgetError as err:  # the ledger's words, with the keys they map to
            raise InfeasibleBudgetError(
                f"{err}\nThe keys: linear_scaling.stage_eps ({list(lsc.stage_eps)}, budget_mode {lsc.budget_mode}), "
                f"linear_scaling.n_trials ({lsc.n_trials}), selection.noise_std (more noise costs less) and "
                f"privacy.target_eps ({target:g})"
            ) from None
        plans[float(target)] = {"final_mu": mu_f, "final_eps": planner.eps_for_mu(mu_f)}
    return plans
