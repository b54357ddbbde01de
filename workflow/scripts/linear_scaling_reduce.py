"""Panda et al. Table 14: redo a linear scaling result's final run at a lower total ε (variant's reduce_eps)."""

from dphpo.hpo import linear_scaling
from dphpo.studies import config as study_config
from dphpo.studies import jobs, writer
from dphpo.studies.trainers import build_trainer

wc = snakemake.wildcards
cfg = study_config.variant_config(snakemake.config, wc.variant)
spec = snakemake.params.reduce_eps
with jobs.job_log(snakemake.log[0], snakemake.threads) as log:
    (source,) = study_config.check_inputs([snakemake.input.source], snakemake.config)  # a source of other settings is refused
    trainer, cfg = build_trainer(cfg, study_config.vision_study(cfg, wc.dataset, wc.extractor), snakemake.input.features)
    noise = study_config.noise_scope(cfg, wc.dataset, wc.extractor, wc.variant, int(wc.seed), "linear_scaling", trainer)
    result = linear_scaling.reduce_final(trainer, source, float(wc.eps), spec["how"], noise)
    prov = writer.provenance(cfg, trainer, result, noise, seed=int(wc.seed), dataset=wc.dataset, extractor=wc.extractor, variant=wc.variant, method="linear_scaling")
    writer.write_result(result, snakemake.output.result, snakemake.output.model, prov, snakemake.output.internal)
    log.info("%s: total eps=%.6f, test accuracy=%.4f", spec["how"], result.total["eps"], result.test_accuracy)
