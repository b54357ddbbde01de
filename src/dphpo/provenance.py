"""Provenance attached to every artifact: config hash, seeds, package versions, checksums."""

from __future__ import annotations

import functools
import hashlib
import json
import platform
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

TRACKED_PACKAGES = (
    "dphpo",
    "torch",
    "torchvision",
    "timm",
    "numpy",
    "scipy",
    "h5py",
    "opacus",
    "prv-accountant",
    "dp-accounting",
    "sentence-transformers",
    "snakemake",
)


@functools.lru_cache(maxsize=1)
def source_sha256() -> str:
    """sha256 over the dphpo package's source files (relative path and bytes of each .py, sorted): which
    code made a result, where the version number alone ("0.1.0") cannot tell."""
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


#: The checksums of private data a trainer's provenance holds (a feature or hidden-state cache's
#: content, a dataset's records): exact functions of the data, released only as keyed MACs.
DATA_CHECKSUM_KEYS = ("content_sha256", "dataset_checksum")


def data_checksums(block: Any) -> list[str]:
    """Every DATA_CHECKSUM_KEYS value anywhere in a provenance block, sorted, each once."""
    found: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, Mapping):
            for key, item in value.items():
                if key in DATA_CHECKSUM_KEYS and isinstance(item, str):
                    found.add(item)
                else:
                    walk(item)
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item)

    walk(block)
    return sorted(found)


def package_versions(names: tuple[str, ...] = TRACKED_PACKAGES) -> dict[str, str | None]:
    versions: dict[str, str | None] = {"python": platform.python_version(), "dphpo_source_sha256": source_sha256()}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def config_hash(config: Any) -> str:
    """sha256 of the canonical JSON form of a (sub-)config: same settings, same hash."""
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def provenance(config: Any = None, **extra: Any) -> dict[str, Any]:
    """The provenance block of a result file."""
    block: dict[str, Any] = {"package_versions": package_versions()}
    if config is not None:
        block["config_hash"] = config_hash(config)
    block.update(extra)
    return block
