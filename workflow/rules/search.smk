# The linear scaling rule: stages of cheap private trials, a fitted line, final runs.
# One job trains every trial a stage needs for all target budgets at once (batched).


rule linear_scaling_stage:
    input:
        features=features_h5,
        previous=previous_stage,
    output:
        stage=layout.STAGE,
    log:
        layout.log(layout.JOB_STAGE),
    benchmark:
        layout.benchmark(layout.JOB_STAGE)
    conda:
        "../../envs/dphpo.yaml"
    threads: config["threads"]["train"]
    resources:
        **rule_resources("linear_scaling_stage", mem_mb=8000, runtime=60),
    params:
        settings=lambda w: study_config.run_settings_hash(
            config, w.variant, w.extractor, w.dataset, "linear_scaling"
        ),
    script:
        "../scripts/linear_scaling_stage.py"


rule linear_scaling_final:
    input:
        features=features_h5,
        stages=all_stages,
    output:
        results=run_outputs(layout.RESULT, "linear_scaling"),
        models=run_outputs(layout.MODEL, "linear_scaling"),
        internal=run_outputs(layout.INTERNAL, "linear_scaling"),
    log:
        layout.log(layout.JOB_FINAL),
    benchmark:
        layout.benchmark(layout.JOB_FINAL)
    wildcard_constraints:
        # a variant with its own targets has a job per target (linear_scaling_target), never these
        variant=none_of(OWN_TARGET_VARIANTS),
    conda:
        "../../envs/dphpo.yaml"
    threads: config["threads"]["train"]
    resources:
        **rule_resources("linear_scaling_final", mem_mb=8000, runtime=60),
    params:
        settings=lambda w: study_config.run_settings_hash(
            config, w.variant, w.extractor, w.dataset, "linear_scaling"
        ),
        # the target ε of each output, in the order of the outputs: the script matches each result
        # to its files by the result's own target ε
        targets=TARGETS,
    script:
        "../scripts/linear_scaling_final.py"


# A variant with its own target list (variants.<v>.privacy.target_eps, e.g. Panda et al. Fig. 2's
# search shared by the targets it can pay for): the same final run, one job per target, since a
# rule's outputs cannot depend on its variant.
ruleorder: linear_scaling_target > linear_scaling_final


rule linear_scaling_target:
    input:
        features=features_h5,
        stages=own_target_stages,
    output:
        # lists of one, as the script reads linear_scaling_final's lists
        results=[layout.partial(layout.RESULT, method="linear_scaling")],
        models=[layout.partial(layout.MODEL, method="linear_scaling")],
        internal=[layout.partial(layout.INTERNAL, method="linear_scaling")],
    log:
        layout.log(layout.JOB_TARGET),
    benchmark:
        layout.benchmark(layout.JOB_TARGET)
    wildcard_constraints:
        variant=one_of(OWN_TARGET_VARIANTS),
    conda:
        "../../envs/dphpo.yaml"
    threads: config["threads"]["train"]
    resources:
        **rule_resources("linear_scaling_target", mem_mb=8000, runtime=60),
    params:
        settings=lambda w: study_config.run_settings_hash(
            config, w.variant, w.extractor, w.dataset, "linear_scaling"
        ),
        targets=lambda w: [float(w.eps)],
    script:
        "../scripts/linear_scaling_final.py"


rule nonprivate_reference:
    input:
        features=features_h5,
    output:
        result=layout.NONPRIVATE_RESULT,
        model=layout.NONPRIVATE_MODEL,
        internal=layout.NONPRIVATE_INTERNAL,
    log:
        layout.log(layout.JOB_NONPRIVATE),
    benchmark:
        layout.benchmark(layout.JOB_NONPRIVATE)
    conda:
        "../../envs/dphpo.yaml"
    threads: config["threads"]["train"]
    resources:
        **rule_resources("nonprivate_reference", mem_mb=8000, runtime=60),
    params:
        settings=lambda w: study_config.run_settings_hash(
            config, "default", w.extractor, w.dataset, "nonprivate"
        ),
    script:
        "../scripts/nonprivate_reference.py"


# Panda et al. Table 14: a result's final run redone at a lower total ε (variants with `reduce_eps`;
# its source: reduce_source in common.smk). One job per ε.
rule linear_scaling_reduce:
    input:
        features=features_h5,
        source=reduce_source,
    output:
        result=layout.partial(layout.RESULT, method=layout.REDUCED_METHOD),
        model=layout.partial(layout.MODEL, method=layout.REDUCED_METHOD),
        internal=layout.partial(layout.INTERNAL, method=layout.REDUCED_METHOD),
    log:
        layout.log(layout.JOB_REDUCE),
    benchmark:
        layout.benchmark(layout.JOB_REDUCE)
    conda:
        "../../envs/dphpo.yaml"
    threads: config["threads"]["train"]
    resources:
        **rule_resources("linear_scaling_reduce", mem_mb=8000, runtime=60),
    params:
        settings=lambda w: study_config.run_settings_hash(
            config, w.variant, w.extractor, w.dataset, "linear_scaling"
        ),
        reduce_eps=lambda w: study_config.reduce_spec(
            study_config.variant_config(config, w.variant)
        ),
    script:
        "../scripts/linear_scaling_reduce.py"
