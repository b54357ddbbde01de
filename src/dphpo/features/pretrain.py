"""Public pretraining: train a feature extractor non-privately on public data, save a checkpoint.

docs/methods.md §5 and Panda et al.: when there is no (real) public data, the paper linear-probes a
WideResNet-16-4 pretrained on synthetic images that do not resemble real images (App. A, "CIFAR
from scratch"); in the Koskela & Kulkarni setting (Table 2) it linear-probes a ResNet-20 pretrained
on CIFAR-100. Both are `pretraining.<name>` config sections here; an extractor of kind
`pretrained_public` with `pretrain: <name>` then caches features of the private dataset.

The checkpoint (`results/pretrained/{name}.pt`, written atomically; load with
`torch.load(..., weights_only=True)`) holds the state dict, the architecture and its options, the
feature dimension, the input convention (resolution and per-channel normalization, computed on the
public training images), the public dataset's name and content checksum, the training config and
its hash, the final public train/test accuracy, per-epoch history, timing and package versions.

Training is plain supervised cross-entropy: SGD (Nesterov momentum) or AdamW, linear warm-up then
cosine decay per step, optional random-crop (zero padding of 1/8 of the side) + horizontal flip.
Deterministic given `seed` on the CPU (same thread count); on CUDA it uses channels_last and bf16
autocast.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from dphpo.data import DATASETS, load_dataset
from dphpo.data.synthetic import DEFAULT_N_TEST, DEFAULT_N_TRAIN, load_synthetic_shapes
from dphpo.device import choose_device
from dphpo.errors import ConfigError, dataclass_from_section
from dphpo.features.checkpoint import CHECKPOINT_FORMAT, save_checkpoint
from dphpo.features.continual import PrivateStageConfig, check_private_stage, check_study_overlap, continue_privately
from dphpo.features.networks import ARCH_OPTIONS, ARCHS, NORMS, FeatureNet, build_network
from dphpo.features.overlap import check_study_extractors
from dphpo.features.tensors import EVAL_BATCH, _autocast, evaluate, images_to_tensor, state_dict_sha256
from dphpo.provenance import config_hash, package_versions

log = logging.getLogger(__name__)

OPTIMIZERS = ("sgd", "adamw")
SWITCHES = ("fixed", "early_stopping")
MAX_EVAL_TRAIN = 10_000  # public train accuracy is measured on (at most) the first images
NORM_STATS_IMAGES = 10_000


@dataclass
class PretrainConfig:
    """One `pretraining.<name>` section (defaults as in workflow/schemas/config.schema.yaml)."""

    arch: str
    public_dataset: str
    epochs: int = 10
    batch_size: int = 128
    optimizer: str = "sgd"
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 5e-4
    warmup_epochs: float = 0.0
    label_smoothing: float = 0.0
    augment: bool = True
    seed: int = 0
    resolution: int = 32
    max_train: int | None = None
    max_test: int | None = None
    data_seed: int = 0
    width: int | None = None
    norm: str = "batch"
    device: str = "auto"
    # Bu et al. §4.3: "fixed" trains all epochs; "early_stopping" ends the public stage once the loss on
    # the public test split has not improved for `patience` epochs and keeps the best epoch's weights
    switch: str = "fixed"
    patience: int = 1
    private_stage: dict | None = None  # DP continual pre-training (dphpo.features.continual)

    @classmethod
    def from_config(cls, section: Mapping[str, Any], name: str = "?") -> PretrainConfig:
        cfg = dataclass_from_section(cls, section, f"pretraining.{name}", required=("arch", "public_dataset"))
        cfg.check(name)
        return cfg

    def check(self, name: str = "?") -> None:
        where = f"pretraining.{name}"
        if self.arch not in ARCHS:
            raise ConfigError(f"{where}.arch: unknown architecture {self.arch!r}; known: {', '.join(ARCHS)}")
        if self.public_dataset not in DATASETS:
            raise ConfigError(f"{where}.public_dataset: unknown dataset {self.public_dataset!r}; "
                              f"known: {', '.join(sorted(DATASETS))}")
        if DATASETS[self.public_dataset].modality != "image":
            raise ConfigError(f"{where}.public_dataset: {self.public_dataset!r} is not an image dataset")
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(f"{where}.optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        if self.norm not in NORMS:
            raise ConfigError(f"{where}.norm must be one of {NORMS}, got {self.norm!r}")
        if self.width is not None and "width" not in ARCH_OPTIONS[self.arch]:
            raise ConfigError(f"{where}.width applies to small_cnn only, not {self.arch!r}")
        for key in ("epochs", "batch_size", "resolution"):
            if int(getattr(self, key)) < 1:
                raise ConfigError(f"{where}.{key} must be ≥ 1")
        if int(self.resolution) < getattr(ARCHS[self.arch], "MIN_RESOLUTION", 1):  # a class, or a lambda of one
            raise ConfigError(f"{where}.resolution: {self.arch} needs images of at least {ARCHS[self.arch].MIN_RESOLUTION} "
                              f"pixels a side, got {self.resolution}")
        if not self.lr > 0:
            raise ConfigError(f"{where}.lr must be > 0")
        if self.switch not in SWITCHES:
            raise ConfigError(f"{where}.switch must be one of {SWITCHES}, got {self.switch!r}")
        if int(self.patience) < 1:
            raise ConfigError(f"{where}.patience must be >= 1")
        if self.private_stage is not None:
            check_private_stage(self.private_stage, self.public_dataset, self.norm, where)

    def arch_options(self) -> dict[str, Any]:
        opts: dict[str, Any] = {"norm": self.norm}
        if self.width is not None:
            opts["width"] = int(self.width)
        return opts


def check_pretraining_config(config: Mapping[str, Any]) -> None:
    """Cross-checks the schema cannot express: every `pretrained_public` extractor names a section,
    and no study trains privately on its extractor's pretraining data (public or private stage)."""
    sections = config.get("pretraining", {}) or {}
    for name, section in sections.items():
        PretrainConfig.from_config(section, name)
    for name, spec in (config.get("extractors", {}) or {}).items():
        if spec.get("kind") != "pretrained_public":
            continue
        pre = spec.get("pretrain")
        if not pre:
            raise ConfigError(f"extractors.{name}.pretrain: kind 'pretrained_public' needs the name of a "
                              "`pretraining` section")
        if pre not in sections and not spec.get("checkpoint"):
            raise ConfigError(f"extractors.{name}.pretrain: {pre!r} is not defined under `pretraining` "
                              f"(defined: {', '.join(sorted(sections)) or 'none'})")
    check_study_extractors(config)  # public pretraining data (by name; STL-10/ImageNet warns)
    check_study_overlap(config)


