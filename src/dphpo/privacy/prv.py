"""Minibatch (Poisson-subsampled) DP-SGD accounting with the PRV accountant (Gopi, Lee & Wutschitz 2021).

Subsampled Gaussian steps are not exactly GDP-composable (methods.md §0); `prv-accountant` composes
their privacy loss distributions numerically and returns lower/estimate/upper bounds on ε; dphpo
always reports the **upper** bound.
"""

from __future__ import annotations

import math
from typing import Any

from prv_accountant import PRVAccountant
from prv_accountant.privacy_random_variables import GaussianMechanism, PoissonSubsampledGaussianMechanism

from dphpo.privacy.calibrate import smallest_sigma

ACCOUNTANT = "prv_accountant (PRVAccountant, PoissonSubsampledGaussianMechanism), upper bound"


def _check(q: float, sigma: float, steps: int, delta: float) -> None:
    if not 0.0 < q <= 1.0:
        raise ValueError(f"q (sampling rate) must lie in (0, 1], got {q}")
    if not (sigma > 0 and math.isfinite(sigma)):
        raise ValueError(f"sigma must be a positive finite number, got {sigma}")
    if int(steps) != steps or steps < 1:
        raise ValueError(f"steps must be an integer >= 1, got {steps}")
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must lie in (0, 1), got {delta}")


def prv_eps_bounds_subsampled_gaussian(
    q: float, sigma: float, steps: int, delta: float, eps_error: float = 0.01, delta_error: float | None = None
) -> dict[str, Any]:
    """ε bounds (lower, estimate, upper) of `steps` Poisson-subsampled Gaussian steps at δ.

    q: sampling rate (batch size / N), sigma: noise multiplier (noise std / clipping norm).
    delta_error defaults to δ/1000 (prv-accountant's recommendation).
    """
    _check(q, sigma, steps, delta)
    delta_error = delta / 1000.0 if delta_error is None else delta_error
    steps = int(steps)
    prv = (
        GaussianMechanism(noise_multiplier=sigma)
        if q == 1.0
        else PoissonSubsampledGaussianMechanism(sampling_probability=q, noise_multiplier=sigma)
    )
    # both arguments must be lists: a bare value for max_self_compositions raises TypeError
    acc = PRVAccountant(prvs=[prv], max_self_compositions=[steps], eps_error=eps_error, delta_error=delta_error)
    lower, estimate, upper = acc.compute_epsilon(delta=delta, num_self_compositions=[steps])
    return {
        "eps_lower": float(lower),
        "eps_estimate": float(estimate),
        "eps_upper": float(upper),
        "eps": float(upper),
        "delta": delta,
        "q": q,
        "sigma": sigma,
        "steps": steps,
        "eps_error": eps_error,
        "delta_error": delta_error,
        "accountant": ACCOUNTANT,
    }


def prv_eps_subsampled_gaussian(q: float, sigma: float, steps: int, delta: float, eps_error: float = 0.01) -> float:
    """Upper bound on ε of `steps` Poisson-subsampled Gaussian steps (rate q, noise multiplier σ) at δ."""
    return prv_eps_bounds_subsampled_gaussian(q, sigma, steps, delta, eps_error)["eps_upper"]


def prv_sigma_for(q: float, steps: int, eps: float, delta: float, eps_error: float = 0.01, rtol: float = 1e-3) -> float:
    """Smallest noise multiplier σ (to relative precision `rtol`) whose PRV upper bound is ≤ eps.

    Bisection in log σ; every step runs the PRV accountant, so this takes ~20–40 accountant calls
    (seconds for thousands of steps). The returned σ always satisfies the bound; it is at most a factor
    (1 + rtol) above the exact solution.
    """
    if not (eps > 0 and math.isfinite(eps)):
        raise ValueError(f"eps must be a positive finite number, got {eps}")
    if eps <= eps_error:
        raise ValueError(f"eps={eps} must exceed eps_error={eps_error}")
    _check(q, 1.0, steps, delta)

    def ok(sigma: float) -> bool:
        return prv_eps_subsampled_gaussian(q, sigma, steps, delta, eps_error) <= eps

    return smallest_sigma(ok, start=1.0, floor=1e-3, ceiling=1e5, rtol=rtol, floor_is_error=True,
                          what=f"eps={eps} (q={q}, steps={steps}, delta={delta})")
