"""The run accountants (dphpo.privacy.accountant): closed forms, independent libraries, calibration, config."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.rdp.rdp_privacy_accountant import RdpAccountant
from prv_accountant import PRVAccountant
from prv_accountant.privacy_random_variables import GaussianMechanism, PoissonSubsampledGaussianMechanism

from dphpo.errors import ConfigError, InfeasibleBudgetError
from dphpo.privacy.accountant import (
    MINIBATCH_RDP_ORDERS,
    RUN_RDP_ORDERS,
    GdpAccountant,
    PlanningAccountant,
    PrvAccountant,
    RdpGaussianAccountant,
    RdpSubsampledAccountant,
    RunAccountant,
    accountant_from_config,
)
from dphpo.privacy.gdp import eps_from_mu, mu_from_eps
from dphpo.privacy.ledger import Ledger, LedgerEntry, plan_final_mu

DELTA = 1e-5


def prv_direct(prvs, counts, delta=DELTA, eps_error=0.01):
    """prv-accountant called directly: the upper bound dphpo must report."""
    acc = PRVAccountant(prvs=prvs, max_self_compositions=counts, eps_error=eps_error, delta_error=delta / 1000)
    return acc.compute_epsilon(delta=delta, num_self_compositions=counts)[2]


# --- closed forms ---------------------------------------------------------------------------------


@pytest.mark.parametrize("steps", [1, 10, 144])
def test_gdp_sigma_is_sqrt_t_over_mu(steps):
    acc = GdpAccountant(DELTA)
    for eps in (0.1, 1.0, 8.0):
        mu = mu_from_eps(eps, DELTA)
        sigma = acc.sigma_for_eps(eps, steps)
        assert sigma == pytest.approx(math.sqrt(steps) / mu, rel=1e-14)
        assert acc.standalone_eps(sigma, steps) == pytest.approx(eps, rel=1e-9)
        entry = acc.entry("run", sigma, steps)
        assert entry.mechanism == "gdp" and entry.mu == pytest.approx(mu, rel=1e-14)


def test_replace_one_doubles_mu_and_sigma():
    add, rep = GdpAccountant(DELTA), GdpAccountant(DELTA, "replace_one")
    assert rep.mu(3.0, 25) == pytest.approx(2 * add.mu(3.0, 25)) == pytest.approx(2 * 5 / 3.0)
    assert rep.sigma_for_eps(1.0, 25) == pytest.approx(2 * add.sigma_for_eps(1.0, 25), rel=1e-14)
    # the same σ costs the ε of a Gaussian of twice the μ
    assert rep.standalone_eps(10.0, 25) == pytest.approx(eps_from_mu(2 * 5 / 10.0, DELTA), rel=1e-12)
    assert rep.describe()["adjacency"] == "replace_one" and rep.describe()["sensitivity_factor"] == 2.0
    prv_rep = PrvAccountant(DELTA, adjacency="replace_one")  # full batch: PRV of the Gaussian, sensitivity 2
    assert prv_rep.standalone_eps(10.0, 25) == pytest.approx(rep.standalone_eps(10.0, 25), abs=0.02)
    # its ledger entry records the event (σ/2 at sensitivity 1) and, named, the σ the run trained with:
    # a reader re-accounting the trained σ under add/remove would otherwise find a smaller ε
    entry = prv_rep.entry("run", 10.0, 25, details={"sigma": 10.0})
    assert entry.details["sigma"] == 5.0 and entry.details["trained_sigma"] == 10.0
    assert entry.details["adjacency"] == "replace_one"
    assert "trained_sigma" not in PrvAccountant(DELTA).entry("run", 10.0, 25).details


# --- independent libraries -----------------------------------------------------------------------


@pytest.mark.parametrize("q, sigma, steps", [(0.05, 1.0, 100), (0.01, 0.8, 500)])
def test_prv_accountant_matches_prv_accountant_called_directly(q, sigma, steps):
    acc = PrvAccountant(DELTA, q)
    ours = acc.standalone_eps(sigma, steps)
    assert ours == prv_direct([PoissonSubsampledGaussianMechanism(sampling_probability=q, noise_multiplier=sigma)], [steps])
    entry = acc.entry("run", sigma, steps)
    assert entry.mechanism == "prv" and entry.mu is None
    assert (entry.details["q"], entry.details["sigma"], entry.details["steps"]) == (q, sigma, steps)


def test_prv_runs_composed_with_gaussian_entries_match_prv_accountant():
    acc = PrvAccountant(DELTA, 0.05)
    ledger = Ledger([acc.entry("trial 0", 1.0, 100), acc.entry("trial 1", 1.5, 60)])
    ledger.add("noisy scores", mu=0.02, count=3)  # selection releases: Gaussian, sensitivity 1
    ledger.add("a full-batch run", mu=0.3)
    ledger.append(acc.entry("trial 0 again", 1.0, 100))  # same mechanism: steps add up
    total = ledger.total(DELTA)
    mu_gauss = math.sqrt(3 * 0.02**2 + 0.3**2)
    direct = prv_direct(
        [
            PoissonSubsampledGaussianMechanism(sampling_probability=0.05, noise_multiplier=1.0),
            PoissonSubsampledGaussianMechanism(sampling_probability=0.05, noise_multiplier=1.5),
            GaussianMechanism(noise_multiplier=1.0 / mu_gauss),
        ],
        [200, 60, 1],
    )
    assert total["eps"] == pytest.approx(direct, rel=1e-9)
    assert "prv_accountant" in total["accountant"] and "prv-accountant" in total["composition"]
    # the RDP bound of the same releases is recorded beside it, and is looser
    assert total["rdp_eps"] >= total["eps"]
    # the Gaussian part alone is exact GDP; PRV of it agrees within its error
    assert Ledger([LedgerEntry("g", mu_gauss)]).total(DELTA)["eps"] == pytest.approx(
        prv_direct([GaussianMechanism(noise_multiplier=1.0 / mu_gauss)], [1]), abs=0.02
    )


def test_prv_entry_with_an_rdp_entry_falls_back_to_rdp_composition():
    acc = PrvAccountant(DELTA, 0.05)
    ledger = Ledger([acc.entry("run", 1.0, 100)])
    ledger.add_rdp("a tuning curve", MINIBATCH_RDP_ORDERS, MINIBATCH_RDP_ORDERS * 0.01)  # integer orders
    total = ledger.total(DELTA)
    assert total["accountant"] == "rdp" and "PRV entries as the RDP" in total["composition"]
    rdp = RdpAccountant(list(range(2, 129)))  # the optimal order is small here; ours searches a superset
    rdp.compose(dp_event.PoissonSampledDpEvent(0.05, dp_event.GaussianDpEvent(1.0)), 100)
    # the tuning curve λ·0.01 is the RDP of a Gaussian with μ² = 0.02, i.e. noise multiplier 1/√0.02
    rdp.compose(dp_event.GaussianDpEvent(1.0 / math.sqrt(0.02)))
    assert total["eps"] <= rdp.get_epsilon(DELTA) * (1 + 1e-9)
    assert total["eps"] == pytest.approx(rdp.get_epsilon(DELTA), rel=1e-3)


def test_prv_entry_round_trips_through_the_ledger_json():
    ledger = Ledger([PrvAccountant(DELTA, 0.1).entry("run", 1.2, 40, {"eta": 0.5})])
    again = Ledger.from_dict(ledger.to_dict(DELTA))
    assert again.entries == ledger.entries and again.total(DELTA)["eps"] == ledger.total(DELTA)["eps"]


@pytest.mark.parametrize("sigma, steps", [(2.0, 50), (8.0, 10)])
def test_rdp_gaussian_accountant_matches_dp_accounting(sigma, steps):
    acc = RdpGaussianAccountant(DELTA)
    rdp = RdpAccountant(list(RUN_RDP_ORDERS))
    rdp.compose(dp_event.GaussianDpEvent(sigma), steps)
    assert acc.standalone_eps(sigma, steps) == pytest.approx(rdp.get_epsilon(DELTA), rel=1e-6)
    assert acc.standalone_eps(sigma, steps) > GdpAccountant(DELTA).standalone_eps(sigma, steps)  # RDP is looser


def test_rdp_subsampled_accountant_matches_dp_accounting():
    acc = RdpSubsampledAccountant(DELTA, 0.02, batch_size=200)
    rdp = RdpAccountant(list(MINIBATCH_RDP_ORDERS))
    rdp.compose(dp_event.PoissonSampledDpEvent(0.02, dp_event.GaussianDpEvent(1.1)), 300)
    assert acc.standalone_eps(1.1, 300) == pytest.approx(rdp.get_epsilon(DELTA), rel=1e-6)
    # and the PRV accountant of the same run is tighter
    assert PrvAccountant(DELTA, 0.02).standalone_eps(1.1, 300) < acc.standalone_eps(1.1, 300)


# --- calibration ------------------------------------------------------------------------------------

ACCOUNTANTS = {
    "gdp": GdpAccountant(DELTA),
    "gdp_replace_one": GdpAccountant(DELTA, "replace_one"),
    "rdp": RdpGaussianAccountant(DELTA),
    "rdp_subsampled": RdpSubsampledAccountant(DELTA, 0.05),
    "prv": PrvAccountant(DELTA, 0.05, eps_error=0.05),  # a coarser PRV grid keeps the test fast
}


@pytest.mark.parametrize("name", ACCOUNTANTS)
def test_sigma_for_eps_round_trips_from_below(name):
    acc = ACCOUNTANTS[name]
    assert isinstance(acc, RunAccountant) and isinstance(acc, PlanningAccountant)
    for eps, steps in ((0.5, 40), (2.0, 100)):
        sigma = acc.sigma_for_eps(eps, steps)
        got = acc.standalone_eps(sigma, steps)
        assert got <= eps * (1 + 1e-12)  # never above the budget
        assert got >= eps * (1 - 5e-3)  # and not far below it (PRV: within its 0.3 % σ tolerance)


@pytest.mark.parametrize("name", ACCOUNTANTS)
def test_sigma_for_remaining_fills_the_budget(name):
    acc = ACCOUNTANTS[name]
    spent = Ledger([acc.entry("trial 0", acc.sigma_for_eps(0.3, 20), 20)])
    spent.add("noisy scores", mu=0.02, count=2)
    sigma = acc.sigma_for_remaining(spent, 2.0, 80)
    total = acc.total_with(spent, sigma, 80)
    assert total <= 2.0 * (1 + 1e-12)
    assert total >= 2.0 * (1 - 1e-2)
    with pytest.raises(InfeasibleBudgetError, match="trial 0"):
        acc.sigma_for_remaining(spent, 0.3, 80)


def test_gdp_remaining_is_the_closed_form_final_mu():
    acc = GdpAccountant(DELTA)
    spent = Ledger()
    spent.add("stage trials", mu_from_eps(0.1, DELTA), count=3)
    sigma = acc.sigma_for_remaining(spent, 1.0, 49)
    assert sigma == pytest.approx(7.0 / plan_final_mu(1.0, DELTA, spent), rel=1e-8)


# --- from the config -----------------------------------------------------------------------------------


def test_accountant_from_config_builds_what_the_config_asks_for():
    def cfg(**privacy):
        batch = privacy.pop("batch_size", None)
        return {"privacy": {"delta": DELTA, **privacy}, "training": {"batch_size": batch}}

    assert type(accountant_from_config(cfg())) is GdpAccountant
    assert accountant_from_config(cfg(adjacency="replace_one")).describe()["sensitivity_factor"] == 2.0
    assert type(accountant_from_config(cfg(accountant="rdp"))) is RdpGaussianAccountant
    # gdp has no exact form for subsampled runs: the ablation falls back to RDP, and says so
    sub = accountant_from_config(cfg(batch_size=100), n_train=1000)
    assert type(sub) is RdpSubsampledAccountant
    assert sub.describe()["name"] == "rdp" and sub.describe()["sample_rate"] == 0.1 and sub.describe()["batch_size"] == 100
    prv = accountant_from_config(cfg(accountant="prv", batch_size=100, eps_error=0.05), n_train=1000)
    assert type(prv) is PrvAccountant and prv.describe()["sample_rate"] == 0.1 and prv.describe()["eps_error"] == 0.05
    with pytest.raises(ConfigError, match="privacy.accountant"):
        accountant_from_config(cfg(accountant="pld"))
    with pytest.raises(ConfigError, match="privacy.adjacency"):
        accountant_from_config(cfg(adjacency="swap"))
    with pytest.raises(ConfigError, match="training.batch_size"):
        accountant_from_config(cfg(adjacency="replace_one", batch_size=100), n_train=1000)


def test_describe_names_every_parameter():
    for acc in ACCOUNTANTS.values():
        d = acc.describe()
        assert {"name", "delta", "formula", "adjacency", "sample_rate"} <= set(d)
        assert d["delta"] == DELTA and d["name"] in ("gdp", "rdp", "prv")
    assert np.isclose(ACCOUNTANTS["prv"].describe()["sample_rate"], 0.05)


def test_delta_has_one_default_the_schemas():
    import yaml

    from dphpo.privacy.accountant import config_delta

    assert config_delta({"privacy": {"delta": 3e-6}}) == 3e-6
    with pytest.raises(ConfigError, match="privacy.delta"):
        config_delta({"privacy": {}})
    with pytest.raises(ConfigError, match="privacy.delta"):
        accountant_from_config({"privacy": {"accountant": "gdp"}})
    schema = yaml.safe_load(open(Path(__file__).resolve().parents[1] / "workflow" / "schemas" / "config.schema.yaml"))
    assert schema["properties"]["privacy"]["properties"]["delta"]["default"] == 1e-5


# --- the planning calls the HPO methods make ------------------------------------------------------------


def test_budget_planner_is_the_gdp_plan_in_closed_form():
    from dphpo.privacy.planning import BUDGET_SAFETY, BudgetPlanner

    plan = BudgetPlanner(DELTA)
    assert plan.mu_for_eps(1.0) == mu_from_eps(1.0, DELTA)  # a stage's μ
    assert plan.eps_for_mu(0.7) == eps_from_mu(0.7, DELTA)
    assert plan.full_budget_mu(2.0) == mu_from_eps(2.0, DELTA) * (1 - BUDGET_SAFETY)
    # k runs and their k selection releases compose to the target: μ_run = √((μ(ε)² − k μ_sel²)/k)
    mu_run = plan.runs_mu(2.0, 4, 0.01, "x")
    assert mu_run == pytest.approx(math.sqrt((mu_from_eps(2.0, DELTA) ** 2 - 4 * 0.01**2) / 4), rel=1e-8)
    assert mu_run < math.sqrt((mu_from_eps(2.0, DELTA) ** 2 - 4 * 0.01**2) / 4)  # shaved, never above
    assert Ledger([LedgerEntry("runs", mu_run, count=4), LedgerEntry("sel", 0.01, count=4)]).total(DELTA)["eps"] <= 2.0
    assert plan.runs_mu(2.0, 1, 0.01, "x") == plan_final_mu(2.0, DELTA, Ledger()) * (1 - BUDGET_SAFETY)  # one run: no selection
    spent = Ledger([LedgerEntry("stage", 0.05, count=3)])
    assert plan.remaining_mu(1.0, spent, "final") == plan_final_mu(1.0, DELTA, spent) * (1 - BUDGET_SAFETY)
    with pytest.raises(InfeasibleBudgetError, match="selection releases"):
        plan.runs_mu(0.1, 10, 0.5, "x")
    with pytest.raises(ConfigError, match="privacy.delta"):
        BudgetPlanner(1.5)


@pytest.mark.parametrize("adjacency", ["add_remove", "replace_one"])
def test_gdp_plans_runs_at_exactly_their_mu(adjacency):
    acc = GdpAccountant(DELTA, adjacency)
    factor = 2.0 if adjacency == "replace_one" else 1.0
    mu, steps = 0.8, 49
    sigma = acc.sigma_at(mu, 123.0, steps)  # ε is not used: μ is met exactly
    assert sigma == factor * 7.0 / mu
    assert acc.planned_mu(mu) == mu and acc.run_mu(sigma, steps) == pytest.approx(mu, rel=1e-15)
    assert acc.planned_eps(mu, sigma, steps) == eps_from_mu(mu, DELTA)
    entry = acc.planned_entry("trial", mu, sigma, steps, {"eta": 0.1})
    assert entry == LedgerEntry("trial", mu, details={"eta": 0.1})  # the planned μ itself, not factor·√T/σ
    assert acc.composed_eps(mu, 9) == eps_from_mu(3 * mu, DELTA)
    assert acc.trial_accounting() == {} and acc.exact_gdp


@pytest.mark.parametrize("name", ["rdp", "rdp_subsampled", "prv"])
def test_other_accountants_calibrate_a_planned_run_to_its_eps(name):
    # what the baselines computed by hand before: σ for the target ε, the run's own entry and ε, no μ
    acc = ACCOUNTANTS[name]
    mu, eps, steps = 0.9, 1.5, 30
    sigma = acc.sigma_at(mu, eps, steps)
    assert sigma == acc.sigma_for_eps(eps, steps)
    assert acc.planned_mu(mu) is None and acc.run_mu(sigma, steps) is None and acc.composed_eps(mu, 4) is None
    assert acc.planned_eps(mu, sigma, steps) == acc.standalone_eps(sigma, steps)
    assert acc.planned_entry("trial", mu, sigma, steps, {"eta": 0.1}) == acc.entry("trial", sigma, steps, {"eta": 0.1})
    assert acc.trial_accounting() == {"accounting": acc.describe()["formula"]} and not acc.exact_gdp


def test_rdp_full_batch_keeps_the_gdp_plan_of_a_last_run():
    # the RDP ablation shares the full-batch arithmetic (μ, σ for μ) but is not exact GDP
    acc = ACCOUNTANTS["rdp"]
    assert acc.sigma_for_mu(0.5, 16) == 8.0 and acc.mu(8.0, 16) == 0.5
    assert acc.gaussian_eps(0.5) > GdpAccountant(DELTA).gaussian_eps(0.5)  # read through RDP: looser


def test_a_remaining_budget_the_last_runs_accountant_cannot_fill_names_the_spent_releases():
    # μ = 0.5 alone is ε 1.993 ≤ 2 in closed form, but composed by RDP with a subsampled run it is 2.17:
    # refused as infeasible naming the release, not "no noise multiplier below 1e12 meets the budget"
    acc = RdpSubsampledAccountant(DELTA, 0.01)
    with pytest.raises(InfeasibleBudgetError, match=r"already spend eps=2\.1.* composed as rdp .*\n  - a: 1 x mu=0.5"):
        acc.sigma_for_remaining(Ledger([LedgerEntry(what="a", mu=0.5)]), 2.0, 500)
    sigma = acc.sigma_for_remaining(Ledger([LedgerEntry(what="a", mu=0.2)]), 4.0, 500)
    assert acc.total_with(Ledger([LedgerEntry(what="a", mu=0.2)]), sigma, 500) <= 4.0


def test_a_trainer_rebuilt_for_another_batch_size_keeps_the_configured_eps_error():
    from dphpo.train.linear_head import TrainSettings

    config = {"privacy": {"delta": DELTA, "accountant": "prv", "eps_error": 0.1}, "training": {"batch_size": 100}}
    settings = TrainSettings.from_config(config)
    # the accountant a settings object builds (with_batch_size, a trainer built without one) is the config's
    assert settings.accountant_for(1000).describe() == accountant_from_config(config, n_train=1000).describe()
    assert settings.accountant_for(1000).describe()["eps_error"] == 0.1
