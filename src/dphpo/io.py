"""Atomic file output: a killed job never leaves a half-written result behind.

Temporary files are named `.<target name>.<random>.dphpo.tmp` next to their target. A writer
killed with SIGKILL leaves its temporary behind: the next writer of the same target removes it,
and the workflow removes those older than a day at start (`remove_orphan_temporaries`, onstart
in common.smk) for targets no longer built. JSON mappings are sealed: `write_json` adds
`record_sha256`, the sha256 of the canonical JSON of every other key, and `read_json` checks and
removes it, so a truncated or hand-edited result is refused with its file name.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from dphpo.errors import OutputFileError

TMP_SUFFIX = ".dphpo.tmp"
SEAL_KEY = "record_sha256"


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to `path`; rename it onto `path` only on success, its bytes and then the
    rename flushed to disk (fsync), so that a crash or power loss right after leaves the old file or the
    new one, never an empty one under the new name."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # a writer of this target killed earlier (SIGKILL runs no cleanup) left its temporary: one
    # writer per target (Snakemake runs one job per output), so any such file is an orphan
    for orphan in path.parent.glob(f".{glob.escape(path.name)}.*{TMP_SUFFIX}"):
        orphan.unlink(missing_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TMP_SUFFIX, dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        if tmp_path.exists():  # mkstemp makes the file 0600: the replaced file's mode, else a plain open()'s
            os.chmod(tmp_path, path.stat().st_mode & 0o777 if path.is_file() else 0o666 & ~_umask())
            _fsync(tmp_path, os.O_RDONLY)
        os.replace(tmp_path, path)
        _fsync(path.parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def _fsync(path: Path, flags: int) -> None:
    """Flush a file's (or a folder's: its entries) writes to disk; a no-op where the system cannot (a folder
    on Windows)."""
    try:
        fd = os.open(path, flags)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike) -> Iterator[Any]:
    """A binary file handle whose content replaces `path` only on success (`atomic_path`). Give it to
    torch.save rather than a path: saved to a path, torch names the archive's inner folder after the
    file, here a random temporary name, so two identical runs wrote different bytes (and checksums);
    saved to a handle, the folder is always `archive`."""
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        yield fh


def link_file(source: str | os.PathLike, target: str | os.PathLike) -> None:
    """`target` made the same file as `source`, atomically: a hard link (no second copy of a large
    model), or a copy where the two folders are on different file systems. Its time is set to now, so
    that Snakemake sees it newer than the job that wrote `source`."""
    with atomic_path(target) as tmp:
        tmp.unlink()
        try:
            os.link(source, tmp)
        except OSError:  # another file system, or links not allowed there
            shutil.copyfile(source, tmp)
    os.utime(target)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _to_jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_to_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _to_jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return _to_jsonable(obj.item())  # a numpy NaN or inf becomes null or "inf" like a float
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "tolist"):  # torch tensors
        return _to_jsonable(obj.tolist())
    if isinstance(obj, float) and not np.isfinite(obj):
        return None if np.isnan(obj) else ("inf" if obj > 0 else "-inf")
    return obj


def write_json(path: str | os.PathLike, data: Any) -> None:
    """Write `data` as indented JSON, atomically (temp file, then rename); a mapping gets its seal."""
    data = _to_jsonable(data)
    if isinstance(data, dict):
        data = {k: v for k, v in data.items() if k != SEAL_KEY}
        data[SEAL_KEY] = seal(data)
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")


def read_json(path: str | os.PathLike) -> Any:
    """The data `write_json` wrote; OutputFileError naming the file when it is not complete JSON or
    its seal does not match its content (edited after it was written)."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise OutputFileError(f"missing file {path}: run `snakemake {path}`") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise OutputFileError(f"{path} is not a complete JSON file ({exc}); it was truncated or damaged: "
                              "delete it and rerun") from None
    if isinstance(data, dict):
        # every mapping the workflow writes is sealed: a missing seal (removed by a hand edit) is refused
        # like a wrong one, or an edited result would enter the tables
        if SEAL_KEY not in data:
            raise OutputFileError(f"{path} has no {SEAL_KEY}: it was not written by dphpo or its seal was removed "
                                  "(hand-edited?); delete it and rerun")
        stored = data.pop(SEAL_KEY)
        try:
            sealed = seal(data)
        except ValueError as exc:  # NaN or ±Infinity: no file the workflow writes holds one
            raise OutputFileError(f"{path} holds a value its seal cannot cover ({exc}): it was not written by dphpo; "
                                  "delete it and rerun") from None
        if sealed != stored:
            raise OutputFileError(f"{path} was altered after it was written: its {SEAL_KEY} {stored} does not match "
                                  f"its content ({sealed}); delete it and rerun")
    return data


def seal(data: dict) -> str:
    """sha256 of the canonical JSON (sorted keys, no spaces) of a mapping."""
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def file_sha256(path: str | os.PathLike) -> str:
    """sha256 of a file's bytes, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def check_writable(path: str | os.PathLike, what: str) -> None:
    """Refuse, before any long work, an output path that cannot be written (`what` names the flag or
    key): its folder is created and a temporary file written and removed there."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path.with_name(f".{path.name}.writable-check")) as tmp:
            tmp.write_text("")
        path.with_name(f".{path.name}.writable-check").unlink()
    except OSError as exc:
        raise OutputFileError(f"{what} {path}: cannot write there ({exc.strerror or exc})") from None


def remove_orphan_temporaries(folder: str | os.PathLike, min_age_s: float = 0.0) -> list[Path]:
    """Delete the temporary files (`*.dphpo.tmp`) killed writers left under `folder`; returns them.

    Call it only when no writer is running there (the workflow does at start, holding Snakemake's
    lock on the working directory); `min_age_s` spares files younger than that.
    """
    removed = []
    now = time.time()
    for tmp in Path(folder).rglob(f".*{TMP_SUFFIX}"):
        try:
            if tmp.is_file() and now - tmp.stat().st_mtime >= min_age_s:
                tmp.unlink()
                removed.append(tmp)
        except FileNotFoundError:  # its writer finished meanwhile
            continue
    return removed
