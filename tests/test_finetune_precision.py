"""Reduced precision in the language DP trainers (`training.precision`, docs/privacy.md, Precision):
float32 leaves every step as it was; bfloat16 runs the forward pass under bf16 autocast with the hooks
engine, each example's bf16 gradient cast to fp32 before its norm, clipping factor and sum, so its
contribution stays ≤ C; ghost clipping with bf16 is refused; DP-ZO clips fp32 differences."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import dphpo.train.dpzo as dpzo
import dphpo.train.finetune as finetune
from dphpo.errors import ConfigError
from dphpo.train.dpzo import DPZOSettings, DPZOTrainer, train_dpzo
from dphpo.train.finetune import FinetuneSettings, FinetuneTrainer, train_dp, wrap_for_clipping
from dphpo.train.noise import secret_generator
from dphpo.train.task_trainer import forward_losses

from test_finetune import TinyTask

CUDA = torch.device("cuda")


def flat(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def run(task, settings, *, sigma=0.7, steps=1, seed=11, lr=0.3):
    return train_dp(
        task.build_model(),
        task.example_losses,
        task.n_train,
        n_public=task.n_train,
        lr=lr,
        steps=steps,
        sigma=sigma,
        seed=seed,
        settings=settings,
    )


# --------------------------------------------------------------------------------------------
# float32: the default, the old code path


@pytest.mark.parametrize("clipping, sigma", [("ghost", 0.7), ("hooks", 0.7), ("hooks", 0.0)])
def test_float32_is_the_default_and_never_autocasts(clipping, sigma, monkeypatch):
    task = TinyTask(n=12, seed=2)
    assert FinetuneSettings().precision == DPZOSettings().precision == "float32"
    default, trace = run(
        task, FinetuneSettings(batch_size=5, clipping=clipping, optimizer="adam"), sigma=sigma, steps=3
    )
    assert trace["precision"] == "float32"

    def no_autocast(*args, **kwargs):
        raise AssertionError("float32 must not enter autocast")

    monkeypatch.setattr(torch, "autocast", no_autocast)
    explicit, _ = run(
        task,
        FinetuneSettings(batch_size=5, clipping=clipping, optimizer="adam", precision="float32"),
        sigma=sigma,
        steps=3,
    )
    assert torch.equal(flat(default), flat(explicit))
    with pytest.raises(AssertionError, match="autocast"):  # the check can fail: bfloat16 does enter it
        run(task, FinetuneSettings(batch_size=5, clipping="hooks", precision="bfloat16"), sigma=sigma)


# --------------------------------------------------------------------------------------------
# bfloat16 with per-example gradients (hooks)


def bf16_per_example_gradients(task):
    """opacus' per-example gradients of the whole batch under bf16 autocast, as the trainer gets them."""
    model = task.build_model()
    wrapped = wrap_for_clipping(model, "hooks", 1.0)
    forward_losses(task.example_losses, torch.bfloat16, torch.device("cpu"))(wrapped, torch.arange(task.n_train)).sum().backward()
    grads = [p.grad_sample.detach().clone() for p in model.parameters()]
    assert all(g.dtype == torch.bfloat16 for g in grads), "autocast must make opacus' per-example gradients bf16"
    return grads


