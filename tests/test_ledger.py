"""The privacy ledger: composition of every release, budget plans, infeasibility, RDP entries."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from dphpo.errors import InfeasibleBudgetError
from dphpo.io import read_json, write_json
from dphpo.privacy.gdp import compose_mu, eps_from_mu, mu_from_eps
from dphpo.privacy.ledger import Ledger, LedgerEntry, plan_final_mu
from dphpo.privacy.planning import plan_stages
from dphpo.privacy.rdp import DEFAULT_ORDERS, gdp_rdp, rdp_to_dp, subsampled_gaussian_rdp
from dphpo.privacy.tuning import ps_ledger_entry

DELTA = 1e-5


def _search_ledger(n=3, eps1=0.1, eps2=0.2, selection_mu=0.0):
    ledger = Ledger()
    ledger.add("stage 1 trials", mu_from_eps(eps1, DELTA), count=n)
    ledger.add("stage 2 trials", mu_from_eps(eps2, DELTA), count=n)
    if selection_mu:
        ledger.add("stage 1 selection", selection_mu, count=n)
        ledger.add("stage 2 selection", selection_mu, count=n)
    return ledger


def test_total_eps_includes_every_entry():
    ledger = _search_ledger(selection_mu=0.05)
    ledger.add("final run", mu_from_eps(0.88, DELTA))
    mus = [e.mu for e in ledger.entries for _ in range(e.count)]
    total = ledger.total(DELTA)
    assert total["accountant"] == "gdp_closed_form"
    assert total["mu"] == pytest.approx(compose_mu(mus), rel=1e-14)
    assert total["eps"] == pytest.approx(eps_from_mu(compose_mu(mus), DELTA), rel=1e-14)
    # dropping any entry lowers the total
    for i in range(len(ledger.entries)):
        partial = Ledger(e for j, e in enumerate(ledger.entries) if j != i)
        assert partial.total(DELTA)["eps"] < total["eps"]


def test_total_matches_known_linear_scaling_check():
    ledger = _search_ledger()
    ledger.add("final run", mu_from_eps(0.88, DELTA))
    assert ledger.total(DELTA)["eps"] == pytest.approx(0.9963, abs=5e-4)


def test_empty_ledger_costs_nothing():
    assert Ledger().total(DELTA)["eps"] == 0.0


def test_count_zero_entry_costs_nothing():
    ledger = Ledger()
    ledger.add("nothing", 1.0, count=0)
    assert ledger.total(DELTA)["eps"] == 0.0


@pytest.mark.parametrize("target", [0.5, 1.0, 3.0, 8.0])
def test_plan_final_mu_spends_exactly_the_remaining_budget(target):
    spent = _search_ledger(selection_mu=0.02)
    mu_f = plan_final_mu(target, DELTA, spent)
    full = spent.copy()
    full.add("final run", mu_f)
    assert full.total(DELTA)["eps"] == pytest.approx(target, rel=1e-9)
    assert len(spent.entries) == 4  # copy() left the plan untouched


def test_infeasible_plan_names_each_release():
    spent = _search_ledger(eps1=0.5, eps2=0.8, selection_mu=0.3)
    with pytest.raises(InfeasibleBudgetError) as info:
        plan_final_mu(1.0, DELTA, spent, what="final run")
    message = str(info.value)
    for entry in spent.entries:
        assert entry.what in message
    assert "final run" in message and "eps=1" in message


def test_plan_stages_known_check_and_exact_total():
    plan = plan_stages(1.0, DELTA, n_trials=3, stage_eps=[0.1, 0.2])
    # the final μ is shaved by BUDGET_SAFETY like every planned budget: the total never exceeds the target
    assert 1.0 - 1e-8 < plan["total_eps"] <= 1.0
    assert plan["stage_mu"] == [mu_from_eps(0.1, DELTA), mu_from_eps(0.2, DELTA)]
    assert plan["final_eps"] == pytest.approx(eps_from_mu(plan["final_mu"], DELTA))
    # the known check runs the other way: ε_f = 0.88 composes to 0.9963, so ε_f at total 1 is just above 0.88
    assert 0.88 < plan["final_eps"] < 0.89
    ledger = plan["ledger"]
    assert [e.what for e in ledger.entries] == ["stage 1 trials", "stage 2 trials", "final run"]
    assert [e.count for e in ledger.entries] == [3, 3, 1] and ledger.entries[-1].mu == plan["final_mu"]


def test_plan_stages_charges_selection_releases():
    free = plan_stages(1.0, DELTA, n_trials=3, stage_eps=[0.1, 0.2])
    noisy = plan_stages(1.0, DELTA, n_trials=3, stage_eps=[0.1, 0.2], selection_mu=0.05)
    assert noisy["final_mu"] < free["final_mu"]
    sel = [e for e in noisy["ledger"].entries if "selection" in e.what]
    assert [e.count for e in sel] == [3, 3] and all(e.mu == 0.05 for e in sel)
    expected = math.sqrt(mu_from_eps(1.0, DELTA) ** 2 - 3 * sum(m**2 for m in noisy["stage_mu"]) - 6 * 0.05**2)
    assert expected * (1 - 2e-9) < noisy["final_mu"] < expected
    assert 1.0 - 1e-8 < noisy["total_eps"] <= 1.0
    once = plan_stages(1.0, DELTA, n_trials=3, stage_eps=[0.1, 0.2], selection_mu=0.05, selections_per_stage=1)
    assert once["final_mu"] > noisy["final_mu"]


def test_plan_stages_supports_more_stages():
    plan = plan_stages(2.0, DELTA, n_trials=4, stage_eps=[0.05, 0.1, 0.2])
    assert len(plan["stage_mu"]) == 3
    assert 2.0 - 1e-8 < plan["total_eps"] <= 2.0


def test_plan_stages_infeasible_raises_before_training():
    with pytest.raises(InfeasibleBudgetError, match="stage 2 trials"):
        plan_stages(0.3, DELTA, n_trials=3, stage_eps=[0.1, 0.2], selection_mu=0.1)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"n_trials": 0, "stage_eps": [0.1]}, "n_trials"),
        ({"n_trials": 3, "stage_eps": []}, "stage_eps"),
        ({"n_trials": 3, "stage_eps": [0.1, -0.2]}, "stage 2"),
        ({"n_trials": 3, "stage_eps": [0.1], "selection_mu": -1.0}, "selection_mu"),
        ({"n_trials": 3, "stage_eps": [0.1], "selections_per_stage": -1}, "selections_per_stage"),
    ],
)
def test_plan_stages_rejects_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        plan_stages(1.0, DELTA, **kwargs)


def test_gdp_round_trip_keeps_the_entry_format(tmp_path):
    ledger = _search_ledger(selection_mu=0.05)
    data = ledger.to_dict(DELTA)
    assert set(data["entries"][0]) == {"what", "mu", "count", "mechanism", "details", "mu_total"}
    write_json(tmp_path / "ledger.json", data)
    back = Ledger.from_dict(read_json(tmp_path / "ledger.json"))
    assert back.entries == ledger.entries
    assert back.total(DELTA) == ledger.total(DELTA)


# --- RDP entries ------------------------------------------------------------------------------


def test_rdp_entry_round_trips_through_json_including_inf(tmp_path):
    orders = [1.5, 2.0, 4.0, 8.0]
    ledger = Ledger()
    ledger.add("trial", 0.3)
    ledger.add_rdp("tuning", orders, [0.1, 0.2, 0.5, math.inf], count=2, method="test")
    write_json(tmp_path / "ledger.json", ledger.to_dict(DELTA))
    raw = json.loads((tmp_path / "ledger.json").read_text())
    assert raw["entries"][1]["rdp_values"][-1] == "inf"
    back = Ledger.from_dict(raw)
    assert back.entries == ledger.entries
    assert back.total(DELTA) == ledger.total(DELTA)


def test_rdp_total_composes_curves_and_records_the_orders():
    ledger = Ledger()
    ledger.add("final run", 0.5)
    entry = ps_ledger_entry(0.2, "geometric", 10.0)
    ledger.append(entry)
    total = ledger.total(DELTA)
    assert total["accountant"] == "rdp" and total["mu"] is None
    assert total["orders"] == [float(o) for o in DEFAULT_ORDERS]
    assert total["optimal_order"] in total["orders"]
    expected = rdp_to_dp(DEFAULT_ORDERS, np.asarray(entry.rdp_values) + gdp_rdp(0.5, DEFAULT_ORDERS), DELTA)
    assert total["eps"] == pytest.approx(expected, rel=1e-12)
    # more than either part alone
    assert total["eps"] > Ledger([entry]).total(DELTA)["eps"]
    assert total["eps"] > eps_from_mu(0.5, DELTA)


def test_rdp_count_multiplies_the_curve():
    orders = DEFAULT_ORDERS
    once = Ledger()
    once.add_rdp("x", orders, gdp_rdp(0.2, orders), count=4)
    four = Ledger()
    for _ in range(4):
        four.add_rdp("x", orders, gdp_rdp(0.2, orders))
    assert once.total(DELTA)["eps"] == pytest.approx(four.total(DELTA)["eps"], rel=1e-12)


def test_gdp_through_rdp_is_valid_and_close_to_exact():
    """An RDP-accounted GDP mechanism: never below the exact GDP ε, and within ~15 % of it."""
    for mu in [0.05, 0.3, 1.0, 3.0]:
        ledger = Ledger()
        ledger.add_rdp("as rdp", DEFAULT_ORDERS, gdp_rdp(mu, DEFAULT_ORDERS))
        exact = eps_from_mu(mu, DELTA)
        assert exact <= ledger.total(DELTA)["eps"] <= 1.15 * exact


def test_curves_on_different_grids_compose_on_the_union():
    a = np.array([2.0, 4.0, 8.0, 16.0, 32.0, 64.0])
    b = np.arange(2.0, 65.0)
    ledger = Ledger()
    ledger.add_rdp("sub", a, subsampled_gaussian_rdp(0.1, 1.0, 50, a))
    ledger.add_rdp("sub fine", b, subsampled_gaussian_rdp(0.1, 1.0, 50, b))
    orders, curve = ledger.rdp_curve()
    np.testing.assert_array_equal(orders, b)
    # at 3 the coarse curve is bounded by its value at 4
    i3 = int(np.flatnonzero(orders == 3.0)[0])
    assert curve[i3] == pytest.approx(
        subsampled_gaussian_rdp(0.1, 1.0, 50, [4.0])[0] + subsampled_gaussian_rdp(0.1, 1.0, 50, [3.0])[0]
    )


def test_ledger_mu_is_undefined_with_rdp_entries():
    ledger = Ledger()
    ledger.add_rdp("x", [2.0], [0.1])
    with pytest.raises(ValueError, match="RDP"):
        _ = ledger.mu


def test_plan_final_mu_with_rdp_entries_hits_the_target():
    spent = Ledger([ps_ledger_entry(0.1, "logarithmic", 5.0)])
    mu_f = plan_final_mu(3.0, DELTA, spent)
    full = spent.copy()
    full.add("final run", mu_f)
    assert full.total(DELTA)["eps"] == pytest.approx(3.0, rel=1e-9)
    assert full.total(DELTA)["eps"] <= 3.0
    with pytest.raises(InfeasibleBudgetError, match="Papernot-Steinke"):
        plan_final_mu(0.05, DELTA, spent)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"mu": None}, "mu"),
        ({"mu": -1.0}, "mu"),
        ({"mu": 1.0, "mechanism": "pld"}, "mechanism"),
        ({"mu": None, "mechanism": "rdp"}, "rdp_orders"),
        ({"mu": None, "mechanism": "rdp", "rdp_orders": (2.0,), "rdp_values": (-1.0,)}, "RDP values"),
        ({"mu": None, "mechanism": "rdp", "rdp_orders": (0.5,), "rdp_values": (1.0,)}, "orders"),
    ],
)
def test_ledger_entry_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LedgerEntry(what="x", **kwargs)
