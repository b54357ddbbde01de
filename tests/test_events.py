"""Ledger entries record mechanism events, accountants read events, and a new accountant is one file
plus one registry line: shown with zCDP (Bun & Steinke 2016), written here as a user would."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

from dphpo import verify
from dphpo.privacy import accountant as accountants
from dphpo.privacy import composition, events
from dphpo.privacy.accountant import AccountantSpec, GdpAccountant, _FullBatch, make_accountant, register_accountant
from dphpo.privacy.composition.gdp import GdpComposition
from dphpo.privacy.composition.prv import PrvComposition
from dphpo.privacy.composition.rdp import RdpComposition
from dphpo.privacy.events import Gaussian, PoissonSampledGaussian, RdpCurve
from dphpo.privacy.ledger import Ledger, LedgerEntry

DELTA = 1e-5


# --- the toy accountant: everything below up to the registry line is "one file" ---------------


@dataclass(frozen=True)
class Zcdp:
    """A ρ-zCDP release."""

    rho: float
    kind: ClassVar[str] = "zcdp"

    def check(self, what: str) -> None:
        if not (self.rho >= 0 and math.isfinite(self.rho)):
            raise ValueError(f"ledger entry {what!r}: rho must be finite and >= 0")

    @classmethod
    def stored(cls, mu: Any, details: dict, orders: Any, values: Any, what: str) -> Zcdp:
        return cls(float(details["rho"]))

    def stored_fields(self) -> dict[str, Any]:
        return {"details": {"rho": self.rho}}


def zcdp_eps(rho: float, delta: float) -> float:
    """(ε, δ) of ρ-zCDP (Bun & Steinke 2016, Prop. 1.3)."""
    return rho + 2 * math.sqrt(rho * math.log(1 / delta))


class ZcdpComposition:
    """ρ adds up; a μ-GDP Gaussian is μ²/2-zCDP."""

    name = "zcdp"
    reads: tuple[type, ...] = (Gaussian, Zcdp)

    def total(self, evs, delta, **options) -> dict[str, Any]:
        rho = sum(count * (e.rho if isinstance(e, Zcdp) else e.mu**2 / 2) for e, count in evs)
        return {"eps": zcdp_eps(rho, delta), "delta": delta, "mu": None, "accountant": self.name}


class ZcdpAccountant(_FullBatch):
    """Full-batch runs as zCDP: T steps at noise multiplier σ are factor²·T/(2σ²)-zCDP."""

    name = "zcdp"
    formula = "zCDP of the Gaussian mechanism, rho = factor^2 T / (2 sigma^2) (Bun & Steinke 2016)"

    def entry(self, what: str, sigma: float, steps: int, details: dict | None = None) -> LedgerEntry:
        return LedgerEntry.of(what, Zcdp(self.factor**2 * steps / (2 * sigma**2)), details=details)


ZCDP = AccountantSpec(
    "zcdp",
    lambda delta, adjacency, q, eps_error, batch_size: ZcdpAccountant(delta, adjacency),
    composition=ZcdpComposition(),
    events=(Zcdp,),
)


@pytest.fixture
def zcdp(monkeypatch):
    """The registry line, undone after the test."""
    monkeypatch.setattr(accountants, "REGISTRY", dict(accountants.REGISTRY))
    monkeypatch.setattr(composition, "COMPOSITIONS", list(composition.COMPOSITIONS))
    monkeypatch.setattr(accountants, "COMPOSITIONS", composition.COMPOSITIONS)
    monkeypatch.setattr(events, "EVENTS", dict(events.EVENTS))
    monkeypatch.setattr(accountants, "EVENTS", events.EVENTS)
    monkeypatch.setattr("dphpo.privacy.ledger.EVENTS", events.EVENTS)
    register_accountant(ZCDP)
    return make_accountant("zcdp", DELTA)


def test_a_new_accountant_is_one_file_and_a_registry_line(zcdp):
    sigma, steps = 20.0, 100
    rho = steps / (2 * sigma**2)
    assert zcdp.standalone_eps(sigma, steps) == pytest.approx(zcdp_eps(rho, DELTA), rel=1e-12)
    # calibration, budgets and the ledger work through the base class: the σ it finds meets the target
    s = zcdp.sigma_for_eps(2.0, steps)
    assert zcdp.standalone_eps(s, steps) <= 2.0 < zcdp.standalone_eps(s * 0.999, steps)
    spent = Ledger()
    spent.add("stage trials", 0.1, count=4)
    s_final = zcdp.sigma_for_remaining(spent, 2.0, steps)
    total = zcdp.total_with(spent, s_final, steps)
    assert total <= 2.0 and total == pytest.approx(2.0, rel=1e-3)
    # its entries are stored and read back like every other entry
    entry = zcdp.entry("final run", s_final, steps, {"eta": 0.5})
    assert LedgerEntry.from_dict(entry.to_dict()) == entry and entry.mechanism == "zcdp"
    # GDP stays the accountant of all-Gaussian ledgers; the new one reads what GDP cannot
    assert composition.composition_for(spent.events).name == "gdp_closed_form"
    assert composition.composition_for([entry.counted, *spent.events]).name == "zcdp"
    # verify names what it cannot recompute independently instead of guessing
    record = {"total_delta": DELTA, "privacy": {"entries": [entry.to_dict()]}}
    eps, how = verify.recompute(record)
    assert eps is None and "zcdp" in how


def test_an_unknown_accountant_is_refused_naming_the_key():
    with pytest.raises(Exception, match="privacy.accountant: expected one of gdp, rdp, prv"):
        make_accountant("zcdp", DELTA)


def test_entries_store_events_in_the_fields_result_files_hold():
    run = PoissonSampledGaussian(0.01, 1.1, 500, 0.01)
    entry = LedgerEntry.of("run", run, details={"eta": 0.1})
    assert entry.to_dict()["details"] == {"eta": 0.1, "q": 0.01, "sigma": 1.1, "steps": 500, "eps_error": 0.01}
    assert entry.event == run and LedgerEntry.from_dict(entry.to_dict()).event == run
    gauss = LedgerEntry("trial", 0.3, count=4)
    assert gauss.event == Gaussian(0.3) and gauss.counted == (Gaussian(0.3), 4)
    curve = LedgerEntry.rdp("tuning", [2.0, 4.0], [0.1, 0.3])
    assert curve.event == RdpCurve((2.0, 4.0), (0.1, 0.3))
    with pytest.raises(ValueError, match="mechanism must be one of"):
        LedgerEntry("x", None, mechanism="laplace")


def test_the_registry_order_is_the_preference_each_accountant_reading_only_its_events():
    assert [type(c) for c in composition.COMPOSITIONS] == [GdpComposition, PrvComposition, RdpComposition]
    gauss, run, curve = (Gaussian(0.5), 1), (PoissonSampledGaussian(0.1, 1.0, 10), 1), (RdpCurve((2.0,), (0.1,)), 1)
    assert composition.composition_for([gauss]).name == "gdp_closed_form"
    assert composition.composition_for([gauss, run]).name == "prv"
    assert composition.composition_for([gauss, run, curve]).name == "rdp"
    # every built-in run accountant's entries are read by the accountant its ledger picks
    for acc in (GdpAccountant(DELTA), make_accountant("rdp", DELTA), make_accountant("prv", DELTA, sample_rate=0.1)):
        entry = acc.entry("run", 2.0, 50)
        assert type(entry.event) in composition.composition_for([entry.counted]).reads
