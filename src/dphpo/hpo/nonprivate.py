"""The non-private reference (ε = ∞): every grid point trained without noise, best on test.

This is the ceiling the private methods are compared against ("gap" in the tables). It reads the
test set to choose, so it is labelled non-private everywhere it appears.
"""

from __future__ import annotations

import math

import numpy as np

from dphpo.hpo.common import MethodResult, PreparedFeatures, TrainSettings, run_trials
from dphpo.hpo.space import SearchSpace
from dphpo.privacy.ledger import Ledger

METHOD = "nonprivate"


def run(features: PreparedFeatures, settings: TrainSettings, space: SearchSpace, progress: bool = True) -> MethodResult:
    grid = space.grid()
    eta = [e for e, _ in grid]
    steps = [t for _, t in grid]
    outcome = run_trials(features, settings, eta, steps, [0.0] * len(grid), [0] * len(grid), progress=progress, desc="non-private grid")
    best = int(np.argmax(outcome.test_correct))
    trials = [
        {
            "eta": e,
            "steps": t,
            "r": e * t,
            "train_accuracy": float(outcome.train_correct[i] / features.n_train),
            "test_accuracy": float(outcome.test_correct[i] / features.n_test),
        }
        for i, (e, t) in enumerate(grid)
    ]
    return MethodResult(
        method=METHOD,
        target_eps=math.inf,
        delta=settings.delta,
        weights=outcome.weights[best].numpy(),
        test_accuracy=trials[best]["test_accuracy"],
        train_accuracy=trials[best]["train_accuracy"],
        released={"eta": eta[best], "steps": steps[best], "r": eta[best] * steps[best], "sigma": 0.0},
        ledger=Ledger(),
        selection={"rule": "test", "private": False, "label": "best grid point on TEST data (non-private reference)"},
        trials=trials,
        private=False,
    )
