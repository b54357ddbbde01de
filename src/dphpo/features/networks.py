"""Compact image networks for public pretraining, each with a pooled penultimate-layer output.

- `small_cnn`: four conv–norm–ReLU stages (width w, 2w, 4w, 8w; 2×2 max-pool between them),
  then average pooling onto a 2×2 grid → 4·8w features (512 at the default w = 16). Made for the
  embedded study (a few minutes on 2 CPU cores). The 2×2 grid keeps coarse position, which
  centred private data such as MNIST needs: a linear probe on MNIST gains several points over
  global pooling.
- `wrn16_4`: WideResNet-16-4 (Zagoruyko & Komodakis 2016): pre-activation basic blocks, 2 per
  group, widths 64/128/256 → 256 features. The architecture of Panda et al. App. A ("CIFAR from scratch
  without public data", after Tang et al. 2023).
- `resnet20`: the CIFAR ResNet-20 of He et al. (2016, §4.2): 3 stages × 3 basic blocks, widths
  16/32/64, identity shortcuts with zero-padded channels (option A) → 64 features. The extractor of
  the Koskela & Kulkarni setting (Panda et al. Table 2), pretrained there on CIFAR-100.

Every network has `forward_features(x) -> (B, feature_dim)`, `forward(x) -> logits` and a linear
`head`. `norm="group"` swaps BatchNorm for GroupNorm (what DP-SGD needs if the network is ever
trained privately, e.g. in a continual private stage).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from dphpo.errors import ConfigError

NORMS = ("batch", "group")


def norm_layer(kind: str, channels: int) -> nn.Module:
    if kind == "batch":
        return nn.BatchNorm2d(channels)
    if kind == "group":
        return nn.GroupNorm(min(16, channels // 4) or 1, channels)
    raise ConfigError(f"norm must be one of {', '.join(NORMS)}, got {kind!r}")


def _init_weights(module: nn.Module) -> None:
    for m in module.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.zeros_(m.bias)


class FeatureNet(nn.Module):
    """Base: `features` (a module ending in pooled (B, D) output) followed by a linear `head`."""

    feature_dim: int
    MIN_RESOLUTION = 1  # the smallest input side the network takes (strided convolutions pad)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.forward_features(x))


# --------------------------------------------------------------------------------------------
# small_cnn


class SmallCNN(FeatureNet):
    GRID = 2
    MIN_RESOLUTION = 8  # three 2×2 max pools: a side below 8 pools to nothing

    def __init__(self, num_classes: int, width: int = 16, norm: str = "batch"):
        super().__init__()
        widths = [width, 2 * width, 4 * width, 8 * width]
        layers: list[nn.Module] = []
        c_in = 3
        for i, c in enumerate(widths):
            if i:
                layers.append(nn.MaxPool2d(2))
            layers += [nn.Conv2d(c_in, c, 3, padding=1, bias=False), norm_layer(norm, c), nn.ReLU(inplace=True)]
            c_in = c
        self.body = nn.Sequential(*layers)
        self.feature_dim = widths[-1] * self.GRID * self.GRID
        self.head = nn.Linear(self.feature_dim, num_classes)
        _init_weights(self)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return F.adaptive_avg_pool2d(self.body(x), self.GRID).flatten(1)


# --------------------------------------------------------------------------------------------
# WideResNet-16-4


class _WideBlock(nn.Module):
    """Pre-activation basic block: BN-ReLU-conv3x3-BN-ReLU-conv3x3, 1×1 conv shortcut on change."""

    def __init__(self, c_in: int, c_out: int, stride: int, norm: str):
        super().__init__()
        self.bn1, self.bn2 = norm_layer(norm, c_in), norm_layer(norm, c_out)
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.shortcut = (nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False)
                         if stride != 1 or c_in != c_out else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        o = F.relu(self.bn1(x))
        y = self.conv1(o)
        y = self.conv2(F.relu(self.bn2(y)))
        return y + (self.shortcut(o) if self.shortcut is not None else x)


class WideResNet(FeatureNet):
    def __init__(self, num_classes: int, depth: int = 16, widen: int = 4, norm: str = "batch"):
        super().__init__()
        if (depth - 4) % 6:
            raise ConfigError(f"WideResNet depth must be 6n + 4, got {depth}")
        n = (depth - 4) // 6
        widths = [16, 16 * widen, 32 * widen, 64 * widen]
        self.stem = nn.Conv2d(3, widths[0], 3, padding=1, bias=False)
        blocks: list[nn.Module] = []
        c_in = widths[0]
        for c, stride in zip(widths[1:], (1, 2, 2)):
            for i in range(n):
                blocks.append(_WideBlock(c_in, c, stride if i == 0 else 1, norm))
                c_in = c
        self.blocks = nn.Sequential(*blocks)
        self.bn = norm_layer(norm, c_in)
        self.feature_dim = c_in
        self.head = nn.Linear(c_in, num_classes)
        _init_weights(self)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.bn(self.blocks(self.stem(x)))).mean(dim=(2, 3))


# --------------------------------------------------------------------------------------------
# CIFAR ResNet-20


class _BasicBlock(nn.Module):
    """conv3x3-BN-ReLU-conv3x3-BN + shortcut, ReLU; option-A shortcut (subsample, zero-pad channels)."""

    def __init__(self, c_in: int, c_out: int, stride: int, norm: str):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = norm_layer(norm, c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = norm_layer(norm, c_out)
        self.stride, self.pad = stride, c_out - c_in

    def shortcut(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride != 1:
            x = x[:, :, :: self.stride, :: self.stride]
        if self.pad:
            x = F.pad(x, (0, 0, 0, 0, self.pad // 2, self.pad - self.pad // 2))
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


class CifarResNet(FeatureNet):
    def __init__(self, num_classes: int, depth: int = 20, norm: str = "batch"):
        super().__init__()
        if (depth - 2) % 6:
            raise ConfigError(f"CIFAR ResNet depth must be 6n + 2, got {depth}")
        n = (depth - 2) // 6
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), norm_layer(norm, 16), nn.ReLU(inplace=True))
        blocks: list[nn.Module] = []
        c_in = 16
        for c, stride in ((16, 1), (32, 2), (64, 2)):
            for i in range(n):
                blocks.append(_BasicBlock(c_in, c, stride if i == 0 else 1, norm))
                c_in = c
        self.blocks = nn.Sequential(*blocks)
        self.feature_dim = c_in
        self.head = nn.Linear(c_in, num_classes)
        _init_weights(self)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(self.stem(x)).mean(dim=(2, 3))


# --------------------------------------------------------------------------------------------
# registry

ARCHS: dict[str, Callable[..., FeatureNet]] = {
    "small_cnn": SmallCNN,
    "wrn16_4": lambda num_classes, norm="batch": WideResNet(num_classes, depth=16, widen=4, norm=norm),
    "resnet20": lambda num_classes, norm="batch": CifarResNet(num_classes, depth=20, norm=norm),
}
ARCH_OPTIONS = {"small_cnn": ("width", "norm"), "wrn16_4": ("norm",), "resnet20": ("norm",)}


def build_network(arch: str, num_classes: int, **options: Any) -> FeatureNet:
    """A freshly initialized network (uses the global torch RNG: seed it first)."""
    if arch not in ARCHS:
        raise ConfigError(f"unknown architecture {arch!r}; known: {', '.join(ARCHS)}")
    unknown = set(options) - set(ARCH_OPTIONS[arch])
    if unknown:
        raise ConfigError(f"architecture {arch!r} takes options {ARCH_OPTIONS[arch]}, not {sorted(unknown)}")
    return ARCHS[arch](num_classes, **{k: v for k, v in options.items() if v is not None})


class PooledFeatures(nn.Module):
    """The frozen penultimate layer of a `FeatureNet` as a module: x -> (B, feature_dim)."""

    def __init__(self, net: FeatureNet):
        super().__init__()
        self.net = net
        self.num_features = net.feature_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net.forward_features(x)
