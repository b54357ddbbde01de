"""The paper target's plan: which result files each table of Panda et al. reads, from the config alone.

`plan(config, name)` says which result files each row needs — the workflow's input functions call it,
so a row the config cannot produce (a method not in `methods`, a variant not defined, a target ε not
in `privacy.target_eps`, a study not in `studies`) is never a DAG input. Such a row stays in the
table, empty, with a note saying which config key or rule it needs. Paths come from dphpo.layout;
the tables (dphpo.report.paper) take ε, method, dataset and the rest from the records they read.
Torch-free: the workflow's parse step and the table jobs import it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dphpo import layout
from dphpo.hpo import registry
from dphpo.report import specs
from dphpo.report.specs import METHOD_LABELS
from dphpo.studies import config as study_config

DEFAULT = "default"
LS = "linear_scaling"
NONPRIVATE = "nonprivate"
RUN_RULE = "run_method"  # workflow/rules/baselines.smk: one job per (study, method, variant, seed)

TABLE15_ROWS = [
    {"choice": "Classifier without bias", "baseline": "with a bias (Mehta et al. 2023b)", "variant": "bias"},
    {"choice": "Zero initialization", "baseline": "random initialization (De et al. 2022)", "variant": "random_init"},
    {"choice": "Gradient descent (full batch)", "baseline": "Poisson-subsampled minibatch DP-SGD (De et al. 2022)", "variant": "minibatch"},
    {"choice": "Momentum ρ = 0.9", "baseline": "ρ = 0 (Bu et al. 2022a)", "variant": "no_momentum"},
    {"choice": "GDP/PLD accounting", "baseline": "RDP accounting (De et al. 2022)", "variant": "rdp_accounting"},
    {"choice": "Unit clipping (C = 1)", "baseline": "C ≪ 1 (Mehta et al. 2023a)", "variant": "small_clip"},
]
TABLE10_ROWS = [
    {"label": "Linear (2)", "variant": "default"},
    {"label": "Linear (3)", "variant": "linear3"},
    {"label": "Quadratic (3)", "variant": "quadratic3"},
]


def benchmark_paths(method: str, dataset: str, extractor: str, variant: str, seed: int, n_stages: int = 2) -> list[str]:
    """Benchmark files (Snakemake `benchmark:`) of every job a method runs for one seed.

    linear_scaling: one per stage and the final job (workflow/rules/search.smk); every other method:
    the one `run_method` job (workflow/rules/baselines.smk).
    """
    where = {"dataset": dataset, "extractor": extractor, "variant": variant, "seed": seed}
    if method == LS:
        stages = [layout.benchmark(layout.JOB_STAGE, stage=k, **where) for k in range(1, n_stages + 1)]
        return stages + [layout.benchmark(layout.JOB_FINAL, **where)]
    return [layout.benchmark(layout.JOB_METHOD, method=method, **where)]


@dataclass
class Source:
    """Files one table cell is computed from; `need` says what the config lacks when there are none."""

    files: list[str] = field(default_factory=list)
    need: str | None = None

    @property
    def ok(self) -> bool:
        return self.need is None


@dataclass
class RowPlan:
    key: dict[str, Any]
    sources: dict[str, Source]

    @property
    def needs(self) -> list[str]:
        return [s.need for s in self.sources.values() if s.need]


@dataclass
class TablePlan:
    name: str
    rows: list[RowPlan]
    needs: list[str] = field(default_factory=list)  # table-level: a whole block the config lacks

    def inputs(self) -> list[str]:
        seen: dict[str, None] = {}
        for row in self.rows:
            for src in row.sources.values():
                for f in src.files:
                    seen.setdefault(f, None)
        return list(seen)

    def all_needs(self) -> list[str]:
        seen: dict[str, None] = {}
        for need in [*self.needs, *(n for r in self.rows for n in r.needs)]:
            seen.setdefault(need, None)
        return list(seen)


class Paper:
    """The config as the paper target reads it."""

    def __init__(self, config: dict, method_jobs: Iterable[Sequence[str]] | None = None):
        """`method_jobs`: the (dataset, extractor, method) jobs of rule run_method, where the caller
        knows them (the workflow passes them to the table jobs, which thus never import the methods
        and torch); else read from dphpo.hpo.registry on first use."""
        self.config = config
        self.section: dict = dict(config.get("paper") or {})
        self.studies = [(s["dataset"], s["extractor"]) for s in config["studies"]]
        self.seeds = [int(s) for s in config.get("seeds", [0])]
        self.targets = [float(e) for e in config["privacy"]["target_eps"]]
        self._jobs: set[tuple[str, str, str]] | None = None if method_jobs is None else {tuple(j) for j in method_jobs}
        self.variants = dict(config.get("variants") or {})
        self.eps = float(self.section.get("eps", 1.0))
        # The grid-search oracle's variant: a finer grid than the comparison table's (heatmaps).
        self.grid_variant = str(self.section.get("grid_variant", DEFAULT))
        self.delta = float(config["privacy"].get("delta", 1e-5))

    # -- availability --------------------------------------------------------------------------

    def study_need(self, dataset: str, extractor: str) -> str | None:
        if (dataset, extractor) not in self.studies:
            return f"studies: add {{dataset: {dataset}, extractor: {extractor}}}"
        return None

    def method_need(self, method: str, dataset: str, extractor: str) -> str | None:
        """None when the workflow runs `method` on the study (dphpo.hpo.registry.method_jobs)."""
        if method == LS:
            return None
        if self._jobs is None:
            self._jobs = set(registry.method_jobs(self.config))
        if (dataset, extractor, method) not in self._jobs:
            if method == "oso_dpsgd_cnn":
                return f"baselines.oso_dpsgd_cnn.studies: add {{dataset: {dataset}, extractor: {extractor}}}"
            return f"baselines.methods: add {method}"
        return None

    def variant_need(self, variant: str) -> str | None:
        if variant != DEFAULT and variant not in self.variants:
            return f"variants.{variant}: define it (see config/paper.yaml)"
        return None

    def target_need(self, eps: float, variant: str = DEFAULT) -> str | None:
        """None when the runs of `variant` include target `eps` (its own privacy.target_eps where it has one)."""
        own = study_config.variant_targets(self.config, variant)
        targets, key = (own, f"variants.{variant}.privacy.target_eps") if own else (self.targets, "privacy.target_eps")
        if not any(math.isclose(eps, float(t), rel_tol=1e-12) for t in targets):
            return f"{key}: add {eps:g}"
        return None

    def variant_for(self, method: str, variant: str = DEFAULT) -> str:
        """The variant a table reads for `method`: the oracle's grid variant (paper.grid_variant) by default."""
        return self.grid_variant if method == "grid_oracle" and variant == DEFAULT else variant

    def source(self, method: str, dataset: str, extractor: str, variant: str = DEFAULT, eps: float | None = None) -> Source:
        """Result files of a method on a study at one target ε, all seeds — or what is missing."""
        eps = self.eps if eps is None else float(eps)
        variant = self.variant_for(method, variant)
        rule = f"rule {RUN_RULE}"
        if method == LS:
            final = "linear_scaling_target" if variant in study_config.own_target_variants(self.config) else "linear_scaling_final"
            rule = f"rules linear_scaling_stage/{final}"
        for need in (
            self.study_need(dataset, extractor),
            self.method_need(method, dataset, extractor),
            self.variant_need(variant),
            self.target_need(eps, variant),
        ):
            if need:
                return Source(need=f"{need} — then {rule} produces {method}/{variant} at eps={eps:g}")
        return Source(
            [
                layout.path(layout.RESULT, dataset=dataset, extractor=extractor, method=method, variant=variant, seed=s, eps=eps)
                for s in self.seeds
            ]
        )

    def reference_source(self, dataset: str, extractor: str) -> Source:
        need = self.study_need(dataset, extractor)
        if need:
            return Source(need=f"{need} — then rule nonprivate_reference produces the eps = inf reference")
        return Source([layout.path(layout.NONPRIVATE_RESULT, dataset=dataset, extractor=extractor)])

    def studies_of(self, key: str) -> list[tuple[str, str]]:
        """A list of studies under paper.<key>, defaulting to every configured study."""
        items = self.section.get(key)
        if items is None:
            return list(self.studies)
        return [(s["dataset"], s["extractor"]) for s in items]

    def language_source(self, method: str, study: str, eps: float | None = None) -> Source:
        """Result files of a method on a language study (`language.studies`) at one target ε, all seeds."""
        eps = self.eps if eps is None else float(eps)
        rule = f"rule language_method (study {study})"
        spec = study_config.language_studies(self.config).get(study)
        if spec is None:
            return Source(need=f"language.studies: define a study named {study!r}")
        if method not in spec.get("methods", []):
            return Source(need=f"language.studies.{study}.methods: add {method} — then {rule} produces it")
        if not any(math.isclose(eps, t, rel_tol=1e-12) for t in study_config.language_targets(self.config, spec)):
            return Source(need=f"language.studies.{study}.overrides.privacy.target_eps: add {eps:g} — then {rule} produces it")
        return Source([layout.path(layout.LANGUAGE_RESULT, study=study, method=method, seed=s, eps=eps) for s in self.seeds])

    def n_stages(self, variant: str) -> int:
        """Stages of the linear scaling rule in a variant (read from the dict: no torch import here)."""
        base = (self.config.get("linear_scaling") or {}).get("stage_eps", [0.1, 0.2])
        override = ((self.variants.get(variant) or {}).get("linear_scaling") or {}).get("stage_eps")
        return len(override if override is not None else base)


