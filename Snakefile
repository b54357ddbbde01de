# dphpo: differentially private hyperparameter optimization, every result fully accounted.
# Targets: `all` (the configured study, default), `paper` (every table and figure of the paper).
from snakemake.utils import min_version

min_version("9.0")


# The embedded default only when no config file is given: a cluster job reloads the workflow with
# the main process's `--configfiles` but without `--replace-workflow-config`, so a default merged
# under them would give the job another config (and config hash) than the main process.
if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/pretrain.smk"
include: "workflow/rules/features.smk"
include: "workflow/rules/search.smk"
include: "workflow/rules/baselines.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/paper.smk"
include: "workflow/rules/language.smk"
include: "workflow/rules/audit.smk"
include: "workflow/rules/cluster.smk"


rule all:
    default_target: True
    input:
        study_outputs(),


# Tiny jobs run in the main process, never queued on a cluster.
localrules:
    all,


check_resource_rules(workflow.rules)
drop_gpu_model_without_gpu(workflow.rules)
