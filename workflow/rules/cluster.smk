# Running on a cluster: the Snakemake main process polls SLURM with `sacct`
# (snakemake-executor-plugin-slurm). The plugin takes a job that sacct shows as `CANCELLED by <uid>`
# (scancel) or PREEMPTED for a running one, so it never fails, `retries` never applies and the
# workflow waits forever; profiles/slurm/bin/sacct rewrites those states for the plugin's status query
# only (profiles/README.md). The main process puts it first on PATH where a sacct exists; the jobs and
# machines without SLURM are left alone.
import os
import shutil


# PATH: read and extended below (the adapter's directory first; harmless where jobs inherit it)
envvars:
    "PATH",


_SACCT_ADAPTER = os.path.abspath(
    os.path.join(workflow.current_basedir, "..", "..", "profiles", "slurm", "bin")
)
if (
    workflow.is_main_process
    and shutil.which("sacct")
    and os.path.isfile(os.path.join(_SACCT_ADAPTER, "sacct"))
    and _SACCT_ADAPTER not in os.environ.get("PATH", "").split(os.pathsep)
):
    os.environ["PATH"] = _SACCT_ADAPTER + os.pathsep + os.environ.get("PATH", "")