def test_bf16_hooks_step_is_the_clipped_noisy_sum_of_fp32_casts_of_bf16_gradients():
    task = TinyTask()
    lr, sigma, C, seed = 0.3, 0.7, 1.0, 11
    grads = [g.double() for g in bf16_per_example_gradients(task)]  # bf16 -> float64 is exact
    norms = torch.sqrt(sum(g.flatten(1).pow(2).sum(1) for g in grads))
    coef = torch.clamp(C / norms, max=1.0)
    assert 0 < int((coef < 1).sum()) < task.n_train, "the test must clip some examples and not others"
    for i in range(task.n_train):  # each clipped contribution has norm ≤ C
        assert float(torch.sqrt(sum((coef[i] * g[i]).pow(2).sum() for g in grads))) <= C * (1 + 1e-6)
    gen = secret_generator(seed)
    torch.rand(task.n_train, generator=gen, dtype=torch.float64)  # the Poisson draw (q = 1)
    start = task.build_model()
    expected = []
    for p, g in zip(start.parameters(), grads):
        noise = torch.randn(p.shape, generator=gen).double() * sigma * C
        expected.append(
            p.detach().double() - lr * ((coef.view(-1, *[1] * (g.dim() - 1)) * g).sum(0) + noise) / task.n_train
        )
    settings = FinetuneSettings(batch_size=task.n_train, clipping="hooks", clip_norm=C, precision="bfloat16")
    model, trace = run(task, settings, sigma=sigma, seed=seed, lr=lr)
    assert trace["precision"] == "bfloat16"
    for p, e in zip(model.parameters(), expected):
        assert p.dtype == torch.float32
        torch.testing.assert_close(p.detach().double(), e, rtol=1e-6, atol=1e-7)  # fp32 rounding only
    # and close to the fp32 run: only the forward pass was reduced
    fp32, _ = run(
        task, FinetuneSettings(batch_size=task.n_train, clipping="hooks", clip_norm=C), sigma=sigma, seed=seed, lr=lr
    )
    torch.testing.assert_close(flat(model), flat(fp32), rtol=3e-2, atol=3e-3)
    assert not torch.equal(flat(model), flat(fp32))


def test_bf16_hooks_norms_are_the_fp32_norms_of_the_summed_vectors(monkeypatch):
    """The norms the trainer clips by are those of the fp32 casts (a bf16 norm is off by up to 2⁻⁸)."""
    task = TinyTask(n=16, seed=4)
    seen = []
    original = finetune.clipped_grad_sum

    def spy(*args, **kwargs):
        sums, norms = original(*args, **kwargs)
        seen.append(norms)
        return sums, norms

    monkeypatch.setattr(finetune, "clipped_grad_sum", spy)
    run(task, FinetuneSettings(batch_size=task.n_train, clipping="hooks", precision="bfloat16"))
    grads = bf16_per_example_gradients(task)
    exact = torch.sqrt(sum(g.double().flatten(1).pow(2).sum(1) for g in grads))
    (norms,) = seen
    assert norms.dtype == torch.float32
    torch.testing.assert_close(norms.double(), exact, rtol=1e-6, atol=0)


def test_bf16_non_private_run_is_close_to_fp32():
    task = TinyTask(n=12, seed=5)
    runs = [
        run(task, FinetuneSettings(batch_size=6, clipping="hooks", precision=p), sigma=0.0, steps=3, lr=0.1)[0]
        for p in ("float32", "bfloat16")
    ]
    assert all(p.dtype == torch.float32 for p in runs[1].parameters())
    torch.testing.assert_close(flat(runs[1]), flat(runs[0]), rtol=3e-2, atol=3e-3)
    assert not torch.equal(flat(runs[1]), flat(runs[0]))


# --------------------------------------------------------------------------------------------
# settings: ghost + bf16 refused, auto, unknown values, provenance


def test_ghost_with_bfloat16_is_refused_and_auto_with_ghost_is_fp32(monkeypatch):
    with pytest.raises(ConfigError, match=r"precision.*bfloat16.*clipping: ghost.*clipping: hooks"):
        FinetuneSettings(precision="bfloat16")  # ghost is the default engine
    with pytest.raises(ConfigError, match="precision"):
        FinetuneSettings.from_config({"clipping": "ghost", "precision": "bfloat16"})
    assert FinetuneSettings.from_config({"clipping": "hooks", "precision": "bfloat16"}).precision == "bfloat16"
    cpu = torch.device("cpu")
    for settings in (
        FinetuneSettings(precision="auto"),
        FinetuneSettings(precision="auto", clipping="hooks"),
        DPZOSettings(precision="auto"),
    ):
        assert settings.compute_dtype(cpu) == torch.float32  # auto on the CPU: fp32
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert FinetuneSettings(precision="auto", clipping="hooks").compute_dtype(CUDA) == torch.bfloat16
    assert DPZOSettings(precision="auto").compute_dtype(CUDA) == torch.bfloat16
    assert FinetuneSettings(precision="auto", clipping="ghost").compute_dtype(CUDA) == torch.float32
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert FinetuneSettings(precision="auto", clipping="hooks").compute_dtype(CUDA) == torch.float32
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a, **k: "an old GPU")
    with pytest.raises(ConfigError, match="precision: bfloat16.*no bf16"):
        FinetuneSettings(precision="bfloat16", clipping="hooks").compute_dtype(CUDA)


