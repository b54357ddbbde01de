"""DP-ZO (Tang et al. 2024): one step equals the hand computation; the direction is public randomness."""

from __future__ import annotations

import torch

from dphpo.train.dpzo import DPZOSettings, DPZOTrainer, train_dpzo
from dphpo.train.noise import secret_generator

from test_finetune import TinyTask


def test_dpzo_step_equals_hand_computation():
    task = TinyTask(n=8, seed=1)
    lam, C, sigma, lr, seed = 1e-2, 0.5, 0.8, 0.5, 7
    settings = DPZOSettings(clip_norm=C, batch_size=task.n_train, perturbation=lam)
    model = task.build_model()
    params = [p.detach().clone() for p in model.parameters()]
    gz = secret_generator(seed, "directions")
    z = [torch.randn(p.shape, generator=gz) for p in params]

    def losses_at(scale):
        m = task.build_model()
        with torch.no_grad():
            for p, zz in zip(m.parameters(), z):
                p.add_(scale * zz)
            return task.example_losses(m, torch.arange(task.n_train))

    d = (losses_at(lam) - losses_at(-lam)) / (2 * lam)
    assert (d.abs() > C).any() and (d.abs() < C).any(), "the test must clip some differences and not others"
    noise = float(torch.randn((), generator=secret_generator(seed, "noise")))
    g = (float(d.clamp(-C, C).sum()) + noise * sigma * C) / task.n_train
    expected = [p - lr * g * zz for p, zz in zip(params, z)]
    out, trace = train_dpzo(model, task.example_losses, task.n_train, n_public=task.n_train, lr=lr, steps=1, sigma=sigma, seed=seed, settings=settings)
    assert trace["mean_batch"] == task.n_train
    for p, e in zip(out.parameters(), expected):
        torch.testing.assert_close(p.detach(), e, rtol=1e-4, atol=1e-6)


def test_dpzo_direction_does_not_depend_on_data():
    """z comes from its own generator: changing the private labels changes g̃, never the direction."""
    a, b = TinyTask(n=8, seed=1), TinyTask(n=8, seed=1)
    b.y = 1 - b.y
    settings = DPZOSettings(clip_norm=10.0, batch_size=8, perturbation=1e-3)
    moved = []
    for task in (a, b):
        start = torch.cat([p.flatten() for p in task.build_model().parameters()])
        m, _ = train_dpzo(task.build_model(), task.example_losses, 8, n_public=8, lr=0.1, steps=1, sigma=0.0, seed=3, settings=settings)
        moved.append(torch.cat([p.detach().flatten() for p in m.parameters()]) - start)
    cos = torch.nn.functional.cosine_similarity(moved[0], moved[1], dim=0)
    assert abs(abs(float(cos)) - 1.0) < 1e-4  # parallel (same z), scaled by different scalars
    assert not torch.allclose(moved[0], moved[1])


def test_dpzo_trainer_runs_trials():
    from dphpo.studies.trainers import run_accountant

    task = TinyTask(n=30)
    s = DPZOSettings(batch_size=10)
    trainer = DPZOTrainer(task, run_accountant(s.sample_rate(30), 1e-5), s, 30)
    out = trainer.run_trials([0.1, 0.1], [5, 5], [1.0, 1.0], [1, 2], progress=False)
    assert trainer.kind == "dpzo" and out.test_metric.shape == (2,)
