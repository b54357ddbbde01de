# Tables and figures from the result files, in the config's namespace (config `namespace`).


# reads a few JSON files: runs in the main process, never queued on a cluster
localrules:
    table_linear_scaling,
    table_study_provenance,


rule table_linear_scaling:
    input:
        results=rule_results(),
        references=nonprivate_results(),
    output:
        md=layout.table("linear_scaling", "md", NAMESPACE),
        csv=layout.table("linear_scaling", "csv", NAMESPACE),
        html=report(
            layout.table("linear_scaling", "html", NAMESPACE),
            caption="../report/linear_scaling_table.rst",
            category="Linear scaling rule",
            labels={"item": "Table", "shows": "accuracy at each total ε"},
        ),
        figure=report(
            layout.figure("linear_scaling_accuracy_vs_eps", NAMESPACE),
            caption="../report/linear_scaling_figure.rst",
            category="Linear scaling rule",
            labels={"item": "Figure", "shows": "accuracy vs total ε"},
        ),
    log:
        layout.table_log("linear_scaling", NAMESPACE),
    conda:
        "../../envs/dphpo.yaml"
    params:
        # what the table's labels read of the config (design notes and the values they name, settings
        # sources, acknowledged overlaps): editing one rewrites it
        labels=study_config.table_labels(config),
    script:
        "../scripts/table_linear_scaling.py"


# Where every number of the study's tables comes from: one row per (study, method, variant), every
# method and variant of the study (the paper target has its own, over the results its tables read).
rule table_study_provenance:
    input:
        results=study_results(),
        references=nonprivate_results(),
    output:
        md=layout.table("study_provenance", "md", NAMESPACE),
        html=report(
            layout.table("study_provenance", "html", NAMESPACE),
            caption="../report/paper_provenance.rst",
            category="Provenance",
            labels={"item": "Provenance", "shows": "config, code, data, accountant"},
        ),
    log:
        layout.table_log("study_provenance", NAMESPACE),
    conda:
        "../../envs/dphpo.yaml"
    params:
        labels=study_config.table_labels(config),
    script:
        "../scripts/paper_provenance.py"
