"""The non-private reference of a language study (eps = inf, best grid point on test, labelled so)."""

from dphpo.studies import jobs

with jobs.job_log(snakemake.log[0], snakemake.threads) as log:
    out = snakemake.output
    record = jobs.run_language_nonprivate(snakemake.config, snakemake.wildcards.study, snakemake.input.get("source"), out.result, out.model, out.internal)
    log.info("non-private %s: test %s=%.4f", snakemake.wildcards.study, record["metric"], record["test_metric"])
