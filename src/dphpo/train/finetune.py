"""DP fine-tuning of torch models (Panda et al. §5.4): DP-SGD / DP-Adam with Poisson sampling, per-sample
clipping by opacus (ghost clipping or per-sample-gradient hooks), accounted with the PRV accountant.

One step (Abadi et al. 2016, as in `dphpo.train.dpsgd`): draw a Poisson batch (each training example
kept independently with probability q = B/N), clip each example's gradient to norm C on the whole
trainable parameter vector, add N(0, σ²C²) to the *sum*, divide by the expected batch size qN (the
empty batch still releases its noise), then SGD with momentum (PyTorch's convention) or Adam on that
noisy mean — post-processing, no privacy cost. T steps are T compositions of the Poisson-subsampled
Gaussian (q, σ): the trainer's `accountant` (PRV, upper bound) says what a run costs.

Per-sample clipping, two engines giving the same clipped sum (tests/test_finetune.py):
- `ghost` (Li et al. 2022, opacus `GradSampleModuleFastGradientClipping`): a first backward computes
  per-example gradient *norms* without materializing the gradients (ghost norms of linear layers on
  sequences), a second backward of Σ cᵢ ℓᵢ with cᵢ = min(1, C/‖gᵢ‖) yields the clipped sum;
- `hooks` (opacus `GradSampleModule`): per-example gradients, then clip and sum.
σ = 0 means a non-private run: the plain (unclipped) batch gradient, the ε = ∞ reference.

`precision` (docs/privacy.md, Precision): `float32` (default); `bfloat16` runs the forward pass of the
per-example losses under bf16 autocast, with the `hooks` engine only: opacus then hands back per-example
gradients in bf16, each cast to fp32 before its norm is taken, and the clipping factors and the weighted
sum are fp32, so each example still adds a vector of norm ≤ C (up to fp32 rounding) that depends on it
alone. `ghost` with bf16 is refused: its second backward returns the *batch sum* rounded to bf16 as a
whole (an error of up to 2⁻⁸ of a sum of up to B·C, shared by all examples), which no per-example bound
covers. `auto`: bf16 with `hooks` on a CUDA device that supports it, fp32 otherwise (always with `ghost`).
Non-private runs (σ = 0) take the bf16 forward pass too; their gradients accumulate into fp32 parameters.

A `Task` (dphpo.tasks) supplies the model, the per-example losses of a batch and the evaluation;
`FinetuneTrainer` implements the trainer protocol (`dphpo.train.protocol`) on top: its trials run one after
another, each from the same pretrained starting point.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import torch
from torch import nn
from tqdm.auto import tqdm

from dphpo.device import check_device_setting
from dphpo.errors import ConfigError
from dphpo.train.clipping import clip_factors, drop_nonfinite_
from dphpo.train.dpsgd import poisson_batch
from dphpo.train.memory import check_physical_batch, require_resolved
from dphpo.train.noise import DrawAhead, ParameterNoise, StreamPool, secret_generator, to_device
from dphpo.train.task_trainer import TaskTrainer, check_precision, forward_losses, run_trace, training_dtype

CLIPPING = ("ghost", "hooks")
OPTIMIZERS = ("sgd", "adam")


@dataclass(frozen=True)
class FinetuneSettings:
    """Fixed parts of a DP fine-tuning run (config section `language.studies[].training`)."""

    optimizer: str = "sgd"  # "sgd" (momentum, PyTorch convention) | "adam" (DP-Adam: Adam on the noisy mean)
    momentum: float = 0.9
    betas: tuple[float, float] = (0.9, 0.999)
    adam_eps: float = 1e-8
    clip_norm: float = 1.0
    batch_size: int = 64  # expected Poisson batch size B: q = B / N
    clipping: str = "ghost"
    # a Poisson batch is processed in chunks of this many examples (memory only); auto: the largest that fits
    # the device (dphpo.train.memory), resolved once by the trainer
    physical_batch: int | str = 256
    device: str = "auto"  # where the task's model and data live and train (auto: the GPU when there is one)
    # float32 | bfloat16 (forward under bf16 autocast; hooks only) | auto (bf16 on a CUDA GPU with it, hooks only)
    precision: str = "float32"

    def __post_init__(self) -> None:
        where = "language.studies[].training"
        check_device_setting(self.device, f"{where}.device")
        check_precision(self.precision, f"{where}.precision")
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(f"{where}.optimizer: expected one of {OPTIMIZERS}, got {self.optimizer!r}")
        if self.clipping not in CLIPPING:
            raise ConfigError(f"{where}.clipping: expected one of {CLIPPING}, got {self.clipping!r}")
        if self.precision == "bfloat16" and self.clipping == "ghost":
            raise ConfigError(
                f"{where}: precision: bfloat16 with clipping: ghost is refused: ghost clipping's second backward "
                "returns the batch's clipped sum rounded to bf16 as a whole, an error shared by all examples that "
                "breaks the per-example bound C the noise is calibrated to; use clipping: hooks (per-example "
                "gradients clipped and summed in fp32) for bf16, or precision: float32"
            )
        if not self.clip_norm > 0:
            raise ConfigError(f"{where}.clip_norm: must be > 0, got {self.clip_norm}")
        check_physical_batch(self.physical_batch, f"{where}.physical_batch")
        if int(self.batch_size) < 1:
            raise ConfigError(f"{where}.batch_size must be >= 1, got {self.batch_size}")

    @classmethod
    def from_config(cls, section: dict | None) -> FinetuneSettings:
        s = dict(section or {})
        if "betas" in s:
            s["betas"] = tuple(float(b) for b in s["betas"])
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(s) - known)
        if unknown:
            raise ConfigError(f"language.studies[].training: unknown key(s) {unknown}; known: {sorted(known)}")
        return cls(**s)

    def sample_rate(self, n_train: int) -> float:
        return min(1.0, self.batch_size / n_train)

    def compute_dtype(self, device: torch.device) -> torch.dtype:
        """The forward pass's dtype on `device` (`auto` resolved: never bf16 with ghost clipping)."""
        return training_dtype(self.precision, device, bf16_allowed=self.clipping != "ghost")

    def describe(self) -> dict:
        return asdict(self)


