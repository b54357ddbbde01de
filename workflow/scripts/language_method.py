"""One HPO method on one language study and seed, every target eps of the study in one job (one
result.json, model and internal log per target eps, staged in the job's folder; rule language_release
gives each its run folder)."""

from dphpo.studies import jobs

with jobs.job_log(snakemake.log[0], snakemake.threads) as log:
    study, method = snakemake.wildcards.study, snakemake.wildcards.method
    records = jobs.run_language_method(
        snakemake.config, study, method, int(snakemake.wildcards.seed), snakemake.input.get("source"), snakemake.output.job
    )
    for r in records:
        log.info("%s target eps=%g: total eps=%.6f, test %s=%.4f", method, r["target"]["eps"], r["total_eps"], r["metric"], r["test_metric"])
