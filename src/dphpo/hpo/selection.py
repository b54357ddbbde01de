"""Choosing the best trial, honestly (docs/methods.md §3).

Reading trial scores reads private data. The default rule releases each trial's training score sum
(`TrialOutcome.train_score_sums`: Σ of per-example scores in [0, 1], the count of correct predictions
for a classifier) plus Gaussian noise (sensitivity 1, so μ = 1/σ_s per sum) and charges the ledger.
Score sums are higher-is-better whatever the trainer's metric, so every rule picks the largest.
Selection on test data or on exact training scores exists only as an explicitly labelled,
non-private option.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from dphpo.errors import ConfigError
from dphpo.privacy.ledger import Ledger

PRIVATE_RULES = {
    "noisy_train_accuracy": "noisy training-accuracy counts (accounted)",
    "public_validation": "accuracy on a public validation split (no privacy cost)",
}
NONPRIVATE_RULES = {
    "test": "best on TEST data (non-private HPO, as in the original paper)",
    "train_nonprivate": "exact training accuracy (non-private HPO, unaccounted)",
}


@dataclass(frozen=True)
class SelectionRule:
    rule: str = "noisy_train_accuracy"
    noise_std: float = 100.0  # std of the noise on each released count

    def __post_init__(self) -> None:
        if self.rule not in PRIVATE_RULES | NONPRIVATE_RULES:
            known = ", ".join(sorted(PRIVATE_RULES | NONPRIVATE_RULES))
            raise ConfigError(f"selection.rule: unknown rule {self.rule!r}; expected one of {known}")
        if self.rule == "noisy_train_accuracy" and not self.noise_std > 0:
            raise ConfigError(f"selection.noise_std: must be > 0 for noisy_train_accuracy, got {self.noise_std}")

    @classmethod
    def from_config(cls, cfg: dict) -> SelectionRule:
        return cls(rule=cfg.get("rule", "noisy_train_accuracy"), noise_std=float(cfg.get("noise_std", 100.0)))

    @property
    def private(self) -> bool:
        return self.rule in PRIVATE_RULES

    @property
    def mu_per_release(self) -> float:
        """GDP μ of one released score (0 when the rule costs nothing or is not accounted)."""
        return 1.0 / self.noise_std if self.rule == "noisy_train_accuracy" else 0.0

    @property
    def difference_std(self) -> float:
        """Std of the difference of two released scores: √2·σ_s under the noisy rule, 0 for exact scores."""
        return self.noise_std * 2**0.5 if self.rule == "noisy_train_accuracy" else 0.0

    @property
    def label(self) -> str:
        return (PRIVATE_RULES | NONPRIVATE_RULES)[self.rule]

    def describe(self) -> dict:
        return asdict(self) | {"private": self.private, "label": self.label}


def select_best(rule: SelectionRule, **released) -> tuple[int, np.ndarray]:
    """Index of the best trial and the scores it was chosen by (`release_scores`, whose keywords these are)."""
    scores = release_scores(rule, **released)
    return int(np.argmax(scores)), scores


def release_scores(
    rule: SelectionRule,
    *,
    train_scores: np.ndarray,
    test_scores: np.ndarray,
    rng: np.random.Generator,
    ledger: Ledger,
    what: str,
    validation_scores: np.ndarray | None = None,
) -> np.ndarray:
    """The scores `rule` releases for these trials (noisy counts under the private rule, charged to
    `ledger`); `select_best` picks the largest.

    train_scores / test_scores / validation_scores: each trial's score sums (higher is better).
    """
    train_scores = np.asarray(train_scores, dtype=np.float64)
    if rule.rule == "noisy_train_accuracy":
        scores = train_scores + rng.normal(0.0, rule.noise_std, size=train_scores.shape)
        ledger.add(
            f"{what}: noisy train-accuracy counts",
            mu=rule.mu_per_release,
            count=len(train_scores),
            noise_std=rule.noise_std,
            sensitivity=1,
        )
    elif rule.rule == "public_validation":
        if validation_scores is None:
            raise ConfigError("selection.rule=public_validation needs a public validation split in the feature cache")
        scores = np.asarray(validation_scores, dtype=np.float64)
    elif rule.rule == "test":
        scores = np.asarray(test_scores, dtype=np.float64)
    else:
        scores = train_scores
    return scores
