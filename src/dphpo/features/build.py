"""Build one feature cache: dataset x extractor -> results/features/{dataset}/{extractor}.h5."""

from __future__ import annotations

import logging
import time
from typing import Any

import torch

from dphpo.data import DATASETS, load_dataset
from dphpo.data.files import dataset_options, dataset_spec
from dphpo.data.registry import dataset_download
from dphpo.device import choose_device
from dphpo.errors import ConfigError, DatasetError
from dphpo.features.cache import read_cache_attrs, write_feature_cache
from dphpo.features.extractors import check_modality, get_extractor
from dphpo.features.overlap import check_public_checksum

log = logging.getLogger(__name__)

# what identifies the subset a cache holds: subset_rule names the per-record rule (dphpo.data.subsets),
# so a cache of another rule (the old positional draws, which lack it) is rebuilt, never reused
#: `read` only where the config sets how records are read (`dataset_options`)
DATASET_OPTION_KEYS = ("max_train", "max_test", "subset_seed", "subset_rule", "read", "public_n_train")


def extractor_spec(config: dict, extractor: str) -> dict:
    defined = config.get("extractors") or {}
    if extractor not in defined:
        raise ConfigError(
            f"extractors.{extractor} is not defined in the config; defined extractors: "
            f"{', '.join(sorted(defined)) or '(none)'}"
        )
    return defined[extractor]


def expected_attrs(dataset: str, extractor: str, config: dict) -> dict[str, Any]:
    """Attributes a cache built from `config` must carry (usable as `load_feature_cache(expect=...)`)."""
    opts = dataset_options(config, dataset)
    return {"dataset": dataset, "extractor": extractor, "extractor_spec": extractor_spec(config, extractor)} | {
        key: opts[key] for key in DATASET_OPTION_KEYS if key in opts}


def build_feature_cache(dataset: str, extractor: str, config: dict, out_path, *, device="auto",
                        progress: bool = True, checkpoint=None) -> dict:
    """Load `dataset`, extract train and test features with `extractor`, write the cache; return its attrs.

    `checkpoint`: where the `pretrained_public` checkpoint is (the rule's input, so the workflow also
    works as a Snakemake `module` with a path prefix); default: the extractor's `checkpoint` key or
    `dphpo.features.checkpoint.checkpoint_path`.
    """
    data_spec = dataset_spec(config, dataset)
    if data_spec is None:
        raise DatasetError(f"unknown dataset {dataset!r}; known datasets: {', '.join(sorted(DATASETS))}")
    configured = extractor_spec(config, extractor)  # what the cache records and every consumer expects
    spec = {**configured, "checkpoint": str(checkpoint)} if checkpoint else configured  # its file: checkpoint_sha256
    ext = get_extractor(extractor, spec)
    check_modality(ext, dataset, data_spec.modality)
    opts = dataset_options(config, dataset)
    dev = choose_device(device)

    t0 = time.perf_counter()
    download = dataset_download(config, dataset)
    try:
        ds = load_dataset(dataset, config.get("data_dir", "data"), max_train=opts["max_train"],
                          max_test=opts["max_test"], subset_seed=opts["subset_seed"], download=download,
                          spec=data_spec)
    except DatasetError as err:
        if download:
            raise
        raise DatasetError(f"{err}\n(datasets.{dataset}.download is false: no download was attempted)") from None
    t_load = time.perf_counter() - t0
    # the realized subset sizes are private: this job log and the cache (internal) hold them, no release does
    log.info("%s: %d train / %d test (%s) loaded in %.1f s", dataset, ds.n_train, ds.n_test, ds.source, t_load)
    # by content too: the public data under another name (the same loader, the same checksum) is refused; a copy
    # in another form (its images as files of a folder) has another checksum and is not detected
    if ext.kind == "pretrained_public":
        check_public_checksum(ext.attrs(), ds, f"extract_features {dataset} with {extractor}")

    batch_size = int(spec.get("batch_size") or ext.default_batch_size)
    t1 = time.perf_counter()
    x_train = ext.extract(ds.train_inputs, device=dev, batch_size=batch_size, progress=progress)
    x_test = ext.extract(ds.test_inputs, device=dev, batch_size=batch_size, progress=progress)
    t_extract = time.perf_counter() - t1
    n = ds.n_train + ds.n_test
    log.info("%s on %s: %s + %s features in %.1f s (%.0f inputs/s, device %s, %d threads)", extractor, dataset,
             x_train.shape, x_test.shape, t_extract, n / max(t_extract, 1e-9), dev, torch.get_num_threads())

    attrs = dict(ext.attrs()) | ext.precision_attrs(dev)
    attrs.update(
        extractor=extractor,
        extractor_spec=configured,
        dataset=dataset,
        dataset_checksum=ds.checksum,
        dataset_source=ds.source,
        dataset_license=ds.license,
        dataset_modality=ds.modality,
        classes=ds.classes,
        **{key: opts[key] for key in DATASET_OPTION_KEYS if key in opts},
        device=str(dev),
        torch_threads=torch.get_num_threads(),
        extract_seconds=round(t_extract, 3),
    )
    write_feature_cache(out_path, x_train=x_train, y_train=ds.train_labels, x_test=x_test, y_test=ds.test_labels,
                        num_classes=ds.num_classes, attrs=attrs)
    log.info("wrote %s", out_path)
    return read_cache_attrs(out_path)
