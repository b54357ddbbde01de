"""Non-private reference (σ = 0, best grid point on test): the ceiling for the accuracy gap."""

from dphpo import study
from dphpo.hpo import nonprivate
from dphpo.hpo.common import write_result

cfg, wc = snakemake.config, snakemake.wildcards
with study.job_log(snakemake.log[0], snakemake.threads) as log:
    trainer = study.load_trainer(cfg, snakemake.input.features, wc.dataset, wc.extractor)
    result = nonprivate.run(trainer, study.search_space(cfg))
    prov = study.provenance(cfg, trainer, result, dataset=wc.dataset, extractor=wc.extractor)
    write_result(result, snakemake.output.result, snakemake.output.model, prov, snakemake.output.internal)
    log.info("non-private reference: test accuracy %.4f at %s", result.test_accuracy, result.released)