@pytest.mark.parametrize("settings_class", [FinetuneSettings, DPZOSettings])
@pytest.mark.parametrize("value", ["fp16", "bf16", "float16", None])
def test_unknown_precision_is_refused_naming_the_key(settings_class, value):
    with pytest.raises(
        ConfigError, match=r"language\.studies\[\]\.training\.precision: expected one of .*float32.*bfloat16.*auto"
    ):
        settings_class.from_config({"precision": value})


@pytest.mark.parametrize(
    "trainer_class, settings",
    [
        (FinetuneTrainer, FinetuneSettings(clipping="hooks", precision="bfloat16")),
        (FinetuneTrainer, FinetuneSettings(precision="auto")),
        (DPZOTrainer, DPZOSettings(precision="auto")),
    ],
)
def test_provenance_records_the_configured_and_the_used_precision(trainer_class, settings):
    from dphpo.studies.trainers import run_accountant

    trainer = trainer_class(TinyTask(), run_accountant(0.5, 1e-5), settings, 6)
    prov = trainer.provenance()
    assert prov["settings"]["precision"] == settings.precision
    assert prov["compute_precision"] == (
        "bfloat16" if settings.precision == "bfloat16" else "float32"
    )  # auto on the CPU


# --------------------------------------------------------------------------------------------
# DP-ZO


class HalfLossTask(TinyTask):
    """Squared-error losses: under autocast they come out bf16 (cross-entropy would be fp32)."""

    def example_losses(self, module, idx):
        return (module(self.x[idx]) - F.one_hot(self.y[idx], 2)).pow(2).sum(1)


def test_dpzo_bf16_clips_fp32_differences_and_stays_close_to_fp32(monkeypatch):
    task = HalfLossTask(n=12, seed=1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert task.example_losses(task.model, torch.arange(3)).dtype == torch.bfloat16
    seen = []
    original = dpzo.zo_differences

    def spy(*args, **kwargs):
        d = original(*args, **kwargs)
        seen.append(d)
        return d

    monkeypatch.setattr(dpzo, "zo_differences", spy)
    out = {}
    for precision in ("float32", "bfloat16"):
        settings = DPZOSettings(clip_norm=2.0, batch_size=6, perturbation=1e-2, precision=precision)
        model, trace = train_dpzo(
            task.build_model(),
            task.example_losses,
            task.n_train,
            n_public=task.n_train,
            lr=0.05,
            steps=4,
            sigma=0.5,
            seed=3,
            settings=settings,
        )
        assert trace["precision"] == precision
        out[precision] = flat(model)
    assert seen and all(d.dtype == torch.float32 for d in seen)
    start = flat(task.model)
    moved = {k: v - start for k, v in out.items()}
    # the same steps up to bf16 rounding of the losses (a run moved by its noise alone: cos 0.84 here; one
    # autocast region around both θ ± λz, whose cached bf16 weights go stale: cos -0.68)
    cos = F.cosine_similarity(moved["bfloat16"], moved["float32"], dim=0)
    assert float(cos) > 0.98 and not torch.equal(out["bfloat16"], out["float32"])
    assert abs(float(moved["bfloat16"].norm() / moved["float32"].norm()) - 1) < 0.2
