# The language half of Panda et al. (§5.4-5.5): DP fine-tuning and DP-ZO under the linear scaling rule.
# Studies are config `language.studies`; each job runs one HPO method of dphpo.hpo on one study and
# seed for every target eps of the study (trials one after another inside the job) and writes one
# result.json (+ model, + internal log) per target eps into its folder; a local job per target eps
# links them into the eps's run folder (dphpo.layout, language section).
# A language table's title, report labels and caption: its spec (dphpo.report.specs.TABLES).
from dphpo.report import specs as report_specs
from dphpo.studies import staged


localrules:
    language_release,


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


# One job per study × method × seed runs the method for every target eps of its study (one search,
# one noise scope) and writes them into its folder; language_release (a local rule) gives each target
# eps its run folder. Snakemake gives all jobs of a rule the same output patterns, and the studies'
# eps lists differ: so the eps are files of the job's folder, not patterns (dphpo.studies.staged).
rule language_method:
    input:
        unpack(language_source),
    output:
        job=directory(layout.LANGUAGE_JOB_DIR),
    log:
        layout.log("language/{study}/{method}/seed{seed}"),
    benchmark:
        layout.benchmark("language/{study}/{method}/seed{seed}")
    wildcard_constraints:
        study="|".join(study_config.language_studies(config)) or "(?!)",
        method="|".join(study_config.LANGUAGE_METHODS),
        seed=r"\d+",
    conda:
        "../../envs/dphpo.yaml"
    threads: config["threads"]["train"]
    resources:
        **rule_resources("language_method", mem_mb=16000, runtime=240),
    params:
        settings=lambda w: language_settings_hash(w.study, w.method),
    script:
        "../scripts/language_method.py"


rule language_release:
    input:
        job=language_job,
    output:
        result=layout.LANGUAGE_RESULT,
        model=layout.LANGUAGE_MODEL,
        internal=layout.LANGUAGE_INTERNAL,
    log:
        layout.log("language/{study}/{method}/seed{seed}/eps{eps}"),
    wildcard_constraints:
        seed=r"\d+",
    run:
        staged.release_language_run(input.job, wildcards.eps, output, log[0])


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
