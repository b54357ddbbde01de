"""Minibatch DP-SGD for small networks: opacus per-sample gradients, Poisson minibatches, PRV accounting.

Used by the OSO-DPSGD baseline on raw images (`dphpo.hpo.oso`, method `oso_dpsgd_cnn`) and by DP
continual pre-training (`dphpo.features.continual`, plain DP-SGD via `train_dpsgd`). Every step
samples each training example independently with probability q (Poisson sampling, as the
accountant assumes), computes per-sample gradients with opacus' `GradSampleModule`, applies the
OSO step rule of `dphpo.train.oso` to the flat parameter vector, and divides the noisy sums by
the *expected* batch size q·N (the empty batch still gets its noise). The (g̃, q̃) pair released
per step is one Gaussian mechanism of multiplier ν on a Poisson subsample, so T steps are T
compositions of the Poisson-subsampled Gaussian (rate q, multiplier ν), accounted with
prv-accountant's upper bound (docs/methods.md §0) by the ledger's PRV composition (`dphpo.privacy.ledger.Ledger`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from dphpo.train.clipping import clip_factors, drop_nonfinite_
from dphpo.train.noise import DrawAhead, derived_seed, secret_generator, standard_normal, to_device
from dphpo.train.oso import OsoRule, adapt, noise_split


class SmallCNN(nn.Module):
    """Two 3×3 conv layers (ReLU, max-pool after the first when the image is ≥ 8 px) and a linear head."""

    def __init__(self, in_channels: int, num_classes: int, size: int, channels: Sequence[int] = (16, 32)):
        super().__init__()
        c1, c2 = int(channels[0]), int(channels[1])
        layers: list[nn.Module] = [nn.Conv2d(in_channels, c1, 3, padding=1), nn.ReLU()]
        if size >= 8:
            layers.append(nn.MaxPool2d(2))
        layers += [nn.Conv2d(c1, c2, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten()]
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(4 * c2, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def images_from_features(x: torch.Tensor, attrs: dict | None = None) -> torch.Tensor:
    """(N, C, H, W) images from a raw-pixel feature cache ((N, H·W) grey or (N, H·W·3) RGB in HWC order)."""
    attrs = attrs or {}
    d = int(attrs.get("feature_dim", x.shape[1]))
    x = x[:, :d]  # drop a bias column, if the training settings added one
    side = math.isqrt(d)
    if side * side == d:
        return x.reshape(-1, 1, side, side).contiguous()
    side = math.isqrt(d // 3)
    if 3 * side * side == d:
        return x.reshape(-1, side, side, 3).permute(0, 3, 1, 2).contiguous()
    raise ValueError(f"cannot read features of dimension {d} as square grey or RGB images (a `raw` extractor is needed)")


def _flat_grad_samples(params: list[nn.Parameter], batch: int) -> torch.Tensor:
    return torch.cat([p.grad_sample.reshape(batch, -1) for p in params], dim=1)


def poisson_batch(n: int, sample_rate: float, generator: torch.Generator) -> torch.Tensor:
    """Indices of a Poisson sample: each of n examples kept independently with probability q."""
    # float64: float32 draws lie on a 2^-24 grid, which rounds the inclusion probability above the accounted q
    return torch.nonzero(torch.rand(n, generator=generator, dtype=torch.float64) < sample_rate).squeeze(1)


def per_sample_gradients(gsm, params: list[nn.Parameter], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(B, P) per-sample gradients of the summed cross-entropy, flattened over `params` (opacus)."""
    torch.nn.functional.cross_entropy(gsm(x), y, reduction="sum").backward()
    grads = _flat_grad_samples(params, x.shape[0]).detach()
    gsm.zero_grad(set_to_none=True)
    return grads


@torch.no_grad()
def apply_step(params: list[nn.Parameter], lr: torch.Tensor | float, direction: torch.Tensor) -> None:
    """p ← p − lr·direction, with `direction` flat over `params` in their order."""
    offset = 0
    for p in params:
        k = p.numel()
        p -= lr * direction[offset : offset + k].view_as(p)
        offset += k


def release_model(gsm) -> nn.Module:
    """The trained module without opacus' per-sample state."""
    model = gsm._module
    for p in model.parameters():
        p.grad_sample = None
        p.grad = None
    return model


