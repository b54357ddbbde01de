"""How one training run is accounted: the one home of σ ↔ ε for every trainer, method, CLI and provenance.

A run is `steps` noisy steps at noise multiplier σ (noise std σ·C on a sum of C-clipped per-example
gradients). Four accountants (docs/methods.md §0, Panda et al. Table 15):
- `GdpAccountant` (name "gdp", the method): full batch, exactly μ-GDP with μ = factor·√T/σ (Dong,
  Roth & Su 2022; factor 2 for replace-one adjacency, which doubles the sensitivity of a sum).
- `RdpGaussianAccountant` ("rdp", full batch): the same Gaussian read through its RDP curve λμ²/2 and
  converted to (ε, δ) by RDP — looser; the "PLV vs RDP" ablation.
- `RdpSubsampledAccountant` ("rdp", Poisson sampling rate q < 1): the RDP of the subsampled Gaussian
  (Mironov, Talwar & Zhang 2019; dp_accounting's formula).
- `PrvAccountant` ("prv", any q): prv-accountant's upper bound for the Poisson-subsampled Gaussian
  (Gopi, Lee & Wutschitz 2021); the ledger composes its entries with GDP entries numerically.
Each gives the ledger entry of a run, its standalone ε, the smallest σ for a standalone budget and
the σ of a last run that fills what a ledger leaves of a total budget; `describe()` is what
provenance records. Each is also a `BudgetPlanner` (the methods' plans in μ at δ) and says how a run
planned at a Gaussian budget μ is calibrated and recorded (`sigma_at`, `planned_entry`, ...): exactly
at μ for exact GDP, calibrated to its standalone ε for the others. `make_accountant` builds the one
`REGISTRY` names; `accountant_from_config` builds the one a config asks for.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from dphpo.errors import ConfigError
from dphpo.privacy.calibrate import bisect_log, calibrate_log_sigma, smallest_sigma
from dphpo.privacy.composition import COMPOSITIONS, Composition
from dphpo.privacy.events import EVENTS
from dphpo.privacy.gdp import eps_from_mu, mu_from_eps, mu_of_steps, sigma_for_steps
from dphpo.privacy.ledger import Ledger, LedgerEntry, infeasible_error
from dphpo.privacy.planning import BudgetPlanner
from dphpo.privacy.prv import clt_sigma, prv_sigma_for
from dphpo.privacy.rdp import gdp_rdp, rdp_to_dp, subsampled_gaussian_rdp

ADJACENCIES = ("add_remove", "replace_one")
#: The largest noise multiplier calibration tries: a run of σ = 1e12 costs ε ≈ 0 under every accountant.
SIGMA_CEILING = 1e12
# Orders of the RDP curve of a full-batch Gaussian run: λ − 1 from 1e-2 to 1e4.
RUN_RDP_ORDERS: np.ndarray = np.unique(np.concatenate([1.0 + np.geomspace(1e-2, 1e4, 240), np.arange(2.0, 65.0)]))
# Integer orders of a Poisson-subsampled run: 2..128, then 50 up to 8192 — a fifth of the cost of
# the library default; beyond λ = 8192 (standalone ε below ~0.005) the bound is looser, never invalid.
MINIBATCH_RDP_ORDERS: np.ndarray = np.unique(np.concatenate([np.arange(2.0, 129.0), np.round(np.geomspace(128, 8192, 50))]))


@runtime_checkable
class RunAccountant(Protocol):
    """How ONE training run of `steps` steps at noise multiplier σ is accounted (`dphpo.train.protocol`
    uses it): the event it records and the σ that meets a budget. A new accountant writes `entry`;
    `_Accountant` derives the rest from the ledger."""

    name: str
    delta: float

    def describe(self) -> dict: ...

    def entry(self, what: str, sigma: float, steps: int, details: dict | None = None) -> LedgerEntry: ...

    def standalone_eps(self, sigma: float, steps: int) -> float: ...

    def sigma_for_eps(self, eps: float, steps: int) -> float: ...

    def sigma_for_remaining(self, spent: Ledger, total_eps: float, steps: int) -> float: ...


@runtime_checkable
class PlanningAccountant(RunAccountant, Protocol):
    """A run accountant with the planning calls of the HPO methods: the budget plans of `BudgetPlanner`
    (its own object, `dphpo.privacy.planning`) and how a run planned at a Gaussian budget μ is
    calibrated and recorded — exactly at μ where runs are exact GDP, calibrated to its standalone ε
    otherwise. `_Accountant` provides them all for any `entry`."""

    exact_gdp: bool

    def mu_for_eps(self, eps: float) -> float: ...

    def full_budget_mu(self, target_eps: float) -> float: ...

    def remaining_mu(self, total_eps: float, spent: Ledger, what: str = "final run") -> float: ...

    def runs_mu(self, target_eps: float, n_runs: int, selection_mu: float, what: str) -> float: ...

    def gaussian_eps(self, mu: float) -> float: ...

    def run_mu(self, sigma: float, steps: int) -> float | None: ...

    def sigma_at(self, mu: float, eps: float, steps: int) -> float: ...

    def planned_mu(self, mu: float) -> float | None: ...

    def planned_eps(self, mu: float, sigma: float, steps: int) -> float: ...

    def planned_entry(self, what: str, mu: float, sigma: float, steps: int, details: dict | None = None) -> LedgerEntry: ...

    def composed_eps(self, mu: float, count: int) -> float | None: ...

    def trial_accounting(self) -> dict: ...


def check_accounting(accountant: str, adjacency: str, batch_size: int | None) -> None:
    """Refuse combinations no accountant here covers, naming the config keys."""
    if accountant not in REGISTRY:
        raise ConfigError(f"privacy.accountant: expected one of {', '.join(REGISTRY)}, got {accountant!r}")
    if adjacency not in ADJACENCIES:
        raise ConfigError(f"privacy.adjacency: expected one of {', '.join(ADJACENCIES)}, got {adjacency!r}")
    if batch_size is not None and int(batch_size) < 1:
        raise ConfigError(f"training.batch_size: must be a positive integer or null, got {batch_size}")
    if batch_size is not None and adjacency != "add_remove":
        raise ConfigError(
            "training.batch_size: Poisson-subsampled runs are accounted for add/remove adjacency only; "
            "set privacy.adjacency: add_remove or training.batch_size: null"
        )


class _Accountant(BudgetPlanner):
    """What every accountant shares: standalone ε and calibration through the ledger, the budget plans
    of `BudgetPlanner`, and how a run planned at a Gaussian budget is calibrated and recorded."""

    name = ""
    formula = ""
    #: Runs are exactly μ-GDP: plans in μ are the runs' own accounting (else plans are calibrated in ε).
    exact_gdp = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.describe()})"

    def describe(self) -> dict:
        return {"name": self.name, "delta": self.delta, "formula": self.formula}

    def entry(self, what: str, sigma: float, steps: int, details: dict | None = None) -> LedgerEntry:
        raise NotImplementedError

    def standalone_eps(self, sigma: float, steps: int) -> float:
        """ε (at δ) of one run alone, as its ledger entry accounts it."""
        return float(Ledger([self.entry("run", sigma, steps)]).total(self.delta)["eps"])

    def gaussian_eps(self, mu: float) -> float:
        """ε (at δ) of a μ-Gaussian release as this accountant's family reads it (here: through RDP).
        The linear scaling rule places a final run on its fitted line by this number."""
        return float(rdp_to_dp(RUN_RDP_ORDERS, gdp_rdp(mu, RUN_RDP_ORDERS), self.delta))

    def total_with(self, spent: Ledger, sigma: float, steps: int, what: str = "final run") -> float:
        """ε of `spent` plus one more run."""
        trial = spent.copy()
        trial.append(self.entry(what, sigma, steps))
        return float(trial.total(self.delta)["eps"])

    def _start(self, steps: int) -> float:
        return math.sqrt(steps)

    def sigma_for_eps(self, eps: float, steps: int) -> float:
        """Smallest σ (bisection, at most 1e-4 above the exact value) whose run alone is (eps, δ)-DP."""
        return smallest_sigma(lambda sigma: self.standalone_eps(sigma, steps) <= eps, self._start(steps))

    def sigma_for_remaining(self, spent: Ledger, total_eps: float, steps: int) -> float:
        """Smallest σ for a last run such that `spent` plus it is (total_eps, δ)-DP (bisection)."""
        _check_remaining(spent, total_eps, self.delta)
        # composed with this run's kind (RDP beside GDP entries: RDP's looser conversion), the spent releases
        # alone may already exceed the budget: say so, naming them, not "no noise multiplier meets it"
        floor = self.total_with(spent, SIGMA_CEILING, steps)
        if floor > total_eps:
            raise infeasible_error(total_eps, self.delta, spent, "final run", "",
                                   f"eps={floor:.4g} composed as {self.name} composes them with the final run")
        return smallest_sigma(lambda sigma: self.total_with(spent, sigma, steps) <= total_eps, self._start(steps),
                              ceiling=SIGMA_CEILING)

    # A run planned at Gaussian budget μ, which alone is (eps, δ)-DP (a method's plan, `BudgetPlanner`).
    # These accountants cannot meet μ exactly: the run is calibrated to eps and accounted by its entry.

    def run_mu(self, sigma: float, steps: int) -> float | None:
        """μ of a run when it is exactly μ-GDP; None here."""
        return None

    def sigma_at(self, mu: float, eps: float, steps: int) -> float:
        """σ of a run planned at μ (alone (eps, δ)-DP): here calibrated to eps."""
        return self.sigma_for_eps(eps, steps)

    def planned_mu(self, mu: float) -> float | None:
        """μ recorded for a run planned at μ: None, the run is not μ-GDP."""
        return None

    def planned_eps(self, mu: float, sigma: float, steps: int) -> float:
        """Standalone ε of a run planned at μ and trained at σ: what its entry accounts."""
        return self.standalone_eps(sigma, steps)

    def planned_entry(self, what: str, mu: float, sigma: float, steps: int, details: dict | None = None) -> LedgerEntry:
        """Ledger entry of a run planned at μ and trained at σ: the run's own entry."""
        return self.entry(what, sigma, steps, details)

    def composed_eps(self, mu: float, count: int) -> float | None:
        """ε of `count` runs planned at μ composed: no closed form here (None)."""
        return None

    def trial_accounting(self) -> dict:
        """What a trial record adds to say how its run is accounted (nothing for exact GDP)."""
        return {"accounting": self.describe()["formula"]}


