# Tables and figures from the result files.


# reads a few JSON files: runs in the main process, never queued on a cluster
localrules:
    table_linear_scaling,


rule table_linear_scaling:
    input:
        results=[
            f
            for dataset, extractor in STUDIES
            for f in method_results("linear_scaling", dataset, extractor)
        ],
        references=[f"results/runs/{d}/{e}/nonprivate/result.json" for d, e in STUDIES],
    output:
        md=report(
            "results/tables/linear_scaling.md",
            caption="../report/linear_scaling_table.rst",
            category="Linear scaling rule",
        ),
        csv="results/tables/linear_scaling.csv",
        figure=report(
            "results/figures/linear_scaling_accuracy_vs_eps.png",
            caption="../report/linear_scaling_figure.rst",
            category="Linear scaling rule",
        ),
    log:
        "results/logs/tables/linear_scaling.log",
    conda:
        "../../envs/dphpo.yaml"
    script:
        "../scripts/table_linear_scaling.py"
