"""Provenance of every result the paper tables and figures read: config, code, data, accountant."""

import logging

from dphpo.report import provenance

logging.basicConfig(filename=snakemake.log[0], filemode="w", level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
table = provenance.provenance_table(snakemake.input)
table.write(md=snakemake.output.md, html_path=snakemake.output.html)
logging.info("provenance of %d result files in %d groups", len(snakemake.input), len(table.rows))
