"""Panda et al. Table 14: lowering a run's ε by more noise or by Poisson subsampling, every run accounted."""

from __future__ import annotations

import math

import pytest
from dp_accounting import dp_event
from dp_accounting.rdp import RdpAccountant

from dphpo.errors import InfeasibleBudgetError
from dphpo.privacy.accountant import MINIBATCH_RDP_ORDERS, make_accountant, sample_rate_for_remaining
from dphpo.privacy.ledger import Ledger

DELTA = 1e-5


def _spent(mu: float) -> Ledger:
    ledger = Ledger()
    ledger.add("search", mu)
    return ledger


def _theirs(mu_spent: float, q: float, sigma: float, steps: int) -> float:
    """dp_accounting's RDP of the search (a μ-Gaussian) and the subsampled run, on the orders our ledger uses."""
    acc = RdpAccountant(orders=list(MINIBATCH_RDP_ORDERS))
    acc.compose(dp_event.GaussianDpEvent(1.0 / mu_spent))
    acc.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), steps)
    return acc.get_epsilon(DELTA)


def test_sample_rate_meets_the_target_per_dp_accounting():
    sigma, steps, mu_spent = 20.0, 50, 0.08
    q = sample_rate_for_remaining("gdp", DELTA, _spent(mu_spent), 0.7, sigma, steps)
    assert 0.0 < q < 1.0
    assert _theirs(mu_spent, q, sigma, steps) <= 0.7 * (1 + 1e-6)
    # the largest such q, within the bisection's tolerance
    assert _theirs(mu_spent, q * 1.003, sigma, steps) > 0.7
    assert _theirs(mu_spent, q, sigma, steps) == pytest.approx(0.7, rel=2e-3)


def test_full_batch_returned_when_it_fits():
    # σ so large that the full-batch run adds little: q = 1 and no subsampling
    assert sample_rate_for_remaining("gdp", DELTA, _spent(0.05), 0.7, 1000.0, 10) == 1.0


def test_sample_rate_decreases_with_the_target():
    rates = [sample_rate_for_remaining("rdp", DELTA, _spent(0.05), eps, 10.0, 100) for eps in (0.5, 0.7, 0.9)]
    assert rates == sorted(rates) and rates[0] < rates[-1]


def test_infeasible_when_the_search_spent_the_budget():
    with pytest.raises(InfeasibleBudgetError):
        sample_rate_for_remaining("gdp", DELTA, _spent(2.0), 0.7, 20.0, 50)


def test_infeasible_when_no_rate_fits():
    with pytest.raises(ValueError, match="no sampling rate"):
        sample_rate_for_remaining("gdp", DELTA, _spent(0.05), 0.7, 0.1, 100, floor=1e-2)


def test_prv_sample_rate_meets_the_target():
    q = sample_rate_for_remaining("prv", DELTA, _spent(0.08), 0.7, 20.0, 50, rtol=1e-2)
    acc = make_accountant("prv", DELTA, sample_rate=q)
    assert acc.total_with(_spent(0.08), 20.0, 50) <= 0.7
    assert not math.isclose(q, 1.0)
