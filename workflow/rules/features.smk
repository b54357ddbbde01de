# Pretrained features of every dataset, cached once in HDF5 (the expensive, reusable artifact).


rule extract_features:
    input:
        pretrained=pretrained_checkpoint,
    output:
        features=layout.FEATURES,
    log:
        layout.log(layout.JOB_FEATURES),
    benchmark:
        layout.benchmark(layout.JOB_FEATURES)
    conda:
        "../../envs/dphpo.yaml"
    threads: config["threads"]["extract"]
    resources:
        **rule_resources("extract_features", mem_mb=16000, runtime=120),
    params:
        extractor=lambda w: config["extractors"].get(w.extractor),
        # subsets change the cache: a changed datasets.<name> section rebuilds it, and so does one
        # edited file of the user's own data (its content checksum; a moved folder rebuilds nothing)
        dataset=lambda w: data_params(w.dataset),
    script:
        "../scripts/extract_features.py"
