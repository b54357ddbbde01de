# The paper target: every table and figure of Panda et al., and the report's inputs. One generic rule
# per kind of output: `paper_table` ({table}: the vision tables of dphpo.report.plan; the language
# tables have their own rule, language.smk), `paper_figure` (the single-file figures), one rule each
# for the heatmaps (per study) and the Pareto fronts (per dataset). What each reads comes from
# dphpo.report.plan / dphpo.report.figures, which read the config (input functions in common.smk):
# a row or panel whose data the config cannot produce is not an input; the table or figure is still
# written and says which config key or rule it needs.


# Every table's title, report labels and caption: its spec (dphpo.report.specs.TABLES).
from dphpo.report import specs as report_specs


report: "../report/paper_workflow.rst"


localrules:
    paper,
    paper_table,
    paper_figure,
    paper_heatmap,
    paper_pareto,
    paper_provenance,
    language_table,
    language_figure4,


PAPER_FIGURE_LABELS = {
    "figure2_accuracy_vs_eps": {
        "item": "Figure 2",
        "reproduces": "accuracy vs ε, one shared search",
    },
    "figure3_r_vs_eps": {
        "item": "Figure 3",
        "reproduces": "r vs ε, linear scaling vs grid",
    },
    "figure6_r_vs_gap": {
        "item": "Figure 6",
        "reproduces": "r vs relative accuracy gap",
    },
}


rule paper:
    input:
        paper_outputs(),
        study_outputs(),
        language_outputs(),


rule paper_table:
    input:
        unpack(paper_table_inputs),
    output:
        md=layout.partial(layout.TABLE, ext="md"),
        csv=layout.partial(layout.TABLE, ext="csv"),
        tex=layout.partial(layout.TABLE, ext="tex"),
        html=report(
            layout.partial(layout.TABLE, ext="html"),
            caption="../report/paper_table.rst",
            category="Tables",
            labels=lambda w: report_specs.report_labels(w.table),
        ),
    log:
        layout.log(layout.JOB_PAPER, item="{table}"),
    wildcard_constraints:
        table="|".join(paper_plan.TABLES),
    conda:
        "../../envs/dphpo.yaml"
    params:
        # which baselines run where: the job reads them here instead of importing the methods (torch)
        method_jobs=METHOD_JOBS,
        # what the tables read of the paper section (rows, eps, label maps): a change rewrites them
        settings=lambda w: config_hash(config.get("paper")),
        # the report's caption (workflow/report/paper_table.rst renders it): the table's spec
        caption=lambda w: report_specs.report_caption(w.table, config),
    script:
        "../scripts/paper_table.py"


# A table's evaluation that needs models and feature caches (Table 5: the released heads on shifted
# test sets): its own job, a sealed record that the table job reads (the table job imports no torch).
rule paper_evaluation:
    input:
        paper_evaluation_inputs,
    output:
        evaluation=layout.EVALUATION,
    log:
        layout.log(layout.JOB_PAPER, item="{name}"),
    benchmark:
        layout.benchmark(layout.JOB_PAPER, item="{name}")
    wildcard_constraints:
        name="|".join(paper_plan.EVALUATIONS.values()),
    conda:
        "../../envs/dphpo.yaml"
    threads: 1
    resources:
        **rule_resources("paper_evaluation", mem_mb=8000, runtime=30),
    params:
        method_jobs=METHOD_JOBS,
        # the evaluation's own section (Table 5: label maps, metrics): another one re-evaluates
        settings=lambda w: config_hash(paper_plan.evaluation_section(config, w.name)),
    script:
        "../scripts/paper_evaluation.py"


rule paper_figure:
    input:
        paper_figure_inputs(None),
    output:
        figure=report(
            layout.FIGURE,
            caption="../report/paper_figure.rst",
            category="Figures",
            labels=lambda w: PAPER_FIGURE_LABELS[w.figure],
        ),
    log:
        layout.log(layout.JOB_PAPER, item="{figure}"),
    wildcard_constraints:
        figure="|".join(paper_figures.SINGLE_FIGURES),
    conda:
        "../../envs/dphpo.yaml"
    params:
        figure=lambda w: paper_figures.SINGLE_FIGURES[w.figure],
        method_jobs=METHOD_JOBS,
        settings=lambda w: config_hash(config.get("paper")),  # what the figures read of it
    script:
        "../scripts/paper_figure.py"


rule paper_heatmap:
    input:
        paper_figure_inputs("heatmap"),
    output:
        figure=report(
            layout.HEATMAP,
            caption="../report/paper_heatmap.rst",
            category="Figures",
            labels={
                "item": "Figure 5/17/18: {dataset} × {extractor}",
                "reproduces": "heatmaps ε × steps × η",
            },
        ),
    log:
        layout.log(layout.JOB_PAPER, item="heatmap_{dataset}_{extractor}"),
    conda:
        "../../envs/dphpo.yaml"
    params:
        figure="heatmap",
        method_jobs=METHOD_JOBS,
        settings=lambda w: config_hash(config.get("paper")),  # what the figures read of it
    script:
        "../scripts/paper_figure.py"


rule paper_pareto:
    input:
        paper_figure_inputs("pareto"),
    output:
        figure=report(
            layout.PARETO,
            caption="../report/paper_pareto.rst",
            category="Figures",
            labels={
                "item": "Figure 19/20: {dataset}",
                "reproduces": "Pareto fronts ε vs accuracy and r",
            },
        ),
    log:
        layout.log(layout.JOB_PAPER, item="pareto_{dataset}"),
    conda:
        "../../envs/dphpo.yaml"
    params:
        figure="pareto",
        method_jobs=METHOD_JOBS,
        settings=lambda w: config_hash(config.get("paper")),  # what the figures read of it
    script:
        "../scripts/paper_figure.py"


rule paper_provenance:
    input:
        paper_all_results,
    output:
        md=layout.table("provenance", "md"),
        html=report(
            layout.table("provenance", "html"),
            caption="../report/paper_provenance.rst",
            category="Provenance",
            labels={
                "item": "Provenance",
                "reproduces": "config, code, data, accountant",
            },
        ),
    log:
        layout.log(layout.JOB_PAPER, item="provenance"),
    conda:
        "../../envs/dphpo.yaml"
    script:
        "../scripts/paper_provenance.py"
