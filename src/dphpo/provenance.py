"""Provenance attached to every artifact: config hash, seeds, package versions, checksums."""

from __future__ import annotations

import hashlib
import json
import platform
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


def package_versions(names: tuple[str, ...] = TRACKED_PACKAGES) -> dict[str, str | None]:
    versions: dict[str, str | None] = {"python": platform.python_version()}
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


def sha256_file(path: str | Path, chunk_bytes: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_bytes(*chunks: bytes) -> str:
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk)
    return digest.hexdigest()


def provenance(config: Any = None, **extra: Any) -> dict[str, Any]:
    """The provenance block of a result file."""
    block: dict[str, Any] = {"package_versions": package_versions()}
    if config is not None:
        block["config_hash"] = config_hash(config)
    block.update(extra)
    return block