# --------------------------------------------------------------------------------------------
# per-sample clipping


def wrap_for_clipping(model: nn.Module, clipping: str, clip_norm: float):
    """The opacus wrapper computing per-example gradient norms (ghost) or gradients (hooks)."""
    from opacus import GradSampleModule
    from opacus.grad_sample.grad_sample_module_fast_gradient_clipping import GradSampleModuleFastGradientClipping

    # opacus' hooks warn that no *input* requires a gradient: expected, only parameters do
    warnings.filterwarnings("ignore", message="Full backward hook is firing", category=UserWarning)
    model.train()  # opacus records activations only in training mode; tasks build models without dropout
    if clipping == "ghost":
        return GradSampleModuleFastGradientClipping(
            model, loss_reduction="sum", max_grad_norm=clip_norm, use_ghost_clipping=True, strict=False
        )
    if clipping == "hooks":
        return GradSampleModule(model, loss_reduction="sum", strict=False)
    raise ValueError(f"clipping must be one of {CLIPPING}, got {clipping!r}")


def clipped_grad_sum(
    wrapped, params: Sequence[nn.Parameter], losses: Callable[..., torch.Tensor], clipping: str, clip_norm: float
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """(Σᵢ cᵢ gᵢ per parameter, per-example norms ‖gᵢ‖) of the per-example losses `losses()` (shape (B,));
    `losses(keep)`: those of the examples a boolean mask keeps. An example whose norm (or, for ghost
    clipping, loss) is not finite is dropped (`dphpo.train.clipping`).

    hooks: opacus' per-example gradients come out in the forward pass's dtype (bf16 under autocast); each
    is cast to fp32 first (`.float()` of an fp32 tensor is that tensor: fp32 runs are unchanged), and the
    norms, factors and weighted sum are taken on exactly those fp32 vectors."""
    for p in params:
        p.grad = None
    loss = losses()
    if clipping == "hooks":
        loss.sum().backward()
        grad_samples = [p.grad_sample.float() for p in params]
        per_sample = [g.reshape(loss.shape[0], -1) for g in grad_samples]
        norms = torch.sqrt(sum(g.pow(2).sum(1) for g in per_sample))
        coef = clip_factors(norms, clip_norm)
        sums = [torch.einsum("b,b...->...", coef, drop_nonfinite_(g, norms)).detach() for g in grad_samples]
        for p in params:
            p.grad_sample = None
            p.grad = None
        return sums, norms.detach()
    # ghost: norms from the first backward, the clipped sum from a second one weighted by cᵢ
    loss.sum().backward(retain_graph=True)
    norms = wrapped.get_norm_sample().detach()
    coef = clip_factors(norms, clip_norm)
    for p in params:
        p.grad = None
    wrapped.disable_hooks()
    try:
        keep = torch.isfinite(norms) & torch.isfinite(loss.detach())
        if not bool((~keep).any()):  # one read per chunk: does any example drop out?
            (loss * coef).sum().backward()
        elif bool(keep.any()):  # a dropped example's NaN backprops NaN even weighted by 0: a second forward without it
            del loss
            (losses(keep) * coef[keep]).sum().backward()
        # else every example of the chunk dropped: it adds nothing (a forward on no example would fail)
    finally:
        wrapped.enable_hooks()
    sums = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in params]
    for p in params:
        p.grad = None
    return sums, norms


