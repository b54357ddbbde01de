# Config validation, wildcard constraints and input functions shared by every rule file.
import difflib
import glob
import math
import os
import re
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.logging import logger

from dphpo import layout
from dphpo.provenance import config_hash
from dphpo.studies import config as study_config
from dphpo.studies.checks import check_config_files
from dphpo.studies.validate import cuda_visible, validate_config
from dphpo.errors import DPHPOError
from dphpo.data.files import content_checksum
from dphpo.data.files import dataset_options
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
    # cross-checks (budgets, baselines, pretraining, language studies): all before any job
    # each config file read again, strictly: a key written twice (silently dropped by YAML) is refused
    check_config_files(workflow.configfiles)
    validate_config(
        config,
        # relative to this file, so that the workflow also validates when used as a module
        os.path.join(workflow.current_basedir, "..", "schemas", "config.schema.yaml"),
        # training.device: cuda is checked where the jobs run here (not for a dry run or a cluster)
        cuda_available=(
            cuda_visible()
            if workflow.is_main_process and workflow.local_exec and not workflow.dryrun
            else None
        ),
    )
    TARGETS = study_config.target_eps(config)
    EPS_LABELS = [layout.eps_label(e) for e in TARGETS]
    SEEDS = [int(s) for s in config["seeds"]]
    # variants with a target list of their own: final runs one job per target (rule linear_scaling_target)
    OWN_TARGET_VARIANTS = study_config.own_target_variants(config)
    STUDIES = [(s["dataset"], s["extractor"]) for s in config["studies"]]
    # the folder of the study's own tables and figures (None: results/tables/, results/figures/)
    NAMESPACE = layout.namespace(config)
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
    embedded configs run on CPUs, also on a cluster. A rule with a `study` wildcard may give each
    language study its own `runtime` and `mem_mb` (`resources.<rule>.by_study`, validated above;
    `dphpo plan-cost --runtimes` writes the runtimes): such a key becomes a function of the job's
    wildcards, the study's value, else the rule's.
    """
    entry = dict(config.get("resources", {}).get(rule_name, {}))
    by_study = entry.pop("by_study", None) or {}
    resources = defaults | entry
    for key in sorted({k for spec in by_study.values() for k in spec}):
        resources[key] = study_resource(by_study, key, resources.get(key))
    return resources


def study_resource(by_study, key, fallback):
    """Resource `key` of a job with a `study` wildcard: its study's `by_study` value, else `fallback`."""
    return lambda wildcards: by_study.get(wildcards.study, {}).get(key, fallback)


def drop_gpu_model_without_gpu(rules):
    """profiles/slurm names the GPU partition and model of the rules that may use a GPU
    (`set-resources`); the SLURM plugin turns any `gpu_model` into `--gpus=<model>:<gpu or 1>`, so a
    job the config runs on CPUs (no `gpu`, or 0) would still wait for a GPU, and in the GPU partition.
    Those rules lose the model and get the partition of `default-resources` back (the CPU one; none:
    the cluster's default partition), main process and jobs alike (the jobs load this file too).
    """
    # Snakemake applies `--set-resources` last when it creates a rule, over the rule's own resources,
    # so only a pass over the loaded rules can undo it. The partition is the run's --default-resources
    # as given: `default_resources` of ResourceSettings, Snakemake's public settings API (None: none
    # given; parsed from the command line or a profile: a Resources mapping; through the API: any mapping)
    defaults = workflow.resource_settings.default_resources or {}
    cpu_partition = (
        defaults["slurm_partition"] if "slurm_partition" in defaults else None
    )
    for r in rules:
        gpu = r.resources.get("gpu")
        if "gpu_model" in r.resources and not (gpu is not None and gpu.value):
            r.resources["gpu_model"] = None
            r.resources["slurm_partition"] = cpu_partition


