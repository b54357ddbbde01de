"""GDP closed forms (dphpo.privacy.gdp) against independent computations and libraries."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

from dphpo.privacy.gdp import (
    _log_delta,
    compose_mu,
    delta_from_mu,
    eps_from_mu,
    log_delta_array,
    mu_from_eps,
    mu_of_steps,
    sigma_for_steps,
)

DELTAS = [1e-5, 1e-6, 1e-9]


def _delta_mpmath(mu: float, eps: float) -> float:
    """δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) at 50 digits (Dong, Roth & Su, Cor. 2.13)."""
    with mpmath.workdps(50):
        mu_, eps_ = mpmath.mpf(mu), mpmath.mpf(eps)
        return float(mpmath.ncdf(-eps_ / mu_ + mu_ / 2) - mpmath.exp(eps_) * mpmath.ncdf(-eps_ / mu_ - mu_ / 2))


@pytest.mark.parametrize("mu", [0.05, 0.3, 1.0, 2.5, 6.0])
@pytest.mark.parametrize("eps", [0.0, 0.1, 1.0, 4.0, 12.0])
def test_delta_matches_high_precision_formula(mu, eps):
    expected = _delta_mpmath(mu, eps)
    got = delta_from_mu(mu, eps)
    if expected < 1e-300:
        assert got < 1e-290
    else:
        assert got == pytest.approx(expected, rel=1e-9)


def test_delta_formula_matches_scipy_norm_at_moderate_values():
    from scipy.stats import norm

    for mu, eps in [(0.5, 0.2), (1.0, 1.0), (2.0, 3.0)]:
        expected = norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2)
        assert delta_from_mu(mu, eps) == pytest.approx(expected, rel=1e-10)


def test_vectorized_log_delta_matches_scalar():
    eps = np.array([0.0, 0.01, 0.5, 3.0, 20.0, 200.0])
    for mu in [0.01, 0.5, 3.0, 30.0]:
        vec = log_delta_array(mu, eps)
        ref = np.array([_log_delta(mu, e) for e in eps])
        np.testing.assert_allclose(vec, ref, rtol=1e-12)


@pytest.mark.parametrize("delta", DELTAS)
def test_eps_mu_round_trip_over_grid(delta):
    worst = 0.0
    for eps in np.geomspace(0.01, 16.0, 60):
        back = eps_from_mu(mu_from_eps(eps, delta), delta)
        worst = max(worst, abs(back - eps) / eps)
    assert worst < 1e-9


@pytest.mark.parametrize("delta", DELTAS)
def test_mu_from_eps_is_exact_at_delta(delta):
    for eps in [0.05, 0.5, 2.0, 8.0]:
        mu = mu_from_eps(eps, delta)
        assert delta_from_mu(mu, eps) == pytest.approx(delta, rel=1e-8)


def test_eps_increases_with_mu_and_decreases_with_delta():
    mus = np.geomspace(0.01, 20.0, 40)
    for delta in DELTAS:
        eps = [eps_from_mu(m, delta) for m in mus]
        assert all(b > a for a, b in zip(eps, eps[1:]))
    for mu in [0.1, 1.0, 5.0]:
        eps = [eps_from_mu(mu, d) for d in [1e-3, 1e-5, 1e-7, 1e-9]]
        assert all(b > a for a, b in zip(eps, eps[1:]))


def test_delta_decreases_with_eps():
    d = [delta_from_mu(1.0, e) for e in np.linspace(0, 10, 50)]
    assert all(b < a for a, b in zip(d, d[1:]))


def test_zero_mu_costs_nothing_and_tiny_mu_rounds_to_zero():
    assert eps_from_mu(0.0, 1e-5) == 0.0
    assert eps_from_mu(1e-9, 1e-5) == 0.0


@pytest.mark.parametrize("mu", [1e-300, 1e-100, 1e-13, 1e-8, 1e-5, 3e-3, 9e-3, 2e-2])
@pytest.mark.parametrize("ratio", [0.0, 0.3, 1.0, 3.0, 8.0])
def test_delta_of_tiny_mu_matches_high_precision_formula(mu, ratio):
    """Small μ + ε: Φ(−ε/μ + μ/2) and e^ε·Φ(−ε/μ − μ/2) agree to most digits; their difference, taken in
    floats, underestimated δ by 1 % at μ = 1e-13 (so μ(ε, δ) came out too large). The narrow-interval
    form holds 1e-9 against 400 digits (the rest is the cancellation inherent in δ ≪ Φ at ε ≫ μ)."""
    eps = mu * ratio
    with mpmath.workdps(400):  # μ down to 1e-300: Φ differences of that size
        mu_, eps_ = mpmath.mpf(mu), mpmath.mpf(eps)
        expected = mpmath.ncdf(-eps_ / mu_ + mu_ / 2) - mpmath.exp(eps_) * mpmath.ncdf(-eps_ / mu_ - mu_ / 2)
        assert float(abs(mpmath.exp(_log_delta(mu, eps)) - expected) / expected) < 1e-9
    assert log_delta_array(mu, np.array([eps]))[0] == pytest.approx(_log_delta(mu, eps), rel=1e-14)


@pytest.mark.parametrize("eps,delta", [(1e-13, 1e-14), (1e-9, 1e-12), (0.0, 1e-300), (1e-6, 1e-7)])
def test_mu_from_eps_below_the_old_floor(eps, delta):
    """μ(ε, δ) below 1e-12 used to be clamped at 1e-12 (at ε = 1e-13, δ = 1e-14: 35 × the asked δ)."""
    with mpmath.workdps(400):  # μ down to 1e-300: Φ differences of that size
        eps_, delta_ = mpmath.mpf(eps), mpmath.mpf(delta)

        def excess(m):
            return mpmath.ncdf(-eps_ / m + m / 2) - mpmath.exp(eps_) * mpmath.ncdf(-eps_ / m - m / 2) - delta_

        expected = float(mpmath.findroot(excess, delta * 2.5 * (1 + eps / delta)))
    assert mu_from_eps(eps, delta) == pytest.approx(expected, rel=1e-9)
    if eps > 0:
        assert eps_from_mu(mu_from_eps(eps, delta), delta) == pytest.approx(eps, rel=1e-9)


def test_eps_of_a_huge_mu_is_refused_not_nan():
    with pytest.raises(ValueError, match="exceeds"):
        eps_from_mu(3e300, 1e-5)


def test_sigma_for_steps_is_sqrt_steps_over_mu():
    for steps in [1, 10, 250]:
        for eps, delta in [(0.1, 1e-5), (1.0, 1e-6), (8.0, 1e-9)]:
            sigma = sigma_for_steps(eps, delta, steps)
            assert sigma == pytest.approx(math.sqrt(steps) / mu_from_eps(eps, delta), rel=1e-15)
            assert eps_from_mu(mu_of_steps(sigma, steps), delta) == pytest.approx(eps, rel=1e-9)


def test_compose_mu_is_root_sum_of_squares():
    assert compose_mu([3.0, 4.0]) == pytest.approx(5.0)
    assert compose_mu([]) == 0.0
    assert compose_mu([0.2] * 25) == pytest.approx(1.0)


def test_known_check_linear_scaling_total():
    """methods.md §2: n = 3, ε1 = 0.1, ε2 = 0.2, ε_f = 0.88 composes to ε = 0.9963 at δ = 1e-5."""
    delta = 1e-5
    mus = [mu_from_eps(0.1, delta)] * 3 + [mu_from_eps(0.2, delta)] * 3 + [mu_from_eps(0.88, delta)]
    assert eps_from_mu(compose_mu(mus), delta) == pytest.approx(0.9963, abs=5e-4)


@pytest.mark.parametrize("bad", [0.0, 1.0, -1e-5, 2.0])
def test_invalid_delta_raises(bad):
    with pytest.raises(ValueError, match="delta"):
        eps_from_mu(1.0, bad)
    with pytest.raises(ValueError, match="delta"):
        mu_from_eps(1.0, bad)


def test_invalid_mu_and_steps_raise():
    with pytest.raises(ValueError, match="mu"):
        eps_from_mu(-1.0, 1e-5)
    with pytest.raises(ValueError, match="steps"):
        sigma_for_steps(1.0, 1e-5, 0)
    with pytest.raises(ValueError, match="eps"):
        mu_from_eps(-0.1, 1e-5)


# --- independent libraries -------------------------------------------------------------------

GAUSSIAN_CASES = [(5.0, 10), (20.0, 100), (2.0, 1), (50.0, 400)]  # (noise multiplier σ, steps T)


@pytest.mark.parametrize("sigma,steps", GAUSSIAN_CASES)
def test_prv_accountant_brackets_gdp_eps(sigma, steps):
    from prv_accountant import PRVAccountant
    from prv_accountant.privacy_random_variables import GaussianMechanism

    delta = 1e-5
    acc = PRVAccountant(
        prvs=[GaussianMechanism(noise_multiplier=sigma)],
        max_self_compositions=[steps],
        eps_error=0.01,
        delta_error=1e-8,
    )
    lower, estimate, upper = acc.compute_epsilon(delta=delta, num_self_compositions=[steps])
    ours = eps_from_mu(math.sqrt(steps) / sigma, delta)
    assert lower - 1e-3 <= ours <= upper + 1e-3
    assert ours == pytest.approx(estimate, abs=1e-3)


@pytest.mark.parametrize("sigma,steps", GAUSSIAN_CASES)
def test_dp_accounting_pld_agrees_with_gdp_eps(sigma, steps):
    from dp_accounting import dp_event
    from dp_accounting.pld import PLDAccountant

    delta = 1e-5
    acc = PLDAccountant()
    acc.compose(dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(sigma), steps))
    assert eps_from_mu(math.sqrt(steps) / sigma, delta) == pytest.approx(acc.get_epsilon(delta), rel=1e-4)


def test_prv_subsampled_gaussian_agrees_with_pld():
    from dp_accounting import dp_event
    from dp_accounting.pld import PLDAccountant

    from dphpo.privacy.prv import prv_eps_bounds_subsampled_gaussian, prv_eps_subsampled_gaussian

    q, sigma, steps, delta = 0.05, 1.0, 100, 1e-5
    bounds = prv_eps_bounds_subsampled_gaussian(q, sigma, steps, delta)
    assert bounds["eps_lower"] <= bounds["eps_estimate"] <= bounds["eps_upper"] == bounds["eps"]
    assert prv_eps_subsampled_gaussian(q, sigma, steps, delta) == bounds["eps_upper"]
    pld = PLDAccountant()
    pld.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), steps)
    assert bounds["eps_upper"] == pytest.approx(pld.get_epsilon(delta), rel=2e-2)
    # q = 1 is the plain Gaussian: the upper bound covers the exact GDP value
    full = prv_eps_bounds_subsampled_gaussian(1.0, 10.0, 50, delta)
    assert full["eps_lower"] - 1e-3 <= eps_from_mu(math.sqrt(50) / 10.0, delta) <= full["eps_upper"]


def test_prv_sigma_for_meets_the_target():
    from dphpo.privacy.prv import prv_eps_subsampled_gaussian, prv_sigma_for

    q, steps, eps, delta = 0.1, 20, 2.0, 1e-5
    sigma = prv_sigma_for(q, steps, eps, delta, rtol=1e-2)
    assert prv_eps_subsampled_gaussian(q, sigma, steps, delta) <= eps
    assert prv_eps_subsampled_gaussian(q, sigma / 1.02, steps, delta) > eps


def test_calibration_steps_past_an_infinite_eps_without_stalling():
    """An accountant that returns ε = inf below some σ (prv-accountant at σ far too small) used to pin
    the false-position search at its bracket end, moving 0.03 % per (1 s) evaluation: `sigma --eps 1000
    --accountant prv` never returned. Now it bisects against the infinite end."""
    from dphpo.privacy.calibrate import calibrate_log_sigma

    calls = []

    def eps_of(sigma):
        calls.append(sigma)
        return math.inf if sigma < 0.02 else eps_from_mu(1.0 / sigma, 1e-5)

    exact = 1.0 / mu_from_eps(1000.0, 1e-5)  # ≈ 0.0246, above the infinite region
    found = calibrate_log_sigma(eps_of, 1000.0, 1e-4, rtol=1e-3)
    assert exact <= found <= exact * 1.001 and len(calls) < 40


def test_smallest_sigma_finds_the_closed_form_sigma_from_above():
    from dphpo.privacy.calibrate import smallest_sigma

    steps, eps, delta = 50, 1.0, 1e-5
    exact = math.sqrt(steps) / mu_from_eps(eps, delta)
    found = smallest_sigma(lambda s: eps_from_mu(math.sqrt(steps) / s, delta) <= eps, rtol=1e-6)
    assert exact <= found <= exact * (1 + 1e-6)
    with pytest.raises(ValueError, match="meets eps=1"):
        smallest_sigma(lambda s: False, ceiling=1e3, what="eps=1")
    with pytest.raises(ValueError, match="down to 0.001"):
        smallest_sigma(lambda s: True, floor=1e-3, floor_is_error=True)
