"""Noise calibration: the smallest noise multiplier σ that an accountant says meets a budget."""

from __future__ import annotations

import math
from typing import Callable


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
    while hi / lo - 1.0 > rtol:
        mid = math.sqrt(lo * hi)
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi
