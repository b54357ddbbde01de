"""A paper table's evaluation (wildcard `name`; Table 5: the released heads on shifted test sets),
written as a sealed record that the table job reads."""

from dphpo.report import shift
from dphpo.studies import jobs

with jobs.job_log(snakemake.log[0], snakemake.threads) as log:
    record = shift.write(snakemake.config, snakemake.output.evaluation, snakemake.params.method_jobs)
    for row in record["rows"]:
        log.info("%s -> %s (%s): %d test examples, accuracy %s, non-private %s", row["train"], row["test"], row["extractor"], row["n_test"], row["accuracy"], row["reference_accuracy"])