# --------------------------------------------------------------------------------------------
# data


def load_public_dataset(cfg: PretrainConfig, data_dir: str | Path = "data", download: bool = True):
    """The public training data. `synthetic_shapes` is generated at `cfg.resolution` (any size:
    `max_train`, `max_test` images, seed `data_seed`); other datasets come from the registry, as a
    per-record subset when `max_train` / `max_test` are set."""
    if cfg.public_dataset == "synthetic_shapes":
        return load_synthetic_shapes(
            n_train=cfg.max_train or DEFAULT_N_TRAIN, n_test=cfg.max_test or DEFAULT_N_TEST,
            resolution=cfg.resolution, seed=cfg.data_seed,
        )
    return load_dataset(cfg.public_dataset, data_dir, max_train=cfg.max_train, max_test=cfg.max_test,
                        subset_seed=cfg.data_seed, download=download)


def channel_stats(images: np.ndarray, resolution: int, n_max: int = NORM_STATS_IMAGES) -> tuple[list[float], list[float]]:
    """Per-channel mean/std of (at most the first n_max) images, as the networks will see them."""
    total = torch.zeros(3, dtype=torch.float64)
    total_sq = torch.zeros(3, dtype=torch.float64)
    count = 0
    for start in range(0, min(n_max, len(images)), EVAL_BATCH):
        x = images_to_tensor(images[start:min(start + EVAL_BATCH, n_max)], resolution=resolution,
                             mean=(0.0,) * 3, std=(1.0,) * 3).double()
        total += x.sum(dim=(0, 2, 3))
        total_sq += (x * x).sum(dim=(0, 2, 3))
        count += x.shape[0] * x.shape[2] * x.shape[3]
    mean = total / max(1, count)
    std = (total_sq / max(1, count) - mean * mean).clamp_min(1e-6).sqrt()
    return [round(float(v), 6) for v in mean], [round(float(v), 6) for v in std]


