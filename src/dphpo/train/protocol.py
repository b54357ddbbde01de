"""The trainer protocol the HPO methods call (issue 8.1).

A private trainer turns trials (η, T, σ, seed) into released models and their scores; how one of its
runs is accounted is its `accountant` (`dphpo.privacy.accountant`). Every HPO method
(`dphpo.hpo.*`) takes a `PrivateTrainer`, so the linear scaling rule and the baselines run unchanged
on the batched linear head (`dphpo.train.linear_head.LinearHeadTrainer`) or on any other trainer that
implements this protocol. Methods that only make sense for one kind of trainer say so with
`require_kind` (a clear ConfigError, before any training).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from dphpo.errors import ConfigError
from dphpo.privacy.accountant import PlanningAccountant

#: Metrics a trainer may report, and whether higher is better.
#: SQuAD F1 is in percent, as the official evaluate-v2.0.py reports it (dphpo.tasks.question_answering).
HIGHER_IS_BETTER = {"accuracy": True, "perplexity": False, "f1": True}


@dataclass
class TrialOutcome:
    """What a batch of H trials produced (index h everywhere)."""

    models: Any  # released parameters per trial; the linear head keeps a (H, K, d) tensor
    # (H,) Σ over training examples of a per-example score in [0, 1] (1{correct}, or a sequence's
    # likelihood score, or a question's F1): sensitivity 1, what honest selection releases with Gaussian noise
    train_score_sums: np.ndarray
    train_metric: np.ndarray  # (H,) accuracy or perplexity on the training set (recorded, never released)
    test_metric: np.ndarray  # (H,) accuracy or perplexity on the test set (recorded, never selected on)
    test_score_sums: np.ndarray  # (H,) Σ test per-example scores (only for the labelled `test` selection option)
    extras: list[dict] | None = None  # optional per-trial records (e.g. OSO's final C and lr) added to trial records
    # (H) a task's other test metrics beside `test_metric` (SQuAD: exact_match), recorded as it is; None: none
    test_extra: list[dict] | None = None


@runtime_checkable
class PrivateTrainer(Protocol):
    kind: str  # "linear_head" | "finetune" | "dpzo" ...
    mechanism: str  # what one trial is, as its ledger entry names it ("full-batch DP-GD run", ...)
    metric: str  # "accuracy" (higher is better) | "perplexity" (lower is better) | "f1" (SQuAD F1 in %, higher is better)
    n_train: int  # the private count: internal logs only, never used by the mechanism
    n_test: int
    # the declared public size of the training set: the only size the mechanism uses (normalizers,
    # Poisson rates, δ = 1/(2N)); under add/remove adjacency the private count is not public
    n_public: int
    accountant: PlanningAccountant  # how one of its runs is accounted
    # the number of trained parameters of a full-batch model whose noise the no-signal prior scales by
    # (the linear head: d·K, public from the architecture); None: no public prior for this trainer
    n_parameters: int | None

    def provenance(self) -> dict: ...

    def run_trials(
        self,
        eta: Sequence[float],
        steps: Sequence[int],
        sigma: Sequence[float],
        seeds: Sequence[int],
        *,
        progress: bool = True,
        desc: str = "trials",
    ) -> TrialOutcome: ...

    def save_model(self, outcome: TrialOutcome, index: int, path) -> None: ...

    # (train score sum, test score sum, test metric) of the null model, the best one that learns nothing
    # from the inputs: the linear rule's reference for an informative stage pick (safeguard.informative_margin)
    def null_scores(self) -> tuple[float, float, float]: ...


def best_index(metric: str, values: Sequence[float]) -> int:
    """Index of the best value of `metric` (argmax for accuracy, argmin for perplexity; first on ties)."""
    values = np.asarray(values, dtype=np.float64)
    # a diverged run (NaN perplexity) is never the best while any run is finite
    values = np.where(np.isnan(values), -np.inf if higher_is_better(metric) else np.inf, values)
    return int(np.argmax(values) if higher_is_better(metric) else np.argmin(values))


def higher_is_better(metric: str) -> bool:
    if metric not in HIGHER_IS_BETTER:
        raise ValueError(f"unknown metric {metric!r}; expected one of {', '.join(HIGHER_IS_BETTER)}")
    return HIGHER_IS_BETTER[metric]


def require_kind(trainer: PrivateTrainer, kind: str, method: str) -> None:
    """Refuse a trainer of another kind for a method that only makes sense for `kind`."""
    if trainer.kind != kind:
        raise ConfigError(f"{method}: runs on a {kind} trainer only (got a {trainer.kind!r} trainer)")
