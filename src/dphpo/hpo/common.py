"""What every HPO method shares: the trainer it runs on, and the release and internal records.

Interface of a method (architecture.md): (trainer, config, noise scope, progress) → one MethodResult
per target ε, holding the released model, its test metric, the trial records and the ledger of every
release. Every private draw comes from the noise scope (`dphpo.privacy.randomness`), whose key is
secret; no seed is recorded.

A result is written twice (docs/privacy.md): `result.json` is the *release*, holding only what the
stated (ε, δ) covers — the model's hyperparameters, the noisy scores that were accounted, test
metrics, the ledger, the total — and `internal.json` the internal log (exact training metrics,
sizes, every trial of a method whose guarantee covers the best one only), marked not for
publication. Tables read releases only. The trainer is any `dphpo.train.protocol.PrivateTrainer`; the batched
linear head (`LinearHeadTrainer` over `PreparedFeatures` with `TrainSettings`) is the paper's.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from dphpo.data.overlap import INTERNAL_DROPPED
from dphpo.hpo.selection import accounted
from dphpo.privacy.ledger import Ledger
from dphpo.provenance import DATA_CHECKSUM_KEYS
from dphpo.train.linear_head import LinearHeadTrainer, PreparedFeatures, TrainSettings, prepare_features
from dphpo.train.protocol import PrivateTrainer, TrialOutcome

__all__ = [
    "LinearHeadTrainer",
    "MethodResult",
    "PreparedFeatures",
    "PrivateTrainer",
    "TrainSettings",
    "TrialOutcome",
    "prepare_features",
    "release_record",
    "released_model",
    "result_metrics",
    "trial_metrics",
]


def trial_metrics(trainer: PrivateTrainer, outcome: TrialOutcome, index: int) -> dict:
    """A trial record's metrics: train_<metric> and test_<metric> (test: recorded, never selected on)."""
    m = trainer.metric
    return {f"train_{m}": float(outcome.train_metric[index]), f"test_{m}": float(outcome.test_metric[index])}


