"""DP-ZO (Tang et al. 2024): differentially private zeroth-order fine-tuning (Panda et al. §5.5, Table 9).

Per step: a Poisson batch (rate q = B/N, N the declared public size); one random direction z ~ N(0, I)
over the trainable parameters, drawn from randomness independent of the data (its own generator, from a
hash of the trial's secret seed apart from the noise's: releasing z costs nothing and reveals nothing of
the noise); for each example the scalar finite difference
    dᵢ = (ℓᵢ(θ + λz) − ℓᵢ(θ − λz)) / (2λ),
clipped to [−C, C]; the sum plus N(0, σ²C²) divided by the expected batch size qN is the released
scalar g̃; then θ ← θ − η·g̃·z. Only g̃ touches private data and one example moves the clipped sum by
at most C (add/remove), so a run of T steps is T compositions of the Poisson-subsampled Gaussian
(q, σ): the same accountant as DP-SGD. σ = 0 gives the non-private zeroth-order method.

`precision`: `float32` (default); `bfloat16` runs the forward passes under bf16 autocast, each loss cast
to fp32 before the difference is taken, so dᵢ is an fp32 scalar of example i alone and is clipped and
summed in fp32 (|dᵢ| ≤ C exactly); `auto`: bf16 on a CUDA device that supports it, else fp32. bf16 only
resolves θ ± λz where λ|z| is above the bf16 spacing of the (autocast) weights, ~2⁻⁸|θ|: a utility
question, not a privacy one.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import nn
from tqdm.auto import tqdm

from dphpo.device import check_device_setting
from dphpo.errors import ConfigError
from dphpo.train.dpsgd import poisson_batch
from dphpo.train.memory import check_physical_batch, require_resolved
from dphpo.train.noise import DrawAhead, secret_generator, standard_normal, to_device
from dphpo.train.task_trainer import TaskTrainer, check_precision, forward_losses, run_trace, training_dtype


@dataclass(frozen=True)
class DPZOSettings:
    clip_norm: float = 1.0  # C: bound on |dᵢ|
    batch_size: int = 64
    perturbation: float = 1e-3  # λ
    physical_batch: int | str = 512  # chunk size of a batch's forward passes (memory only); auto: dphpo.train.memory
    device: str = "auto"  # where the task's model and data live and train (auto: the GPU when there is one)
    precision: str = "float32"  # float32 | bfloat16 (forward passes under autocast) | auto (bf16 on a CUDA GPU with it)

    def __post_init__(self) -> None:
        where = "language.studies[].training"
        check_device_setting(self.device, f"{where}.device")
        check_precision(self.precision, f"{where}.precision")
        if not (self.clip_norm > 0 and self.perturbation > 0):
            raise ConfigError(f"{where}: clip_norm and perturbation must be > 0, got {self.clip_norm}, {self.perturbation}")
        check_physical_batch(self.physical_batch, f"{where}.physical_batch")
        if int(self.batch_size) < 1:
            raise ConfigError(f"{where}.batch_size must be >= 1, got {self.batch_size}")

    @classmethod
    def from_config(cls, section: dict | None) -> DPZOSettings:
        s = dict(section or {})
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(s) - known)
        if unknown:
            raise ConfigError(f"language.studies[].training (dpzo): unknown key(s) {unknown}; known: {sorted(known)}")
        return cls(**s)

    def sample_rate(self, n_train: int) -> float:
        return min(1.0, self.batch_size / n_train)

    def compute_dtype(self, device: torch.device) -> torch.dtype:
        """The forward passes' dtype on `device` (`auto` resolved)."""
        return training_dtype(self.precision, device)

    def describe(self) -> dict:
        return asdict(self)


@torch.no_grad()
def _perturb(params, direction, scale: float) -> None:
    for p, z in zip(params, direction):
        p.add_(z, alpha=scale)


