# The language half of Panda et al. (§5.4-5.5): DP fine-tuning and DP-ZO under the linear scaling rule.
# Studies are config `language.studies`; each job runs one HPO method of dphpo.hpo on one study and
# seed for every target eps of the study (trials one after another inside the job) and writes one
# result.json (+ model, + internal log) per target eps (dphpo.layout, language section).
# A language table's title, report labels and caption: its spec (dphpo.report.specs.TABLES).
from dphpo.report import specs as report_specs


rule language_pretrain:
    output:
        checkpoint=layout.LANGUAGE_PRETRAINED,
    log:
        layout.log("language/pretrain/{name}"),
    benchmark:
        layout.benchmark("language/pretrain/{name}")
    wildcard_constraints:
        name="[A-Za-z0-9_]+",
    conda:
        "../../envs/dphpo.yaml"
    threads: config["threads"]["pretrain"]
    resources:
        **rule_resources("language_pretrain", mem_mb=8000, runtime=120),
    params:
        settings=lambda w: config["language"]["pretrain"][w.name],
    script:
        "../scripts/language_pretrain.py"


rule language_cache:
    output:
        cache=layout.LANGUAGE_CACHE,
    log:
        layout.log("language/cache/{study}"),
    benchmark:
        layout.benchmark("language/cache/{study}")
    conda:
        "../../envs/dphpo.yaml"
    threads: config["threads"]["extract"]
    resources:
        **rule_resources("language_cache", mem_mb=16000, runtime=120),
    params:
        settings=lambda w: language_cache_settings(w.study),
    script:
        "../scripts/language_cache.py"


# One rule per study: its outputs are the study's own target eps (overrides.privacy.target_eps),
# one result.json, model and internal log each, all written by the one job (one run of the method for
# every eps, one noise scope). A generic rule cannot say so: Snakemake takes output patterns, never
# output functions, so every job of a rule writes the same patterns, and the studies' eps lists differ
# in length and values; an {eps} wildcard would split each job into one per eps (other jobs, other noise).
for _study in study_config.language_studies(config):

    rule:
        name:
            f"language_method_{_study}"
        input:
            unpack(language_study_source(_study)),
        output:
            results=language_run_files(layout.LANGUAGE_RESULT, _study),
            models=language_run_files(layout.LANGUAGE_MODEL, _study),
            internal=language_run_files(layout.LANGUAGE_INTERNAL, _study),
        log:
            layout.log(f"language/{_study}/{{method}}/seed{{seed}}"),
        benchmark:
            layout.benchmark(f"language/{_study}/{{method}}/seed{{seed}}")
        wildcard_constraints:
            method="|".join(study_config.LANGUAGE_METHODS),
        conda:
            "../../envs/dphpo.yaml"
        threads: config["threads"]["train"]
        resources:
            **rule_resources("language_method", mem_mb=16000, runtime=240),
        params:
            study=_study,
            settings=lambda w, study=_study: language_settings_hash(study, w.method),
        script:
            "../scripts/language_method.py"


# The per-study rules stand for one rule, `language_method`: its cluster settings (`--set-resources
# language_method:...`, profiles/slurm) apply to each of them, a per-study setting on top. Snakemake
# matches --set-resources by exact rule name; the settings are read as given, `overwrite_resources`
# of ResourceSettings (Snakemake's public settings API: rule -> Resources from the command line or a
# profile, rule -> mapping through the API; Resources.update takes either).
_overwrite = workflow.resource_settings.overwrite_resources
for _rule in workflow.rules:
    if _rule.name.startswith("language_method_"):
        _rule.resources.update(_overwrite.get("language_method", {}))
        _rule.resources.update(_overwrite.get(_rule.name, {}))


rule language_nonprivate:
    input:
        unpack(language_source),
    output:
        result=layout.LANGUAGE_NONPRIVATE_RESULT,
        model=layout.LANGUAGE_NONPRIVATE_MODEL,
        internal=layout.LANGUAGE_NONPRIVATE_INTERNAL,
    log:
        layout.log("language/{study}/nonprivate"),
    benchmark:
        layout.benchmark("language/{study}/nonprivate")
    conda:
        "../../envs/dphpo.yaml"
    threads: config["threads"]["train"]
    resources:
        **rule_resources("language_nonprivate", mem_mb=16000, runtime=240),
    params:
        settings=lambda w: language_settings_hash(w.study),
    script:
        "../scripts/language_nonprivate.py"


rule language_table:
    input:
        language_table_inputs,
    output:
        md=layout.partial(layout.TABLE, ext="md"),
        csv=layout.partial(layout.TABLE, ext="csv"),
        tex=layout.partial(layout.TABLE, ext="tex"),
        html=report(
            layout.partial(layout.TABLE, ext="html"),
            caption="../report/language_table.rst",
            category="Tables (language)",
            labels=lambda w: report_specs.report_labels(w.table),
        ),
    log:
        layout.log("paper/{table}"),
    wildcard_constraints:
        table="|".join(language_report.TABLES),
    conda:
        "../../envs/dphpo.yaml"
    params:
        # Tables 17-19 read the config alone: a changed language section must rewrite them
        settings=lambda w: config_hash(config.get("language")),
        # the report's caption (workflow/report/language_table.rst renders it): the table's spec
        caption=lambda w: report_specs.report_caption(w.table, config),
    script:
        "../scripts/language_table.py"


rule language_figure4:
    input:
        lambda w: language_report.inputs(config, "figure4"),
    output:
        figure=report(
            layout.figure(language_report.FIGURE4),
            caption="../report/language_figure4.rst",
            category="Figures (language)",
        ),
    log:
        layout.log("paper/figure4"),
    conda:
        "../../envs/dphpo.yaml"
    script:
        "../scripts/language_figure.py"