def result_metrics(trainer: PrivateTrainer, outcome: TrialOutcome, index: int) -> dict:
    """MethodResult's metric fields for the released trial `index` (test_accuracy only for accuracy trainers;
    test_extra where the task reports other test metrics)."""
    test, train = float(outcome.test_metric[index]), float(outcome.train_metric[index])
    accuracy = trainer.metric == "accuracy"
    return ({"test_extra": dict(outcome.test_extra[index])} if outcome.test_extra else {}) | {
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
    metric: str = "accuracy"  # the trainer's metric: "accuracy" (higher is better), "perplexity" or "f1" (SQuAD, %)
    test_metric: float | None = None  # default: test_accuracy
    train_metric: float | None = None  # default: train_accuracy
    test_extra: dict = field(default_factory=dict)  # a task's other test metrics (SQuAD: exact_match), recorded beside test_metric
    save_model: Callable[[Any], None] | None = None  # writes the released model (default: weights to npz)
    # Which trials the guarantee covers: "all" when every trial is its own accounted release (composed
    # runs), "selected" when only the best one is (Papernot–Steinke, Koskela: their theorems cover
    # releasing the best; the other trials, how many there were, whether K was capped and the selected
    # trial's index stay in the internal log: `internal`, `release_record`).
    trials_released: str = "all"
    internal: dict = field(default_factory=dict)  # what the internal log adds (never in the release)

    def __post_init__(self) -> None:
        if self.metric == "accuracy":
            self.test_metric = self.test_accuracy if self.test_metric is None else self.test_metric
            self.train_metric = self.train_accuracy if self.train_metric is None else self.train_metric

    @property
    def failure(self) -> str | None:
        """Why the released model is no model: non-finite weights or test metric (training diverged, e.g.
        a step size far too large). Post-processing of the DP output, so stating it costs nothing."""
        if self.weights is not None and not bool(torch.isfinite(torch.as_tensor(self.weights)).all()):
            return "diverged: the released model has non-finite weights (the step size is far too large for this data)"
        if self.test_metric is not None and not math.isfinite(float(self.test_metric)):
            return "diverged: the released model's test metric is not finite"
        return None

    @property
    def total(self) -> dict:
        """The (ε, δ) the release states: its ledger's, or ε = ∞ when the search is not accounted (trained
        without noise, or selected on test data or exact training scores: the ledger then holds only the
        noise the runs added)."""
        if accounted({"private": self.private, "selection": self.selection}):
            return self.ledger.total(self.delta)
        why = "non-private" if not self.private else f"selection rule {self.selection.get('rule')} is not accounted"
        return {"eps": math.inf, "delta": 0.0, "mu": math.inf, "accountant": f"none ({why})"}

    def record(self, provenance: dict) -> dict:
        """The internal log: everything, marked not for publication."""
        return {"internal": INTERNAL_NOTICE} | self._record(provenance) | {"internal_fields": self.internal}

    def _record(self, provenance: dict) -> dict:
        total = self.total
        failed = {"failed": self.failure} if self.failure else {}
        return failed | {
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
        } | ({"test_extra": self.test_extra} if self.test_extra else {}) | {
            "released": self.released,
            "selection": self.selection,
            "search": self.search,
            "trials": self.trials,
            # the ledger of the noise the runs added; its total is the release's (ε = ∞ where the search is not accounted)
            "privacy": self.ledger.to_dict(self.delta) | {"total": total},
            "notes": self.notes,
            "provenance": provenance,
        }


INTERNAL_NOTICE = (
    "NOT FOR PUBLICATION: internal log of the run. It holds exact statistics of the private data that "
    "the stated (eps, delta) does not cover; publish result.json (the release) and the model only."
)
RELEASE_NOTICE = (
    "release: every field is covered by total_eps/total_delta (hyperparameters, accounted noisy scores, "
    "test metrics, the ledger); exact training statistics are in the internal log only"
)
#: Trial fields a release may carry when the guarantee covers the trial: its hyperparameters, its
#: noise, its accounted noisy score, OSO's adapted values (post-processing of its noisy releases), and
#: any test_<metric> (the test data are public).
RELEASED_TRIAL_FIELDS = frozenset(
    {"eta", "steps", "r", "r_requested", "sigma", "mu", "standalone_eps", "score", "stage", "accounting",
     "nu", "nu_g", "nu_q", "final_clip", "final_lr", "mu_before_amplification"}
)
#: Keys never released anywhere in a record: exact statistics or sizes of the private data.
#: Checksums of the private data are exact functions of it (a membership oracle for anyone holding a
#: candidate dataset): the release carries their keyed MACs instead (`NoiseScope.mac`). The secret
#: number of trials of Papernot–Steinke and Koskela–Kulkarni: K, whether it was capped, and the index
#: of the selected trial (K >= index + 1).
INTERNAL_KEYS = frozenset(
    {"subsample_size", "mean_batch", "batch", "n_train", "n_train_texts", "train_tokens", "K", "capped",
     "selected_trial", *DATA_CHECKSUM_KEYS, INTERNAL_DROPPED}
    # exact training metrics: a new, unaccounted query on the private data (train_<metric>)
    | {"train_accuracy", "train_metric", "train_perplexity", "train_f1", "train_exact", "train_accuracy_subsample", "train_loss"}
)


def _covered(value: Any, internal: frozenset = INTERNAL_KEYS) -> Any:
    """`value` without private statistics (`internal`: INTERNAL_KEYS), recursively."""
    if isinstance(value, dict):
        return {k: _covered(v, internal) for k, v in value.items() if k not in internal}
    if isinstance(value, list):
        return [_covered(v, internal) for v in value]
    return value


#: Fields that count or index trials: a release of the best trial only (`trials_released: selected`,
#: a secret number of trials) must hold none of them, in `released` or `search`.
TRIAL_COUNT_KEYS = frozenset({"trial", "n_trials"})


def release_record(result: MethodResult, provenance: dict) -> dict:
    """The release: what the stated (ε, δ) covers, nothing else (module docstring). A method whose
    number of trials is secret releases no trial list, index or count (TRIAL_COUNT_KEYS: refused here,
    a bug of the method); methods of a fixed, public number of trials keep theirs."""
    if result.trials_released == "selected":
        named = sorted(TRIAL_COUNT_KEYS & (set(result.released) | set(result.search)))
        if named:
            raise ValueError(
                f"{result.method}: its release covers the best trial only, but names {', '.join(named)}, which "
                "reveal the secret number of trials; keep them in the internal log (`internal`)"
            )
    # scores are released only where they are noisy (accounted) or on public data: the exact training
    # scores of `train_nonprivate` (trials, picks, the null model's) stay in the internal log
    exact = result.selection.get("rule") == "train_nonprivate"
    full = _covered(result._record(provenance), INTERNAL_KEYS | {"score", "null_score"} if exact else INTERNAL_KEYS)
    trials = full["trials"] if result.trials_released == "all" else []
    full["trials"] = [{k: v for k, v in t.items() if k in RELEASED_TRIAL_FIELDS or k.startswith("test_")} for t in trials]
    full["trials_released"] = result.trials_released
    return {"release": RELEASE_NOTICE} | full
