"""The trainer protocol (`dphpo.train.protocol.PrivateTrainer`) for trainers of a task (`dphpo.tasks`):
what `FinetuneTrainer` (dphpo.train.finetune) and `DPZOTrainer` (dphpo.train.dpzo) share. Trials run
one after another, each from the task's pretrained starting point; a released model is what training
changed. The trainer puts its task on `training.device` once (`auto`: the GPU when there is one;
dphpo.tasks.device): every trial's model, batches, per-example norms and noise are then there.

`training.precision` (both trainers): `float32` (default), `bfloat16` (the forward pass of the per-example
losses under bf16 autocast on the parameters' device; `training_dtype`) or `auto` (bf16 on a CUDA device
that supports it, else fp32). Only the forward pass is reduced: the losses are cast to fp32 before
anything multiplies or clips them, and what the sensitivity argument rests on (norms, clipping factors,
clipped sums, noise) stays fp32 (docs/privacy.md, Precision).

`training.physical_batch` (both trainers): an int, or `auto`, resolved once when the trainer has put its
task on the device: the largest chunk of a Poisson batch that the device's memory holds for this model
(dphpo.train.memory). Provenance records the configured value in `settings` and the one used,
`compute_physical_batch`, beside the estimate it came from (`physical_batch_estimate`)."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
from torch import nn

from dphpo.device import choose_device, describe_device
from dphpo.errors import ConfigError
from dphpo.io import atomic_open
from dphpo.train.memory import data_device, public_data_bytes, resolve_physical_batch
from dphpo.train.protocol import TrialOutcome

PRECISIONS = ("float32", "bfloat16", "auto")


def check_precision(precision: str, where: str) -> str:
    """`precision` if it is one of PRECISIONS; a ConfigError at `where` otherwise."""
    if precision not in PRECISIONS:
        raise ConfigError(f"{where}: expected one of {PRECISIONS}, got {precision!r}")
    return precision


def training_dtype(precision: str, device: torch.device, *, bf16_allowed: bool = True) -> torch.dtype:
    """The dtype of the forward pass on `device`: fp32, or bf16 for `bfloat16` and for `auto` on a CUDA
    device with bf16 (`bf16_allowed=False`: `auto` is always fp32, for an engine that cannot run bf16)."""
    if precision == "float32":
        return torch.float32
    cuda = device.type == "cuda"
    if precision == "auto":
        return torch.bfloat16 if bf16_allowed and cuda and torch.cuda.is_bf16_supported() else torch.float32
    if cuda and not torch.cuda.is_bf16_supported():  # autocast would silently run fp32 while we report bf16
        name = torch.cuda.get_device_name(device)
        raise ConfigError(f"language.studies[].training.precision: bfloat16, but {name} has no bf16")
    return torch.bfloat16


def dtype_name(dtype: torch.dtype) -> str:
    """A dtype as the configs and provenance write it: "float32", "bfloat16"."""
    return str(dtype).removeprefix("torch.")


def run_trace(steps: int, sample_rate: float, batches: list[int], clipped: list, dtype: torch.dtype) -> dict:
    """A language run's trace (internal logs only: its mean batch size is a private statistic): the steps,
    q, the mean Poisson batch, the fraction of clipped examples over the run (`clipped`: each chunk's count
    of clipped examples; None when no step recorded one) and the forward passes' precision."""
    return {
        "steps": int(steps),
        "sample_rate": sample_rate,
        "mean_batch": float(np.mean(batches)),
        "clipped_fraction": sum(float(c) for c in clipped) / max(1, sum(batches)) if clipped else None,
        "precision": dtype_name(dtype),
    }


def forward_losses(example_losses, dtype: torch.dtype, device: torch.device):
    """`example_losses(module, idx)` with its forward pass in `dtype`: itself in fp32; under bf16 autocast
    on `device`, the losses cast to fp32. Each call opens its own autocast region: autocast caches its bf16
    copies of the weights until the region closes, so weights changed between calls (DP-ZO's θ ± λz, an
    optimizer step) are cast afresh."""
    if dtype == torch.float32:
        return example_losses

    def losses(module, idx):
        with torch.autocast(device.type, dtype=dtype):
            out = example_losses(module, idx)
        return out.float()

    return losses


