"""A GPU check a user runs: the tiny study on the GPU against the same study on the CPU, file by file.

Runs one study config twice in a temporary folder with one fresh noise key, `training.device: cpu`
and then `training.device: <--device>`, and compares every release (each `result.json` and its
`model.npz`): the test accuracy must be equal, the weights equal to float rounding (their largest
relative difference is printed). Every other file is compared as `dphpo diff` does; files that differ
only because the device differs (provenance) are counted apart. Then, unless --no-benchmarks, the
trainer, fine-tuning and extraction benchmarks run on the device and their tables are printed.

Exit status 0 when every release agrees; 1 otherwise. Without a GPU `--device cpu` runs the same
comparison CPU against CPU (a reproducibility check).

Usage:  make gpu-check
        python benchmarks/gpu_check.py [--device cuda] [--config tests/configs/tiny.yaml] [--cores 4] [--no-benchmarks]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
#: Relative weight difference allowed between devices: float rounding of different GEMM orders, not a bug.
WEIGHT_RTOL = 1e-4
BENCHMARKS = (
    ("trainer", ["benchmarks/trainer.py", "--shape", "cifar10", "--trials", "16,64", "--steps", "10", "--repeats", "2"]),
    ("fine-tuning", ["benchmarks/finetune.py", "--model", "gpt2", "--steps", "3", "--repeats", "2"]),
    ("extraction", ["benchmarks/extract.py", "--resolution", "224", "--weights", "random"]),
)


def run_study(config: Path, device: str, out: Path, key: Path, cores: int) -> float:
    """Run the study with `training.device: device` into `out`; returns the wall time in seconds."""
    work = out.parent
    override = work / f"{out.name}.yaml"
    override.write_text(json.dumps({"training": {"device": device}}))
    cmd = [sys.executable, "-m", "snakemake", "--cores", str(cores), "--configfile", str(config), str(override),
           "--replace-workflow-config", "-d", str(out), "-s", str(ROOT / "Snakefile")]
    env = dict(os.environ, DPHPO_NOISE_KEY_FILE=str(key))
    t0 = time.perf_counter()
    with open(work / f"{out.name}.log", "w") as log:
        done = subprocess.run(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    if done.returncode:
        sys.exit(f"the study failed on {device}: see {work / (out.name + '.log')}")
    return time.perf_counter() - t0


def compare_releases(cpu: Path, other: Path) -> list[dict]:
    """One row per release: its test accuracy on both devices and the weights' largest relative difference."""
    rows = []
    for result in sorted((cpu / "results").rglob("result.json")):
        rel = result.relative_to(cpu)
        a, b = json.loads(result.read_text()), json.loads((other / rel).read_text())
        row = {"release": str(rel.parent.relative_to("results/runs")), "acc_cpu": a.get("test_accuracy"), "acc_other": b.get("test_accuracy")}
        model = result.with_name("model.npz")
        if model.exists():
            with np.load(model) as wa, np.load(other / rel.with_name("model.npz")) as wb:
                row["weights_rel"] = max(
                    (float(np.abs(wa[k] - wb[k]).max() / max(np.abs(wa[k]).max(), 1e-30)) for k in wa.files if wa[k].dtype.kind == "f"),
                    default=0.0)
        rows.append(row)
    return rows


def main() -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="the device checked against the CPU")
    ap.add_argument("--config", type=Path, default=ROOT / "tests/configs/tiny.yaml")
    ap.add_argument("--cores", type=int, default=min(8, os.cpu_count() or 1))
    ap.add_argument("--work", type=Path, help="keep the two trees here (default: a temporary folder, removed)")
    ap.add_argument("--no-benchmarks", dest="benchmarks", action="store_false")
    args = ap.parse_args()

    from dphpo.privacy.randomness import NoiseKey
    from dphpo.treediff import compare_trees

    with tempfile.TemporaryDirectory(prefix="dphpo-gpu-check-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        key = work / "noise.key"
        key.write_text(NoiseKey.generate().secret.hex())
        key.chmod(0o600)
        cpu, other = work / "reference_cpu", work / f"checked_{args.device.replace(':', '_')}"
        seconds = [run_study(args.config.resolve(), dev, out, key, args.cores) for dev, out in (("cpu", cpu), (args.device, other))]
        rows = compare_releases(cpu, other)
        differences, compared = compare_trees(cpu / "results", other / "results")
    bad = [r for r in rows if r["acc_cpu"] != r["acc_other"] or r.get("weights_rel", 0.0) > WEIGHT_RTOL]
    where = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu"
    print(f"study {args.config.name} on {args.device} ({where}) against the CPU, one noise key: "
          f"{seconds[0]:.0f} s on the CPU, {seconds[1]:.0f} s on {args.device}")
    print(f"| release | test accuracy (cpu) | test accuracy ({args.device}) | weights: max relative difference |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['release']} | {r['acc_cpu']} | {r['acc_other']} | {r.get('weights_rel', float('nan')):.1e} |")
    print(f"\n{len(rows)} releases, {len(bad)} disagree (accuracy unequal or weights beyond {WEIGHT_RTOL:g} relative);"
          f" {compared} files compared, {len(differences)} differ by value (float rounding and the device in provenance)")
    for d in differences[:10]:
        print(f"  {d.path}: {d.what}")
    if args.benchmarks:
        for name, cmd in BENCHMARKS:
            print(f"\n## {name}: {' '.join(cmd)} --device {args.device}", flush=True)
            subprocess.run([sys.executable, *cmd, "--device", args.device.split(":")[0]], cwd=ROOT)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
