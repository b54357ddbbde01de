# Empirical privacy audit of the linear-head trainer (`dphpo audit`): canary runs at each claimed ε
# of config `audit:` under add/remove adjacency with the trainer's public normalizer (the workflow's
# own setting), family-wise lower bounds on ε beside the claims. Not part of `all`: `snakemake audit`.


rule audit:
    output:
        md=report(
            layout.table("audit", "md"),
            caption="../report/audit_table.rst",
            category="Privacy audit",
        ),
        csv=layout.table("audit", "csv"),
        json=layout.table("audit", "json"),
    log:
        layout.log(layout.JOB_AUDIT),
    benchmark:
        layout.benchmark(layout.JOB_AUDIT)
    conda:
        "../../envs/dphpo.yaml"
    threads: config["threads"]["train"]
    resources:
        **rule_resources("audit", mem_mb=4000, runtime=30),
    params:
        audit=config["audit"],
        data_dir=config["data_dir"],
    script:
        "../scripts/audit.py"
