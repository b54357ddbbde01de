"""Frozen feature extractors and the HDF5 feature cache."""

from dphpo.features.build import build_feature_cache, expected_attrs, extractor_spec
from dphpo.features.cache import (
    FORMAT_VERSION,
    FeatureSet,
    content_sha256,
    load_feature_cache,
    read_cache_attrs,
    write_feature_cache,
)
from dphpo.features.extractors import (
    EXTRACTOR_KINDS,
    Extractor,
    check_modality,
    get_extractor,
)

__all__ = [
    "EXTRACTOR_KINDS",
    "FORMAT_VERSION",
    "Extractor",
    "FeatureSet",
    "build_feature_cache",
    "check_modality",
    "content_sha256",
    "expected_attrs",
    "extractor_spec",
    "get_extractor",
    "load_feature_cache",
    "read_cache_attrs",
    "write_feature_cache",
]
