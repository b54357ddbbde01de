"""One language table of Panda et al. (Tables 6-9, 17-20): Markdown, CSV, LaTeX and HTML."""

import logging

from dphpo.report import language

logging.basicConfig(filename=snakemake.log[0], filemode="w", level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
table = language.write(snakemake.config, snakemake.wildcards.table, snakemake.output.md, snakemake.output.csv, snakemake.output.tex, snakemake.output.html)
logging.info("%s: %d rows; notes: %s", snakemake.wildcards.table, len(table.rows), table.notes)
