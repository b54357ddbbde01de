# The linear scaling rule: stages of cheap private trials, a fitted line, final runs.
# One job trains every trial a stage needs for all target budgets at once (batched).


def previous_stage(wildcards):
    stage = int(wildcards.stage)
    if stage == 1:
        return []
    return stage_json(wildcards, stage - 1)


def stage_json(wildcards, stage):
    return (
        RUNS.format(**wildcards)
        + f"/linear_scaling/{wildcards.variant}/seed{wildcards.seed}/stage{stage}.json"
    )


def all_stages(wildcards):
    cfg = study.variant_config(config, wildcards.variant)
    n_stages = len(study.linear_scaling_config(cfg).stage_eps)
    return [stage_json(wildcards, k) for k in range(1, n_stages + 1)]


rule linear_scaling_stage:
    input:
        features=features_h5,
        previous=previous_stage,
    output:
        stage=RUNS + "/linear_scaling/{variant}/seed{seed}/stage{stage}.json",
    log:
        "results/logs/linear_scaling/{dataset}/{extractor}/{variant}/seed{seed}/stage{stage}.log",
    benchmark:
        "results/benchmarks/linear_scaling/{dataset}/{extractor}/{variant}/seed{seed}/stage{stage}.tsv"
    threads: config["threads"]["train"]
    resources:
        **rule_resources("linear_scaling_stage", mem_mb=8000, runtime=60),
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
    log:
        "results/logs/linear_scaling/{dataset}/{extractor}/{variant}/seed{seed}/final.log",
    benchmark:
        "results/benchmarks/linear_scaling/{dataset}/{extractor}/{variant}/seed{seed}/final.tsv"
    threads: config["threads"]["train"]
    resources:
        **rule_resources("linear_scaling_final", mem_mb=8000, runtime=60),
    script:
        "../scripts/linear_scaling_final.py"


rule nonprivate_reference:
    input:
        features=features_h5,
    output:
        result=RUNS + "/nonprivate/result.json",
        model=RUNS + "/nonprivate/model.npz",
    log:
        "results/logs/nonprivate/{dataset}/{extractor}.log",
    benchmark:
        "results/benchmarks/nonprivate/{dataset}/{extractor}.tsv"
    threads: config["threads"]["train"]
    resources:
        **rule_resources("nonprivate_reference", mem_mb=8000, runtime=60),
    script:
        "../scripts/nonprivate_reference.py"
