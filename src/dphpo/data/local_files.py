"""Helpers of the loaders that read a published dataset's own files from disk (ImageNet, WILDS,
CIFAR-10.1, CIFAR-10-C/100-C, SQuAD): where the folder is, one image as uint8 RGB, a content checksum
(`files_checksum`, which the user's own files of dphpo.data.files get too).

A dataset's folder is `datasets.<name>.path` when the config sets it, else `data_dir`; either may be
the dataset's folder itself or hold it under its published name (e.g. data/waterbirds_v1.0/).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from dphpo.errors import DatasetError
from dphpo.io import file_sha256, write_text


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


def files_checksum(root: Path, files: Sequence[Path], cache: Path | None = None) -> str:
    """sha256 over (path relative to root, sha256 of the bytes) of each file, in sorted order.

    `cache` (a JSON file) keeps each file's digest beside its size, mtime, inode and ctime, so the
    workflow's parse step, which checksums the data to rerun what an edited file changes, rereads only
    files whose stat changed (a copy that keeps size and mtime, `cp -p` or `rsync -t`, still has a new
    inode or ctime); the checksum itself depends on names and bytes only."""
    known = _read_digest_cache(cache)
    digests, digest = {}, hashlib.sha256()
    for f in sorted(files, key=lambda p: p.relative_to(root).as_posix()):
        rel = f.relative_to(root).as_posix()
        st = f.stat()
        stamp = [st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns]
        entry = known.get(str(f.resolve()))
        file_digest = entry[-1] if entry and entry[:-1] == stamp else file_sha256(f)
        digests[str(f.resolve())] = [*stamp, file_digest]
        digest.update(len(rel).to_bytes(8, "little") + rel.encode() + bytes.fromhex(file_digest))
    if cache is not None and digests != {k: known.get(k) for k in digests}:
        write_text(cache, json.dumps(known | digests, sort_keys=True))
    return digest.hexdigest()


def _read_digest_cache(cache: Path | None) -> dict:
    if cache is None or not cache.exists():
        return {}
    try:
        return json.loads(cache.read_text())
    except (OSError, json.JSONDecodeError):
        return {}  # a damaged cache costs a reread, never a wrong checksum: entries are re-stamped
