"""Faults a real run meets: a training job killed (`kill -9`, as an OOM killer or a lost node does)
and resumed with `--rerun-incomplete`; the same config run in another directory. Either way the
numbers must be the ones of one uninterrupted run, byte for byte.

Tiny digits config (tests/configs/tiny.yaml), one seed: linear scaling (features, stage 1, stage 2,
final) and the Papernot–Steinke baseline (a random number of trials: its RNG stream must survive a
restart too).
"""

import os
import signal
import subprocess
import sys
import time
from base64 import urlsafe_b64encode
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "tests" / "configs" / "tiny.yaml"
RUN = "results/runs/digits/raw"
TARGETS = [
    f"{RUN}/linear_scaling/default/seed0/eps1/result.json",
    f"{RUN}/papernot_steinke/default/seed0/eps1/result.json",
]
STAGE2 = f"{RUN}/linear_scaling/default/seed0/stage2.json"


def started_marker(workdir: Path, output: str) -> Path:
    """The record Snakemake writes when it starts the job of `output` (removed when the job ends).

    Killing on it rather than on the job's log: the job is then still starting (interpreter, imports),
    a window of seconds, where the log appears only a fraction of a second before a tiny stage ends."""
    return workdir / ".snakemake" / "incomplete" / urlsafe_b64encode(output.encode()).decode()


def snakemake_cmd(*args):
    return [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--cores", "2",
            "--configfile", str(TINY), "--replace-workflow-config", *args]


def run(workdir: Path, *args):
    proc = subprocess.run(snakemake_cmd(*args), cwd=workdir, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout + proc.stderr


def outputs(workdir: Path) -> dict[str, bytes]:
    """Every file the runs wrote under results/runs/ (JSON, models) by relative path."""
    root = workdir / "results" / "runs"
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def assert_same_numbers(got: dict[str, bytes], want: dict[str, bytes], workdir: Path, ref: Path):
    assert sorted(got) == sorted(want)
    for name in want:
        if name.endswith(".npz"):  # zip entries carry a write time: compare the arrays
            with np.load(workdir / "results" / "runs" / name) as a, np.load(ref / "results" / "runs" / name) as b:
                assert sorted(a.files) == sorted(b.files), name
                for key in a.files:
                    assert a[key].tobytes() == b[key].tobytes(), (name, key)
        else:
            assert got[name] == want[name], f"{name} differs"


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One uninterrupted run."""
    workdir = tmp_path_factory.mktemp("uninterrupted")
    run(workdir, *TARGETS)
    files = outputs(workdir)
    assert any(name.endswith("result.json") for name in files)
    return workdir, files


@pytest.mark.slow
def test_kill_9_of_a_training_job_then_rerun_incomplete_gives_the_same_numbers(reference, tmp_path):
    ref, want = reference
    proc = subprocess.Popen(snakemake_cmd(*TARGETS), cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not started_marker(tmp_path, STAGE2).exists():  # stage 2 has started: stage 1 is done
            assert proc.poll() is None, "snakemake ended before stage 2 started"
            assert time.monotonic() < deadline, "stage 2 did not start"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # snakemake and every job it started
        proc.wait()
    assert not (tmp_path / STAGE2).exists(), "the killed job had already finished: nothing was interrupted"
    assert (tmp_path / "results/runs/digits/raw/linear_scaling/default/seed0/stage1.json").exists()

    # the killed process left its lock behind: release it, as the error message says, then resume
    run(tmp_path, "--unlock", *TARGETS)
    log = run(tmp_path, "--rerun-incomplete", *TARGETS)
    assert "linear_scaling_stage" in log
    assert_same_numbers(outputs(tmp_path), want, tmp_path, ref)
    assert not list((tmp_path / "results").rglob("*.tmp*")), "temporary files left by the killed job"


@pytest.mark.slow
def test_the_same_config_in_another_directory_gives_the_same_numbers(reference, tmp_path):
    ref, want = reference
    workdir = tmp_path / "another" / "deeper directory"  # another absolute path, with a space
    workdir.mkdir(parents=True)
    run(workdir, *TARGETS)
    assert_same_numbers(outputs(workdir), want, workdir, ref)