def plan_table2(p: Paper) -> TablePlan:
    blocks = {
        "public": ["koskela", "papernot_steinke", LS],
        "no_public": ["random_search", "grid_oracle", LS],
    }
    section = p.section.get("table2") or {}
    rows, needs = [], []
    for block, methods in blocks.items():
        study = section.get(block)
        for method in methods:
            key = {"setting": "with public data" if block == "public" else "without public data", "method": METHOD_LABELS[method], "_block": block, "_method": method}
            if study is None:
                need = f"paper.table2.{block}: name the {{dataset, extractor}} study"
                rows.append(RowPlan(key | {"dataset": "–", "extractor": "–"}, {"run": Source(need=need)}))
                continue
            d, e = study["dataset"], study["extractor"]
            rows.append(RowPlan(key | {"dataset": d, "extractor": e}, {"run": p.source(method, d, e)}))
    return TablePlan("table2", rows, needs)


def plan_table3(p: Paper) -> TablePlan:
    """Vision rows ({dataset, extractor}: accuracy) and language rows ({language: study}: the study's metric,
    SQuAD F1 for Panda et al.'s SQuAD row), each read at paper.eps."""
    items = p.section.get("table3")
    items = [{"dataset": d, "extractor": e} for d, e in p.studies] if items is None else items
    rows = []
    for item in items:
        if "language" in item:
            study = item["language"]
            spec = study_config.language_studies(p.config).get(study) or {}
            model = (spec.get("model") or {}).get("name", "–")
            key = {"dataset": f"{(spec.get('data') or {}).get('name', '–')} ({study})", "extractor": f"{model} + LoRA" if (spec.get("model") or {}).get("lora") else model}
            sources = {k: p.language_source(m, study) for k, m in (("random", "random_search"), ("oracle", "grid_oracle"), ("ours", LS))}
            rows.append(RowPlan(key | {"_language": study, "_paper_ref": spec.get("paper_ref")}, sources))
            continue
        d, e = item["dataset"], item["extractor"]
        rows.append(
            RowPlan(
                {"dataset": d, "extractor": e},
                {"random": p.source("random_search", d, e), "oracle": p.source("grid_oracle", d, e), "ours": p.source(LS, d, e)},
            )
        )
    return TablePlan("table3", rows)


