# Public pretraining (docs/methods.md §5): train a feature extractor non-privately on public data
# (a procedural synthetic dataset offline, CIFAR-100, ...). Extractors of kind `pretrained_public`
# load the checkpoint; extract_features depends on it through `pretrained_checkpoint` (common.smk).


rule pretrain_public:
    output:
        checkpoint=layout.PRETRAINED_CHECKPOINT,
        summary=report(
            layout.PRETRAINED_RECORD,
            caption="../report/pretrain_public.rst",
            category="Public pretraining",
        ),
    log:
        layout.log(layout.JOB_PRETRAIN),
    benchmark:
        layout.benchmark(layout.JOB_PRETRAIN)
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
