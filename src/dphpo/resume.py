"""Resuming after `kill -9`: release the directory lock a killed Snakemake left behind.

Snakemake locks its working directory (`.snakemake/locks/`) and removes the lock when it exits;
a process killed with SIGKILL (or a power loss) cannot, and the next run stops with a
LockException until `snakemake --unlock`. The workflow records which process holds the lock
(`record_lock_owner`, at start) and, when it is parsed again, `release_stale_lock` removes the
lock only when that process is provably gone: same host, its PID no longer running (or reused by
a process that started later), and no lock file newer than the record (a later run that has not
recorded itself yet). Anything else is left to Snakemake's own message and `--unlock`.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from dphpo.errors import DPHPOError
from dphpo.io import read_json, write_json

LOCKS = Path(".snakemake") / "locks"
OWNER = Path(".snakemake") / "dphpo_lock_owner.json"


def record_lock_owner(workdir: str | os.PathLike = ".") -> None:
    """Note this process (host, PID, start time) as the holder of the lock (call it holding the lock)."""
    pid = os.getpid()
    write_json(Path(workdir) / OWNER, {"host": socket.gethostname(), "pid": pid, "start": _start_time(pid)})


def release_stale_lock(workdir: str | os.PathLike = ".") -> str | None:
    """Remove the lock files of a killed run recorded by `record_lock_owner`; a message, or None if
    there was nothing to release or the holder may still be running."""
    workdir = Path(workdir)
    locks = [p for p in (workdir / LOCKS).glob("*.lock") if p.is_file()]
    owner_file = workdir / OWNER
    if not locks or not owner_file.is_file():
        return None
    try:
        owner = read_json(owner_file)
        host, pid, start = owner["host"], int(owner["pid"]), owner.get("start")
    except (DPHPOError, KeyError, TypeError, ValueError):
        return None
    if host != socket.gethostname() or pid == os.getpid():
        return None
    if owner_file.stat().st_mtime < max(p.stat().st_mtime for p in locks):
        return None  # the locks belong to a run that started after the record
    if _alive(pid, start):
        return None
    for p in locks:
        p.unlink(missing_ok=True)
    owner_file.unlink(missing_ok=True)
    return (f"released the lock on {workdir.resolve()} left by Snakemake process {pid}, which ended without "
            "releasing it (killed); its incomplete outputs are rerun")


def _start_time(pid: int) -> int | None:
    """The start time of a process in clock ticks since boot (Linux /proc), else None."""
    fields = _proc_stat(pid)
    return int(fields[19]) if fields else None  # field 22 of /proc/<pid>/stat


def _proc_stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat after the command name (which may hold spaces): state first; None off Linux."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _alive(pid: int, start: int | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: running
        pass
    fields = _proc_stat(pid)
    if fields is None or start is None:
        return True  # cannot tell: assume it runs
    return fields[0] != "Z" and int(fields[19]) == start  # not a zombie, not a reused PID
