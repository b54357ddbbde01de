"""Mehta et al. (Mehta et al.; docs/methods.md §4): one full-batch DP-Adam (or DP-LAMB) step on the last layer.

From zero init, a single step with the whole budget (μ = 1/σ, T = 1):
  g̃ = (Σ_i clip_C(∇ℓ(x_i, 0)) + σC ξ) / N,   Adam: m̂ = g̃, v̂ = g̃² ⇒ W = −η·g̃/(|g̃| + ε_adam),
LAMB: the same direction r = g̃/(|g̃| + ε_adam) (+ weight decay·W = 0) scaled by the trust ratio,
which is 1 when ‖W‖ = 0 (the LAMB convention), so W = −η·r as well.
W is η times a fixed matrix, and argmax(W x) does not change when W is scaled by η > 0: the test
accuracy does not depend on η. There is nothing to tune but C (fixed by the config here — tuning it
would cost privacy), so the ledger is the one step.

The head is therefore the sign classifier −sign(g̃): its accuracy is capped by the noiseless
−sign(g), whatever the budget, and with many examples the noise flips the signs of weak coordinates
only — the method is flat in ε by construction (MNIST × EfficientNet-Lite0: 67.5 % noiseless, 67.4–
67.9 % from ε = 0.25 to 8; Mehta et al. reports 81.7 % for all ε ∈ [4, 10] on ImageNet). That is the
paper's recommended setting (§5.1: one step, full batch, zero init); config/README.md has the numbers.
The cap is the single step, not the noise (issue 29; public MNIST pixels, 50k train / 10k held out of
the train file, C = 1): σC = 13.3 / 3.7 / 0.6 at ε = 0.25 / 1 / 8 against a median |Σ clip ∇| of 8.8
per coordinate summed over 50k examples; the noise flips 22 / 16 / 10 % of the signs (weak
coordinates) and the accuracy stays 71–73 % (noiseless sign 71.7 %), and even the linear step −g̃ is
flat (72.1–72.6 %, noiseless 72.6 %). Faithful to the paper: §4 "Initialization" (from zero init the
learning rate scales the update, not the accuracy), App. D.3 (one DP-LAMB step = DP-Adam at step 1).

Losses: softmax cross-entropy (default) or the original code's per-class sigmoid loss with a fixed
(untrained) bias of −10 on every logit (*code*): at zero weights the per-sample gradient is
(σ(−10) − y)xᵀ. The constant bias does not change the argmax.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from dphpo.errors import ConfigError
from dphpo.hpo.candidates import baselines_section, context
from dphpo.hpo.common import MethodResult
from dphpo.privacy.ledger import Ledger
from dphpo.privacy.randomness import NoiseScope
from dphpo.train.clipping import clip_factors, row_norms
from dphpo.train.dpgd import accuracy_counts
from dphpo.train.noise import secret_generator
from dphpo.train.philox import NOISE, PhiloxTrials
from dphpo.train.protocol import PrivateTrainer, require_kind

METHOD = "mehta"
OPTIMIZERS = ("adam", "lamb")
LOSSES = ("ce", "sigmoid")


@dataclass(frozen=True)
class MehtaConfig:
    optimizer: str = "adam"
    loss: str = "ce"
    eta: float = 1.0
    sigmoid_bias: float = -10.0
    clip_norm: float | None = None  # None: training.clip_norm
    adam_eps: float = 1e-8

    def __post_init__(self) -> None:
        where = f"baselines.{METHOD}"
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(f"{where}.optimizer: expected one of {OPTIMIZERS}, got {self.optimizer!r}")
        if self.loss not in LOSSES:
            raise ConfigError(f"{where}.loss: expected one of {LOSSES}, got {self.loss!r}")
        if not self.eta > 0:
            raise ConfigError(f"{where}.eta: must be > 0, got {self.eta}")
        if self.clip_norm is not None and not self.clip_norm > 0:
            raise ConfigError(f"{where}.clip_norm: must be > 0, got {self.clip_norm}")

    @classmethod
    def from_config(cls, config: dict) -> MehtaConfig:
        s = baselines_section(config, METHOD)
        return cls(
            optimizer=s.get("optimizer", "adam"),
            loss=s.get("loss", "ce"),
            eta=float(s.get("eta", 1.0)),
            sigmoid_bias=float(s.get("sigmoid_bias", -10.0)),
            clip_norm=None if s.get("clip_norm") is None else float(s["clip_norm"]),
            adam_eps=float(s.get("adam_eps", 1e-8)),
        )


@torch.no_grad()
def clipped_gradient_sum(x: torch.Tensor, y: torch.Tensor, num_classes: int, clip_norm: float, loss: str, bias: float) -> torch.Tensor:
    """Σ_i clip_C(∇ℓ(x_i, W = 0)), shape (K, d): per-sample gradients (p_i − y_i)x_iᵀ in closed form."""
    onehot = torch.nn.functional.one_hot(y, num_classes).to(x.dtype)
    if loss == "ce":
        resid = torch.full_like(onehot, 1.0 / num_classes) - onehot
    else:
        resid = torch.full_like(onehot, 1.0 / (1.0 + math.exp(-bias))) - onehot
    norms = resid.norm(dim=1) * row_norms(x)
    return (resid * clip_factors(norms, clip_norm).unsqueeze(1)).T @ x


def one_step(noisy_grad: torch.Tensor, optimizer: str, eta: float, adam_eps: float) -> torch.Tensor:
    """Weights after one bias-corrected Adam/LAMB step from W = 0 (β's cancel at step 1)."""
    direction = noisy_grad / (noisy_grad.abs() + adam_eps)
    if optimizer == "lamb":
        w_norm, r_norm = 0.0, float(direction.norm())  # ‖W‖ = 0 at zero init
        trust = w_norm / r_norm if w_norm > 0 and r_norm > 0 else 1.0
        direction = trust * direction
    return -eta * direction


def run(trainer: PrivateTrainer, config: dict, noise: NoiseScope, progress: bool = False) -> list[MethodResult]:
    require_kind(trainer, "linear_head", METHOD)  # a closed-form step of the last layer over cached features
    accountant, _, _, targets = context(config, trainer)
    features, settings = trainer.features, trainer.settings
    mc = MehtaConfig.from_config(config)
    clip = settings.clip_norm if mc.clip_norm is None else mc.clip_norm
    delta = accountant.delta
    grad_sum = clipped_gradient_sum(features.x_train, features.y_train, features.num_classes, clip, mc.loss, mc.sigmoid_bias)
    grad_sum = grad_sum.to("cpu", torch.float64)
    results = []
    for target in targets:
        mu = accountant.full_budget_mu(target)
        sigma = accountant.sigma_for_mu(mu, 1)
        seed = noise.seed(METHOD, f"{target:.10g}")
        if settings.noise_generator == "philox":  # float32 normals, as the trainers on features draw them
            gaussian = PhiloxTrials([seed], "cpu").normal(1, grad_sum.numel(), 0, NOISE).view(grad_sum.shape).double()
        else:
            gaussian = torch.randn(grad_sum.shape, generator=secret_generator(seed), dtype=torch.float64)
        gaussian = gaussian * (sigma * clip)
        # ÷ the declared public size, never the private count (docs/privacy.md)
        weights = one_step((grad_sum + gaussian) / trainer.n_public, mc.optimizer, mc.eta, mc.adam_eps).to(features.x_train.dtype)
        w = weights.unsqueeze(0)
        ledger = Ledger()
        ledger.add(f"one full-batch DP-{mc.optimizer.upper()} step", mu=mu, sigma=sigma, clip_norm=clip, steps=1)
        results.append(
            MethodResult(
                method=METHOD,
                target_eps=float(target),
                delta=delta,
                weights=weights.numpy().astype(np.float32),
                test_accuracy=float(accuracy_counts(w, features.x_test, features.y_test)[0] / features.n_test),
                train_accuracy=float(accuracy_counts(w, features.x_train, features.y_train)[0] / features.n_train),
                released={
                    "optimizer": mc.optimizer,
                    "loss": mc.loss,
                    "eta": mc.eta,
                    "steps": 1,
                    "sigma": sigma,
                    "clip_norm": clip,
                    "mu": mu,
                    "standalone_eps": accountant.planned_eps(mu, sigma, 1),
                }
                | ({"sigmoid_bias": mc.sigmoid_bias} if mc.loss == "sigmoid" else {}),
                ledger=ledger,
                selection={"rule": "none", "private": True, "label": "nothing tuned (C fixed by the config)"},
                trials=[],
                search={"tuned": "nothing: from zero init the step is eta * sign-like(g), accuracy does not depend on eta"},
            )
        )
    return results


def check(config: dict) -> None:
    MehtaConfig.from_config(config)
