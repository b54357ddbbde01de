"""One HPO method of the registry on one (dataset, extractor, variant, seed), every target ε in one job."""

from dphpo import study
from dphpo.hpo import registry
from dphpo.hpo.common import write_result
from dphpo.layout import files_by_target

wc = snakemake.wildcards
cfg = study.variant_config(snakemake.config, wc.variant)
with study.job_log(snakemake.log[0], snakemake.threads) as log:
    trainer = study.load_trainer(cfg, snakemake.input.features, wc.dataset, wc.extractor)
    noise = study.noise_scope(cfg, wc.dataset, wc.extractor, wc.variant, int(wc.seed))
    results = registry.run_method(wc.method, trainer, cfg, noise, progress=True)
    out = snakemake.output
    # each result's files by its own target ε (params.targets: the ε of each output, in their order)
    files = files_by_target(snakemake.params.targets, out.results, out.models, out.internal)
    for result in results:
        result_path, model_path, internal_path = files(result.target_eps)
        prov = study.provenance(
            cfg, trainer, result, noise, seed=int(wc.seed), dataset=wc.dataset, extractor=wc.extractor, variant=wc.variant, method=wc.method
        )
        write_result(result, result_path, model_path, prov, internal_path)
        log.info("%s target eps=%g: total eps=%.6f, test %s=%.4f", wc.method, result.target_eps, result.total["eps"], result.metric, result.test_metric)
