"""A GPU check a user runs: the tiny study on the GPU against the same study on the CPU, file by file.

Runs one study config twice in a temporary folder with one fresh noise key, `training.device: cpu`
and then `training.device: <--device>`, and compares every release (each `result.json` and its
`model.npz`): the test accuracy must be equal, the weights equal to float rounding (their largest
relative difference is printed). Every other file is compared as `dphpo diff` does; files that differ
only because the device differs (provenance) are counted apart. Then, unless --no-benchmarks, the
trainer, fine-tuning and extraction benchmarks run on the device and their tables are printed.

`--language CONFIG` checks a config's language rows instead: its language studies whose models need
no package download (the causal-LM studies fine-tuned from a checkpoint the workflow pretrains), next
to the tiny vision study. The public pretraining runs once, on the CPU, and both trees fine-tune from
it: the check is about the private jobs, and a GPU pretraining differs by float rounding amplified
over hundreds of public steps, which is no privacy question. A language release's test score is a
mean over tokens computed in another order on the GPU: equal to `SCORE_ATOL`, not bit for bit.

Exit status 0 when every release agrees; 1 otherwise. Without a GPU `--device cpu` runs the same
comparison CPU against CPU (a reproducibility check).

Usage:  make gpu-check
        python benchmarks/gpu_check.py [--device cuda] [--config tests/configs/tiny.yaml] [--cores 4] [--no-benchmarks]
        python benchmarks/gpu_check.py --language config/paper_embedded.yaml --no-benchmarks
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
#: The same for a language model's weights: trained with Adam, whose update divides by √v, so a coordinate of a
#: near-zero non-private gradient moves by up to the learning rate either way on a rounding difference
#: (measured on one H200: the tiny non-private GPT-2 4.9e-4, its private releases ≤ 7.5e-6).
LANGUAGE_WEIGHT_RTOL = 1e-3
#: Test scores of two devices may differ by this much, relative above 1 (a language model's perplexity is a
#: float mean; a vision accuracy is a count over N, so any miscount exceeds it).
SCORE_ATOL = 1e-4
BENCHMARKS = (
    ("trainer", ["benchmarks/trainer.py", "--shape", "cifar10", "--trials", "16,64", "--steps", "10", "--repeats", "2"]),
    ("fine-tuning", ["benchmarks/finetune.py", "--model", "gpt2", "--steps", "3", "--repeats", "2"]),
    # --input 256: ImageNet-sized JPEGs for the from-files column (decoding them is the part a GPU cannot speed)
    ("extraction", ["benchmarks/extract.py", "--resolution", "224", "--input", "256", "--weights", "random", "--from-files"]),
)


def language_rows(config: Path, out: Path) -> tuple[Path, list[str]]:
    """A config of `config`'s language studies that need no package model (task causal_lm), with their
    pretraining and the tables that name only them, the rest of `config` kept but its vision studies replaced
    by the tiny study's (no package model needed; none of its jobs is a target); written to `out`.
    Returns it and its targets: those tables."""
    import yaml

    full, tiny = yaml.safe_load(config.read_text()), yaml.safe_load((ROOT / "tests/configs/tiny.yaml").read_text())
    lang = full["language"]
    studies = [s for s in lang["studies"] if s["task"] == "causal_lm"]
    if not studies:
        sys.exit(f"{config}: no language study with task causal_lm to check")
    names = {s["name"] for s in studies}
    pretrain = {s["model"]["pretrain"] for s in studies}

    def kept(entry) -> bool:  # a table entry: a study name, a list of them, or {label, study}
        if isinstance(entry, list):
            return all(kept(e) for e in entry)
        return (entry.get("study") if isinstance(entry, dict) else entry) in names

    tables = {k: v for k, v in lang.get("tables", {}).items() if k == "eps" or kept(v)}
    rows = {k: v for k, v in full.items() if k not in ("paper", "variants", "pretraining")}
    rows |= {"studies": tiny["studies"], "extractors": tiny["extractors"]}
    rows["language"] = {"pretrain": {k: v for k, v in lang["pretrain"].items() if k in pretrain}, "studies": studies, "tables": tables}
    out.write_text(yaml.safe_dump(rows, sort_keys=False))
    return out, [f"results/tables/{name}.md" for name in tables if name.startswith("table")]


def share_public(cpu: Path, other: Path) -> None:
    """Copy the CPU tree's public pretraining into the other tree (times kept, so Snakemake reuses it)."""
    import shutil

    for src in (cpu / "results/language/pretrained").glob("*.pt"):
        dst = other / src.relative_to(cpu)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)


