"""The linear scaling table (md, csv, html) and the accuracy-vs-ε figure."""

from dphpo.report import linear_scaling
from dphpo.studies import config as study_config
from dphpo.studies import jobs

with jobs.job_log(snakemake.log[0]):
    # every result must be of the settings the config asks for (Snakemake may not have rerun it)
    study_config.check_inputs([*snakemake.input.results, *snakemake.input.references], snakemake.config)
    linear_scaling.make(
        snakemake.input.results,
        snakemake.input.references,
        md=snakemake.output.md,
        csv_path=snakemake.output.csv,
        figure=snakemake.output.figure,
        html_path=snakemake.output.html,
        config=snakemake.config,
    )
