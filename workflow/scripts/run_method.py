"""One HPO method of the registry on one (dataset, extractor, variant, seed), every target ε in one job."""

from dphpo.hpo import registry
from dphpo.layout import files_by_target
from dphpo.studies import config as study_config
from dphpo.studies import jobs, writer
from dphpo.studies.trainers import build_trainer

wc = snakemake.wildcards
cfg = study_config.variant_config(snakemake.config, wc.variant)
with jobs.job_log(snakemake.log[0], snakemake.threads) as log:
    trainer, cfg = build_trainer(cfg, study_config.vision_study(cfg, wc.dataset, wc.extractor), snakemake.input.features)
    noise = study_config.noise_scope(cfg, wc.dataset, wc.extractor, wc.variant, int(wc.seed), wc.method, trainer)
    results = registry.run_method(wc.method, trainer, study_config.method_config(cfg, wc.method), noise, progress=True)
    out = snakemake.output
    # each result's files by its own target ε (params.targets: the ε of each output, in their order)
    files = files_by_target(snakemake.params.targets, out.results, out.models, out.internal)
    for result in results:
        result_path, model_path, internal_path = files(result.target_eps)
        prov = writer.provenance(
            cfg, trainer, result, noise, seed=int(wc.seed), dataset=wc.dataset, extractor=wc.extractor, variant=wc.variant, method=wc.method
        )
        writer.write_result(result, result_path, model_path, prov, internal_path)
        log.info("%s target eps=%g: total eps=%.6f, test %s=%.4f", wc.method, result.target_eps, result.total["eps"], result.metric, result.test_metric)
