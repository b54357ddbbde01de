"""Private noise off the critical path: each step's draws made one step ahead, on worker threads.

Every trainer draws its noise (and Poisson masks) on CPU generators seeded from the secret key
(`dphpo.privacy.randomness`): the same key gives the same numbers on any device, which is what lets a
GPU run be checked against a CPU run (`benchmarks/gpu_check.py`). Drawn in line, those draws stall the
device: 4.5 ms per step for 64 CIFAR-10 heads, 754 ms for GPT-2 small's 124 M parameters, against
milliseconds of GEMMs (measured on one H100, docs/privacy.md "The generator").

`DrawAhead` keeps the generators and their order and moves the drawing: while step t computes,
a worker thread draws step t + 1. A large model's noise (`ParameterNoise`: one stream per 2^22
consecutive parameters) is split over a small pool (`StreamPool`), each stream on one thread at a time,
so a stream's numbers do not depend on the number of threads. The draws land in pinned memory when the
target is a GPU and are copied with non-blocking copies, so the device never waits for the host. Draws
are made in exactly the order the in-line code made them (per generator: step by step), so the
released numbers are byte-identical to drawing in line.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

import numpy as np
import torch

T = TypeVar("T")

#: Worker threads for a large model's noise streams (GPT-2 small: 39 streams of 4 M elements); never
#: more than the host's cores less one (the thread that drives the device).
MAX_STREAM_THREADS = 8


def stream_threads() -> int:
    return max(1, min(MAX_STREAM_THREADS, (os.cpu_count() or 1) - 1))


def to_device(tensor: torch.Tensor, device: torch.device, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A CPU draw on `device`: a non-blocking copy from pinned memory for a GPU, the tensor itself on the CPU."""
    if device.type == "cpu":
        return tensor if dtype is None else tensor.to(dtype)
    return tensor.to(device=device, dtype=dtype, non_blocking=True)


