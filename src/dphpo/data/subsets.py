"""Per-record subsets and splits: which records of a dataset a study keeps, decided record by record.

A subset or train/test split of private data must not depend on the rest of the data. The old
draws did: `default_rng(seed).choice(len(split), m)` picks by position, so adding one record to the
dataset reshuffled 222 of 500 chosen digits records, one DP step moved by 16.6·C and a claimed ε = 1
was really about 28 (issue #26). Here every record is kept or not by its own content alone:

    keep  ⇔  offset ≤ u(record) < offset + fraction,
    u(record) = HMAC-SHA256(salt, canonical bytes of the record's content and label), read as a number in [0, 1)

(`keep_records`, the one decision function: subsets, train/test assignment and the disjoint
partitions of a corpus are all calls of it with their own salt). The salt is public: the config's
`subset_seed` / `subsample_seed` / `split_seed` and what the draw is for (`purpose`); a per-record
decision needs no secret, since a neighbour D ∪ {z} changes the subset of D by at most the record z,
wherever z sits. No amplification by subsampling is claimed: the subset is a fixed function of the
data, not a random draw the ledger could charge less for.

The fraction is `wanted / public size` (`subset_fraction`), where the public size is the split's
published or declared size (the registry's `public_n_train`, or the config's
`datasets.<name>.public_n_train` for the user's own files), never a count of the private data. So a
subset holds *about* `max_train` records: its realized size varies (binomially, ±√max_train) and is
recorded only in internal logs; a release's normalizer stays the public declared size. Test splits
may be divided by their count: test data are public (docs/privacy.md §3).

Duplicate records (equal content and label) share one decision, so they are kept or dropped
together; that is what per-record membership means and it keeps the multiset difference of two
neighbours' subsets at one record.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from dphpo.data.image_files import ImageFiles, image_batches
from dphpo.errors import DatasetError

#: Names the rule in cache attributes and settings hashes: a cache built by another rule is rebuilt.
SUBSET_RULE = "hmac-sha256-per-record-v1"
_SCALE = 2.0**-53
RECORD_BLOCK = 1024


def _encode(value: Any, write: Callable[[Any], Any]) -> None:
    """Canonical, type-tagged, length-prefixed bytes of `value` (the same on every platform), given to
    `write` in pieces (a list's append, a digest's update: an array is never copied whole)."""
    if value is None:
        write(b"N")
    elif isinstance(value, np.ndarray):
        arr = np.ascontiguousarray(value)
        if arr.dtype.byteorder == ">":
            arr = arr.astype(arr.dtype.newbyteorder("<"))
        write(f"A{arr.dtype.str}{arr.shape}{arr.nbytes}:".encode())
        write(arr.reshape(-1).view(np.uint8))
    elif isinstance(value, (bool, np.bool_)):
        write(b"b1" if value else b"b0")
    elif isinstance(value, (int, np.integer)):
        write(f"i{int(value)};".encode())
    elif isinstance(value, (float, np.floating)):
        write(f"f{float(value).hex()};".encode())
    elif isinstance(value, str):
        data = value.encode("utf-8", "surrogatepass")
        write(f"s{len(data)}:".encode() + data)
    elif isinstance(value, (bytes, bytearray)):
        write(f"y{len(value)}:".encode() + bytes(value))
    elif isinstance(value, (tuple, list)):
        write(f"t{len(value)}:".encode())
        for item in value:
            _encode(item, write)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        _encode((type(value).__name__, *(getattr(value, f.name) for f in dataclasses.fields(value))), write)
    else:
        raise TypeError(f"per-record subsets: cannot encode a record of type {type(value).__name__}")


def record_bytes(record: Any, label: Any = None) -> bytes:
    """The canonical bytes of one record: its content (an array, a text, a sentence pair, a dataclass)
    and its label (a class name, an integer, or None for unlabelled text). Nothing positional enters."""
    out: list[Any] = []
    _encode((record, label), out.append)
    return b"".join(out)


def canonical_sha256(value: Any) -> str:
    """sha256 of `value`'s canonical bytes (`_encode`: type tags and lengths frame every part, so moving a
    text from one split to the other, or splitting one array into two, changes it)."""
    digest = hashlib.sha256()
    _encode(value, digest.update)
    return digest.hexdigest()


def record_uniforms(records: Sequence[Any], labels: Sequence[Any] | None, *, seed: int | str, purpose: str) -> np.ndarray:
    """u(record) in [0, 1) for every record: HMAC-SHA256 keyed by the public salt (purpose, seed),
    its first 53 bits as a binary fraction."""
    n = len(records)
    if labels is not None and len(labels) != n:
        raise DatasetError(f"per-record subset: {n} records but {len(labels)} labels")
    base = hmac.new(f"dphpo-subset|{purpose}|{seed}".encode(), digestmod=hashlib.sha256)
    out = np.empty(n, dtype=np.float64)
    # records on disk are decoded a block at a time (in parallel, one block ahead), not one by one
    rows = (r for block in image_batches(records, RECORD_BLOCK) for r in block) if isinstance(records, ImageFiles) \
        else (records[i] for i in range(n))
    for i, record in enumerate(rows):
        h = base.copy()
        h.update(record_bytes(record, None if labels is None else labels[i]))
        out[i] = (int.from_bytes(h.digest()[:8], "big") >> 11) * _SCALE
    return out


def keep_records(
    records: Sequence[Any],
    labels: Sequence[Any] | None,
    fraction: float,
    *,
    seed: int | str,
    purpose: str,
    offset: float = 0.0,
) -> np.ndarray:
    """The one decision of which records a subset, split or partition holds (module docstring).

    A boolean mask, True for every record with offset ≤ u(record) < offset + fraction. `purpose`
    names the draw ("train", "test", "split", "partition", …) so that draws for different ends are
    independent; `seed` is the config's public seed. fraction ≥ 1 (from offset 0) keeps everything.
    """
    if not (fraction >= 0 and math.isfinite(fraction)):
        raise DatasetError(f"per-record subset: fraction must be a finite number >= 0, got {fraction}")
    if offset <= 0.0 and fraction >= 1.0:
        return np.ones(len(records), dtype=bool)
    if fraction == 0.0:
        return np.zeros(len(records), dtype=bool)
    u = record_uniforms(records, labels, seed=seed, purpose=purpose)
    upper = offset + fraction
    if upper >= 1.0 - 2.0**-52:  # the last part of a partition ends at 1 whatever the rounding of k/m + 1/m
        upper = 2.0
    return (u >= offset) & (u < upper)


def subset_fraction(wanted: int | None, public_size: float | None, where: str) -> float:
    """`wanted / public_size`: the share of a split a subset of about `wanted` records keeps (1: all).

    `public_size` is the split's public size: published (registry), declared (`public_n_train`) or,
    for test data only, counted (test data are public). Never pass a count of private training data.
    """
    if wanted is None:
        return 1.0
    if int(wanted) < 0:
        raise DatasetError(f"{where}: must be >= 0, got {wanted}")
    if public_size is None:
        raise DatasetError(
            f"{where}: a subset of about {wanted} records is a share of the split's public size, and none is "
            "known; declare the public size of the whole training split (public_n_train), never a count of the private data"
        )
    if float(public_size) <= 0:
        return 1.0 if int(wanted) > 0 else 0.0
    return min(1.0, int(wanted) / float(public_size))


def split_test(
    records: Sequence[Any], labels: Sequence[Any] | None, test_fraction: float, seed: int | str
) -> tuple[np.ndarray, np.ndarray]:
    """(train indices, test indices) of a population without an official split: a record goes to test
    iff u(record) < test_fraction under the salt ("split", seed). Both keep the source order."""
    if not 0.0 < float(test_fraction) < 1.0:
        raise DatasetError(f"test_fraction must lie in (0, 1), got {test_fraction}")
    test = keep_records(records, labels, float(test_fraction), seed=seed, purpose="split")
    return np.flatnonzero(~test), np.flatnonzero(test)


def class_names(labels: Sequence[Any], classes: Sequence[str] | None) -> list[Any]:
    """Labels as class names where the names are known: adding a record of a new class then shifts no
    other record's label (integer indices of sorted names would)."""
    if classes is None:
        return [int(v) if isinstance(v, (int, np.integer)) else v for v in labels]
    return [classes[int(v)] for v in labels]
