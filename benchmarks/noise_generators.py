"""The generator of the private noise, side by side: what a step's draws cost where, and whether a counter-based
generator gives the same numbers on the CPU and a GPU.

dphpo draws every noise vector on a CPU Mersenne Twister (`dphpo.train.noise.secret_generator`), one step ahead
on a worker thread, and copies it to the device: the same key gives the same release on any device, but the
CPU draws bound the GPU trainer at the CIFAR shapes (benchmarks/README.md). The alternative #31 names is a
counter-based generator that the CPU reproduces. This script measures, for a step's draws of n normals:

  * `mt-cpu`        — torch.randn on a CPU generator (what dphpo does today);
  * `philox-<dev>`  — Philox4x32-10 (Salmon et al. 2011; the Random123 reference's known answer is checked
                      first) in plain torch integer ops, then Box–Muller in float64: the same program on any
                      device, so the numbers agree to the last bit of the integers and to float rounding of
                      log/cos after them (the script counts the float32 normals that are bitwise equal);
  * `compiled-<dev>` — the same Philox program through `torch.compile` (one fused kernel; `--no-compile` skips it);
  * `curand-<dev>`  — torch.randn on the device's own generator (a speed reference only: its numbers depend on
                      the launch configuration, so the CPU cannot reproduce them).

Sizes: one step of 64 CIFAR-10 heads on ViT-B features (64 x 768 x 10) and GPT-2 small's 124 M parameters.

Usage:  python benchmarks/noise_generators.py [--device cuda] [--repeats 5] [--sizes 491520,124439808]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

M0, M1 = 0xD2511F53, 0xCD9E8D57  # Philox4x32 multipliers
W0, W1 = 0x9E3779B9, 0xBB67AE85  # Weyl key increments
MASK = 0xFFFFFFFF


def _mulhilo(a: torch.Tensor, m: int) -> tuple[torch.Tensor, torch.Tensor]:
    # a < 2^32 and m < 2^32 in int64: the product wraps mod 2^64 (two's complement, as uint64 would), so its
    # low and high 32-bit words are exact
    p = a * m
    return (p >> 32) & MASK, p & MASK


def philox4x32(counter: list[torch.Tensor], key: tuple[int, int], rounds: int = 10) -> list[torch.Tensor]:
    """Philox4x32-`rounds` of four int64 tensors of 32-bit counter words under a 64-bit key: four words out."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for _ in range(rounds):
        hi0, lo0 = _mulhilo(c0, M0)
        hi1, lo1 = _mulhilo(c2, M1)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        k0, k1 = (k0 + W0) & MASK, (k1 + W1) & MASK
    return [c0, c1, c2, c3]


def philox_normal(n: int, key: tuple[int, int], stream: int, device: torch.device) -> torch.Tensor:
    """n standard normals (float32) of `stream` under `key`: counter (i, stream, 0, 0) for block i, each block's
    four words two Box–Muller pairs in float64."""
    blocks = -(-n // 4)
    i = torch.arange(blocks, dtype=torch.int64, device=device)
    zero = torch.zeros_like(i)
    w = philox4x32([i & MASK, torch.full_like(i, stream & MASK), zero, zero], key)
    u = [(x.double() + 1.0) * 2.0**-32 for x in w]  # (0, 1]: log never sees 0
    out = torch.empty(blocks, 4, dtype=torch.float64, device=device)
    for j, (a, b) in enumerate(((u[0], u[1]), (u[2], u[3]))):
        r, theta = torch.sqrt(-2.0 * torch.log(a)), (2.0 * torch.pi) * b
        out[:, 2 * j], out[:, 2 * j + 1] = r * torch.cos(theta), r * torch.sin(theta)
    return out.reshape(-1)[:n].float()


def known_answer() -> None:
    """Random123's philox4x32_10 known-answer test: counter and key all zeros, and all ones."""
    for word, expect in ((0, (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)), (MASK, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD))):
        got = philox4x32([torch.tensor([word])] * 4, (word, word))
        if tuple(int(x) for x in got) != expect:
            raise SystemExit(f"Philox4x32-10 known answer wrong for words {word:#x}: {[hex(int(x)) for x in got]}")


def timed(fn, device: torch.device, repeats: int) -> float:
    """Median seconds of `fn()` (a warm-up call first; the device synchronised around each call)."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    fn()
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--sizes", default="491520,124439808", help="normals per step (default: 64 CIFAR-10 heads; GPT-2 small)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True, help="time the compiled Philox on the device")
    ap.add_argument("--threads", type=int, default=1, help="CPU torch threads (default 1: the one draw thread)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    known_answer()
    cpu, dev = torch.device("cpu"), torch.device(args.device)
    key = (0x1234ABCD, 0x9876FEDC)
    gen = torch.Generator().manual_seed(0)
    compiled = torch.compile(philox_normal, dynamic=False) if args.compile else None
    print(f"| normals | mt-cpu (ms) | philox-cpu (ms) | philox-{dev.type} (ms) | compiled-{dev.type} (ms) | curand-{dev.type} (ms) "
          f"| float32 equal cpu/{dev.type} | max abs diff |")
    print("|---|---|---|---|---|---|---|---|")
    for n in (int(s) for s in args.sizes.split(",")):
        row = [timed(lambda n=n: torch.randn(n, generator=gen), cpu, args.repeats)]
        row.append(timed(lambda n=n: philox_normal(n, key, 0, cpu), cpu, max(1, args.repeats // 2)))
        row.append(timed(lambda n=n: philox_normal(n, key, 0, dev), dev, args.repeats))
        row.append(timed(lambda n=n: compiled(n, key, 0, dev), dev, args.repeats) if compiled else float("nan"))
        row.append(timed(lambda n=n: torch.randn(n, device=dev), dev, args.repeats) if dev.type == "cuda" else float("nan"))
        a, b = philox_normal(n, key, 0, cpu), (compiled or philox_normal)(n, key, 0, dev).cpu()
        equal = (a.view(torch.int32) == b.view(torch.int32)).double().mean().item()
        print(f"| {n:,} | " + " | ".join(f"{1e3 * t:.3f}" for t in row) + f" | {equal:.9f} | {(a - b).abs().max().item():.2e} |", flush=True)


if __name__ == "__main__":
    main()
