"""The generator of the private noise, side by side: what a step's draws cost where, and whether a counter-based
generator gives the same numbers on the CPU and a GPU.

dphpo draws every noise vector on a CPU Mersenne Twister (`dphpo.train.noise.secret_generator`), one step ahead
on a worker thread, and copies it to the device: the same key gives the same release on any device, but the
CPU draws bound the GPU trainer at the CIFAR shapes (benchmarks/README.md). The alternative #31 names is a
counter-based generator that the CPU reproduces. This script measures, for a step's draws of n normals:

  * `mt-cpu`        — torch.randn on a CPU generator (`training.noise_generator: mt`, the default);
  * `philox-<dev>`  — `training.noise_generator: philox` (`dphpo.train.philox`: Philox4x32-10, Salmon et al. 2011,
                      the Random123 reference's known answers checked first) in plain torch integer ops, then
                      Box–Muller in float64: the same program on any
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

from dphpo.train.philox import NOISE, PhiloxTrials, check_known_answers


def philox_normal(n: int, seed: int, device: torch.device) -> torch.Tensor:
    """n standard normals of one trial's step-0 noise: what `training.noise_generator: philox` draws."""
    return PhiloxTrials([seed], device).normal(1, n, 0, NOISE)[0]


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
    check_known_answers()
    cpu, dev = torch.device("cpu"), torch.device(args.device)
    seed = 0x1234ABCD9876FEDC
    gen = torch.Generator().manual_seed(0)
    compiled = torch.compile(philox_normal, dynamic=False) if args.compile else None
    print(f"| normals | mt-cpu (ms) | philox-cpu (ms) | philox-{dev.type} (ms) | compiled-{dev.type} (ms) | curand-{dev.type} (ms) "
          f"| float32 equal cpu/{dev.type} | max abs diff |")
    print("|---|---|---|---|---|---|---|---|")
    for n in (int(s) for s in args.sizes.split(",")):
        row = [timed(lambda n=n: torch.randn(n, generator=gen), cpu, args.repeats)]
        row.append(timed(lambda n=n: philox_normal(n, seed, cpu), cpu, max(1, args.repeats // 2)))
        row.append(timed(lambda n=n: philox_normal(n, seed, dev), dev, args.repeats))
        row.append(timed(lambda n=n: compiled(n, seed, dev), dev, args.repeats) if compiled else float("nan"))
        row.append(timed(lambda n=n: torch.randn(n, device=dev), dev, args.repeats) if dev.type == "cuda" else float("nan"))
        a, b = philox_normal(n, seed, cpu), (compiled or philox_normal)(n, seed, dev).cpu()
        equal = (a.view(torch.int32) == b.view(torch.int32)).double().mean().item()
        print(f"| {n:,} | " + " | ".join(f"{1e3 * t:.3f}" for t in row) + f" | {equal:.9f} | {(a - b).abs().max().item():.2e} |", flush=True)


if __name__ == "__main__":
    main()
