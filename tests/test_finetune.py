"""DP fine-tuning (dphpo.train.finetune): one step equals a hand-computed clipped noisy sum, for
opacus' ghost clipping and per-sample-gradient hooks; the run's accounting is prv-accountant's."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dphpo.train.finetune import FinetuneSettings, FinetuneTrainer, train_dp
from dphpo.train.noise import secret_generator


class TinySeqModel(nn.Module):
    """Linear on a sequence (ghost norms of 3-D inputs), LayerNorm, mean pooling, linear head."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(3, 5)
        self.norm = nn.LayerNorm(5)
        self.head = nn.Linear(5, 2)

    def forward(self, x):
        return self.head(torch.tanh(self.norm(self.proj(x))).mean(1))


class TinyTask:
    metric = "accuracy"

    def __init__(self, n=6, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, 4, 3, generator=g) * 3
        self.y = torch.randint(0, 2, (n,), generator=g)
        torch.manual_seed(seed)
        self.model = TinySeqModel()
        self.n_train = self.n_test = n

    def build_model(self):
        return copy.deepcopy(self.model)

    def example_losses(self, module, idx):
        return F.cross_entropy(module(self.x[idx]), self.y[idx], reduction="none")

    @torch.no_grad()
    def evaluate(self, model, split):
        correct = float((model(self.x).argmax(1) == self.y).sum())
        return {"score_sum": correct, "metric": correct / self.n_train}

    def provenance(self):
        return {"task": "tiny"}


def hand_step(task, lr, sigma, clip, seed):
    """θ − η·(Σᵢ clip_C(gᵢ) + σC·ξ)/N with per-example gradients from autograd, one example at a time."""
    model = task.build_model()
    params = list(model.parameters())
    grads = []
    for i in range(task.n_train):
        loss = F.cross_entropy(model(task.x[i : i + 1]), task.y[i : i + 1], reduction="sum")
        grads.append(torch.autograd.grad(loss, params))
    clipped_sum = [torch.zeros_like(p) for p in params]
    n_clipped = 0
    for g in grads:
        norm = torch.sqrt(sum((t**2).sum() for t in g))
        c = min(1.0, clip / float(norm))
        n_clipped += c < 1.0
        for acc, t in zip(clipped_sum, g):
            acc += c * t
    gen = secret_generator(seed)
    torch.rand(task.n_train, generator=gen, dtype=torch.float64)  # the Poisson draw (q = 1: everyone is in)
    out = []
    with torch.no_grad():
        for p, s in zip(params, clipped_sum):
            noise = torch.randn(p.shape, generator=gen) * sigma * clip
            out.append(p - lr * (s + noise) / task.n_train)
    assert 0 < n_clipped < task.n_train, "the test must clip some examples and not others"
    return out


@pytest.mark.parametrize("clipping", ["ghost", "hooks"])
def test_dp_step_equals_hand_computed_clipped_noisy_sum(clipping):
    task = TinyTask()
    settings = FinetuneSettings(batch_size=task.n_train, clipping=clipping, clip_norm=1.0, optimizer="sgd", momentum=0.9)
    expected = hand_step(task, lr=0.3, sigma=0.7, clip=1.0, seed=11)
    model, trace = train_dp(task.build_model(), task.example_losses, task.n_train, n_public=task.n_train, lr=0.3, steps=1, sigma=0.7, seed=11, settings=settings)
    assert trace["mean_batch"] == task.n_train
    for p, e in zip(model.parameters(), expected):
        torch.testing.assert_close(p.detach(), e, rtol=1e-5, atol=1e-6)
    # the noise matters: another seed gives other weights
    other, _ = train_dp(task.build_model(), task.example_losses, task.n_train, n_public=task.n_train, lr=0.3, steps=1, sigma=0.7, seed=12, settings=settings)
    assert not torch.allclose(next(other.parameters()), expected[0])


def test_ghost_and_hooks_agree_over_several_poisson_steps():
    task = TinyTask(n=20, seed=3)
    runs = []
    for clipping in ("ghost", "hooks"):
        s = FinetuneSettings(batch_size=7, clipping=clipping, clip_norm=0.3, optimizer="adam")
        model, trace = train_dp(task.build_model(), task.example_losses, task.n_train, n_public=task.n_train, lr=0.05, steps=5, sigma=1.0, seed=5, settings=s)
        runs.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
        assert 0 < trace["mean_batch"] < task.n_train
    torch.testing.assert_close(runs[0], runs[1], rtol=1e-4, atol=1e-5)
    assert not torch.allclose(runs[0], torch.cat([p.flatten() for p in task.model.parameters()]))


def test_sigma_zero_is_the_plain_unclipped_gradient():
    task = TinyTask()
    s = FinetuneSettings(batch_size=task.n_train, clip_norm=1e-3, momentum=0.0)
    model, _ = train_dp(task.build_model(), task.example_losses, task.n_train, n_public=task.n_train, lr=0.1, steps=1, sigma=0.0, seed=0, settings=s)
    ref = task.build_model()
    loss = task.example_losses(ref, torch.arange(task.n_train)).sum()
    grads = torch.autograd.grad(loss, list(ref.parameters()))
    for p, r, g in zip(model.parameters(), ref.parameters(), grads):
        torch.testing.assert_close(p.detach(), r.detach() - 0.1 * g / task.n_train)


def test_trainer_protocol_outcome_and_accounting_match_prv_accountant():
    from prv_accountant import PRVAccountant
    from prv_accountant.privacy_random_variables import PoissonSubsampledGaussianMechanism

    from dphpo.studies.trainers import run_accountant

    task = TinyTask(n=40)
    s = FinetuneSettings(batch_size=8)
    acc = run_accountant(s.sample_rate(task.n_train), delta=1e-5)
    trainer = FinetuneTrainer(task, acc, s, task.n_train)
    out = trainer.run_trials([0.1, 0.2], [3, 4], [1.0, 2.0], [1, 2], progress=False)
    assert out.train_score_sums.shape == (2,) and np.all(out.train_score_sums <= task.n_train)
    assert np.allclose(out.train_metric, out.train_score_sums / task.n_train)
    eps = acc.standalone_eps(1.2, 50)
    direct = PRVAccountant(
        prvs=[PoissonSubsampledGaussianMechanism(sampling_probability=0.2, noise_multiplier=1.2)],
        max_self_compositions=[50], eps_error=0.01, delta_error=1e-8,
    ).compute_epsilon(delta=1e-5, num_self_compositions=[50])[2]
    assert eps == pytest.approx(direct, rel=1e-6)
    sigma = acc.sigma_for_eps(1.0, 50)
    assert acc.standalone_eps(sigma, 50) <= 1.0 < acc.standalone_eps(sigma * 0.99, 50)


def test_the_null_model_of_a_task_without_one_is_the_untrained_model():
    from dphpo.studies.trainers import run_accountant

    task = TinyTask(n=40)
    s = FinetuneSettings(batch_size=8)
    trainer = FinetuneTrainer(task, run_accountant(s.sample_rate(task.n_train), delta=1e-5), s, task.n_train)
    untrained = task.evaluate(task.build_model(), "train")
    assert trainer.null_scores() == (untrained["score_sum"], untrained["score_sum"], untrained["metric"])
    task.null_scores = lambda: (1.0, 2.0, 0.5)  # a task that names its null model (a classifier: the majority label)
    assert trainer.null_scores() == (1.0, 2.0, 0.5)
