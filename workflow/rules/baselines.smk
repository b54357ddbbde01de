# Baselines (issue #3): every HPO method of dphpo.hpo.registry behind one generic rule, and the
# comparison table. One job runs one method on one (dataset, extractor, variant, seed) for every
# target eps at once (trials batched); the linear scaling rule has its own staged rules (search.smk).


rule run_method:
    input:
        features=features_h5,
    output:
        results=expand(
            "results/runs/{{dataset}}/{{extractor}}/{{method}}/{{variant}}/seed{{seed}}/eps{eps}/result.json",
            eps=EPS_LABELS,
        ),
        models=expand(
            "results/runs/{{dataset}}/{{extractor}}/{{method}}/{{variant}}/seed{{seed}}/eps{eps}/model.npz",
            eps=EPS_LABELS,
        ),
        internal=expand(
            "results/runs/{{dataset}}/{{extractor}}/{{method}}/{{variant}}/seed{{seed}}/eps{eps}/internal.json",
            eps=EPS_LABELS,
        ),
    log:
        "results/logs/{method}/{dataset}/{extractor}/{variant}/seed{seed}.log",
    benchmark:
        "results/benchmarks/{method}/{dataset}/{extractor}/{variant}/seed{seed}.tsv"
    wildcard_constraints:
        method="|".join(registry.BASELINES),
    conda:
        "../../envs/dphpo.yaml"
    threads: config["threads"]["train"]
    resources:
        **rule_resources("run_method", mem_mb=8000, runtime=60),
    params:
        settings=lambda w: study_config.run_settings_hash(
            config, w.variant, w.extractor, w.dataset
        ),
    script:
        "../scripts/run_method.py"


# reads a few JSON files: runs in the main process, never queued on a cluster
localrules:
    table_hpo_comparison,


rule table_hpo_comparison:
    input:
        results=[
            f
            for dataset, extractor in STUDIES
            for f in method_results("linear_scaling", dataset, extractor)
        ]
        + baseline_results(),
        references=[f"results/runs/{d}/{e}/nonprivate/result.json" for d, e in STUDIES],
    output:
        md="results/tables/hpo_comparison.md",
        csv="results/tables/hpo_comparison.csv",
        tex="results/tables/hpo_comparison.tex",
        html=report(
            "results/tables/hpo_comparison.html",
            caption="../report/hpo_comparison_table.rst",
            category="HPO comparison",
            labels={"item": "Table", "shows": "every method at equal total ε, RERR"},
        ),
        figure=report(
            "results/figures/hpo_comparison_accuracy_vs_eps.png",
            caption="../report/hpo_comparison_figure.rst",
            category="HPO comparison",
            labels={"item": "Figure", "shows": "accuracy vs total ε, every method"},
        ),
    log:
        "results/logs/tables/hpo_comparison.log",
    conda:
        "../../envs/dphpo.yaml"
    params:
        # a table labels settings chosen on private data: editing the notes rewrites it
        design_notes=config.get("design_notes", {}),
    script:
        "../scripts/table_hpo_comparison.py"
