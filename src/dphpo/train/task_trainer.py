"""The trainer protocol (`dphpo.train.protocol.PrivateTrainer`) for trainers of a task (`dphpo.tasks`):
what `FinetuneTrainer` (dphpo.train.finetune) and `DPZOTrainer` (dphpo.train.dpzo) share. Trials run
one after another, each from the task's pretrained starting point; a released model is what training
changed. The trainer puts its task on `training.device` once (`auto`: the GPU when there is one;
dphpo.tasks.device): every trial's model, batches, per-example norms and noise are then there."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from dphpo.device import choose_device, describe_device
from dphpo.io import atomic_open
from dphpo.train.protocol import TrialOutcome


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
            task.to(choose_device(settings.device))
        # the device used (`auto` resolved); a task that cannot move (a test double) trains where it is: the CPU
        self.device = getattr(task, "device", torch.device("cpu"))

    def provenance(self) -> dict:
        return {
            "trainer": self.kind,
            "compute_device": describe_device(self.device),
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
            settings=self.settings,
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
