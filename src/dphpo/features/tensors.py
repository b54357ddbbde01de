"""The torch plumbing shared by the extractors, public pretraining and the private stage: the device,
the arithmetic (autocast), uint8 images to normalized tensors, state-dict hashes, progress bars and
the accuracy of a classifier on images."""

from __future__ import annotations

import hashlib
import logging
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from dphpo.errors import ConfigError
from dphpo.features.networks import FeatureNet

logger = logging.getLogger(__name__)

EVAL_BATCH = 512


def state_dict_sha256(state_dict: dict[str, torch.Tensor]) -> str:
    """sha256 over the tensors of a state dict: sorted keys, each with dtype, shape and raw bytes."""
    digest = hashlib.sha256()
    for key in sorted(state_dict):
        t = state_dict[key]
        if not isinstance(t, torch.Tensor):
            continue
        t = t.detach().to("cpu").contiguous()
        digest.update(f"{key}|{t.dtype}|{tuple(t.shape)}|".encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def progress_bar(iterable, *, desc: str, disable: bool = False, unit: str = "batch"):
    """tqdm over batches; refreshes every 0.1 s on a terminal, every 10 s when stderr is a log file."""
    try:
        interactive = sys.stderr.isatty()
    except (AttributeError, ValueError):
        interactive = False
    return tqdm(iterable, desc=desc, unit=unit, disable=disable, mininterval=0.1 if interactive else 10.0,
                dynamic_ncols=interactive)


PRECISIONS = ("auto", "float32", "bfloat16")


def autocast_dtype(device: torch.device, precision: str = "auto") -> torch.dtype:
    """The arithmetic of a frozen network: `auto` = bf16 (fp16 where bf16 is unsupported) on CUDA and
    fp32 on the CPU; `float32`; `bfloat16` (on the CPU 2-3x faster where it has AVX512-BF16 or AMX)."""
    if precision not in PRECISIONS:
        raise ConfigError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision == "float32" or (precision == "auto" and device.type != "cuda"):
        return torch.float32
    if precision == "auto" and not torch.cuda.is_bf16_supported():
        return torch.float16
    return torch.bfloat16


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bf16 natively (AVX512-BF16 or AMX); elsewhere torch emulates it."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def _autocast(device: torch.device, precision: str = "auto"):
    """Autocast to `autocast_dtype(device, precision)`; nothing for float32."""
    dtype = autocast_dtype(device, precision)
    if dtype == torch.bfloat16 and device.type == "cpu" and not cpu_has_native_bf16():
        # measured: ~50x slower than float32 on an AVX2-only EPYC (emulated bf16 GEMMs)
        logger.warning("precision: bfloat16 on a CPU without AVX512-BF16/AMX is emulated and far slower than float32")
    return nullcontext() if dtype == torch.float32 else torch.autocast(device.type, dtype=dtype)


def images_to_device(batch: np.ndarray | torch.Tensor, device: torch.device = torch.device("cpu")) -> torch.Tensor:
    """Images as they are (uint8) on `device`; to a GPU from page-locked memory without blocking."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if device.type != "cuda":
        batch = np.ascontiguousarray(batch)
        if not batch.flags.writeable:
            batch = batch.copy()
        return torch.from_numpy(batch).to(device)
    # one host copy, straight into page-locked memory (also from a read-only or memory-mapped array)
    pinned = torch.empty(batch.shape, dtype=torch.from_numpy(np.empty(0, batch.dtype)).dtype, pin_memory=True)
    pinned.numpy()[...] = batch
    return pinned.to(device, non_blocking=True)


def prefetch_to_device(batches: Iterable, device: torch.device) -> Iterator[torch.Tensor]:
    """`images_to_device` of each batch, the next batch's copy queued before this one is handed out.

    On a GPU the copies run on a side stream, so the copy of batch i + 1 overlaps the compute of batch i.
    """
    if device.type != "cuda":
        yield from (images_to_device(b, device) for b in batches)
        return
    copy_stream, compute_stream = torch.cuda.Stream(device), torch.cuda.current_stream(device)

    def ready(staged: tuple[torch.Tensor, torch.cuda.Event]) -> torch.Tensor:
        x, copied = staged
        compute_stream.wait_event(copied)
        x.record_stream(compute_stream)  # its memory, allocated on the copy stream, is in use until then
        return x

    staged = None
    for batch in batches:
        with torch.cuda.stream(copy_stream):
            upcoming = images_to_device(batch, device), copy_stream.record_event()
        if staged is not None:
            yield ready(staged)
        staged = upcoming
    if staged is not None:
        yield ready(staged)


def normalize_images(
    x: torch.Tensor,
    *,
    resolution: int | tuple[int, int] | None,
    mean: Sequence[float] | torch.Tensor,
    std: Sequence[float] | torch.Tensor,
    interpolation: str = "bilinear",
) -> torch.Tensor:
    """uint8 (B, H, W) or (B, H, W, 3) tensor -> normalized float (B, 3, R, R), channels_last, on its device.

    Grey images are replicated to 3 channels; images are resized to `resolution` (no crop: the
    small research datasets are already centred), scaled to [0, 1], then normalized. `mean` and
    `std` may be float32 tensors already on the device (no copy per batch).
    """
    x = x.unsqueeze(1) if x.ndim == 3 else x.permute(0, 3, 1, 2)
    x = x.float().div_(255.0)
    if x.shape[1] == 1:
        x = x.expand(-1, 3, -1, -1)
    if resolution is not None:
        size = (resolution, resolution) if isinstance(resolution, int) else tuple(resolution)
        if tuple(x.shape[-2:]) != size:
            mode = interpolation if interpolation in ("bilinear", "bicubic", "nearest") else "bilinear"
            kw = {} if mode == "nearest" else {"align_corners": False, "antialias": False}
            x = F.interpolate(x, size=size, mode=mode, **kw)
            if mode == "bicubic":
                x = x.clamp_(0.0, 1.0)
    m = torch.as_tensor(mean, dtype=x.dtype, device=x.device).view(1, -1, 1, 1)
    s = torch.as_tensor(std, dtype=x.dtype, device=x.device).view(1, -1, 1, 1)
    x = (x - m) / s
    return x.contiguous(memory_format=torch.channels_last)


def images_to_tensor(
    batch: np.ndarray | torch.Tensor,
    *,
    resolution: int | tuple[int, int] | None,
    mean: Sequence[float],
    std: Sequence[float],
    interpolation: str = "bilinear",
    device: torch.device = torch.device("cpu"),
) -> torch.Tensor:
    """uint8 images (array or tensor, e.g. a dataset already on the GPU) -> `normalize_images` on `device`."""
    return normalize_images(images_to_device(batch, device), resolution=resolution, mean=mean, std=std,
                            interpolation=interpolation)


@torch.no_grad()
def evaluate(model: FeatureNet, images: np.ndarray, labels: np.ndarray, *, resolution: int, mean, std,
             device: torch.device, batch_size: int = EVAL_BATCH) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) of a classifier on uint8 images."""
    model.eval()
    correct, loss_sum = 0, 0.0
    with _autocast(device):
        for start in range(0, len(labels), batch_size):
            x = images_to_tensor(images[start:start + batch_size], resolution=resolution, mean=mean, std=std,
                                 device=device)
            y = torch.from_numpy(labels[start:start + batch_size]).to(device)
            logits = model(x).float()
            loss_sum += float(F.cross_entropy(logits, y, reduction="sum"))
            correct += int((logits.argmax(1) == y).sum())
    n = max(1, len(labels))
    return correct / n, loss_sum / n
