"""Budget plans in μ at δ: how much of a target each planned release gets, before any training.

Every method plans in GDP (Dong, Roth & Su 2022): stage budgets as μ(ε, δ), runs that share a
target with their selection releases (√(μ(ε)² − Σ μ_sel²)/√n each), the final run that fills what a
ledger leaves (`plan_final_mu`, Panda et al. Theorem 4.1) — whatever accountant then accounts the runs.
The run accountants (`dphpo.privacy.accountant`) inherit these calls and add how a run's σ meets a
plan; `BudgetPlanner(delta)` alone serves checks that know δ but no trainer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

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


def plan_stages(
    total_eps: float,
    delta: float,
    *,
    n_trials: int,
    stage_eps: Sequence[float],
    selection_mu: float = 0.0,
    selections_per_stage: int | None = None,
) -> dict[str, Any]:
    """Budget plan of the linear scaling rule (Panda et al., Algorithms 2–3; docs/methods.md §2).

    Each stage k has `n_trials` trials of standalone budget stage_eps[k] (μ_k = μ(stage_eps[k], δ)) and
    `selections_per_stage` (default n_trials) noisy score releases of μ = selection_mu; the final run
    gets μ_f = √(μ(total_eps)² − n Σ_k μ_k² − Σ μ_selection²), shaved by BUDGET_SAFETY as every
    planned budget is. Returns stage_mu, selection_mu, final_mu, final_eps (the final run's standalone ε),
    total_eps (recomputed by `Ledger.total`: the target, never above it) and the ledger of every planned
    release, the final run last. Raises InfeasibleBudgetError (before any training) when the search alone
    spends the budget.
    """
    if not (isinstance(n_trials, (int, np.integer)) and n_trials >= 1):
        raise ValueError(f"n_trials must be an integer >= 1, got {n_trials!r}")
    stage_eps = [float(e) for e in stage_eps]
    if not stage_eps:
        raise ValueError("stage_eps must name at least one stage budget")
    for k, e in enumerate(stage_eps, start=1):
        if not (e > 0 and math.isfinite(e)):
            raise ValueError(f"stage_eps[{k - 1}] (stage {k}) must be a positive finite number, got {e}")
    if not (selection_mu >= 0 and math.isfinite(selection_mu)):
        raise ValueError(f"selection_mu must be finite and >= 0, got {selection_mu}")
    n_sel = n_trials if selections_per_stage is None else selections_per_stage
    if not (isinstance(n_sel, (int, np.integer)) and n_sel >= 0):
        raise ValueError(f"selections_per_stage must be an integer >= 0, got {selections_per_stage!r}")

    ledger = Ledger()
    stage_mu = []
    for k, e in enumerate(stage_eps, start=1):
        mu_k = mu_from_eps(e, delta)
        stage_mu.append(mu_k)
        ledger.add(f"stage {k} trials", mu_k, count=n_trials, stage=k, standalone_eps=e)
        if selection_mu > 0 and n_sel > 0:
            ledger.add(f"stage {k} noisy selection scores", selection_mu, count=n_sel, stage=k)
    final_mu = BudgetPlanner(delta).remaining_mu(total_eps, ledger, what="final run")
    ledger.add("final run", final_mu)
    return {
        "delta": delta,
        "n_trials": int(n_trials),
        "stage_eps": stage_eps,
        "stage_mu": stage_mu,
        "selection_mu": float(selection_mu),
        "selections_per_stage": int(n_sel),
        "final_mu": final_mu,
        "final_eps": eps_from_mu(final_mu, delta),
        "total_eps": ledger.total(delta)["eps"],
        "ledger": ledger,
    }