def plan_table4(p: Paper) -> TablePlan:
    studies = sorted(p.studies_of("table4"), key=lambda s: (s[1], s[0]))
    rows = [RowPlan({"model": e, "dataset": d}, {"ours": p.source(LS, d, e), "ref": p.reference_source(d, e)}) for d, e in studies]
    return TablePlan("table4", rows)


def plan_table5(p: Paper) -> TablePlan:
    rows, needs = [], []
    shifts = p.section.get("table5")
    if not shifts:
        needs.append("paper.table5: list {train, test, label_map} dataset pairs (e.g. cifar10 -> stl10)")
    for sh in shifts or []:
        train, test = sh["train"], sh["test"]
        extractors = sh.get("extractors") or [e for d, e in p.studies if d == train]
        for e in extractors:
            ours = p.source(LS, train, e)
            ref = p.reference_source(train, e)
            srcs = {"ours": ours, "ref": ref}
            if ours.ok:
                srcs["models"] = Source([layout.sibling(f, "model.npz") for f in ours.files])
            if ref.ok:
                srcs["ref_model"] = Source([layout.path(layout.NONPRIVATE_MODEL, dataset=train, extractor=e)])
            if e in p.config.get("extractors", {}):
                srcs["test_features"] = Source([layout.path(layout.FEATURES, dataset=test, extractor=e)])
            else:
                srcs["test_features"] = Source(need=f"extractors.{e}: define it")
            key = {"train → test": f"{train} → {test}", "extractor": e, "_train": train, "_test": test, "_map": sh.get("label_map"),
                   "_metric": sh.get("metric", "accuracy"), "_exclude": list(sh.get("exclude_groups") or [])}
            rows.append(RowPlan(key, srcs))
    return TablePlan("table5", rows, needs)


