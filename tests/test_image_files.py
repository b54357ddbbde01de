"""Images on disk (dphpo.data.image_files.ImageFiles): ImageNet is read a batch at a time, with the same
pixels, checksums, per-record subsets and features as the whole array held in memory."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from dphpo.data import dataset as dataset_mod
from dphpo.data.image_files import ImageFiles, image_batches
from dphpo.data.local_files import files_digest, read_rgb
from dphpo.data.registry import bound_spec, load_dataset
from dphpo.errors import DatasetError
from dphpo.features.extractors import TorchImageExtractor

SIZE = (5, 4)
WNIDS = ["n01440764", "n01443537", "n01484850"]


def _imagenet(root, n_per_class: int = 7):
    rng = np.random.default_rng(0)
    files = {}
    for split in ("train", "val"):
        for wnid in WNIDS:
            for i in range(n_per_class):
                path = root / "imagenet" / split / wnid / f"{split}_{i}.JPEG"
                path.parent.mkdir(parents=True, exist_ok=True)
                Image.fromarray(rng.integers(0, 256, (9, 7, 3), dtype=np.uint8)).save(path, format="PNG")
                files.setdefault(split, []).append(path)
    return files


def _load(root):
    cfg = {"data_dir": str(root), "datasets": {"imagenet": {"image_size": list(SIZE)}}}
    return load_dataset("imagenet", root, spec=bound_spec(cfg, "imagenet"))


def _in_memory(images: ImageFiles) -> np.ndarray:
    return np.stack([read_rgb(f, images.size, images.key) for f in images.files])


def test_imagenet_stays_on_disk_and_decodes_what_is_indexed(tmp_path):
    files = _imagenet(tmp_path)
    ds = _load(tmp_path)
    x = ds.train_inputs
    assert isinstance(x, ImageFiles) and isinstance(ds.test_inputs, ImageFiles)
    assert x.shape == (21, *SIZE, 3) and x.ndim == 4 and x.dtype == np.uint8 and len(x) == 21
    full = _in_memory(x)
    assert np.array_equal(np.asarray(x), full) and np.asarray(x, dtype=np.float32).dtype == np.float32
    assert np.array_equal(x[3:11], full[3:11]) and np.array_equal(x[4], full[4])
    assert np.array_equal(x[np.array([9, 2, 17])], full[[9, 2, 17]])
    assert np.array_equal(x[:, 0, 1], full[:, 0, 1]) and np.array_equal(x[2, 1], full[2, 1])  # numpy's tuple indexing
    assert np.array_equal(x[..., 0], full[..., 0]) and np.array_equal(x[[1, 3], 2:], full[[1, 3], 2:])
    mask = np.arange(21) % 3 == 0
    assert np.array_equal(x[mask], full[mask]) and np.array_equal(np.asarray(x.subset(mask)), full[mask])
    # the dataset checksum is that of the files read (as before), never of a decoded pass
    relative = [f.relative_to(tmp_path / "imagenet").as_posix() for s in ("train", "val") for f in files[s]]
    assert ds.checksum == files_digest(tmp_path / "imagenet", relative)


def test_batches_decode_ahead_and_match_slices(tmp_path):
    _imagenet(tmp_path)
    x = _load(tmp_path).train_inputs
    full = _in_memory(x)
    got = list(image_batches(x, 8))
    assert [len(b) for b in got] == [8, 8, 5] and np.array_equal(np.concatenate(got), full)
    assert [len(b) for b in image_batches(full, 8)] == [8, 8, 5]  # an array: its own slices
    assert list(image_batches(x.subset(np.array([], dtype=int)), 8)) == []


def test_the_content_checksum_and_per_record_subsets_equal_the_in_memory_ones(tmp_path):
    _imagenet(tmp_path, n_per_class=12)
    ds = _load(tmp_path)
    full = _in_memory(ds.train_inputs)
    assert dataset_mod.content_checksum(ds.train_inputs, ds.train_labels, ds.test_inputs, ds.test_labels) == \
        dataset_mod.content_checksum(full, ds.train_labels, _in_memory(ds.test_inputs), ds.test_labels)
    on_disk = dataset_mod.subset(ds, max_train=12, seed=3, public_n_train=36)
    in_memory = dataset_mod.subset(dataset_mod.replace(ds, train_inputs=full), max_train=12, seed=3, public_n_train=36)
    assert isinstance(on_disk.train_inputs, ImageFiles) and 0 < len(on_disk.train_inputs) < 36
    assert np.array_equal(np.asarray(on_disk.train_inputs), in_memory.train_inputs)
    assert np.array_equal(on_disk.train_labels, in_memory.train_labels) and on_disk.source == in_memory.source


class _SmallNet(TorchImageExtractor):
    kind = "test_small_net"

    def __init__(self):
        super().__init__("small")
        self.resolution = 8

    def build_model(self) -> torch.nn.Module:
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                                   torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())


class _NoWholeArray(ImageFiles):
    def __array__(self, dtype=None, copy=None):
        raise AssertionError("extraction materialized every image")


def test_extraction_streams_and_gives_the_in_memory_features(tmp_path):
    _imagenet(tmp_path)
    x = _load(tmp_path).train_inputs
    streamed = _SmallNet().extract(_NoWholeArray(x.files, x.size, x.key), batch_size=4, progress=False)
    held = _SmallNet().extract(_in_memory(x), batch_size=4, progress=False)
    assert streamed.shape == (21, 4) and np.array_equal(streamed, held)


def test_an_unreadable_file_names_the_key_and_the_file_when_its_batch_is_read(tmp_path):
    files = _imagenet(tmp_path)
    files["train"][5].write_bytes(b"not an image")
    x = _load(tmp_path).train_inputs  # listing is lazy: nothing decoded yet
    assert x[:5].shape == (5, *SIZE, 3)
    with pytest.raises(DatasetError, match=r"datasets.imagenet: cannot read image .*train_5.JPEG"):
        list(image_batches(x, 4))