def augment_batch(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Random crop (zero padding of side/8, i.e. 4 px at 32 px) and horizontal flip, per image."""
    b, c, h, w = x.shape
    pad = max(1, h // 8)
    padded = F.pad(x, (pad, pad, pad, pad))
    oy = torch.randint(0, 2 * pad + 1, (b,), generator=generator).to(x.device)
    ox = torch.randint(0, 2 * pad + 1, (b,), generator=generator).to(x.device)
    flip = (torch.rand(b, generator=generator) < 0.5).to(x.device)
    rows = oy[:, None] + torch.arange(h, device=x.device)
    cols = torch.arange(w, device=x.device).expand(b, w)
    cols = torch.where(flip[:, None], cols.flip(1), cols) + ox[:, None]
    out = padded.permute(0, 2, 3, 1)[torch.arange(b, device=x.device)[:, None, None], rows[:, :, None], cols[:, None, :]]
    return out.permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)


# --------------------------------------------------------------------------------------------
# training


def _lr_lambda(total_steps: int, warmup_steps: int):
    def f(step: int) -> float:
        if warmup_steps and step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return f


def _make_optimizer(model: torch.nn.Module, cfg: PretrainConfig) -> torch.optim.Optimizer:
    # no weight decay on norm parameters and biases (1-d tensors)
    decay = [p for p in model.parameters() if p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.ndim <= 1]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum, nesterov=cfg.momentum > 0)
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.momentum, 0.999))


def pretrain(cfg: PretrainConfig, dataset, *, device: str | torch.device | None = None,
             progress: bool = True) -> tuple[FeatureNet, dict[str, Any]]:
    """Train `cfg.arch` on `dataset` (a registry `Dataset` of images); returns (model, record)."""
    device = choose_device(device or cfg.device)
    torch.manual_seed(cfg.seed)
    model = build_network(cfg.arch, dataset.num_classes, **cfg.arch_options())
    model = model.to(device=device, memory_format=torch.channels_last)
    mean, std = channel_stats(dataset.train_inputs, cfg.resolution)
    x_train, y_train = dataset.train_inputs, dataset.train_labels
    n = len(y_train)
    if n == 0:
        raise ConfigError(f"public dataset {dataset.name!r} has no training images")
    batch_size = min(int(cfg.batch_size), n)
    steps_per_epoch = n // batch_size  # drop the last partial batch (BatchNorm on tiny batches)
    total_steps = steps_per_epoch * int(cfg.epochs)
    optimizer = _make_optimizer(model, cfg)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, _lr_lambda(total_steps, int(round(cfg.warmup_epochs * steps_per_epoch))))
    gen = torch.Generator().manual_seed(cfg.seed)
    # on a GPU the whole uint8 training set lives on the device (1.5 GB for 500k 32x32 images)
    x_source = torch.from_numpy(np.ascontiguousarray(x_train)).to(device) if device.type == "cuda" else x_train
    history = []
    best = {"epoch": 0, "val_loss": math.inf, "state": None}
    start_time = time.perf_counter()
    bar = tqdm(total=total_steps, desc=f"pretrain {cfg.arch} on {dataset.name}", unit="step",
               disable=not progress, mininterval=2.0)
    for epoch in range(int(cfg.epochs)):
        model.train()
        order = torch.randperm(n, generator=gen).numpy()
        loss_sum, correct, seen = 0.0, 0, 0
        for i in range(steps_per_epoch):
            idx = np.sort(order[i * batch_size:(i + 1) * batch_size])
            batch = x_source[torch.from_numpy(idx).to(device)] if device.type == "cuda" else x_train[idx]
            x = images_to_tensor(batch, resolution=cfg.resolution, mean=mean, std=std, device=device)
            if cfg.augment:
                x = augment_batch(x, gen)
            y = torch.from_numpy(y_train[idx]).to(device)
            with _autocast(device):
                logits = model(x)
                loss = F.cross_entropy(logits.float(), y, label_smoothing=cfg.label_smoothing)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            loss_sum += float(loss.detach()) * len(idx)
            correct += int((logits.argmax(1) == y).sum())
            seen += len(idx)
            bar.update(1)
            bar.set_postfix(epoch=epoch + 1, loss=f"{loss_sum / seen:.3f}", acc=f"{correct / seen:.3f}",
                            refresh=False)
        history.append({"epoch": epoch + 1, "train_loss": loss_sum / max(1, seen),
                        "train_accuracy_running": correct / max(1, seen),
                        "lr_end": optimizer.param_groups[0]["lr"],
                        "elapsed_s": round(time.perf_counter() - start_time, 2)})
        log.info("epoch %d/%d: loss %.4f, running accuracy %.4f", epoch + 1, cfg.epochs,
                 history[-1]["train_loss"], history[-1]["train_accuracy_running"])
        if cfg.switch == "early_stopping":
            _, val_loss = evaluate(model, dataset.test_inputs, dataset.test_labels, resolution=cfg.resolution,
                                   mean=mean, std=std, device=device)
            history[-1]["public_val_loss"] = val_loss
            if val_loss < best["val_loss"]:
                best = {"epoch": epoch + 1, "val_loss": val_loss,
                        "state": {k: v.detach().clone() for k, v in model.state_dict().items()}}
            elif epoch + 1 - best["epoch"] >= int(cfg.patience):
                log.info("switch: public validation loss has not improved for %d epoch(s); keeping epoch %d",
                         cfg.patience, best["epoch"])
                break
    bar.close()
    if best["state"] is not None:
        model.load_state_dict(best["state"])
    train_time = time.perf_counter() - start_time
    n_eval = min(n, MAX_EVAL_TRAIN)
    train_acc, train_loss = evaluate(model, x_train[:n_eval], y_train[:n_eval], resolution=cfg.resolution,
                                     mean=mean, std=std, device=device)
    test_acc, test_loss = evaluate(model, dataset.test_inputs, dataset.test_labels, resolution=cfg.resolution,
                                   mean=mean, std=std, device=device)
    log.info("public train accuracy %.4f (first %d images), test accuracy %.4f, %.1f s", train_acc, n_eval,
             test_acc, train_time)
    record = {
        "input": {"resolution": int(cfg.resolution), "mean": mean, "std": std, "interpolation": "bilinear",
                  "channels": "RGB; grey images replicated to 3 channels", "scale": "x/255"},
        "metrics": {
            "train_accuracy": train_acc, "train_loss": train_loss, "train_accuracy_images": n_eval,
            "test_accuracy": test_acc, "test_loss": test_loss, "chance_accuracy": 1.0 / dataset.num_classes,
            "history": history,
        },
        "time_s": {"train": round(train_time, 2), "total": round(time.perf_counter() - start_time, 2)},
        "device": str(device),
        "torch_threads": torch.get_num_threads(),
        "steps": total_steps,
        "switch": {"rule": cfg.switch, "epoch": best["epoch"] if cfg.switch == "early_stopping" else len(history),
                   "epochs_run": len(history), "max_epochs": int(cfg.epochs),
                   "statistic": "public test-split loss (no privacy cost)" if cfg.switch == "early_stopping" else None},
    }
    return model, record


def make_checkpoint(name: str, cfg: PretrainConfig, dataset, model: FeatureNet, record: dict[str, Any],
                    private_stage: dict[str, Any] | None = None) -> dict:
    """The checkpoint dict (tensors, numbers, strings, lists only: loads with weights_only=True).

    With a private stage the network's head is the private dataset's, and `private_stage` holds its
    record (`dphpo.features.continual.continue_privately`): plan, σ, ledger and (ε, δ) guarantee.
    """
    state = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
    training = dataclasses.asdict(cfg)
    num_classes = private_stage["dataset"]["num_classes"] if private_stage else dataset.num_classes
    return {
        "format": CHECKPOINT_FORMAT,
        "name": name,
        "arch": cfg.arch,
        "arch_options": cfg.arch_options(),
        "num_classes": int(num_classes),
        "feature_dim": int(model.feature_dim),
        "state_dict": state,
        "weights_sha256": state_dict_sha256(state),
        "input": record["input"],
        "public_dataset": {
            "name": dataset.name, "checksum": dataset.checksum, "source": dataset.source,
            "license": dataset.license, "n_train": int(dataset.n_train), "n_test": int(dataset.n_test),
            "num_classes": int(dataset.num_classes),
        },
        "training": training,
        "training_config_hash": config_hash(training),
        "metrics": record["metrics"],
        "time_s": record["time_s"],
        "device": record["device"],
        "torch_threads": record["torch_threads"],
        "steps": record["steps"],
        "switch": record["switch"],
        "private_stage": private_stage,
        "package_versions": package_versions(),
    }


def run_pretraining(name: str, section: Mapping[str, Any], out_path: str | Path, *, data_dir: str | Path = "data",
                    download: bool = True, summary_path: str | Path | None = None,
                    device: str | torch.device | None = None, progress: bool = True, noise=None) -> dict:
    """Everything the `pretrain_public` rule does: load public data, train, save; returns the summary.
    `noise` (a `dphpo.privacy.randomness.NoiseScope`) is required when the section has a private stage."""
    cfg = PretrainConfig.from_config(section, name)
    t0 = time.perf_counter()
    dataset = load_public_dataset(cfg, data_dir, download)
    data_time = time.perf_counter() - t0
    log.info("public dataset %s: %d train / %d test images, %d classes, checksum %s (%.1f s)", dataset.name,
             dataset.n_train, dataset.n_test, dataset.num_classes, dataset.checksum[:12], data_time)
    model, record = pretrain(cfg, dataset, device=device, progress=progress)
    record["time_s"]["data"] = round(data_time, 2)
    private = None
    if cfg.private_stage is not None:
        stage = PrivateStageConfig.from_config(cfg.private_stage, f"pretraining.{name}.private_stage")
        if noise is None:
            raise ConfigError(f"pretraining.{name}.private_stage: needs the secret noise key (a NoiseScope)")
        model, private = continue_privately(model, stage, record["input"], noise, data_dir=data_dir, download=download,
                                            device=device or cfg.device, progress=progress)
    ckpt = make_checkpoint(name, cfg, dataset, model, record, private)
    digest = save_checkpoint(ckpt, out_path, summary_path)
    log.info("wrote %s (sha256 %s)", out_path, digest)
    summary = {k: v for k, v in ckpt.items() if k != "state_dict"}
    summary["checkpoint_sha256"] = digest
    return summary
