"""The non-private reference of a language study (eps = inf, best grid point on test, labelled so)."""

from dphpo import study
from dphpo.tasks import registry

with study.job_log(snakemake.log[0], snakemake.threads) as log:
    record = registry.run_study_nonprivate(snakemake.config, snakemake.wildcards.study, snakemake.input.get("source"), snakemake.output.result)
    log.info("non-private %s: test %s=%.4f", snakemake.wildcards.study, record["metric"], record["test_metric"])