class _FullBatch(_Accountant):
    """Full-batch runs: sensitivity factor, μ = factor·√T/σ, and a last run planned in GDP."""

    def __init__(self, delta: float, adjacency: str = "add_remove") -> None:
        super().__init__(delta)
        check_accounting(self.name, adjacency, None)
        self.adjacency = adjacency

    @property
    def factor(self) -> float:
        """Replace-one adjacency moves a clipped sum by up to 2C instead of C."""
        return 2.0 if self.adjacency == "replace_one" else 1.0

    def describe(self) -> dict:
        return super().describe() | {"adjacency": self.adjacency, "sensitivity_factor": self.factor, "sample_rate": None}

    def mu(self, sigma: float, steps: int) -> float:
        """μ of `steps` full-batch steps at noise multiplier σ."""
        return self.factor * mu_of_steps(sigma, steps)

    def sigma_for_mu(self, mu: float, steps: int) -> float:
        """Noise multiplier making `steps` full-batch steps exactly μ-GDP."""
        return self.factor * math.sqrt(steps) / mu

    def _start(self, steps: int) -> float:
        return self.sigma_for_mu(1.0, steps)

    def sigma_for_remaining(self, spent: Ledger, total_eps: float, steps: int) -> float:
        """σ of the μ_f that fills the budget (`plan_final_mu`, exact for a GDP ledger), checked with
        the run's real entry; bisection when the check fails (entries of another accountant)."""
        mu_f = self.remaining_mu(total_eps, spent)
        sigma = self.sigma_for_mu(mu_f, steps)
        if self.total_with(spent, sigma, steps) <= total_eps:
            return sigma
        return super().sigma_for_remaining(spent, total_eps, steps)


