"""The linear scaling table (md, csv, html) and the accuracy-vs-ε figure."""

from dphpo import study
from dphpo.report import linear_scaling

with study.job_log(snakemake.log[0]):
    # every result must be of the settings the config asks for (Snakemake may not have rerun it)
    study.check_inputs([*snakemake.input.results, *snakemake.input.references], snakemake.config)
    linear_scaling.make(
        snakemake.input.results,
        snakemake.input.references,
        md=snakemake.output.md,
        csv_path=snakemake.output.csv,
        figure=snakemake.output.figure,
        html_path=snakemake.output.html,
        config=snakemake.config,
    )
