"""Compare two results trees file by file: did the same config, key and code give the same results?

Used to check that a refactoring changed no result (`--ignore-code-version`: the source hash that
provenance records, and the seals that cover it, are expected to differ) and by anyone who reruns
a published study. Files are compared by what they hold: JSON as parsed values, NPZ and HDF5 by
their arrays and attributes (container timestamps and creation times are not results), torch
checkpoints by their tensors and records, PNG by pixels when the bytes differ, everything else by
bytes; timings (`time_s`) are not results either. Logs and benchmarks (timings) are skipped.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch
from PIL import Image

from dphpo.io import SEAL_KEY

SKIPPED_DIRS = ("logs", "benchmarks", ".snakemake")
SOURCE_KEY = "dphpo_source_sha256"
# HDF5 attributes that say when, how fast and with which package versions a cache was written, not what it holds
H5_VOLATILE_ATTRS = ("created_utc", "package_versions", "extract_seconds")
# Keys of JSON records and checkpoints that time the work (a pretraining's seconds per phase), not results
TIMING_KEYS = ("time_s",)


@dataclass(frozen=True)
class Difference:
    path: str
    what: str


def _strip_code_version(obj: Any, sources: set[str]) -> Any:
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if k == SEAL_KEY:
                continue
            if k == SOURCE_KEY:
                sources.add(str(v))
                continue
            out[k] = _strip_code_version(v, sources)
        return out
    if isinstance(obj, list):
        return [_strip_code_version(v, sources) for v in obj]
    return obj


def _without_timings(obj: Any) -> Any:
    """`obj` without its timings, nor its seal (a hash of the rest, timings included: the rest is compared)."""
    if isinstance(obj, dict):
        return {k: _without_timings(v) for k, v in obj.items() if k not in TIMING_KEYS and k != SEAL_KEY}
    if isinstance(obj, list):
        return [_without_timings(v) for v in obj]
    return obj


def _tensors_as_bytes(obj: Any) -> Any:
    """A loaded checkpoint with each tensor as (dtype, shape, sha256 of its bytes): compared by value, named briefly."""
    if isinstance(obj, torch.Tensor):
        t = obj.detach().cpu().contiguous()
        return [str(t.dtype), list(t.shape), "sha256 " + hashlib.sha256(t.reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest()]
    if isinstance(obj, dict):
        return {k: _tensors_as_bytes(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_tensors_as_bytes(v) for v in obj]
    return obj


def _first_difference(a: Any, b: Any, where: str = "") -> str | None:
    if type(a) is not type(b):
        return f"{where or '/'}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, dict):
        if list(a) != list(b):
            only = sorted(set(a) ^ set(b))
            return f"{where or '/'}: keys differ ({', '.join(only) if only else 'order'})"
        for k in a:
            found = _first_difference(a[k], b[k], f"{where}/{k}")
            if found:
                return found
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{where or '/'}: {len(a)} vs {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b)):
            found = _first_difference(x, y, f"{where}[{i}]")
            if found:
                return found
        return None
    return None if a == b else f"{where or '/'}: {a!r} vs {b!r}"


class TreeDiff:
    def __init__(self, ignore_code_version: bool):
        self.ignore_code_version = ignore_code_version
        self.sources: set[str] = set()  # source hashes seen: masked in text files

    def json_difference(self, a: Path, b: Path) -> str | None:
        return self.value_difference(json.loads(a.read_text()), json.loads(b.read_text()))

    def value_difference(self, da: Any, db: Any) -> str | None:
        """The first difference of two parsed records, their timings (and the code version where ignored) aside."""
        da, db = _without_timings(da), _without_timings(db)
        if self.ignore_code_version:
            da, db = _strip_code_version(da, self.sources), _strip_code_version(db, self.sources)
        return _first_difference(da, db)

    def pt_difference(self, a: Path, b: Path) -> str | None:
        """A torch checkpoint (pretraining, a language model) by its values: tensors by dtype, shape and bytes,
        the rest as a record (its package versions hold the source hash, its timings vary by run)."""
        da, db = (_tensors_as_bytes(torch.load(p, map_location="cpu", weights_only=True)) for p in (a, b))
        return self.value_difference(da, db)

    def text_difference(self, a: Path, b: Path) -> str | None:
        ta, tb = a.read_text(errors="replace"), b.read_text(errors="replace")
        if self.ignore_code_version and self.sources:
            pattern = re.compile("|".join(re.escape(s) for s in sorted(self.sources)))
            ta, tb = pattern.sub("<source>", ta), pattern.sub("<source>", tb)
            # a short form of a hash (first 12 hex digits) in a table
            for s in self.sources:
                ta, tb = ta.replace(s[:12], "<source>"), tb.replace(s[:12], "<source>")
        if ta == tb:
            return None
        for i, (la, lb) in enumerate(zip(ta.splitlines(), tb.splitlines()), 1):
            if la != lb:
                return f"line {i}: {la[:120]!r} vs {lb[:120]!r}"
        return "different number of lines"

    @staticmethod
    def npz_difference(a: Path, b: Path) -> str | None:
        with np.load(a, allow_pickle=False) as fa, np.load(b, allow_pickle=False) as fb:
            if sorted(fa.files) != sorted(fb.files):
                return f"arrays {sorted(fa.files)} vs {sorted(fb.files)}"
            for name in fa.files:
                x, y = fa[name], fb[name]
                if x.dtype != y.dtype or x.shape != y.shape or x.tobytes() != y.tobytes():
                    return f"array {name} differs"
        return None

    @staticmethod
    def h5_difference(a: Path, b: Path) -> str | None:
        """The first group or dataset whose kind, dtype, shape, values or attributes differ (the container's
        volatile attributes, H5_VOLATILE_ATTRS, aside)."""

        def walk(f) -> dict[str, Any]:
            items: dict[str, Any] = {"/": f}
            f.visititems(items.__setitem__)
            return items

        def attrs(obj) -> dict[str, np.ndarray]:
            return {k: np.asarray(v) for k, v in obj.attrs.items() if k not in H5_VOLATILE_ATTRS}

        def array_difference(x: np.ndarray, y: np.ndarray) -> str | None:
            if x.dtype != y.dtype or x.shape != y.shape:
                return f"{x.dtype}{list(x.shape)} vs {y.dtype}{list(y.shape)}"
            return None if x.tobytes() == y.tobytes() else "values differ"

        with h5py.File(a, "r", locking=False) as fa, h5py.File(b, "r", locking=False) as fb:
            ia, ib = walk(fa), walk(fb)
            if sorted(ia) != sorted(ib):
                return f"datasets {sorted(set(ia) ^ set(ib))}"
            for name, x in ia.items():
                y = ib[name]
                if isinstance(x, h5py.Dataset) != isinstance(y, h5py.Dataset):
                    return f"{name}: a group in one file, a dataset in the other"
                if isinstance(x, h5py.Dataset):
                    found = array_difference(np.asarray(x[()]), np.asarray(y[()]))
                    if found:
                        return f"dataset {name}: {found}"
                attrs_x, attrs_y = attrs(x), attrs(y)
                where = "" if name == "/" else f" of {name}"
                if sorted(attrs_x) != sorted(attrs_y):
                    return f"attributes{where} {sorted(set(attrs_x) ^ set(attrs_y))}"
                for k, v in attrs_x.items():
                    found = array_difference(v, attrs_y[k])
                    if found:
                        return f"attribute {k}{where} differs ({found})"
        return None

    @staticmethod
    def png_difference(a: Path, b: Path) -> str | None:
        with Image.open(a) as ia, Image.open(b) as ib:
            x, y = np.asarray(ia), np.asarray(ib)
        return None if x.shape == y.shape and np.array_equal(x, y) else "pixels differ"

    def difference(self, a: Path, b: Path) -> str | None:
        if a.read_bytes() == b.read_bytes():
            return None
        suffix = a.suffix
        if suffix == ".json":
            return self.json_difference(a, b)
        if suffix == ".npz":
            return self.npz_difference(a, b)
        if suffix == ".h5":
            return self.h5_difference(a, b)
        if suffix == ".png":
            return self.png_difference(a, b)
        if suffix == ".pt":
            return self.pt_difference(a, b)
        return self.text_difference(a, b)


def _files(root: Path) -> list[str]:
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and not set(p.relative_to(root).parts[:-1]) & set(SKIPPED_DIRS)
    )


def compare_trees(a: Path, b: Path, ignore_code_version: bool = False) -> tuple[list[Difference], int]:
    """Differences between two results trees (JSON first, so that text files can mask source
    hashes), and the number of files compared."""
    diff = TreeDiff(ignore_code_version)
    files_a, files_b = _files(a), _files(b)
    found = [Difference(f, "only in the first tree") for f in sorted(set(files_a) - set(files_b))]
    found += [Difference(f, "only in the second tree") for f in sorted(set(files_b) - set(files_a))]
    common = sorted(set(files_a) & set(files_b), key=lambda f: (not f.endswith(".json"), f))
    for f in common:
        try:
            what = diff.difference(a / f, b / f)
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:  # a truncated or damaged file: named, not a traceback
            what = f"unreadable as {(a / f).suffix or 'text'} in one tree or both ({type(err).__name__}: {err})"
        if what:
            found.append(Difference(f, what))
    return found, len(common)


DESCRIPTION = (
    "Compare two results trees file by file (JSON by value, NPZ/HDF5 by arrays, PNG by pixels; logs and "
    "benchmarks skipped). Exit 0: identical; 1: differences; 2: bad arguments."
)


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("first", type=Path, metavar="FIRST_DIR")
    p.add_argument("second", type=Path, metavar="SECOND_DIR")
    p.add_argument("--ignore-code-version", action="store_true",
                   help="ignore the recorded source hash of dphpo (and the seals that cover it)")
    p.add_argument("--allow-new", action="store_true", help="files only in the second tree are not differences")
    return p


def run(args: argparse.Namespace) -> int:
    for root in (args.first, args.second):
        if not root.is_dir():
            print(f"dphpo diff: {root} is not a directory", file=sys.stderr)
            return 2
    found, n = compare_trees(args.first, args.second, args.ignore_code_version)
    if args.allow_new:
        new = [d for d in found if d.what == "only in the second tree"]
        found = [d for d in found if d.what != "only in the second tree"]
        if new:
            print(f"{len(new)} new file(s) in {args.second}: " + ", ".join(d.path for d in new[:10]))
    for d in found:
        print(f"{d.path}: {d.what}")
    print(f"{n} files compared, {len(found)} difference(s)")
    return 1 if found else 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(add_arguments(argparse.ArgumentParser(prog="dphpo diff", description=DESCRIPTION)).parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