class GdpAccountant(_FullBatch):
    """Full-batch runs, exactly μ-GDP: μ = factor·√T/σ (factor 2 under replace-one adjacency)."""

    name = "gdp"
    formula = "exact GDP of full-batch runs: mu = factor * sqrt(T) / sigma (Dong, Roth & Su 2022)"
    exact_gdp = True

    def entry(self, what: str, sigma: float, steps: int, details: dict | None = None) -> LedgerEntry:
        return LedgerEntry(what=what, mu=self.mu(sigma, steps), details=dict(details or {}))

    def gaussian_eps(self, mu: float) -> float:
        """ε (at δ) this accountant assigns to a μ-Gaussian release."""
        return eps_from_mu(mu, self.delta)

    def standalone_eps(self, sigma: float, steps: int) -> float:
        return self.gaussian_eps(self.mu(sigma, steps))

    def sigma_for_eps(self, eps: float, steps: int) -> float:
        return self.factor * sigma_for_steps(eps, self.delta, steps)

    # A run planned at μ is trained at exactly μ: σ, ε and the entry follow from μ in closed form.

    def run_mu(self, sigma: float, steps: int) -> float:
        return self.mu(sigma, steps)

    def sigma_at(self, mu: float, eps: float, steps: int) -> float:
        return self.sigma_for_mu(mu, steps)

    def planned_mu(self, mu: float) -> float:
        return mu

    def planned_eps(self, mu: float, sigma: float, steps: int) -> float:
        return eps_from_mu(mu, self.delta)

    def planned_entry(self, what: str, mu: float, sigma: float, steps: int, details: dict | None = None) -> LedgerEntry:
        # the planned μ itself (factor·√T/σ would differ from it in the last bits)
        return LedgerEntry(what=what, mu=float(mu), details=dict(details or {}))

    def composed_eps(self, mu: float, count: int) -> float:
        return eps_from_mu(mu * math.sqrt(count), self.delta)

    def trial_accounting(self) -> dict:
        return {}