def check_resource_rules(rules):
    """Every `resources.<name>` of the config names one of the workflow's rules: a misspelt name would
    be ignored without a word, and its jobs run with the defaults (a cluster kills them at its limit).
    """
    known = sorted(r.name for r in rules)
    for name in config.get("resources") or {}:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise WorkflowError(
                f"invalid config: resources.{name} names none of the workflow's rules{hint}; "
                f"they are {', '.join(known)}"
            )


def features_h5(wildcards):
    return layout.path(
        layout.FEATURES, dataset=wildcards.dataset, extractor=wildcards.extractor
    )


def pretrained_checkpoint(wildcards):
    """The checkpoint a `pretrained_public` extractor loads (rule pretrain_public makes it), else none."""
    spec = config["extractors"].get(wildcards.extractor, {})
    if spec.get("kind") != "pretrained_public":
        return []
    return spec.get("checkpoint") or layout.path(
        layout.PRETRAINED_CHECKPOINT, name=spec["pretrain"]
    )


def data_params(dataset):
    """The options of a dataset's feature job, with the content checksum of the user's own files
    (per-file digests cached under .snakemake/ by size and mtime: a parse rereads only edited files).
    """
    checksum = content_checksum(
        config, dataset, Path(".snakemake") / "dphpo-data-checksums"
    )
    options = dataset_options(config, dataset)
    return options if checksum is None else options | {"content_sha256": checksum}


def one_of(names):
    """A wildcard constraint matching exactly `names` (none: a pattern that matches nothing)."""
    return "|".join(re.escape(n) for n in names) or "(?!)"


def none_of(names):
    """A wildcard constraint matching any name but `names`, for a wildcard that a `/` follows in its paths."""
    return f"(?!(?:{one_of(names)})/)[A-Za-z0-9_]+" if names else "[A-Za-z0-9_]+"


def run_outputs(template, method=None):
    """One file of a run (layout.RESULT, MODEL or INTERNAL) per target ε, the other wildcards left to
    the rule (its `method` wildcard unless `method` is given)."""
    filled = {} if method is None else {"method": method}
    return [layout.partial(template, eps=eps, **filled) for eps in EPS_LABELS]


def rule_results():
    """Every result.json of the linear scaling rule: the paper's and each safeguarded variant's."""
    return [
        f
        for f in study_results()
        if layout.parse(layout.RESULT, f)["method"] == "linear_scaling"
    ]


def study_results():
    """Every result.json of the study: the linear scaling rule and the baselines."""
    return study_config.study_results(config)


def released_models():
    """The released model of every result of the study: a deleted model is restored by `all` too."""
    return [layout.sibling(f, "model.npz") for f in study_results()]


def nonprivate_results():
    """The non-private reference (ε = ∞) of every study."""
    return [
        layout.path(layout.NONPRIVATE_RESULT, dataset=d, extractor=e)
        for d, e in STUDIES
    ]


def existing_stage_files():
    """The stage files of the study's searches that exist now."""
    return [
        f
        for d, e, method, variant in study_config.study_jobs(config)
        if method == "linear_scaling"
        for seed in SEEDS
        for f in sorted(
            glob.glob(
                layout.path(
                    layout.STAGE,
                    dataset=d,
                    extractor=e,
                    variant=variant,
                    seed=seed,
                    stage="*",
                )
            )
        )
    ]


# Snakemake says only "Params have changed" (with hashes) for a job the config reruns: name the keys
# (and, where Snakemake's metadata was lost, date the stale files back so that they rerun).
if workflow.is_main_process and not workflow.remote_exec:
    for _line in study_config.explain_reruns(
        [
            f
            for f in study_results() + nonprivate_results() + existing_stage_files()
            if os.path.exists(f)
        ],
        config,
        metadata_lost=not os.path.isdir(os.path.join(".snakemake", "metadata")),
    ):
        logger.info(_line)