def train_dpsgd(
    model: nn.Module,
    batch_inputs: Callable[[torch.Tensor], torch.Tensor],
    labels: torch.Tensor,
    *,
    sample_rate: float,
    n_public: float,
    steps: int,
    sigma: float,
    clip_norm: float,
    lr: float,
    momentum: float = 0.9,
    seed: int = 0,
    progress: bool = False,
    desc: str = "DP-SGD",
    noise_ahead: bool = True,
) -> tuple[nn.Module, dict]:
    """Minibatch DP-SGD (Abadi et al. 2016) on any network opacus differentiates per sample (no BatchNorm).

    Each of `steps` steps draws a Poisson batch of rate q from the N = len(labels) examples, clips every
    per-sample gradient to `clip_norm` on the whole parameter vector, adds N(0, σ²C²) noise to the sum
    and divides by the expected batch size q·N_pub (N_pub: the declared public size, never the private
    count, which a neighbour changes; docs/privacy.md); then SGD with momentum in PyTorch's convention. The
    empty batch still releases its noise. Training runs where the model's parameters are: `labels` are
    moved there once, `batch_inputs(indices)` builds the input tensor of a batch there (from data its
    caller put there once), per-example norms are computed there. Sampling and noise are drawn on the
    CPU and the noise moved: the same numbers on any device; each step's draws (batch, then noise) are made
    one step ahead on a worker thread (`dphpo.train.noise.DrawAhead`; `noise_ahead=False`: in line, the
    same numbers).
    Steps are exactly T compositions of the Poisson-subsampled Gaussian (rate q, multiplier σ).
    Returns the trained module (in place, eval mode) and a trace (steps, mean Poisson batch size).
    """
    from opacus import GradSampleModule

    if not 0.0 < sample_rate <= 1.0:
        raise ValueError(f"sample_rate must lie in (0, 1], got {sample_rate}")
    if not (sigma > 0 and clip_norm > 0):
        raise ValueError(f"sigma and clip_norm must be > 0, got sigma={sigma}, clip_norm={clip_norm}")
    warnings.filterwarnings("ignore", message="Full backward hook is firing", category=UserWarning)
    n = int(labels.shape[0])
    gen = secret_generator(seed)
    gsm = GradSampleModule(model.train(), loss_reduction="sum")
    params = [p for p in gsm.parameters() if p.requires_grad]
    device = params[0].device  # sampling and noise are drawn on the CPU: the same numbers on any device
    labels = labels.to(device)  # once, not per step
    velocity = torch.zeros(sum(p.numel() for p in params), device=device)
    batches = []

    def draw(t: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Step t's Poisson batch, then its noise (pinned for a GPU), from `gen` in that order."""
        idx = poisson_batch(n, sample_rate, gen)
        return idx, standard_normal(velocity.shape, gen, device)

    with DrawAhead(draw, int(steps), ahead=noise_ahead) as draws:
        for t in tqdm(range(int(steps)), desc=desc, unit="step", disable=not progress, mininterval=2.0):
            idx, noise_host = draws.get(t)
            grad_sum = torch.zeros_like(velocity)
            if idx.numel() > 0:
                per_sample = per_sample_gradients(gsm, params, batch_inputs(idx), labels[idx.to(device)])
                norms = per_sample.norm(dim=1)
                grad_sum = clip_factors(norms, clip_norm) @ drop_nonfinite_(per_sample, norms)
            noise = to_device(noise_host, device, velocity.dtype)
            noisy = (grad_sum + noise * (sigma * clip_norm)) / (sample_rate * n_public)
            velocity = momentum * velocity + noisy
            apply_step(params, lr, velocity)
            batches.append(int(idx.numel()))
    return release_model(gsm).eval(), {"steps": int(steps), "mean_batch": float(np.mean(batches)) if batches else 0.0}


def train_cnn_oso(
    images: torch.Tensor,
    labels: torch.Tensor,
    num_classes: int,
    *,
    sample_rate: float,
    n_public: float,
    steps: int,
    nu: float,
    eta0: float,
    rule: OsoRule,
    momentum: float = 0.0,
    channels: Sequence[int] = (16, 32),
    seed: int = 0,
    progress: bool = False,
    noise_ahead: bool = True,
) -> tuple[nn.Module, dict]:
    """OSO-DPSGD on a SmallCNN with Poisson minibatches of rate q (sums ÷ q·n_public); returns the model and a trace (C_t, ρ_t).

    Each step's batch and its two noise vectors are drawn one step ahead on a worker thread
    (`dphpo.train.noise.DrawAhead`, in the in-line order; `noise_ahead=False`: in line, the same numbers)."""
    # opacus' hooks warn that no *input* requires a gradient: expected, only parameters do
    warnings.filterwarnings("ignore", message="Full backward hook is firing", category=UserWarning)
    if not 0.0 < sample_rate <= 1.0:
        raise ValueError(f"sample_rate must lie in (0, 1], got {sample_rate}")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny convolutions: extra threads only add synchronisation (10× slower on a busy box)
    try:
        return _train_cnn_oso(images, labels, num_classes, sample_rate, n_public, steps, nu, eta0, rule, momentum, channels, seed, progress,
                              noise_ahead)
    finally:
        torch.set_num_threads(threads)


def _train_cnn_oso(images, labels, num_classes, sample_rate, n_public, steps, nu, eta0, rule, momentum, channels, seed, progress,
                   noise_ahead=True):
    from opacus import GradSampleModule

    n = images.shape[0]
    gen = secret_generator(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derived_seed(seed, "init"))  # a hash of the seed: the initialisation reveals nothing of it
        model = SmallCNN(images.shape[1], num_classes, images.shape[-1], channels)
    gsm = GradSampleModule(model, loss_reduction="sum")
    params = [p for p in gsm.parameters() if p.requires_grad]
    n_params = sum(p.numel() for p in params)
    nu_g, nu_q = noise_split(nu, rule.nu_q_ratio)
    expected_batch = sample_rate * n_public
    clip, lr = torch.tensor(rule.clip_init), torch.tensor(float(eta0))
    velocity = torch.zeros(n_params)
    g_prev, q_prev = torch.zeros(n_params), torch.zeros(n_params)
    trace = {"clip": [], "lr": [], "batch": []}

    def draw(t: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Step t's Poisson batch, then the noise of g̃, then that of q̃, from `gen` in that order."""
        idx = poisson_batch(n, sample_rate, gen)
        return idx, torch.randn(n_params, generator=gen), torch.randn(n_params, generator=gen)

    with DrawAhead(draw, int(steps), ahead=noise_ahead) as draws:
        for t in tqdm(range(int(steps)), desc="OSO-DPSGD (CNN)", unit="step", disable=not progress):
            idx, g_noise, q_noise = draws.get(t)
            if idx.numel() > 0:
                per_sample = per_sample_gradients(gsm, params, images[idx], labels[idx])
                norms = per_sample.norm(dim=1)
                per_sample, finite = drop_nonfinite_(per_sample, norms), torch.isfinite(norms)
                g_sum = (per_sample * clip_factors(norms, clip).unsqueeze(1)).sum(0)
                norms = norms.clamp_min(1e-12)
                q_sum = (per_sample * ((norms > clip).float() / norms).masked_fill_(~finite, 0.0).unsqueeze(1)).sum(0)
            else:  # an empty Poisson batch still releases noise
                g_sum, q_sum = torch.zeros(n_params), torch.zeros(n_params)
            g_tilde = (g_sum + g_noise * nu_g * clip) / expected_batch
            q_tilde = (q_sum + q_noise * nu_q) / expected_batch
            velocity = momentum * velocity + g_tilde
            apply_step(params, lr, velocity)
            clip = adapt(clip, rule.rho_c, g_tilde @ q_prev)
            lr = adapt(lr, rule.rho_r, g_tilde @ g_prev)
            g_prev, q_prev = g_tilde, q_tilde
            trace["clip"].append(float(clip))
            trace["lr"].append(float(lr))
            trace["batch"].append(int(idx.numel()))
    model = release_model(gsm)
    return model, {"nu_g": nu_g, "nu_q": nu_q, "final_clip": trace["clip"][-1], "final_lr": trace["lr"][-1],
                   "mean_batch": float(np.mean(trace["batch"])) if trace["batch"] else 0.0}


@torch.no_grad()
def accuracy(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, chunk: int = 4096) -> float:
    correct = 0
    for s in range(0, images.shape[0], chunk):
        correct += int((model(images[s : s + chunk]).argmax(1) == labels[s : s + chunk]).sum())
    return correct / max(1, images.shape[0])


def flat_parameters(model: nn.Module) -> np.ndarray:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()
