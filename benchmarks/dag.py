"""Time to build the workflow's DAG (a dry run), the embedded study and the paper grid side by side.

The paper grid's DAG has ~2,600 jobs; Snakemake's output matching grows with the number of jobs and
outputs per job. Both dry runs start from an empty working directory, in one invocation of this
script, so their ratio is comparable across machines. Prints timings; never fails on speed.

    .venv/bin/python benchmarks/dag.py [--repeats 2]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIGS = {"config/config.yaml": "all", "config/paper.yaml": "paper"}


def dry_run(config: str, target: str) -> tuple[int, float]:
    """(jobs, seconds) of `snakemake -n` for `target` of `config` in an empty directory."""
    with tempfile.TemporaryDirectory() as workdir:
        cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "-n", "--quiet", "rules",
               "--configfile", str(REPO / config), "--replace-workflow-config", "-d", workdir, target]
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, check=True)
        seconds = time.perf_counter() - start
    total = re.search(r"^total\s+(\d+)", proc.stdout + proc.stderr, re.M)
    return (int(total.group(1)) if total else 0), seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2, help="dry runs per config (the best is reported)")
    args = parser.parse_args()
    rows = {}
    for config, target in CONFIGS.items():
        runs = [dry_run(config, target) for _ in range(args.repeats)]
        rows[config] = (runs[0][0], min(s for _, s in runs))
        print(f"{config:22s} target {target:6s}: {rows[config][0]:5d} jobs, dry run {rows[config][1]:6.1f} s "
              f"({1e3 * rows[config][1] / max(1, rows[config][0]):.1f} ms/job)")
    (small_jobs, small_s), (big_jobs, big_s) = rows.values()
    print(f"paper / embedded: {big_jobs / max(1, small_jobs):.1f}x the jobs, {big_s / small_s:.1f}x the time")


if __name__ == "__main__":
    main()