def trainable_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The released parameters: what training changed (frozen pretrained weights are public)."""
    return {k: p.detach().cpu().clone() for k, p in model.named_parameters() if p.requires_grad}


class TaskTrainer:
    """What FinetuneTrainer and DPZOTrainer share: a task, an accountant, evaluation and model release."""

    kind = "task"
    # the no-signal prior (r ∝ μN/√params) is derived for full-batch runs; minibatch fine-tuning has none
    n_parameters = None

    def __init__(self, task, accountant, settings, n_public: int):
        self.task = task
        self.accountant = accountant
        self.settings = settings
        self.metric = task.metric
        self.n_train = task.n_train
        self.n_test = task.n_test
        self.n_public = int(n_public)
        if hasattr(task, "to"):  # the tasks of dphpo.tasks: model and data moved once, here
            device = choose_device(settings.device)
            task.to(device, data_device(device, public_data_bytes(task, self.n_public)))
        # the device used (`auto` resolved); a task that cannot move (a test double) trains where it is: the CPU
        self.device = getattr(task, "device", torch.device("cpu"))
        # the physical batch used (`auto` resolved here, once, from the device's memory and the model's size)
        self.memory_estimate = None
        if settings.physical_batch == "auto":
            resolved = resolve_physical_batch(task, settings, self.device, self.n_public)
            self.physical_batch, self.memory_estimate = resolved
        else:
            self.physical_batch = int(settings.physical_batch)
        self.run_settings = dataclasses.replace(settings, physical_batch=self.physical_batch)

    def provenance(self) -> dict:
        return {
            "trainer": self.kind,
            "compute_device": describe_device(self.device),
            # the precision used (`auto` resolved), beside the configured one in settings
            "compute_precision": dtype_name(self.settings.compute_dtype(self.device)),
            # the physical batch used (`auto` resolved), beside the configured one in settings
            "compute_physical_batch": self.physical_batch,
            **({"physical_batch_estimate": self.memory_estimate.describe()} if self.memory_estimate else {}),
            # where the data tensors live, only where that is not the compute device (too large for the card)
            **({"data_device": str(self.task.data_device)} if getattr(self.task, "data_device", self.device) != self.device else {}),
            "settings": self.settings.describe(),
            "accountant": self.accountant.describe(),
            "task": self.task.provenance(),
        }

    # train_fn(model, example_losses, n_train, *, n_public, lr, steps, sigma, seed, settings, progress, desc)
    # -> (trained model, run info): the private training loop of the subclass
    train_fn = None

    def train_one(self, lr: float, steps: int, sigma: float, seed: int, progress: bool, desc: str):
        return type(self).train_fn(
            self.task.build_model(),
            self.task.example_losses,
            self.task.n_train,
            n_public=self.n_public,
            lr=lr,
            steps=steps,
            sigma=sigma,
            seed=seed,
            settings=self.run_settings,
            progress=progress,
            desc=desc,
        )

    def null_scores(self) -> tuple[float, float, float]:
        """The task's null model where it names one (a classifier: the majority label), else the untrained
        model: for a pretrained language model, what it scores before it reads any private text."""
        if hasattr(self.task, "null_scores"):
            return self.task.null_scores()
        model = self.task.build_model().eval()
        train, test = self.task.evaluate(model, "train"), self.task.evaluate(model, "test")
        return float(train["score_sum"]), float(test["score_sum"]), float(test["metric"])

    def run_trials(self, eta, steps, sigma, seeds, *, progress: bool = True, desc: str = "trials"):
        if not len(eta) == len(steps) == len(sigma) == len(seeds):
            raise ValueError("eta, steps, sigma and seeds must have the same length")
        models, tr_sum, tr_metric, te_metric, te_sum, te_extra = [], [], [], [], [], []
        for h, (lr, t, s, seed) in enumerate(zip(eta, steps, sigma, seeds)):
            model, _ = self.train_one(float(lr), int(t), float(s), int(seed), progress, f"{desc} {h + 1}/{len(eta)}")
            train_eval = self.task.evaluate(model, "train")
            test_eval = self.task.evaluate(model, "test")
            models.append(trainable_state(model))
            tr_sum.append(train_eval["score_sum"])
            tr_metric.append(train_eval["metric"])
            te_sum.append(test_eval["score_sum"])
            te_metric.append(test_eval["metric"])
            te_extra.append({k: float(v) for k, v in test_eval.items() if k not in ("score_sum", "metric")})
            del model  # freed before the next trial builds its own: two trials never hold the device at once
        return TrialOutcome(
            models=models,
            train_score_sums=np.asarray(tr_sum, float),
            train_metric=np.asarray(tr_metric, float),
            test_metric=np.asarray(te_metric, float),
            test_score_sums=np.asarray(te_sum, float),
            test_extra=te_extra if any(te_extra) else None,
        )

    def save_model(self, outcome, index: int, path) -> None:
        with atomic_open(path) as fh:
            torch.save(outcome.models[index], fh)
