"""The audit table (md, csv, json): the empirical privacy audit of config `audit:`."""

from dphpo.audit.run import audits_from_config
from dphpo.report.audit import write_audit
from dphpo.studies import jobs

with jobs.job_log(snakemake.log[0], threads=snakemake.threads):
    results = audits_from_config(snakemake.params.audit, snakemake.params.data_dir, progress=True)
    write_audit(results, snakemake.output.md)
