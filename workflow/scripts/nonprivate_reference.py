"""Non-private reference (σ = 0, best grid point on test): the ceiling for the accuracy gap."""

from dphpo.hpo import nonprivate
from dphpo.studies import config as study_config
from dphpo.studies import jobs, writer
from dphpo.studies.trainers import build_trainer

cfg, wc = snakemake.config, snakemake.wildcards
with jobs.job_log(snakemake.log[0], snakemake.threads) as log:
    trainer, cfg = build_trainer(cfg, study_config.vision_study(cfg, wc.dataset, wc.extractor), snakemake.input.features)
    result = nonprivate.run(
        trainer,
        study_config.search_space(cfg),
        eta_factor=study_config.ceiling_eta_factor(cfg),
        eta_density=study_config.CEILING_ETA_DENSITY,
    )
    prov = writer.provenance(cfg, trainer, result, dataset=wc.dataset, extractor=wc.extractor, method="nonprivate")
    writer.write_result(result, snakemake.output.result, snakemake.output.model, prov, snakemake.output.internal)
    log.info("non-private reference: test accuracy %.4f at %s", result.test_accuracy, result.released)
