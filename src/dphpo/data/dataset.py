"""A dataset as every loader returns it: the `Dataset` record, the registry's `DatasetSpec`, the content
checksum, and the two per-record rules every loader shares (`split_population` of data without a split
of their own, `subset`).

The loaders (dphpo.data.mnist, torchvision_sets, wilds_sets, …) build their datasets with
`make_dataset`; dphpo.data.registry imports them and names each one. Every loader returns the *full*
train/test split; `dphpo.data.registry.load_dataset` keeps a per-record subset of it (`subset`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from dphpo.data.image_files import ImageFiles
from dphpo.data.subsets import SUBSET_RULE, class_names, keep_records, split_test, subset_fraction
from dphpo.errors import DatasetError

# Salt of the fixed, documented per-record train/test splits of datasets that ship without one
# (digits, tweets; `split_population`).
SPLIT_SEED = 0
TEST_FRACTION = 0.2
# images decoded at a time to hash ImageFiles
HASH_BATCH = 1024


@dataclass
class Dataset:
    name: str
    modality: str  # "image" or "text"
    train_inputs: np.ndarray | ImageFiles | list[str]  # images: uint8 (N, H, W) grey or (N, H, W, 3) RGB (ImageFiles: on disk)
    train_labels: np.ndarray  # int64
    test_inputs: np.ndarray | ImageFiles | list[str]
    test_labels: np.ndarray
    num_classes: int
    checksum: str  # sha256 over inputs+labels of train+test, before any subsetting
    source: str  # how the data were obtained
    license: str | None = None
    classes: list[str] | None = None

    @property
    def n_train(self) -> int:
        return len(self.train_labels)

    @property
    def n_test(self) -> int:
        return len(self.test_labels)


@dataclass
class DatasetSpec:
    """What the registry knows about a dataset before loading it."""

    name: str
    modality: str
    num_classes: int | None  # None: known once loaded (the user's files without declared `classes`)
    loader: Callable[[Path, bool], Dataset] = field(repr=False)
    description: str = ""
    license: str | None = None
    # The published size of the training split: the public N the mechanism may use (docs/privacy.md).
    public_n_train: int | None = None
    # The published size of the test split (what feature extraction encodes; dphpo.studies.extraction_cost).
    public_n_test: int | None = None
    # `datasets.<name>.<option>` keys the loader takes as keyword arguments (besides `path`)
    options: tuple[str, ...] = ()
    # the test split's evaluation groups (WILDS): root -> (group id per test example, group names)
    groups: Callable[[Path], tuple[np.ndarray, list[str]]] | None = field(default=None, repr=False)


# --------------------------------------------------------------------------------------------
# helpers shared by the loaders


def _hash_array(digest: hashlib._Hash, arr: np.ndarray) -> None:
    arr = np.ascontiguousarray(arr)
    # Canonical little-endian byte order so the checksum does not depend on the platform.
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    digest.update(f"array|{arr.dtype.str}|{arr.shape}|".encode())
    digest.update(arr.tobytes())


def _hash_images(digest: hashlib._Hash, images: ImageFiles) -> None:
    """What `_hash_array` hashes of np.asarray(images), decoded a batch at a time (bounded memory)."""
    digest.update(f"array|{images.dtype.str}|{images.shape}|".encode())
    for batch in images.batches(HASH_BATCH):
        digest.update(batch.tobytes())


def _hash_texts(digest: hashlib._Hash, texts: Sequence[str]) -> None:
    digest.update(f"text|{len(texts)}|".encode())
    for t in texts:
        b = t.encode("utf-8", errors="surrogatepass")
        digest.update(len(b).to_bytes(8, "little"))
        digest.update(b)


def content_checksum(train_inputs, train_labels, test_inputs, test_labels) -> str:
    """sha256 over inputs and labels of both splits (shape/dtype headers included), in that order."""
    digest = hashlib.sha256()
    for part in (train_inputs, train_labels, test_inputs, test_labels):
        if isinstance(part, np.ndarray):
            _hash_array(digest, part)
        elif isinstance(part, ImageFiles):
            _hash_images(digest, part)
        else:
            _hash_texts(digest, list(part))
    return digest.hexdigest()


def make_dataset(
    name: str,
    modality: str,
    train_inputs,
    train_labels,
    test_inputs,
    test_labels,
    *,
    num_classes: int,
    source: str,
    license: str | None = None,
    classes: list[str] | None = None,
    checksum: str | None = None,
) -> Dataset:
    """Build a `Dataset`, normalizing dtypes and computing the content checksum (`checksum`: the
    loader's own, e.g. of the files it read, where computing it from the decoded images would cost a pass)."""
    if modality == "image":  # ImageFiles stay on disk: decoded a batch at a time by whoever reads them
        train_inputs, test_inputs = (x if isinstance(x, ImageFiles) else np.ascontiguousarray(x, dtype=np.uint8)
                                     for x in (train_inputs, test_inputs))
        for part in (train_inputs, test_inputs):
            if part.ndim not in (3, 4) or (part.ndim == 4 and part.shape[-1] != 3):
                raise DatasetError(f"{name}: images must be (N, H, W) or (N, H, W, 3), got {part.shape}")
    elif modality == "text":
        train_inputs = [str(t) for t in train_inputs]
        test_inputs = [str(t) for t in test_inputs]
    else:
        raise DatasetError(f"{name}: unknown modality {modality!r}")
    train_labels = np.ascontiguousarray(train_labels, dtype=np.int64)
    test_labels = np.ascontiguousarray(test_labels, dtype=np.int64)
    for split, x, y in (("train", train_inputs, train_labels), ("test", test_inputs, test_labels)):
        if len(x) != len(y):
            raise DatasetError(f"{name}: {split} has {len(x)} inputs but {len(y)} labels")
        if len(y) and (y.min() < 0 or y.max() >= num_classes):
            raise DatasetError(f"{name}: {split} labels outside 0..{num_classes - 1}")
    return Dataset(
        name=name,
        modality=modality,
        train_inputs=train_inputs,
        train_labels=train_labels,
        test_inputs=test_inputs,
        test_labels=test_labels,
        num_classes=num_classes,
        checksum=checksum or content_checksum(train_inputs, train_labels, test_inputs, test_labels),
        source=source,
        license=license,
        classes=classes,
    )


def take_records(inputs, idx: np.ndarray):
    """The records at index array `idx` of an image array, `ImageFiles` (still on disk) or a list."""
    if isinstance(inputs, ImageFiles):
        return inputs.subset(idx)
    if isinstance(inputs, np.ndarray):
        return inputs[idx]
    return [inputs[i] for i in idx]


def split_population(inputs, labels: np.ndarray, classes: list[str] | None, test_fraction: float = TEST_FRACTION,
                     seed: int = SPLIT_SEED) -> tuple[np.ndarray, np.ndarray]:
    """(train_idx, test_idx) of a dataset that ships without a split (digits, tweets, the user's files
    without test/): each record goes to test by its own content (`dphpo.data.subsets.split_test`, salt
    ("split", seed)), so adding a record moves no other. Both keep the source order: a source sorted by
    class (the tweets CSV) gives class-sorted splits, so never take prefixes (`x[:n]`) as samples.
    Not stratified: each class's test share is test_fraction in expectation."""
    return split_test(inputs, class_names(labels, classes), test_fraction, seed)


def subset(
    ds: Dataset,
    max_train: int | None = None,
    max_test: int | None = None,
    seed: int = 0,
    *,
    public_n_train: int | None = None,
) -> Dataset:
    """About `max_train` training and `max_test` test records, each kept by its own content
    (`dphpo.data.subsets.keep_records`, salts ("train", seed) and ("test", seed)).

    The training share is max_train / `public_n_train`, the split's published size (the registry) or
    the declared `datasets.<name>.public_n_train` (the user's files), never the private count; the test
    share is max_test / the test split's count (test data are public, docs/privacy.md §3). Records keep
    their order; the checksum stays that of the full data. The source names the rule and the public
    sizes, never the realized counts (those are private: internal logs only).
    """
    notes = []
    out = {}
    for split, limit, size in (("train", max_train, public_n_train), ("test", max_test, None)):
        x, y = getattr(ds, f"{split}_inputs"), getattr(ds, f"{split}_labels")
        if limit is None or len(y) == 0:
            out[f"{split}_inputs"], out[f"{split}_labels"] = x, y
            continue
        if split == "test":
            size = len(y)  # public: test data are public
        fraction = subset_fraction(limit, size, f"datasets.{ds.name}.max_{split}")
        if fraction < 1.0:
            keep = np.flatnonzero(keep_records(x, class_names(y, ds.classes), fraction, seed=seed, purpose=split))
            x, y = take_records(x, keep), y[keep]
            notes.append(f"train about {int(limit)} of public size {int(size)}" if split == "train"
                         else f"test about {int(limit)} of the test split")
        out[f"{split}_inputs"], out[f"{split}_labels"] = x, y
    if not notes:
        return ds
    source = f"{ds.source}; per-record subset ({', '.join(notes)}; subset_seed={seed}; {SUBSET_RULE})"
    return replace(ds, source=source, **out)
