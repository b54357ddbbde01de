"""Rényi DP curves: the RDP math under the ledger (docs/methods.md §4).

Everything here produces RDP curves ε(λ) on a grid of orders λ > 1, or reads one; the ledger composes
them (sums) and converts the total to (ε, δ) once, in `Ledger.total` (the one place every reported ε
comes from). Papernot–Steinke tuning, built on these curves, is `dphpo.privacy.tuning`.

Formulas, as named in the papers:
- μ-GDP ⇒ (λ, λμ²/2)-RDP for every λ > 1 (Dong, Roth & Su 2022; Bun & Steinke 2016 zCDP).
- RDP → (ε, δ): ε = min_λ ε(λ) + log((λ−1)/λ) − (log δ + log λ)/(λ−1)
  (Balle et al. 2020, Thm. 21; Canonne, Kamath & Steinke 2020, Prop. 12), or Mironov's classic
  ε = min_λ ε(λ) + log(1/δ)/(λ−1) (Mironov 2017, Prop. 3).
- Poisson subsampling: the Gaussian is exact via Mironov, Talwar & Zhang (2019) for integer orders
  (the formula dp_accounting and opacus implement; it equals Zhu & Wang's (2019) tight bound specialised
  to the Gaussian); for an arbitrary mechanism, Zhu & Wang (2019) give a general upper bound for
  integer orders (optimal up to log(3)/(λ−1)), used to amplify a whole tuning procedure run on a
  Poisson subsample (Koskela & Kulkarni 2023).
A curve known only on a grid bounds every order below each grid point: Rényi divergences are
non-decreasing in the order (van Erven & Harremoës 2014), so ε(λ) ≤ ε(λ') for λ ≤ λ'.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from scipy.special import gammaln, logsumexp

#: Orders used when none are given: dense (ratio ≈ 1.02 in λ − 1) from λ = 1.001 to 10⁶, plus the
#: integers 2..64. Dense enough that the grid costs < 0.1 % in ε against a continuous minimisation.
DEFAULT_ORDERS: np.ndarray = np.unique(np.concatenate([1.0 + np.geomspace(1e-3, 1e6, 1000), np.arange(2.0, 65.0)]))

#: Integer orders for Poisson-subsampled mechanisms (the formulas hold for integer λ ≥ 2 only).
SUBSAMPLED_ORDERS: np.ndarray = np.unique(
    np.concatenate([np.arange(2.0, 129.0), np.round(np.geomspace(128, 20000, 120))])
)

RdpLike = Callable[[np.ndarray], np.ndarray] | Sequence[float] | np.ndarray


# ---------------------------------------------------------------------------------------------
# Basic curves and the conversion to (ε, δ)


def gdp_rdp(mu: float, orders: Sequence[float]) -> np.ndarray:
    """RDP curve of a μ-GDP mechanism: ε(λ) = λμ²/2."""
    if not (mu >= 0 and math.isfinite(mu)):
        raise ValueError(f"mu must be finite and >= 0, got {mu}")
    return np.asarray(orders, dtype=float) * (mu * mu / 2.0)


def check_orders(orders: Sequence[float]) -> np.ndarray:
    orders = np.asarray(orders, dtype=float)
    if orders.ndim != 1 or orders.size == 0:
        raise ValueError("orders must be a non-empty 1-d sequence")
    if np.any(~np.isfinite(orders)) or np.any(orders < 1.0):
        raise ValueError("orders must be finite and >= 1")
    return orders


def _conversion_terms(orders: np.ndarray, delta: float, conversion: str) -> np.ndarray:
    lam = orders
    with np.errstate(divide="ignore", invalid="ignore"):
        if conversion == "tight":
            return np.log1p(-1.0 / lam) - (math.log(delta) + np.log(lam)) / (lam - 1.0)
        if conversion == "classic":
            return -math.log(delta) / (lam - 1.0)
    raise ValueError(f"conversion must be 'tight' or 'classic', got {conversion!r}")


def rdp_to_dp(
    orders: Sequence[float],
    rdp: Sequence[float],
    delta: float,
    *,
    conversion: str = "tight",
    return_order: bool = False,
) -> float | tuple[float, float]:
    """(ε, δ)-DP implied by an RDP curve, minimised over the given orders.

    conversion="tight": ε = min_λ rdp(λ) + log((λ−1)/λ) − (log δ + log λ)/(λ−1)
    (Balle et al. 2020 Thm. 21 / Canonne–Kamath–Steinke 2020 Prop. 12); "classic":
    ε = min_λ rdp(λ) + log(1/δ)/(λ−1) (Mironov 2017 Prop. 3). In both, when some order's value r
    satisfies 1 − e^(−r) < δ², the KL bound δ ≤ √(1 − e^(−KL)) already gives ε = 0.
    Returns ε (≥ 0), or (ε, optimal order) with return_order=True.
    """
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must lie in (0, 1), got {delta}")
    orders = check_orders(orders)
    rdp = np.asarray(rdp, dtype=float)
    if rdp.shape != orders.shape:
        raise ValueError(f"orders and rdp differ in length ({orders.size} vs {rdp.size})")
    if np.any(rdp < 0):
        raise ValueError("RDP values must be >= 0")
    finite = np.isfinite(rdp)
    kl_zero = np.flatnonzero(finite & (-np.expm1(-np.where(finite, rdp, 0.0)) < delta * delta))
    if kl_zero.size:
        return (0.0, float(orders[kl_zero[0]])) if return_order else 0.0
    usable = finite & (orders > 1.0)
    if not np.any(usable):
        return (math.inf, math.nan) if return_order else math.inf
    eps = np.where(usable, rdp + _conversion_terms(orders, delta, conversion), np.inf)
    i = int(np.nanargmin(eps))
    value = max(0.0, float(eps[i]))
    return (value, float(orders[i])) if return_order else value


def rdp_to_delta(orders: Sequence[float], rdp: Sequence[float], eps: float, *, conversion: str = "tight") -> float:
    """δ such that an RDP curve implies (ε, δ)-DP (the inverse reading of `rdp_to_dp`).

    tight: log δ = min_λ (λ−1)(rdp(λ) − ε + log(1 − 1/λ)) − log λ; classic: (λ−1)(rdp(λ) − ε);
    also min with the KL bound √(1 − e^(−rdp)).
    """
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    orders = check_orders(orders)
    rdp = np.asarray(rdp, dtype=float)
    return float(np.exp(log_delta_from_rdp(orders, rdp, np.array([eps]), conversion)[0]))


def log_delta_from_rdp(orders: np.ndarray, rdp: np.ndarray, eps: np.ndarray, conversion: str) -> np.ndarray:
    """log δ(ε) for each ε in `eps` (vectorized over ε and orders), clipped at log 1 = 0."""
    lam = orders[None, :]
    r = rdp[None, :]
    e = eps[:, None]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if conversion == "tight":
            log_d = (lam - 1.0) * (r - e + np.log1p(-1.0 / lam)) - np.log(lam)
        elif conversion == "classic":
            log_d = (lam - 1.0) * (r - e)
        else:
            raise ValueError(f"conversion must be 'tight' or 'classic', got {conversion!r}")
        log_d = np.where((lam > 1.0) & np.isfinite(r), log_d, np.inf)
        kl = np.where(np.isfinite(r) & (r > 0), 0.5 * np.log(-np.expm1(-np.where(r > 0, r, 1.0))), -np.inf)
        kl = np.where(np.isfinite(r), kl, np.inf)
        best = np.minimum(np.min(log_d, axis=1), np.min(np.broadcast_to(kl, log_d.shape), axis=1))
    return np.minimum(best, 0.0)


def rdp_at(orders: Sequence[float], values: Sequence[float], query: Sequence[float]) -> np.ndarray:
    """Upper bound of an RDP curve known on `orders` at the orders `query`.

    Uses monotonicity in the order: the value at the smallest grid order ≥ λ bounds ε(λ); +inf beyond
    the largest grid order.
    """
    orders = np.asarray(orders, dtype=float)
    values = np.asarray(values, dtype=float)
    idx = np.argsort(orders, kind="stable")
    o, v = orders[idx], values[idx]
    # the tightest valid value at each grid point is the min over itself and every larger order
    v = np.minimum.accumulate(v[::-1])[::-1]
    query = np.asarray(query, dtype=float)
    pos = np.searchsorted(o, query, side="left")
    out = np.full(query.shape, np.inf)
    inside = pos < o.size
    out[inside] = v[pos[inside]]
    return out


def monotone_envelope(orders: np.ndarray, values: np.ndarray) -> np.ndarray:
    return rdp_at(orders, values, orders)


def evaluate_rdp(base_rdp: RdpLike, orders: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Values of a base RDP curve (callable, or values given on `orders`) at `query`."""
    if callable(base_rdp):
        out = np.asarray(base_rdp(query), dtype=float)
        if out.shape != query.shape:
            out = np.array([float(base_rdp(float(x))) for x in query])
        return out
    values = np.asarray(base_rdp, dtype=float)
    if values.shape != orders.shape:
        raise ValueError(f"base RDP values ({values.size}) must match the orders ({orders.size})")
    return rdp_at(orders, values, query)


