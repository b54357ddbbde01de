"""The checkpoint of a pretrained extractor (`results/pretrained/{name}.pt`): where the workflow writes
it, writing it atomically and reading it back (`torch.load(..., weights_only=True)`), and the network
it holds. `dphpo.features.pretrain` makes it; the `pretrained_public` extractor reads it."""

from __future__ import annotations

from pathlib import Path

import torch

from dphpo import layout
from dphpo.errors import ConfigError
from dphpo.features.networks import FeatureNet, build_network
from dphpo.io import atomic_open, file_sha256, write_json

CHECKPOINT_FORMAT = "dphpo.pretrained/1"


def checkpoint_path(name: str) -> str:
    """Where the workflow writes the checkpoint of `pretraining.<name>` (relative to the workdir)."""
    return layout.path(layout.PRETRAINED_CHECKPOINT, name=name)


def save_checkpoint(checkpoint: dict, path: str | Path, summary_path: str | Path | None = None) -> str:
    """Write the checkpoint atomically (temporary file, then rename); returns its sha256.

    `summary_path`: also write everything but the weights as JSON (with the file's sha256).
    """
    path = Path(path)
    with atomic_open(path) as fh:
        torch.save(checkpoint, fh)
    digest = file_sha256(path)
    if summary_path is not None:
        summary = {k: v for k, v in checkpoint.items() if k != "state_dict"}
        summary["checkpoint_file"] = path.name
        summary["checkpoint_sha256"] = digest
        write_json(summary_path, summary)
    return digest


def load_checkpoint(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"pretrained checkpoint {path} not found: run the `pretrain_public` rule "
                          f"(snakemake {path}) or set extractors.<name>.checkpoint")
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT:
        raise ConfigError(f"{path} is not a dphpo pretrained checkpoint (format {CHECKPOINT_FORMAT})")
    return ckpt


def network_from_checkpoint(ckpt: dict) -> FeatureNet:
    """The pretrained network (head included), weights loaded strictly, in eval mode."""
    model = build_network(ckpt["arch"], int(ckpt["num_classes"]), **dict(ckpt.get("arch_options") or {}))
    model.load_state_dict(ckpt["state_dict"], strict=True)
    return model.eval()
