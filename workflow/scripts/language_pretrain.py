"""Pretrain the small causal LM of a language study on public text (non-private), without the public
texts that occur in the test splits of the studies fine-tuned from it (dphpo.data.overlap: the counts
are logged and kept in the checkpoint's report, `public_data.dedup`; the studies drop their private
training texts that occur in this public text, each on its own)."""

from dphpo.studies import jobs
from dphpo.tasks.causal_lm import pretrain_small_lm

with jobs.job_log(snakemake.log[0], snakemake.threads) as log:
    name = snakemake.wildcards.name
    studies = [s["data"] for s in snakemake.config["language"].get("studies", []) if s["model"].get("pretrain") == name]
    report = pretrain_small_lm(snakemake.params.settings, snakemake.output.checkpoint, progress=True, studies=studies)
    log.info("pretrained %s: public test perplexity %.3f", name, report["public_test_perplexity"])
