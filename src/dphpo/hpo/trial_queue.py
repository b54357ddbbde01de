"""Trials of several targets (or searches) queued for one `PrivateTrainer.run_trials` call.

Every method trains all its trials of one round as a single batch (one job, one pass over the data);
the queue keeps the four per-trial argument lists in step and remembers whose trial each one is.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

import numpy as np

from dphpo.train.protocol import PrivateTrainer, TrialOutcome


@dataclass
class TrialQueue:
    eta: list[float] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    sigma: list[float] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)
    owner: list[Hashable] = field(default_factory=list)

    def add(self, eta: float, steps: int, sigma: float, seed: int, owner: Hashable = None) -> None:
        self.eta.append(eta)
        self.steps.append(steps)
        self.sigma.append(sigma)
        self.seeds.append(seed)
        self.owner.append(owner)

    def __len__(self) -> int:
        return len(self.eta)

    def run(self, trainer: PrivateTrainer, *, progress: bool, desc: str) -> TrialOutcome:
        return trainer.run_trials(self.eta, self.steps, self.sigma, self.seeds, progress=progress, desc=desc)

    def indices(self, owner: Hashable) -> np.ndarray:
        """The positions in the batch of `owner`'s trials, in the order they were queued."""
        return np.flatnonzero(np.asarray(self.owner) == owner)
