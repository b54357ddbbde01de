"""Where a language task computes: `training.device` of its study (`auto`: the GPU when there is one).

A task keeps the model every trial starts from (`prototype`) and its data tensors (`t`) on one device;
`to` moves them there once, so a training step moves only the indices of its batch (`rows`) and the
noise its trainer draws on the CPU (dphpo.train.finetune, dphpo.train.dpzo: the same numbers on any
device). Data too large for the card (QQP's and MNLI's cached hidden states: 143 and 154 GB) stay in
host memory (`data_device`, chosen by dphpo.train.memory.data_device from public sizes), and `take`
copies one batch's rows to the device. A trial's model (`build_model`) copies the prototype's trainable parameters and buffers and shares
its frozen weights: OPT-13B's LoRA trials add the adapters to the device, not a second 26 GB of weights.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from dphpo.device import choose_device


class OnDevice:
    """What the tasks share: `prototype` and the tensors of `t` on `device`, moved there by `to`."""

    prototype: nn.Module
    t: dict[str, torch.Tensor]
    device: torch.device

    def to(self, device: str | torch.device | None, data_device: str | torch.device | None = None) -> OnDevice:
        """Move the model to `device` (`auto`: the GPU when there is one) and the data to `data_device` (None:
        the same device), once; returns the task."""
        device = choose_device(device)
        data_device = device if data_device is None else torch.device(data_device)
        self.prototype.to(device)
        self.t = {key: value.to(data_device) for key, value in self.t.items()}
        self.device, self.data_device = device, data_device
        return self

    def rows(self, idx: torch.Tensor) -> torch.Tensor:
        """A batch's indices (drawn on the CPU) where the data are: all a step moves when the data are on the device."""
        return idx.to(self.data_device)

    def take(self, key: str, rows: torch.Tensor | slice) -> torch.Tensor:
        """Rows (indices or a slice) of data tensor `key` on the compute device: the batch alone is copied
        there when the data stay on the host, nothing is copied when they are on the device."""
        if isinstance(rows, torch.Tensor):
            rows = self.rows(rows)
        return self.t[key][rows].to(self.device)

    def build_model(self) -> nn.Module:
        """A trial's model: a copy of the prototype whose trainable parameters and buffers are its own and whose
        frozen parameters are the prototype's very tensors. Training changes trainable parameters only (the
        trainers of dphpo.train update, perturb and noise `requires_grad` parameters alone), so every trial
        still starts from the pretrained model, and a trial costs its trainable state, not a copy of the frozen
        weights (dphpo.train.memory counts it so)."""
        frozen = {id(p): p for p in self.prototype.parameters() if not p.requires_grad}
        return copy.deepcopy(self.prototype, frozen)
