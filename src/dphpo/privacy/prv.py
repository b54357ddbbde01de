"""Minibatch (Poisson-subsampled) DP-SGD accounting with the PRV accountant (Gopi, Lee & Wutschitz 2021).

Subsampled Gaussian steps are not exactly GDP-composable (methods.md §0); `prv-accountant` composes
their privacy loss distributions numerically and returns lower/estimate/upper bounds on ε; dphpo
always reports the **upper** bound.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from prv_accountant import PRVAccountant
from prv_accountant.privacy_random_variables import GaussianMechanism, PoissonSubsampledGaussianMechanism

from dphpo.privacy.ledger import GDP, Ledger, LedgerEntry
from dphpo.privacy.rdp import SUBSAMPLED_ORDERS, subsampled_gaussian_rdp

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


@functools.lru_cache(maxsize=256)
def prv_bounds(q: float, sigma: float, steps: int, delta: float, eps_error: float) -> dict[str, Any]:
    """prv-accountant's ε bounds (~0.3–1 s a call), memoised: calibration and the ledger ask the same question."""
    return prv_eps_bounds_subsampled_gaussian(q, sigma, steps, delta, eps_error=eps_error)


def prv_sigma_for(q: float, steps: int, eps: float, delta: float, eps_error: float = 0.01, rtol: float = 3e-3) -> float:
    """Smallest σ (to relative precision rtol) whose PRV upper bound for `steps` subsampled steps is ≤ eps.

    About 5 accountant calls (a bisection needs ~15): start from the central-limit GDP approximation
    μ ≈ q·√(T(e^{1/σ²} − 1)) (Bu et al. 2020), bracket the root, then the Illinois false-position
    method on log ε(log σ). The returned σ always satisfies the PRV bound (it was evaluated); the
    bracket is narrower than rtol.
    """
    from scipy.optimize import brentq

    from dphpo.privacy.gdp import mu_from_eps

    if not (eps > 0 and math.isfinite(eps)):
        raise ValueError(f"eps must be a positive finite number, got {eps}")
    if eps <= eps_error:
        raise ValueError(f"eps={eps} must exceed eps_error={eps_error}")
    _check(q, 1.0, steps, delta)
    mu = mu_from_eps(eps, delta)
    clt = lambda ls: q * math.sqrt(steps * math.expm1(math.exp(-2.0 * ls))) - mu  # noqa: E731
    try:
        guess = math.exp(brentq(clt, math.log(0.05), math.log(1e4)))
    except ValueError:
        guess = 1.0

    def f(log_s: float) -> float:
        return math.log(prv_bounds(q, math.exp(log_s), int(steps), delta, eps_error)["eps_upper"] / eps)

    x, y = math.log(guess), f(math.log(guess))
    lo = hi = None  # (log σ, f) with f > 0 (infeasible) / f ≤ 0 (feasible)
    for _ in range(60):  # bracket: ε ∝ 1/σ roughly, so step by the log-ratio (at least 2 %)
        if y <= 0:
            hi = (x, y)
            if lo is not None:
                break
            x = x - max(abs(y), 0.02)
        else:
            lo = (x, y)
            if hi is not None:
                break
            x = x + max(abs(y), 0.02)
        y = f(x)
    if lo is None or hi is None:
        raise ValueError(f"could not bracket sigma for eps={eps} (q={q}, steps={steps}, delta={delta})")
    side = 0
    while hi[0] - lo[0] > math.log1p(rtol):
        (xl, yl), (xh, yh) = lo, hi
        x = xh - yh * (xh - xl) / (yh - yl)
        x = min(max(x, xl + 0.1 * math.log1p(rtol)), xh - 0.1 * math.log1p(rtol))
        y = f(x)
        if y <= 0:
            hi = (x, y)
            if side == 1:  # Illinois: halve the stale end's weight
                lo = (lo[0], lo[1] / 2.0)
            side = 1
        else:
            lo = (x, y)
            if side == -1:
                hi = (hi[0], hi[1] / 2.0)
            side = -1
    return math.exp(hi[0])


#: Kind tag of ledger entries that PrvLedger composes with the PRV accountant.
SUBSAMPLED_GAUSSIAN = "poisson_subsampled_gaussian"


def subsampled_run_entry(what: str, q: float, nu: float, steps: int, **details: Any) -> LedgerEntry:
    """A ledger entry for `steps` Poisson-subsampled Gaussian steps: its RDP curve (valid on its own) plus
    the parameters PrvLedger needs to compose it with the PRV accountant."""
    values = subsampled_gaussian_rdp(q, nu, int(steps), SUBSAMPLED_ORDERS)
    return LedgerEntry.rdp(
        what,
        SUBSAMPLED_ORDERS,
        values,
        details={"kind": SUBSAMPLED_GAUSSIAN, "q": float(q), "sigma": float(nu), "steps": int(steps)} | details,
    )


class PrvLedger(Ledger):
    """A ledger of Poisson-subsampled Gaussian runs whose total comes from prv-accountant (upper bound).

    Entries are ordinary RDP entries (subsampled_run_entry), so a plain `Ledger` re-reading them
    gets the looser RDP bound; `total` composes them with the PRV accountant instead (methods.md §0)
    and also records the RDP bound. Supported: any number of runs sharing one (q, σ) (their steps
    add up); anything else raises.
    """

    def __init__(self, entries=(), eps_error: float = 0.01) -> None:
        super().__init__(entries)
        self.eps_error = float(eps_error)
        self._totals: dict[tuple, dict[str, Any]] = {}  # the accountant takes ~1 s: one call per (δ, entries)

    def copy(self) -> "PrvLedger":
        return PrvLedger(self.entries, self.eps_error)

    def mechanism(self) -> tuple[float, float, int]:
        """(q, σ, total steps) of the runs; raises when they do not share one subsampled Gaussian."""
        kinds = {(e.details.get("kind"), e.details.get("q"), e.details.get("sigma")) for e in self.entries}
        if len(kinds) != 1 or next(iter(kinds))[0] != SUBSAMPLED_GAUSSIAN or any(e.mechanism == GDP for e in self.entries):
            raise NotImplementedError("PrvLedger composes runs of one Poisson-subsampled Gaussian (same q, sigma) only")
        _, q, sigma = next(iter(kinds))
        return q, sigma, sum(int(e.details["steps"]) * e.count for e in self.entries)

    def total(self, delta: float, **kwargs: Any) -> dict[str, Any]:
        key = (delta, len(self.entries), tuple(sorted(kwargs.items())))
        if key not in self._totals:
            self._totals[key] = self._total(delta, **kwargs)
        return dict(self._totals[key])

    def _total(self, delta: float, **kwargs: Any) -> dict[str, Any]:
        q, sigma, steps = self.mechanism()
        bounds = dict(prv_bounds(float(q), float(sigma), int(steps), float(delta), self.eps_error))
        return {
            "eps": bounds["eps_upper"],
            "delta": delta,
            "mu": None,
            "accountant": ACCOUNTANT,
            "prv": bounds,
            "rdp_eps": super().total(delta, **kwargs)["eps"],
        }
