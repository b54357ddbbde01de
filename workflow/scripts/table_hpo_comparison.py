"""The HPO comparison table (md, csv, tex, html) and the accuracy-vs-ε figure of every method."""

from dphpo.report import comparison
from dphpo.studies import config as study_config
from dphpo.studies import jobs

with jobs.job_log(snakemake.log[0]):
    # every result must be of the settings the config asks for (Snakemake may not have rerun it)
    study_config.check_inputs([*snakemake.input.results, *snakemake.input.references], snakemake.config)
    comparison.make(
        snakemake.input.results,
        snakemake.input.references,
        md=snakemake.output.md,
        csv_path=snakemake.output.csv,
        tex=snakemake.output.tex,
        figure=snakemake.output.figure,
        html_path=snakemake.output.html,
        config=snakemake.config,
    )
