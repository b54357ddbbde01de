"""The baselines in the workflow: one generic job per (study, method, seed), all methods in `make study`."""

import re
import subprocess
import sys
from pathlib import Path

import yaml

from dphpo.hpo import registry

REPO = Path(__file__).resolve().parents[1]


def dry_run(workdir, *args):
    # an empty working directory, so results already built in the checkout hide no job
    config = str(REPO / "config" / "config.yaml")
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--configfile", config,
           "-d", str(workdir), "-n", *args]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout + proc.stderr


def test_default_study_runs_every_baseline_on_every_study_and_seed(tmp_path):
    out = dry_run(tmp_path)
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    jobs = set(re.findall(r"wildcards: dataset=(\w+), extractor=(\w+), method=(\w+), variant=(\w+), seed=(\d+)", out))
    expected = {
        (d, e, m, "default", str(s))
        for d, e, m in registry.method_jobs(config)
        for s in config["seeds"]
    }
    assert jobs == expected
    assert {m for _, _, m, _, _ in jobs} == set(registry.BASELINES)  # the embedded study includes every method
    assert "table_hpo_comparison" in out
