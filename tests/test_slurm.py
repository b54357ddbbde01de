"""Opt-in: the workflow on a real SLURM cluster through profiles/slurm, compared with a local run.

    DPHPO_SLURM_TEST=1 python -m pytest -q -m slurm tests/test_slurm.py -s

Needs `sbatch` (skipped without it, or without DPHPO_SLURM_TEST). As root, the fixture first starts a
one-node cluster with accounting on localhost (tests/slurm/start_local_slurm.sh: munge, MariaDB,
slurmdbd, slurmctld, slurmd; Debian packages slurmctld slurmd slurm-client slurmdbd munge
mariadb-server). On a real cluster set DPHPO_SLURM_START=0, DPHPO_SLURM_ACCOUNT and
DPHPO_SLURM_PARTITION (a CPU partition; the tiny configs ask for no GPU) and run it from a
directory on the shared filesystem (DPHPO_SLURM_TMP, default: pytest's tmp_path).

profiles/slurm is used as a user would: a copy with the CHANGE_ME values filled in (its gpu_model
lines stay: the CPU-sized configs must still ask for no GPU). Every job reloads the workflow in its
own process with `--configfiles` only, so byte-identical result files show that the jobs ran with
the main process's config.
"""

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
START = REPO / "tests" / "slurm" / "start_local_slurm.sh"
ACCOUNT = os.environ.get("DPHPO_SLURM_ACCOUNT", "dphpo")
PARTITION = os.environ.get("DPHPO_SLURM_PARTITION", "debug")

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.skipif(not os.environ.get("DPHPO_SLURM_TEST"), reason="opt-in: set DPHPO_SLURM_TEST=1 (profiles/README.md)"),
    pytest.mark.skipif(shutil.which("sbatch") is None, reason="SLURM is not installed (no sbatch)"),
]


@pytest.fixture(scope="module")
def cluster():
    if os.geteuid() == 0 and os.environ.get("DPHPO_SLURM_START", "1") != "0":
        subprocess.run(["bash", str(START)], check=True, timeout=300)
    proc = subprocess.run(["sinfo", "-h", "-p", PARTITION, "-o", "%T"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip(), f"no SLURM partition {PARTITION}: {proc.stderr}"


@pytest.fixture
def workroot(tmp_path):
    base = os.environ.get("DPHPO_SLURM_TMP")
    if not base:
        yield tmp_path
        return
    root = Path(base) / f"dphpo-slurm-test-{os.getpid()}-{time.time_ns()}"
    root.mkdir(parents=True)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def slurm_profile(root: Path) -> Path:
    """profiles/slurm with this site's account and partitions, as the profile's comments ask."""
    text = (REPO / "profiles" / "slurm" / "config.yaml").read_text()
    text = text.replace("CHANGE_ME_account", ACCOUNT)
    text = text.replace("CHANGE_ME_cpu_partition", PARTITION).replace("CHANGE_ME_gpu_partition", PARTITION)
    assert "CHANGE_ME" not in yaml.safe_dump(yaml.safe_load(text))  # every value filled in
    profile = root / "profile"
    profile.mkdir()
    (profile / "config.yaml").write_text(text)
    return profile


def checkout(path: Path) -> Path:
    """A working directory like the repository root: config/config.yaml is there (a merged default would show)."""
    (path / "config").mkdir(parents=True)
    shutil.copy(REPO / "config" / "config.yaml", path / "config" / "config.yaml")
    return path


def snakemake(workdir: Path, *args) -> str:
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), *args]
    proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=3600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{' '.join(cmd)}:\n{out[-5000:]}"
    return out


def compared_files(workdir: Path) -> dict[str, bytes]:
    """Every JSON result (runs, stages, pretraining) and every table but Table 11 (measured run times)."""
    files = {}
    for pattern in ["results/runs/**/*.json", "results/tables/*.csv", "results/tables/*.md"]:
        for p in sorted(workdir.glob(pattern)):
            if not p.name.startswith("table11"):
                files[str(p.relative_to(workdir))] = p.read_bytes()
    return files


def run_both(root: Path, config: Path, *targets) -> dict:
    """The targets through profiles/slurm and locally; returns what was measured."""
    profile = slurm_profile(root)
    on_slurm, local = checkout(root / "slurm"), checkout(root / "local")
    t0 = time.perf_counter()
    log = snakemake(on_slurm, "--workflow-profile", str(profile), "--configfile", str(config),
                    "--replace-workflow-config", "--slurm-init-seconds-before-status-checks", "5", *targets)
    slurm_s = time.perf_counter() - t0
    assert "workflow specific profile" in log and "profiles/default" not in log
    # "Job 3 has been submitted with SLURM jobid 4 (log: …/slurm_logs/rule_extract_features/…)"
    submitted = re.findall(r"submitted with SLURM jobid (\d+) \(log: [^)]*/slurm_logs/rule_(\w+)/", log)
    assert submitted, log[-3000:]
    job_ids = [job_id for job_id, _ in submitted]
    queued_rules = {rule for _, rule in submitted}
    local_rules = set(re.findall(r"^localrule (\w+):", log, re.M))
    t1 = time.perf_counter()
    snakemake(local, "--cores", "2", "--configfile", str(config), "--replace-workflow-config", *targets)
    local_s = time.perf_counter() - t1

    # accounting: every submitted job completed, none asked for a GPU, no table/report rule was queued
    acct = subprocess.run(["sacct", "-X", "-n", "-P", "-j", ",".join(job_ids), "-o", "JobID,State,ReqTRES,Comment"],
                          capture_output=True, text=True, check=True).stdout.splitlines()
    states = {line.split("|")[0]: line.split("|")[1] for line in acct}
    assert set(states) == set(job_ids) and set(states.values()) == {"COMPLETED"}, acct
    assert not any("gpu" in line for line in acct), acct
    assert not {r for r in queued_rules if r.startswith(("table_", "paper"))}, queued_rules
    assert {r for r in local_rules if r.startswith("table_")}, local_rules

    got, want = compared_files(on_slurm), compared_files(local)
    assert sorted(got) == sorted(want) and got
    differ = [name for name in want if got[name] != want[name]]
    assert not differ, f"differ from the local run: {differ}"
    measured = {"jobs submitted": len(job_ids), "slurm wall s": round(slurm_s, 1), "local wall s": round(local_s, 1),
                "files compared byte for byte": len(want), "queued rules": sorted(queued_rules), "local rules": sorted(local_rules)}
    print(f"\n{targets or 'all'}: {measured}")
    return measured


def test_tiny_study_through_the_slurm_profile_matches_a_local_run(cluster, workroot):
    cfg = yaml.safe_load((REPO / "tests" / "configs" / "tiny.yaml").read_text())
    cfg["seeds"] = [0]  # one seed: every rule and method, half the jobs
    config = workroot / "tiny.yaml"
    config.write_text(yaml.safe_dump(cfg))
    measured = run_both(workroot, config)
    assert {"extract_features", "linear_scaling_stage", "linear_scaling_final", "run_method"} <= set(measured["queued rules"])


def test_tiny_paper_target_through_the_slurm_profile_matches_a_local_run(cluster, workroot):
    measured = run_both(workroot, REPO / "tests" / "configs" / "paper_tiny.yaml", "paper")
    assert "nonprivate_reference" in measured["queued rules"]
