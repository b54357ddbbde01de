"""Helpers of the loaders that read a published dataset's own files from disk (ImageNet, WILDS,
CIFAR-10.1, CIFAR-10-C/100-C, SQuAD): where the folder is, one image as uint8 RGB, a content checksum.

A dataset's folder is `datasets.<name>.path` when the config sets it, else `data_dir`; either may be
the dataset's folder itself or hold it under its published name (e.g. data/waterbirds_v1.0/).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from dphpo.data.files import files_checksum
from dphpo.errors import DatasetError


def locate(root: Path, folder: str, marker: str, name: str, download: Callable[[], None] | None = None) -> Path:
    """The folder holding `marker`: `root` itself or `root/folder`; `download` (if given) runs once when
    neither holds it. The error names the config keys and the expected layout."""
    root = Path(root)
    for candidate in (root, root / folder):
        if (candidate / marker).exists():
            return candidate
    if download is not None:
        download()
        if (root / folder / marker).exists():
            return root / folder
    raise DatasetError(
        f"datasets.{name}: {marker} not found in {root} or {root / folder}; set datasets.{name}.path (or data_dir) "
        f"to the folder holding {folder}/{marker} in its published layout (docs: config/README.md, 'Paper datasets')"
    )


def read_rgb(path: Path, size: tuple[int, int] | None, key: str) -> np.ndarray:
    """One image as uint8 (H, W, 3), resized (bilinear) to `size` = (H, W) when given."""
    try:
        with Image.open(path) as im:
            im = im.convert("RGB")
            if size is not None and im.size != (size[1], size[0]):
                im = im.resize((size[1], size[0]), Image.BILINEAR)
            return np.asarray(im, dtype=np.uint8)
    except FileNotFoundError:
        raise DatasetError(f"{key}: image {path} is missing (listed in the dataset's metadata)") from None
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise DatasetError(f"{key}: cannot read image {path} ({exc})") from None


def files_digest(root: Path, relative: Sequence[str]) -> str:
    """The content checksum of the listed files (paths relative to `root`): `files_checksum`, the one
    the user's own data gets too (names and bytes, never location or mtimes)."""
    return files_checksum(Path(root), [Path(root) / rel for rel in relative])
