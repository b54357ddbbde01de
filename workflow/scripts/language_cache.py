"""Cache the frozen bottom's hidden states of a classification study (one pass over its texts)."""

from dphpo.studies import config as study_config
from dphpo.studies import jobs
from dphpo.studies.trainers import trainer_settings
from dphpo.tasks.classification import write_hidden_cache

with jobs.job_log(snakemake.log[0], snakemake.threads) as log:
    spec = study_config.language_study(snakemake.config, snakemake.wildcards.study)
    attrs = write_hidden_cache(snakemake.output.cache, spec, progress=True, device=trainer_settings(snakemake.config, spec).device)
    log.info("cached layer input %d of %s: %s", attrs["num_hidden_layers"] - attrs["train_layers"], spec["name"], attrs["content_sha256"])
