"""Budget plans in μ at δ: how much of a target each planned release gets, before any training.

Every method plans in GDP (Dong, Roth & Su 2022): stage budgets as μ(ε, δ), runs that share a
target with their selection releases (√(μ(ε)² − Σ μ_sel²)/√n each), the final run that fills what a
ledger leaves (`plan_final_mu`, Panda et al. Theorem 4.1) — whatever accountant then accounts the runs.
The run accountants (`dphpo.privacy.accountant`) inherit these calls and add how a run's σ meets a
plan; `BudgetPlanner(delta)` alone serves checks that know δ but no trainer.
"""

from __future__ import annotations

import math

from dphpo.errors import ConfigError
from dphpo.privacy.gdp import eps_from_mu, mu_from_eps
from dphpo.privacy.ledger import Ledger, plan_final_mu

#: Every planned μ that fills a budget is shaved by this relative margin so that floating-point
#: error can never push a reported total above its target.
BUDGET_SAFETY = 1e-9


class BudgetPlanner:
    """Planning calls at one δ (exact GDP arithmetic; the ledger checks every total)."""

    def __init__(self, delta: float) -> None:
        if not 0.0 < delta < 1.0:
            raise ConfigError(f"privacy.delta: must lie in (0, 1), got {delta}")
        self.delta = float(delta)

    def mu_for_eps(self, eps: float) -> float:
        """μ of a Gaussian release that alone is exactly (eps, δ)-DP: a stage's μ, a planned budget."""
        return mu_from_eps(eps, self.delta)

    def eps_for_mu(self, mu: float) -> float:
        """Exact GDP ε (at δ) of a μ-Gaussian release, or of releases composed to μ = √(Σ μ_i²)."""
        return eps_from_mu(mu, self.delta)

    def full_budget_mu(self, target_eps: float) -> float:
        """μ of one release that spends the whole target (shaved by BUDGET_SAFETY)."""
        return mu_from_eps(target_eps, self.delta) * (1 - BUDGET_SAFETY)

    def remaining_mu(self, total_eps: float, spent: Ledger, what: str = "final run") -> float:
        """μ of a last release that fills what `spent` leaves of total_eps (`plan_final_mu`, shaved)."""
        return plan_final_mu(total_eps, self.delta, spent, what=what) * (1 - BUDGET_SAFETY)

    def runs_mu(self, target_eps: float, n_runs: int, selection_mu: float, what: str) -> float:
        """μ of each of n_runs equal runs such that the runs plus their selection releases (one of
        μ = selection_mu per run) compose to the target.

        One run (n_runs = 1) needs no selection: it gets the whole budget. Raises InfeasibleBudgetError
        (naming the plan) when the selection releases alone spend the target.
        """
        if n_runs < 1:
            raise ValueError(f"n_runs must be >= 1, got {n_runs}")
        spent = Ledger()
        if n_runs > 1 and selection_mu > 0:
            spent.add(f"{what}: selection releases", mu=selection_mu, count=n_runs)
        mu_all = plan_final_mu(target_eps, self.delta, spent, what=f"{n_runs} run(s) of {what} at target eps={target_eps:g}")
        return mu_all * (1 - BUDGET_SAFETY) / math.sqrt(n_runs)
