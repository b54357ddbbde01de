"""One figure of Panda et al. (params.figure; heatmaps per study, Pareto fronts per dataset). The rule
passes the baselines' jobs (params.method_jobs): the job imports no torch."""

import logging

from dphpo.report import figures
from dphpo.studies import config as study_config

logging.basicConfig(filename=snakemake.log[0], filemode="w", level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
# every release drawn must be of the settings the config asks for (Snakemake may not have rerun it)
study_config.check_inputs(study_config.run_results(snakemake.input), snakemake.config)
where = {k: v for k, v in snakemake.wildcards.items() if k in ("dataset", "extractor")}
figures.draw(snakemake.config, snakemake.params.figure, snakemake.output.figure, snakemake.params.method_jobs, **where)
logging.info("%s written to %s", snakemake.params.figure, snakemake.output.figure)
