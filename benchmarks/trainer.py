"""Throughput of the batched full-batch DP-GD trainer vs opacus per-sample gradients, and vs the GEMM roof.

Measured side by side in one run on the same synthetic features (N×d fp32, K classes):
  * the batched trainer (`dphpo.train.dpgd.train_linear_dpgd`) at H = 1, 16, 64 trials: trial-steps/s;
  * the trainer's previous two-pass step (full-N logits, torch.softmax) at the same H: the fused pass's gain;
  * one full-batch DP-GD step of a single trial with opacus `GradSampleModule` (per-sample gradients
    of nn.Linear(d, K, bias=False) under CE loss, clip, sum, Gaussian noise), the batch processed in
    chunks so the N×K×d per-sample tensor fits in memory: trial-steps/s = 1 / step time;
  * fp32 GEMM throughput of the two products the trainer does per step at H = 64, and the fraction of
    it the trainer reaches;
  * where the noise goes (`--noise`): the trainer with its private draws made one step ahead on worker
    threads (the default, `dphpo.train.noise`), made in line, drawn on the device by Philox
    (`philox`: `training.noise_generator: philox`, `dphpo.train.philox`), and with σ = 0 (nothing drawn): a
    column equal to the σ = 0 one means the noise is off the critical path.

`--device cuda` runs it all on a GPU (features, weights, GEMMs; the noise is still drawn on CPU
generators: the same numbers on any device), with the roof measured at every H and no opacus or
two-pass baselines unless `--baselines`. `--shape` names the shapes of the issue's table: cifar10
(N 50000, d 768, K 10), cifar100 (K 100), imagenet (N 1281167, d 1024, K 1000).

Usage:  python benchmarks/trainer.py [--quick] [--n 60000] [--d 1280] [--k 10] [--threads 2]
        python benchmarks/trainer.py --device cuda --shape cifar10 --trials 1,16,64,256
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings

import torch
import torch.nn.functional as F

from dphpo.device import cpu_model
from dphpo.train.dpgd import MAX_LOGIT_ELEMENTS, TrialBatch, train_linear_dpgd

SHAPES = {"cifar10": (50000, 768, 10), "cifar100": (50000, 768, 100), "imagenet": (1281167, 1024, 1000)}


def synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timings(fn, repeats: int) -> tuple[float, float]:
    """(median, best) wall time of `repeats` calls (a GPU's queue drained); best = least disturbed by other load."""
    times = []
    for _ in range(repeats):
        synchronize()
        t0 = time.perf_counter()
        fn()
        synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times)


def batched_times(x, y, k, h, steps, repeats, noise: str = "ahead") -> tuple[float, float]:
    """(median, best) seconds per call of the trainer on H trials of `steps` steps each (ρ = 0.9), the noise
    drawn one step ahead (`ahead`), in line (`inline`), by Philox on the features' device (`philox`), or not
    at all (`off`: σ = 0)."""
    sigma = 0.0 if noise == "off" else 1.0
    # distinct η: the trainer trains noiseless trials of one η as one run (dpgd.shared_runs), which would
    # time one trial and credit H
    etas = [0.1 * (1 + 1e-3 * j) for j in range(h)]
    trials = TrialBatch(etas, [steps] * h, [sigma] * h, list(range(h)))
    warm = TrialBatch(etas, [1] * h, [sigma] * h, list(range(h)))
    options = {"noise_ahead": noise != "inline", "noise_generator": "philox" if noise == "philox" else "mt"}
    train_linear_dpgd(x, y, k, n_public=len(y), trials=warm, **options)  # warm-up: allocator, BLAS threads
    return timings(lambda: train_linear_dpgd(x, y, k, n_public=len(y), trials=trials, **options), repeats)


