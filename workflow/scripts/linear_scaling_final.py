"""Fit the linear scaling rule and train the final run for every target budget of the job (params.targets:
all of the study's, or one of a variant with its own target list)."""

from dphpo.hpo import linear_scaling
from dphpo.layout import files_by_target
from dphpo.studies import config as study_config
from dphpo.studies import jobs, writer
from dphpo.studies.trainers import build_trainer

wc = snakemake.wildcards
cfg = study_config.variant_config(snakemake.config, wc.variant)
with jobs.job_log(snakemake.log[0], snakemake.threads) as log:
    stages = study_config.check_inputs(snakemake.input.stages, snakemake.config)  # stages of other settings are refused
    trainer, cfg = build_trainer(cfg, study_config.vision_study(cfg, wc.dataset, wc.extractor), snakemake.input.features)
    noise = study_config.noise_scope(cfg, wc.dataset, wc.extractor, wc.variant, int(wc.seed), "linear_scaling", trainer)
    study_config.check_noise_scope(snakemake.input.stages, stages, noise)  # and stages of other data
    results = linear_scaling.run_final(
        trainer,
        study_config.linear_scaling_config(cfg),
        study_config.search_space(cfg),
        study_config.selection_rule(cfg, trainer.n_public),
        snakemake.params.targets,
        noise,
        stages=stages,
    )
    out = snakemake.output
    # each result's files by its own target ε (params.targets: the ε of each output, in their order)
    files = files_by_target(snakemake.params.targets, out.results, out.models, out.internal)
    for result in results:
        result_path, model_path, internal_path = files(result.target_eps)
        prov = writer.provenance(
            cfg, trainer, result, noise, seed=int(wc.seed), dataset=wc.dataset, extractor=wc.extractor, variant=wc.variant, method="linear_scaling"
        )
        writer.write_result(result, result_path, model_path, prov, internal_path)
        log.info("target eps=%g: total eps=%.6f, test accuracy=%.4f", result.target_eps, result.total["eps"], result.test_accuracy)
