"""The search space: grids over the learning rate η and the number of steps T, and r = η·T.

Panda et al. §3 searches the total step size r = η·T. A sampled r is decomposed into (η, T) on the
grids by a rule that always terminates (the original code looped until it found a fit).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dphpo.errors import ConfigError


@dataclass(frozen=True)
class Decomposed:
    eta: float
    steps: int
    r_requested: float

    @property
    def r(self) -> float:
        """The achieved total step size (differs from the request when η had to be clipped)."""
        return self.eta * self.steps


R_SAMPLINGS = ("log_uniform", "uniform", "stratified_log_uniform", "log_grid")
#: The r samplings whose `size` draws are independent and identically distributed: trial i's candidate
#: does not depend on `size` (the others place it in slice i of `size`).
IID_R_SAMPLINGS = ("log_uniform", "uniform")
DECOMPOSE_POLICIES = ("min_steps", "max_steps")


@dataclass(frozen=True)
class SearchSpace:
    """η on a log grid [eta_min, eta_max] (eta_num points), T on an explicit grid of steps."""

    eta_min: float
    eta_max: float
    eta_num: int
    steps: tuple[int, ...]
    # "log_uniform" or "uniform" (Panda et al. Alg. 3 samples uniformly); "stratified_log_uniform":
    # one log-uniform draw in each of `size` equal slices of the log range, so n = 3 draws cannot
    # all land in the low decade (data-independent, so no privacy cost); "log_grid": no draw, the
    # upper ends of the `size` equal slices of the log range, so the range's top is always tried
    r_sampling: str = "log_uniform"
    decompose_policy: str = "min_steps"  # or "max_steps"

    def __post_init__(self) -> None:
        if not 0 < self.eta_min <= self.eta_max:
            raise ConfigError(f"search_space.eta: need 0 < min <= max, got min={self.eta_min}, max={self.eta_max}")
        if not self.steps or min(self.steps) < 1:
            raise ConfigError(f"search_space.steps: need a non-empty list of positive integers, got {self.steps}")
        if self.r_sampling not in R_SAMPLINGS:
            raise ConfigError(f"search_space.r_sampling: expected one of {', '.join(R_SAMPLINGS)}, got {self.r_sampling!r}")
        if self.decompose_policy not in DECOMPOSE_POLICIES:
            raise ConfigError(
                f"search_space.decompose_policy: expected one of {', '.join(DECOMPOSE_POLICIES)}, got {self.decompose_policy!r}"
            )

    @classmethod
    def from_config(cls, cfg: dict) -> SearchSpace:
        eta, steps = cfg["eta"], cfg["steps"]
        if isinstance(steps, dict):
            steps = list(range(int(steps["min"]), int(steps["max"]) + 1, int(steps.get("step", 1))))
        return cls(
            eta_min=float(eta["min"]),
            eta_max=float(eta["max"]),
            eta_num=int(eta.get("num", 10)),
            steps=tuple(sorted({int(t) for t in steps})),
            r_sampling=cfg.get("r_sampling", "log_uniform"),
            decompose_policy=cfg.get("decompose_policy", "min_steps"),
        )

    @property
    def eta_grid(self) -> np.ndarray:
        return np.geomspace(self.eta_min, self.eta_max, self.eta_num)

    @property
    def r_min(self) -> float:
        return self.eta_min * self.steps[0]

    @property
    def r_max(self) -> float:
        return self.eta_max * self.steps[-1]

    def clamp_r(self, r: float) -> float:
        return float(min(max(r, self.r_min), self.r_max))

    def sample_r(self, rng: np.random.Generator, size: int, lo: float | None = None, hi: float | None = None) -> np.ndarray:
        """`size` values of r from [lo, hi] (default the whole range), as `r_sampling` says."""
        lo = self.r_min if lo is None else self.clamp_r(lo)
        hi = self.r_max if hi is None else self.clamp_r(hi)
        if hi < lo:
            lo, hi = hi, lo
        if self.r_sampling == "uniform":
            return rng.uniform(lo, hi, size)
        if self.r_sampling == "log_grid":  # no draw
            u = (np.arange(size) + 1.0) / size
        else:
            u = rng.uniform(0.0, 1.0, size)
            if self.r_sampling == "stratified_log_uniform":
                u = (np.arange(size) + u) / size
        return np.exp(math.log(lo) + u * (math.log(hi) - math.log(lo)))

    def decompose(self, r: float) -> Decomposed:
        """Split r into (η, T) with T on the grid and η = r/T clipped to [eta_min, eta_max].

        min_steps: the fewest grid steps whose η = r/T does not exceed eta_max (cheapest run);
        max_steps: the most grid steps whose η is at least eta_min. One pass over the grid: always
        terminates; when no T fits exactly, the nearest end is taken and η is clipped.
        """
        r = float(r)
        if self.decompose_policy == "min_steps":
            fitting = [t for t in self.steps if r / t <= self.eta_max]
            steps = fitting[0] if fitting else self.steps[-1]
        else:
            fitting = [t for t in self.steps if r / t >= self.eta_min]
            steps = fitting[-1] if fitting else self.steps[0]
        eta = float(min(max(r / steps, self.eta_min), self.eta_max))
        return Decomposed(eta=eta, steps=int(steps), r_requested=r)

    def grid(self) -> list[tuple[float, int]]:
        """Every (η, T) grid point (grid search)."""
        return [(float(e), int(t)) for e in self.eta_grid for t in self.steps]
