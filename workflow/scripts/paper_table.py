"""One table of Panda et al. (wildcard `table`) from result files: Markdown, CSV, LaTeX and HTML.
Plain `logging` to the job log: these jobs read JSON records only and stay free of the torch import
(dphpo.studies.jobs.job_log; the methods' registry: the rule passes `method_jobs`) that would dominate their
runtime. Table 5's accuracies on shifted test sets come from rule paper_evaluation's sealed record.
"""

import logging

from dphpo.report import paper
from dphpo.studies import config as study_config

logging.basicConfig(filename=snakemake.log[0], filemode="w", level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
name = snakemake.wildcards.table
# every release must be of the settings the config asks for (Snakemake may not have rerun it)
study_config.check_inputs(study_config.run_results(snakemake.input), snakemake.config)
study_config.check_language_results(snakemake.input, snakemake.config)  # Table 3's language rows
table = paper.write(
    snakemake.config,
    name,
    md=snakemake.output.md,
    csv_path=snakemake.output.csv,
    tex=snakemake.output.tex,
    html_path=snakemake.output.html,
    method_jobs=snakemake.params.method_jobs,
)
logging.info("%s: %d rows; notes: %s", name, len(table.rows), table.notes)
