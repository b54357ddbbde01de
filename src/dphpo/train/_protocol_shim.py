"""TEMPORARY shim of PROTOCOL.md (TrialOutcome, a PRV run accountant) until `core` lands protocol.py and
privacy/accountant.py; deleted at the merge."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dphpo.privacy.ledger import Ledger
from dphpo.privacy.prv import prv_bounds, prv_sigma_for, subsampled_run_entry


@dataclass
class TrialOutcome:
    models: Any
    train_score_sums: np.ndarray
    train_metric: np.ndarray
    test_metric: np.ndarray
    test_score_sums: np.ndarray


class PrvRunAccountant:
    name = "prv"

    def __init__(self, q: float, delta: float, eps_error: float = 0.01):
        self.q, self.delta, self.eps_error = float(q), float(delta), float(eps_error)

    def describe(self) -> dict:
        return {"name": self.name, "q": self.q, "delta": self.delta, "eps_error": self.eps_error}

    def entry(self, what, sigma, steps, details=None):
        return subsampled_run_entry(what, self.q, sigma, steps, **(details or {}))

    def standalone_eps(self, sigma, steps):
        return prv_bounds(self.q, float(sigma), int(steps), self.delta, self.eps_error)["eps_upper"]

    def sigma_for_eps(self, eps, steps):
        return prv_sigma_for(self.q, int(steps), eps, self.delta, self.eps_error)

    def sigma_for_remaining(self, spent: Ledger, total_eps, steps):
        raise NotImplementedError
