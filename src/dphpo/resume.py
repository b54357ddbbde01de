"""Resuming after `kill -9`: release the directory lock a killed Snakemake left behind.

Snakemake locks its working directory (`.snakemake/locks/N.input.lock`, `N.output.lock`) and removes
its own lock files when it exits; a process killed with SIGKILL (or a power loss) cannot, and the next
run stops with a LockException until `snakemake --unlock`. Two runs may hold locks in one directory at
once (outputs that do not overlap), so the owner is recorded per lock file: at start
(`record_lock_owner`) a run claims the lock files no one has claimed, and when the workflow is parsed
again `release_stale_lock` removes a lock file only when its recorded process is provably gone: same
host, its PID no longer running (or reused by a process that started later), and the file not newer
than the claim (a later run that reused the name and has not claimed it yet). A lock file no run
claimed is left to Snakemake's own message and `--unlock`.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

from dphpo.errors import DPHPOError
from dphpo.io import read_json, write_json

LOCKS = Path(".snakemake") / "locks"
OWNER = Path(".snakemake") / "dphpo_lock_owner.json"


def _owners(workdir: Path) -> dict[str, dict]:
    """{lock file name: its claim (host, pid, start, claimed)}; empty where unreadable or of an older format."""
    try:
        owners = read_json(workdir / OWNER).get("locks")
    except (DPHPOError, AttributeError, OSError):
        return {}
    return {k: v for k, v in owners.items() if isinstance(v, dict)} if isinstance(owners, dict) else {}


def _lock_files(workdir: Path) -> dict[str, Path]:
    return {p.name: p for p in (workdir / LOCKS).glob("*.lock") if p.is_file()}


def record_lock_owner(workdir: str | os.PathLike = ".") -> None:
    """Claim, for this process (host, PID, start time), every lock file that no claim covers: the ones
    this run has just created (call it holding the lock). Claims of lock files that are gone are dropped."""
    workdir, pid = Path(workdir), os.getpid()
    locks, owners = _lock_files(workdir), _owners(workdir)
    owners = {name: claim for name, claim in owners.items() if name in locks and not _newer(locks[name], claim)}
    me = {"host": socket.gethostname(), "pid": pid, "start": _start_time(pid), "claimed": time.time()}
    owners.update({name: me for name in locks if name not in owners})
    write_json(workdir / OWNER, {"locks": owners})


def release_stale_lock(workdir: str | os.PathLike = ".") -> str | None:
    """Remove the lock files whose claimed process (`record_lock_owner`) is gone; a message, or None if
    there was nothing to release (no claim, another host, a holder that may still be running)."""
    workdir = Path(workdir)
    locks, owners = _lock_files(workdir), _owners(workdir)
    stale: dict[str, int] = {}
    for name, path in locks.items():
        claim = owners.get(name)
        try:
            host, pid, start = claim["host"], int(claim["pid"]), claim.get("start")
        except (KeyError, TypeError, ValueError):
            continue  # unclaimed: left to Snakemake's message and --unlock
        if host != socket.gethostname() or pid == os.getpid() or _newer(path, claim) or _alive(pid, start):
            continue
        path.unlink(missing_ok=True)
        stale[name] = pid
    if not stale:
        return None
    write_json(workdir / OWNER, {"locks": {k: v for k, v in owners.items() if k in locks and k not in stale}})
    pids = ", ".join(str(p) for p in sorted(set(stale.values())))
    return (f"released the lock files {', '.join(sorted(stale))} on {workdir.resolve()} left by Snakemake process {pids}, "
            "which ended without releasing them (killed); its incomplete outputs are rerun")


def _newer(path: Path, claim: dict) -> bool:
    """Whether lock file `path` was (re)created after `claim` was made: another run's, not yet claimed."""
    try:
        return path.stat().st_mtime > float(claim.get("claimed", 0.0))
    except (OSError, TypeError, ValueError):
        return True


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
