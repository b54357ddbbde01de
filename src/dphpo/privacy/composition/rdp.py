"""Rényi-DP composition: every event as an RDP curve, summed order by order, converted to (ε, δ)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from dphpo.privacy.events import Event, Gaussian, PoissonSampledGaussian, RdpCurve
from dphpo.privacy.rdp import DEFAULT_ORDERS, SUBSAMPLED_ORDERS, rdp_at, rdp_to_dp, subsampled_gaussian_rdp

DESCRIPTION = (
    "adaptive RDP composition (Mironov 2017, Prop. 1): curves summed order by order; GDP entries as "
    "eps(lambda) = lambda mu^2 / 2; PRV entries as the RDP of their Poisson-subsampled Gaussian (Mironov et al. "
    "2019); a curve is bounded between its grid orders by its value at the next larger grid order (RDP is "
    "non-decreasing in the order)"
)
CONVERSIONS = {
    "tight": "eps = min_lambda rdp + log((lambda-1)/lambda) - (log delta + log lambda)/(lambda-1) "
    "(Balle et al. 2020, Thm. 21; Canonne, Kamath & Steinke 2020)",
    "classic": "eps = min_lambda rdp + log(1/delta)/(lambda-1) (Mironov 2017, Prop. 3)",
}


def event_rdp(event: Event, count: int, orders: np.ndarray) -> np.ndarray:
    """RDP of `count` releases of `event` composed, at `orders` (upper bound between grid points)."""
    if isinstance(event, Gaussian):
        return orders * ((event.mu * math.sqrt(count)) ** 2 / 2.0)
    if count == 0:
        return np.zeros_like(orders)
    if isinstance(event, PoissonSampledGaussian):
        return subsampled_gaussian_rdp(event.q, event.sigma, int(event.steps) * count, orders)
    return count * rdp_at(event.orders, event.values, orders)


def grid(events: Sequence[tuple[Event, int]]) -> np.ndarray:
    """The orders a ledger is composed on: the union of its curves' grids (Poisson-subsampled runs:
    the integer grid of subsampled mechanisms; none of either: the default grid)."""
    grids = [np.asarray(e.orders, dtype=float) for e, _ in events if isinstance(e, RdpCurve)]
    if any(isinstance(e, PoissonSampledGaussian) for e, _ in events):
        grids.append(SUBSAMPLED_ORDERS)
    if not grids:
        return DEFAULT_ORDERS.copy()
    return np.unique(np.concatenate(grids))


def curve(events: Sequence[tuple[Event, int]], orders: Sequence[float] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(orders, RDP of every event composed)."""
    orders = grid(events) if orders is None else np.asarray(orders, dtype=float)
    total = np.zeros_like(orders)
    for event, count in events:
        total = total + event_rdp(event, count, orders)
    return orders, total


class RdpComposition:
    name = "rdp"
    reads: tuple[type, ...] = (Gaussian, PoissonSampledGaussian, RdpCurve)

    def total(
        self, events: Sequence[tuple[Event, int]], delta: float, *, rdp_conversion: str = "tight", **options: Any
    ) -> dict[str, Any]:
        if rdp_conversion not in CONVERSIONS:
            raise ValueError(f"rdp_conversion must be one of {sorted(CONVERSIONS)}, got {rdp_conversion!r}")
        orders, values = curve(events)
        eps, order = rdp_to_dp(orders, values, delta, conversion=rdp_conversion, return_order=True)
        return {
            "eps": eps,
            "delta": delta,
            "mu": None,
            "accountant": self.name,
            "composition": DESCRIPTION,
            "conversion": CONVERSIONS[rdp_conversion],
            "optimal_order": order,
            "orders": [float(o) for o in orders],
        }
