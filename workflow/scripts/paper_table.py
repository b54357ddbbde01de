"""One table of seed 000 (params.table) from result files: Markdown, CSV, LaTeX and HTML.

Plain `logging` to the job log: these jobs read JSON only and stay free of the torch import
(dphpo.studies.jobs.job_log) that would dominate their runtime.
"""

import logging

from dphpo.report import paper

logging.basicConfig(filename=snakemake.log[0], filemode="w", level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
table = paper.write(
    snakemake.config,
    snakemake.params.table,
    md=snakemake.output.md,
    csv_path=snakemake.output.csv,
    tex=snakemake.output.tex,
    html_path=snakemake.output.html,
)
logging.info("%s: %d rows; notes: %s", snakemake.params.table, len(table.rows), table.notes)
