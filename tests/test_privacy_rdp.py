"""RDP accounting (dphpo.privacy.rdp) against dp_accounting's independent implementation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.rdp import RdpAccountant
from dp_accounting.rdp import rdp_privacy_accountant as dp_rdp

from dphpo.privacy.gdp import eps_from_mu
from dphpo.privacy.rdp import (
    DEFAULT_ORDERS,
    gdp_rdp,
    poisson_subsampled_rdp,
    rdp_at,
    rdp_to_delta,
    rdp_to_dp,
    subsampled_gaussian_rdp,
)
from dphpo.privacy.tuning import (
    calibrate_ps_mu,
    ps_gdp_rdp,
    ps_ledger_entry,
    ps_rdp,
    ps_tuned_eps,
    resolve_distribution,
    tnb_gamma,
    tnb_mean,
)

DELTA = 1e-5
#: a moderate grid for the comparisons (dp_accounting's Poisson branch is quadratic in the grid size)
GRID = 1.0 + np.geomspace(1e-2, 1e4, 200)
SHAPES = {"logarithmic": 0.0, "geometric": 1.0, "poisson": math.inf}


def _dp_accounting_ps(mu, mean, shape, orders):
    acc = RdpAccountant(orders=list(orders))
    acc.compose(dp_event.RepeatAndSelectDpEvent(dp_event.GaussianDpEvent(1.0 / mu), mean, shape))
    return acc.get_epsilon(DELTA)


def test_gdp_rdp_is_lambda_mu_squared_over_two():
    np.testing.assert_allclose(gdp_rdp(0.5, [2.0, 10.0]), [0.25, 1.25])
    # dp_accounting's Gaussian: noise multiplier σ = 1/μ has RDP λ/(2σ²)
    acc = RdpAccountant(orders=[2.0, 10.0])
    acc.compose(dp_event.GaussianDpEvent(2.0))
    np.testing.assert_allclose(acc._rdp, gdp_rdp(0.5, [2.0, 10.0]), rtol=1e-14)


@pytest.mark.parametrize("sigma,steps", [(1.0, 1), (5.0, 20), (30.0, 500)])
def test_rdp_to_dp_matches_dp_accounting_conversion(sigma, steps):
    orders = dp_rdp.DEFAULT_RDP_ORDERS
    rdp = gdp_rdp(math.sqrt(steps) / sigma, orders)
    theirs, their_order = dp_rdp.compute_epsilon(orders, rdp, DELTA)
    ours, our_order = rdp_to_dp(orders, rdp, DELTA, return_order=True)
    assert ours == pytest.approx(theirs, rel=1e-12)
    assert our_order == their_order
    classic = rdp_to_dp(orders, rdp, DELTA, conversion="classic")
    assert classic >= ours
    # RDP accounting of a Gaussian is valid (never below the exact GDP value)
    assert ours >= eps_from_mu(math.sqrt(steps) / sigma, DELTA)


def test_rdp_to_delta_inverts_rdp_to_dp():
    rdp = gdp_rdp(0.7, DEFAULT_ORDERS)
    eps = rdp_to_dp(DEFAULT_ORDERS, rdp, DELTA)
    assert rdp_to_delta(DEFAULT_ORDERS, rdp, eps) == pytest.approx(DELTA, rel=1e-6)
    theirs, _ = dp_rdp.compute_delta(dp_rdp.DEFAULT_RDP_ORDERS, gdp_rdp(0.7, dp_rdp.DEFAULT_RDP_ORDERS), 2.0)
    assert rdp_to_delta(dp_rdp.DEFAULT_RDP_ORDERS, gdp_rdp(0.7, dp_rdp.DEFAULT_RDP_ORDERS), 2.0) == pytest.approx(
        theirs, rel=1e-10
    )


def test_rdp_to_dp_edge_cases():
    assert rdp_to_dp([2.0, 3.0], [0.0, 0.0], DELTA) == 0.0
    assert rdp_to_dp([2.0], [math.inf], DELTA) == math.inf
    with pytest.raises(ValueError, match="delta"):
        rdp_to_dp([2.0], [1.0], 0.0)
    with pytest.raises(ValueError, match="length"):
        rdp_to_dp([2.0, 3.0], [1.0], DELTA)


def test_rdp_at_uses_the_next_larger_order():
    values = rdp_at([2.0, 4.0, 8.0], [1.0, 3.0, 2.5], [1.5, 2.0, 3.0, 5.0, 9.0])
    np.testing.assert_array_equal(values, [1.0, 1.0, 2.5, 2.5, math.inf])


# --- Papernot & Steinke ----------------------------------------------------------------------


def test_tnb_gamma_reaches_log_inverse_gamma_up_to_700():
    """E[K] ≈ η/γ: 1e250 needs log(1/γ) ≈ 576, past the old bracket's last doubling (512)."""
    gamma = tnb_gamma(1e250, 0.5)
    assert 512 < -math.log(gamma) < 700
    assert tnb_mean(gamma, 0.5) == pytest.approx(1e250, rel=1e-9)
    with pytest.raises(ValueError, match="out of reach for eta=-0.99999999"):
        tnb_gamma(10.0, -0.99999999)


