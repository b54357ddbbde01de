# Config validation, wildcard constraints and input functions shared by every rule file.
import math
import os

from snakemake.exceptions import WorkflowError
from snakemake.logging import logger

from dphpo import study
from dphpo.errors import DPHPOError
from dphpo.features.build import dataset_options
from dphpo.features.pretrain import checkpoint_path
from dphpo.hpo import registry
from dphpo.io import remove_orphan_temporaries
from dphpo.resume import record_lock_owner, release_stale_lock

# A run killed with kill -9 leaves its lock: release it when its process is provably gone, so
# that the same command resumes (README "Resuming after a failure"; else `snakemake --unlock`).
_released = release_stale_lock()
if _released:
    logger.warning(_released)

try:
    # the schema (defaults filled in), each variant merged over the base config, then the
    # cross-checks (budgets, baselines, pretraining): all before any job
    study.validate_config(
        config,
        # relative to this file, so that the workflow also validates when used as a module
        os.path.join(workflow.current_basedir, "..", "schemas", "config.schema.yaml"),
    )
    TARGETS = study.target_eps(config)
    EPS_LABELS = [study.eps_label(e) for e in TARGETS]
    SEEDS = [int(s) for s in config["seeds"]]
    STUDIES = [(s["dataset"], s["extractor"]) for s in config["studies"]]
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
    """Resource tags of a rule: config `resources.<rule>` overrides the defaults.

    GPUs only where the config asks for them (`gpu` of `resources.<name>`, config/paper.yaml): the
    embedded configs run on CPUs, also on a cluster.
    """
    return defaults | config.get("resources", {}).get(rule_name, {})


def drop_gpu_model_without_gpu(rules):
    """profiles/slurm names the GPU partition and model of the rules that may use a GPU
    (`set-resources`); the SLURM plugin turns any `gpu_model` into `--gpus=<model>:<gpu or 1>`, so a
    job the config runs on CPUs (no `gpu`, or 0) would still wait for a GPU, and in the GPU partition.
    Those rules lose the model and get the partition of `default-resources` back (the CPU one; none:
    the cluster's default partition), main process and jobs alike (the jobs load this file too)."""
    # every rule starts from a copy of the default resources (Snakemake's Workflow.rule)
    defaults = workflow.resource_settings._parsed_default_resources
    cpu_partition = defaults["slurm_partition"] if "slurm_partition" in defaults else None
    for r in rules:
        gpu = r.resources.get("gpu")
        if "gpu_model" in r.resources and not (gpu is not None and gpu.value):
            r.resources["gpu_model"] = None
            r.resources["slurm_partition"] = cpu_partition


def features_h5(wildcards):
    return f"results/features/{wildcards.dataset}/{wildcards.extractor}.h5"


def pretrained_checkpoint(wildcards):
    """The checkpoint a `pretrained_public` extractor loads (rule pretrain_public makes it), else none."""
    spec = config["extractors"].get(wildcards.extractor, {})
    if spec.get("kind") != "pretrained_public":
        return []
    return spec.get("checkpoint") or checkpoint_path(spec["pretrain"])


def method_results(method, dataset, extractor, variant="default"):
    """Every result.json of a method on one study: all seeds × all target ε."""
    return expand(
        f"results/runs/{dataset}/{extractor}/{method}/{variant}/seed{{seed}}/eps{{eps}}/result.json",
        seed=SEEDS,
        eps=EPS_LABELS,
    )


def baseline_results():
    """Every result.json of the baselines the config runs (feature studies and opt-in CNN studies)."""
    return [
        f
        for dataset, extractor, method in registry.method_jobs(config)
        for f in method_results(method, dataset, extractor)
    ]


def released_models():
    """The released model of every result of the study: a deleted model is restored by `all` too."""
    results = [
        f
        for dataset, extractor in STUDIES
        for f in method_results("linear_scaling", dataset, extractor)
    ] + baseline_results()
    return [f[: -len("result.json")] + "model.npz" for f in results]


