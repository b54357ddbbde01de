"""Where a finished run spent its time: wall and CPU seconds per rule, from Snakemake's benchmark files.

Every heavy rule writes `benchmark:` files (`dphpo.layout.BENCHMARK`: results/benchmarks/<job>.tsv, the
job's first path component naming its rule, a linear scaling job's file name its stage). This sums
them per rule: jobs, wall seconds, CPU seconds (user + system, Snakemake's `cpu_time`), the largest
resident memory, and each rule's share of the CPU time — what `make study` or a paper run would gain
from making a rule faster.

Usage:  python benchmarks/rule_times.py [RUN_DIR]      (RUN_DIR: where Snakemake ran, default .)
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import defaultdict
from pathlib import Path

from dphpo import layout

#: Rules whose jobs are told apart by the benchmark file's name (the linear scaling rule's stages).
BY_FILE_NAME = ("linear_scaling",)


def rule_of(path: Path, root: Path) -> str:
    parts = path.relative_to(root).parts
    return f"{parts[0]} ({path.stem})" if parts[0] in BY_FILE_NAME else parts[0]


def rule_times(root: Path) -> dict[str, dict[str, float]]:
    """Per rule: jobs, wall s, cpu s, max RSS MB, summed over the last row (the last attempt) of each file."""
    totals: dict[str, dict[str, float]] = defaultdict(lambda: {"jobs": 0, "wall": 0.0, "cpu": 0.0, "rss": 0.0})
    for path in sorted(root.rglob("*.tsv")):
        with open(path, newline="") as fh:
            rows = list(csv.DictReader(fh, delimiter="\t"))
        if not rows:
            continue
        row, entry = rows[-1], totals[rule_of(path, root)]
        entry["jobs"] += 1
        entry["wall"] += float(row["s"])
        entry["cpu"] += float(row.get("cpu_time") or 0.0)
        entry["rss"] = max(entry["rss"], float(row.get("max_rss") or 0.0))
    return dict(totals)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", nargs="?", type=Path, default=Path("."), help="where Snakemake ran (default .)")
    args = ap.parse_args()
    root = args.run_dir / Path(layout.BENCHMARK).parent
    if not root.is_dir():
        sys.exit(f"no benchmark files under {root}: run the workflow first (or name the folder it ran in)")
    totals = rule_times(root)
    cpu_total = sum(t["cpu"] for t in totals.values()) or 1.0
    print("| rule | jobs | wall s | CPU s | CPU share | max RSS MB |\n|---|---|---|---|---|---|")
    for rule, t in sorted(totals.items(), key=lambda item: -item[1]["cpu"]):
        print(f"| {rule} | {t['jobs']:.0f} | {t['wall']:,.1f} | {t['cpu']:,.1f} | {t['cpu'] / cpu_total:.0%} | {t['rss']:,.0f} |")
    print(f"| all | {sum(t['jobs'] for t in totals.values()):.0f} | {sum(t['wall'] for t in totals.values()):,.1f} | {cpu_total:,.1f} | 100% | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