def host_buffer(shape, device: torch.device, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """An uninitialised CPU tensor for draws bound to `device`: page-locked for a GPU, so that its copy there
    does not block (drawn into directly: no second host copy to pin it)."""
    return torch.empty(shape, dtype=dtype, pin_memory=device.type == "cuda")


def standard_normal(shape, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """`torch.randn(shape, generator=generator)` (the same numbers: randn is normal_ on an empty tensor), drawn
    into a `host_buffer` for `device`."""
    return host_buffer(shape, device).normal_(generator=generator)


class DrawAhead(Generic[T]):
    """`draw(t)` for t = 0, 1, … made one step ahead on a worker thread.

    `get(t)` returns `draw(t)` and starts `draw(t + 1)` (if t + 1 < steps), so `draw` runs while the
    caller computes step t. Steps are fetched in order. With `ahead=False` the draw is made in line
    (the reference the overlap is measured against). A failed draw raises at its `get`.
    """

    def __init__(self, draw: Callable[[int], T], steps: int, *, ahead: bool = True):
        self._draw, self._steps, self._next = draw, int(steps), 0
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dphpo-noise") if ahead and steps > 0 else None
        self._pending: Future | None = self._pool.submit(draw, 0) if self._pool else None

    def get(self, t: int) -> T:
        if t != self._next:
            raise ValueError(f"draws are made in step order: expected step {self._next}, got {t}")
        self._next += 1
        if self._pool is None:
            return self._draw(t)
        value = self._pending.result()
        self._pending = self._pool.submit(self._draw, t + 1) if t + 1 < self._steps else None
        return value

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> DrawAhead[T]:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class StreamPool:
    """Calls `draw(j)` for independent streams j (a large model's noise streams) on a few threads.

    Each stream is drawn by one thread per call, so its numbers do not depend on how many threads there
    are. torch releases the GIL inside its kernels, so draws of different generators run in parallel.
    """

    def __init__(self, threads: int | None = None):
        self.threads = stream_threads() if threads is None else max(1, int(threads))
        self._pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="dphpo-stream") if self.threads > 1 else None

    def map(self, draw: Callable[[int], None], streams: Sequence[int]) -> None:
        """`draw(j)` for every stream, each thread taking one contiguous group of streams (few, large tasks:
        a task per stream of a small draw spends its time handing the GIL around, measured on one H100)."""
        streams = list(streams)
        groups = min(self.threads, len(streams))
        if self._pool is None or groups < 2:
            for j in streams:
                draw(j)
            return
        size = -(-len(streams) // groups)
        chunks = [streams[i : i + size] for i in range(0, len(streams), size)]
        for future in [self._pool.submit(lambda chunk=chunk: [draw(j) for j in chunk]) for chunk in chunks]:
            future.result()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


#: Consecutive elements of a model's flattened parameters drawn from one generator. A model with at most
#: this many trainable elements draws all its noise from the trainer's generator, tensor by tensor, as
#: before streams existed; a larger one (GPT-2 small: 39 streams) draws its streams in parallel.
STREAM_ELEMENTS = 1 << 22


#: torch's CPU generator (Mersenne Twister, 624 32-bit words) as `Generator.get_state` lays it out in
#: torch 2.x: the initial seed (8 bytes), left (4), seeded (4), next (8), the 624 words (8 bytes each),
#: then the normal-sampling caches (all 5,056 bytes checked against `get_state` before use).
_MT_WORDS = 624
_MT_STATE_OFFSET = 24
_MT_STATE_BYTES = 5056


def secret_generator(seed: int, *labels: object) -> torch.Generator:
    """A CPU generator for private draws, its whole Mersenne Twister state (19,968 bits) expanded from the
    secret `seed` and `labels` by SHAKE-256.

    `torch.Generator().manual_seed(s)` keeps only the low 32 bits of s: every noise vector it draws could be
    found by trying 2^32 seeds, and two of a study's 10^5 trial seeds would share their noise with
    probability ~1 (measured: two trial seeds of one scope, equal in their low 32 bits, drew equal noise).
    Here every bit of the seed counts, and the state of one label reveals nothing of another's (a hash
    of the seed, not the seed: a run's public draws, e.g. DP-ZO's directions, do not give away its noise).
    """
    # a constant seed: left = 1, next = 0, a fresh state whose stored initial seed is not the secret one (the
    # 624 words below are all that draws read; `initial_seed()` and bytes 0-7 of the state would give `seed` away)
    gen = torch.Generator().manual_seed(0)
    state = gen.get_state()
    if state.numel() != _MT_STATE_BYTES:
        raise RuntimeError(f"torch {torch.__version__}'s CPU generator state is {state.numel()} bytes, not the "
                           f"{_MT_STATE_BYTES} secret_generator writes (dphpo pins the torch it is tested with)")
    words = np.frombuffer(hashlib.shake_256(seed_label(seed, labels)).digest(4 * _MT_WORDS), dtype=np.uint32)
    state[_MT_STATE_OFFSET : _MT_STATE_OFFSET + 8 * _MT_WORDS] = torch.from_numpy(words.astype(np.uint64).view(np.uint8))
    return gen.set_state(state)


def derived_seed(seed: int, *labels: object) -> int:
    """A 63-bit seed for `labels` of a run seeded `seed` (a hash: it reveals nothing of `seed`), e.g. where
    torch's global generator must be seeded (a model's initialisation)."""
    return int.from_bytes(hashlib.sha256(seed_label(seed, labels)).digest()[:8], "big") >> 1


def seed_label(seed: int, labels: tuple) -> bytes:
    """The bytes a generator's state is hashed from: a secret seed and what the draws are for."""
    return " ".join(["dphpo secret generator", str(int(seed)), *map(str, labels)]).encode()


class ParameterNoise:
    """Standard normal noise shaped like a model's parameters, one step per `draw()`.

    The flattened parameters are cut into streams of STREAM_ELEMENTS consecutive elements; stream 0 is
    `generator` (the trainer's own), stream k ≥ 1 `secret_generator(seed, "stream", k)`. Each stream
    fills its pieces (a whole tensor, or the part of one that falls in the stream) in order, so a model of
    one stream gets exactly `torch.randn(p.shape, generator=generator)` per tensor, and the streams of a
    large model are drawn in parallel by `pool` with numbers that do not depend on the thread count.
    """

    def __init__(self, shapes: Sequence[torch.Size], generator: torch.Generator, seed: int, device: torch.device,
                 pool: StreamPool):
        self.shapes, self.device, self.pool = [torch.Size(s) for s in shapes], device, pool
        sizes = [math.prod(s) for s in self.shapes]
        streams = max(1, math.ceil(sum(sizes) / STREAM_ELEMENTS))
        self.generators = [generator] + [secret_generator(seed, "stream", k) for k in range(1, streams)]
        self.pieces: list[list[tuple[int, int, int]]] = [[] for _ in range(streams)]  # (tensor, start, stop)
        offset = 0
        for j, size in enumerate(sizes):
            start = 0
            while start < size:
                k = (offset + start) // STREAM_ELEMENTS
                stop = min(size, (k + 1) * STREAM_ELEMENTS - offset)
                self.pieces[k].append((j, start, stop))
                start = stop
            offset += size

    def draw(self) -> list[torch.Tensor]:
        out = [host_buffer(shape, self.device) for shape in self.shapes]
        flat = [tensor.view(-1) for tensor in out]

        def fill(k: int) -> None:
            for j, start, stop in self.pieces[k]:
                flat[j][start:stop].normal_(generator=self.generators[k])

        self.pool.map(fill, range(len(self.generators)))
        return out