def study_outputs():
    return released_models() + [
        "results/tables/linear_scaling.md",
        "results/tables/linear_scaling.csv",
        "results/tables/linear_scaling.html",
        "results/figures/linear_scaling_accuracy_vs_eps.png",
        "results/tables/hpo_comparison.md",
        "results/tables/hpo_comparison.csv",
        "results/tables/hpo_comparison.tex",
        "results/tables/hpo_comparison.html",
        "results/figures/hpo_comparison_accuracy_vs_eps.png",
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


# The paper target (paper.smk): what each table and figure reads, from the config.
from dphpo.report import figures as paper_figures
from dphpo.report import paper as paper_tables

PAPER = paper_tables.Paper(config)
PAPER_TABLE_FORMATS = ["md", "csv", "tex", "html"]


def paper_table_inputs(name):
    """Input function of a table rule: {results: [...], other: [...]} from the config."""

    def inputs(wildcards):
        return paper_tables.inputs(config, name)

    return inputs


def paper_figure_inputs(name):
    def inputs(wildcards):
        return paper_figures.inputs(
            config,
            name,
            wildcards.get("dataset"),
            wildcards.get("extractor"),
        )

    return inputs


def paper_outputs():
    """Every table (four formats), every figure and the provenance table of the paper target."""
    tables = expand(
        "results/tables/{table}.{ext}",
        table=paper_tables.TABLES,
        ext=PAPER_TABLE_FORMATS,
    )
    heatmaps = [
        f"results/figures/heatmaps/{d}/{e}.png"
        for d, e in paper_figures.heatmap_studies(PAPER)
    ]
    pareto = [
        f"results/figures/pareto/{d}.png" for d in paper_figures.pareto_datasets(PAPER)
    ]
    return (
        tables
        + heatmaps
        + pareto
        + [
            "results/figures/figure3_r_vs_eps.png",
            "results/figures/figure6_r_vs_gap.png",
            "results/tables/provenance.md",
            "results/tables/provenance.html",
        ]
    )


def paper_all_results(wildcards):
    """Every result file any paper table or figure reads (the provenance table's inputs)."""
    files = {}
    for name in paper_tables.TABLES:
        for f in paper_tables.inputs(config, name)["results"]:
            files[f] = None
    for f in paper_figures.inputs(config, "figure3") + paper_figures.inputs(
        config, "figure6"
    ):
        files[f] = None
    for d, e in paper_figures.heatmap_studies(PAPER):
        for f in paper_figures.inputs(config, "heatmap", d, e):
            files[f] = None
    for d in paper_figures.pareto_datasets(PAPER):
        for f in paper_figures.inputs(config, "pareto", d):
            files[f] = None
    return list(files)


# The language studies (language.smk): inputs, settings hashes and the tables of seed 000 §5.4-5.5.
from dphpo.tasks import registry as language
from dphpo.report import language as language_report

try:
    for _spec in language.studies(config).values():
        language.check_study(config, _spec)
except DPHPOError as err:
    raise WorkflowError(f"invalid config: {err}") from None


def language_source(wildcards):
    return language.source_of(config, language.study_spec(config, wildcards.study))


def language_cache_settings(name):
    spec = language.study_spec(config, name)
    return {"model": spec["model"], "data": spec["data"]}


def language_settings_hash(name):
    """What a language job computes from: its study entry and the shared sections it merges over."""
    spec = language.study_spec(config, name)
    return study.config_hash(
        {"study": spec, "base": {k: config.get(k) for k in study.RUN_SETTINGS_KEYS}}
    )


def language_table_inputs(wildcards):
    return language_report.inputs(config, wildcards.table)


def language_outputs():
    """The language tables (four formats) and Fig. 4 the config defines (none without `language`)."""
    tables = expand(
        "results/tables/{table}.{ext}",
        table=language_report.configured_tables(config),
        ext=PAPER_TABLE_FORMATS,
    )
    if (config.get("language") or {}).get("tables", {}).get("figure4"):
        tables.append("results/figures/figure4_language_pareto.png")
    return tables


onstart:
    # This process now holds the directory lock (release_stale_lock above reads this).
    record_lock_owner()
    # Temporaries of writers killed in an earlier run (kill -9 runs no cleanup) whose targets
    # are not rebuilt; a rebuilt target's writer removes its own (dphpo.io.atomic_path).
    remove_orphan_temporaries("results", min_age_s=24 * 3600)
