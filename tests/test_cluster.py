"""The workflow as a cluster runs it: each job reloads the Snakefile in its own process.

A remote executor (snakemake-executor-plugin-slurm) submits every job as
`python -m snakemake --snakefile … --target-jobs … --configfiles <the main process's files> --mode remote`
(snakemake_interface_executor_plugins RealExecutor.format_job_exec + snakemake.spawn_jobs.general_args):
`--replace-workflow-config` is not passed on. These tests run a job exactly so, in a directory that
holds config/config.yaml as a user's checkout does, and compare it with the main process.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SNAKEFILE = str(REPO / "Snakefile")
TINY = REPO / "tests" / "configs" / "tiny.yaml"
STAGE1 = "results/runs/digits/raw/linear_scaling/default/seed0/stage1.json"
FEATURES = "results/features/digits/raw.h5"


def checkout(path: Path) -> Path:
    """A working directory laid out like the repository root: config/config.yaml next to the results."""
    (path / "config").mkdir(parents=True)
    shutil.copy(REPO / "config" / "config.yaml", path / "config" / "config.yaml")
    return path


def run(cmd, cwd):
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def main_process(cwd, *args):
    """`snakemake` as the user runs it: --configfile with --replace-workflow-config."""
    return run([sys.executable, "-m", "snakemake", "--snakefile", SNAKEFILE, "--cores", "1",
                "--configfile", str(TINY), "--replace-workflow-config", *args], cwd)


def cluster_job(cwd, rule, wildcards, configfile):
    """The command line of one submitted job (as the SLURM plugin builds it, the flags that change
    how the workflow loads): the config only through --configfiles."""
    target = f"{rule}:" + ",".join(f"{k}={v}" for k, v in wildcards.items())
    return run([sys.executable, "-m", "snakemake", "--snakefile", SNAKEFILE, "--target-jobs", target,
                "--allowed-rules", rule, "--cores", "1", "--force", "--target-files-omit-workdir-adjustment",
                "--max-inventory-time", "0", "--retries", "0", "--nocolor", "--no-hooks", "--nolock",
                "--ignore-incomplete", "--configfiles", str(configfile), "--mode", "remote"], cwd)


@pytest.mark.slow
def test_a_cluster_job_loads_the_same_config_as_the_main_process(tmp_path):
    local = checkout(tmp_path / "local")
    main_process(local, STAGE1)
    local_stage = json.loads((local / STAGE1).read_text())

    cluster = checkout(tmp_path / "cluster")
    main_process(cluster, FEATURES)  # the job's input, as the main process would have it built first
    cluster_job(cluster, "linear_scaling_stage",
                {"dataset": "digits", "extractor": "raw", "variant": "default", "seed": 0, "stage": 1}, TINY)
    job_stage = json.loads((cluster / STAGE1).read_text())

    assert job_stage["provenance"]["config_hash"] == local_stage["provenance"]["config_hash"]
    assert job_stage["searches"] == local_stage["searches"]  # same config, same numbers
    # and not the hash of the embedded default merged under the tiny config
    merged = yaml.safe_load((REPO / "config" / "config.yaml").read_text()) | yaml.safe_load(TINY.read_text())
    from dphpo.provenance import config_hash
    from dphpo.studies.config import variant_config

    assert job_stage["provenance"]["config_hash"] != config_hash(variant_config(merged, "default"))


def test_a_given_config_file_replaces_the_default(tmp_path):
    """--configfile without --replace-workflow-config: the default is not merged in either."""
    work = checkout(tmp_path / "work")
    plain = run([sys.executable, "-m", "snakemake", "--snakefile", SNAKEFILE, "-n", "--configfile", str(TINY)], work)
    replaced = run([sys.executable, "-m", "snakemake", "--snakefile", SNAKEFILE, "-n", "--configfile", str(TINY),
                    "--replace-workflow-config"], work)
    jobs = [line for line in plain.stdout.splitlines() if line.startswith("rule ")]
    assert jobs and jobs == [line for line in replaced.stdout.splitlines() if line.startswith("rule ")]


def test_without_a_config_file_the_default_is_loaded(tmp_path):
    work = checkout(tmp_path / "work")
    proc = run([sys.executable, "-m", "snakemake", "--snakefile", SNAKEFILE, "-n"], work)
    default = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    assert {f"seed{s}" for s in default["seeds"]} <= set(proc.stdout.replace("/", " ").split())


def resources_of(dry_run_log: str) -> dict[str, set[str]]:
    """rule -> the distinct `resources:` lines of its jobs in a dry run."""
    out: dict[str, set[str]] = {}
    for block in dry_run_log.split("\nrule ")[1:]:
        rule = block.split(":", 1)[0]
        for line in block.splitlines():
            if line.strip().startswith("resources:"):
                out.setdefault(rule, set()).add(line.strip())
    return out


def test_gpu_model_only_on_jobs_the_config_gives_a_gpu(tmp_path):
    """profiles/slurm names a gpu_model for every rule that may use a GPU; the SLURM plugin turns any
    gpu_model into --gpus, so the CPU-sized configs must not carry it."""
    profile = yaml.safe_load((REPO / "profiles" / "slurm" / "config.yaml").read_text())
    set_resources = [f"{rule}:gpu_model={res['gpu_model']}" for rule, res in profile["set-resources"].items()]
    assert len(set_resources) >= 4
    for config, gpu in [(TINY, False), (REPO / "config" / "paper.yaml", True)]:
        proc = run([sys.executable, "-m", "snakemake", "--snakefile", SNAKEFILE, "-n", "--configfile", str(config),
                    "--replace-workflow-config", "--set-resources", *set_resources, "-d", str(tmp_path)], REPO)
        resources = resources_of(proc.stdout)
        for rule in profile["set-resources"]:
            for line in resources.get(rule, ()):
                assert ("gpu_model=" in line) == gpu and ("gpu=1" in line) == gpu, (config.name, rule, line)
        assert not any("gpu" in line for rule in ("table_linear_scaling", "table_hpo_comparison")
                       for line in resources.get(rule, ()))


# The rules' resources as profiles/slurm leaves them (the profile parsed by Snakemake's CLI, the
# workflow loaded through the API, no DAG): {config: {rule: {resource: raw value}}}
RULE_RESOURCES = """
import json, sys
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.cli import parse_args
from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings

