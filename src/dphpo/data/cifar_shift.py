"""The CIFAR test sets under distribution shift of Table 5, read from their published .npy files.

- CIFAR-10.1 v6 (Recht et al. 2019): CIFAR-10.1/cifar10.1_v6_data.npy (uint8, N x 32 x 32 x 3,
  N = 2,000) and cifar10.1_v6_labels.npy (CIFAR-10's class indices).
- CIFAR-10-C / CIFAR-100-C (Hendrycks & Dietterich 2019): CIFAR-10-C/<corruption>.npy (uint8,
  50,000 x 32 x 32 x 3: severities 1..5, 10,000 images each, in that order) and labels.npy.

Test-only sets: no training split. Panda et al. evaluate "the average severity of the 'gaussian blur'
corruption": every severity at once (each 10,000 images, so the accuracy over all 50,000 is the mean
over severities); `severities` selects any of the five.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dphpo.data.dataset import make_dataset
from dphpo.data.local_files import files_digest, locate
from dphpo.errors import DatasetError

CIFAR101 = {"folder": "CIFAR-10.1", "data": "cifar10.1_v6_data.npy", "labels": "cifar10.1_v6_labels.npy"}
CORRUPTED = {"cifar10": ("CIFAR-10-C", 10), "cifar100": ("CIFAR-100-C", 100)}
PER_SEVERITY = 10_000
SEVERITIES = (1, 2, 3, 4, 5)
PAPER_CORRUPTION = "gaussian_blur"


def _load(path: Path, key: str) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise DatasetError(f"{key}: cannot read {path} as .npy ({exc})") from None


def _images(x: np.ndarray, key: str, path: Path) -> np.ndarray:
    if x.dtype != np.uint8 or x.ndim != 4 or x.shape[1:] != (32, 32, 3):
        raise DatasetError(f"{key}: {path.name} must be uint8 (N, 32, 32, 3), got {x.dtype} {x.shape}")
    return x


def _no_train(x: np.ndarray) -> np.ndarray:
    return np.zeros((0, *x.shape[1:]), dtype=np.uint8)


def load_cifar10_1(root: Path, download: bool = False):
    key = "datasets.cifar10_1"
    folder = locate(root, CIFAR101["folder"], CIFAR101["data"], "cifar10_1")
    x = _images(_load(folder / CIFAR101["data"], key), key, folder / CIFAR101["data"])
    y = _load(folder / CIFAR101["labels"], key).astype(np.int64)
    return make_dataset("cifar10_1", "image", _no_train(x), np.zeros(0, np.int64), x, y, num_classes=10,
                        source="CIFAR-10.1 v6 (test only)", checksum=files_digest(folder, [CIFAR101["data"], CIFAR101["labels"]]))


def load_cifar_c(base: str, root: Path, download: bool = False, corruption: str = PAPER_CORRUPTION,
                 severities=SEVERITIES):
    """`base`-C: one corruption at the chosen severities (1..5), test only."""
    folder_name, num_classes = CORRUPTED[base]
    name, key = f"{base}_c", f"datasets.{base}_c"
    severities = tuple(int(s) for s in severities)
    if not severities or any(s not in SEVERITIES for s in severities) or len(set(severities)) != len(severities):
        raise DatasetError(f"{key}.severities: distinct values among 1..5, got {list(severities)}")
    folder = locate(root, folder_name, "labels.npy", name)
    path = folder / f"{corruption}.npy"
    if not path.exists():
        known = sorted(p.stem for p in folder.glob("*.npy") if p.stem != "labels")
        raise DatasetError(f"{key}.corruption: {path} does not exist; corruptions here: {', '.join(known) or '(none)'}")
    x = _images(np.load(path, mmap_mode="r", allow_pickle=False), key, path)
    y = _load(folder / "labels.npy", key)
    if len(x) != 5 * PER_SEVERITY or len(y) != len(x):
        raise DatasetError(f"{key}: {path.name} has {len(x)} images and labels.npy {len(y)} labels; expected 50,000 each")
    idx = np.concatenate([np.arange((s - 1) * PER_SEVERITY, s * PER_SEVERITY) for s in severities])
    x_test = np.ascontiguousarray(x[idx])
    return make_dataset(name, "image", _no_train(x_test), np.zeros(0, np.int64), x_test, y[idx].astype(np.int64),
                        num_classes=num_classes,
                        source=f"{folder_name} {corruption}, severities {', '.join(map(str, severities))} (test only)",
                        checksum=files_digest(folder, [path.name, "labels.npy"]))
