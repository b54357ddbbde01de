"""Grid search (docs/methods.md §4): the oracle and the accounted version.

- `grid_oracle`: every grid point trained at the full budget, the best reported — chosen on TEST
  data, and the search itself not accounted. It is the ceiling the paper compares against
  ("oracle, non-private HPO"): its result carries `selection.private = False` and every table says
  so. Its ledger holds the released run only; `search.unaccounted` states what was not paid for.
- `grid_accounted`: every grid point at μ_run, all runs and the noisy selection releases composed
  to the target (`candidates.run_composed`).

The oracle's grid (`baselines.grid`) is by default the search space's own η and T grids — the
candidate set the linear scaling rule searches — so that RERR = (ours − random)/(oracle − random)
is at most 100 % in expectation (a coarser oracle grid can be beaten by a rule that searches finer).
It can be coarsened (`baselines.grid.eta_num` log-spaced η over the search range,
`baselines.grid.steps` ⊆ search_space.steps). `grid_accounted` searches `baselines.grid` too unless
`baselines.grid_accounted` names its own grid (same keys): it then pays for exactly the points it
trains, every one of them composed, and its grid size is recorded in every result. Every grid point
of every target is one trial of a single batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dphpo.errors import ConfigError
from dphpo.hpo.candidates import baselines_section, context, run_composed
from dphpo.hpo.common import MethodResult, released_model, result_metrics, trial_metrics
from dphpo.hpo.space import SearchSpace
from dphpo.hpo.trial_queue import TrialQueue
from dphpo.privacy.ledger import Ledger
from dphpo.privacy.randomness import NoiseScope
from dphpo.train.protocol import PrivateTrainer, best_index

ORACLE = "grid_oracle"
ACCOUNTED = "grid_accounted"
ORACLE_LABEL = "oracle, non-private HPO: best grid point on TEST data, search not accounted"


@dataclass(frozen=True)
class GridConfig:
    eta_num: int | None = None  # None: the search space's own η grid
    steps: tuple[int, ...] | None = None  # None: the search space's own T grid
    key: str = "grid"  # the config section it came from (for error messages)

    @classmethod
    def from_config(cls, config: dict, method: str = ORACLE) -> GridConfig:
        """`baselines.grid`; for grid_accounted `baselines.grid_accounted` where the config has one."""
        # an absent, null or empty grid_accounted section: the same grid as the oracle
        key = "grid_accounted" if method == ACCOUNTED and baselines_section(config).get("grid_accounted") else "grid"
        g = baselines_section(config, key)
        steps = g.get("steps")
        return cls(eta_num=g.get("eta_num"), steps=None if steps is None else tuple(int(t) for t in steps), key=key)

    def points(self, space: SearchSpace) -> list[tuple[float, int]]:
        if self.eta_num is not None and self.eta_num < 1:
            raise ConfigError(f"baselines.{self.key}.eta_num: must be >= 1, got {self.eta_num}")
        etas = space.eta_grid if self.eta_num is None else np.geomspace(space.eta_min, space.eta_max, self.eta_num)
        steps = space.steps if self.steps is None else self.steps
        outside = sorted(set(steps) - set(space.steps))
        if outside or not steps:
            raise ConfigError(
                f"baselines.{self.key}.steps: must be a non-empty subset of search_space.steps {list(space.steps)}; "
                f"not in it: {outside}"
            )
        return [(float(e), int(t)) for e in etas for t in sorted(set(steps))]


def run_oracle(trainer: PrivateTrainer, config: dict, noise: NoiseScope, progress: bool = False) -> list[MethodResult]:
    # every grid point is one run at the full budget: any run accountant calibrates it (exact GDP for
    # the linear head, PRV for the fine-tuning trainers)
    accountant, space, _, targets = context(config, trainer, ORACLE)
    grid = GridConfig.from_config(config).points(space)
    queue = TrialQueue()
    for target in targets:
        mu = accountant.full_budget_mu(target)
        for i, (e, t) in enumerate(grid):
            queue.add(e, t, accountant.sigma_at(mu, target, t), noise.seed(ORACLE, f"{target:.10g}", i), target)
    outcome = queue.run(trainer, progress=progress, desc=ORACLE)
    return [_oracle_result(trainer, accountant, grid, queue, outcome, target) for target in targets]


def _oracle_result(trainer: PrivateTrainer, accountant, grid: list[tuple[float, int]], queue: TrialQueue, outcome,
                   target: float) -> MethodResult:
    """The oracle's result at `target`: the grid point best on TEST data, its run the only ledger entry."""
    mu = accountant.full_budget_mu(target)
    idx = queue.indices(target)
    trials = [
        {
            "eta": queue.eta[j],
            "steps": queue.steps[j],
            "r": queue.eta[j] * queue.steps[j],
            "sigma": queue.sigma[j],
            "mu": accountant.planned_mu(mu),
        }
        | trial_metrics(trainer, outcome, j)
        for j in idx
    ]
    best = best_index(trainer.metric, outcome.test_metric[idx])  # selection on TEST: the oracle
    chosen = trials[best]
    what = "released run (oracle: the other grid runs and the test-set selection are NOT accounted)"
    details = {k: chosen[k] for k in ("eta", "steps", "sigma")}
    ledger = Ledger([accountant.planned_entry(what, mu, chosen["sigma"], chosen["steps"], details)])
    n = len(trials)
    return MethodResult(
        method=ORACLE,
        target_eps=float(target),
        delta=accountant.delta,
        **released_model(trainer, outcome, idx[best]),
        **result_metrics(trainer, outcome, idx[best]),
        released={k: chosen[k] for k in ("eta", "steps", "r", "sigma", "mu")}
        | {"standalone_eps": accountant.planned_eps(mu, chosen["sigma"], chosen["steps"]), "trial": best},
        ledger=ledger,
        selection={"rule": "test", "private": False, "label": ORACLE_LABEL},
        trials=trials,
        search={
            "grid": [list(p) for p in grid],
            "n_trials": n,
            "unaccounted": {
                "runs": n - 1,
                "eps_of_all_runs_composed": accountant.composed_eps(mu, n),
                "selection": "on the test set: no finite eps covers it",
            },
        },
        notes=[
            "NOT a private HPO result: every grid point was trained at the full budget and the best was "
            "chosen on TEST data; total_eps covers the released run only (Panda et al.'s grid-search oracle)."
        ],
    )


def run_accounted(trainer: PrivateTrainer, config: dict, noise: NoiseScope, progress: bool = False) -> list[MethodResult]:
    _, space, selection, targets = context(config, trainer)
    grid = GridConfig.from_config(config, ACCOUNTED).points(space)
    return run_composed(
        ACCOUNTED,
        trainer,
        selection,
        {t: grid for t in targets},
        noise,
        search_info={
            "definition": "every grid point at mu_run, all composed, honest selection",
            "grid": [list(p) for p in grid],
            "grid_key": f"baselines.{GridConfig.from_config(config, ACCOUNTED).key}",
        },
        progress=progress,
    )


def check(config: dict) -> None:
    accountant, space, selection, targets = context(config)
    GridConfig.from_config(config, ORACLE).points(space)
    grid = GridConfig.from_config(config, ACCOUNTED).points(space)
    for target in targets:
        accountant.runs_mu(target, len(grid), selection.at(target, len(grid)).mu_per_release, ACCOUNTED)
