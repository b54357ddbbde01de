"""The audit table (md, csv, json): the empirical privacy audit of config `audit:`."""

from dphpo import study
from dphpo.audit.run import audits_from_config
from dphpo.report.audit import write_audit

with study.job_log(snakemake.log[0], threads=snakemake.threads):
    results = audits_from_config(snakemake.params.audit, snakemake.params.data_dir, progress=True)
    write_audit(results, snakemake.output.md)
