"""The privacy ledger: every release of a run, composed in one place.

Each entry is one data-dependent release (a training run, a noisy score, a final run, a whole
tuning procedure) or `count` identical ones, with its cost as μ-GDP (mechanism "gdp"), as an RDP
curve on a grid of orders (mechanism "rdp"; Papernot–Steinke tuning, RDP-accounted runs) or as the
parameters (q, σ, T) of a Poisson-subsampled Gaussian run for the PRV accountant (mechanism "prv").
Every ε that dphpo reports comes from `Ledger.total`, which picks the composition:
- only GDP entries: exact GDP composition;
- GDP and PRV entries: all composed numerically by prv-accountant (GDP entries as one Gaussian);
- any RDP entry: everything composed in RDP (a PRV entry enters as its subsampled-Gaussian RDP curve).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import brentq

from dphpo.errors import InfeasibleBudgetError
from dphpo.privacy.gdp import compose_mu, eps_from_mu, mu_from_eps
from dphpo.privacy.prv import compose_prv
from dphpo.privacy.rdp import DEFAULT_ORDERS, SUBSAMPLED_ORDERS, rdp_at, rdp_to_dp, subsampled_gaussian_rdp

GDP = "gdp"
RDP = "rdp"
PRV = "prv"
MECHANISMS = (GDP, RDP, PRV)
#: What a PRV entry's details must hold: the Poisson-subsampled Gaussian of one run.
PRV_PARAMS = ("q", "sigma", "steps")

_GDP_COMPOSITION = "adaptive GDP composition, mu_total = sqrt(sum mu_i^2) (Dong et al. 2022, Cor. 3.3)"
_RDP_COMPOSITION = (
    "adaptive RDP composition (Mironov 2017, Prop. 1): curves summed order by order; GDP entries as "
    "eps(lambda) = lambda mu^2 / 2; PRV entries as the RDP of their Poisson-subsampled Gaussian (Mironov et al. "
    "2019); a curve is bounded between its grid orders by its value at the next larger grid order (RDP is "
    "non-decreasing in the order)"
)
_PRV_COMPOSITION = (
    "numerical composition of privacy random variables (Gopi, Lee & Wutschitz 2021; prv-accountant, upper bound): "
    "each PRV entry a Poisson-subsampled Gaussian self-composed T x count times, all GDP entries as one Gaussian "
    "mechanism of noise multiplier 1/mu (mu = sqrt(sum mu_i^2), exact for Gaussians)"
)
_RDP_CONVERSION = {
    "tight": "eps = min_lambda rdp + log((lambda-1)/lambda) - (log delta + log lambda)/(lambda-1) "
    "(Balle et al. 2020, Thm. 21; Canonne, Kamath & Steinke 2020)",
    "classic": "eps = min_lambda rdp + log(1/delta)/(lambda-1) (Mironov 2017, Prop. 3)",
}


@dataclass(frozen=True)
class LedgerEntry:
    """One release (or `count` identical releases) and its privacy cost.

    mechanism "gdp": the release is μ-GDP (`mu`). mechanism "rdp": the release satisfies
    (λ, rdp_values[i])-RDP at each λ = rdp_orders[i]; `mu` is None. mechanism "prv": `steps`
    Poisson-subsampled Gaussian steps (sampling rate `q`, noise multiplier `sigma`, sensitivity 1),
    given in `details` with the PRV accountant's `eps_error`; `mu` is None. `count` identical releases
    compose to √count·μ (GDP), count × the curve (RDP) or count·T steps (PRV).
    """

    what: str
    mu: float | None
    count: int = 1
    mechanism: str = GDP
    details: dict[str, Any] = field(default_factory=dict)
    rdp_orders: tuple[float, ...] | None = None
    rdp_values: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if self.mechanism not in MECHANISMS:
            raise ValueError(
                f"ledger entry {self.what!r}: mechanism must be one of {MECHANISMS}, got {self.mechanism!r}"
            )
        if self.count < 0:
            raise ValueError(f"ledger entry {self.what!r}: count must be >= 0, got {self.count}")
        if self.mechanism == GDP:
            if self.mu is None or not (self.mu >= 0 and math.isfinite(self.mu)):
                raise ValueError(f"ledger entry {self.what!r}: mu must be finite and >= 0, got {self.mu}")
            if self.rdp_orders is not None or self.rdp_values is not None:
                raise ValueError(f"ledger entry {self.what!r}: a GDP entry carries no RDP curve")
        elif self.mechanism == PRV:
            missing = [k for k in PRV_PARAMS if k not in self.details]
            if missing or self.mu is not None or self.rdp_orders is not None:
                raise ValueError(
                    f"ledger entry {self.what!r}: a PRV entry has mu=None, no RDP curve and details {PRV_PARAMS}"
                    + (f" (missing: {', '.join(missing)})" if missing else "")
                )
            q, sigma, steps = (self.details[k] for k in PRV_PARAMS)
            if not (0.0 < q <= 1.0 and sigma > 0 and math.isfinite(sigma) and int(steps) == steps and steps >= 0):
                raise ValueError(
                    f"ledger entry {self.what!r}: need 0 < q <= 1, finite sigma > 0, integer steps >= 0; "
                    f"got q={q}, sigma={sigma}, steps={steps}"
                )
        else:
            if self.rdp_orders is None or self.rdp_values is None:
                raise ValueError(f"ledger entry {self.what!r}: an RDP entry needs rdp_orders and rdp_values")
            if len(self.rdp_orders) != len(self.rdp_values) or len(self.rdp_orders) == 0:
                raise ValueError(
                    f"ledger entry {self.what!r}: rdp_orders and rdp_values must be non-empty and equally long"
                )
            orders = np.asarray(self.rdp_orders, dtype=float)
            values = np.asarray(self.rdp_values, dtype=float)
            if np.any(~np.isfinite(orders)) or np.any(orders < 1.0):
                raise ValueError(f"ledger entry {self.what!r}: RDP orders must be finite and >= 1")
            if np.any(np.isnan(values)) or np.any(values < 0):
                raise ValueError(f"ledger entry {self.what!r}: RDP values must be >= 0 (inf allowed)")

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
        return cls(
            what=what,
            mu=None,
            count=int(count),
            mechanism=RDP,
            details=dict(details or {}),
            rdp_orders=tuple(float(o) for o in orders),
            rdp_values=tuple(float(v) for v in values),
        )

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
        params = {"q": float(q), "sigma": float(sigma), "steps": int(steps), "eps_error": float(eps_error)}
        return cls(what=what, mu=None, count=int(count), mechanism=PRV, details=dict(details or {}) | params)

    @property
    def mu_total(self) -> float | None:
        """μ of the `count` releases composed (None for an RDP entry)."""
        return None if self.mu is None else self.mu * math.sqrt(self.count)

    def rdp_total_at(self, orders: np.ndarray) -> np.ndarray:
        """RDP of the `count` releases composed, at `orders` (upper bound between grid points)."""
        orders = np.asarray(orders, dtype=float)
        if self.mechanism == GDP:
            return orders * (self.mu_total**2 / 2.0)
        if self.count == 0:
            return np.zeros_like(orders)
        if self.mechanism == PRV:
            d = self.details
            return subsampled_gaussian_rdp(d["q"], d["sigma"], int(d["steps"]) * self.count, orders)
        return self.count * rdp_at(self.rdp_orders, self.rdp_values, orders)

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
        if mechanism == PRV:
            return cls(what=e["what"], mu=None, count=e.get("count", 1), mechanism=PRV, details=e.get("details", {}))
        if mechanism == RDP:
            return cls.rdp(
                e["what"],
                [float(o) for o in e["rdp_orders"]],
                [float(v) for v in e["rdp_values"]],  # float("inf") reads io.write_json's "inf"
                count=e.get("count", 1),
                details=e.get("details", {}),
            )
        return cls(
            what=e["what"],
            mu=e["mu"],
            count=e.get("count", 1),
            mechanism=mechanism,
            details=e.get("details", {}),
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
        entry = LedgerEntry.rdp(what, orders, values, count=count, details=details)
        self.entries.append(entry)
        return entry

    def append(self, entry: LedgerEntry) -> LedgerEntry:
        self.entries.append(entry)
        return entry

    def extend(self, other: Ledger) -> Ledger:
        self.entries.extend(other.entries)
        return self

    def copy(self) -> Ledger:
        return Ledger(self.entries)

    @property
    def is_gdp(self) -> bool:
        """True when every entry is GDP (the total is then an exact GDP composition)."""
        return all(e.mechanism == GDP for e in self.entries)

    @property
    def mu(self) -> float:
        """μ of all releases composed; defined only for an all-GDP ledger."""
        if not self.is_gdp:
            raise ValueError("this ledger holds RDP entries: it has no single mu; use total(delta)")
        return compose_mu(e.mu_total for e in self.entries)

    def rdp_orders(self) -> np.ndarray:
        """The orders on which a ledger with RDP entries is composed: the union of the entries' grids
        (PRV entries: the integer grid of subsampled mechanisms)."""
        grids = [np.asarray(e.rdp_orders, dtype=float) for e in self.entries if e.mechanism == RDP]
        if any(e.mechanism == PRV for e in self.entries):
            grids.append(SUBSAMPLED_ORDERS)
        if not grids:
            return DEFAULT_ORDERS.copy()
        return np.unique(np.concatenate(grids))

    def rdp_curve(self, orders: Sequence[float] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(orders, RDP of every release composed) — GDP entries enter as λμ²/2, PRV entries as their RDP."""
        orders = self.rdp_orders() if orders is None else np.asarray(orders, dtype=float)
        total = np.zeros_like(orders)
        for e in self.entries:
            total = total + e.rdp_total_at(orders)
        return orders, total

    def total(self, delta: float, *, rdp_conversion: str = "tight") -> dict[str, Any]:
        """Total (ε, δ) of every release composed.

        All-GDP ledger: exact GDP composition (accountant "gdp_closed_form"). GDP and PRV entries only:
        prv-accountant's upper bound over all of them (accountant "prv"; the looser RDP bound is
        recorded beside it as `rdp_eps`). Any RDP entry: every entry as an RDP curve, summed, converted
        to (ε, δ) (accountant "rdp"; the orders are recorded).
        """
        if self.is_gdp:
            mu = self.mu
            return {
                "eps": eps_from_mu(mu, delta) if mu > 0 else 0.0,
                "delta": delta,
                "mu": mu,
                "accountant": "gdp_closed_form",
                "composition": _GDP_COMPOSITION,
            }
        if not any(e.mechanism == RDP for e in self.entries):
            return self._prv_total(delta, rdp_conversion)
        return self._rdp_total(delta, rdp_conversion)

    def _prv_total(self, delta: float, rdp_conversion: str) -> dict[str, Any]:

        gauss_sq = sum(e.mu_total**2 for e in self.entries if e.mechanism == GDP)
        runs: dict[tuple[float, float], int] = {}  # runs sharing one subsampled Gaussian add their steps
        for e in self.entries:
            if e.mechanism == PRV and e.count > 0 and e.details["steps"] > 0:
                key = (float(e.details["q"]), float(e.details["sigma"]))
                runs[key] = runs.get(key, 0) + int(e.details["steps"]) * e.count
        eps_error = min(float(e.details.get("eps_error", 0.01)) for e in self.entries if e.mechanism == PRV)
        bounds = compose_prv(tuple(sorted((q, s, t) for (q, s), t in runs.items())), math.sqrt(gauss_sq), delta, eps_error)
        return {
            "eps": bounds["eps_upper"],
            "delta": delta,
            "mu": None,
            "accountant": bounds["accountant"],
            "composition": _PRV_COMPOSITION,
            "prv": bounds,
            "rdp_eps": self._rdp_total(delta, rdp_conversion)["eps"],
        }

    def _rdp_total(self, delta: float, rdp_conversion: str) -> dict[str, Any]:
        if rdp_conversion not in _RDP_CONVERSION:
            raise ValueError(f"rdp_conversion must be one of {sorted(_RDP_CONVERSION)}, got {rdp_conversion!r}")
        orders, curve = self.rdp_curve()
        eps, order = rdp_to_dp(orders, curve, delta, conversion=rdp_conversion, return_order=True)
        return {
            "eps": eps,
            "delta": delta,
            "mu": None,
            "accountant": "rdp",
            "composition": _RDP_COMPOSITION,
            "conversion": _RDP_CONVERSION[rdp_conversion],
            "optimal_order": order,
            "orders": [float(o) for o in orders],
        }

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


