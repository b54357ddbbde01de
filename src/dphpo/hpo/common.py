"""What every HPO method shares: the trainer it runs on, seeds, and the result record.

Interface of a method (architecture.md): (trainer, target budgets, search space, selection, seed) →
one MethodResult per target ε, holding the released model, its test metric, the trial records and
the ledger of every release. The trainer is any `dphpo.train.protocol.PrivateTrainer`; the batched
linear head (`LinearHeadTrainer` over `PreparedFeatures` with `TrainSettings`) is the paper's.
"""

from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from dphpo.io import write_json
from dphpo.privacy.ledger import Ledger
from dphpo.train.linear_head import LinearHeadTrainer, PreparedFeatures, TrainSettings, prepare_features, save_weights
from dphpo.train.protocol import PrivateTrainer, TrialOutcome

__all__ = [
    "LinearHeadTrainer",
    "MethodResult",
    "PreparedFeatures",
    "PrivateTrainer",
    "TrainSettings",
    "TrialOutcome",
    "prepare_features",
    "released_model",
    "result_metrics",
    "rng_for",
    "trial_metrics",
    "trial_seed",
    "write_result",
]


def trial_seed(*keys: object) -> int:
    """A 63-bit seed derived deterministically from keys (method, study seed, stage, trial, ...)."""
    digest = hashlib.sha256(repr(keys).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def rng_for(*keys: object) -> np.random.Generator:
    """A numpy generator seeded from keys: same keys, same draws, on any machine."""
    return np.random.default_rng(trial_seed(*keys))


def trial_metrics(trainer: PrivateTrainer, outcome: TrialOutcome, index: int) -> dict:
    """A trial record's metrics: train_<metric> and test_<metric> (test: recorded, never selected on)."""
    m = trainer.metric
    return {f"train_{m}": float(outcome.train_metric[index]), f"test_{m}": float(outcome.test_metric[index])}


def result_metrics(trainer: PrivateTrainer, outcome: TrialOutcome, index: int) -> dict:
    """MethodResult's metric fields for the released trial `index` (test_accuracy only for accuracy trainers)."""
    test, train = float(outcome.test_metric[index]), float(outcome.train_metric[index])
    accuracy = trainer.metric == "accuracy"
    return {
        "metric": trainer.metric,
        "test_metric": test,
        "train_metric": train,
        "test_accuracy": test if accuracy else None,
        "train_accuracy": train if accuracy else None,
    }


def released_model(trainer: PrivateTrainer, outcome: TrialOutcome, index: int) -> dict:
    """MethodResult's model fields: the weights when they are one tensor per trial, and the saver."""
    model = outcome.models[index]
    weights = model.detach().cpu().numpy() if isinstance(model, torch.Tensor) else None
    return {"weights": weights, "save_model": functools.partial(trainer.save_model, outcome, index)}


@dataclass
class MethodResult:
    """What a method releases for one target budget, plus everything needed to audit it."""

    method: str
    target_eps: float
    delta: float
    weights: np.ndarray | None  # the released linear head (None when the model is not one array)
    test_accuracy: float | None  # = test_metric for accuracy trainers (tables read it), else None
    train_accuracy: float | None
    released: dict
    ledger: Ledger
    selection: dict
    trials: list[dict] = field(default_factory=list)
    search: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    private: bool = True  # False: trained without noise, ε = ∞ (a reference, never a DP result)
    metric: str = "accuracy"  # the trainer's metric: "accuracy" (higher is better) or "perplexity"
    test_metric: float | None = None  # default: test_accuracy
    train_metric: float | None = None  # default: train_accuracy
    save_model: Callable[[Any], None] | None = None  # writes the released model (default: weights to npz)

    def __post_init__(self) -> None:
        if self.metric == "accuracy":
            self.test_metric = self.test_accuracy if self.test_metric is None else self.test_metric
            self.train_metric = self.train_accuracy if self.train_metric is None else self.train_metric

    @property
    def total(self) -> dict:
        if not self.private:
            return {"eps": math.inf, "delta": 0.0, "mu": math.inf, "accountant": "none (non-private)"}
        return self.ledger.total(self.delta)

    def record(self, provenance: dict) -> dict:
        total = self.total
        return {
            "method": self.method,
            "target": {"eps": self.target_eps, "delta": self.delta},
            "total_eps": total["eps"],
            "total_delta": total["delta"],
            "private": self.private,
            "within_budget": bool(total["eps"] <= self.target_eps * (1 + 1e-9)),
            "test_accuracy": self.test_accuracy,
            "train_accuracy": self.train_accuracy,
            "metric": self.metric,
            "test_metric": self.test_metric,
            "train_metric": self.train_metric,
            "released": self.released,
            "selection": self.selection,
            "search": self.search,
            "trials": self.trials,
            "privacy": self.ledger.to_dict(self.delta),
            "notes": self.notes,
            "provenance": provenance,
        }


def write_result(result: MethodResult, result_path: str | Path, model_path: str | Path, provenance: dict) -> None:
    """result.json (all numbers, ledger, provenance) and the released model, both atomic."""
    if result.save_model is not None:
        result.save_model(model_path)
    else:
        save_weights(result.weights, model_path)
    write_json(result_path, result.record(provenance))
