# Config validation, wildcard constraints and input functions shared by every rule file.
import math

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from dphpo import study
from dphpo.errors import DPHPOError

validate(config, schema="../schemas/config.schema.yaml")

try:
    TARGETS = study.target_eps(config)
    EPS_LABELS = [study.eps_label(e) for e in TARGETS]
    SEEDS = [int(s) for s in config["seeds"]]
    STUDIES = [(s["dataset"], s["extractor"]) for s in config["studies"]]
    study.check_config(config)
except DPHPOError as err:
    raise WorkflowError(f"invalid config: {err}") from None


wildcard_constraints:
    dataset="[A-Za-z0-9_]+",
    extractor="[A-Za-z0-9_]+",
    seed="[0-9]+",
    stage="[0-9]+",
    variant="[A-Za-z0-9_]+",
    method="[A-Za-z0-9_]+",


def rule_resources(rule_name, **defaults):
    """Resource tags of a rule: config `resources.<rule>` overrides the defaults."""
    return defaults | config.get("resources", {}).get(rule_name, {})


def features_h5(wildcards):
    return f"results/features/{wildcards.dataset}/{wildcards.extractor}.h5"


def method_results(method, dataset, extractor, variant="default"):
    """Every result.json of a method on one study: all seeds × all target ε."""
    return expand(
        f"results/runs/{dataset}/{extractor}/{method}/{variant}/seed{{seed}}/eps{{eps}}/result.json",
        seed=SEEDS,
        eps=EPS_LABELS,
    )


def study_outputs():
    return [
        "results/tables/linear_scaling.md",
        "results/tables/linear_scaling.csv",
        "results/figures/linear_scaling_accuracy_vs_eps.png",
    ]


def previous_stage(wildcards):
    stage = int(wildcards.stage)
    if stage == 1:
        return []
    return stage_json(wildcards, stage - 1)


def stage_json(wildcards, stage):
    w = wildcards
    return f"results/runs/{w.dataset}/{w.extractor}/linear_scaling/{w.variant}/seed{w.seed}/stage{stage}.json"


def all_stages(wildcards):
    cfg = study.variant_config(config, wildcards.variant)
    n_stages = len(study.linear_scaling_config(cfg).stage_eps)
    return [stage_json(wildcards, k) for k in range(1, n_stages + 1)]
