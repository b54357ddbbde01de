"""Datasets loaded through torchvision (with `download=True` where a network is available).

Files go to `root` itself, in torchvision's own layout, so an existing torchvision data folder can
be reused by pointing `data_dir` at it. Images are converted to uint8 numpy arrays, (N, H, W) for
grey and (N, H, W, 3) for RGB. EMNIST images are stored transposed in the original files; they are
transposed back to upright here (as they are displayed in the EMNIST paper).
"""

from __future__ import annotations

import socket
from pathlib import Path

import numpy as np

from dphpo.data.dataset import make_dataset
from dphpo.errors import DatasetError

DOWNLOAD_SOCKET_TIMEOUT_S = 30

#: The licenses the datasets publish (the others name none; the registry's specs read them here).
LICENSES: dict[str, str] = {"fashionmnist": "MIT", "emnist": "CC0 1.0"}

# name -> torchvision class, how to build the two splits, where its files live, where to get them
TORCHVISION_SETS: dict[str, dict] = {
    "cifar10": {
        "cls": "CIFAR10", "split_kw": ("train", True, False), "num_classes": 10,
        "files": "cifar-10-python.tar.gz (or its unpacked folder cifar-10-batches-py/)",
        "url": "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
    },
    "cifar100": {
        "cls": "CIFAR100", "split_kw": ("train", True, False), "num_classes": 100,
        "files": "cifar-100-python.tar.gz (or its unpacked folder cifar-100-python/)",
        "url": "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
    },
    "fashionmnist": {
        "cls": "FashionMNIST", "split_kw": ("train", True, False), "num_classes": 10,
        "files": "FashionMNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz",
        "url": "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
    },
    "stl10": {
        "cls": "STL10", "split_kw": ("split", "train", "test"), "num_classes": 10,
        "files": "stl10_binary.tar.gz (or its unpacked folder stl10_binary/)",
        "url": "http://ai.stanford.edu/~acoates/stl10/stl10_binary.tar.gz",
    },
    "emnist": {
        "cls": "EMNIST", "split_kw": ("train", True, False), "extra_kw": {"split": "balanced"},
        "num_classes": 47,
        "files": "EMNIST/raw/gzip.zip (torchvision unpacks it to EMNIST/raw/emnist-balanced-*-ubyte)",
        "url": "https://biometrics.nist.gov/cs_links/EMNIST/gzip.zip",
    },
    "svhn": {
        "cls": "SVHN", "split_kw": ("split", "train", "test"), "num_classes": 10,
        "files": "train_32x32.mat and test_32x32.mat",
        "url": "http://ufldl.stanford.edu/housenumbers/",
    },
}


def _to_numpy_images(ds, name: str) -> tuple[np.ndarray, np.ndarray]:
    data = ds.data
    data = data.numpy() if hasattr(data, "numpy") else np.asarray(data)
    if name in ("stl10", "svhn"):  # (N, 3, H, W) -> (N, H, W, 3)
        data = data.transpose(0, 2, 3, 1)
    if name == "emnist":
        data = data.transpose(0, 2, 1)
    labels = getattr(ds, "targets", None)
    if labels is None:
        labels = ds.labels
    labels = labels.numpy() if hasattr(labels, "numpy") else np.asarray(labels)
    return np.ascontiguousarray(data, dtype=np.uint8), labels.astype(np.int64)


def missing_files_message(name: str, root: Path, exc: BaseException | None, download: bool) -> str:
    info = TORCHVISION_SETS[name]
    why = "download=False" if not download else "the download failed (no network?)"
    return (
        f"could not load {name} with torchvision ({why}: {type(exc).__name__ if exc else ''} {exc}).\n"
        f"Place {info['files']} in {Path(root)}/ (get it from {info['url']}), "
        f"or run once on a machine with a network using download=True and copy {Path(root)}/ over."
    )


def load_torchvision(name: str, root: Path, download: bool = True):
    info = TORCHVISION_SETS[name]
    root = Path(root)
    try:
        from torchvision import datasets
    except ImportError as exc:  # pragma: no cover
        raise DatasetError(f"{name} needs torchvision: pip install torchvision") from exc
    cls = getattr(datasets, info["cls"])
    key, train_val, test_val = info["split_kw"]
    extra = dict(info.get("extra_kw", {}))
    old = socket.getdefaulttimeout()
    socket.setdefaulttimeout(DOWNLOAD_SOCKET_TIMEOUT_S)
    try:
        if download:
            root.mkdir(parents=True, exist_ok=True)
        train = cls(str(root), **{key: train_val}, download=download, **extra)
        test = cls(str(root), **{key: test_val}, download=download, **extra)
    except Exception as exc:  # noqa: BLE001 - torchvision raises RuntimeError, URLError, OSError, ...
        raise DatasetError(missing_files_message(name, root, exc, download)) from exc
    finally:
        socket.setdefaulttimeout(old)
    x_train, y_train = _to_numpy_images(train, name)
    x_test, y_test = _to_numpy_images(test, name)
    classes = list(getattr(train, "classes", []) or []) or None
    extra_note = f", split {extra['split']!r}" if "split" in extra else ""
    return make_dataset(
        name, "image", x_train, y_train, x_test, y_test,
        num_classes=info["num_classes"],
        source=f"torchvision datasets.{info['cls']}{extra_note} ({'download' if download else 'local files'})",
        license=LICENSES.get(name),
        classes=[str(c) for c in classes] if classes else None,
    )
