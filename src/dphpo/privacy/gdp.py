"""Gaussian differential privacy closed forms (Dong, Roth & Su 2022).

A μ-GDP mechanism is (ε, δ(ε))-DP for every ε ≥ 0 with
    δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2)            (Corollary 2.13)
T full-batch DP-GD steps with noise std σ·C on a sum of C-clipped gradients are μ-GDP with
μ = √T/σ (Panda et al., Theorem B.5); adaptive composition adds μ² (Corollary 3.3).
All computations run in log space so tiny δ and large ε stay accurate.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import numpy as np
from scipy.optimize import brentq
from scipy.special import log_ndtr

_MU_MAX = 1e4
_MU_MIN = 1e-300
_EPS_MAX = 1e4


#: Below this μ + ε the two Φ terms of δ(ε) agree to about −log10(μ + ε) digits and their difference
#: loses as many: there δ is computed from the width-μ integral of φ instead (`_narrow_log_delta`).
_NARROW = 1e-2


def _log1m_exp(x: float) -> float:
    """log(1 − e^x) for x < 0, accurate near 0 and far below it."""
    return math.log(-math.expm1(x)) if x > -0.693 else math.log1p(-math.exp(x))


def _log_delta(mu: float, eps: float) -> float:
    """log δ(ε) of a μ-GDP mechanism; −inf when δ underflows to 0."""
    if mu + eps < _NARROW:
        return _narrow_log_delta(mu, eps)
    log_a = log_ndtr(-eps / mu + mu / 2.0)
    log_b = eps + log_ndtr(-eps / mu - mu / 2.0)
    diff = log_b - log_a  # ≤ 0: δ = Φ(a)(1 − e^diff)
    if diff >= 0.0:
        return -math.inf
    return float(log_a + _log1m_exp(diff))


def _narrow_log_delta(mu: float, eps: float) -> float:
    """log δ(ε) for small μ + ε, where Φ(−t + μ/2) − Φ(−t − μ/2) (t = ε/μ) cancels in floating point.

    δ = [Φ(−t + μ/2) − Φ(−t − μ/2)] − (e^ε − 1)·Φ(−t − μ/2). The bracket is the integral of φ over a
    width-μ interval around −t: μ·φ(t)·(1 + (t² − 1)μ²/24 + (t⁴ − 6t² + 3)μ⁴/1920 + …) (Taylor in the
    half-width; the next term is below (μ + ε)⁶/3·10⁵ relative). The remaining difference loses at most
    log10(t²) digits (δ/bracket ≥ ~1/t² by Mills' ratio).
    """
    t = eps / mu
    m2, t2 = mu * mu, t * t
    log_a = (
        math.log(mu)
        - 0.5 * t2
        - 0.5 * math.log(2.0 * math.pi)
        + math.log1p((t2 - 1.0) * m2 / 24.0 + (t2 * t2 - 6.0 * t2 + 3.0) * m2 * m2 / 1920.0)
    )
    if eps == 0.0:
        return log_a
    log_b = math.log(math.expm1(eps)) + float(log_ndtr(-t - mu / 2.0))
    diff = log_b - log_a
    if diff >= 0.0:
        return -math.inf
    return float(log_a + _log1m_exp(diff))


def log_delta_array(mu: float, eps: np.ndarray) -> np.ndarray:
    """Vectorized log δ(ε) of a μ-GDP mechanism over an array of ε ≥ 0 (−inf where δ underflows);
    `_log_delta` element by element, with the wide case in numpy."""
    _check_positive("mu", mu)
    eps = np.asarray(eps, dtype=float)
    log_a = log_ndtr(-eps / mu + mu / 2.0)
    log_b = eps + log_ndtr(-eps / mu - mu / 2.0)
    diff = np.minimum(log_b - log_a, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        near = diff > -0.693
        log1m = np.where(
            near, np.log(-np.expm1(np.where(near, diff, -1.0))), np.log1p(-np.exp(np.where(near, -1.0, diff)))
        )
    out = np.where(diff >= 0.0, -np.inf, log_a + log1m)
    narrow = mu + eps < _NARROW
    if np.any(narrow):
        out[narrow] = [_narrow_log_delta(mu, float(e)) for e in eps[narrow]]
    return out


def delta_from_mu(mu: float, eps: float) -> float:
    """δ such that a μ-GDP mechanism is (ε, δ)-DP."""
    _check_positive("mu", mu)
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    return math.exp(_log_delta(mu, eps))


def eps_from_mu(mu: float, delta: float) -> float:
    """Smallest ε ≥ 0 with δ(ε) ≤ δ for a μ-GDP mechanism."""
    _check_delta(delta)
    if mu == 0.0:
        return 0.0
    _check_positive("mu", mu)
    if mu > _MU_MAX:  # ε grows with μ and is about μ²/2 = 5·10⁷ at μ = 10⁴ for any δ
        raise ValueError(f"eps for mu={mu:g}, delta={delta:g} exceeds {_EPS_MAX:g}")
    target = math.log(delta)
    if _log_delta(mu, 0.0) <= target:
        return 0.0
    hi = max(1.0, mu * mu)
    while _log_delta(mu, hi) > target:
        hi *= 2.0
        if hi > _EPS_MAX:
            raise ValueError(f"eps for mu={mu}, delta={delta} exceeds {_EPS_MAX}")
    return _root(lambda e: _log_delta(mu, e) - target, 0.0, hi)


def mu_from_eps(eps: float, delta: float) -> float:
    """Largest μ such that μ-GDP implies (ε, δ)-DP."""
    _check_delta(delta)
    if not eps >= 0 or math.isinf(eps):  # NaN fails both comparisons
        raise ValueError(f"eps must be finite and >= 0, got {eps}")
    target = math.log(delta)
    lo, hi = 1e-12, 1.0
    while _log_delta(hi, eps) < target:
        hi *= 2.0
        if hi > _MU_MAX:
            raise ValueError(f"mu for eps={eps}, delta={delta} exceeds {_MU_MAX}")
    while _log_delta(lo, eps) >= target:  # δ(0) ≈ μ/√(2π): the root lies above ~δ
        lo /= 16.0
        if lo < _MU_MIN:
            raise ValueError(f"mu for eps={eps}, delta={delta} is below {_MU_MIN}")
    return _root(lambda m: _log_delta(m, eps) - target, lo, hi)


def _root(f: Callable[[float], float], lo: float, hi: float) -> float:
    """Root of an increasing or decreasing f in [lo, hi] to about 1e-15 relative. brentq's absolute
    tolerance (1e-15) is that only for roots near 1 and above; a small root is solved again without it."""
    x = brentq(f, lo, hi, xtol=1e-15, rtol=1e-15, maxiter=500)
    if x < 1e-3:
        x = brentq(f, lo, hi, xtol=1e-300, rtol=1e-15, maxiter=500)
    return float(x)


def sigma_for_steps(eps: float, delta: float, steps: int) -> float:
    """Noise multiplier σ so that `steps` full-batch steps are (ε, δ)-DP: σ = √T / μ(ε, δ)."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    return math.sqrt(steps) / mu_from_eps(eps, delta)


def mu_of_steps(sigma: float, steps: int) -> float:
    """μ of `steps` full-batch steps with noise multiplier σ: √T / σ."""
    _check_positive("sigma", sigma)
    return math.sqrt(steps) / sigma


def compose_mu(mus: Iterable[float]) -> float:
    """μ of the adaptive composition of GDP mechanisms: √(Σ μ_i²)."""
    return float(math.sqrt(sum(float(m) ** 2 for m in mus)))


def _check_positive(name: str, value: float) -> None:
    if not (value > 0 and np.isfinite(value)):
        raise ValueError(f"{name} must be a positive finite number, got {value}")


def _check_delta(delta: float) -> None:
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must lie in (0, 1), got {delta}")