@torch.no_grad()
def zo_differences(model: nn.Module, params, direction, example_losses, idx: torch.Tensor, lam: float,
                   theta: list[torch.Tensor] | None = None) -> torch.Tensor:
    """dᵢ = (ℓᵢ(θ+λz) − ℓᵢ(θ−λz)) / 2λ for the examples `idx`; θ is restored exactly afterwards from `theta`
    (a copy of the parameters; taken here when not given). θ + λz − 2λz + λz would drift with the number
    of chunks a step has, which depends on the private Poisson batch's size, a side channel."""
    theta = [p.detach().clone() for p in params] if theta is None else theta
    _perturb(params, direction, lam)
    plus = example_losses(model, idx)
    _perturb(params, direction, -2.0 * lam)
    minus = example_losses(model, idx)
    for p, saved in zip(params, theta):
        p.copy_(saved)
    return (plus - minus) / (2.0 * lam)


def train_dpzo(
    model: nn.Module,
    example_losses,
    n_train: int,
    *,
    n_public: int,
    lr: float,
    steps: int,
    sigma: float,
    seed: int,
    settings: DPZOSettings,
    progress: bool = False,
    desc: str = "DP-ZO",
    noise_ahead: bool = True,
) -> tuple[nn.Module, dict]:
    """`steps` DP-ZO steps on `model` (in place), where its parameters are (its task put them on
    `training.device`). Batches, directions and noise are seeded by `seed` from separate CPU generators
    (z is public randomness: its generator never sees data, and its state is a hash apart from the noise's), z moved to each parameter's device: the same
    numbers on any device. Each step's draws (batch, direction, noise; each generator in step order) are
    made one step ahead on a worker thread (`dphpo.train.noise.DrawAhead`; `noise_ahead=False`: in line,
    the same numbers). q = B/n_public and the noisy sum is divided by q·n_public: the declared public
    size, never the private count. `settings.precision` bf16: the forward passes under autocast, the
    losses cast to fp32 before differences, clipping and sums (`float32`: every step as it was)."""
    if not (sigma >= 0 and math.isfinite(sigma)):
        raise ValueError(f"sigma must be a finite number >= 0, got {sigma}")
    require_resolved(settings)
    q = settings.sample_rate(n_public)
    # three independent states: the directions' (public randomness) reveal nothing of the noise's
    sample_gen = secret_generator(seed, "batches")
    direction_gen = secret_generator(seed, "directions")
    noise_gen = secret_generator(seed, "noise")
    model.eval()  # forward passes only; tasks build models without dropout
    params = [p for p in model.parameters() if p.requires_grad]
    dtype = settings.compute_dtype(params[0].device)
    losses_of = forward_losses(example_losses, dtype, params[0].device)
    C, lam = settings.clip_norm, settings.perturbation
    batches, clipped = [], []

    def draw(t: int) -> tuple[torch.Tensor, list[torch.Tensor], float]:
        """Step t's batch, direction (pinned for a GPU) and noise, each from its own generator."""
        idx = poisson_batch(n_train, q, sample_gen)
        direction = [standard_normal(p.shape, direction_gen, p.device) for p in params]
        return idx, direction, float(torch.randn((), generator=noise_gen))

    with DrawAhead(draw, int(steps), ahead=noise_ahead) as draws:
        for t in tqdm(range(int(steps)), desc=desc, unit="step", disable=not progress, mininterval=5.0):
            idx, direction_host, standard_noise = draws.get(t)
            direction = [to_device(z, p.device, p.dtype) for p, z in zip(params, direction_host)]
            sums = []  # on the device: read once per step
            theta = [p.detach().clone() for p in params]  # θ of the step, restored exactly after every chunk
            for chunk in idx.split(settings.physical_batch):
                if not chunk.numel():  # an empty Poisson batch: the step is its noise alone
                    continue
                d = zo_differences(model, params, direction, losses_of, chunk, lam, theta)
                clipped.append((d.abs() > C).sum())
                sums.append(d.clamp(-C, C).nan_to_num_(nan=0.0).sum())  # a NaN difference is dropped (train.clipping)
            total = 0.0
            for s in sums:
                total += float(s)
            noise = standard_noise * sigma * C
            g = (total + noise) / (q * n_public)
            _perturb(params, direction, -lr * g)
            batches.append(int(idx.numel()))
    return model.eval(), run_trace(steps, q, batches, clipped, dtype)


class DPZOTrainer(TaskTrainer):
    """DP-ZO on a task's trainable parameters (`dphpo.train.protocol.PrivateTrainer`)."""

    kind = "dpzo"
    mechanism = "Poisson-subsampled DP-ZO run"
    train_fn = staticmethod(train_dpzo)
