"""The privacy ledger: every release of a run, composed in one place.

Each entry is one data-dependent release (a training run, a noisy score, a final run) or `count`
identical ones. Every ε that dphpo reports comes from `Ledger.total`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

from dphpo.errors import InfeasibleBudgetError
from dphpo.privacy.gdp import compose_mu, eps_from_mu, mu_from_eps

GDP = "gdp"


@dataclass(frozen=True)
class LedgerEntry:
    """One release (or `count` identical releases) and its privacy cost as μ-GDP."""

    what: str
    mu: float
    count: int = 1
    mechanism: str = GDP
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def mu_total(self) -> float:
        return self.mu * math.sqrt(self.count)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"mu_total": self.mu_total}


class Ledger:
    """An ordered list of releases; `total(delta)` is the (ε, δ) of all of them composed."""

    def __init__(self, entries: Iterable[LedgerEntry] = ()) -> None:
        self.entries: list[LedgerEntry] = list(entries)

    def add(self, what: str, mu: float, count: int = 1, **details: Any) -> LedgerEntry:
        if not (mu >= 0 and math.isfinite(mu)):
            raise ValueError(f"ledger entry {what!r}: mu must be finite and >= 0, got {mu}")
        if count < 0:
            raise ValueError(f"ledger entry {what!r}: count must be >= 0, got {count}")
        entry = LedgerEntry(what=what, mu=float(mu), count=int(count), details=details)
        self.entries.append(entry)
        return entry

    def extend(self, other: "Ledger") -> "Ledger":
        self.entries.extend(other.entries)
        return self

    def copy(self) -> "Ledger":
        return Ledger(self.entries)

    @property
    def mu(self) -> float:
        return compose_mu(e.mu_total for e in self.entries)

    def total(self, delta: float) -> dict[str, Any]:
        """Total (ε, δ) of every release composed (exact GDP composition)."""
        mu = self.mu
        return {
            "eps": eps_from_mu(mu, delta) if mu > 0 else 0.0,
            "delta": delta,
            "mu": mu,
            "accountant": "gdp_closed_form",
            "composition": "adaptive GDP composition, mu_total = sqrt(sum mu_i^2) (Dong et al. 2022, Cor. 3.3)",
        }

    def to_dict(self, delta: float) -> dict[str, Any]:
        return {"total": self.total(delta), "entries": [e.to_dict() for e in self.entries]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Ledger":
        return cls(
            LedgerEntry(
                what=e["what"],
                mu=e["mu"],
                count=e.get("count", 1),
                mechanism=e.get("mechanism", GDP),
                details=e.get("details", {}),
            )
            for e in data["entries"]
        )


def plan_final_mu(total_eps: float, delta: float, spent: Ledger, what: str = "final run") -> float:
    """μ left for the final release so that `spent` plus it is exactly (total_eps, δ)-DP.

    μ_f = √(μ(ε, δ)² − Σ μ_i²) (seed 000, Theorem 4.1). Raises InfeasibleBudgetError, naming
    every planned release, when the plan alone already spends the whole budget.
    """
    mu_total = mu_from_eps(total_eps, delta)
    mu_spent = spent.mu
    remaining_sq = mu_total**2 - mu_spent**2
    if remaining_sq <= 0:
        lines = [
            f"  - {e.what}: {e.count} x mu={e.mu:.4g} (eps alone {eps_from_mu(e.mu, delta) if e.mu > 0 else 0:.4g})"
            for e in spent.entries
        ]
        raise InfeasibleBudgetError(
            f"infeasible privacy plan: target (eps={total_eps:g}, delta={delta:g}) is mu={mu_total:.4g}-GDP, "
            f"but the planned releases before the {what} already spend mu={mu_spent:.4g} "
            f"(eps={eps_from_mu(mu_spent, delta):.4g}):\n"
            + "\n".join(lines)
            + "\nLower the stage budgets, the number of trials or the selection releases, or raise the target."
        )
    return math.sqrt(remaining_sq)