def test_subsampled_gaussian_rdp_is_never_negative():
    """At a huge σ the exact value is 0; rounding used to leave −1e-17, which the ledger refuses."""
    rdp = subsampled_gaussian_rdp(0.1, 1e300, 10)
    assert np.all(rdp >= 0.0) and np.all(rdp < 1e-12)


@pytest.mark.parametrize("eta", [-0.5, 0.0, 0.5, 1.0, 3.0])
@pytest.mark.parametrize("mean", [1.0, 2.0, 10.0, 100.0])
def test_tnb_gamma_inverts_the_mean(eta, mean):
    gamma = tnb_gamma(mean, eta)
    assert tnb_mean(gamma, eta) == pytest.approx(mean, rel=1e-10)
    if eta >= 0:
        assert gamma == pytest.approx(dp_rdp._gamma_truncated_negative_binomial(eta, mean), rel=1e-7)


def test_tnb_special_cases():
    assert tnb_gamma(10.0, 1.0) == pytest.approx(0.1)  # geometric: E[K] = 1/γ
    g = 0.05
    assert tnb_mean(g, 0.0) == pytest.approx((1 - g) / (g * math.log(1 / g)))  # logarithmic
    assert tnb_mean(g, 1e-9) == pytest.approx(tnb_mean(g, 0.0), rel=1e-7)  # continuous at η = 0
    assert tnb_mean(g, 2.0) == pytest.approx(2.0 * (1 - g) / (g * (1 - g**2)))


def test_resolve_distribution():
    assert resolve_distribution("logarithmic") == ("tnb", 0.0)
    assert resolve_distribution("geometric", 1.0) == ("tnb", 1.0)
    assert resolve_distribution("tnb", 0.5) == ("tnb", 0.5)
    assert resolve_distribution("poisson") == ("poisson", math.inf)
    with pytest.raises(ValueError, match="eta"):
        resolve_distribution("tnb")
    with pytest.raises(ValueError, match="eta"):
        resolve_distribution("tnb", -1.0)
    with pytest.raises(ValueError, match="eta"):
        resolve_distribution("geometric", 0.5)
    with pytest.raises(ValueError, match="distribution"):
        resolve_distribution("uniform")