class RdpGaussianAccountant(_FullBatch):
    """Full-batch runs read through the Gaussian's RDP curve λμ²/2 (Panda et al. Table 15, "RDP")."""

    name = "rdp"
    formula = "RDP of the Gaussian mechanism (lambda mu^2 / 2), converted to (eps, delta) by RDP"

    def entry(self, what: str, sigma: float, steps: int, details: dict | None = None) -> LedgerEntry:
        info = {"accounting": self.formula, "sample_rate": None, "batch_size": None}
        values = gdp_rdp(self.mu(sigma, steps), RUN_RDP_ORDERS)
        return LedgerEntry.rdp(what, RUN_RDP_ORDERS, values, details=dict(details or {}) | info)


class RdpSubsampledAccountant(_Accountant):
    """Poisson-subsampled runs (rate q < 1) accounted by the RDP of the subsampled Gaussian."""

    name = "rdp"

    def __init__(self, delta: float, sample_rate: float, batch_size: int | None = None) -> None:
        super().__init__(delta)
        if not 0.0 < sample_rate < 1.0:
            raise ValueError(f"sample_rate must lie in (0, 1), got {sample_rate}")
        self.q, self.batch_size = float(sample_rate), batch_size

    @property
    def formula(self) -> str:
        batch = f"batch size {self.batch_size}" if self.batch_size is not None else f"sample rate {self.q:g}"
        return f"RDP of the Poisson-subsampled Gaussian (Mironov et al. 2019), {batch}"

    def describe(self) -> dict:
        return super().describe() | {"adjacency": "add_remove", "sample_rate": self.q, "batch_size": self.batch_size}

    def entry(self, what: str, sigma: float, steps: int, details: dict | None = None) -> LedgerEntry:
        info = {"accounting": self.formula, "sample_rate": self.q, "batch_size": self.batch_size}
        values = subsampled_gaussian_rdp(self.q, sigma, int(steps), MINIBATCH_RDP_ORDERS)
        return LedgerEntry.rdp(what, MINIBATCH_RDP_ORDERS, values, details=dict(details or {}) | info)


