# Public pretraining (docs/methods.md §5): train a feature extractor non-privately on public data
# (a procedural synthetic dataset offline, CIFAR-100, ...). Extractors of kind `pretrained_public`
# load the checkpoint; extract_features depends on it through `pretrained_checkpoint` (common.smk).


rule pretrain_public:
    output:
        checkpoint="results/pretrained/{name}.pt",
        summary=report(
            "results/pretrained/{name}.json",
            caption="../report/pretrain_public.rst",
            category="Public pretraining",
        ),
    log:
        "results/logs/pretrain_public/{name}.log",
    benchmark:
        "results/benchmarks/pretrain_public/{name}.tsv"
    wildcard_constraints:
        name="[A-Za-z0-9_]+",
    conda:
        "../../envs/dphpo.yaml"
    threads: config["threads"]["pretrain"]
    resources:
        **rule_resources("pretrain_public", mem_mb=8000, runtime=240),
    params:
        settings=lambda wildcards: config["pretraining"][wildcards.name],
        data_dir=config["data_dir"],
    script:
        "../scripts/pretrain_public.py"