@pytest.mark.parametrize("distribution,eta", [("logarithmic", None), ("geometric", None), ("tnb", 0.5), ("tnb", 2.0)])
@pytest.mark.parametrize("mu", [0.05, 0.3, 1.0])
@pytest.mark.parametrize("mean", [5.0, 20.0])
def test_ps_tnb_agrees_with_dp_accounting(distribution, eta, mu, mean):
    """Same orders on both sides: ours (continuous λ̂) is never above theirs and within 0.1 %."""
    shape = SHAPES.get(distribution, eta)
    theirs = _dp_accounting_ps(mu, mean, shape, DEFAULT_ORDERS)
    ours = ps_tuned_eps(mu, distribution, mean, eta, DELTA)
    assert ours <= theirs * (1 + 1e-9)
    assert ours == pytest.approx(theirs, rel=1e-3)
    # the generic curve with λ̂ on the grid reproduces theirs to rounding
    generic = ps_rdp(GRID, lambda lam: gdp_rdp(mu, lam), distribution, mean, eta)
    assert rdp_to_dp(GRID, generic, DELTA) == pytest.approx(_dp_accounting_ps(mu, mean, shape, GRID), rel=1e-9)


@pytest.mark.parametrize("mu,mean", [(0.05, 10.0), (0.3, 5.0), (1.0, 50.0)])
def test_ps_poisson_agrees_with_dp_accounting(mu, mean):
    """dp_accounting (shape=inf) reads δ̂ off the RDP curve: our 'rdp' variant reproduces it; the exact
    GDP δ̂ (default) is a valid, tighter guarantee — never above theirs."""
    theirs = _dp_accounting_ps(mu, mean, math.inf, GRID)
    generic = ps_rdp(GRID, lambda lam: gdp_rdp(mu, lam), "poisson", mean)
    assert rdp_to_dp(GRID, generic, DELTA) == pytest.approx(theirs, rel=1e-9)
    via_rdp = ps_tuned_eps(mu, "poisson", mean, None, DELTA, orders=GRID, poisson_delta="rdp")
    assert via_rdp == pytest.approx(theirs, rel=1e-9)
    exact = ps_tuned_eps(mu, "poisson", mean, None, DELTA, orders=GRID)
    assert eps_from_mu(mu, DELTA) < exact <= theirs


def test_ps_with_one_trial_costs_the_trial():
    """E[K] = 1 (TNB: K = 1 surely): the tuned curve is the base curve."""
    for dist in ["logarithmic", "geometric"]:
        np.testing.assert_allclose(ps_gdp_rdp(0.4, dist, 1.0, orders=GRID), gdp_rdp(0.4, GRID), rtol=1e-12)


def test_ps_cost_grows_with_mean_trials_and_mu():
    for dist in ["logarithmic", "geometric", "poisson"]:
        by_mean = [ps_tuned_eps(0.3, dist, m, None, DELTA) for m in [1.0, 3.0, 10.0, 30.0]]
        assert all(b > a for a, b in zip(by_mean, by_mean[1:]))
        by_mu = [ps_tuned_eps(m, dist, 10.0, None, DELTA) for m in [0.05, 0.2, 1.0]]
        assert all(b > a for a, b in zip(by_mu, by_mu[1:]))


def test_ps_negative_eta_is_supported_and_between_neighbours():
    low = ps_tuned_eps(0.3, "tnb", 10.0, -0.5, DELTA)
    log = ps_tuned_eps(0.3, "logarithmic", 10.0, None, DELTA)
    assert 0 < low < log


@pytest.mark.parametrize("distribution,eta", [("geometric", None), ("tnb", 0.5), ("poisson", None)])
def test_calibrate_ps_mu_hits_the_target(distribution, eta):
    mu = calibrate_ps_mu(1.0, DELTA, distribution, 10.0, eta)
    eps = ps_tuned_eps(mu, distribution, 10.0, eta, DELTA)
    assert eps <= 1.0
    assert eps == pytest.approx(1.0, rel=1e-8)


def test_calibrate_ps_mu_small_targets_give_small_feasible_mu():
    """As μ → 0 the trials become pure noise and the tuning becomes free, so small targets stay feasible."""
    mu = calibrate_ps_mu(1e-3, DELTA, "geometric", 1000.0)
    assert 0 < mu < 1e-3
    assert ps_tuned_eps(mu, "geometric", 1000.0, None, DELTA) <= 1e-3


