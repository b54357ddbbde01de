"""What every HPO method shares: training settings, trial execution, and the result record.

Interface of a method (architecture.md): (features, target budgets, search space, selection,
seed) → one MethodResult per target ε, holding the released weights, test metrics, the trial
records and the ledger of every release.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from dphpo.io import atomic_path, write_json
from dphpo.privacy.ledger import Ledger
from dphpo.train.dpgd import TrialBatch, accuracy_counts, resolve_device, train_linear_dpgd, with_bias_column


@dataclass(frozen=True)
class TrainSettings:
    """The fixed parts of the training primitive (methods.md §1); all recorded in provenance."""

    clip_norm: float = 1.0
    momentum: float = 0.9
    free_step: bool = True
    bias: bool = False
    init_std: float = 0.0
    feature_norm: float | None = None  # L2-normalize features to this norm (data-independent)
    device: str = "auto"
    delta: float = 1e-5
    adjacency: str = "add_remove"  # "replace_one" doubles every μ

    @classmethod
    def from_config(cls, config: dict) -> "TrainSettings":
        t, p = config.get("training", {}), config.get("privacy", {})
        return cls(
            clip_norm=float(t.get("clip_norm", 1.0)),
            momentum=float(t.get("momentum", 0.9)),
            free_step=bool(t.get("free_step", True)),
            bias=bool(t.get("bias", False)),
            init_std=float(t.get("init_std", 0.0)),
            feature_norm=t.get("feature_norm"),
            device=t.get("device", "auto"),
            delta=float(p.get("delta", 1e-5)),
            adjacency=p.get("adjacency", "add_remove"),
        )

    @property
    def sensitivity_factor(self) -> float:
        """Replace-one adjacency moves a clipped sum by up to 2C instead of C."""
        return 2.0 if self.adjacency == "replace_one" else 1.0

    def sigma_for(self, mu: float, steps: int) -> float:
        """Noise multiplier making `steps` steps exactly μ-GDP: σ = factor·√T/μ."""
        return self.sensitivity_factor * math.sqrt(steps) / mu

    def mu_of(self, sigma: float, steps: int) -> float:
        return self.sensitivity_factor * math.sqrt(steps) / sigma


@dataclass
class PreparedFeatures:
    """Features on the training device, preprocessed the same way for every method."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    checksum: str
    attrs: dict

    @property
    def n_train(self) -> int:
        return int(self.x_train.shape[0])

    @property
    def n_test(self) -> int:
        return int(self.x_test.shape[0])


def prepare_features(feature_set: Any, settings: TrainSettings) -> PreparedFeatures:
    """Move a FeatureSet to the device; optional fixed-norm scaling and bias column (both data-independent)."""
    device = resolve_device(settings.device)

    def prep(x: torch.Tensor) -> torch.Tensor:
        x = x.to(device=device, dtype=torch.float32)
        if settings.feature_norm:
            x = x * (settings.feature_norm / x.norm(dim=1, keepdim=True).clamp_min(1e-12))
        return with_bias_column(x) if settings.bias else x

    return PreparedFeatures(
        x_train=prep(feature_set.x_train),
        y_train=feature_set.y_train.to(device),
        x_test=prep(feature_set.x_test),
        y_test=feature_set.y_test.to(device),
        num_classes=int(feature_set.num_classes),
        checksum=feature_set.checksum,
        attrs=dict(feature_set.attrs),
    )


@dataclass
class TrialOutcome:
    weights: torch.Tensor  # (H, K, d)
    train_correct: np.ndarray  # (H,)
    test_correct: np.ndarray  # (H,)


def run_trials(
    features: PreparedFeatures,
    settings: TrainSettings,
    eta: Sequence[float],
    steps: Sequence[int],
    sigma: Sequence[float],
    seeds: Sequence[int],
    *,
    progress: bool = True,
    desc: str = "trials",
) -> TrialOutcome:
    """Train a batch of trials together and count their correct train/test predictions."""
    weights = train_linear_dpgd(
        features.x_train,
        features.y_train,
        features.num_classes,
        TrialBatch(list(eta), [int(t) for t in steps], list(sigma), [int(s) for s in seeds]),
        clip_norm=settings.clip_norm,
        momentum=settings.momentum,
        free_step=settings.free_step,
        init_std=settings.init_std,
        progress=progress,
        desc=desc,
    )
    return TrialOutcome(
        weights=weights,
        train_correct=accuracy_counts(weights, features.x_train, features.y_train).numpy(),
        test_correct=accuracy_counts(weights, features.x_test, features.y_test).numpy(),
    )


def trial_seed(*keys: object) -> int:
    """A 63-bit seed derived deterministically from keys (method, study seed, stage, trial, ...)."""
    digest = hashlib.sha256(repr(keys).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def rng_for(*keys: object) -> np.random.Generator:
    """A numpy generator seeded from keys: same keys, same draws, on any machine."""
    return np.random.default_rng(trial_seed(*keys))


@dataclass
class MethodResult:
    """What a method releases for one target budget, plus everything needed to audit it."""

    method: str
    target_eps: float
    delta: float
    weights: np.ndarray
    test_accuracy: float
    train_accuracy: float
    released: dict
    ledger: Ledger
    selection: dict
    trials: list[dict] = field(default_factory=list)
    search: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    private: bool = True  # False: trained without noise, ε = ∞ (a reference, never a DP result)

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
            "released": self.released,
            "selection": self.selection,
            "search": self.search,
            "trials": self.trials,
            "privacy": self.ledger.to_dict(self.delta),
            "notes": self.notes,
            "provenance": provenance,
        }


def write_result(result: MethodResult, result_path: str | Path, model_path: str | Path, provenance: dict) -> None:
    """result.json (all numbers, ledger, provenance) and model.npz (released weights), both atomic."""
    with atomic_path(model_path) as tmp:
        with open(tmp, "wb") as fh:
            np.savez(fh, weights=result.weights.astype(np.float32))
    write_json(result_path, result.record(provenance))
