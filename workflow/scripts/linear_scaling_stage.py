"""One stage of the linear scaling rule for every target budget (batched trials). The stage file is an
internal log (exact training accuracies of every trial): the final run reads it, tables never do."""

from dphpo import study
from dphpo.hpo import linear_scaling
from dphpo.hpo.common import INTERNAL_NOTICE
from dphpo.io import read_json, write_json

wc = snakemake.wildcards
cfg = study.variant_config(snakemake.config, wc.variant)
with study.job_log(snakemake.log[0], snakemake.threads) as log:
    trainer = study.load_trainer(cfg, snakemake.input.features, wc.dataset, wc.extractor)
    noise = study.noise_scope(cfg, wc.dataset, wc.extractor, wc.variant, int(wc.seed))
    if snakemake.input.previous:  # a stage of other settings is refused, naming the keys that differ
        study.check_inputs([snakemake.input.previous], snakemake.config)
    previous = read_json(snakemake.input.previous) if snakemake.input.previous else None
    stage = linear_scaling.run_stage(
        trainer,
        study.linear_scaling_config(cfg),
        study.search_space(cfg),
        study.selection_rule(cfg),
        study.target_eps(cfg),
        noise,
        stage=int(wc.stage),
        previous=previous,
    )
    stage = {"internal": INTERNAL_NOTICE} | stage
    stage["provenance"] = study.provenance(
        cfg, trainer, noise=noise, seed=int(wc.seed), dataset=wc.dataset, extractor=wc.extractor, variant=wc.variant
    )
    write_json(snakemake.output.stage, stage)
    log.info("stage %s: selected r = %s", wc.stage, [s["selected_r"] for s in stage["searches"]])
