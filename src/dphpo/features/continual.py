"""DP continual pre-training (Bu et al.): after the public stage, pre-training goes on privately.

Seed 003 (Bu et al., "Pre-training differentially private models with limited public data")
trains non-privately on a little public data, switches at a point chosen from public statistics
only, re-initialises the classification head and the optimizer's first-order momentum (App. B.3,
"R1"), and continues pre-training with DP-SGD on private data. Here the public stage is
`dphpo.features.pretrain` (its `switch: early_stopping` ends it when the public validation loss
stops improving, §4.3) and this module is the private stage:

- DP-SGD (`dphpo.train.dpsgd.train_dpsgd`): Poisson batches of rate q = B/N, per-sample clipping to
  C on the whole parameter vector, N(0, σ²C²) on the sum, divided by qN, momentum SGD started from
  a zero buffer; T = ⌈epochs / q⌉ steps. The network needs GroupNorm (`norm: group`): BatchNorm
  mixes examples and has no per-sample gradient.
- Accounting: the T steps are T compositions of the Poisson-subsampled Gaussian; σ is the smallest
  noise multiplier whose prv-accountant upper bound is ≤ ε at δ (`dphpo.privacy.accountant.PrvAccountant`), and
  the stage's ledger (its PRV total, the RDP bound beside it) is stored in the checkpoint.
- Inputs are normalized with the public stage's statistics, so nothing data-dependent about the
  private data is released outside the accounted steps.

The privacy unit is the private stage's dataset (its training split). A downstream study on *other*
data reports its own (ε, δ) and carries this guarantee, with the stage's ledger entries, in its
provenance (`upstream_privacy`); a bundle (`dphpo.release`) composes the stage once into the statement
of the stage's dataset. A study whose private data is the stage's own dataset is refused by the config
check, since its per-release (ε, δ) would not include the stage.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from dphpo.data import DATASETS, load_dataset
from dphpo.data.registry import public_train_size
from dphpo.device import choose_device
from dphpo.errors import ConfigError, DPHPOError, InfeasibleBudgetError, dataclass_from_section
from dphpo.features.overlap import SHARED_SOURCE
from dphpo.features.tensors import evaluate, images_to_tensor
from dphpo.privacy.accountant import make_accountant
from dphpo.privacy.ledger import Ledger
from dphpo.train.dpsgd import train_dpsgd

if TYPE_CHECKING:
    from dphpo.privacy.randomness import NoiseScope

log = logging.getLogger(__name__)


@dataclass
class PrivateStageConfig:
    """`pretraining.<name>.private_stage` (defaults as in workflow/schemas/config.schema.yaml)."""

    dataset: str
    eps: float
    delta: float = 1e-5
    epochs: float = 1.0
    batch_size: int = 256
    lr: float = 0.5
    momentum: float = 0.9
    clip_norm: float = 1.0
    max_train: int | None = None
    subset_seed: int = 0
    seed: int = 0
    eps_error: float = 0.01  # prv-accountant's error bound on ε; the reported ε is its upper bound

    @classmethod
    def from_config(cls, section: Mapping[str, Any], where: str) -> PrivateStageConfig:
        cfg = dataclass_from_section(cls, section, where, required=("dataset", "eps"))
        cfg.check(where)
        return cfg

    def check(self, where: str) -> None:
        if self.dataset not in DATASETS:
            raise ConfigError(f"{where}.dataset: unknown dataset {self.dataset!r}; known: {', '.join(sorted(DATASETS))}")
        if DATASETS[self.dataset].modality != "image":
            raise ConfigError(f"{where}.dataset: {self.dataset!r} is not an image dataset")
        if not (self.eps > self.eps_error and math.isfinite(self.eps)):
            raise ConfigError(f"{where}.eps must be a finite number above eps_error={self.eps_error}, got {self.eps}")
        if not 0.0 < self.delta < 1.0:
            raise ConfigError(f"{where}.delta must lie in (0, 1), got {self.delta}")
        for key in ("epochs", "lr", "clip_norm"):
            if not getattr(self, key) > 0:
                raise ConfigError(f"{where}.{key} must be > 0, got {getattr(self, key)}")
        if int(self.batch_size) < 1:
            raise ConfigError(f"{where}.batch_size must be >= 1, got {self.batch_size}")

    def plan(self, n_public: int) -> dict[str, Any]:
        """Sampling rate q = B/N and steps T = ⌈epochs/q⌉ for a private training set of declared public
        size N (`dphpo.data.registry.public_train_size`: never the private count)."""
        q = min(1.0, self.batch_size / n_public)
        return {"n_public": int(n_public), "sample_rate": q, "steps": max(1, math.ceil(self.epochs / q))}


def check_private_stage(section: Mapping[str, Any], public_dataset: str, norm: str, where: str) -> PrivateStageConfig:
    """The private stage of `pretraining.<name>`, checked against its public stage."""
    cfg = PrivateStageConfig.from_config(section, f"{where}.private_stage")
    if cfg.dataset == public_dataset:
        raise ConfigError(
            f"{where}.private_stage.dataset: {cfg.dataset!r} is also the public dataset; the private stage "
            "needs data disjoint from the public stage's"
        )
    if norm != "group":
        raise ConfigError(
            f"{where}.norm: a private stage needs per-sample gradients, which BatchNorm does not have; set norm: group"
        )
    return cfg


def check_study_overlap(config: Mapping[str, Any]) -> None:
    """Refuse a study whose private dataset is also the private pre-training data of its extractor; warn
    where the two share a source (EMNIST and MNIST): a person in both is covered by two statements."""
    sections = config.get("pretraining") or {}
    for i, study in enumerate(config.get("studies") or []):
        spec = (config.get("extractors") or {}).get(study["extractor"]) or {}
        if spec.get("kind") != "pretrained_public":
            continue
        stage = (sections.get(spec.get("pretrain")) or {}).get("private_stage")
        if stage and (study["dataset"], stage.get("dataset")) in SHARED_SOURCE:
            warnings.warn(
                f"studies[{i}] ({study['dataset']}, {study['extractor']}): {SHARED_SOURCE[study['dataset'], stage['dataset']]}, "
                f"and pretraining.{spec['pretrain']}.private_stage trained on {stage['dataset']!r} with DP: a person in "
                "both is covered by two (ε, δ) statements, the stage's and the study's, which add up for them "
                "(the bundle states each dataset's; docs/privacy.md)",
                stacklevel=2,
            )
        if stage and stage.get("dataset") == study["dataset"]:
            raise ConfigError(
                f"studies[{i}]: dataset {study['dataset']!r} with extractor {study['extractor']!r}, whose "
                f"pretraining.{spec['pretrain']}.private_stage already trained on {study['dataset']!r}: "
                "the downstream (eps, delta) would not include the pre-training's cost (composition is not "
                "implemented); study another dataset or pre-train privately on another one"
            )


def continue_privately(model, cfg: PrivateStageConfig, input_spec: dict, noise: NoiseScope, *, data_dir: str | Path = "data",
                       download: bool = True, device: str | torch.device = "cpu",
                       progress: bool = True) -> tuple[Any, dict[str, Any]]:
    """The private stage: DP-SGD on `cfg.dataset`'s training split from the public weights.

    `model` is the public stage's FeatureNet (GroupNorm); its head is replaced by a freshly initialised
    (seeded) head for the private classes. `input_spec` is the public stage's input convention
    (resolution, mean, std). Poisson batches and noise come from `noise` (the secret key,
    `dphpo.privacy.randomness`), drawn on the CPU whatever the device; the head's initialisation from the
    public `cfg.seed`. Model, images and labels are put on `device` once. Returns (model, record) where
    record holds the plan, σ, the device, the ledger and the guarantee (no private count or checksum).
    """
    t0 = time.perf_counter()
    data = load_dataset(cfg.dataset, data_dir, max_train=cfg.max_train, subset_seed=cfg.subset_seed, download=download)
    noise = noise.over_data([data.checksum])  # another version of the private data: other noise
    plan = cfg.plan(public_train_size(cfg.dataset, cfg.max_train))
    q, steps = plan["sample_rate"], plan["steps"]
    accountant = make_accountant("prv", cfg.delta, sample_rate=q, eps_error=cfg.eps_error)
    try:
        sigma = accountant.sigma_for_eps(cfg.eps, steps)
    except (ValueError, DPHPOError) as err:
        raise InfeasibleBudgetError(f"private stage on {cfg.dataset}: {err}") from None
    log.info("private stage on %s: N=%d, q=%.4g, T=%d steps, sigma=%.4f for (eps=%g, delta=%g)", cfg.dataset,
             data.n_train, q, steps, sigma, cfg.eps, cfg.delta)

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        model.head = torch.nn.Linear(model.feature_dim, data.num_classes)
    device = choose_device(device)
    model = model.to(device, memory_format=torch.contiguous_format).float()
    for m in model.modules():  # opacus' backward hooks forbid in-place ops on the layers' outputs
        if isinstance(m, torch.nn.ReLU):
            m.inplace = False
    # the uint8 training images on the device once (as the public stage on a GPU); a step moves its indices only
    images = np.ascontiguousarray(data.train_inputs)
    images = torch.from_numpy(images if images.flags.writeable else images.copy()).to(device)
    labels = torch.as_tensor(np.asarray(data.train_labels), dtype=torch.long)

    def batch_inputs(idx: torch.Tensor) -> torch.Tensor:
        return images_to_tensor(images[idx.to(device)], resolution=input_spec["resolution"], mean=input_spec["mean"],
                                std=input_spec["std"], device=device).contiguous()

    model, trace = train_dpsgd(
        model, batch_inputs, labels, sample_rate=q, steps=steps, sigma=sigma, clip_norm=cfg.clip_norm,
        n_public=plan["n_public"], lr=cfg.lr, momentum=cfg.momentum, seed=noise.seed("private_stage"), progress=progress,
        desc=f"DP continual pre-training on {cfg.dataset}",
    )
    ledger = Ledger([accountant.entry(f"DP continual pre-training on {cfg.dataset}", sigma, steps)])
    total = ledger.total(cfg.delta)
    if total["eps"] > cfg.eps:
        raise AssertionError(f"private stage spent eps={total['eps']} > its budget {cfg.eps}")
    test_acc, _ = evaluate(model, data.test_inputs, data.test_labels, resolution=input_spec["resolution"],
                           mean=input_spec["mean"], std=input_spec["std"], device=device)
    record = {
        "dataset": {"name": data.name, "checksum_mac": noise.mac(data.checksum), "source": data.source,
                    "license": data.license, "num_classes": int(data.num_classes)},
        "config": dataclasses.asdict(cfg),
        "plan": plan | {"sigma": sigma, "expected_batch": q * plan["n_public"]},
        "device": str(device),
        "randomness": noise.describe(),
        "trace": {"steps": trace["steps"]},  # its mean Poisson batch is a private statistic (log only)
        "privacy": ledger.to_dict(cfg.delta),
        "guarantee": {"eps": total["eps"], "delta": cfg.delta, "accountant": total["accountant"],
                      "adjacency": "add_remove", "unit": f"one record of {data.name} (train split)"},
        "test_accuracy": test_acc,
        "test_accuracy_note": "the private dataset's test split, evaluated once after training (not used for any choice)",
    }
    # its time grows with the private data's size and Poisson batches: the job log's, not the released summary's
    log.info("private stage: eps=%.4f (delta=%g), %s test accuracy %.4f, %.1f s", total["eps"], cfg.delta, data.name,
             test_acc, time.perf_counter() - t0)
    return model, record
