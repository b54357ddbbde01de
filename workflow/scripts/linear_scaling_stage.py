"""One stage of the linear scaling rule for every target budget (batched trials). The stage file is an
internal log (exact training accuracies of every trial): the final run reads it, tables never do."""

from dphpo.hpo import linear_scaling
from dphpo.hpo.common import INTERNAL_NOTICE
from dphpo.io import write_json
from dphpo.studies import config as study_config
from dphpo.studies import jobs, writer
from dphpo.studies.trainers import build_trainer

wc = snakemake.wildcards
cfg = study_config.variant_config(snakemake.config, wc.variant)
with jobs.job_log(snakemake.log[0], snakemake.threads) as log:
    trainer, cfg = build_trainer(cfg, study_config.vision_study(cfg, wc.dataset, wc.extractor), snakemake.input.features)
    noise = study_config.noise_scope(cfg, wc.dataset, wc.extractor, wc.variant, int(wc.seed), "linear_scaling", trainer)
    # a previous stage of other settings is refused, naming the keys that differ
    previous = study_config.check_inputs([snakemake.input.previous], snakemake.config)[0] if snakemake.input.previous else None
    if previous is not None:  # and one of other data
        study_config.check_noise_scope([snakemake.input.previous], [previous], noise)
    stage = linear_scaling.run_stage(
        trainer,
        study_config.linear_scaling_config(cfg),
        study_config.search_space(cfg),
        study_config.selection_rule(cfg, trainer.n_public),
        study_config.target_eps(cfg),
        noise,
        stage=int(wc.stage),
        previous=previous,
    )
    stage = {"internal": INTERNAL_NOTICE} | stage
    stage["provenance"] = writer.provenance(
        cfg, trainer, noise=noise, seed=int(wc.seed), dataset=wc.dataset, extractor=wc.extractor, variant=wc.variant, method="linear_scaling"
    )
    write_json(snakemake.output.stage, stage)
    log.info("stage %s: selected r = %s", wc.stage, [s.get("selected_r", "none: " + s.get("no_signal", "")) for s in stage["searches"]])
