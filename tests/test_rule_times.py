"""benchmarks/rule_times.py sums a finished run's benchmark files per rule."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def load_script():
    spec = importlib.util.spec_from_file_location("rule_times", ROOT / "benchmarks" / "rule_times.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write(path: Path, *rows: tuple[float, float, float]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + "".join(f"{s}\t0:00:01\t{rss}\t0\t0\t0\t0\t0\t50\t{cpu}\n" for s, rss, cpu in rows))


def test_times_are_summed_per_rule_and_stage_from_the_last_attempt(tmp_path):
    bench = tmp_path / "results" / "benchmarks"
    write(bench / "grid_oracle/digits/raw/default/seed0.tsv", (10.0, 500.0, 8.0))
    write(bench / "grid_oracle/digits/raw/default/seed1.tsv", (99.0, 900.0, 99.0), (12.0, 600.0, 9.5))  # a retry: its last row counts
    write(bench / "linear_scaling/digits/raw/default/seed0/stage1.tsv", (3.0, 100.0, 2.0))
    write(bench / "linear_scaling/digits/raw/default/seed0/final.tsv", (4.0, 200.0, 3.0))
    write(bench / "linear_scaling/digits/raw/default/seed1/final.tsv", (5.0, 300.0, 3.5))
    totals = load_script().rule_times(bench)
    assert totals["grid_oracle"] == {"jobs": 2, "wall": 22.0, "cpu": 17.5, "rss": 600.0}
    assert totals["linear_scaling (final)"] == {"jobs": 2, "wall": 9.0, "cpu": 6.5, "rss": 300.0}
    assert totals["linear_scaling (stage1)"]["jobs"] == 1
    assert set(totals) == {"grid_oracle", "linear_scaling (final)", "linear_scaling (stage1)"}
