# The linear scaling rule: stages of cheap private trials, a fitted line, final runs.
# One job trains every trial a stage needs for all target budgets at once (batched).


rule linear_scaling_stage:
    input:
        features=features_h5,
        previous=previous_stage,
    output:
        stage="results/runs/{dataset}/{extractor}/linear_scaling/{variant}/seed{seed}/stage{stage}.json",
    log:
        "results/logs/linear_scaling/{dataset}/{extractor}/{variant}/seed{seed}/stage{stage}.log",
    benchmark:
        "results/benchmarks/linear_scaling/{dataset}/{extractor}/{variant}/seed{seed}/stage{stage}.tsv"
    conda:
        "../../envs/dphpo.yaml"
    threads: config["threads"]["train"]
    resources:
        **rule_resources("linear_scaling_stage", mem_mb=8000, runtime=60),
    params:
        settings=lambda w: study_config.run_settings_hash(
            config, w.variant, w.extractor, w.dataset
        ),
    script:
        "../scripts/linear_scaling_stage.py"


rule linear_scaling_final:
    input:
        features=features_h5,
        stages=all_stages,
    output:
        results=expand(
            "results/runs/{{dataset}}/{{extractor}}/linear_scaling/{{variant}}/seed{{seed}}/eps{eps}/result.json",
            eps=EPS_LABELS,
        ),
        models=expand(
            "results/runs/{{dataset}}/{{extractor}}/linear_scaling/{{variant}}/seed{{seed}}/eps{eps}/model.npz",
            eps=EPS_LABELS,
        ),
        internal=expand(
            "results/runs/{{dataset}}/{{extractor}}/linear_scaling/{{variant}}/seed{{seed}}/eps{eps}/internal.json",
            eps=EPS_LABELS,
        ),
    log:
        "results/logs/linear_scaling/{dataset}/{extractor}/{variant}/seed{seed}/final.log",
    benchmark:
        "results/benchmarks/linear_scaling/{dataset}/{extractor}/{variant}/seed{seed}/final.tsv"
    conda:
        "../../envs/dphpo.yaml"
    threads: config["threads"]["train"]
    resources:
        **rule_resources("linear_scaling_final", mem_mb=8000, runtime=60),
    params:
        settings=lambda w: study_config.run_settings_hash(
            config, w.variant, w.extractor, w.dataset
        ),
    script:
        "../scripts/linear_scaling_final.py"


rule nonprivate_reference:
    input:
        features=features_h5,
    output:
        result="results/runs/{dataset}/{extractor}/nonprivate/result.json",
        model="results/runs/{dataset}/{extractor}/nonprivate/model.npz",
        internal="results/runs/{dataset}/{extractor}/nonprivate/internal.json",
    log:
        "results/logs/nonprivate/{dataset}/{extractor}.log",
    benchmark:
        "results/benchmarks/nonprivate/{dataset}/{extractor}.tsv"
    conda:
        "../../envs/dphpo.yaml"
    threads: config["threads"]["train"]
    resources:
        **rule_resources("nonprivate_reference", mem_mb=8000, runtime=60),
    params:
        settings=lambda w: study_config.run_settings_hash(
            config, "default", w.extractor, w.dataset
        ),
    script:
        "../scripts/nonprivate_reference.py"