def plan_stages(
    total_eps: float,
    delta: float,
    *,
    n_trials: int,
    stage_eps: Sequence[float],
    selection_mu: float = 0.0,
    selections_per_stage: int | None = None,
) -> dict[str, Any]:
    """Budget plan of the linear scaling rule (Panda et al., Algorithms 2–3; docs/methods.md §2).

    Each stage k has `n_trials` trials of standalone budget stage_eps[k] (μ_k = μ(stage_eps[k], δ)) and
    `selections_per_stage` (default n_trials) noisy score releases of μ = selection_mu; the final run
    gets μ_f = √(μ(total_eps)² − n Σ_k μ_k² − Σ μ_selection²). Returns stage_mu, selection_mu,
    final_mu, final_eps (the final run's standalone ε), total_eps (recomputed by `Ledger.total`, equal to
    the target) and the ledger of the search releases. Raises InfeasibleBudgetError (before any training)
    when the search alone spends the budget.
    """
    if not (isinstance(n_trials, (int, np.integer)) and n_trials >= 1):
        raise ValueError(f"n_trials must be an integer >= 1, got {n_trials!r}")
    stage_eps = [float(e) for e in stage_eps]
    if not stage_eps:
        raise ValueError("stage_eps must name at least one stage budget")
    for k, e in enumerate(stage_eps, start=1):
        if not (e > 0 and math.isfinite(e)):
            raise ValueError(f"stage_eps[{k - 1}] (stage {k}) must be a positive finite number, got {e}")
    if not (selection_mu >= 0 and math.isfinite(selection_mu)):
        raise ValueError(f"selection_mu must be finite and >= 0, got {selection_mu}")
    n_sel = n_trials if selections_per_stage is None else selections_per_stage
    if not (isinstance(n_sel, (int, np.integer)) and n_sel >= 0):
        raise ValueError(f"selections_per_stage must be an integer >= 0, got {selections_per_stage!r}")

    ledger = Ledger()
    stage_mu = []
    for k, e in enumerate(stage_eps, start=1):
        mu_k = mu_from_eps(e, delta)
        stage_mu.append(mu_k)
        ledger.add(f"stage {k} trials", mu_k, count=n_trials, stage=k, standalone_eps=e)
        if selection_mu > 0 and n_sel > 0:
            ledger.add(f"stage {k} noisy selection scores", selection_mu, count=n_sel, stage=k)
    final_mu = plan_final_mu(total_eps, delta, ledger, what="final run")
    check = ledger.copy()
    check.add("final run", final_mu)
    return {
        "delta": delta,
        "n_trials": int(n_trials),
        "stage_eps": stage_eps,
        "stage_mu": stage_mu,
        "selection_mu": float(selection_mu),
        "selections_per_stage": int(n_sel),
        "final_mu": final_mu,
        "final_eps": eps_from_mu(final_mu, delta),
        "total_eps": check.total(delta)["eps"],
        "ledger": ledger,
    }