def plain_grad_sum(params: Sequence[nn.Parameter], losses: Callable[[], torch.Tensor]) -> list[torch.Tensor]:
    """Σᵢ gᵢ without clipping (non-private runs, σ = 0)."""
    for p in params:
        p.grad = None
    losses().sum().backward()
    sums = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in params]
    for p in params:
        p.grad = None
    return sums


def unwrap(wrapped) -> nn.Module:
    """The trained module without opacus' hooks and per-sample state."""
    if hasattr(wrapped, "remove_hooks"):
        wrapped.remove_hooks()
    model = getattr(wrapped, "_module", wrapped)
    for p in model.parameters():
        for attr in ("grad_sample", "_norm_sample", "_current_grad_sample"):
            if hasattr(p, attr):
                setattr(p, attr, None)
        p.grad = None
    return model


# --------------------------------------------------------------------------------------------
# the optimizer on the noisy mean (post-processing)


class NoisyMeanOptimizer:
    """SGD with momentum (v ← ρv + g̃; θ ← θ − ηv) or Adam (Kingma & Ba, bias-corrected) on g̃."""

    def __init__(self, params: Sequence[nn.Parameter], lr: float, settings: FinetuneSettings):
        self.params, self.lr, self.s = list(params), float(lr), settings
        self.m = [torch.zeros_like(p) for p in self.params]
        self.v = [torch.zeros_like(p) for p in self.params] if settings.optimizer == "adam" else None
        self.t = 0

    @torch.no_grad()
    def step(self, grads: Sequence[torch.Tensor]) -> None:
        self.t += 1
        if self.s.optimizer == "sgd":
            for p, m, g in zip(self.params, self.m, grads):
                m.mul_(self.s.momentum).add_(g)
                p.sub_(self.lr * m)
            return
        b1, b2 = self.s.betas
        for p, m, v, g in zip(self.params, self.m, self.v, grads):
            m.mul_(b1).add_(g, alpha=1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            m_hat = m / (1 - b1**self.t)
            v_hat = v / (1 - b2**self.t)
            p.sub_(self.lr * m_hat / (v_hat.sqrt() + self.s.adam_eps))


# --------------------------------------------------------------------------------------------
# one run


def train_dp(
    model: nn.Module,
    example_losses: Callable[[nn.Module, torch.Tensor], torch.Tensor],
    n_train: int,
    *,
    n_public: int,
    lr: float,
    steps: int,
    sigma: float,
    seed: int,
    settings: FinetuneSettings,
    progress: bool = False,
    desc: str = "DP fine-tuning",
    noise_ahead: bool = True,
) -> tuple[nn.Module, dict]:
    """`steps` DP steps on `model` (in place); `example_losses(module, indices)` gives the (B,) losses.

    Training runs where the model's parameters are (its task put them on `training.device`), per-example
    norms and clipped sums included. Sampling and noise come from one CPU generator seeded with `seed`, the
    noise moved to each parameter's device: the same numbers on any device. Each step's draws are made one
    step ahead on a worker thread (`dphpo.train.noise.DrawAhead`; `noise_ahead=False`: in line, the same numbers);
    a model of more than `noise.STREAM_ELEMENTS` trainable elements draws its noise in parallel streams.
    Each of the `n_train` examples joins a batch with probability q = B/n_public, and the noisy sum is
    divided by q·n_public = B: both from the declared public size, never the private count n_train.
    (Its `mean_batch` trace is a private statistic: internal logs only.)
    `settings.precision`: the forward pass of the per-example losses in bf16 (autocast on the parameters'
    device, the losses cast to fp32), norms, clipped sums and noise in fp32; `float32` leaves every step as
    it was. Returns the trained module (eval mode) and a trace (mean batch size, mean clipped fraction,
    the precision used).
    """
    if not (sigma >= 0 and math.isfinite(sigma)):
        raise ValueError(f"sigma must be a finite number >= 0, got {sigma}")
    if int(steps) < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    q = settings.sample_rate(n_public)
    gen = secret_generator(seed)
    require_resolved(settings)
    private = sigma > 0
    module = wrap_for_clipping(model, settings.clipping, settings.clip_norm) if private else model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    dtype = settings.compute_dtype(params[0].device)
    if private and settings.clipping == "ghost" and (dtype != torch.float32 or any(p.dtype != torch.float32 for p in model.parameters())):
        # FinetuneSettings and the study check refuse it: the second backward re-rounds the clipped backprops
        raise ValueError("ghost clipping runs in fp32 only, weights included (docs/privacy.md, Precision)")
    losses_of = forward_losses(example_losses, dtype, params[0].device)
    opt = NoisyMeanOptimizer(params, lr, settings)
    batches, clipped = [], []

    pool = StreamPool()
    noise_streams = ParameterNoise([p.shape for p in params], gen, seed, params[0].device, pool)

    def draw(t: int) -> tuple[torch.Tensor, list[torch.Tensor] | None]:
        """Step t's batch, then its noise, from `gen` (and a large model's further streams) in that order."""
        idx = poisson_batch(n_train, q, gen)
        return idx, noise_streams.draw() if private else None

    draws = DrawAhead(draw, int(steps), ahead=noise_ahead)
    try:
        for t in tqdm(range(int(steps)), desc=desc, unit="step", disable=not progress, mininterval=5.0):
            idx, noise_host = draws.get(t)
            total = [torch.zeros_like(p) for p in params]
            for chunk in idx.split(settings.physical_batch):
                if not chunk.numel():  # an empty Poisson batch: the step is its noise alone
                    continue
                fn = lambda keep=None, c=chunk: losses_of(module, c if keep is None else c[keep.to(c.device)])  # noqa: E731
                if private:
                    sums, norms = clipped_grad_sum(module, params, fn, settings.clipping, settings.clip_norm)
                    clipped.append((norms > settings.clip_norm).sum())  # on the device: read once, at the end
                else:
                    sums = plain_grad_sum(params, fn)
                for acc, s in zip(total, sums):
                    acc.add_(s)
                del sums, s  # before the next chunk's backward: its peak holds no copy of this one's sum
            noisy = []
            for j, (p, acc) in enumerate(zip(params, total)):
                noise = to_device(noise_host[j], p.device, p.dtype) * (sigma * settings.clip_norm) if private else 0.0
                noisy.append((acc + noise) / (q * n_public))
            opt.step(noisy)
            batches.append(int(idx.numel()))
    finally:
        draws.close()
        pool.close()
        model = unwrap(module) if private else model
    return model.eval(), run_trace(steps, q, batches, clipped, dtype)


# --------------------------------------------------------------------------------------------
# the trainer protocol


class FinetuneTrainer(TaskTrainer):
    """DP-SGD / DP-Adam fine-tuning of a task's trainable parameters (`dphpo.train.protocol.PrivateTrainer`)."""

    kind = "finetune"
    mechanism = "Poisson-subsampled DP-SGD run"
    train_fn = staticmethod(train_dp)
