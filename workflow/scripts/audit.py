"""The audit table (md, csv, json): the empirical privacy audit of config `audit:`."""

import sys

from dphpo.audit.run import audits_from_config
from dphpo.report.audit import write_audit
from dphpo.studies import jobs

with jobs.job_log(snakemake.log[0], threads=snakemake.threads) as log:
    results = audits_from_config(snakemake.params.audit, snakemake.params.data_dir, progress=True)
    write_audit(results, snakemake.output.md)
    failed = [r for r in results if not r.passed]
    for r in failed:
        log.error("audit FAIL: a lower bound exceeds the claimed eps %g", r.spec.eps)
# the job keeps its table (a failed job's outputs are deleted) and says so where the run is watched;
# `dphpo audit` exits 1 on the same finding, for scripts and CI
if failed:
    print(f"audit: {len(failed)} of {len(results)} claims FAIL (a lower bound exceeds the claimed ε): "
          f"see {snakemake.output.md}", file=sys.stderr)