def study_outputs():
    """What `all` makes: the released models, the study's tables and figures (in its namespace)."""
    return (
        released_models()
        + layout.tables("linear_scaling", ("md", "csv", "html"), NAMESPACE)
        + [layout.figure("linear_scaling_accuracy_vs_eps", NAMESPACE)]
        + layout.tables("hpo_comparison", namespace=NAMESPACE)
        + [layout.figure("hpo_comparison_accuracy_vs_eps", NAMESPACE)]
        + layout.tables("study_provenance", ("md", "html"), NAMESPACE)
    )


def reduce_source(wildcards):
    """The result a Table 14 variant (`reduce_eps`) redoes at a lower ε: more noise or Poisson
    subsampling, the source's whole search charged again."""
    spec = study_config.reduce_spec(
        study_config.variant_config(config, wildcards.variant)
    )
    if spec is None:
        raise WorkflowError(
            f"variants.{wildcards.variant} has no reduce_eps: no reduced final run to make"
        )
    if float(wildcards.eps) >= spec["from_eps"]:
        raise WorkflowError(
            f"variants.{wildcards.variant}.reduce_eps: ε = {wildcards.eps} is not below from_eps "
            f"{spec['from_eps']:g}, the ε of the result it redoes at a lower ε"
        )
    return layout.path(
        layout.RESULT,
        dataset=wildcards.dataset,
        extractor=wildcards.extractor,
        method="linear_scaling",
        variant=spec["source_variant"],
        seed=wildcards.seed,
        eps=layout.eps_label(spec["from_eps"]),
    )


def previous_stage(wildcards):
    stage = int(wildcards.stage)
    if stage == 1:
        return []
    return stage_json(wildcards, stage - 1)


def stage_json(wildcards, stage):
    w = wildcards
    return layout.path(
        layout.STAGE,
        dataset=w.dataset,
        extractor=w.extractor,
        variant=w.variant,
        seed=w.seed,
        stage=stage,
    )


def all_stages(wildcards):
    cfg = study_config.variant_config(config, wildcards.variant)
    n_stages = len(study_config.linear_scaling_config(cfg).stage_eps)
    return [stage_json(wildcards, k) for k in range(1, n_stages + 1)]


def own_target_stages(wildcards):
    """`all_stages` of a final run of a variant with its own targets, whose ε must be one of them (as
    labelled: eps1, not eps1.0): another would release a target the budget check never saw.
    """
    cfg = study_config.variant_config(config, wildcards.variant)
    labels = [layout.eps_label(e) for e in study_config.target_eps(cfg)]
    if wildcards.eps not in labels:
        raise WorkflowError(
            f"variants.{wildcards.variant}: ε label {wildcards.eps!r} is not one of its targets "
            f"({', '.join(labels)}, variants.{wildcards.variant}.privacy.target_eps)"
        )
    return all_stages(wildcards)


# The paper target (paper.smk): what each table and figure reads, from the config.
from dphpo.report import figures as paper_figures
from dphpo.report import plan as paper_plan

PAPER = paper_plan.Paper(config)
PAPER_TABLE_FORMATS = list(layout.TABLE_FORMATS)
# the jobs of rule run_method, passed to the table jobs (which so never import the methods or torch)
METHOD_JOBS = [list(job) for job in registry.method_jobs(config)]


def paper_table_inputs(wildcards):
    """Input function of the paper_table rule, from the config: {results: [...], other: [...]}."""
    return paper_plan.inputs(config, wildcards.table, METHOD_JOBS)


def paper_evaluation_inputs(wildcards):
    """What a table's evaluation job reads (Table 5: released models, shifted test features)."""
    table = {v: k for k, v in paper_plan.EVALUATIONS.items()}[wildcards.name]
    return paper_plan.evaluation_inputs(config, table, METHOD_JOBS)


def paper_figure_inputs(name):
    def inputs(wildcards):
        return paper_figures.inputs(
            config,
            paper_figures.SINGLE_FIGURES.get(wildcards.get("figure"), name),
            wildcards.get("dataset"),
            wildcards.get("extractor"),
            METHOD_JOBS,
        )

    return inputs


