"""Datasets: a registry of loaders returning uint8 images or texts with int64 labels.

>>> from dphpo.data import load_dataset
>>> ds = load_dataset("digits")            # doctest: +SKIP
"""

from dphpo.data.registry import (
    DATASETS,
    SPLIT_SEED,
    TEST_FRACTION,
    Dataset,
    DatasetSpec,
    content_checksum,
    load_dataset,
    split_population,
    subset,
)

__all__ = [
    "DATASETS",
    "SPLIT_SEED",
    "TEST_FRACTION",
    "Dataset",
    "DatasetSpec",
    "content_checksum",
    "load_dataset",
    "split_population",
    "subset",
]
