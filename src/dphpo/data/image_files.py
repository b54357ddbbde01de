"""Images that stay on disk until a batch needs them (ImageNet-sized datasets).

`ImageFiles` stands where a loader would return a uint8 (N, H, W, 3) array: it has that shape and
dtype, but holds only the file list. A slice or an index array decodes just those images (in parallel:
PIL releases the GIL while it decodes and resizes); `subset` selects records without decoding;
`batches` decodes the next batch while the caller works on this one. Feature extraction thus streams
ImageNet (1.28 M images: 63 GB at 128 x 128 as one array) and the WILDS sets (Camelyon17's 455 k
patches, 12.6 GB) and a user's large image folder in memory for a few batches. Whoever needs every
pixel at once (`np.asarray`) still gets the whole array.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import numpy as np

from dphpo.data.local_files import read_rgb

#: images decoded at once by one call (a bound on the threads, not on memory: that is the batch); the
#: cores this process may use (a SLURM job's allocation, not the node's count)
DECODE_THREADS = max(1, min(16, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


class ImageFiles:
    """uint8 images of one size, RGB (N, H, W, 3) or grey (N, H, W), decoded from `files` when indexed
    (module docstring)."""

    dtype = np.dtype(np.uint8)

    def __init__(self, files: Sequence[Path], size: tuple[int, int], key: str, *, grey: bool = False,
                 read: Callable[[Path], np.ndarray] | None = None):
        """`size` = (H, W); `key`: the config key an unreadable file's error names; `read`: one file to
        its (H, W[, 3]) array (default: RGB resized to `size`, bilinear, `read_rgb`)."""
        self.files = [Path(f) for f in files]
        self.size = (int(size[0]), int(size[1]))
        self.key = key
        self.grey = bool(grey)
        self.read = read or partial(read_rgb, size=self.size, key=key)

    @property
    def shape(self) -> tuple[int, ...]:
        return (len(self.files), *self.size) + (() if self.grey else (3,))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index) -> np.ndarray:
        """The decoded image (an integer) or images (a slice, an index or boolean array); a tuple indexes
        the decoded images further, as numpy would (`x[:, 0, 0, 0]`)."""
        if isinstance(index, tuple):
            first, rest = (index[0] if index else slice(None)), index[1:]
            if first is Ellipsis:
                return self[:][index]
            images = self[first]
            return images[rest] if isinstance(first, (int, np.integer)) else images[(slice(None), *rest)]
        if isinstance(index, (int, np.integer)):
            return self.read(self.files[index])
        if isinstance(index, slice):
            return self._decode(self.files[index])
        return self._decode(self._picked(index))

    def subset(self, index) -> ImageFiles:
        """The records at `index` (an index or boolean array), still on disk."""
        return ImageFiles(self._picked(index), self.size, self.key, grey=self.grey, read=self.read)

    def _picked(self, index) -> list[Path]:
        """The files at an index or boolean array (numpy's rules: negative indices, a mask of len(self))."""
        return [self.files[i] for i in np.arange(len(self))[np.asarray(index)]]

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        images = self[:]
        return images if dtype is None else images.astype(dtype, copy=False)

    def batches(self, batch_size: int) -> Iterator[np.ndarray]:
        """Consecutive batches of `batch_size` images, the next one decoded while this one is used."""
        starts = range(0, len(self), int(batch_size))
        with ThreadPoolExecutor(1, thread_name_prefix="decode-ahead") as ahead:
            upcoming = None
            for start in starts:
                batch = upcoming.result() if upcoming is not None else self[start:start + batch_size]
                nxt = start + batch_size
                upcoming = ahead.submit(self.__getitem__, slice(nxt, nxt + batch_size)) if nxt < len(self) else None
                yield batch

    def _decode(self, files: list[Path]) -> np.ndarray:
        out = np.empty((len(files), *self.shape[1:]), dtype=np.uint8)

        def one(i: int) -> None:
            out[i] = self.read(files[i])

        if len(files) <= 1 or DECODE_THREADS == 1:
            for i in range(len(files)):
                one(i)
        else:
            with ThreadPoolExecutor(min(DECODE_THREADS, len(files)), thread_name_prefix="decode") as pool:
                list(pool.map(one, range(len(files))))  # list(): an unreadable file raises here, naming it
        return out

    def __repr__(self) -> str:
        return f"ImageFiles({len(self)} files, {self.size[0]}x{self.size[1]}{' grey' if self.grey else ''}, {self.key})"


def image_batches(images, batch_size: int) -> Iterator[np.ndarray]:
    """Consecutive batches of an image array or of `ImageFiles` (decoded one batch ahead)."""
    if isinstance(images, ImageFiles):
        yield from images.batches(batch_size)
        return
    for start in range(0, len(images), int(batch_size)):
        yield images[start:start + batch_size]
