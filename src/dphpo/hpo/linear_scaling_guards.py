"""The steps of the linear scaling rule that its settings vary, one small strategy each (torch-free;
docs/methods.md §2 and §2a). `LinearScalingConfig.guards` (dphpo.hpo.linear_scaling_plan) selects
them once from the config; the rule (dphpo.hpo.linear_scaling) calls them without asking which.

Every strategy is post-processing of released values or a data-independent choice: none costs
privacy. The paper's rule is the first of each pair; the others are the safeguards of `Safeguard`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from dphpo.hpo.selection import SelectionRule, best_released
from dphpo.hpo.space import SearchSpace

# --- where a stage samples r ------------------------------------------------------------------


def whole_range(space: SearchSpace, previous: Mapping | None) -> tuple[float, float] | None:
    """`later_stage_range: full`: every stage samples the whole range (None: no bounds)."""
    return None


@dataclass(frozen=True)
class AbovePrevious:
    """`later_stage_range: above_previous` (the original code): stage k >= 2 samples
    [r_{k-1}, cap·r_max]; `cap` is `later_stage_cap`, or the safeguard's."""

    cap: float

    def __call__(self, space: SearchSpace, previous: Mapping | None) -> tuple[float, float] | None:
        # stage 1, or a previous pick no better than the null model: it bounds nothing
        if previous is None or not previous.get("informative", True):
            return None
        lo = previous["selected_r"]
        hi = self.cap * space.r_max
        # when r_{k-1} is already above the cap the range would point downwards: it extends to r_max
        return lo, hi if hi > lo else space.r_max


# --- which trial a stage picks ----------------------------------------------------------------


def best_score(scores: Sequence[float], rs: Sequence[float], selection: SelectionRule) -> int:
    """The paper's pick: the best released score."""
    return best_released(scores)


@dataclass(frozen=True)
class LargestTied:
    """`Safeguard.tie_margin`: the largest r among the trials whose released scores the noise cannot
    tell from the best (within `margin` standard deviations of the difference of two scores)."""

    margin: float

    def __call__(self, scores: Sequence[float], rs: Sequence[float], selection: SelectionRule) -> int:
        best = best_released(scores)
        tied = [i for i, s in enumerate(scores) if s >= scores[best] - self.margin * selection.difference_std] or [best]
        return max(tied, key=lambda i: rs[i])


# --- whether a pick counts --------------------------------------------------------------------


def every_pick(pick_score: float, null_score: float, selection: SelectionRule) -> bool:
    """The paper's rule: every stage pick enters the fit."""
    return True


@dataclass(frozen=True)
class BeatsNull:
    """`Safeguard.informative_margin`: a pick counts only if its released score beats the null
    model's by `margin` standard deviations of the difference of two released scores."""

    margin: float

    def __call__(self, pick_score: float, null_score: float, selection: SelectionRule) -> bool:
        return pick_score - null_score > self.margin * selection.difference_std


# --- the line through the picks ---------------------------------------------------------------


@dataclass(frozen=True)
class PolynomialFit:
    """The paper's fit: a polynomial of `linear_scaling.degree` through the stage picks."""

    degree: int

    def __call__(self, xs: Sequence[float], rs: Sequence[float]) -> np.ndarray:
        return np.polyfit(np.asarray(xs, float), np.asarray(rs, float), deg=self.degree)


def origin_fit(xs: Sequence[float], rs: Sequence[float]) -> np.ndarray:
    """`Safeguard.fit: origin`: r = a·x by least squares through the origin (as coefficients [a, 0])."""
    x, r = np.asarray(xs, float), np.asarray(rs, float)
    return np.array([float(x @ r / (x @ x)), 0.0])


# --- what bounds the extrapolated r -----------------------------------------------------------


def unguarded(r: float, picks: Sequence[float]) -> float:
    """`monotone: false` and no `Safeguard.max_extrapolation`: r as extrapolated."""
    return r


def monotone(r: float, picks: Sequence[float]) -> float:
    """`monotone: true`: r(ε) is non-decreasing, so never below the largest stage pick."""
    return max(r, max(picks))


@dataclass(frozen=True)
class MaxExtrapolation:
    """`Safeguard.max_extrapolation`: at most `factor` times the largest stage pick."""

    factor: float

    def __call__(self, r: float, picks: Sequence[float]) -> float:
        return min(r, self.factor * max(picks))


# --- the space the final r is clamped to ------------------------------------------------------


def within_grid(space: SearchSpace, r: float) -> SearchSpace:
    """The final r is clamped to the search space."""
    return space


def beyond_grid(space: SearchSpace, r: float) -> SearchSpace:
    """`Safeguard.beyond_grid`: above r_max, a space whose η_max reaches r at the grid's most steps."""
    if r <= space.r_max:
        return space
    return replace(space, eta_max=r / space.steps[-1])


@dataclass(frozen=True)
class Guards:
    """One strategy per step of the rule (module docstring), as `LinearScalingConfig.guards` selects them."""

    stage_range: Callable[[SearchSpace, Mapping | None], tuple[float, float] | None]
    pick: Callable[[Sequence[float], Sequence[float], SelectionRule], int]
    informative: Callable[[float, float, SelectionRule], bool]
    fit: Callable[[Sequence[float], Sequence[float]], np.ndarray]
    monotone: Callable[[float, Sequence[float]], float]
    bound: Callable[[float, Sequence[float]], float]
    final_space: Callable[[SearchSpace, float], SearchSpace]