def plan_table10(p: Paper) -> TablePlan:
    """Rows of each study under paper.table10 (a {dataset, extractor} mapping, or a list of them)."""
    section = p.section.get("table10")
    if not section:
        row_specs = TABLE10_ROWS
        need = "paper.table10: name the {dataset, extractor} study (Panda et al.: ImageNet)"
        return TablePlan("table10", [RowPlan({"method": r["label"], "variant": r["variant"]}, {"run": Source(need=need)}) for r in row_specs], [need])
    rows = [
        RowPlan({"method": r["label"], "variant": r["variant"], "dataset": st["dataset"], "extractor": st["extractor"]},
                {"run": p.source(LS, st["dataset"], st["extractor"], r["variant"])})
        for st in (section if isinstance(section, list) else [section])
        for r in st.get("rows") or TABLE10_ROWS
    ]
    return TablePlan("table10", rows)


def _eps_rows(p: Paper, name: str, methods: dict[str, str], variant: str = DEFAULT) -> TablePlan:
    """One row per target ε of paper.<name>.eps on its study (each method's runs at that target) and an
    ε = ∞ row (the non-private reference): Table 12 and Fig. 2 (ImageNet against Mehta et al.)."""
    section = p.section.get(name)
    if not section:
        need = f"paper.{name}: name the {{dataset, extractor}} study and the target budgets `eps` (Panda et al.: ImageNet)"
        return TablePlan(name, [RowPlan({"ε": "–"}, {m: Source(need=need) for m in methods})], [need])
    d, e = section["dataset"], section["extractor"]
    variant = str(section.get("variant", variant))
    rows = [
        RowPlan({"ε": float(x), "dataset": d, "extractor": e, "variant": variant, "_eps": float(x)},
                {key: p.source(m, d, e, variant if m == LS else DEFAULT, float(x)) for key, m in methods.items()})
        for x in section["eps"]
    ]
    rows.append(RowPlan({"ε": math.inf, "dataset": d, "extractor": e, "variant": variant, "_eps": math.inf}, {"ref": p.reference_source(d, e)}))
    return TablePlan(name, rows)


def plan_table12(p: Paper) -> TablePlan:
    """Panda et al. Table 12: the rule on ImageNet at several ε against Mehta et al. (2023b), run here
    (`mehta`), and both Mehta et al. papers' numbers, quoted (dphpo.report.published)."""
    return _eps_rows(p, "table12", {"ours": LS, "mehta": "mehta"})


def plan_figure2(p: Paper) -> TablePlan:
    """Panda et al. Fig. 2 as a table: accuracy against ε on ImageNet, the rule (paper.figure2.variant: a
    search shared by all targets where its `linear_scaling.budget_mode` is absolute) and Mehta et al. (2023b)."""
    return _eps_rows(p, "figure2", {"ours": LS, "mehta": "mehta"})


def plan_table11(p: Paper) -> TablePlan:
    study = p.section.get("table11") or (p.section.get("table2") or {}).get("no_public")
    methods = ["random_search", "grid_oracle", LS]
    if not study:
        need = "paper.table11: name the {dataset, extractor} study"
        return TablePlan("table11", [RowPlan({"method": METHOD_LABELS[m], "_method": m}, {"run": Source(need=need)}) for m in methods], [need])
    d, e = study["dataset"], study["extractor"]
    rows = []
    for m in methods:
        src = p.source(m, d, e)
        bench = Source(need=src.need) if not src.ok else Source(
            [b for s in p.seeds for b in benchmark_paths(m, d, e, p.variant_for(m), s, p.n_stages(DEFAULT))]
        )
        rows.append(RowPlan({"method": METHOD_LABELS[m], "dataset": d, "extractor": e, "_method": m}, {"run": src, "bench": bench}))
    return TablePlan("table11", rows)


