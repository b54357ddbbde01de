# The paper target: every table and figure of seed 000 as its own rule, and the report's inputs.
# What each one reads comes from dphpo.report.paper / dphpo.report.figures, which read the config
# (input functions in common.smk): a row or panel whose data the config cannot produce is not an
# input; the table or figure is still written and says which config key or rule it needs.


report: "../report/paper_workflow.rst"


localrules:
    paper,
    paper_table2,
    paper_table3,
    paper_table4,
    paper_table5,
    paper_table10,
    paper_table11,
    paper_table13,
    paper_table15,
    paper_table16,
    paper_dp_continual,
    paper_figure3,
    paper_heatmap,
    paper_figure6,
    paper_pareto,
    paper_provenance,
    language_table,
    language_figure4,


rule paper:
    input:
        paper_outputs(),
        study_outputs(),
        language_outputs(),


rule paper_table2:
    input:
        unpack(paper_table_inputs("table2")),
    output:
        md="results/tables/table2.md",
        csv="results/tables/table2.csv",
        tex="results/tables/table2.tex",
        html=report(
            "results/tables/table2.html",
            caption="../report/paper_table2.rst",
            category="Tables",
            labels={"item": "Table 2", "reproduces": "HPO with / without public data"},
        ),
    log:
        "results/logs/paper/table2.log",
    conda:
        "../../envs/dphpo.yaml"
    params:
        table="table2",
    script:
        "../scripts/paper_table.py"


rule paper_table3:
    input:
        unpack(paper_table_inputs("table3")),
    output:
        md="results/tables/table3.md",
        csv="results/tables/table3.csv",
        tex="results/tables/table3.tex",
        html=report(
            "results/tables/table3.html",
            caption="../report/paper_table3.rst",
            category="Tables",
            labels={"item": "Table 3", "reproduces": "random / oracle / ours, RERR"},
        ),
    log:
        "results/logs/paper/table3.log",
    conda:
        "../../envs/dphpo.yaml"
    params:
        table="table3",
    script:
        "../scripts/paper_table.py"


rule paper_table4:
    input:
        unpack(paper_table_inputs("table4")),
    output:
        md="results/tables/table4.md",
        csv="results/tables/table4.csv",
        tex="results/tables/table4.tex",
        html=report(
            "results/tables/table4.html",
            caption="../report/paper_table4.rst",
            category="Tables",
            labels={
                "item": "Table 4",
                "reproduces": "architectures × datasets vs ε = ∞",
            },
        ),
    log:
        "results/logs/paper/table4.log",
    conda:
        "../../envs/dphpo.yaml"
    params:
        table="table4",
    script:
        "../scripts/paper_table.py"


rule paper_table5:
    input:
        unpack(paper_table_inputs("table5")),
    output:
        md="results/tables/table5.md",
        csv="results/tables/table5.csv",
        tex="results/tables/table5.tex",
        html=report(
            "results/tables/table5.html",
            caption="../report/paper_table5.rst",
            category="Tables",
            labels={"item": "Table 5", "reproduces": "distribution shift (zero-shot)"},
        ),
    log:
        "results/logs/paper/table5.log",
    conda:
        "../../envs/dphpo.yaml"
    params:
        table="table5",
    script:
        "../scripts/paper_table.py"


rule paper_table10:
    input:
        unpack(paper_table_inputs("table10")),
    output:
        md="results/tables/table10.md",
        csv="results/tables/table10.csv",
        tex="results/tables/table10.tex",
        html=report(
            "results/tables/table10.html",
            caption="../report/paper_table10.rst",
            category="Tables",
            labels={
                "item": "Table 10",
                "reproduces": "Linear(2), Linear(3), Quadratic(3)",
            },
        ),
    log:
        "results/logs/paper/table10.log",
    conda:
        "../../envs/dphpo.yaml"
    params:
        table="table10",
    script:
        "../scripts/paper_table.py"


rule paper_table11:
    input:
        unpack(paper_table_inputs("table11")),
    output:
        md="results/tables/table11.md",
        csv="results/tables/table11.csv",
        tex="results/tables/table11.tex",
        html=report(
            "results/tables/table11.html",
            caption="../report/paper_table11.rst",
            category="Tables",
            labels={"item": "Table 11", "reproduces": "device hours, wall-clock"},
        ),
    log:
        "results/logs/paper/table11.log",
    conda:
        "../../envs/dphpo.yaml"
    params:
        table="table11",
    script:
        "../scripts/paper_table.py"


rule paper_table13:
    input:
        unpack(paper_table_inputs("table13")),
    output:
        md="results/tables/table13.md",
        csv="results/tables/table13.csv",
        tex="results/tables/table13.tex",
        html=report(
            "results/tables/table13.html",
            caption="../report/paper_table13.rst",
            category="Tables",
            labels={"item": "Table 13", "reproduces": "marginal cost of the search"},
        ),
    log:
        "results/logs/paper/table13.log",
    conda:
        "../../envs/dphpo.yaml"
    params:
        table="table13",
    script:
        "../scripts/paper_table.py"


