"""The privacy ledger: every release of a run, composed in one place.

Each entry records what happened: one mechanism event (`dphpo.privacy.events`: a μ-GDP Gaussian, a
Poisson-subsampled Gaussian run, an RDP curve) with its parameters, the reason (`what`, `details`)
and `count` identical repetitions. Every ε that dphpo reports comes from `Ledger.total`, which hands
the events to the first accountant of `dphpo.privacy.composition.COMPOSITIONS` that reads them all:
exact GDP for Gaussians alone, prv-accountant where Poisson-subsampled runs join them, RDP otherwise.
An entry is stored as it always was ("mechanism" names the event's kind), so old result files read.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import brentq

from dphpo.errors import InfeasibleBudgetError
from dphpo.privacy.composition import compose
from dphpo.privacy.composition import rdp as rdp_composition
from dphpo.privacy.composition.gdp import composed_mu
from dphpo.privacy.events import EVENTS, Event, Gaussian, PoissonSampledGaussian, RdpCurve
from dphpo.privacy.gdp import eps_from_mu, mu_from_eps

GDP = Gaussian.kind
RDP = RdpCurve.kind
PRV = PoissonSampledGaussian.kind
MECHANISMS = tuple(EVENTS)
#: What a PRV entry's details must hold: the Poisson-subsampled Gaussian of one run.
PRV_PARAMS = PoissonSampledGaussian.PARAMS


@dataclass(frozen=True)
class LedgerEntry:
    """One release (or `count` identical releases): its event, stored in the fields a result file has
    always held — "gdp": `mu`; "rdp": `rdp_orders`/`rdp_values`; "prv": q, σ, steps (and eps_error)
    in `details`. `event` is the mechanism the fields describe; every accountant reads that."""

    what: str
    mu: float | None
    count: int = 1
    mechanism: str = GDP
    details: dict[str, Any] = field(default_factory=dict)
    rdp_orders: tuple[float, ...] | None = None
    rdp_values: tuple[float, ...] | None = None
    event: Event = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.mechanism not in EVENTS:
            raise ValueError(f"ledger entry {self.what!r}: mechanism must be one of {tuple(EVENTS)}, got {self.mechanism!r}")
        if self.count < 0:
            raise ValueError(f"ledger entry {self.what!r}: count must be >= 0, got {self.count}")
        event = EVENTS[self.mechanism].stored(self.mu, self.details, self.rdp_orders, self.rdp_values, self.what)
        event.check(self.what)
        object.__setattr__(self, "event", event)

    @classmethod
    def of(cls, what: str, event: Event, count: int = 1, details: dict[str, Any] | None = None) -> LedgerEntry:
        """The entry recording `event` (`count` times) for the reason `what`; `details` are the caller's notes,
        and where one names a field of the event (e.g. `sigma`), the event's value is the one recorded."""
        stored = event.stored_fields()
        return cls(
            what=what,
            mu=stored.get("mu"),
            count=int(count),
            mechanism=event.kind,
            details=dict(details or {}) | stored.get("details", {}),
            rdp_orders=stored.get("rdp_orders"),
            rdp_values=stored.get("rdp_values"),
        )

    @classmethod
    def rdp(
        cls,
        what: str,
        orders: Sequence[float],
        values: Sequence[float],
        count: int = 1,
        details: dict[str, Any] | None = None,
    ) -> LedgerEntry:
        """An RDP entry from a curve (values at orders)."""
        curve = RdpCurve(tuple(float(o) for o in orders), tuple(float(v) for v in values))
        return cls.of(what, curve, count, details)

    @classmethod
    def prv(
        cls,
        what: str,
        q: float,
        sigma: float,
        steps: int,
        eps_error: float = 0.01,
        count: int = 1,
        details: dict[str, Any] | None = None,
    ) -> LedgerEntry:
        """A PRV entry: `steps` Poisson-subsampled Gaussian steps (rate q, noise multiplier σ)."""
        run = PoissonSampledGaussian(float(q), float(sigma), int(steps), float(eps_error))
        return cls.of(what, run, count, details)

    @property
    def counted(self) -> tuple[Event, int]:
        """(event, count): what an accountant reads."""
        return self.event, self.count

    @property
    def mu_total(self) -> float | None:
        """μ of the `count` releases composed (None unless the event is Gaussian)."""
        return None if self.mu is None else self.mu * math.sqrt(self.count)

    def rdp_total_at(self, orders: np.ndarray) -> np.ndarray:
        """RDP of the `count` releases composed, at `orders` (upper bound between grid points)."""
        return rdp_composition.event_rdp(self.event, self.count, np.asarray(orders, dtype=float))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "what": self.what,
            "mu": self.mu,
            "count": self.count,
            "mechanism": self.mechanism,
            "details": dict(self.details),
        }
        if self.mechanism == RDP:
            out["rdp_orders"] = list(self.rdp_orders)
            out["rdp_values"] = list(self.rdp_values)
        out["mu_total"] = self.mu_total
        return out

    @classmethod
    def from_dict(cls, e: dict[str, Any]) -> LedgerEntry:
        mechanism = e.get("mechanism", GDP)
        orders, values = e.get("rdp_orders"), e.get("rdp_values")
        return cls(
            what=e["what"],
            mu=e.get("mu"),
            count=e.get("count", 1),
            mechanism=mechanism,
            details=e.get("details", {}),
            # float("inf") reads io.write_json's "inf"
            rdp_orders=None if orders is None else tuple(float(o) for o in orders),
            rdp_values=None if values is None else tuple(float(v) for v in values),
        )