def plan_table13(p: Paper) -> TablePlan:
    section = p.section.get("table13")
    if not section:
        need = "paper.table13: name the {dataset, extractor} study and the stage-budget variants"
        return TablePlan("table13", [RowPlan({"method": METHOD_LABELS["grid_oracle"], "variant": "–"}, {"run": Source(need=need)})], [need])
    d, e = section["dataset"], section["extractor"]
    rows = [RowPlan({"method": METHOD_LABELS["grid_oracle"], "variant": "–", "dataset": d, "extractor": e}, {"run": p.source("grid_oracle", d, e)})]
    for v in section["variants"]:
        rows.append(RowPlan({"method": METHOD_LABELS[LS], "variant": v, "dataset": d, "extractor": e}, {"run": p.source(LS, d, e, v)}))
    return TablePlan("table13", rows)


# -- Table 14: lowering ε by more noise or by subsampling ------------------------------------------


def plan_table14(p: Paper) -> TablePlan:
    """The ε = paper.eps linear scaling result and, per variant with a `reduce_eps` block, its final run redone at
    paper.table14.eps (rule linear_scaling_reduce, layout.REDUCED_METHOD), the search charged again."""
    section = p.section.get("table14")
    if not section:
        need = "paper.table14: name the {dataset, extractor} study and the reduce_eps variants (Panda et al.: ImageNet)"
        return TablePlan("table14", [RowPlan({"method to reduce ε": "–"}, {"run": Source(need=need)})], [need])
    d, e, eps = section["dataset"], section["extractor"], float(section.get("eps", 0.7))
    rows = []
    for v in section["variants"]:
        spec = study_config.reduce_spec(p.variants.get(v) or {}) or {}
        from_eps = spec.get("from_eps", 1.0)
        source = p.source(LS, d, e, spec.get("source_variant", DEFAULT), from_eps)
        run = Source(need=p.variant_need(v) or (None if spec else f"variants.{v}.reduce_eps: define {{how, from_eps}}"))
        if run.ok and source.ok:
            run = Source([layout.path(layout.RESULT, dataset=d, extractor=e, method=layout.REDUCED_METHOD, variant=v, seed=s, eps=eps)
                          for s in p.seeds])
        elif run.ok:
            run = Source(need=source.need)
        key = {"method to reduce ε": {"noise": "Increasing noise", "subsample": "Subsampling"}.get(spec.get("how"), v),
               "variant": v, "dataset": d, "extractor": e, "_eps": eps, "_from_eps": from_eps}
        rows.append(RowPlan(key, {"source": source, "run": run}))
    return TablePlan("table14", rows)


def plan_table15(p: Paper) -> TablePlan:
    section = p.section.get("table15")
    specs = (section or {}).get("rows") or TABLE15_ROWS
    if not section:
        need = "paper.table15: name the {dataset, extractor} study (Panda et al.: CIFAR100, eps = 0.1)"
        return TablePlan("table15", [RowPlan({"design choice": r["choice"], "baseline": r["baseline"], "variant": r["variant"]}, {"ours": Source(need=need)}) for r in specs], [need])
    d, e, eps = section["dataset"], section["extractor"], float(section.get("eps", 0.1))
    ours = p.source(LS, d, e, DEFAULT, eps)
    rows = [
        RowPlan(
            {"design choice": r["choice"], "baseline": r["baseline"], "variant": r["variant"], "dataset": d, "extractor": e, "_eps": eps},
            {"ours": ours, "baseline_run": p.source(LS, d, e, r["variant"], eps)},
        )
        for r in specs
    ]
    return TablePlan("table15", rows)


def table16_studies(section: dict) -> list[tuple[str, str]]:
    """The (dataset, extractor) studies of paper.table16, one per row: `rows` [{dataset, extractor}], or
    one `extractor` on each of `datasets` (the schema takes either form, not both)."""
    if "rows" in section:
        return [(r["dataset"], r["extractor"]) for r in section["rows"]]
    return [(d, section["extractor"]) for d in section["datasets"]]


def plan_table16(p: Paper) -> TablePlan:
    """Panda et al. Table 16 (ImageNet-21k models on CIFAR10/100 against prior work): one row per study of
    paper.table16 at each target ε and ε = ∞; a study not in `studies` is a row that says so."""
    section = p.section.get("table16")
    if not section:
        need = "paper.table16: name the extractor and the datasets (Panda et al.: beitv2 on CIFAR10, CIFAR100)"
        return TablePlan("table16", [RowPlan({"method": "our method", "dataset": "–"}, {"ref": Source(need=need)})], [need])
    eps_list = [float(x) for x in section.get("eps", [0.1, 1])]
    rows = []
    for d, e in table16_studies(section):
        srcs = {f"eps{x:g}": p.source(LS, d, e, DEFAULT, x) for x in eps_list}
        srcs["ref"] = p.reference_source(d, e)
        rows.append(RowPlan({"method": "our method", "dataset": d, "extractor": e, "_eps": eps_list}, srcs))
    return TablePlan("table16", rows)


