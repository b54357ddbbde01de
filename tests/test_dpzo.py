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


def test_the_perturbations_restore_theta_exactly_whatever_the_number_of_chunks():
    """θ after the ±λz evaluations is θ bit for bit: the chunk count of a step (a function of the private
    Poisson batch's size) leaves no trace in the weights (θ + λz − 2λz + λz drifted ~1e-8 per chunk)."""
    from dphpo.train.dpzo import zo_differences

    task = TinyTask(n=8, seed=1)
    model = task.build_model()
    params = [p for p in model.parameters() if p.requires_grad]
    start = [p.detach().clone() for p in params]
    z = [torch.randn(p.shape, generator=secret_generator(5, "directions")) for p in params]
    for chunk in torch.arange(task.n_train).split(1):
        zo_differences(model, params, z, task.example_losses, chunk, 0.0123)
    assert all(torch.equal(p, s) for p, s in zip(params, start))
    # the same two-step run with one chunk per step and with one example per chunk: the same weights
    runs = []
    for physical in (8, 1):
        settings = DPZOSettings(clip_norm=0.5, batch_size=8, perturbation=1e-2, physical_batch=physical)
        m, _ = train_dpzo(task.build_model(), task.example_losses, 8, n_public=8, lr=0.1, steps=2, sigma=0.5, seed=3, settings=settings)
        runs.append([p.detach() for p in m.parameters()])
    for a, b in zip(*runs):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)  # sums in another order: rounding only