class PrvAccountant(_Accountant):
    """Poisson-subsampled (or full-batch, q = 1) runs accounted by prv-accountant's upper bound."""

    name = "prv"

    def __init__(self, delta: float, sample_rate: float = 1.0, eps_error: float = 0.01, adjacency: str = "add_remove",
                 batch_size: int | None = None) -> None:
        super().__init__(delta)
        if not 0.0 < sample_rate <= 1.0:
            raise ValueError(f"sample_rate must lie in (0, 1], got {sample_rate}")
        if not eps_error > 0:
            raise ConfigError(f"privacy.eps_error: must be > 0, got {eps_error}")
        check_accounting(self.name, adjacency, batch_size if sample_rate < 1.0 else None)
        self.q, self.eps_error, self.adjacency, self.batch_size = float(sample_rate), float(eps_error), adjacency, batch_size

    @property
    def factor(self) -> float:
        return 2.0 if self.adjacency == "replace_one" else 1.0

    formula = "prv-accountant upper bound of the Poisson-subsampled Gaussian (Gopi, Lee & Wutschitz 2021)"

    def describe(self) -> dict:
        return super().describe() | {
            "adjacency": self.adjacency,
            "sample_rate": self.q,
            "batch_size": self.batch_size,
            "eps_error": self.eps_error,
        }

    def entry(self, what: str, sigma: float, steps: int, details: dict | None = None) -> LedgerEntry:
        # replace-one (full batch only) doubles the sensitivity: the same as half the noise multiplier. The
        # entry's `sigma` is the event's (sensitivity 1); the σ the run trained with is kept beside it, named
        if self.factor != 1.0:
            details = dict(details or {}) | {"adjacency": self.adjacency, "trained_sigma": float(sigma)}
        return LedgerEntry.prv(what, self.q, sigma / self.factor, int(steps), self.eps_error, details=details)

    def gaussian_eps(self, mu: float) -> float:
        return eps_from_mu(mu, self.delta)  # the PRV of a Gaussian is its exact GDP curve

    def _guess(self, mu: float, steps: int) -> float:
        if self.q == 1.0:
            return self.factor * math.sqrt(steps) / mu
        return self.factor * clt_sigma(self.q, steps, mu)

    def sigma_for_eps(self, eps: float, steps: int) -> float:
        """Smallest σ (within 0.3 %) whose PRV upper bound is ≤ eps (`prv_sigma_for`, ~5 calls)."""
        _check_eps(eps, self.eps_error)
        return self.factor * prv_sigma_for(self.q, int(steps), eps, self.delta, eps_error=self.eps_error)

    def sigma_for_remaining(self, spent: Ledger, total_eps: float, steps: int) -> float:
        """Smallest σ (within 0.3 %) of a last run filling the budget; starts from the GDP-equivalent
        of what is left (μ_f² = μ(total)² − μ(spent)²), ~5 compositions."""
        spent_eps = _check_remaining(spent, total_eps, self.delta)
        mu_left = math.sqrt(max(mu_from_eps(total_eps, self.delta) ** 2 - mu_from_eps(spent_eps, self.delta) ** 2, 1e-12))
        return calibrate_log_sigma(
            lambda s: self.total_with(spent, s, steps), total_eps, self._guess(mu_left, steps),
            what=f"what is left of eps={total_eps:g} ({self.describe()}, steps={steps})",
        )


def _check_eps(eps: float, eps_error: float) -> None:
    if not (eps > 0 and math.isfinite(eps)):
        raise ValueError(f"eps must be a positive finite number, got {eps}")
    if eps <= eps_error:
        raise ConfigError(f"eps={eps:g} must exceed the PRV accountant's eps_error={eps_error:g} (privacy.eps_error)")


def _check_remaining(spent: Ledger, total_eps: float, delta: float) -> float:
    """ε already spent; InfeasibleBudgetError naming every release when nothing is left."""
    spent_eps = float(spent.total(delta)["eps"]) if spent.entries else 0.0
    if spent_eps >= total_eps:
        raise infeasible_error(total_eps, delta, spent, "final run", "", f"eps={spent_eps:.4g}")
    return spent_eps


def _gdp(delta: float, adjacency: str, q: float | None, eps_error: float, batch_size: int | None) -> PlanningAccountant:
    # No exact GDP form exists for Poisson-subsampled runs: they are recorded as their RDP curve, as
    # "rdp" records them, and `describe()` and every ledger entry say so.
    return GdpAccountant(delta, adjacency) if q is None else _rdp(delta, adjacency, q, eps_error, batch_size)


def _rdp(delta: float, adjacency: str, q: float | None, eps_error: float, batch_size: int | None) -> PlanningAccountant:
    if q is not None and float(q) < 1.0:
        return RdpSubsampledAccountant(delta, float(q), batch_size)
    return RdpGaussianAccountant(delta, adjacency)


def _prv(delta: float, adjacency: str, q: float | None, eps_error: float, batch_size: int | None) -> PlanningAccountant:
    return PrvAccountant(delta, 1.0 if q is None else float(q), eps_error, adjacency, batch_size)


@dataclass(frozen=True)
class AccountantSpec:
    """One value of `privacy.accountant`: how its runs are built (`build(delta, adjacency, sample_rate,
    eps_error, batch_size)`, sample_rate None for full batch), and — for an accountant that reads a new
    kind of event — its composition and events, which join `COMPOSITIONS` (before RDP, which reads
    every built-in kind) and `EVENTS`."""

    name: str
    build: Callable[[float, str, float | None, float, int | None], PlanningAccountant]
    composition: Composition | None = None
    events: tuple[type, ...] = ()


#: Every accountant a config can name. A new one is one file (its run accountant, and its composition
#: where it reads its own events) plus one `register_accountant` line.
REGISTRY: dict[str, AccountantSpec] = {
    "gdp": AccountantSpec("gdp", _gdp),
    "rdp": AccountantSpec("rdp", _rdp),
    "prv": AccountantSpec("prv", _prv),
}
ACCOUNTANTS = tuple(REGISTRY)