class Ledger:
    """An ordered list of releases; `total(delta)` is the (ε, δ) of all of them composed."""

    def __init__(self, entries: Iterable[LedgerEntry] = ()) -> None:
        self.entries: list[LedgerEntry] = list(entries)

    def add(self, what: str, mu: float, count: int = 1, **details: Any) -> LedgerEntry:
        """Record `count` μ-GDP releases."""
        if not (mu >= 0 and math.isfinite(mu)):
            raise ValueError(f"ledger entry {what!r}: mu must be finite and >= 0, got {mu}")
        if count < 0:
            raise ValueError(f"ledger entry {what!r}: count must be >= 0, got {count}")
        entry = LedgerEntry(what=what, mu=float(mu), count=int(count), details=details)
        self.entries.append(entry)
        return entry

    def add_rdp(
        self, what: str, orders: Sequence[float], values: Sequence[float], count: int = 1, **details: Any
    ) -> LedgerEntry:
        """Record `count` releases, each satisfying (λ, values[i])-RDP at λ = orders[i]."""
        return self.append(LedgerEntry.rdp(what, orders, values, count=count, details=details))

    def append(self, entry: LedgerEntry) -> LedgerEntry:
        self.entries.append(entry)
        return entry

    def extend(self, other: Ledger) -> Ledger:
        self.entries.extend(other.entries)
        return self

    def copy(self) -> Ledger:
        return Ledger(self.entries)

    @property
    def events(self) -> list[tuple[Event, int]]:
        """(event, count) of every entry: what the accountants read."""
        return [e.counted for e in self.entries]

    @property
    def is_gdp(self) -> bool:
        """True when every entry is a Gaussian event (the total is then an exact GDP composition)."""
        return all(isinstance(e.event, Gaussian) for e in self.entries)

    @property
    def mu(self) -> float:
        """μ of all releases composed; defined only for an all-Gaussian ledger."""
        if not self.is_gdp:
            raise ValueError("this ledger holds RDP entries: it has no single mu; use total(delta)")
        return composed_mu(self.events)

    def rdp_curve(self, orders: Sequence[float] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(orders, RDP of every release composed) — Gaussians enter as λμ²/2, subsampled runs as their RDP."""
        return rdp_composition.curve(self.events, orders)

    def total(self, delta: float, *, rdp_conversion: str = "tight") -> dict[str, Any]:
        """Total (ε, δ) of every release composed, by the first accountant of
        `dphpo.privacy.composition.COMPOSITIONS` that reads every event: exact GDP ("gdp_closed_form")
        for Gaussians alone; prv-accountant's upper bound ("prv", the looser RDP bound beside it as
        `rdp_eps`) with Poisson-subsampled runs; RDP ("rdp", with its orders) with any RDP curve."""
        return compose(self.events, delta, rdp_conversion=rdp_conversion)

    def to_dict(self, delta: float) -> dict[str, Any]:
        return {"total": self.total(delta), "entries": [e.to_dict() for e in self.entries]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Ledger:
        return cls(LedgerEntry.from_dict(e) for e in data["entries"])


def _describe(entry: LedgerEntry, delta: float) -> str:
    if entry.mechanism == GDP:
        alone = eps_from_mu(entry.mu, delta) if entry.mu > 0 else 0.0
        return f"  - {entry.what}: {entry.count} x mu={entry.mu:.4g} (eps alone {alone:.4g})"
    if entry.mechanism == PRV:
        d, alone = entry.details, Ledger([entry]).total(delta)["eps"]
        return (
            f"  - {entry.what}: {entry.count} x {d['steps']} subsampled Gaussian steps (q={d['q']:.4g}, "
            f"sigma={d['sigma']:.4g}; eps of all {entry.count} {alone:.4g})"
        )
    alone = Ledger([entry]).total(delta)["eps"]
    return f"  - {entry.what}: {entry.count} x RDP curve (eps of all {entry.count} {alone:.4g})"


def infeasible_error(
    total_eps: float, delta: float, spent: Ledger, what: str, target_desc: str, spent_desc: str
) -> InfeasibleBudgetError:
    lines = [_describe(e, delta) for e in spent.entries]
    return InfeasibleBudgetError(
        f"infeasible privacy plan: target (eps={total_eps:g}, delta={delta:g}){target_desc}, "
        f"but the {len(spent.entries)} planned release group(s) before the {what} already spend {spent_desc}:\n"
        + "\n".join(lines)
        + "\nLower the stage budgets, the number of trials or the selection releases, or raise the target."
    )


def plan_final_mu(total_eps: float, delta: float, spent: Ledger, what: str = "final run") -> float:
    """μ left for the final release so that `spent` plus it is exactly (total_eps, δ)-DP.

    All-GDP ledger: μ_f = √(μ(ε, δ)² − Σ μ_i²) (Panda et al., Theorem 4.1). With RDP entries: the μ_f at
    which `Ledger.total` of spent + final equals total_eps (root finding; the total is increasing in
    μ_f). Raises InfeasibleBudgetError, naming every planned release, when the plan alone already
    spends the whole budget.
    """
    if not (total_eps > 0 and math.isfinite(total_eps)):
        raise ValueError(f"total_eps must be a positive finite number, got {total_eps}")
    if spent.is_gdp:
        mu_total = mu_from_eps(total_eps, delta)
        mu_spent = spent.mu
        remaining_sq = mu_total**2 - mu_spent**2
        if remaining_sq <= 0:
            spent_eps = eps_from_mu(mu_spent, delta) if mu_spent > 0 else 0.0
            raise infeasible_error(
                total_eps, delta, spent, what, f" is mu={mu_total:.4g}-GDP", f"mu={mu_spent:.4g} (eps={spent_eps:.4g})"
            )
        return math.sqrt(remaining_sq)

    spent_eps = spent.total(delta)["eps"]
    if spent_eps >= total_eps:
        raise infeasible_error(total_eps, delta, spent, what, "", f"eps={spent_eps:.4g} (RDP accounting)")

    def excess(mu_f: float) -> float:
        trial = spent.copy()
        trial.add(what, mu_f)
        return trial.total(delta)["eps"] - total_eps

    # PRV totals are numerical (eps_error ~ 1e-2) and cost ~1 s per mechanism: a coarser root suffices
    rtol = 1e-4 if any(e.mechanism == PRV for e in spent.entries) else 1e-13
    hi = max(mu_from_eps(total_eps, delta), 1e-6)
    while excess(hi) < 0:
        hi *= 2.0
    mu_f = float(brentq(excess, 0.0, hi, xtol=1e-15, rtol=rtol, maxiter=500))
    while excess(mu_f) > 0:  # land on the feasible side of the root
        mu_f *= 1.0 - max(1e-12, rtol)
    return mu_f