def paper_outputs():
    """Every table (four formats), every figure and the provenance table of the paper target."""
    tables = expand(layout.TABLE, table=paper_plan.TABLES, ext=PAPER_TABLE_FORMATS)
    heatmaps = expand(
        layout.HEATMAP,
        zip,
        dataset=[d for d, _ in paper_figures.heatmap_studies(PAPER)],
        extractor=[e for _, e in paper_figures.heatmap_studies(PAPER)],
    )
    pareto = expand(layout.PARETO, dataset=paper_figures.pareto_datasets(PAPER))
    return (
        tables
        + heatmaps
        + pareto
        + [layout.figure(f) for f in paper_figures.SINGLE_FIGURES]
        + layout.tables("provenance", ("md", "html"))
    )


def paper_all_results(wildcards):
    """Every result file any paper table or figure reads (the provenance table's inputs)."""
    files = {}
    for name in paper_plan.TABLES:
        for f in paper_plan.inputs(config, name, METHOD_JOBS)["results"]:
            files[f] = None
    for f in paper_figures.inputs(
        config, "figure3", method_jobs=METHOD_JOBS
    ) + paper_figures.inputs(config, "figure6", method_jobs=METHOD_JOBS):
        files[f] = None
    for d, e in paper_figures.heatmap_studies(PAPER):
        for f in paper_figures.inputs(config, "heatmap", d, e, METHOD_JOBS):
            files[f] = None
    for d in paper_figures.pareto_datasets(PAPER):
        for f in paper_figures.inputs(config, "pareto", d, method_jobs=METHOD_JOBS):
            files[f] = None
    return list(files)


# The language studies (language.smk): inputs, settings hashes and the tables of Panda et al. §5.4-5.5
# (validated with the rest of the config by validate_config above).
from dphpo.report import language as language_report


def language_source(wildcards):
    return study_config.language_source(
        config, study_config.language_study(config, wildcards.study)
    )


def language_job(wildcards):
    """Input of a language release: the folder of the job that ran its study, method and seed, once the
    release is one the config implies (else a clear error before any job)."""
    spec = study_config.language_study(config, wildcards.study)
    labels = [layout.eps_label(e) for e in study_config.language_targets(config, spec)]
    if wildcards.method not in spec.get("methods", []) or wildcards.eps not in labels:
        raise WorkflowError(
            f"language.studies.{wildcards.study}: no {wildcards.method} release at eps {wildcards.eps} "
            f"(methods {spec.get('methods', [])}, target eps {labels})"
        )
    return layout.path(
        layout.LANGUAGE_JOB_DIR,
        study=wildcards.study,
        method=wildcards.method,
        seed=wildcards.seed,
    )


def language_cache_settings(name):
    spec = study_config.language_study(config, name)
    return {"model": spec["model"], "data": spec["data"]}


def language_settings_hash(name, method=None):
    """What a language job computes from (dphpo.studies.config.language_settings)."""
    return study_config.language_settings_hash(config, name, method)


def language_table_inputs(wildcards):
    return language_report.inputs(config, wildcards.table)


def language_outputs():
    """The language tables (four formats) and Fig. 4 the config defines (none without `language`)."""
    tables = expand(
        layout.TABLE,
        table=language_report.configured_tables(config),
        ext=PAPER_TABLE_FORMATS,
    )
    if (config.get("language") or {}).get("tables", {}).get("figure4"):
        tables.append(layout.figure("figure4_language_pareto"))
    return tables


onstart:
    # This process now holds the directory lock (release_stale_lock above reads this).
    record_lock_owner()
    # Temporaries of writers killed in an earlier run (kill -9 runs no cleanup) whose targets
    # are not rebuilt; a rebuilt target's writer removes its own (dphpo.io.atomic_path).
    remove_orphan_temporaries(layout.ROOT, min_age_s=24 * 3600)


onsuccess:
    # What the tree's DP releases protect, in plain words, and how to publish them (dphpo.release).
    from dphpo.release import plain_summary

    for line in plain_summary(layout.ROOT):
        logger.info(f"privacy: {line}")
