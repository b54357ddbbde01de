"""Noise calibration: the smallest noise multiplier σ that an accountant says meets a budget."""

from __future__ import annotations

import math
from collections.abc import Callable


def smallest_sigma(
    ok: Callable[[float], bool],
    start: float = 1.0,
    floor: float = 1e-9,
    ceiling: float = 1e12,
    rtol: float = 1e-4,
    what: str = "the privacy budget",
    floor_is_error: bool = False,
) -> float:
    """Smallest σ with `ok(σ)` true, at most a factor (1 + rtol) above the exact solution.

    `ok` must be monotone (false below the solution, true above). Doubling/halving brackets the
    solution, then bisection in log σ. When σ down to `floor` meets the budget, that bracket is
    returned (or ValueError with `floor_is_error`); when none up to `ceiling` does, ValueError
    naming `what`.
    """
    lo = hi = max(float(start), floor)
    if ok(hi):
        while ok(lo):
            hi, lo = lo, lo / 2.0
            if lo < floor:
                if floor_is_error:
                    raise ValueError(f"every noise multiplier down to {floor:g} meets {what}")
                return hi
    else:
        while not ok(hi):
            lo, hi = hi, hi * 2.0
            if hi > ceiling:
                raise ValueError(f"no noise multiplier below {ceiling:g} meets {what}")
    return bisect_log(ok, good=hi, bad=lo, rtol=rtol)


def bisect_log(ok: Callable[[float], bool], good: float, bad: float, rtol: float) -> float:
    """A point where `ok` holds, within a factor (1 + rtol) of its boundary, bisecting in log space
    between `good` (ok) and `bad` (not ok), whichever side of the other each lies."""
    while max(good, bad) / min(good, bad) - 1.0 > rtol:
        mid = math.sqrt(good * bad)
        if ok(mid):
            good = mid
        else:
            bad = mid
    return good


#: Largest step in log σ while bracketing: an infinite ε (σ far too small, beyond what an accountant
#: computes) moves σ by e⁴ per evaluation, and the search bisects against it instead of interpolating.
_MAX_LOG_STEP = 4.0


def calibrate_log_sigma(
    eps_of: Callable[[float], float], eps: float, guess: float, rtol: float = 3e-3, what: str = "the budget"
) -> float:
    """Smallest σ (to relative precision rtol) with eps_of(σ) ≤ eps, for an expensive, decreasing eps_of.

    Few evaluations (~5, where a bisection needs ~15): from `guess`, bracket the root stepping by the
    log-ratio log(eps_of(σ)/eps) (ε ∝ 1/σ roughly; at least 2 %), then the Illinois false-position
    method on log ε(log σ). The returned σ was evaluated and meets the budget.
    """
    def f(log_s: float) -> float:
        return math.log(max(eps_of(math.exp(log_s)), 1e-300) / eps)

    x = math.log(guess)
    y = f(x)
    lo = hi = None  # (log σ, f) with f > 0 (infeasible) / f ≤ 0 (feasible)
    for _ in range(60):
        if y <= 0:
            hi = (x, y)
            if lo is not None:
                break
            x = x - min(max(abs(y), 0.02), _MAX_LOG_STEP)
        else:
            lo = (x, y)
            if hi is not None:
                break
            x = x + min(max(abs(y), 0.02), _MAX_LOG_STEP)
        y = f(x)
    if lo is None or hi is None:
        raise ValueError(f"could not bracket the noise multiplier for {what}")
    side = 0
    while hi[0] - lo[0] > math.log1p(rtol):
        (xl, yl), (xh, yh) = lo, hi
        x = xh - yh * (xh - xl) / (yh - yl) if math.isfinite(yl) else (xl + xh) / 2.0
        x = min(max(x, xl + 0.1 * math.log1p(rtol)), xh - 0.1 * math.log1p(rtol))
        y = f(x)
        if y <= 0:
            hi = (x, y)
            if side == 1:  # Illinois: halve the stale end's weight
                lo = (lo[0], lo[1] / 2.0)
            side = 1
        else:
            lo = (x, y)
            if side == -1:
                hi = (hi[0], hi[1] / 2.0)
            side = -1
    return math.exp(hi[0])
