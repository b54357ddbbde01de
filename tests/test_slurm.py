"""Opt-in: the workflow on a real SLURM cluster through profiles/slurm, compared with a local run.

    DPHPO_SLURM_TEST=1 .venv/bin/python -m pytest -q -m slurm tests/test_slurm.py -s   # after make install

Needs `sbatch` (skipped without it, or without DPHPO_SLURM_TEST). As root, the fixture first starts a
one-node cluster with accounting on localhost (tests/slurm/start_local_slurm.sh: munge, MariaDB,
slurmdbd, slurmctld, slurmd, partitions `cpu` and `gpu`; Debian packages slurmctld slurmd
slurm-client slurmdbd munge mariadb-server; tests/slurm/stop_local_slurm.sh stops them). On a real
cluster set DPHPO_SLURM_START=0, DPHPO_SLURM_ACCOUNT, DPHPO_SLURM_PARTITION (a CPU partition; the
tiny configs ask for no GPU) and DPHPO_SLURM_GPU_PARTITION, and run it from a directory on the
shared filesystem (DPHPO_SLURM_TMP, default: pytest's tmp_path).

profiles/slurm is used as a user would: a copy with the CHANGE_ME values filled in (its GPU partition
and gpu_model lines stay: every job of the CPU-sized configs must still land in the CPU partition and
ask for no GPU). Every job reloads the workflow in its own process with `--configfiles` only, so
byte-identical result files show that the jobs ran with the main process's config. A job cancelled
with `scancel` while it runs must fail and be retried (`retries`), not hang the workflow.
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
PARTITION = os.environ.get("DPHPO_SLURM_PARTITION", "cpu")
GPU_PARTITION = os.environ.get("DPHPO_SLURM_GPU_PARTITION", "gpu")

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.skipif(not os.environ.get("DPHPO_SLURM_TEST"), reason="opt-in: set DPHPO_SLURM_TEST=1 (profiles/README.md)"),
    pytest.mark.skipif(shutil.which("sbatch") is None, reason="SLURM is not installed (no sbatch)"),
]


@pytest.fixture(scope="module")
def cluster():
    if os.geteuid() == 0 and os.environ.get("DPHPO_SLURM_START", "1") != "0":
        subprocess.run(["bash", str(START)], check=True, timeout=300)
    for partition in (PARTITION, GPU_PARTITION):
        proc = subprocess.run(["sinfo", "-h", "-p", partition, "-o", "%T"], capture_output=True, text=True)
        assert proc.returncode == 0 and proc.stdout.strip(), f"no SLURM partition {partition}: {proc.stderr}"


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


# The one paper rule that is a cluster job, not a localrule: Table 5's evaluation loads feature caches
# (torch) and the released heads and scores them on shifted test sets (mem_mb 8000, workflow/rules/paper.smk).
PAPER_JOBS = {"paper_evaluation"}


def slurm_profile(root: Path) -> Path:
    """profiles/slurm with this site's account and partitions, as the profile's comments ask."""
    text = (REPO / "profiles" / "slurm" / "config.yaml").read_text()
    text = text.replace("CHANGE_ME_account", ACCOUNT)
    text = text.replace("CHANGE_ME_cpu_partition", PARTITION).replace("CHANGE_ME_gpu_partition", GPU_PARTITION)
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


def snakemake_cmd(*args) -> list[str]:
    return [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), *args]


def snakemake(workdir: Path, *args) -> str:
    cmd = snakemake_cmd(*args)
    proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=3600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{' '.join(cmd)}:\n{out[-5000:]}"
    return out


def slurm_args(profile: Path, config: Path) -> list[str]:
    return ["--workflow-profile", str(profile), "--configfile", str(config), "--replace-workflow-config",
            "--slurm-init-seconds-before-status-checks", "5"]


def submissions(log: str) -> list[tuple[str, str]]:
    """(SLURM job id, rule) of every submission, in order."""
    # "Job 3 has been submitted with SLURM jobid 4 (log: …/slurm_logs/rule_extract_features/…)"
    return re.findall(r"submitted with SLURM jobid (\d+) \(log: [^)]*/slurm_logs/rule_(\w+)/", log)


def accounting(job_ids) -> dict[str, dict[str, str]]:
    """sacct of the jobs (the real sacct: the adapter is on PATH of the Snakemake process only)."""
    fields = ["JobID", "State", "Partition", "ReqTRES", "AllocTRES"]
    proc = subprocess.run(["sacct", "-X", "-n", "-P", "-j", ",".join(job_ids), "-o", ",".join(fields)],
                          capture_output=True, text=True, check=True)
    acct = {}
    for line in proc.stdout.splitlines():
        row = dict(zip(fields, line.split("|")))
        acct[row["JobID"]] = row
    assert set(acct) == set(job_ids), proc.stdout
    return acct


def assert_cpu_jobs(acct: dict[str, dict[str, str]]):
    """Every job ran in the CPU partition, none asked for (or got) a GPU, though the profile names the
    GPU partition and gpu_model of the GPU rules."""
    assert {a["Partition"] for a in acct.values()} == {PARTITION}, acct
    assert not any("gpu" in a["ReqTRES"] + a["AllocTRES"] for a in acct.values()), acct


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
    log = snakemake(on_slurm, *slurm_args(profile, config), *targets)
    slurm_s = time.perf_counter() - t0
    assert "workflow specific profile" in log and "profiles/default" not in log
    submitted = submissions(log)
    assert submitted, log[-3000:]
    job_ids = [job_id for job_id, _ in submitted]
    queued_rules = {rule for _, rule in submitted}
    local_rules = set(re.findall(r"^localrule (\w+):", log, re.M))
    t1 = time.perf_counter()
    snakemake(local, "--cores", "2", "--configfile", str(config), "--replace-workflow-config", *targets)
    local_s = time.perf_counter() - t1

    # accounting: every submitted job completed in the CPU partition and asked for no GPU; no
    # table/figure/report rule was queued (paper_evaluation is a job: see PAPER_JOBS)
    acct = accounting(job_ids)
    assert {a["State"] for a in acct.values()} == {"COMPLETED"}, acct
    assert_cpu_jobs(acct)
    assert not {r for r in queued_rules if r.startswith(("table_", "paper")) and r not in PAPER_JOBS}, queued_rules
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
    assert {"nonprivate_reference", "paper_evaluation"} <= set(measured["queued rules"])  # paper_tiny has Table 5
    assert {"paper", "paper_table", "paper_figure"} <= set(measured["local rules"])


CANCEL_BOUND_S = float(os.environ.get("DPHPO_SLURM_CANCEL_BOUND_S", "1200"))


def test_a_job_cancelled_while_running_is_retried_not_waited_for(cluster, workroot):
    """scancel of a running job: sacct says `CANCELLED by <uid>`, which snakemake-executor-plugin-slurm
    (2.8.0) takes for a running job, so the workflow waited forever. Through the profile (and the sacct
    adapter the workflow puts on PATH) the job fails, `retries` resubmits it and the run finishes."""
    cfg = yaml.safe_load((REPO / "tests" / "configs" / "tiny.yaml").read_text())
    cfg["seeds"] = [0]
    config = workroot / "tiny.yaml"
    config.write_text(yaml.safe_dump(cfg))
    profile = slurm_profile(workroot)
    assert yaml.safe_load((profile / "config.yaml").read_text())["retries"] >= 1
    work = checkout(workroot / "slurm")
    stage1 = "results/runs/digits/raw/linear_scaling/default/seed0/stage1.json"  # extract_features, then the stage
    log_path = workroot / "snakemake.log"
    t0 = time.perf_counter()
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen(snakemake_cmd(*slurm_args(profile, config), stage1), cwd=work,
                                stdout=log_file, stderr=subprocess.STDOUT, text=True)
    try:
        cancelled, state = None, None
        while cancelled is None and proc.poll() is None and time.perf_counter() - t0 < CANCEL_BOUND_S:
            for job_id, _ in submissions(log_path.read_text()):
                state = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], check=False,
                                       capture_output=True, text=True).stdout.strip()
                if state == "RUNNING":
                    subprocess.run(["scancel", job_id], check=True)
                    cancelled = job_id
                    break
            time.sleep(0.2)
        assert cancelled, f"no job seen RUNNING (last state {state!r}):\n{log_path.read_text()[-3000:]}"
        t_cancel = time.perf_counter()
        try:
            rc = proc.wait(timeout=max(CANCEL_BOUND_S - (t_cancel - t0), 60))
        except subprocess.TimeoutExpired:
            pytest.fail(f"Snakemake still waits {CANCEL_BOUND_S:.0f} s after the start, job {cancelled} cancelled:\n"
                        f"{log_path.read_text()[-3000:]}")
    finally:
        if proc.poll() is None:
            proc.terminate()  # Snakemake cancels its jobs on SIGTERM
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    done_s = time.perf_counter() - t_cancel
    log = log_path.read_text()
    assert rc == 0, log[-5000:]
    submitted = submissions(log)
    rule_of = dict(submitted)
    acct = accounting([job_id for job_id, _ in submitted])
    # SLURM's own words (the real sacct), which the plugin alone does not match
    assert re.fullmatch(r"CANCELLED by \d+", acct[cancelled]["State"]), acct[cancelled]
    assert f"SLURM-job '{cancelled}' failed, SLURM status is: 'CANCELLED'" in log, log[-5000:]
    retried = [job_id for job_id, rule in submitted if rule == rule_of[cancelled] and job_id != cancelled]
    assert len(retried) == 1 and int(retried[0]) > int(cancelled), submitted
    assert {acct[j]["State"] for j in acct if j != cancelled} == {"COMPLETED"}, acct
    assert_cpu_jobs(acct)
    assert (work / stage1).is_file()
    print(f"\ncancelled job {cancelled} ({rule_of[cancelled]}), retried as {retried[0]}; run finished "
          f"{done_s:.0f} s after the scancel, {time.perf_counter() - t0:.0f} s in all; jobs: {submitted}")