def test_calibrate_ps_mu_rejects_bad_input():
    with pytest.raises(ValueError, match="target_eps"):
        calibrate_ps_mu(0.0, DELTA, "geometric", 10.0)
    with pytest.raises(ValueError, match="mean_trials"):
        calibrate_ps_mu(1.0, DELTA, "geometric", 0.5)


def test_ps_ledger_entry_records_its_parameters():
    entry = ps_ledger_entry(0.2, "tnb", 10.0, 0.5)
    assert entry.mechanism == "rdp" and entry.mu is None
    assert entry.details["eta"] == 0.5 and entry.details["mean_trials"] == 10.0
    assert entry.details["gamma"] == pytest.approx(tnb_gamma(10.0, 0.5))


# --- Poisson subsampling -----------------------------------------------------------------------


@pytest.mark.parametrize("q,sigma,steps", [(0.01, 1.0, 1000), (0.1, 2.0, 50), (0.5, 0.8, 3)])
def test_subsampled_gaussian_rdp_matches_dp_accounting(q, sigma, steps):
    ints = [2.0, 3.0, 5.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0]
    acc = RdpAccountant(orders=ints)
    acc.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), steps)
    ours = subsampled_gaussian_rdp(q, sigma, steps, ints)
    np.testing.assert_allclose(ours, acc._rdp, rtol=1e-9)
    # fractional orders take the value at the next integer: never below dp_accounting's fractional formula
    frac = [1.5, 2.5, 10.5]
    acc_f = RdpAccountant(orders=frac)
    acc_f.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), steps)
    finite = np.isfinite(acc_f._rdp)  # dp_accounting's fractional series may fail to converge (inf)
    assert np.all(subsampled_gaussian_rdp(q, sigma, steps, frac)[finite] >= acc_f._rdp[finite] * (1 - 1e-12))
    # end to end, through the ledger (integer orders on both sides)
    from dphpo.privacy.ledger import Ledger

    ledger = Ledger()
    ledger.add_rdp("minibatch run", ints, ours)
    assert ledger.total(DELTA)["eps"] == pytest.approx(acc.get_epsilon(DELTA), rel=1e-9)


def test_subsampled_gaussian_limits():
    orders = [2.0, 4.0, 10.0]
    np.testing.assert_allclose(subsampled_gaussian_rdp(1.0, 2.0, 3, orders), gdp_rdp(math.sqrt(3) / 2.0, orders))
    np.testing.assert_array_equal(subsampled_gaussian_rdp(0.0, 2.0, 3, orders), 0.0)
    assert np.all(subsampled_gaussian_rdp(0.3, 2.0, 3, orders) < gdp_rdp(math.sqrt(3) / 2.0, orders))


def test_zhu_wang_general_bound_on_a_gaussian():
    """General bound ≥ the exact subsampled Gaussian, ≤ it + log(3)/(α−1), and ≤ the base curve."""
    orders = np.arange(2.0, 65.0)
    for q, sigma in [(0.01, 1.0), (0.1, 3.0), (0.5, 1.0)]:
        exact = subsampled_gaussian_rdp(q, sigma, 1, orders)
        general = poisson_subsampled_rdp(q, lambda lam, sigma=sigma: gdp_rdp(1.0 / sigma, lam), orders)
        assert np.all(general >= exact * (1 - 1e-12))
        assert np.all(general <= exact + math.log(3.0) / (orders - 1.0) + 1e-12)
        assert np.all(general <= gdp_rdp(1.0 / sigma, orders) + 1e-12)


def test_zhu_wang_amplifies_a_tuning_curve_given_on_a_grid():
    grid = np.arange(2.0, 65.0)
    tuning = ps_gdp_rdp(0.5, "geometric", 10.0, orders=grid)
    amplified = poisson_subsampled_rdp(0.1, tuning, grid, base_orders=grid)
    assert np.all(amplified <= tuning + 1e-12)
    assert rdp_to_dp(grid, amplified, DELTA) < rdp_to_dp(grid, tuning, DELTA)
