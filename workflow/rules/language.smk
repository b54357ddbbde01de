# The language half of seed 000 (§5.4-5.5): DP fine-tuning and DP-ZO under the linear scaling rule.
# Studies are config `language.studies`; each job runs one HPO method of dphpo.hpo on one study and
# seed for every target eps of the study (trials one after another inside the job).


rule language_pretrain:
    output:
        checkpoint="results/language/pretrained/{name}.pt",
    log:
        "results/logs/language/pretrain/{name}.log",
    benchmark:
        "results/benchmarks/language/pretrain/{name}.tsv"
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
        cache="results/language/cache/{study}.h5",
    log:
        "results/logs/language/cache/{study}.log",
    benchmark:
        "results/benchmarks/language/cache/{study}.tsv"
    conda:
        "../../envs/dphpo.yaml"
    threads: config["threads"]["extract"]
    resources:
        **rule_resources("language_cache", mem_mb=16000, runtime=120),
    params:
        settings=lambda w: language_cache_settings(w.study),
    script:
        "../scripts/language_cache.py"


rule language_method:
    input:
        unpack(language_source),
    output:
        results="results/language/{study}/{method}/seed{seed}/results.json",
        models=directory("results/language/{study}/{method}/seed{seed}/models"),
        internal="results/language/{study}/{method}/seed{seed}/internal.json",
    log:
        "results/logs/language/{study}/{method}/seed{seed}.log",
    benchmark:
        "results/benchmarks/language/{study}/{method}/seed{seed}.tsv"
    wildcard_constraints:
        method="|".join(language.METHODS),
    conda:
        "../../envs/dphpo.yaml"
    threads: config["threads"]["train"]
    resources:
        **rule_resources("language_method", mem_mb=16000, runtime=240),
    params:
        settings=lambda w: language_settings_hash(w.study),
    script:
        "../scripts/language_method.py"


rule language_nonprivate:
    input:
        unpack(language_source),
    output:
        result="results/language/{study}/nonprivate/result.json",
    log:
        "results/logs/language/{study}/nonprivate.log",
    benchmark:
        "results/benchmarks/language/{study}/nonprivate.tsv"
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
        md="results/tables/{table}.md",
        csv="results/tables/{table}.csv",
        tex="results/tables/{table}.tex",
        html=report(
            "results/tables/{table}.html",
            caption="../report/language_table.rst",
            category="Tables (language)",
            labels={"item": "{table}"},
        ),
    log:
        "results/logs/paper/{table}.log",
    wildcard_constraints:
        table="|".join(language_report.TABLES),
    conda:
        "../../envs/dphpo.yaml"
    params:
        # Tables 17-19 read the config alone: a changed language section must rewrite them
        settings=lambda w: study.config_hash(config.get("language")),
    script:
        "../scripts/language_table.py"


rule language_figure4:
    input:
        lambda w: language_report.inputs(config, "figure4"),
    output:
        figure=report(
            "results/figures/figure4_language_pareto.png",
            caption="../report/language_figure4.rst",
            category="Figures (language)",
        ),
    log:
        "results/logs/paper/figure4.log",
    conda:
        "../../envs/dphpo.yaml"
    script:
        "../scripts/language_figure.py"