def two_pass_times(x, y, k, h, steps, repeats) -> tuple[float, float]:
    """(median, best) seconds per call of the trainer's previous step, kept here as the baseline of the
    fused pass: logits of all N rows at once, torch.softmax over the class axis, then the clipped-sum
    GEMM — X streams from memory twice per step. Same work otherwise (σ > 0, ρ = 0.9, H trials)."""
    n, d = x.shape
    onehot = F.one_hot(y, k).float()
    x_norm = x.norm(dim=1)
    gen = torch.Generator().manual_seed(0)

    def call() -> None:
        w = torch.zeros(h, k, d)
        v = torch.zeros_like(w)
        for _ in range(steps):
            logits = (x @ w.reshape(h * k, d).T).view(n, h, k)
            resid = torch.softmax(logits, dim=2) - onehot.unsqueeze(1)
            scale = torch.clamp(1.0 / (resid.norm(dim=2) * x_norm.unsqueeze(1)).clamp_min(1e-12), max=1.0)
            clipped = ((resid * scale.unsqueeze(2)).reshape(n, h * k).T @ x).view(h, k, d)
            v = 0.9 * v + (clipped + torch.randn(h, k, d, generator=gen)) / n
            w = w - 0.1 * v

    call()  # warm-up
    return timings(call, repeats)


def opacus_step_times(x, y, k, chunk, repeats, clip=1.0, sigma=1.0) -> tuple[float, float]:
    """(median, best) seconds for one full-batch DP-GD step of one trial with opacus per-sample gradients."""
    from opacus import GradSampleModule

    n, d = x.shape
    model = torch.nn.Linear(d, k, bias=False)
    torch.nn.init.zeros_(model.weight)
    gsm = GradSampleModule(model, loss_reduction="sum")
    gen = torch.Generator().manual_seed(0)
    momentum_buf = torch.zeros(k, d)

    def step():
        clipped_sum = torch.zeros(k, d)
        for s in range(0, n, chunk):
            model.weight.grad_sample = None
            model.weight.grad = None
            F.cross_entropy(gsm(x[s : s + chunk]), y[s : s + chunk], reduction="sum").backward()
            per_sample = model.weight.grad_sample  # (chunk, K, d)
            factor = torch.clamp(clip / per_sample.flatten(1).norm(dim=1).clamp_min(1e-12), max=1.0)
            clipped_sum += torch.einsum("i,ikd->kd", factor, per_sample)
        grad = (clipped_sum + sigma * clip * torch.randn(k, d, generator=gen)) / n
        momentum_buf.mul_(0.9).add_(grad)
        with torch.no_grad():
            model.weight.sub_(0.1 * momentum_buf)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # full backward hook on inputs without grad
        step()  # warm-up
        return timings(step, repeats)