snakefile, profile, workdir, *configs = sys.argv[1:]
out = {}
for configfile in configs:
    _, args = parse_args(["--snakefile", snakefile, "--workflow-profile", profile, "--configfile", configfile])
    with SnakemakeApi(OutputSettings()) as api:
        workflow = api.workflow(
            resource_settings=ResourceSettings(default_resources=args.default_resources,
                                               overwrite_resources=args.set_resources),
            config_settings=ConfigSettings(configfiles=args.configfile, replace_workflow_config=True),
            snakefile=Path(snakefile), workdir=Path(workdir))._workflow
        out[configfile] = {r.name: {k: v.raw for k, v in r.resources.items()} for r in workflow.rules}
print("RULE_RESOURCES " + json.dumps(out))
"""


def test_rules_without_a_gpu_use_the_cpu_partition(tmp_path):
    """profiles/slurm puts the rules that may use a GPU in the GPU partition with a gpu_model; a rule the
    config gives no GPU gets the CPU partition of default-resources back and no gpu_model (else it
    queues in the GPU partition, or for a GPU), and only the config's `resources.<rule>.gpu` asks
    for a GPU (the rules hard-code none)."""
    profile = yaml.safe_load((REPO / "profiles" / "slurm" / "config.yaml").read_text())
    cpu_partition = profile["default-resources"]["slurm_partition"]
    gpu_profile = profile["set-resources"]
    paper, cpu_configs = REPO / "config" / "paper.yaml", [REPO / "config" / "config.yaml", REPO / "config" / "paper_embedded.yaml"]
    proc = run([sys.executable, "-c", RULE_RESOURCES, SNAKEFILE, str(REPO / "profiles" / "slurm"), str(tmp_path),
                *map(str, [*cpu_configs, paper])], tmp_path)
    found = json.loads(proc.stdout.split("RULE_RESOURCES ", 1)[1])

    paper_gpu = {r for r, res in yaml.safe_load(paper.read_text())["resources"].items() if res.get("gpu")}
    assert paper_gpu == set(gpu_profile)  # the profile's GPU rules: those config/paper.yaml runs on GPUs
    for config in cpu_configs:
        rules = found[str(config)]
        assert set(gpu_profile) <= set(rules)  # every rule the profile names exists, language_method one generic rule
        for rule, res in rules.items():
            where = (config.name, rule, res)
            assert res.get("slurm_partition") == cpu_partition and res.get("gpu_model") is None, where
            assert not res.get("gpu"), where
    for rule, res in found[str(paper)].items():
        if rule in paper_gpu:
            expected = gpu_profile[rule]
            assert res["slurm_partition"] == expected["slurm_partition"], (rule, res)
            assert res["gpu_model"] == expected["gpu_model"] and res["gpu"] == 1, (rule, res)
        else:
            assert res.get("slurm_partition") == cpu_partition and not res.get("gpu_model"), (rule, res)
            assert not res.get("gpu"), (rule, res)


def test_sacct_adapter_turns_cancelled_and_preempted_into_a_state_the_slurm_plugin_fails(tmp_path, monkeypatch):
    """profiles/slurm/bin/sacct in front of a fake sacct: the plugin's own status query (its command,
    its parser) sees CANCELLED for `CANCELLED by <uid>` and PREEMPTED; other calls pass through."""
    import asyncio
    import logging

    from snakemake_executor_plugin_slurm import job_status_query

    real = tmp_path / "real"
    real.mkdir()
    (real / "sacct").write_text("#!/bin/sh\n"
                                "printf '%s\\n' \"$*\" >> \"$(dirname \"$0\")/calls\"\n"
                                "printf '11|COMPLETED\\n12|CANCELLED by 0\\n13|PREEMPTED\\n14|RUNNING\\n15|FAILED\\n'\n")
    (real / "sacct").chmod(0o755)
    adapter = REPO / "profiles" / "slurm" / "bin"
    monkeypatch.setenv("PATH", f"{adapter}{os.pathsep}{real}{os.pathsep}{os.environ['PATH']}")
    assert shutil.which("sacct") == str(adapter / "sacct")

    command = job_status_query.query_job_status_sacct("run-uuid")  # what the plugin polls
    states, _ = asyncio.run(job_status_query.query_job_status(command, logging.getLogger("test")))
    assert states == {"11": "COMPLETED", "12": "CANCELLED", "13": "CANCELLED", "14": "RUNNING", "15": "FAILED"}
    assert "--name run-uuid" in (real / "calls").read_text()  # the arguments reach the real sacct

    other = subprocess.run(["sacct", "-j", "12", "-X", "-P", "-o", "JobID,State"], capture_output=True, text=True, check=True)
    assert "12|CANCELLED by 0" in other.stdout and "13|PREEMPTED" in other.stdout  # anything else: unchanged

    only_bash = tmp_path / "only_bash"  # a PATH with bash but no other sacct
    only_bash.mkdir()
    (only_bash / "bash").symlink_to(shutil.which("bash"))
    monkeypatch.setenv("PATH", f"{adapter}{os.pathsep}{only_bash}")
    missing = subprocess.run([str(adapter / "sacct"), "-X"], capture_output=True, text=True, check=False)
    assert missing.returncode == 127 and "not found" in missing.stderr

def test_slurm_profile_replaces_the_local_default_profile():
    """--workflow-profile profiles/slurm: profiles/default (cores: all, the local settings) is not merged
    on top, as it is under --profile profiles/slurm."""
    from snakemake.cli import parse_args

    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        _, as_workflow_profile = parse_args(["--workflow-profile", "profiles/slurm", "-n"])
        _, as_profile = parse_args(["--profile", "profiles/slurm", "-n"])
    finally:
        os.chdir(cwd)
    assert as_workflow_profile.executor == "slurm" and as_workflow_profile.jobs == 200
    assert as_workflow_profile.cores is None  # profiles/default's `cores: all` stayed out
    assert as_profile.cores == os.cpu_count()  # `cores: all` of profiles/default: the pitfall the README names


def test_a_misspelt_rule_under_resources_is_refused_naming_the_rule(tmp_path):
    """Audit: `resources.run_methd` was ignored without a word, so the rule's jobs ran with the defaults
    (on a cluster: killed at the default runtime)."""
    extra = tmp_path / "runtimes.yaml"
    extra.write_text("resources:\n  run_methd: {runtime: 5}\n")
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--snakefile", SNAKEFILE, "-n", "--configfile", str(TINY), str(extra),
                           "--replace-workflow-config", "-d", str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0
    assert "resources.run_methd names none of the workflow's rules (did you mean run_method?)" in proc.stdout + proc.stderr
