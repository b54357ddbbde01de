"""One figure of seed 000 (params.figure; heatmaps per study, Pareto fronts per dataset)."""

import logging

from dphpo.report import figures

logging.basicConfig(filename=snakemake.log[0], filemode="w", level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
where = {k: v for k, v in snakemake.wildcards.items() if k in ("dataset", "extractor")}
figures.draw(snakemake.config, snakemake.params.figure, snakemake.output.figure, **where)
logging.info("%s written to %s", snakemake.params.figure, snakemake.output.figure)
