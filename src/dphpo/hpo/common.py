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

from dphpo.errors import ConfigError
from dphpo.io import atomic_path, write_json
from dphpo.privacy.calibrate import smallest_sigma
from dphpo.privacy.ledger import Ledger, LedgerEntry
from dphpo.train.dpgd import TrialBatch, accuracy_counts, resolve_device, train_linear_dpgd, with_bias_column


ACCOUNTANTS = ("gdp", "rdp")
# Orders of the RDP curve of a full-batch Gaussian run (ablation "rdp"): λ − 1 from 1e-2 to 1e4.
RUN_RDP_ORDERS: np.ndarray = np.unique(np.concatenate([1.0 + np.geomspace(1e-2, 1e4, 240), np.arange(2.0, 65.0)]))
# Integer orders of a Poisson-subsampled run (ablation "minibatch"): 2..128, then 50 up to 8192 — a
# fifth of the cost of the library default; beyond λ = 8192 (standalone ε below ~0.005) the bound
# is looser, never invalid.
MINIBATCH_RDP_ORDERS: np.ndarray = np.unique(np.concatenate([np.arange(2.0, 129.0), np.round(np.geomspace(128, 8192, 50))]))


def rdp_eps_of_gaussian(mu: float, delta: float) -> float:
    """ε (at δ) of a μ-Gaussian mechanism as RDP accounting reads it (looser than exact GDP)."""
    from dphpo.privacy.rdp import gdp_rdp, rdp_to_dp

    return float(rdp_to_dp(RUN_RDP_ORDERS, gdp_rdp(mu, RUN_RDP_ORDERS), delta))


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
    # Ablations of seed 000 Table 15 (the method itself: full batch, exact GDP accounting).
    batch_size: int | None = None  # expected Poisson batch size B (q = B/N); None = full batch
    accountant: str = "gdp"  # "rdp": calibrate and account every run with Rényi DP (looser)

    def __post_init__(self) -> None:
        if self.accountant not in ACCOUNTANTS:
            raise ConfigError(f"privacy.accountant: expected one of {', '.join(ACCOUNTANTS)}, got {self.accountant!r}")
        if self.batch_size is not None and int(self.batch_size) < 1:
            raise ConfigError(f"training.batch_size: must be a positive integer or null, got {self.batch_size}")
        if self.batch_size is not None and self.adjacency != "add_remove":
            raise ConfigError(
                "training.batch_size: Poisson-subsampled runs are accounted for add/remove adjacency only; "
                "set privacy.adjacency: add_remove or training.batch_size: null"
            )

    @classmethod
    def from_config(cls, config: dict) -> "TrainSettings":
        t, p = config.get("training", {}), config.get("privacy", {})
        batch_size = t.get("batch_size")
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
            batch_size=None if batch_size is None else int(batch_size),
            accountant=p.get("accountant", "gdp"),
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

    # -- accounting of one training run --------------------------------------------------------
    # Full batch with the GDP accountant (the method): every run is exactly μ-GDP and the code paths
    # above apply. The two ablations account each run as an RDP curve instead (ledger mechanism
    # "rdp"), so no result of theirs claims an exact GDP guarantee.

    @property
    def exact_gdp(self) -> bool:
        """True when every run is accounted exactly as μ-GDP (full batch, GDP accountant)."""
        return self.accountant == "gdp" and self.batch_size is None

    @property
    def accounting(self) -> str:
        """How a run's cost is computed, as recorded in trials, ledgers and tables."""
        if self.batch_size is not None:
            return f"RDP of the Poisson-subsampled Gaussian (Mironov et al. 2019), batch size {self.batch_size}"
        if self.accountant == "rdp":
            return "RDP of the Gaussian mechanism (lambda mu^2 / 2), converted to (eps, delta) by RDP"
        return "exact GDP (mu = sqrt(T)/sigma)"

    def sample_rate(self, n_train: int) -> float | None:
        """Poisson sampling rate q = B/N of a minibatch run; None for full batch."""
        if self.batch_size is None:
            return None
        return min(1.0, self.batch_size / n_train)

    def run_rdp(self, sigma: float, steps: int, n_train: int) -> tuple[np.ndarray, np.ndarray]:
        """(orders, RDP curve) of one run of `steps` steps at noise multiplier σ."""
        from dphpo.privacy.rdp import gdp_rdp, subsampled_gaussian_rdp

        q = self.sample_rate(n_train)
        if q is not None and q < 1.0:
            return MINIBATCH_RDP_ORDERS, subsampled_gaussian_rdp(q, sigma, int(steps), MINIBATCH_RDP_ORDERS)
        return RUN_RDP_ORDERS, gdp_rdp(self.mu_of(sigma, steps), RUN_RDP_ORDERS)

    def run_entry(self, what: str, sigma: float, steps: int, n_train: int, details: dict | None = None) -> LedgerEntry:
        """The ledger entry of one run: μ-GDP when exact, else its RDP curve."""
        details = dict(details or {})
        if self.exact_gdp:
            return LedgerEntry(what=what, mu=self.mu_of(sigma, steps), details=details)
        orders, values = self.run_rdp(sigma, steps, n_train)
        info = {"accounting": self.accounting, "sample_rate": self.sample_rate(n_train), "batch_size": self.batch_size}
        return LedgerEntry.rdp(what, orders, values, details=details | info)

    def standalone_eps(self, sigma: float, steps: int, n_train: int) -> float:
        """ε (at δ) of one run alone, as its ledger entry accounts it."""
        return float(Ledger([self.run_entry("run", sigma, steps, n_train)]).total(self.delta)["eps"])

    def calibrate_sigma(self, eps: float, steps: int, n_train: int) -> float:
        """Smallest noise multiplier σ whose run alone is (eps, δ)-DP under this accounting."""
        if self.exact_gdp:
            from dphpo.privacy.gdp import mu_from_eps

            return self.sigma_for(mu_from_eps(eps, self.delta), steps)
        return smallest_sigma(lambda sigma: self.standalone_eps(sigma, steps, n_train) <= eps, self.sigma_for(1.0, steps))

    def final_sigma(self, spent: Ledger, total_eps: float, steps: int, n_train: int) -> float:
        """Smallest σ for a last run such that `spent` plus it is (total_eps, δ)-DP (bisection)."""

        def ok(sigma: float) -> bool:
            trial = spent.copy()
            trial.append(self.run_entry("final run", sigma, steps, n_train))
            return trial.total(self.delta)["eps"] <= total_eps

        return smallest_sigma(ok, self.sigma_for(1.0, steps))


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
        sample_rate=settings.sample_rate(features.n_train),
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
