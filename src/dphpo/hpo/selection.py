"""Choosing the best trial, honestly (docs/methods.md §3).

Reading trial scores reads private data. The default rule releases each trial's training score sum
(`TrialOutcome.train_score_sums`: Σ of per-example scores in [0, 1], the count of correct predictions
for a classifier) plus Gaussian noise (sensitivity 1, so μ = 1/σ_s per sum) and charges the ledger.
Score sums are higher-is-better whatever the trainer's metric, so every rule picks the largest.
Selection on test data or on exact training scores exists only as an explicitly labelled,
non-private option.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from dphpo.errors import ConfigError
from dphpo.privacy.ledger import Ledger
from dphpo.privacy.planning import BudgetPlanner

#: `selection.noise_std: auto`: the planner's noise (`plan_selection_noise`), per target.
AUTO = "auto"
PRIVATE_RULES = {
    "noisy_train_accuracy": "noisy sums of per-example training scores in [0, 1] (accuracy: correct counts; accounted)",
    "public_validation": "accuracy on a public validation split (no privacy cost)",
}
NONPRIVATE_RULES = {
    "test": "best on TEST data (non-private HPO, as in the original paper)",
    "train_nonprivate": "exact training accuracy (non-private HPO, unaccounted)",
}


@dataclass(frozen=True)
class SelectionRule:
    """How a search picks its trial. `noise_std` None is `selection.noise_std: auto`: the planner sets
    it per target from public quantities (`at`, `plan_selection_noise`); `n_public` and `delta` are the
    public size and δ it plans with (`selection_rule`), `planned` says why on a rule `at` resolved."""

    rule: str = "noisy_train_accuracy"
    noise_std: float | None = 100.0  # std of the noise on each released count
    n_public: int | None = None
    delta: float | None = None
    planned: str | None = None

    def __post_init__(self) -> None:
        if self.rule not in PRIVATE_RULES | NONPRIVATE_RULES:
            known = ", ".join(sorted(PRIVATE_RULES | NONPRIVATE_RULES))
            raise ConfigError(f"selection.rule: unknown rule {self.rule!r}; expected one of {known}")
        if self.rule == "noisy_train_accuracy" and self.noise_std is not None and not self.noise_std > 0:
            raise ConfigError(f"selection.noise_std: must be > 0 or auto for noisy_train_accuracy, got {self.noise_std}")

    @classmethod
    def from_config(cls, cfg: dict) -> SelectionRule:
        noise = cfg.get("noise_std", 100.0)
        return cls(rule=cfg.get("rule", "noisy_train_accuracy"), noise_std=None if noise == AUTO else float(noise))

    def at(self, eps: float, releases: int) -> SelectionRule:
        """The rule a search at target ε that releases `releases` scores uses: this one, or with the
        noise planned for them when the config says auto."""
        if self.noise_std is not None or self.rule != "noisy_train_accuracy":
            return self
        if self.delta is None:
            raise ValueError("selection.noise_std: auto needs delta to plan with (build the rule with selection_rule)")
        plan = plan_selection_noise(self.n_public, eps, self.delta, max(1, int(releases)))
        return replace(self, noise_std=plan.noise_std, planned=plan.why())

    @property
    def private(self) -> bool:
        return self.rule in PRIVATE_RULES

    @property
    def mu_per_release(self) -> float:
        """GDP μ of one released score (0 when the rule costs nothing or is not accounted)."""
        if self.rule != "noisy_train_accuracy":
            return 0.0
        return 1.0 / self._noise_std()

    @property
    def difference_std(self) -> float:
        """Std of the difference of two released scores: √2·σ_s under the noisy rule, 0 for exact scores."""
        return self._noise_std() * 2**0.5 if self.rule == "noisy_train_accuracy" else 0.0

    def _noise_std(self) -> float:
        if self.noise_std is None:
            raise ValueError("selection.noise_std: auto is planned per target: use the rule's at(eps, releases)")
        return self.noise_std

    @property
    def predicts_signal(self) -> bool:
        """Whether released scores this noisy can rank trials on the public size N (noise at most
        SIGNAL_FRACTION of N); true where nothing is noised or N is not known."""
        return self.rule != "noisy_train_accuracy" or ranks_trials(self._noise_std(), self.n_public)

    @property
    def label(self) -> str:
        return (PRIVATE_RULES | NONPRIVATE_RULES)[self.rule]

    def describe(self) -> dict:
        planned = {"planned": self.planned} if self.planned else {}
        return {"rule": self.rule, "noise_std": self.noise_std} | planned | {"private": self.private, "label": self.label}


def accounted(record: Mapping) -> bool:
    """Whether a result record's (ε, δ) covers its whole search: trained with noise and selected by an
    accounted rule (not the non-private reference, not a search selected on test data or exact
    training scores). Tables, the bundle and `dphpo verify` ask this one question."""
    selection = record.get("selection") or {}
    return bool(record.get("private", True)) and bool(selection.get("private", True)) and selection.get("rule") not in NONPRIVATE_RULES


def selection_rule(config: dict, n_public: int | None) -> SelectionRule:
    """The selection rule of a config, with the public size and δ a planned noise needs."""
    rule = SelectionRule.from_config(config.get("selection", {}) or {})
    delta = (config.get("privacy") or {}).get("delta")
    return replace(rule, n_public=None if n_public is None else int(n_public), delta=None if delta is None else float(delta))


def best_released(scores) -> int:
    """Index of the best released score, first on ties; a NaN score (a diverged trial) is never the best
    while any score is a number (np.argmax alone returns the first NaN)."""
    return int(np.argmax(np.nan_to_num(np.asarray(scores, dtype=np.float64), nan=-np.inf)))


def select_best(rule: SelectionRule, **released) -> tuple[int, np.ndarray]:
    """Index of the best trial and the scores it was chosen by (`release_scores`, whose keywords these are)."""
    scores = release_scores(rule, **released)
    return best_released(scores), scores


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
            f"{what}: noisy training-score sums",
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


# --- the selection planner: the noise from public quantities ---------------------------------------

#: The released scores of a search spend at most this share of the smallest target's μ² (GDP).
PLANNED_SHARE = 0.1
#: Noise below this fraction of N buys nothing: MNIST's 300 of 60,000 (0.5 %) already ranks its trials.
FINEST_FRACTION = 0.005
#: Noise above this fraction of N: the stages cannot beat the public prior, and the recommended rule
#: skips them (`Safeguard.no_signal_prior`). Chosen on public proxies (experiments/selection_planner.py,
#: 5 seeds; docs/methods.md §3): on digits (N = 500 … 1,438) and MNIST pixels (N = 500 … 5,000) at
#: ε = 0.25 … 8, one run at the prior beat the stages in all 19 cells where the planned noise let
#: them run at 0.6-2 % of N (by 0.3 to 11.9 points); at MNIST's 60,000 the planned noise is this
#: floor and the stages run as before. The MNIST subsets are of its training split, which the embedded
#: mnist study trains on: the configs label this choice (`design_notes: selection.noise_std`).
SIGNAL_FRACTION = FINEST_FRACTION


def ranks_trials(noise_std: float, n_public: int | None) -> bool:
    """Whether released counts of this noise can rank trials on N public-size records: noise at most
    SIGNAL_FRACTION of N (true where N is not known: nothing to judge by)."""
    return not n_public or noise_std <= SIGNAL_FRACTION * n_public


@dataclass(frozen=True)
class SelectionPlan:
    """The selection noise the planner chose for N public-size records at target ε, and why."""

    noise_std: float
    n_public: int | None
    eps: float
    delta: float
    releases: int

    @property
    def fraction(self) -> float:
        """The noise as a fraction of N: the accuracy resolution of one released score (NaN without N)."""
        return self.noise_std / self.n_public if self.n_public else float("nan")

    @property
    def share(self) -> float:
        """The share of μ(ε)² the released scores spend."""
        return self.releases / self.noise_std**2 / BudgetPlanner(self.delta).mu_for_eps(self.eps) ** 2

    @property
    def signal(self) -> bool:
        """Whether released scores this noisy can rank trials (`ranks_trials`)."""
        return ranks_trials(self.noise_std, self.n_public)

    def why(self) -> str:
        if self.n_public is None:
            return (f"selection.noise_std = {self.noise_std:.4g} counts: its {self.releases} released scores spend "
                    f"{PLANNED_SHARE:.0%} of mu(eps={self.eps:g}, delta={self.delta:g})^2 (no public size N given)")
        floor = "its floor of" if self.noise_std == FINEST_FRACTION * self.n_public else "above the floor of"
        verdict = ("the released scores can rank the trials" if self.signal else
                   f"NO SIGNAL: above {SIGNAL_FRACTION:.1%} of N the released scores cannot rank the trials; the "
                   "recommended rule skips its stages and spends the whole budget on one run at the public prior r "
                   "(linear_scaling.safeguard.no_signal_prior); more records or a larger target give the stages a signal")
        return (f"selection.noise_std = {self.noise_std:.4g} counts = {self.fraction:.2%} of N = {self.n_public} "
                f"({floor} {FINEST_FRACTION:.1%} of N); its {self.releases} released scores spend "
                f"{self.share:.1%} of mu(eps={self.eps:g}, delta={self.delta:g})^2 (at most {PLANNED_SHARE:.0%}); {verdict}")


def plan_selection_noise(n_public: int | None, eps: float, delta: float, releases: int) -> SelectionPlan:
    """The selection noise from public quantities only: N (the public size of the training set), the
    smallest target ε, δ and the number of scores the search releases. The released scores spend at
    most PLANNED_SHARE of μ(ε)² (σ_s ≥ √(releases / share) / μ(ε)), and no finer resolution than
    FINEST_FRACTION of N is bought (σ_s ≥ FINEST_FRACTION·N). Data-independent: it costs nothing.
    Without N (a check before the data is read) the noise is the budgeted one: the plan's most costly."""
    if n_public is not None and not (isinstance(n_public, (int, np.integer)) and n_public >= 1):
        raise ConfigError(f"the public training-set size must be a positive integer, got {n_public!r}")
    if releases < 1:
        raise ValueError(f"releases must be >= 1, got {releases}")
    budgeted = (releases / PLANNED_SHARE) ** 0.5 / BudgetPlanner(delta).mu_for_eps(eps)
    if n_public is None:
        return SelectionPlan(budgeted, None, float(eps), float(delta), int(releases))
    return SelectionPlan(max(FINEST_FRACTION * int(n_public), budgeted), int(n_public), float(eps), float(delta), int(releases))
