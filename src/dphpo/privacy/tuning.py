"""Papernot–Steinke tuning: a random number K of trials, only the best released (ICLR 2022).

The RDP curve of the tuned mechanism from its base run's curve (`dphpo.privacy.rdp`), as a ledger
entry, its ε through `Ledger.total` (the one place every reported ε comes from), the per-trial μ that
meets a target, and the ledger of a procedure that capped K. Formulas, as named in the paper:
truncated negative binomial K (Thm. 2): ε'(λ) = ε(λ) + (1+η)(1 − 1/λ̂) ε(λ̂) + (1+η) log(1/γ)/λ̂
+ log E[K]/(λ−1) for any λ̂ ≥ 1; Poisson K (Thm. 6): ε'(λ) = ε(λ) + E[K] δ̂ + log E[K]/(λ−1), where
the base run is (ε̂, δ̂)-DP with ε̂ = log(λ/(λ−1)). Run on a Poisson subsample, the whole procedure
is amplified by Zhu & Wang's (2019) general bound (Koskela & Kulkarni 2023).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from scipy.optimize import brentq

from dphpo.errors import InfeasibleBudgetError
from dphpo.privacy.gdp import log_delta_array
from dphpo.privacy.ledger import Ledger, LedgerEntry
from dphpo.privacy.rdp import (
    DEFAULT_ORDERS,
    RdpLike,
    check_orders,
    evaluate_rdp,
    gdp_rdp,
    log_delta_from_rdp,
    monotone_envelope,
    poisson_subsampled_rdp,
)

#: Names accepted for the distribution of the number of trials K, and the η they fix.
DISTRIBUTIONS = {"logarithmic": 0.0, "geometric": 1.0, "tnb": None, "poisson": math.inf}

#: How δ̂ of a Poisson number of trials is bounded: "gdp" (exact GDP δ of the base run, the default) or
#: "rdp" (from its RDP curve, as dp_accounting's RepeatAndSelectDpEvent does).
POISSON_DELTA_BOUNDS = ("gdp", "rdp")


def resolve_distribution(distribution: str, eta: float | None = None) -> tuple[str, float]:
    """(kind, η) for a distribution name: logarithmic (η=0), geometric (η=1), tnb (η > −1), poisson (η=∞)."""
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"distribution must be one of {sorted(DISTRIBUTIONS)}, got {distribution!r}")
    fixed = DISTRIBUTIONS[distribution]
    if distribution == "tnb":
        if eta is None:
            raise ValueError("eta is required for the truncated negative binomial ('tnb')")
        if math.isinf(eta) and eta > 0:
            return "poisson", math.inf
        if not (eta > -1.0 and math.isfinite(eta)):
            raise ValueError(f"eta must be a finite number > -1 for 'tnb', got {eta}")
        return "tnb", float(eta)
    if eta is not None and float(eta) != fixed:
        raise ValueError(f"distribution {distribution!r} fixes eta={fixed}, got eta={eta}")
    return ("poisson" if distribution == "poisson" else "tnb"), fixed


def _expm1_over_x(x: float) -> float:
    return 1.0 if x == 0.0 else (math.expm1(x) / x if abs(x) > 1e-8 else 1.0 + x / 2.0 + x * x / 6.0)


def tnb_mean(gamma: float, eta: float) -> float:
    """E[K] of the truncated negative binomial of P&S Definition 1: η(1−γ)/(γ(1−γ^η)); η=0: (1−γ)/(γ log(1/γ))."""
    if not 0.0 < gamma <= 1.0:
        raise ValueError(f"gamma must lie in (0, 1], got {gamma}")
    if not eta > -1.0:
        raise ValueError(f"eta must be > -1, got {eta}")
    u = -math.log(gamma)  # log(1/γ) ≥ 0
    # (1−γ)/log(1/γ) = expm1(−u)/(−u); (1−γ^η)/(η log(1/γ)) = expm1(−ηu)/(−ηu)
    return _expm1_over_x(-u) / (gamma * _expm1_over_x(-eta * u))


#: Largest log(1/γ) searched: γ = e^-700 is near the smallest normal double.
_MAX_LOG_INV_GAMMA = 700.0


def _tnb_log_inv_gamma(mean_trials: float, eta: float) -> float:
    """log(1/γ) of the truncated negative binomial with E[K] = mean_trials (root of an increasing map)."""
    if mean_trials == 1.0:
        return 0.0
    if eta == 1.0:
        return math.log(mean_trials)

    def excess(u: float) -> float:
        return tnb_mean(math.exp(-u), eta) - mean_trials

    hi = 1.0
    while excess(hi) < 0:
        if hi >= _MAX_LOG_INV_GAMMA:
            raise ValueError(
                f"mean_trials={mean_trials:g} is out of reach for eta={eta!r}: the truncated negative binomial needs "
                f"gamma below e^-{_MAX_LOG_INV_GAMMA:g} for that mean (eta near -1 keeps E[K] near 1); "
                "raise eta or lower mean_trials"
            )
        hi = min(2.0 * hi, _MAX_LOG_INV_GAMMA)
    return float(brentq(excess, 0.0, hi, xtol=1e-15, rtol=1e-14, maxiter=500))


def tnb_gamma(mean_trials: float, eta: float) -> float:
    """γ of the truncated negative binomial with shape η and E[K] = mean_trials (P&S Definition 1)."""
    _check_mean(mean_trials)
    if not eta > -1.0:
        raise ValueError(f"eta must be > -1, got {eta}")
    return math.exp(-_tnb_log_inv_gamma(mean_trials, eta))


def _check_mean(mean_trials: float) -> None:
    if not (mean_trials >= 1.0 and math.isfinite(mean_trials)):
        raise ValueError(f"mean_trials (E[K]) must be a finite number >= 1, got {mean_trials}")


def ps_rdp(
    orders: Sequence[float],
    base_rdp: RdpLike,
    distribution: str,
    mean_trials: float,
    eta: float | None = None,
    *,
    hat_orders: Sequence[float] | None = None,
    base_delta: Callable[[np.ndarray], np.ndarray] | None = None,
) -> np.ndarray:
    """RDP curve, on `orders`, of Papernot–Steinke tuning around a base mechanism.

    base_rdp: the base run's RDP, a callable λ ↦ ε(λ) (vectorized) or its values on `orders`.
    TNB (logarithmic, geometric, tnb with η > −1; P&S Thm. 2): ε'(λ) = ε(λ) + log E[K]/(λ−1)
    + (1+η) min_λ̂ [(1 − 1/λ̂) ε(λ̂) + log(1/γ)/λ̂], the minimum over `hat_orders` (default: `orders`)
    and λ̂ = 1; γ solves E[K] = mean_trials. Poisson (P&S Thm. 6): ε'(λ) = ε(λ) + E[K] δ̂(λ)
    + log E[K]/(λ−1), with δ̂(λ) = base_delta(ε̂) at ε̂ = log(λ/(λ−1)) — default: δ̂ read off the base
    RDP curve (`rdp_to_delta`), looser than the exact δ a GDP base allows (see `ps_gdp_rdp`).
    The result is made non-increasing towards small orders (monotonicity of RDP in λ).
    """
    orders = check_orders(orders)
    kind, eta = resolve_distribution(distribution, eta)
    _check_mean(mean_trials)
    eps = evaluate_rdp(base_rdp, orders, orders)
    lam = orders
    with np.errstate(divide="ignore", invalid="ignore"):
        log_mean_term = np.where(lam > 1.0, math.log(mean_trials) / (lam - 1.0), np.inf)
    if kind == "poisson":
        eps_hat = np.where(lam > 1.0, -np.log1p(-1.0 / np.where(lam > 1.0, lam, 2.0)), np.inf)
        if base_delta is not None:
            delta_hat = np.asarray(base_delta(eps_hat), dtype=float)
        else:
            grid = orders if hat_orders is None else check_orders(hat_orders)
            hat_vals = evaluate_rdp(base_rdp, orders, grid)
            delta_hat = np.exp(
                log_delta_from_rdp(grid, hat_vals, np.where(np.isfinite(eps_hat), eps_hat, 0.0), "tight")
            )
        out = eps + mean_trials * delta_hat + log_mean_term
    else:
        log_inv_gamma = _tnb_log_inv_gamma(mean_trials, eta)
        grid = orders if hat_orders is None else check_orders(hat_orders)
        hat_vals = evaluate_rdp(base_rdp, orders, grid)
        with np.errstate(invalid="ignore"):
            cand = (1.0 - 1.0 / grid) * hat_vals + log_inv_gamma / grid
        cand = np.where(grid == 1.0, log_inv_gamma, cand)
        cand = cand[np.isfinite(cand)]
        c = (1.0 + eta) * min(float(np.min(cand)) if cand.size else math.inf, log_inv_gamma)
        out = eps + c + log_mean_term
    out = np.where(lam > 1.0, out, np.inf)
    return monotone_envelope(orders, out)


def ps_gdp_rdp(
    mu_trial: float,
    distribution: str,
    mean_trials: float,
    eta: float | None = None,
    orders: Sequence[float] | None = None,
    *,
    poisson_delta: str = "gdp",
) -> np.ndarray:
    """`ps_rdp` for a μ-GDP base run (each trial μ_trial-GDP), with the exact GDP ingredients.

    TNB: the inner minimum over λ̂ ≥ 1 of (λ̂−1)μ²/2 + log(1/γ)/λ̂ is taken in closed form
    (λ̂* = √(2 log(1/γ))/μ, clamped to ≥ 1). Poisson: with poisson_delta="gdp" (default) δ̂ is the
    exact δ(ε̂) of μ-GDP (Dong et al. Cor. 2.13) — a valid (ε̂, δ̂)-DP guarantee of the base run, and
    tighter (10–30 % lower total ε for E[K] = 5–50) than δ̂ read off the RDP curve λμ²/2, which is what
    poisson_delta="rdp" and dp_accounting's RepeatAndSelectDpEvent do.
    """
    orders = DEFAULT_ORDERS if orders is None else check_orders(orders)
    kind, eta = resolve_distribution(distribution, eta)
    _check_mean(mean_trials)
    if not (mu_trial >= 0 and math.isfinite(mu_trial)):
        raise ValueError(f"mu_trial must be finite and >= 0, got {mu_trial}")
    lam = orders
    base = gdp_rdp(mu_trial, lam)
    with np.errstate(divide="ignore"):
        log_mean_term = np.where(lam > 1.0, math.log(mean_trials) / np.where(lam > 1.0, lam - 1.0, 1.0), np.inf)
    if kind == "poisson":
        if poisson_delta not in POISSON_DELTA_BOUNDS:
            raise ValueError(f"poisson_delta must be one of {POISSON_DELTA_BOUNDS}, got {poisson_delta!r}")
        if poisson_delta == "rdp":
            return ps_rdp(orders, base, "poisson", mean_trials)
        if mu_trial == 0.0:
            delta_hat = np.zeros_like(lam)
        else:
            eps_hat = -np.log1p(-1.0 / np.where(lam > 1.0, lam, 2.0))
            delta_hat = np.exp(log_delta_array(mu_trial, eps_hat))
        out = base + mean_trials * delta_hat + log_mean_term
    else:
        log_inv_gamma = _tnb_log_inv_gamma(mean_trials, eta)
        m2 = mu_trial * mu_trial / 2.0
        if log_inv_gamma == 0.0 or mu_trial == 0.0:
            inner = 0.0
        else:
            lam_hat = max(1.0, math.sqrt(2.0 * log_inv_gamma) / mu_trial)
            inner = (lam_hat - 1.0) * m2 + log_inv_gamma / lam_hat
        out = base + (1.0 + eta) * inner + log_mean_term
    out = np.where(lam > 1.0, out, np.inf)
    return monotone_envelope(orders, out)


def ps_ledger_entry(
    mu_trial: float,
    distribution: str,
    mean_trials: float,
    eta: float | None = None,
    *,
    what: str = "Papernot-Steinke tuning (best of K trials)",
    orders: Sequence[float] | None = None,
    poisson_delta: str = "gdp",
    **details,
):
    """A ledger entry (mechanism "rdp") for P&S tuning with μ_trial-GDP trials."""
    kind, eta_v = resolve_distribution(distribution, eta)
    orders = DEFAULT_ORDERS if orders is None else check_orders(orders)
    values = ps_gdp_rdp(mu_trial, distribution, mean_trials, eta, orders, poisson_delta=poisson_delta)
    info = {
        "method": "papernot_steinke",
        "theorem": (
            "Papernot & Steinke 2022, Thm. 6 (Poisson)"
            if kind == "poisson"
            else "Papernot & Steinke 2022, Thm. 2 (TNB)"
        ),
        "distribution": distribution,
        "eta": eta_v,
        "mean_trials": float(mean_trials),
        "mu_trial": float(mu_trial),
    }
    if kind == "poisson":
        info["poisson_delta_hat"] = "exact GDP delta(eps_hat)" if poisson_delta == "gdp" else "from the RDP curve"
    else:
        info["gamma"] = tnb_gamma(mean_trials, eta_v)
    return LedgerEntry.rdp(what, orders, values, details=info | details)


def ps_tuned_eps(
    mu_trial: float,
    distribution: str,
    mean_trials: float,
    eta: float | None = None,
    delta: float | None = None,
    *,
    orders: Sequence[float] | None = None,
    poisson_delta: str = "gdp",
) -> float:
    """ε (at δ) of P&S tuning whose trials are each μ_trial-GDP, computed by `Ledger.total`."""
    if delta is None:
        raise ValueError("delta is required")
    entry = ps_ledger_entry(mu_trial, distribution, mean_trials, eta, orders=orders, poisson_delta=poisson_delta)
    return float(Ledger([entry]).total(delta)["eps"])


def calibrate_ps_mu(
    target_eps: float,
    delta: float,
    distribution: str,
    mean_trials: float,
    eta: float | None = None,
    *,
    orders: Sequence[float] | None = None,
    poisson_delta: str = "gdp",
    rtol: float = 1e-10,
) -> float:
    """Largest per-trial μ such that P&S tuning is (target_eps, δ)-DP (bisection in log μ).

    The returned μ always satisfies ps_tuned_eps(μ) ≤ target_eps; it is within `rtol` (relative) of
    the exact solution. Raises InfeasibleBudgetError when even μ → 0 exceeds the target (the
    log E[K] term alone costs more than target_eps).
    """
    if not (target_eps > 0 and math.isfinite(target_eps)):
        raise ValueError(f"target_eps must be a positive finite number, got {target_eps}")
    resolve_distribution(distribution, eta)
    _check_mean(mean_trials)

    def eps_of(mu: float) -> float:
        return ps_tuned_eps(mu, distribution, mean_trials, eta, delta, orders=orders, poisson_delta=poisson_delta)

    lo = 1e-9
    if eps_of(lo) > target_eps:
        raise InfeasibleBudgetError(
            f"infeasible Papernot-Steinke plan: with {distribution} K (E[K]={mean_trials:g}"
            + (f", eta={eta:g}" if eta is not None else "")
            + f") the tuning alone costs eps={eps_of(lo):.4g} > target eps={target_eps:g} at delta={delta:g}, "
            "even with trials of mu -> 0 (pure noise); lower E[K] or raise the target."
        )
    hi = 1.0
    while eps_of(hi) <= target_eps:
        lo, hi = hi, hi * 2.0
        if hi > 1e4:
            raise ValueError(f"no mu_trial below 1e4 reaches target eps={target_eps}")
    while hi / lo - 1.0 > rtol:
        mid = math.sqrt(lo * hi)
        if eps_of(mid) <= target_eps:
            lo = mid
        else:
            hi = mid
    return lo


def subsampled_ps_gdp_rdp(
    q: float,
    mu_trial: float,
    distribution: str,
    mean_trials: float,
    eta: float | None,
    orders: Sequence[float],
    *,
    poisson_delta: str = "gdp",
) -> np.ndarray:
    """RDP, on integer `orders`, of P&S tuning (μ_trial-GDP trials) run on a Poisson subsample of rate q:
    the tuned curve (`ps_gdp_rdp`) amplified by Zhu & Wang's (2019) general bound (Koskela & Kulkarni 2023)."""

    def tuned(lam: np.ndarray) -> np.ndarray:
        return ps_gdp_rdp(mu_trial, distribution, mean_trials, eta, orders=lam, poisson_delta=poisson_delta)

    return poisson_subsampled_rdp(q, tuned, orders=orders)


