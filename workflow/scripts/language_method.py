"""One HPO method on one language study and seed, every target eps of the study in one job."""

from dphpo import study
from dphpo.tasks import registry

wc = snakemake.wildcards
with study.job_log(snakemake.log[0], snakemake.threads) as log:
    records = registry.run_study_method(
        snakemake.config, wc.study, wc.method, int(wc.seed), snakemake.input.get("source"), snakemake.output.results, snakemake.output.models,
        snakemake.output.internal,
    )
    for r in records:
        log.info("%s target eps=%g: total eps=%.6f, test %s=%.4f", wc.method, r["target"]["eps"], r["total_eps"], r["metric"], r["test_metric"])
