"""Batch norm folded into the convolution before it: the same frozen network, one pass fewer.

In eval mode a BatchNorm2d is an affine map per channel, y = γ (x − m)/√(v + ε) + β, so after a
convolution it can be absorbed into that convolution's weights (scaled by γ/√(v + ε) per output
channel) and bias. An extractor then reads and writes each activation map once less: on 2 CPU cores
EfficientNet-Lite0's network at 64 px runs at 1.36x the images/s with 2 threads, 1.25x with 1
(benchmarks/extract.py). The features
agree with the unfolded network's to float rounding (7e-6 relative for Lite0), not bit for bit, so
a cache records whether its network was folded (`Extractor.attrs`: `batchnorm`).

Which BatchNorm follows which convolution is read off the module tree: a BatchNorm2d registered
right after a Conv2d sibling (timm's conv/BatchNormAct2d pairs, the networks of
dphpo.features.networks). Registration order is not execution order in every network, so the folded
copy is kept only if it computes what the original does on a probe batch.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

# Largest relative difference between the folded and the original network's outputs on the probe
# batch: float rounding of the folded weights stays orders of magnitude below it; a wrong pairing
# changes the features by O(1).
FOLD_TOLERANCE = 1e-4


@torch.no_grad()
def fold_batchnorm(model: nn.Module, probe: torch.Tensor) -> tuple[nn.Module, int]:
    """A copy of the eval-mode `model` with every foldable BatchNorm2d absorbed into its convolution,
    and the number folded; `model` itself, and 0, when nothing folds or the copy's output on `probe`
    differs from the original's by more than FOLD_TOLERANCE relative."""
    folded = copy.deepcopy(model).eval()
    count = _fold_children(folded)
    if count == 0:
        return model, 0
    # in full fp32: cuDNN's default TF32 convolutions alone differ by ~2e-3 relative (benchmarks/README.md)
    tf32, torch.backends.cudnn.allow_tf32 = torch.backends.cudnn.allow_tf32, False
    try:
        expected, got = model(probe), folded(probe)
    finally:
        torch.backends.cudnn.allow_tf32 = tf32
    if not torch.isfinite(got).all() or (got - expected).abs().max() > FOLD_TOLERANCE * expected.abs().max().clamp_min(1e-12):
        return model, 0
    return folded, count


def _fold_children(module: nn.Module) -> int:
    count = 0
    children = list(module.named_children())
    for (_, conv), (name, norm) in zip(children, children[1:]):
        if isinstance(conv, nn.Conv2d) and isinstance(norm, nn.BatchNorm2d) and norm.track_running_stats:
            _fold_into(conv, norm)
            # what the norm layer did after normalizing (timm's BatchNormAct2d: dropout, activation)
            after = [m for m in (getattr(norm, "drop", None), getattr(norm, "act", None)) if m is not None]
            setattr(module, name, nn.Sequential(*after) if after else nn.Identity())
            count += 1
    return count + sum(_fold_children(child) for _, child in module.named_children())


def _fold_into(conv: nn.Conv2d, norm: nn.BatchNorm2d) -> None:
    scale = norm.running_var.add(norm.eps).rsqrt()
    if norm.weight is not None:
        scale = scale * norm.weight
    shift = -norm.running_mean * scale
    if norm.bias is not None:
        shift = shift + norm.bias
    bias = shift if conv.bias is None else conv.bias * scale + shift
    weight = conv.weight * scale.view(-1, *([1] * (conv.weight.ndim - 1)))
    conv.weight = nn.Parameter(weight, requires_grad=False)  # a pointwise product: conv.weight's memory format
    conv.bias = nn.Parameter(bias, requires_grad=False)

