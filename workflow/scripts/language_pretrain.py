"""Pretrain the small causal LM of a language study on public text (non-private)."""

from dphpo import study
from dphpo.tasks.causal_lm import pretrain_small_lm

with study.job_log(snakemake.log[0], snakemake.threads) as log:
    report = pretrain_small_lm(snakemake.params.settings, snakemake.output.checkpoint, progress=True)
    log.info("pretrained %s: public test perplexity %.3f", snakemake.wildcards.name, report["public_test_perplexity"])
