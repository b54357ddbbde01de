# Baselines (issue #3): every HPO method of dphpo.hpo.registry behind one generic rule, and the
# comparison table. One job runs one method on one (dataset, extractor, variant, seed) for every
# target eps at once (trials batched); the linear scaling rule has its own staged rules (search.smk).


rule run_method:
    input:
        features=features_h5,
    output:
        results=run_outputs(layout.RESULT),
        models=run_outputs(layout.MODEL),
        internal=run_outputs(layout.INTERNAL),
    log:
        layout.log(layout.JOB_METHOD),
    benchmark:
        layout.benchmark(layout.JOB_METHOD)
    wildcard_constraints:
        method="|".join(registry.BASELINES),
    conda:
        "../../envs/dphpo.yaml"
    threads: config["threads"]["train"]
    resources:
        **rule_resources("run_method", mem_mb=8000, runtime=60),
    params:
        settings=lambda w: study_config.run_settings_hash(
            config, w.variant, w.extractor, w.dataset, w.method
        ),
        # the target ε of each output, in their order (the script matches results by their own ε)
        targets=TARGETS,
    script:
        "../scripts/run_method.py"


# reads a few JSON files: runs in the main process, never queued on a cluster
localrules:
    table_hpo_comparison,


rule table_hpo_comparison:
    input:
        results=study_results(),
        references=nonprivate_results(),
    output:
        md=layout.table("hpo_comparison", "md", NAMESPACE),
        csv=layout.table("hpo_comparison", "csv", NAMESPACE),
        tex=layout.table("hpo_comparison", "tex", NAMESPACE),
        html=report(
            layout.table("hpo_comparison", "html", NAMESPACE),
            caption="../report/hpo_comparison_table.rst",
            category="HPO comparison",
            labels={"item": "Table", "shows": "every method at equal total ε, RERR"},
        ),
        figure=report(
            layout.figure("hpo_comparison_accuracy_vs_eps", NAMESPACE),
            caption="../report/hpo_comparison_figure.rst",
            category="HPO comparison",
            labels={"item": "Figure", "shows": "accuracy vs total ε, every method"},
        ),
    log:
        layout.table_log("hpo_comparison", NAMESPACE),
    conda:
        "../../envs/dphpo.yaml"
    params:
        # what the table's labels read of the config (design notes and the values they name, settings
        # sources, acknowledged overlaps): editing one rewrites it
        labels=study_config.table_labels(config),
    script:
        "../scripts/table_hpo_comparison.py"
