"""Fit the linear scaling rule and train the final run for every target budget."""

from dphpo import study
from dphpo.hpo import linear_scaling
from dphpo.hpo.common import write_result
from dphpo.io import read_json
from dphpo.layout import files_by_target

wc = snakemake.wildcards
cfg = study.variant_config(snakemake.config, wc.variant)
with study.job_log(snakemake.log[0], snakemake.threads) as log:
    study.check_inputs(snakemake.input.stages, snakemake.config)  # stages of other settings are refused
    trainer = study.load_trainer(cfg, snakemake.input.features, wc.dataset, wc.extractor)
    noise = study.noise_scope(cfg, wc.dataset, wc.extractor, wc.variant, int(wc.seed))
    results = linear_scaling.run_final(
        trainer,
        study.linear_scaling_config(cfg),
        study.search_space(cfg),
        study.selection_rule(cfg),
        study.target_eps(cfg),
        noise,
        stages=[read_json(p) for p in snakemake.input.stages],
    )
    out = snakemake.output
    # each result's files by its own target ε (params.targets: the ε of each output, in their order)
    files = files_by_target(snakemake.params.targets, out.results, out.models, out.internal)
    for result in results:
        result_path, model_path, internal_path = files(result.target_eps)
        prov = study.provenance(
            cfg, trainer, result, noise, seed=int(wc.seed), dataset=wc.dataset, extractor=wc.extractor, variant=wc.variant
        )
        write_result(result, result_path, model_path, prov, internal_path)
        log.info("target eps=%g: total eps=%.6f, test accuracy=%.4f", result.target_eps, result.total["eps"], result.test_accuracy)
