"""The plan of the linear scaling rule (Panda et al., Algorithms 2-3; docs/methods.md §2), torch-free:
its settings, the search each target needs and the budget check that runs before any job
(dphpo.studies.config). Running it is dphpo.hpo.linear_scaling."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dphpo.errors import ConfigError
from dphpo.hpo.selection import SelectionRule
from dphpo.privacy.ledger import Ledger, plan_final_mu
from dphpo.privacy.planning import BudgetPlanner


@dataclass(frozen=True)
class LinearScalingConfig:
    n_trials: int = 3
    stage_eps: tuple[float, ...] = (0.1, 0.2)
    budget_mode: str = "fraction"  # stage_eps are fractions of the target ε, or "absolute" ε values
    degree: int = 1  # Linear(k) = 1, Quadratic(3) = 2 (Panda et al., Table 10)
    fit_in: str = "eps"  # fit r against ε (paper text) or against μ (Algorithm 2)
    later_stage_range: str = "above_previous"  # original code: stage k samples [r_{k-1}, cap·r_max]
    later_stage_cap: float = 0.2
    # r(ε) is non-decreasing (Panda et al. §3: the optimal r grows with ε). A line through two noisy
    # picks can slope downwards and extrapolate below every observed r (down to r_min); the guard
    # takes max(extrapolation, largest stage pick) instead. Post-processing: no privacy cost.
    monotone: bool = True

    def __post_init__(self) -> None:
        key = "linear_scaling"
        if self.n_trials < 1:
            raise ConfigError(f"{key}.n_trials: must be >= 1, got {self.n_trials}")
        if len(self.stage_eps) < 2 or any(e <= 0 for e in self.stage_eps):
            raise ConfigError(f"{key}.stage_eps: need at least two positive budgets, got {list(self.stage_eps)}")
        if self.budget_mode not in ("fraction", "absolute"):
            raise ConfigError(f"{key}.budget_mode: expected 'fraction' or 'absolute', got {self.budget_mode!r}")
        if not 1 <= self.degree <= len(self.stage_eps) - 1:
            raise ConfigError(
                f"{key}.degree: a degree-{self.degree} fit needs more than {self.degree} stages, "
                f"got {len(self.stage_eps)} stage budgets"
            )
        if self.fit_in not in ("eps", "mu"):
            raise ConfigError(f"{key}.fit_in: expected 'eps' or 'mu', got {self.fit_in!r}")
        if self.later_stage_range not in ("above_previous", "full"):
            raise ConfigError(
                f"{key}.later_stage_range: expected 'above_previous' or 'full', got {self.later_stage_range!r}"
            )

    @classmethod
    def from_config(cls, cfg: dict) -> LinearScalingConfig:
        return cls(
            n_trials=int(cfg.get("n_trials", 3)),
            stage_eps=tuple(float(e) for e in cfg.get("stage_eps", (0.1, 0.2))),
            budget_mode=cfg.get("budget_mode", "fraction"),
            degree=int(cfg.get("degree", 1)),
            fit_in=cfg.get("fit_in", "eps"),
            later_stage_range=cfg.get("later_stage_range", "above_previous"),
            later_stage_cap=float(cfg.get("later_stage_cap", 0.2)),
            monotone=bool(cfg.get("monotone", True)),
        )

    @property
    def n_stages(self) -> int:
        return len(self.stage_eps)

    def stage_budgets(self, target_eps: float) -> tuple[float, ...]:
        if self.budget_mode == "fraction":
            return tuple(f * target_eps for f in self.stage_eps)
        return self.stage_eps


def search_key(lsc: LinearScalingConfig, target_eps: float) -> str:
    return "stage_eps=" + ",".join(f"{e:.10g}" for e in lsc.stage_budgets(target_eps))


def planned_search_ledger(lsc: LinearScalingConfig, selection: SelectionRule, target_eps: float, planner: BudgetPlanner) -> Ledger:
    """The releases of the whole search as planned (before any training), each stage's trials at its μ."""
    ledger = Ledger()
    for k, eps_k in enumerate(lsc.stage_budgets(target_eps), start=1):
        ledger.add(f"stage {k} trials", mu=planner.mu_for_eps(eps_k), count=lsc.n_trials, standalone_eps=eps_k)
        if selection.mu_per_release > 0:
            ledger.add(f"stage {k} selection", mu=selection.mu_per_release, count=lsc.n_trials)
    return ledger


def check_budgets(lsc: LinearScalingConfig, selection: SelectionRule, targets: Sequence[float], delta: float) -> dict:
    """Final-run budget of every target; raises InfeasibleBudgetError before any training."""
    planner = BudgetPlanner(delta)  # the plan needs δ only: checks run before any trainer exists
    plans = {}
    for target in targets:
        spent = planned_search_ledger(lsc, selection, target, planner)
        mu_f = plan_final_mu(target, delta, spent, what=f"final run of linear scaling at target eps={target:g}")
        plans[float(target)] = {"final_mu": mu_f, "final_eps": planner.eps_for_mu(mu_f)}
    return plans
