"""The non-private reference (ε = ∞): every grid point trained without noise, best on test.

This is the ceiling the private methods are compared against ("gap" in the tables). It reads the
test set to choose, so it is labelled non-private everywhere it appears.
"""

from __future__ import annotations

import math

from dphpo.hpo.common import MethodResult, released_model, result_metrics, trial_metrics
from dphpo.hpo.space import SearchSpace
from dphpo.privacy.ledger import Ledger
from dphpo.train.protocol import PrivateTrainer, best_index

METHOD = "nonprivate"


def run(trainer: PrivateTrainer, space: SearchSpace, progress: bool = True) -> MethodResult:
    grid = space.grid()
    eta = [e for e, _ in grid]
    steps = [t for _, t in grid]
    outcome = trainer.run_trials(eta, steps, [0.0] * len(grid), [0] * len(grid), progress=progress, desc="non-private grid")
    best = best_index(trainer.metric, outcome.test_metric)
    trials = [{"eta": e, "steps": t, "r": e * t} | trial_metrics(trainer, outcome, i) for i, (e, t) in enumerate(grid)]
    return MethodResult(
        method=METHOD,
        target_eps=math.inf,
        delta=trainer.accountant.delta,
        **released_model(trainer, outcome, best),
        **result_metrics(trainer, outcome, best),
        released={"eta": eta[best], "steps": steps[best], "r": eta[best] * steps[best], "sigma": 0.0},
        ledger=Ledger(),
        selection={"rule": "test", "private": False, "label": "best grid point on TEST data (non-private reference)"},
        trials=trials,
        private=False,
    )