def run_study(config: Path, device: str, out: Path, key: Path, cores: int, targets: list[str]) -> float:
    """Run the study's `targets` (none: its default target) with `training.device: device` into `out`;
    returns the wall time in seconds."""
    work = out.parent
    override = work / f"{out.name}.yaml"
    override.write_text(json.dumps({"training": {"device": device}}))
    cmd = [sys.executable, "-m", "snakemake", "--cores", str(cores), "--configfile", str(config), str(override),
           "--replace-workflow-config", "-d", str(out), "-s", str(ROOT / "Snakefile"), *targets]
    env = dict(os.environ, DPHPO_NOISE_KEY_FILE=str(key))
    t0 = time.perf_counter()
    with open(work / f"{out.name}.log", "w") as log:
        done = subprocess.run(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    if done.returncode:
        sys.exit(f"the study failed on {device}: see {work / (out.name + '.log')}")
    return time.perf_counter() - t0


def max_relative_difference(a: dict, b: dict) -> float:
    """The largest |a − b| / max|a| over the float arrays of two releases' weights."""
    diffs = [float(np.abs(a[k] - b[k]).max() / max(np.abs(a[k]).max(), 1e-30)) for k in a if a[k].dtype.kind == "f" and a[k].size]
    return max(diffs, default=0.0)


def release_weights(result: Path) -> dict | None:
    """A release's weights as numpy arrays: model.npz (vision) or the state dict in model.pt (language)."""
    if (npz := result.with_name("model.npz")).exists():
        with np.load(npz) as f:
            return {k: f[k] for k in f.files}
    if (pt := result.with_name("model.pt")).exists():
        import torch

        state = torch.load(pt, map_location="cpu", weights_only=False)
        state = state.get("state_dict", state) if isinstance(state, dict) else state
        return {k: v.float().numpy() for k, v in state.items() if hasattr(v, "is_floating_point") and v.is_floating_point()}
    return None


def test_score(record: dict):
    """A release's test accuracy, or its test metric where it has none (a language model's perplexity)."""
    return record["test_accuracy"] if record.get("test_accuracy") is not None else record.get("test_metric")


def compare_releases(cpu: Path, other: Path) -> list[dict]:
    """One row per release: its test score on both devices and the weights' largest relative difference."""
    rows = []
    for result in sorted((cpu / "results").rglob("result.json")):
        rel = result.relative_to(cpu)
        a, b = json.loads(result.read_text()), json.loads((other / rel).read_text())
        row = {"release": str(rel.parent.relative_to("results")), "acc_cpu": test_score(a), "acc_other": test_score(b)}
        wa, wb = release_weights(result), release_weights(other / rel)
        if wa is not None and wb is not None:
            row["weights_rel"] = max_relative_difference(wa, wb)
            row["weights_rtol"] = WEIGHT_RTOL if result.with_name("model.npz").exists() else LANGUAGE_WEIGHT_RTOL
        rows.append(row)
    return rows


def _scores_agree(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return abs(float(a) - float(b)) <= SCORE_ATOL * max(1.0, abs(float(a)))


def main() -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="the device checked against the CPU")
    ap.add_argument("--config", type=Path, default=ROOT / "tests/configs/tiny.yaml")
    ap.add_argument("--cores", type=int, default=min(8, os.cpu_count() or 1))
    ap.add_argument("--language", type=Path, metavar="CONFIG", help="check CONFIG's causal-LM language rows instead")
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
        config, targets = language_rows(args.language.resolve(), work / "language_rows.yaml") if args.language else (args.config.resolve(), [])
        seconds = [run_study(config, "cpu", cpu, key, args.cores, targets)]
        share_public(cpu, other)
        seconds.append(run_study(config, args.device, other, key, args.cores, targets))
        rows = compare_releases(cpu, other)
        differences, compared = compare_trees(cpu / "results", other / "results")
    bad = [r for r in rows if not _scores_agree(r["acc_cpu"], r["acc_other"]) or r.get("weights_rel", 0.0) > r.get("weights_rtol", WEIGHT_RTOL)]
    where = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu"
    print(f"study {config.name} on {args.device} ({where}) against the CPU, one noise key: "
          f"{seconds[0]:.0f} s on the CPU, {seconds[1]:.0f} s on {args.device}")
    print(f"| release | test accuracy or metric (cpu) | the same ({args.device}) | weights: max relative difference |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['release']} | {r['acc_cpu']} | {r['acc_other']} | {r.get('weights_rel', float('nan')):.1e} |")
    print(f"\n{len(rows)} releases, {len(bad)} disagree (score unequal, or weights beyond {WEIGHT_RTOL:g} relative,"
          f" {LANGUAGE_WEIGHT_RTOL:g} for a language model);"
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