def plan_dp_continual(p: Paper) -> TablePlan:
    """Studies whose extractor was pretrained by rule pretrain_public (with or without a private stage)."""
    extractors = p.config.get("extractors") or {}
    studies = p.studies_of("dp_continual") if "dp_continual" in p.section else [
        (d, e) for d, e in p.studies if (extractors.get(e) or {}).get("kind") == "pretrained_public"
    ]
    rows, needs = [], []
    if not studies:
        needs.append("pretraining.<name> with a private_stage, an extractor {kind: pretrained_public, pretrain: <name>} "
                     "and a study using it (see config/paper_embedded.yaml)")
    for d, e in studies:
        spec = extractors.get(e) or {}
        srcs = {"ours": p.source(LS, d, e), "ref": p.reference_source(d, e)}
        if spec.get("kind") == "pretrained_public" and spec.get("pretrain") in (p.config.get("pretraining") or {}):
            srcs["pretrained"] = Source([layout.path(layout.PRETRAINED_RECORD, name=spec["pretrain"])])
        else:
            srcs["pretrained"] = Source(need=f"extractors.{e}: kind pretrained_public with a `pretraining` section")
        rows.append(RowPlan({"dataset": d, "extractor": e}, srcs))
    return TablePlan("dp_continual", rows, needs)


#: The vision tables of the paper target (the `paper_table` rule's wildcard values), their plans, and
#: their report labels: all derived from dphpo.report.specs.TABLES (a new table is a spec there, its
#: `plan_*` function here and its `build_*` function in dphpo.report.paper).
TABLES: tuple[str, ...] = specs.names("paper")
PLANS: dict[str, Callable[[Paper], TablePlan]] = {name: specs.resolve(specs.get(name).plan, globals()) for name in TABLES}
TABLE_LABELS: dict[str, dict[str, str]] = {name: specs.report_labels(name) for name in TABLES}


def plan_of(p: Paper, name: str) -> TablePlan:
    """Table `name`'s plan for the config `p` reads: its spec's `plan` (a function here, or the callable)."""
    return specs.resolve(specs.get(name, "paper").plan, globals())(p)


# Tables that read an evaluation job's sealed record instead of computing it (the table jobs read
# records only and never import torch): table -> the name of its evaluation (layout.EVALUATION)
EVALUATIONS = {"table5": "table5_shift"}


def evaluation_section(config: dict, name: str) -> dict:
    """What evaluation `name` reads of the config's `paper` section (Table 5: its rows' label maps and metrics)."""
    return {table: (config.get("paper") or {}).get(table) for table, evaluation in EVALUATIONS.items() if evaluation == name}


def plan(config: dict, name: str, method_jobs: Iterable[Sequence[str]] | None = None) -> TablePlan:
    specs.get(name, "paper")  # a ValueError names the known tables
    return plan_of(Paper(config, method_jobs), name)


def _files(tp: TablePlan) -> dict[str, list[str]]:
    groups: dict[str, dict[str, None]] = {"results": {}, "other": {}}
    for row in tp.rows:
        for src in row.sources.values():
            for f in src.files:
                groups["results" if f.endswith("result.json") else "other"].setdefault(f, None)
    return {k: list(v) for k, v in groups.items()}


def evaluation_path(name: str) -> str:
    """The sealed record of a table's evaluation job (Table 5: the shifted test sets)."""
    return layout.path(layout.EVALUATION, name=EVALUATIONS[name])


def inputs(config: dict, name: str, method_jobs: Iterable[Sequence[str]] | None = None) -> dict[str, list[str]]:
    """Input files of a table rule: result files, and (Table 11) benchmark files, (Table 5) its evaluation."""
    files = _files(plan(config, name, method_jobs))
    if name in EVALUATIONS:
        files["other"] = [evaluation_path(name)]
    return files


def evaluation_inputs(config: dict, name: str, method_jobs: Iterable[Sequence[str]] | None = None) -> list[str]:
    """What a table's evaluation job reads (Table 5: the released models and the shifted test features)."""
    return _files(plan(config, name, method_jobs))["other"]
