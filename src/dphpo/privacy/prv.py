"""Numerical composition with the PRV accountant (Gopi, Lee & Wutschitz 2021): minibatch DP-SGD runs.

Subsampled Gaussian steps are not exactly GDP-composable (docs/methods.md §0); `prv-accountant` composes
their privacy loss distributions numerically and returns lower/estimate/upper bounds on ε; dphpo
always reports the **upper** bound. `compose_prv` is the one place the accountant is called: by the
ledger (`Ledger.total` of PRV and GDP entries), the run accountant `dphpo.privacy.accountant.PrvAccountant`
and the CLI.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from scipy.optimize import brentq

from dphpo.errors import ConfigError
from dphpo.privacy.calibrate import calibrate_log_sigma
from dphpo.privacy.gdp import mu_from_eps

ACCOUNTANT = "prv_accountant (PRVAccountant, PoissonSubsampledGaussianMechanism), upper bound"
# prv-accountant discretises the privacy loss on 2L/mesh points, kept in several float128 arrays:
# 5e7 points is about 0.8 GB per array. Tiny σ, huge T or a tiny eps_error ask for billions (26 GiB and
# more), which would exhaust memory after minutes; they are refused before the arrays exist.
MAX_GRID_POINTS = 50_000_000


def grid_points(prvs: list, counts: list[int], eps_error: float, delta_error: float) -> float:
    """Points of the grid PRVAccountant would build (its Theorem 5.5 mesh over its safe domain)."""
    from prv_accountant.accountant import compute_safe_domain_size  # prv-accountant takes ~1 s to import

    half_width = compute_safe_domain_size(prvs, counts, eps_error=eps_error, delta_error=delta_error)
    mesh = eps_error / math.sqrt(sum(counts) / 2 * math.log(12 / delta_error))
    return 2 * half_width / mesh


def _check(q: float, sigma: float, steps: int, delta: float) -> None:
    if not 0.0 < q <= 1.0:
        raise ValueError(f"q (sampling rate) must lie in (0, 1], got {q}")
    if not (sigma > 0 and math.isfinite(sigma)):
        raise ValueError(f"sigma must be a positive finite number, got {sigma}")
    if int(steps) != steps or steps < 1:
        raise ValueError(f"steps must be an integer >= 1, got {steps}")
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must lie in (0, 1), got {delta}")


@functools.lru_cache(maxsize=512)
def compose_prv(
    runs: tuple[tuple[float, float, int], ...],
    gaussian_mu: float,
    delta: float,
    eps_error: float = 0.01,
    delta_error: float | None = None,
) -> dict[str, Any]:
    """ε bounds (lower, estimate, upper) at δ of Poisson-subsampled Gaussian runs and a Gaussian, composed.

    runs: (q, σ, T) — T steps at sampling rate q and noise multiplier σ (sensitivity 1); gaussian_mu:
    the μ of every Gaussian release composed (GaussianMechanism of noise multiplier 1/μ; 0: none).
    A run with q = 1 is a Gaussian of μ = √T/σ and joins that term exactly. delta_error defaults to
    δ/1000 (prv-accountant's recommendation). Memoised: the accountant takes ~1 s per mechanism and
    calibration and the ledger ask the same question.
    """
    from prv_accountant import PRVAccountant  # on use: prv-accountant takes ~1 s to import
    from prv_accountant.privacy_random_variables import GaussianMechanism, PoissonSubsampledGaussianMechanism

    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must lie in (0, 1), got {delta}")
    if not (gaussian_mu >= 0 and math.isfinite(gaussian_mu)):
        raise ValueError(f"gaussian_mu must be finite and >= 0, got {gaussian_mu}")
    gauss_sq = gaussian_mu**2
    prvs, counts = [], []
    for q, sigma, steps in runs:
        _check(q, sigma, steps, delta)
        if q == 1.0:
            gauss_sq += steps / sigma**2
        else:
            prvs.append(PoissonSubsampledGaussianMechanism(sampling_probability=q, noise_multiplier=sigma))
            counts.append(int(steps))
    if gauss_sq > 0:
        prvs.append(GaussianMechanism(noise_multiplier=1.0 / math.sqrt(gauss_sq)))
        counts.append(1)
    delta_error = delta / 1000.0 if delta_error is None else delta_error
    out = {"eps_error": eps_error, "delta_error": delta_error, "delta": delta, "accountant": ACCOUNTANT}
    if not prvs:
        return out | {"eps_lower": 0.0, "eps_estimate": 0.0, "eps_upper": 0.0, "eps": 0.0}
    points = grid_points(prvs, counts, eps_error, delta_error)
    if not points <= MAX_GRID_POINTS:
        raise ConfigError(
            f"PRV accounting of {sum(counts)} steps (runs q, sigma, T: {list(runs)}) at eps_error={eps_error:g} needs a "
            f"grid of {points:.3g} points (limit {MAX_GRID_POINTS:.0e}, about 16 bytes each per array): use a larger "
            "noise multiplier (--sigma), fewer steps (--steps) or a larger eps error (--eps-error, privacy.eps_error)"
        )
    # both arguments must be lists: a bare value for max_self_compositions raises TypeError
    try:
        acc = PRVAccountant(prvs=prvs, max_self_compositions=counts, eps_error=eps_error, delta_error=delta_error)
        bounds = acc.compute_epsilon(delta=delta, num_self_compositions=counts)
    except RuntimeError as err:  # its discretisation failed, or δ lies beyond the δ(ε) its grid covers
        raise ValueError(f"prv-accountant cannot compute eps at delta={delta:g} for runs (q, sigma, T) {list(runs)}: {err}") from None
    if any(math.isnan(e) for e in bounds):
        raise ValueError(f"prv-accountant returned eps bounds {bounds} at delta={delta:g} for runs (q, sigma, T) {list(runs)}")
    # every mechanism is (0, δ)-DP at a δ at least its total variation: the numerical ε is negative there
    lower, estimate, upper = (max(0.0, float(e)) for e in bounds)
    return out | {"eps_lower": lower, "eps_estimate": estimate, "eps_upper": upper, "eps": upper}


def prv_eps_bounds_subsampled_gaussian(
    q: float, sigma: float, steps: int, delta: float, eps_error: float = 0.01, delta_error: float | None = None
) -> dict[str, Any]:
    """ε bounds (lower, estimate, upper) of `steps` Poisson-subsampled Gaussian steps at δ.

    q: sampling rate (batch size / N), sigma: noise multiplier (noise std / clipping norm).
    delta_error defaults to δ/1000 (prv-accountant's recommendation).
    """
    _check(q, sigma, steps, delta)
    bounds = compose_prv(((float(q), float(sigma), int(steps)),), 0.0, float(delta), float(eps_error), delta_error)
    return dict(bounds) | {"q": q, "sigma": sigma, "steps": int(steps)}


def prv_eps_subsampled_gaussian(q: float, sigma: float, steps: int, delta: float, eps_error: float = 0.01) -> float:
    """Upper bound on ε of `steps` Poisson-subsampled Gaussian steps (rate q, noise multiplier σ) at δ."""
    return prv_eps_bounds_subsampled_gaussian(q, sigma, steps, delta, eps_error)["eps_upper"]


def clt_sigma(q: float, steps: int, mu: float) -> float:
    """σ at which T subsampled steps are ≈ μ-GDP by the central limit theorem of Bu et al. (2020):
    μ ≈ q·√(T(e^{1/σ²} − 1)). A starting point for calibration, never a guarantee."""
    clt = lambda ls: q * math.sqrt(steps * math.expm1(math.exp(-2.0 * ls))) - mu  # noqa: E731
    try:
        return math.exp(brentq(clt, math.log(0.05), math.log(1e4)))
    except ValueError:
        return 1.0


def prv_sigma_for(q: float, steps: int, eps: float, delta: float, eps_error: float = 0.01, rtol: float = 3e-3) -> float:
    """Smallest σ (to relative precision rtol) whose PRV upper bound for `steps` subsampled steps is ≤ eps.

    About 5 accountant calls (`dphpo.privacy.calibrate.calibrate_log_sigma`), starting from the
    central-limit GDP approximation (`clt_sigma`). The returned σ always satisfies the PRV bound.
    """
    if not (eps > 0 and math.isfinite(eps)):
        raise ValueError(f"eps must be a positive finite number, got {eps}")
    if eps <= eps_error:
        raise ValueError(f"eps={eps} must exceed eps_error={eps_error}")
    _check(q, 1.0, steps, delta)

    def eps_of(sigma: float) -> float:
        try:
            return prv_eps_subsampled_gaussian(q, sigma, int(steps), delta, eps_error)
        except ValueError:  # beyond what prv-accountant computes: count σ as failing, the safe side
            return math.inf

    return calibrate_log_sigma(
        eps_of,
        eps,
        clt_sigma(q, steps, mu_from_eps(eps, delta)),
        rtol=rtol,
        what=f"eps={eps} (q={q}, steps={steps}, delta={delta})",
    )
