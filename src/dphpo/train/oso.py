"""OSO-DPSGD (Galli et al., Algorithm 1; docs/methods.md §4): online clipping-threshold and learning-rate adaptation.

Per step t, with per-sample gradients g_i, clipping threshold C_t and learning rate ρ_t:
  ḡ_i = g_i / max(1, ‖g_i‖/C_t),   q_i = g_i/‖g_i‖ if ‖g_i‖ > C_t else 0 (the clipped samples),
  g̃_t = (Σ ḡ_i + N(0, ν_g² C_t² I)) / B,   q̃_t = (Σ q_i + N(0, ν_q² I)) / B,
  θ ← θ − ρ_t·(update from g̃_t),
  C_{t+1} = C_t·exp(ρ_c·sign(g̃_tᵀ q̃_{t−1})),   ρ_{t+1} = ρ_t·exp(ρ_r·sign(g̃_tᵀ g̃_{t−1})),
with q̃_0 = g̃_0 = 0. Σḡ has sensitivity C_t and Σq sensitivity 1, so the pair released at step t is
one Gaussian mechanism with noise multiplier ν when ν_g = (ν⁻² − ν_q⁻²)^(−1/2) (Galli et al., Prop. 1):
1/ν² = 1/ν_g² + 1/ν_q². The printed Algorithm 1 (line 13) adds noise with ν_g to q̃; the text
(Eq. 17) uses ν_q, and so do we. Rule of thumb ν_q ≈ 7.124·ν (ν_g is 1 % above ν).

`train_linear_oso` runs the rule for many trials at once on a linear head with full-batch
gradients (B = N), closed-form per-sample gradients as in `dphpo.train.dpgd`, and heavy-ball
momentum in PyTorch's convention (Galli et al. derives the rule for plain SGD and notes momentum only
rescales ∂ℓ/∂C — the signs used here are unchanged).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from dphpo.train.clipping import row_norms
from dphpo.train.dpgd import MAX_LOGIT_ELEMENTS, clipped_sums
from dphpo.train.noise import secret_generator
from dphpo.train.philox import NOISE, NOISE_Q, PhiloxTrials, check_generator

#: ν_q/ν for which ν_g is 1 % above ν (Galli et al., Privacy Analysis).
NU_Q_RULE_OF_THUMB = 7.124


def noise_split(nu: float, nu_q_ratio: float = NU_Q_RULE_OF_THUMB) -> tuple[float, float]:
    """(ν_g, ν_q) with ν_q = ratio·ν and ν_g = (ν⁻² − ν_q⁻²)^(−1/2): the pair costs one Gaussian of multiplier ν."""
    if not (nu > 0 and math.isfinite(nu)):
        raise ValueError(f"nu must be a positive finite number, got {nu}")
    if not nu_q_ratio > 1.0:
        raise ValueError(f"nu_q_ratio must exceed 1 (else nothing is left for the gradient), got {nu_q_ratio}")
    nu_q = nu_q_ratio * nu
    nu_g = 1.0 / math.sqrt(nu**-2 - nu_q**-2)
    return nu_g, nu_q


def composed_multiplier(nu_g: float, nu_q: float) -> float:
    """Noise multiplier of the single Gaussian mechanism equivalent to the (g̃, q̃) pair."""
    return 1.0 / math.sqrt(nu_g**-2 + nu_q**-2)


@dataclass(frozen=True)
class OsoRule:
    clip_init: float = 0.1  # C_0
    rho_c: float = 2.5e-3
    rho_r: float = 2.5e-3
    nu_q_ratio: float = NU_Q_RULE_OF_THUMB

    def __post_init__(self) -> None:
        if not self.clip_init > 0:
            raise ValueError(f"clip_init must be > 0, got {self.clip_init}")
        if self.rho_c < 0 or self.rho_r < 0:
            raise ValueError("rho_c and rho_r must be >= 0")
        if not self.nu_q_ratio > 1.0:
            raise ValueError(f"nu_q_ratio must exceed 1, got {self.nu_q_ratio}")


def adapt(value: torch.Tensor, rate: float, dot: torch.Tensor) -> torch.Tensor:
    """value·exp(rate·sign(dot)), elementwise (Eqs. 20–21)."""
    return value * torch.exp(rate * torch.sign(dot))


def oso_scales(clip: torch.Tensor):
    """`scales_of` of `clipped_sums` for OSO: min(1, C_t/‖g_i‖) for g̃, and 1[‖g_i‖ > C_t]/‖g_i‖ for q̃."""

    def scales(norms: torch.Tensor, rows: slice) -> list[torch.Tensor]:
        c = clip.unsqueeze(0)
        return [torch.clamp(c / norms, max=1.0), (norms > c).to(norms.dtype) / norms]

    return scales


@torch.no_grad()
def train_linear_oso(
    features: torch.Tensor,
    labels: torch.Tensor,
    num_classes: int,
    eta0: Sequence[float],
    steps: Sequence[int],
    nu: Sequence[float],
    seeds: Sequence[int],
    rule: OsoRule,
    *,
    n_public: float,
    momentum: float = 0.9,
    free_step: bool = True,
    progress: bool = False,
    desc: str = "OSO-DPSGD",
    noise_generator: str = "mt",
) -> tuple[torch.Tensor, dict]:
    """Train H trials (initial learning rate, steps, noise multiplier ν, seed) of OSO-DPSGD together.

    Returns weights (H, K, d) on the CPU and traces {"clip": (H,), "lr": (H,)} of the final C_T and ρ_T.
    Full batch; sums are divided by the declared public size `n_public`, never the private N. Trials are processed longest first; finished trials stop updating.
    `noise_generator` as in `dphpo.train.dpgd.train_linear_dpgd` ("mt" or "philox").
    """
    check_generator(noise_generator)
    h = len(eta0)
    if not (len(steps) == len(nu) == len(seeds) == h):
        raise ValueError("eta0, steps, nu and seeds must have one value per trial")
    per_group = max(1, MAX_LOGIT_ELEMENTS // max(1, num_classes * features.shape[1]))
    if h > per_group:  # bound the memory of the (H, K, d) state tensors
        parts = [
            train_linear_oso(
                features, labels, num_classes, *(list(v)[s : s + per_group] for v in (eta0, steps, nu, seeds)), rule,
                n_public=n_public, momentum=momentum, free_step=free_step, progress=progress, desc=desc,
                noise_generator=noise_generator,
            )
            for s in range(0, h, per_group)
        ]
        return torch.cat([p[0] for p in parts]), {k: np.concatenate([p[1][k] for p in parts]) for k in ("clip", "lr")}
    device, dtype = features.device, features.dtype
    n, d = features.shape
    order = np.argsort(-np.asarray(steps, dtype=np.int64), kind="stable")
    steps_sorted = [int(steps[i]) for i in order]
    philox = noise_generator == "philox"
    gens = PhiloxTrials([seeds[i] for i in order], device) if philox else [secret_generator(seeds[i]) for i in order]
    splits = [noise_split(float(nu[i]), rule.nu_q_ratio) for i in order]
    split_g, split_q = (torch.tensor(v, dtype=torch.float32, device=device).view(h, 1, 1) for v in zip(*splits))
    lr = torch.tensor([float(eta0[i]) for i in order], dtype=dtype, device=device)
    clip = torch.full((h,), float(rule.clip_init), dtype=dtype, device=device)
    onehot = torch.nn.functional.one_hot(labels, num_classes).to(dtype)
    x_norm = row_norms(features)
    w = torch.zeros(h, num_classes, d, dtype=dtype, device=device)
    v = torch.zeros_like(w)
    g_prev = torch.zeros_like(w)
    q_prev = torch.zeros_like(w)
    bar = tqdm(total=sum(steps_sorted), desc=desc, unit="trial-step", disable=not progress)
    for t in range(steps_sorted[0] if h else 0):
        a = sum(1 for s in steps_sorted if s > t)
        sums = clipped_sums(features, x_norm, onehot, w[:a], oso_scales(clip[:a]))
        g_sum, q_sum = sums[:a], sums[a:]
        if philox:
            noise_g = (gens.normal(a, num_classes * d, t, NOISE).view(a, num_classes, d) * split_g[:a]).to(dtype)
            noise_q = (gens.normal(a, num_classes * d, t, NOISE_Q).view(a, num_classes, d) * split_q[:a]).to(dtype)
        else:
            noise_g = torch.stack([torch.randn(num_classes, d, generator=gens[j]) * splits[j][0] for j in range(a)]).to(device, dtype)
            noise_q = torch.stack([torch.randn(num_classes, d, generator=gens[j]) * splits[j][1] for j in range(a)]).to(device, dtype)
        g_tilde = (g_sum + noise_g * clip[:a].view(a, 1, 1)) / n_public
        q_tilde = (q_sum + noise_q) / n_public
        v[:a] = momentum * v[:a] + g_tilde
        w[:a] = w[:a] - lr[:a].view(a, 1, 1) * v[:a]
        dot_c = (g_tilde * q_prev[:a]).sum(dim=(1, 2))
        dot_r = (g_tilde * g_prev[:a]).sum(dim=(1, 2))
        clip[:a] = adapt(clip[:a], rule.rho_c, dot_c)
        lr[:a] = adapt(lr[:a], rule.rho_r, dot_r)
        g_prev[:a] = g_tilde
        q_prev[:a] = q_tilde
        bar.update(a)
    bar.close()
    if free_step:  # post-processing: the momentum part of the next update (Panda et al., Fig. 9)
        w = w - lr.view(h, 1, 1) * momentum * v
    # row j of the sorted state belongs to trial order[j]
    idx = torch.as_tensor(order)
    out = torch.empty_like(w, device="cpu")
    out[idx] = w.cpu()
    clip_out = torch.empty(h, dtype=dtype)
    lr_out = torch.empty(h, dtype=dtype)
    clip_out[idx] = clip.cpu()
    lr_out[idx] = lr.cpu()
    return out, {"clip": clip_out.numpy(), "lr": lr_out.numpy()}
