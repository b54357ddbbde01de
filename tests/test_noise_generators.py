"""benchmarks/noise_generators.py times the trainer's own Philox (`dphpo.train.philox`, tested in
tests/test_philox.py) and prints its table on the CPU."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch

from dphpo.train.philox import NOISE, PhiloxTrials

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import noise_generators as ng  # noqa: E402


def test_the_benchmark_draws_what_the_trainer_draws():
    cpu = torch.device("cpu")
    assert torch.equal(ng.philox_normal(1001, 42, cpu), PhiloxTrials([42], cpu).normal(1, 1001, 0, NOISE)[0])


def test_the_benchmark_prints_its_table_on_the_cpu():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "noise_generators.py"), "--device", "cpu", "--sizes", "4096",
                          "--repeats", "1", "--no-compile"], capture_output=True, text=True, check=True).stdout
    row = next(line for line in out.splitlines() if line.startswith("| 4,096 |"))
    assert row.split("|")[7].strip() == "1.000000000"  # the CPU against itself: every float32 normal equal
