"""The batched linear-head trainer: full-batch DP-GD on cached features (Panda et al., Algorithm 1).

`TrainSettings` holds the training primitive's fixed settings (docs/methods.md §1) and the accounting
choices (δ, adjacency, accountant, batch size) from which `accountant_for` builds the run accountant;
`PreparedFeatures` are the features on the training device; `LinearHeadTrainer` is the
`PrivateTrainer` the HPO methods call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from dphpo.data.metrics import majority_label_scores
from dphpo.device import choose_device, describe_device
from dphpo.io import atomic_path
from dphpo.privacy.accountant import (
    PlanningAccountant,
    accounting_keys,
    check_accounting,
    make_accountant,
)
from dphpo.train.clipping import row_norms
from dphpo.train.dpgd import TrialBatch, accuracy_counts, train_linear_dpgd, with_bias_column
from dphpo.train.philox import check_generator
from dphpo.train.protocol import TrialOutcome


@dataclass(frozen=True)
class TrainSettings:
    """The fixed parts of the training primitive (docs/methods.md §1); all recorded in provenance."""

    clip_norm: float = 1.0
    momentum: float = 0.9
    free_step: bool = True
    bias: bool = False
    init_std: float = 0.0
    feature_norm: float | None = None  # L2-normalize features to this norm (data-independent)
    device: str = "auto"
    delta: float = 1e-5
    adjacency: str = "add_remove"  # "replace_one" doubles every μ
    # Ablations of Panda et al. Table 15 (the method itself: full batch, exact GDP accounting).
    batch_size: int | None = None  # expected Poisson batch size B (q = B/N); None = full batch
    accountant: str = "gdp"  # "rdp": account every run with Rényi DP (looser); "prv": prv-accountant
    eps_error: float = 0.01  # the PRV accountant's ε error bound (privacy.eps_error)
    noise_generator: str = "mt"  # "philox": drawn on the device (dphpo.train.philox)

    def __post_init__(self) -> None:
        check_accounting(self.accountant, self.adjacency, self.batch_size)
        check_generator(self.noise_generator)

    @classmethod
    def from_config(cls, config: dict) -> TrainSettings:
        t = config.get("training", {})
        return cls(
            clip_norm=float(t.get("clip_norm", 1.0)),
            momentum=float(t.get("momentum", 0.9)),
            free_step=bool(t.get("free_step", True)),
            bias=bool(t.get("bias", False)),
            init_std=float(t.get("init_std", 0.0)),
            feature_norm=t.get("feature_norm"),
            device=t.get("device", "auto"),
            noise_generator=t.get("noise_generator", "mt"),
            **accounting_keys(config),
        )

    def sample_rate(self, n_public: int) -> float | None:
        """Poisson sampling rate q = B/N_pub of a minibatch run (N_pub: the declared public size); None for full batch."""
        if self.batch_size is None:
            return None
        return min(1.0, self.batch_size / n_public)

    def accountant_for(self, n_public: int) -> PlanningAccountant:
        """The accountant of one run on a training set of declared size `n_public` (the one
        `dphpo.privacy.accountant.accountant_from_config` builds from the same keys)."""
        return make_accountant(self.accountant, self.delta, self.adjacency, self.sample_rate(n_public), self.eps_error, self.batch_size)


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
    # The declared public size of the training set (`dphpo.data.registry.public_train_size`): the only
    # size the mechanism uses. n_train, the private count, is for internal logs only.
    n_public: int

    @property
    def n_train(self) -> int:
        return int(self.x_train.shape[0])

    @property
    def n_test(self) -> int:
        return int(self.x_test.shape[0])


def prepare_features(feature_set: Any, settings: TrainSettings, n_public: int) -> PreparedFeatures:
    """Move a FeatureSet to the device; optional fixed-norm scaling and bias column (both data-independent).
    `n_public`: the declared public training-set size (never len(feature_set.y_train))."""
    device = choose_device(settings.device)

    def prep(x: torch.Tensor) -> torch.Tensor:
        x = x.to(device=device, dtype=torch.float32)
        if settings.feature_norm:
            x = x * (settings.feature_norm / row_norms(x).unsqueeze(1).clamp_min(1e-12))
        return with_bias_column(x) if settings.bias else x

    return PreparedFeatures(
        x_train=prep(feature_set.x_train),
        y_train=feature_set.y_train.to(device),
        x_test=prep(feature_set.x_test),
        y_test=feature_set.y_test.to(device),
        num_classes=int(feature_set.num_classes),
        checksum=feature_set.checksum,
        attrs=dict(feature_set.attrs),
        n_public=int(n_public),
    )


class LinearHeadTrainer:
    """Batched full-batch DP-GD of a linear head over cached features (a `PrivateTrainer`).

    Scores are counts of correct predictions (per-example score 1{correct}); the metric is accuracy.
    """

    kind = "linear_head"
    mechanism = "full-batch DP-GD run"
    metric = "accuracy"

    def __init__(self, features: PreparedFeatures, settings: TrainSettings, accountant: PlanningAccountant | None = None) -> None:
        self.features, self.settings = features, settings
        self.accountant = settings.accountant_for(features.n_public) if accountant is None else accountant

    @classmethod
    def from_config(cls, features: PreparedFeatures, config: dict) -> LinearHeadTrainer:
        """The trainer a config asks for on these features."""
        return cls(features, TrainSettings.from_config(config))

    @property
    def n_train(self) -> int:
        return self.features.n_train

    @property
    def n_test(self) -> int:
        return self.features.n_test

    @property
    def n_public(self) -> int:
        return self.features.n_public

    @property
    def n_parameters(self) -> int:
        """d·K weights of the head (no bias): public, from the feature width and the label set."""
        return int(self.features.x_train.shape[1]) * int(self.features.num_classes)

    def provenance(self) -> dict:
        f = self.features
        return {
            "trainer": self.kind,
            "feature_cache": {
                "content_sha256": f.checksum,
                "extractor": f.attrs.get("extractor"),
                "dataset_checksum": f.attrs.get("dataset_checksum"),
                "public_n_train": f.n_public,  # as the config key and provenance.settings name it
                "n_test": f.n_test,
                "upstream_privacy": f.attrs.get("upstream_privacy"),
                # the data the workflow pretrained the extractor on without noise (None: not pretrained here)
                "pretraining_data": f.attrs.get("public_dataset"),
            },
            "training": self.settings.__dict__,
            "compute_device": describe_device(f.x_train.device),
        }

    def run_trials(
        self,
        eta: Sequence[float],
        steps: Sequence[int],
        sigma: Sequence[float],
        seeds: Sequence[int],
        *,
        progress: bool = True,
        desc: str = "trials",
    ) -> TrialOutcome:
        """Train a batch of trials together (`train_linear_dpgd`) and count their correct predictions."""
        s, f = self.settings, self.features
        weights = train_linear_dpgd(
            f.x_train,
            f.y_train,
            f.num_classes,
            TrialBatch(list(eta), [int(t) for t in steps], list(sigma), [int(x) for x in seeds]),
            n_public=f.n_public,
            clip_norm=s.clip_norm,
            momentum=s.momentum,
            free_step=s.free_step,
            init_std=s.init_std,
            progress=progress,
            desc=desc,
            sample_rate=s.sample_rate(f.n_public),
            noise_generator=s.noise_generator,
        )
        return self.outcome(weights)

    def outcome(self, weights: torch.Tensor, extras: list[dict] | None = None) -> TrialOutcome:
        """The outcome of trained heads (H, K, d): correct-prediction counts and accuracies. A diverged head
        (non-finite weights) scores NaN, never the count of the class its NaN logits' argmax names, so no
        selection picks it (`best_released`); telling it apart is post-processing of the released weights."""
        f = self.features
        counts = [accuracy_counts(weights, x, y).numpy() for x, y in ((f.x_train, f.y_train), (f.x_test, f.y_test))]
        diverged = ~torch.isfinite(weights).flatten(1).all(dim=1).cpu().numpy()
        if diverged.any():  # else the integer counts, as they were
            counts = [np.where(diverged, np.nan, c) for c in counts]
        train_correct, test_correct = counts
        return TrialOutcome(
            models=weights,
            train_score_sums=train_correct,
            train_metric=train_correct / f.n_train if f.n_train else np.full(train_correct.shape, np.nan),
            test_metric=test_correct / f.n_test,
            test_score_sums=test_correct,
            extras=extras,
        )

    def save_model(self, outcome: TrialOutcome, index: int, path) -> None:
        save_weights(outcome.models[index], path)

    def null_scores(self) -> tuple[float, float, float]:
        f = self.features
        return majority_label_scores(f.y_train, f.y_test, f.num_classes)

    def with_batch_size(self, batch_size: int | None) -> LinearHeadTrainer:
        """The same trainer with Poisson batches of expected size `batch_size` (q = B/N_pub, the declared
        public size; None: full batch), accounted by the accountant its settings name for that rate."""
        return LinearHeadTrainer(self.features, replace(self.settings, batch_size=batch_size))

    def subsample(self, keep: np.ndarray, n_public: float) -> LinearHeadTrainer:
        """The same trainer on the training examples `keep` (indices); test data unchanged. `n_public`:
        the public size its sums are divided by (a Poisson subsample of rate q: q·N_pub, not |keep|)."""
        f = self.features
        idx = torch.as_tensor(keep, device=f.x_train.device)
        sub = PreparedFeatures(f.x_train[idx], f.y_train[idx], f.x_test, f.y_test, f.num_classes, f.checksum, f.attrs, n_public)
        return LinearHeadTrainer(sub, self.settings, self.accountant)


def save_weights(weights: Any, path) -> None:
    """model.npz with the released weights (float32), written atomically."""
    array = weights.detach().cpu().numpy() if isinstance(weights, torch.Tensor) else np.asarray(weights)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            np.savez(fh, weights=array.astype(np.float32))
