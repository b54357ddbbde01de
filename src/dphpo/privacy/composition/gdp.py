"""Exact GDP composition: Gaussian releases compose to μ = √(Σ count·μ_i²) (Dong, Roth & Su 2022)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from dphpo.privacy.events import Event, Gaussian
from dphpo.privacy.gdp import compose_mu, eps_from_mu

DESCRIPTION = "adaptive GDP composition, mu_total = sqrt(sum mu_i^2) (Dong et al. 2022, Cor. 3.3)"


def composed_mu(events: Iterable[tuple[Gaussian, int]]) -> float:
    """μ of Gaussian releases composed (each `count` times: √count·μ)."""
    return compose_mu(event.mu * math.sqrt(count) for event, count in events)


class GdpComposition:
    name = "gdp_closed_form"
    reads: tuple[type, ...] = (Gaussian,)

    def total(self, events: Sequence[tuple[Event, int]], delta: float, **options: Any) -> dict[str, Any]:
        mu = composed_mu(events)
        return {
            "eps": eps_from_mu(mu, delta) if mu > 0 else 0.0,
            "delta": delta,
            "mu": mu,
            "accountant": self.name,
            "composition": DESCRIPTION,
        }