# ---------------------------------------------------------------------------------------------
# Poisson subsampling


def _integer_orders(orders: np.ndarray) -> np.ndarray:
    """The integer order ≥ max(λ, 2) whose value bounds each λ (monotonicity in the order)."""
    return np.maximum(np.ceil(orders - 1e-12), 2.0).astype(np.int64)


def _log_binom(n: int, k: np.ndarray) -> np.ndarray:
    return gammaln(n + 1.0) - gammaln(k + 1.0) - gammaln(n - k + 1.0)


def subsampled_gaussian_rdp(q: float, sigma: float, steps: int, orders: Sequence[float] | None = None) -> np.ndarray:
    """RDP of `steps` Poisson-subsampled Gaussian steps (rate q, noise multiplier σ, sensitivity 1).

    Mironov, Talwar & Zhang (2019), integer orders: ε(α) = log A_α / (α−1) per step with
    A_α = Σ_{k=0..α} C(α,k) (1−q)^(α−k) q^k exp((k²−k)/(2σ²)) — exact for add/remove adjacency, and the
    same as Zhu & Wang's (2019) tight bound for the Gaussian. Non-integer λ use the value at ⌈λ⌉
    (≥ 2), a valid upper bound. Default orders: `SUBSAMPLED_ORDERS`. Cost O(Σ λ) per call.
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q (sampling rate) must lie in [0, 1], got {q}")
    if not (sigma > 0 and math.isfinite(sigma)):
        raise ValueError(f"sigma must be a positive finite number, got {sigma}")
    if steps < 0 or int(steps) != steps:
        raise ValueError(f"steps must be an integer >= 0, got {steps}")
    orders = SUBSAMPLED_ORDERS if orders is None else check_orders(orders)
    if q == 0.0 or steps == 0:
        return np.zeros_like(orders)
    if q == 1.0:
        return steps * orders / (2.0 * sigma * sigma)
    ints = _integer_orders(orders)
    cache: dict[int, float] = {}
    log_q, log_1mq = math.log(q), math.log1p(-q)
    for a in np.unique(ints):
        a = int(a)
        k = np.arange(a + 1, dtype=float)
        terms = _log_binom(a, k) + k * log_q + (a - k) * log_1mq + (k * k - k) / (2.0 * sigma * sigma)
        # A_α ≥ 1 (a Rényi divergence is ≥ 0); at huge σ rounding leaves log A_α at −1e-17
        cache[a] = max(0.0, float(logsumexp(terms)) / (a - 1.0))
    return steps * np.array([cache[int(a)] for a in ints])


def poisson_subsampled_rdp(
    q: float, base_rdp: RdpLike, orders: Sequence[float] | None = None, base_orders: Sequence[float] | None = None
) -> np.ndarray:
    """Zhu & Wang (2019) general upper bound: RDP of any mechanism run on a Poisson subsample of rate q.

    For integer α ≥ 2: ε'(α) ≤ 1/(α−1) log[(1−q)^(α−1)(αq − q + 1) + C(α,2) q² (1−q)^(α−2) e^{ε(2)}
    + 3 Σ_{ℓ=3..α} C(α,ℓ) (1−q)^(α−ℓ) q^ℓ e^{(ℓ−1)ε(ℓ)}], and never more than ε(α) itself.
    base_rdp: callable on integer orders, or values on `base_orders` (bounded at integers by the next
    grid order up). Non-integer λ use ⌈λ⌉. For a Gaussian, prefer `subsampled_gaussian_rdp` (exact).
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q (sampling rate) must lie in [0, 1], got {q}")
    orders = SUBSAMPLED_ORDERS if orders is None else check_orders(orders)
    ints = _integer_orders(orders)
    top = int(ints.max())
    int_grid = np.arange(2, top + 1, dtype=float)
    if callable(base_rdp):
        base = evaluate_rdp(base_rdp, int_grid, int_grid)
    else:
        if base_orders is None:
            raise ValueError("base_orders are required when base_rdp is given as values")
        base = rdp_at(base_orders, base_rdp, int_grid)
    base_at = dict(zip(range(2, top + 1), base))
    if q == 0.0:
        return np.zeros_like(orders)
    if q == 1.0:
        return np.array([base_at[int(a)] for a in ints])
    log_q, log_1mq = math.log(q), math.log1p(-q)
    cache: dict[int, float] = {}
    for a in np.unique(ints):
        a = int(a)
        ell = np.arange(2, a + 1, dtype=float)
        e_ell = base[: a - 1]
        with np.errstate(invalid="ignore"):
            terms = _log_binom(a, ell) + ell * log_q + (a - ell) * log_1mq + (ell - 1.0) * e_ell
        terms[1:] += math.log(3.0)
        head = (a - 1.0) * log_1mq + math.log1p((a - 1.0) * q)
        bound = float(logsumexp(np.concatenate([[head], terms]))) / (a - 1.0)
        cache[a] = min(bound, float(base_at[a]))
    return np.array([cache[int(a)] for a in ints])