def register_accountant(spec: AccountantSpec) -> None:
    """Make `spec.name` a value of privacy.accountant (and its events readable by every ledger)."""
    REGISTRY[spec.name] = spec
    for event in spec.events:
        EVENTS[event.kind] = event
    if spec.composition is not None and spec.composition not in COMPOSITIONS:
        COMPOSITIONS.insert(len(COMPOSITIONS) - 1, spec.composition)


def make_accountant(
    accountant: str,
    delta: float,
    adjacency: str = "add_remove",
    sample_rate: float | None = None,
    eps_error: float = 0.01,
    batch_size: int | None = None,
) -> PlanningAccountant:
    """The accountant of runs with Poisson sampling rate `sample_rate` (None: full batch), from `REGISTRY`.

    `batch_size` (the B of q = B/N) is only recorded. δ has no default here: the config schema holds
    the one (`config_delta`).
    """
    subsampled = sample_rate is not None
    check_accounting(accountant, adjacency, (batch_size or 1) if subsampled else None)
    return REGISTRY[accountant].build(delta, adjacency, sample_rate, eps_error, batch_size)


def sample_rate_for_remaining(
    accountant: str,
    delta: float,
    spent: Ledger,
    total_eps: float,
    sigma: float,
    steps: int,
    eps_error: float = 0.01,
    rtol: float = 1e-3,
    floor: float = 1e-6,
) -> float:
    """Largest Poisson sampling rate q ≤ 1 such that `spent` plus one run of `steps` steps at noise
    multiplier σ, each step on a Poisson subsample of rate q, is (total_eps, δ)-DP, the run accounted as
    `make_accountant(accountant, delta, sample_rate=q)` accounts it (amplification by subsampling).

    Panda et al. Table 14, "subsampling": keep a run's σ and T, lower its ε by sampling. Bisection in
    log q (the composed ε grows with q): the returned q meets the budget and lies within a factor
    (1 + rtol) of the largest that does. q = 1 is the full-batch run (returned when it already fits).
    Raises InfeasibleBudgetError-style ValueError when not even q = `floor` fits.
    """
    _check_remaining(spent, total_eps, delta)

    def ok(q: float) -> bool:
        acc = make_accountant(accountant, delta, sample_rate=None if q >= 1.0 else q, eps_error=eps_error)
        return acc.total_with(spent, sigma, steps) <= total_eps

    if ok(1.0):
        return 1.0
    lo, hi = float(floor), 1.0
    if not ok(lo):
        raise ValueError(
            f"no sampling rate down to q={floor:g} brings sigma={sigma:g}, steps={steps} within eps={total_eps:g} "
            f"after what is spent (eps={spent.total(delta)['eps']:.4g}): lower the target or raise sigma"
        )
    return bisect_log(ok, good=lo, bad=hi, rtol=rtol)


def accounting_keys(config: dict) -> dict:
    """What a run's accounting reads of a config: privacy.{accountant, adjacency, delta, eps_error} and
    training.batch_size (`accountant_from_config`, `dphpo.train.linear_head.TrainSettings`)."""
    p, t = config.get("privacy", {}) or {}, config.get("training", {}) or {}
    batch_size = t.get("batch_size")
    return {"accountant": p.get("accountant", "gdp"), "delta": config_delta(config), "adjacency": p.get("adjacency", "add_remove"),
            "eps_error": float(p.get("eps_error", 0.01)), "batch_size": None if batch_size is None else int(batch_size)}


def accountant_from_config(config: dict, n_train: int | None = None) -> PlanningAccountant:
    """The run accountant a config asks for (`accounting_keys`; q = B/N, so minibatch configs need `n_train`)."""
    keys = accounting_keys(config)
    sample_rate = None
    if keys["batch_size"] is not None:
        check_accounting(keys["accountant"], keys["adjacency"], keys["batch_size"])
        if n_train is None or n_train < 1:
            raise ValueError("the number of training examples is needed to turn training.batch_size into a sampling rate")
        sample_rate = min(1.0, keys["batch_size"] / n_train)
    return make_accountant(sample_rate=sample_rate, **keys)


def config_delta(config: dict) -> float:
    """privacy.delta of a config. Its one default lives in the config schema
    (workflow/schemas/config.schema.yaml), which fills it when the workflow validates the config."""
    delta = (config.get("privacy") or {}).get("delta")
    if delta is None:
        raise ConfigError("privacy.delta: missing (the workflow's config schema fills its default; validate the config)")
    return float(delta)