class CappedTrialsLedger(Ledger):
    """A ledger whose procedure capped a random number of trials: ε is converted at δ − δ_cap.

    The entries are ordinary (RDP/GDP) entries of the uncapped procedure; `total(δ)` returns the ε of
    those entries at δ − δ_cap and total δ = δ, which is the capped procedure's guarantee: coupling
    min(K, m) with K through the same draw makes the capped run (ε, δ' + (1 + e^ε)·P[K > m])-DP
    (`dphpo.hpo.papernot_steinke`). Re-reading the entries with plain `Ledger.from_dict` drops δ_cap.
    """

    def __init__(self, entries=(), truncation: dict | None = None) -> None:
        super().__init__(entries)
        self.truncation = dict(truncation or {"delta_cap": 0.0})

    @property
    def delta_cap(self) -> float:
        return float(self.truncation["delta_cap"])

    def copy(self) -> CappedTrialsLedger:
        return CappedTrialsLedger(self.entries, self.truncation)

    def total(self, delta: float, **kwargs: Any) -> dict[str, Any]:
        if self.delta_cap >= delta:
            raise ValueError(f"delta_cap={self.delta_cap} must be below delta={delta}")
        out = super().total(delta - self.delta_cap, **kwargs)
        return out | {"delta": delta, "delta_of_conversion": delta - self.delta_cap, "truncation": self.truncation}

    def to_dict(self, delta: float) -> dict[str, Any]:
        return super().to_dict(delta) | {"truncation": self.truncation}
