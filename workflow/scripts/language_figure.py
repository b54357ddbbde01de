"""Panda et al. Fig. 4: perplexity and total step size vs eps, the rule against the grid."""

import logging

from dphpo.report import language

logging.basicConfig(filename=snakemake.log[0], filemode="w", level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
language.figure4(snakemake.config, snakemake.output.figure)
logging.info("figure 4 written")
