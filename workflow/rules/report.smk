# Tables and figures from the result files.


# reads a few JSON files: runs in the main process, never queued on a cluster
localrules:
    table_linear_scaling,


rule table_linear_scaling:
    input:
        results=rule_results(),
        references=nonprivate_results(),
    output:
        md=layout.table("linear_scaling", "md"),
        csv=layout.table("linear_scaling", "csv"),
        html=report(
            layout.table("linear_scaling", "html"),
            caption="../report/linear_scaling_table.rst",
            category="Linear scaling rule",
            labels={"item": "Table", "shows": "accuracy at each total ε"},
        ),
        figure=report(
            layout.figure("linear_scaling_accuracy_vs_eps"),
            caption="../report/linear_scaling_figure.rst",
            category="Linear scaling rule",
            labels={"item": "Figure", "shows": "accuracy vs total ε"},
        ),
    log:
        layout.log(layout.JOB_TABLE, table="linear_scaling"),
    conda:
        "../../envs/dphpo.yaml"
    params:
        # a table labels settings chosen on private data: editing the notes rewrites it
        design_notes=config.get("design_notes", {}),
    script:
        "../scripts/table_linear_scaling.py"
