"""What a ledger entry records: the mechanism that ran, with its parameters (dp_accounting's "events").

An accountant reads events, never the code that produced them (`dphpo.privacy.composition`). Three
kinds cover every release dphpo makes:
- `Gaussian(mu)`: a μ-GDP release — a full-batch DP-GD run (μ = factor·√T/σ), a noisy score or count
  (μ = sensitivity/σ), a linear-scaling stage; exact GDP composes these in closed form.
- `PoissonSampledGaussian(q, sigma, steps)`: `steps` steps of the Gaussian mechanism (noise multiplier
  σ, sensitivity 1) on Poisson subsamples of rate q — a DP-SGD run, read by the PRV accountant.
- `RdpCurve(orders, values)`: a release known by its Rényi-DP curve — Papernot–Steinke tuning
  (repeat and select), Koskela–Kulkarni, a run that an RDP accountant recorded as its curve.

`kind` is the name an entry is stored under ("mechanism" in a result file: gdp, prv, rdp);
`EVENTS` maps it back. A new kind of mechanism is a new class here and a line in `EVENTS`; an
accountant that cannot read it is never chosen for a ledger that holds it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np


@dataclass(frozen=True)
class Gaussian:
    """A μ-GDP release (Dong, Roth & Su 2022)."""

    mu: float
    kind: ClassVar[str] = "gdp"

    def check(self, what: str) -> None:
        if self.mu is None or not (self.mu >= 0 and math.isfinite(self.mu)):
            raise ValueError(f"ledger entry {what!r}: mu must be finite and >= 0, got {self.mu}")

    @classmethod
    def stored(cls, mu: float | None, details: dict[str, Any], orders: Any, values: Any, what: str) -> Gaussian:
        if orders is not None or values is not None:
            raise ValueError(f"ledger entry {what!r}: a GDP entry carries no RDP curve")
        return cls(mu)

    def stored_fields(self) -> dict[str, Any]:
        return {"mu": float(self.mu)}


@dataclass(frozen=True)
class PoissonSampledGaussian:
    """`steps` Poisson-subsampled Gaussian steps (rate q, noise multiplier σ, sensitivity 1); `eps_error`
    is the PRV accountant's discretisation error the run was planned with."""

    q: float
    sigma: float
    steps: int
    eps_error: float = 0.01
    kind: ClassVar[str] = "prv"
    #: What the entry's details hold for this event.
    PARAMS: ClassVar[tuple[str, ...]] = ("q", "sigma", "steps")

    def check(self, what: str) -> None:
        q, sigma, steps = self.q, self.sigma, self.steps
        if not (0.0 < q <= 1.0 and sigma > 0 and math.isfinite(sigma) and int(steps) == steps and steps >= 0):
            raise ValueError(
                f"ledger entry {what!r}: need 0 < q <= 1, finite sigma > 0, integer steps >= 0; "
                f"got q={q}, sigma={sigma}, steps={steps}"
            )

    @classmethod
    def stored(
        cls, mu: float | None, details: dict[str, Any], orders: Any, values: Any, what: str
    ) -> PoissonSampledGaussian:
        missing = [k for k in cls.PARAMS if k not in details]
        if missing or mu is not None or orders is not None:
            raise ValueError(
                f"ledger entry {what!r}: a PRV entry has mu=None, no RDP curve and details {cls.PARAMS}"
                + (f" (missing: {', '.join(missing)})" if missing else "")
            )
        return cls(details["q"], details["sigma"], details["steps"], float(details.get("eps_error", 0.01)))

    def stored_fields(self) -> dict[str, Any]:
        return {"details": {"q": self.q, "sigma": self.sigma, "steps": self.steps, "eps_error": self.eps_error}}


@dataclass(frozen=True)
class RdpCurve:
    """A release satisfying (λ, values[i])-RDP at each λ = orders[i]."""

    orders: tuple[float, ...]
    values: tuple[float, ...]
    kind: ClassVar[str] = "rdp"

    def check(self, what: str) -> None:
        if len(self.orders) != len(self.values) or len(self.orders) == 0:
            raise ValueError(f"ledger entry {what!r}: rdp_orders and rdp_values must be non-empty and equally long")
        orders = np.asarray(self.orders, dtype=float)
        values = np.asarray(self.values, dtype=float)
        if np.any(~np.isfinite(orders)) or np.any(orders < 1.0):
            raise ValueError(f"ledger entry {what!r}: RDP orders must be finite and >= 1")
        if np.any(np.isnan(values)) or np.any(values < 0):
            raise ValueError(f"ledger entry {what!r}: RDP values must be >= 0 (inf allowed)")

    @classmethod
    def stored(cls, mu: float | None, details: dict[str, Any], orders: Any, values: Any, what: str) -> RdpCurve:
        if orders is None or values is None:
            raise ValueError(f"ledger entry {what!r}: an RDP entry needs rdp_orders and rdp_values")
        return cls(tuple(orders), tuple(values))

    def stored_fields(self) -> dict[str, Any]:
        return {"rdp_orders": self.orders, "rdp_values": self.values}


Event = Gaussian | PoissonSampledGaussian | RdpCurve

#: Every kind of event, by the name an entry is stored under.
EVENTS: dict[str, type] = {cls.kind: cls for cls in (Gaussian, PoissonSampledGaussian, RdpCurve)}
