"""The HDF5 feature cache: the expensive, reusable artifact between extraction and training.

Layout (format_version 3)::

    /train/features  float32 (N_train, D), chunked (min(N, 4096), D), uncompressed
    /train/labels    int64   (N_train,)
    /test/features   float32 (N_test, D)
    /test/labels     int64   (N_test,)
    root attributes  provenance: extractor attrs, dataset name/checksum/source, num_classes,
                     n_train, n_test, feature_dim, package_versions, created_utc,
                     format_version, content_sha256

Attribute values that are not plain strings/numbers/booleans (dicts, lists, None) are stored as
JSON strings; their names are listed in the attribute `json_attrs`, and `read_cache_attrs`
decodes them again. `content_sha256` is the sha256 over the attributes that change results
(`HASHED_ATTRS`: the class count that sizes every model, and what each result's provenance copies
from the cache) as canonical JSON, then the four arrays in the order train features, train labels,
test features, test labels, each preceded by a small header `name|dtype|shape|` and given as
little-endian C-order bytes. It is computed at write time and checked on every load, so editing
an array or one of those attributes is refused. Timings, thread counts and dates are left out:
the same features built twice hash the same. (Format 1 hashed the arrays only.)

Files are written to a temporary name and renamed (one writer per file) and opened read-only
without HDF5 file locking (which fails on some shared filesystems).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch

from dphpo.errors import FeatureCacheError
from dphpo.io import atomic_path
from dphpo.provenance import package_versions

FORMAT_VERSION = 3
# Attributes inside content_sha256: `num_classes` sizes the model; the others go into every
# result's provenance (study.provenance) or are checked against the config (expected_attrs):
# `public_dataset` (the data an extractor was pretrained on without noise: a bundle's ε is ∞ when it
# is private) and the checkpoint's hash (what the features were computed from). Format 3 added these
# two. The compute dtype stays out: it names the device (bf16 on a GPU under `auto`, even for raw
# pixels, which no arithmetic touches), and features computed in another dtype differ in their arrays.
HASHED_ATTRS = ("num_classes", "dataset", "dataset_checksum", "extractor", "max_train", "max_test",
                "subset_seed", "subset_rule", "upstream_privacy", "public_dataset", "checkpoint_sha256")
CHUNK_ROWS = 4096
SPLITS = ("train", "test")
REQUIRED_ATTRS = ("num_classes", "n_train", "n_test", "feature_dim", "content_sha256", "format_version")


@dataclass
class FeatureSet:
    x_train: torch.Tensor  # float32 (N, D)
    y_train: torch.Tensor  # int64
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    attrs: dict
    checksum: str  # = attrs["content_sha256"]
    path: str

    @property
    def feature_dim(self) -> int:
        return int(self.x_train.shape[1])

    @property
    def device(self) -> torch.device:
        return self.x_train.device

    def to(self, device) -> FeatureSet:
        device = torch.device(device)
        return replace(
            self,
            x_train=self.x_train.to(device),
            y_train=self.y_train.to(device),
            x_test=self.x_test.to(device),
            y_test=self.y_test.to(device),
        )


# --------------------------------------------------------------------------------------------
# hashing and attribute encoding


def _as_numpy(a, dtype) -> np.ndarray:
    if isinstance(a, torch.Tensor):
        a = a.detach().cpu().numpy()
    return np.ascontiguousarray(a, dtype=np.dtype(dtype).newbyteorder("<"))


def content_sha256(x_train, y_train, x_test, y_test, attrs: dict | None = None) -> str:
    """sha256 over `HASHED_ATTRS` of `attrs` and the four arrays (byte layout: module docstring)."""
    digest = hashlib.sha256()
    attrs = attrs or {}
    # subset_rule joined HASHED_ATTRS with the per-record subsets: a cache written before lacks it and
    # still verifies, and expected_attrs refuses it by name ("'subset_rule' expected ..."), so it is rebuilt
    hashed = {key: _normalize(attrs.get(key)) for key in HASHED_ATTRS if key != "subset_rule" or key in attrs}
    digest.update(f"attrs|{json.dumps(hashed, sort_keys=True)}|".encode())
    for name, arr, dtype in (("train/features", x_train, np.float32), ("train/labels", y_train, np.int64),
                             ("test/features", x_test, np.float32), ("test/labels", y_test, np.int64)):
        arr = _as_numpy(arr, dtype)
        digest.update(f"{name}|{arr.dtype.str}|{arr.shape}|".encode())
        digest.update(arr.reshape(-1).view(np.uint8).data if arr.size else b"")
    return digest.hexdigest()


def _encode_attr(key: str, value: Any) -> tuple[Any, bool]:
    """(value to store, stored as JSON?)"""
    if isinstance(value, (np.generic,)):
        value = value.item()
    if isinstance(value, Path):
        value = str(value)
    if isinstance(value, bool):
        return np.bool_(value), False
    if isinstance(value, int):
        return np.int64(value), False
    if isinstance(value, float):
        if not math.isfinite(value):
            return json.dumps(value), True
        return np.float64(value), False
    if isinstance(value, str):
        return value, False
    try:
        return json.dumps(value, sort_keys=True), True
    except TypeError as exc:
        raise TypeError(f"feature cache attribute {key!r}: cannot store a {type(value).__name__}") from exc


def _decode_attr(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _decode_attrs(raw) -> dict[str, Any]:
    attrs = {k: _decode_attr(v) for k, v in raw.items()}
    json_keys = json.loads(attrs.pop("json_attrs", "[]"))
    for k in json_keys:
        if k in attrs:
            attrs[k] = json.loads(attrs[k])
    return attrs


def _normalize(value: Any) -> Any:
    """Canonical form for comparing an expected value with a stored one."""
    if isinstance(value, (np.generic,)):
        value = value.item()
    if isinstance(value, Path):
        value = str(value)
    try:
        return json.loads(json.dumps(value, sort_keys=True))
    except TypeError:
        return str(value)


# --------------------------------------------------------------------------------------------
# write


def write_feature_cache(path, *, x_train, y_train, x_test, y_test, num_classes: int, attrs: dict) -> str:
    """Write a feature cache atomically; returns its content sha256.

    `attrs` holds the provenance (extractor attrs, dataset name/checksum/source, ...). The shape
    attributes (`n_train`, `n_test`, `feature_dim`, `num_classes`), `content_sha256` and
    `format_version` are always set from the arrays; `package_versions` and `created_utc` are
    filled in unless given.
    """
    x_train, x_test = _as_numpy(x_train, np.float32), _as_numpy(x_test, np.float32)
    y_train, y_test = _as_numpy(y_train, np.int64), _as_numpy(y_test, np.int64)
    num_classes = int(num_classes)
    if x_train.ndim != 2 or x_test.ndim != 2 or x_train.shape[1] != x_test.shape[1]:
        raise ValueError(f"features must be 2-D with the same width, got {x_train.shape} and {x_test.shape}")
    for split, x, y in (("train", x_train, y_train), ("test", x_test, y_test)):
        if y.ndim != 1 or len(y) != len(x):
            raise ValueError(f"{split}: {len(x)} feature rows but labels of shape {y.shape}")
        if len(y) and (y.min() < 0 or y.max() >= num_classes):
            raise ValueError(f"{split}: labels outside 0..{num_classes - 1}")
        if not np.isfinite(x).all():
            raise ValueError(f"{split}: features contain NaN or inf")
    meta: dict[str, Any] = {"package_versions": package_versions(),
                            "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    meta.update(attrs or {})
    meta.update(num_classes=num_classes, n_train=len(y_train), n_test=len(y_test),
                feature_dim=int(x_train.shape[1]), format_version=FORMAT_VERSION)
    digest = content_sha256(x_train, y_train, x_test, y_test, meta)
    meta["content_sha256"] = digest

    with atomic_path(path) as tmp:
        with h5py.File(tmp, "w") as f:
            for split, x, y in (("train", x_train, y_train), ("test", x_test, y_test)):
                g = f.create_group(split)
                chunks = (min(len(x), CHUNK_ROWS), x.shape[1]) if len(x) and x.shape[1] else None
                g.create_dataset("features", data=x, dtype="<f4", chunks=chunks)
                g.create_dataset("labels", data=y, dtype="<i8")
            json_keys = []
            for key, value in meta.items():
                stored, is_json = _encode_attr(key, value)
                f.attrs[key] = stored
                if is_json:
                    json_keys.append(key)
            f.attrs["json_attrs"] = json.dumps(sorted(json_keys))
        tmp.chmod(0o644)
    return digest


# --------------------------------------------------------------------------------------------
# read


def _missing(path) -> FeatureCacheError:
    return FeatureCacheError(f"missing feature cache {path}: run `snakemake {path}`")


def _corrupt(path, why: str) -> FeatureCacheError:
    return FeatureCacheError(f"corrupt feature cache {path}: {why}; delete it and rerun")


def _open(path) -> h5py.File:
    if not Path(path).is_file():
        raise _missing(path)
    try:
        return h5py.File(path, "r", locking=False)
    except OSError as exc:
        raise _corrupt(path, f"cannot open it as HDF5 ({exc})") from exc


def read_cache_attrs(path) -> dict:
    """The root attributes of a cache (JSON-valued ones decoded), without reading the arrays."""
    with _open(path) as f:
        try:
            return _decode_attrs(f.attrs)
        except (OSError, ValueError) as exc:
            raise _corrupt(path, f"unreadable attributes ({exc})") from exc


def check_expectations(path, attrs: dict, expect: dict | None) -> None:
    """FeatureCacheError naming the first key whose stored value differs from the expected one."""
    for key, want in (expect or {}).items():
        found = attrs.get(key, "<missing>")
        if key not in attrs or _normalize(found) != _normalize(want):
            raise FeatureCacheError(
                f"feature cache {path} does not match what was asked for: attribute {key!r} expected "
                f"{want!r}, found {found!r}; delete it and rerun to rebuild it"
            )


def load_feature_cache(path, *, expect: dict | None = None, device="cpu") -> FeatureSet:
    """Load and verify a cache (datasets, shapes, label range, content sha256, `expect`)."""
    with _open(path) as f:
        try:
            attrs = _decode_attrs(f.attrs)
        except (OSError, ValueError) as exc:
            raise _corrupt(path, f"unreadable attributes ({exc})") from exc
        missing = [k for k in REQUIRED_ATTRS if k not in attrs]
        missing += [f"{s}/{d}" for s in SPLITS for d in ("features", "labels") if f"{s}/{d}" not in f]
        if missing:
            raise _corrupt(path, f"missing {', '.join(missing)}")
        if attrs["format_version"] != FORMAT_VERSION:
            raise FeatureCacheError(
                f"feature cache {path} has format_version {attrs['format_version']}, this version of dphpo "
                f"reads {FORMAT_VERSION}; delete it and rerun to rebuild it"
            )
        check_expectations(path, attrs, expect)
        try:
            arrays = {f"{s}/{d}": f[f"{s}/{d}"][...] for s in SPLITS for d in ("features", "labels")}
        except (OSError, ValueError, KeyError) as exc:
            raise _corrupt(path, f"cannot read the arrays ({exc})") from exc

    x_train, y_train = arrays["train/features"], arrays["train/labels"]
    x_test, y_test = arrays["test/features"], arrays["test/labels"]
    num_classes = int(attrs["num_classes"])
    shape_ok = (
        x_train.ndim == 2 and x_test.ndim == 2 and y_train.ndim == 1 and y_test.ndim == 1
        and x_train.shape == (attrs["n_train"], attrs["feature_dim"])
        and x_test.shape == (attrs["n_test"], attrs["feature_dim"])
        and len(y_train) == attrs["n_train"] and len(y_test) == attrs["n_test"]
    )
    if not shape_ok:
        raise _corrupt(path, f"inconsistent shapes: train {x_train.shape}/{y_train.shape}, test "
                             f"{x_test.shape}/{y_test.shape}, attrs n_train={attrs['n_train']} "
                             f"n_test={attrs['n_test']} feature_dim={attrs['feature_dim']}")
    if x_train.dtype != np.float32 or x_test.dtype != np.float32 or y_train.dtype.kind != "i" or y_test.dtype.kind != "i":
        raise _corrupt(path, f"unexpected dtypes {x_train.dtype}, {y_train.dtype}, {x_test.dtype}, {y_test.dtype}")
    digest = content_sha256(x_train, y_train, x_test, y_test, attrs)
    if digest != attrs["content_sha256"]:
        raise _corrupt(path, f"content sha256 {digest} (arrays and the attributes {', '.join(HASHED_ATTRS)}) "
                             f"differs from the stored {attrs['content_sha256']}")
    for split, y in (("train", y_train), ("test", y_test)):
        if len(y) and (y.min() < 0 or y.max() >= num_classes):
            raise _corrupt(path, f"{split} labels outside 0..{num_classes - 1}")

    device = torch.device(device)
    return FeatureSet(
        x_train=torch.from_numpy(x_train).to(device),
        y_train=torch.from_numpy(y_train.astype(np.int64, copy=False)).to(device),
        x_test=torch.from_numpy(x_test).to(device),
        y_test=torch.from_numpy(y_test.astype(np.int64, copy=False)).to(device),
        num_classes=num_classes,
        attrs=attrs,
        checksum=str(attrs["content_sha256"]),
        path=str(path),
    )