rule paper_table15:
    input:
        unpack(paper_table_inputs("table15")),
    output:
        md="results/tables/table15.md",
        csv="results/tables/table15.csv",
        tex="results/tables/table15.tex",
        html=report(
            "results/tables/table15.html",
            caption="../report/paper_table15.rst",
            category="Tables",
            labels={
                "item": "Table 15",
                "reproduces": "ablations of six design choices",
            },
        ),
    log:
        "results/logs/paper/table15.log",
    conda:
        "../../envs/dphpo.yaml"
    params:
        table="table15",
    script:
        "../scripts/paper_table.py"


rule paper_table16:
    input:
        unpack(paper_table_inputs("table16")),
    output:
        md="results/tables/table16.md",
        csv="results/tables/table16.csv",
        tex="results/tables/table16.tex",
        html=report(
            "results/tables/table16.html",
            caption="../report/paper_table16.rst",
            category="Tables",
            labels={
                "item": "Table 16",
                "reproduces": "ε = 0.1, 1, ∞ next to prior work",
            },
        ),
    log:
        "results/logs/paper/table16.log",
    conda:
        "../../envs/dphpo.yaml"
    params:
        table="table16",
    script:
        "../scripts/paper_table.py"


rule paper_dp_continual:
    input:
        unpack(paper_table_inputs("dp_continual")),
    output:
        md="results/tables/dp_continual.md",
        csv="results/tables/dp_continual.csv",
        tex="results/tables/dp_continual.tex",
        html=report(
            "results/tables/dp_continual.html",
            caption="../report/paper_dp_continual.rst",
            category="Tables",
            labels={
                "item": "DP continual pre-training",
                "reproduces": "seed 003 in front of the linear scaling rule",
            },
        ),
    log:
        "results/logs/paper/dp_continual.log",
    conda:
        "../../envs/dphpo.yaml"
    params:
        table="dp_continual",
    script:
        "../scripts/paper_table.py"


rule paper_figure3:
    input:
        paper_figure_inputs("figure3"),
    output:
        figure=report(
            "results/figures/figure3_r_vs_eps.png",
            caption="../report/paper_figure3.rst",
            category="Figures",
            labels={
                "item": "Figure 3",
                "reproduces": "r vs ε, linear scaling vs grid",
            },
        ),
    log:
        "results/logs/paper/figure3.log",
    conda:
        "../../envs/dphpo.yaml"
    params:
        figure="figure3",
    script:
        "../scripts/paper_figure.py"


rule paper_heatmap:
    input:
        paper_figure_inputs("heatmap"),
    output:
        figure=report(
            "results/figures/heatmaps/{dataset}/{extractor}.png",
            caption="../report/paper_heatmap.rst",
            category="Figures",
            labels={
                "item": "Figure 5/17/18: {dataset} × {extractor}",
                "reproduces": "heatmaps ε × steps × η",
            },
        ),
    log:
        "results/logs/paper/heatmap_{dataset}_{extractor}.log",
    conda:
        "../../envs/dphpo.yaml"
    params:
        figure="heatmap",
    script:
        "../scripts/paper_figure.py"


rule paper_figure6:
    input:
        paper_figure_inputs("figure6"),
    output:
        figure=report(
            "results/figures/figure6_r_vs_gap.png",
            caption="../report/paper_figure6.rst",
            category="Figures",
            labels={"item": "Figure 6", "reproduces": "r vs relative accuracy gap"},
        ),
    log:
        "results/logs/paper/figure6.log",
    conda:
        "../../envs/dphpo.yaml"
    params:
        figure="figure6",
    script:
        "../scripts/paper_figure.py"


rule paper_pareto:
    input:
        paper_figure_inputs("pareto"),
    output:
        figure=report(
            "results/figures/pareto/{dataset}.png",
            caption="../report/paper_pareto.rst",
            category="Figures",
            labels={
                "item": "Figure 19/20: {dataset}",
                "reproduces": "Pareto fronts ε vs accuracy and r",
            },
        ),
    log:
        "results/logs/paper/pareto_{dataset}.log",
    conda:
        "../../envs/dphpo.yaml"
    params:
        figure="pareto",
    script:
        "../scripts/paper_figure.py"


rule paper_provenance:
    input:
        paper_all_results,
    output:
        md="results/tables/provenance.md",
        html=report(
            "results/tables/provenance.html",
            caption="../report/paper_provenance.rst",
            category="Provenance",
            labels={
                "item": "Provenance",
                "reproduces": "config, code, data, accountant",
            },
        ),
    log:
        "results/logs/paper/provenance.log",
    conda:
        "../../envs/dphpo.yaml"
    script:
        "../scripts/paper_provenance.py"
