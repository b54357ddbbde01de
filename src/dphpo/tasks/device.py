"""Where a language task computes: `training.device` of its study (`auto`: the GPU when there is one).

A task keeps the model every trial starts from (`prototype`) and its data tensors (`t`) on one device;
`to` moves them there once, so a training step moves only the indices of its batch (`rows`) and the
noise its trainer draws on the CPU (dphpo.train.finetune, dphpo.train.dpzo: the same numbers on any
device).
"""

from __future__ import annotations

import torch
from torch import nn

from dphpo.device import choose_device


class OnDevice:
    """What the tasks share: `prototype` and the tensors of `t` on `device`, moved there by `to`."""

    prototype: nn.Module
    t: dict[str, torch.Tensor]
    device: torch.device

    def to(self, device: str | torch.device | None) -> OnDevice:
        """Move the model and the data to `device` (`auto`: the GPU when there is one), once; returns the task."""
        device = choose_device(device)
        self.prototype.to(device)
        self.t = {key: value.to(device) for key, value in self.t.items()}
        self.device = device
        return self

    def rows(self, idx: torch.Tensor) -> torch.Tensor:
        """A batch's indices (drawn on the CPU) where the data are: the only tensor a step moves to index them."""
        return idx.to(self.device)