def gemm_rates(x, cols, repeats) -> dict[str, tuple[float, float]]:
    """(median, best) FLOP/s of the trainer's two GEMM shapes at HK = `cols`: (N×d)·(d×HK), (HK×N)·(N×d)."""
    n, d = x.shape
    w = torch.randn(cols, d, device=x.device)
    r = torch.randn(min(n, max(1, (1 << 28) // cols)), cols, device=x.device)  # ≤ 1 GiB of residuals
    if r.shape[0] < n:
        x = x[: r.shape[0]]
        n = r.shape[0]
    flops = 2.0 * n * d * cols
    out = {}
    for name, fn in (("logits  X·Wᵀ   (N×d)·(d×HK)", lambda: x @ w.T), ("grad    Rᵀ·X   (HK×N)·(N×d)", lambda: r.T @ x)):
        fn()
        med, best = timings(fn, repeats)
        out[name] = (flops / med, flops / best)
    return out


def noise_table(x, y, k, hs, args) -> None:
    """Trial-steps/s with the noise drawn ahead, in line and not at all, and the fraction of the GEMM roof at each H."""
    n, d = x.shape
    flops = 4.0 * n * d * k
    print(f"noise off the critical path ({args.steps} steps per call; TFLOP/s = trial-steps/s x 4·N·d·K;"
          " roof: fp32 GEMM of the step's two shapes at the same H, mean of the best rates):")
    print("| H | ahead (trial-steps/s) | inline | philox | σ = 0 | ahead / σ = 0 | philox / σ = 0 | TFLOP/s (ahead) | roof TFLOP/s | of roof |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for h in hs:
        rates = {mode: h * args.steps / batched_times(x, y, k, h, args.steps, args.repeats, mode)[0] for mode in args.noise}
        roof = statistics.mean(g[1] for g in gemm_rates(x, h * k, args.gemm_repeats).values())
        ahead = rates.get("ahead", float("nan"))
        cells = [f"{rates.get(m, float('nan')):,.1f}" for m in ("ahead", "inline", "philox", "off")]
        off = rates.get("off", float("nan"))
        print(f"| {h} | {' | '.join(cells)} | {ahead / off:.2f} | {rates.get('philox', float('nan')) / off:.2f} | {ahead * flops / 1e12:.2f} | {roof / 1e12:.2f} | {ahead * flops / roof:.0%} |",
              flush=True)
    print()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=60000, help="samples (default 60000)")
    ap.add_argument("--d", type=int, default=1280, help="feature dimension (default 1280)")
    ap.add_argument("--k", type=int, default=10, help="classes (default 10)")
    ap.add_argument("--shape", choices=sorted(SHAPES), help="N, d, K of a paper dataset × extractor (overrides --n --d --k)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    ap.add_argument("--steps", type=int, default=6, help="DP-GD steps per timed trainer call (default 6)")
    ap.add_argument("--repeats", type=int, default=3, help="timed repeats; the median is reported (default 3)")
    ap.add_argument("--trials", default="1,16,64", help="trial batch sizes H (default 1,16,64)")
    ap.add_argument("--noise", default="ahead,inline,off", help="noise modes compared: ahead, inline, philox, off (σ = 0)")
    ap.add_argument("--baselines", action=argparse.BooleanOptionalAction, default=None,
                    help="also time the two-pass step and opacus (default: on the CPU only)")
    ap.add_argument("--gemm-repeats", type=int, default=20, help="timed GEMM calls per shape; the best is the roof (default 20)")
    ap.add_argument("--opacus-chunk", type=int, default=10000, help="samples per opacus forward/backward (default 10000)")
    ap.add_argument("--quick", action="store_true", help="smoke run: N = 6000")
    args = ap.parse_args()
    if args.shape:
        args.n, args.d, args.k = SHAPES[args.shape]
    if args.quick:
        args.n = 6000
    args.noise = [m.strip() for m in args.noise.split(",") if m.strip()]
    if not set(args.noise) <= {"ahead", "inline", "philox", "off"}:
        ap.error(f"--noise takes ahead, inline, philox, off; got {args.noise}")
    baselines = args.device == "cpu" if args.baselines is None else args.baselines
    hs = [int(h) for h in args.trials.split(",")]

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    n, d, k = args.n, args.d, args.k
    device = torch.device(args.device)
    # Synthetic "features": varied norms so some samples are clipped and some not; learnable labels.
    x = torch.randn(n, d, device=device) * torch.empty(n, 1, device=device).uniform_(0.02, 0.2)
    y = (x @ torch.randn(k, d, device=device).T).argmax(1)

    load0 = os.getloadavg()[0]
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model()
    print(f"DP-GD trainer benchmark  N={n} d={d} K={k}  fp32  torch {torch.__version__}  device {args.device} ({where})")
    print(f"CPU: {cpu_model()}, {os.cpu_count()} logical cores, {torch.get_num_threads()} torch threads; load average at start {load0:.2f}")
    print(f"timings: median (and best) of {args.repeats} calls after a warm-up call; trainer: {args.steps} steps per call")
    per_group = max(1, MAX_LOGIT_ELEMENTS // (k * d))
    if max(hs) > per_group:
        print(f"note: H > {per_group} is split into groups by MAX_LOGIT_ELEMENTS")
    print()
    noise_table(x, y, k, hs, args)
    if baselines:
        baseline_tables(x, y, k, hs, args)
    print(f"load average at end {os.getloadavg()[0]:.2f} (on {os.cpu_count()} cores: above ~{args.threads}, other work"
          " competed for the cores and the numbers are pessimistic and noisy)")


def baseline_tables(x, y, k, hs, args) -> None:
    """The fused trainer against its previous two-pass step and opacus, and its fraction of the GEMM roof at max H."""
    n, d = x.shape
    rows = []  # (engine, median s/step, best s/step, trials per step)
    for h in hs:
        med, best = batched_times(x, y, k, h, args.steps, args.repeats)
        rows.append((f"batched trainer, H={h}", med / args.steps, best / args.steps, h))
        med, best = two_pass_times(x, y, k, h, args.steps, args.repeats)
        rows.append((f"two-pass step (previous), H={h}", med / args.steps, best / args.steps, h))
    chunk = min(args.opacus_chunk, n)
    med, best = opacus_step_times(x, y, k, chunk, args.repeats)
    rows.append((f"opacus GradSampleModule, 1 trial (chunks of {chunk})", med, best, 1))
    rate = {r[0]: (r[3] / r[1], r[3] / r[2]) for r in rows}  # trial-steps/s (median, best)
    op = rate[rows[-1][0]]

    w0 = max(len(r[0]) for r in rows)
    print(f"{'engine':<{w0}}  {'ms/step (median)':>16}  {'trial-steps/s':>13}  {'(best)':>9}")
    print(f"{'-' * w0}  {'-' * 16}  {'-' * 13}  {'-' * 9}")
    for name, med, _best, _h in rows:
        print(f"{name:<{w0}}  {med * 1e3:16.1f}  {rate[name][0]:13.2f}  {rate[name][1]:9.2f}")
    print()
    print("ratios of trial-steps/s (median; best in brackets):")
    for h in hs:
        r = rate[f"batched trainer, H={h}"]
        print(f"  batched(H={h}) / opacus: {r[0] / op[0]:8.1f}x  [{r[1] / op[1]:.1f}x]")
    for h in hs:
        r, r2 = rate[f"batched trainer, H={h}"], rate[f"two-pass step (previous), H={h}"]
        print(f"  fused pass / two-pass step (H={h}): {r[0] / r2[0]:5.2f}x  [{r[1] / r2[1]:.2f}x]")
    if 1 in hs:
        r1 = rate["batched trainer, H=1"]
        for h in hs:
            if h != 1:
                r = rate[f"batched trainer, H={h}"]
                print(f"  batched(H={h}) / batched(H=1): {r[0] / r1[0]:5.2f}x  [{r[1] / r1[1]:.2f}x]")
    print()

    h_roof = max(hs)
    gemm = gemm_rates(x, h_roof * k, args.gemm_repeats)
    print(f"fp32 GEMM throughput, shapes of one trainer step at H={h_roof} (HK = {h_roof * k}; FLOP = 2·N·d·HK each;"
          f" {args.gemm_repeats} calls each):")
    for name, (med, best) in gemm.items():
        print(f"  {name}: best {best / 1e9:7.1f} GFLOP/s  (median {med / 1e9:.1f})")
    # Roof = the mean of the two shapes' best rates: the machine's GEMM speed when nothing else competes.
    roof = statistics.mean(g[1] for g in gemm.values())
    flops_per_trial_step = 4.0 * n * d * k
    r = rate[f"batched trainer, H={h_roof}"]
    print(f"trainer FLOP per trial-step = 2 GEMMs x 2·N·d·K = 4·N·d·K = {flops_per_trial_step / 1e9:.3f} GFLOP"
          " (softmax, norms, clipping, noise: O(N·K + K·d) per trial, not counted)")
    print(f"GEMM roof (mean of the best rates): {roof / 1e9:.1f} GFLOP/s")
    for label, rt in (("median", r[0]), ("best", r[1])):
        achieved = rt * flops_per_trial_step
        print(f"trainer at H={h_roof} ({label}): {rt:.2f} trial-steps/s x {flops_per_trial_step / 1e9:.3f} GFLOP"
              f" = {achieved / 1e9:.1f} GFLOP/s = {achieved / roof:.0%} of the GEMM roof")


if __name__ == "__main__":
    main()
