# dphpo: differentially private hyperparameter optimization, every result fully accounted.
# Targets: `all` (the configured study, default), `paper` (every table and figure of the paper).
from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/pretrain.smk"
include: "workflow/rules/features.smk"
include: "workflow/rules/search.smk"
include: "workflow/rules/baselines.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/paper.smk"
include: "workflow/rules/audit.smk"


rule all:
    default_target: True
    input:
        study_outputs(),
