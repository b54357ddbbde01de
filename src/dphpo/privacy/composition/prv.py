"""Numerical composition of privacy random variables (prv-accountant's upper bound) of Poisson-
subsampled Gaussian runs and Gaussian releases; the looser RDP bound is recorded beside it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from dphpo.privacy.composition.rdp import RdpComposition
from dphpo.privacy.events import Event, Gaussian, PoissonSampledGaussian
from dphpo.privacy.prv import compose_prv

DESCRIPTION = (
    "numerical composition of privacy random variables (Gopi, Lee & Wutschitz 2021; prv-accountant, upper bound): "
    "each PRV entry a Poisson-subsampled Gaussian self-composed T x count times, all GDP entries as one Gaussian "
    "mechanism of noise multiplier 1/mu (mu = sqrt(sum mu_i^2), exact for Gaussians)"
)


class PrvComposition:
    name = "prv"
    reads: tuple[type, ...] = (Gaussian, PoissonSampledGaussian)

    def total(
        self, events: Sequence[tuple[Event, int]], delta: float, *, rdp_conversion: str = "tight", **options: Any
    ) -> dict[str, Any]:
        gauss_sq = sum((e.mu * math.sqrt(count)) ** 2 for e, count in events if isinstance(e, Gaussian))
        runs: dict[tuple[float, float], int] = {}  # runs sharing one subsampled Gaussian add their steps
        sampled = [(e, count) for e, count in events if isinstance(e, PoissonSampledGaussian)]
        for e, count in sampled:
            if count > 0 and e.steps > 0:
                key = (float(e.q), float(e.sigma))
                runs[key] = runs.get(key, 0) + int(e.steps) * count
        eps_error = min(e.eps_error for e, _ in sampled)
        bounds = compose_prv(tuple(sorted((q, s, t) for (q, s), t in runs.items())), math.sqrt(gauss_sq), delta, eps_error)
        return {
            "eps": bounds["eps_upper"],
            "delta": delta,
            "mu": None,
            "accountant": bounds["accountant"],
            "composition": DESCRIPTION,
            "prv": bounds,
            "rdp_eps": RdpComposition().total(events, delta, rdp_conversion=rdp_conversion)["eps"],
        }
