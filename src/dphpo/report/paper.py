"""Every table of seed 000 from result files: what the config implies, and the tables themselves.

One module answers two questions for each table of the paper target (`snakemake paper`):
- `plan(config, name)`: which result files each row needs — the workflow's input functions call it,
  so a row the config cannot produce (a method not in `methods`, a variant not defined, a target ε
  not in `privacy.target_eps`, a study not in `studies`) is never a DAG input. Such a row stays in
  the table, empty, with a note saying which config key or rule it needs.
- `build(config, name)`: reads those files and returns a `Table` (Markdown, CSV, LaTeX, HTML).

Every table states, per row, the total ε actually spent (max over seeds of `total_eps`, the search
included), whether the HPO cost is included, and the selection rule. Result files are addressed by
their path (`results/runs/{dataset}/{extractor}/{method}/{variant}/seed{seed}/eps{eps}/result.json`).
The seed 000 column repeats the paper's number where the row is the paper's own setting (same dataset
and extractor name as in config/paper.yaml); it is a reference, never an input.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from dphpo.io import read_json
from dphpo.report.tables import Table, apply_design_notes, as_float, label_key, mean_std, pct

DEFAULT = "default"
LS = "linear_scaling"
NONPRIVATE = "nonprivate"
RUN_RULE = "run_method"  # workflow/rules/baselines.smk: one job per (study, method, variant, seed)

TABLES = ("table2", "table3", "table4", "table5", "table10", "table11", "table13", "table15", "table16", "dp_continual")
TABLE_TITLES = {
    "table2": "Table 2: CIFAR10-style comparison with and without public data (Koskela, Papernot–Steinke, random, grid, ours)",
    "table3": "Table 3: random search / grid-search oracle / ours, and the relative error rate reduction",
    "table4": "Table 4: architectures × datasets, linear scaling at ε incl. HPO vs the non-private reference",
    "table5": "Table 5: distribution shift, a model trained privately on one dataset evaluated on another",
    "table10": "Table 10: more stages or a higher-order fit (Linear(2), Linear(3), Quadratic(3))",
    "table11": "Table 11: device hours and wall-clock per method, from Snakemake benchmark files",
    "table13": "Table 13: marginal cost of the search for several stage budgets (ε1, ε2)",
    "table15": "Table 15: ablations of the six design choices",
    "table16": "Table 16: ε = 0.1, 1 and ∞ next to prior work",
    "dp_continual": "Seed 003: DP continual pre-training of the extractor (public stage, then DP-SGD on other private data)",
}
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

# What seed 000 reports, keyed by the names config/paper.yaml uses (references only).
SEED000 = {
    "table2": {
        ("public", "koskela"): 67.0,
        ("public", "papernot_steinke"): 66.0,
        ("public", LS): 70.5,
        ("no_public", "random_search"): 44.0,
        ("no_public", "grid_oracle"): 68.0,
        ("no_public", LS): 62.63,
    },
    "table3": {
        ("cifar10", "wrn16_4_synthetic"): (44.0, 68.0, 62.63, 77.63),
        ("cifar100", "beitv2"): (84.44, 89.62, 89.10, 84.85),
    },
    "table4": {
        ("beitv2", "cifar10"): (98.90, 99.00),
        ("beitv2", "cifar100"): (89.10, 91.57),
        ("beitv2", "fashionmnist"): (91.02, 91.53),
        ("beitv2", "stl10"): (99.69, 99.81),
        ("beitv2", "emnist"): (81.77, 82.00),
        ("convnext", "cifar10"): (96.75, 97.22),
        ("convnext", "cifar100"): (83.47, 86.59),
        ("convnext", "fashionmnist"): (90.23, 91.13),
        ("convnext", "stl10"): (99.61, 99.71),
        ("convnext", "emnist"): (78.38, 79.05),
        ("beit", "cifar10"): (98.19, 98.51),
        ("beit", "cifar100"): (87.1, 90.08),
        ("beit", "fashionmnist"): (90.55, 91.6),
        ("beit", "stl10"): (99.62, 99.78),
        ("beit", "emnist"): (81.48, 83.25),
        ("vit_l", "cifar10"): (98.29, 98.44),
        ("vit_l", "cifar100"): (86.18, 89.72),
        ("vit_l", "fashionmnist"): (90.58, 91.37),
        ("vit_l", "stl10"): (99.62, 99.76),
    },
    "table5": {("cifar10", "stl10", "beitv2"): (98.90, 98.82)},
    "table10": {"Linear (2)": 86.69, "Linear (3)": 87.81, "Quadratic (3)": 86.64},  # ImageNet
    "table13": {  # CIFAR10, (eps1, eps2) -> (eps_f, acc); oracle (None, None)
        (None, None): (1.0, 99.00),
        (0.01, 0.05): (0.99, 98.88),
        (0.05, 0.1): (0.96, 98.85),
        (0.05, 0.2): (0.9, 98.81),
        (0.1, 0.2): (0.88, 98.81),
        (0.2, 0.3): (0.7, 98.79),
    },
    "table15": {  # CIFAR100, eps = 0.1: variant -> (baseline accuracy, improvement)
        "bias": (71.3, 0.36),
        "random_init": (64.85, 6.81),
        "minibatch": (70.2, 1.46),
        "no_momentum": (69.02, 2.09),
        "rdp_accounting": (68.43, 3.23),
        "small_clip": (71.2, 0.46),
    },
    "table16": {("cifar10", "beitv2"): (98.65, 99.00, 99.00), ("cifar100", "beitv2"): (81.9, 89.81, 91.57)},
    "table11": {"random_search": (1, 1), "grid_oracle": (100, 1), LS: (7, 3)},  # GPU hours, wall-clock hours
}
# Prior work quoted by seed 000 Table 16 (ImageNet-21k pretrained, not reproduced here).
TABLE16_PRIOR = [
    ("Mehta et al. 2023a", "cifar10", 95.8, 96.3, 96.6),
    ("Mehta et al. 2023a", "cifar100", 78.5, 82.7, 85.29),
    ("Bu et al. 2022a", "cifar10", None, 96.7, 97.4),
    ("Bu et al. 2022a", "cifar100", None, 83.0, 88.4),
    ("Cattan et al. 2022", "cifar10", None, 95.0, 96.4),
    ("Cattan et al. 2022", "cifar100", None, 73.7, 82.1),
    ("De et al. 2022", "cifar10", None, 94.8, 96.6),
    ("De et al. 2022", "cifar100", None, 67.4, 81.8),
]
METHOD_LABELS = {
    LS: "Ours (linear scaling)",
    "random_search": "Random search",
    "random_search_k": "Random search (k runs, honest selection)",
    "grid_oracle": "Grid search (oracle, HPO cost not included)",
    "grid_accounted": "Grid search (accounted)",
    "papernot_steinke": "Papernot & Steinke (2022)",
    "koskela": "Koskela & Kulkarni (2023)",
    "oso_dpsgd": "OSO-DPSGD",
    "mehta": "Mehta et al. (2023b)",
}


# --------------------------------------------------------------------------------------------
# Paths: the result layout is the contract between the rules and the tables


RESULT_RE = re.compile(
    r"results/runs/(?P<dataset>[^/]+)/(?P<extractor>[^/]+)/(?P<method>[^/]+)/(?P<variant>[^/]+)/"
    r"seed(?P<seed>\d+)/eps(?P<eps>[^/]+)/result\.json$"
)


NONPRIVATE_RE = re.compile(rf"results/runs/(?P<dataset>[^/]+)/(?P<extractor>[^/]+)/{NONPRIVATE}/result\.json$")


def eps_label(eps: float) -> str:
    """How a target ε appears in file paths (same as dphpo.study.eps_label)."""
    return f"{float(eps):g}"


def result_path(dataset: str, extractor: str, method: str, variant: str, seed: int, eps: float) -> str:
    return f"results/runs/{dataset}/{extractor}/{method}/{variant}/seed{seed}/eps{eps_label(eps)}/result.json"


def model_path(dataset: str, extractor: str, method: str, variant: str, seed: int, eps: float) -> str:
    return result_path(dataset, extractor, method, variant, seed, eps).replace("result.json", "model.npz")


def nonprivate_path(dataset: str, extractor: str, kind: str = "result.json") -> str:
    return f"results/runs/{dataset}/{extractor}/{NONPRIVATE}/{kind}"


def features_path(dataset: str, extractor: str) -> str:
    return f"results/features/{dataset}/{extractor}.h5"


def benchmark_paths(method: str, dataset: str, extractor: str, variant: str, seed: int, n_stages: int = 2) -> list[str]:
    """Benchmark files (Snakemake `benchmark:`) of every job a method runs for one seed.

    linear_scaling: one per stage and the final job (workflow/rules/search.smk); every other method:
    the one `run_method` job (workflow/rules/baselines.smk).
    """
    if method == LS:
        base = f"results/benchmarks/linear_scaling/{dataset}/{extractor}/{variant}/seed{seed}"
        return [f"{base}/stage{k}.tsv" for k in range(1, n_stages + 1)] + [f"{base}/final.tsv"]
    return [f"results/benchmarks/{method}/{dataset}/{extractor}/{variant}/seed{seed}.tsv"]


def parse_result_path(path: str | Path) -> dict[str, Any]:
    m = RESULT_RE.search(str(path).replace("\\", "/"))
    if not m:
        raise ValueError(f"not a result file path: {path}")
    out: dict[str, Any] = m.groupdict()
    out["seed"] = int(out["seed"])
    out["eps"] = float(out["eps"])
    return out


# --------------------------------------------------------------------------------------------
# What the config implies


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

    def __init__(self, config: dict):
        self.config = config
        self.section: dict = dict(config.get("paper") or {})
        self.studies = [(s["dataset"], s["extractor"]) for s in config["studies"]]
        self.seeds = [int(s) for s in config.get("seeds", [0])]
        self.targets = [float(e) for e in config["privacy"]["target_eps"]]
        self._jobs: set[tuple[str, str, str]] | None = None
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
            from dphpo.hpo import registry

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

    def target_need(self, eps: float) -> str | None:
        if not any(math.isclose(eps, t, rel_tol=1e-12) for t in self.targets):
            return f"privacy.target_eps: add {eps:g}"
        return None

    def variant_for(self, method: str, variant: str = DEFAULT) -> str:
        """The variant a table reads for `method`: the oracle's grid variant (paper.grid_variant) by default."""
        return self.grid_variant if method == "grid_oracle" and variant == DEFAULT else variant

    def source(self, method: str, dataset: str, extractor: str, variant: str = DEFAULT, eps: float | None = None) -> Source:
        """Result files of a method on a study at one target ε, all seeds — or what is missing."""
        eps = self.eps if eps is None else float(eps)
        variant = self.variant_for(method, variant)
        rule = "rules linear_scaling_stage/linear_scaling_final" if method == LS else f"rule {RUN_RULE}"
        for need in (
            self.study_need(dataset, extractor),
            self.method_need(method, dataset, extractor),
            self.variant_need(variant),
            self.target_need(eps),
        ):
            if need:
                return Source(need=f"{need} — then {rule} produces {method}/{variant} at eps={eps:g}")
        return Source([result_path(dataset, extractor, method, variant, s, eps) for s in self.seeds])

    def reference_source(self, dataset: str, extractor: str) -> Source:
        need = self.study_need(dataset, extractor)
        if need is None and not (self.config.get("nonprivate") or {}).get("enabled", True):
            need = "nonprivate.enabled: true"
        if need:
            return Source(need=f"{need} — then rule nonprivate_reference produces the eps = inf reference")
        return Source([nonprivate_path(dataset, extractor)])

    def studies_of(self, key: str) -> list[tuple[str, str]]:
        """A list of studies under paper.<key>, defaulting to every configured study."""
        items = self.section.get(key)
        if items is None:
            return list(self.studies)
        return [(s["dataset"], s["extractor"]) for s in items]

    def n_stages(self, variant: str) -> int:
        """Stages of the linear scaling rule in a variant (read from the dict: no torch import here)."""
        base = (self.config.get("linear_scaling") or {}).get("stage_eps", [0.1, 0.2])
        override = ((self.variants.get(variant) or {}).get("linear_scaling") or {}).get("stage_eps")
        return len(override if override is not None else base)


# --------------------------------------------------------------------------------------------
# Reading results


class Results:
    """result.json files, read once each."""

    def __init__(self) -> None:
        self._cache: dict[str, dict] = {}

    def get(self, path: str) -> dict:
        if path not in self._cache:
            self._cache[path] = read_json(path)
        return self._cache[path]

    def many(self, src: Source) -> list[dict]:
        return [self.get(f) for f in src.files] if src.ok else []


@dataclass
class Summary:
    """Seeds of one (method, study, variant, target ε) summarized."""

    n: int
    mean: float
    std: float
    total_eps: float  # max over seeds
    target: float
    hpo: str  # "included", "NOT included (oracle)", "none (non-private)"
    selection: str
    accountant: str
    results: list[dict]

    @property
    def acc(self) -> str:
        return pct(self.mean, self.std)


def summarize(results: Sequence[dict]) -> Summary | None:
    if not results:
        return None
    mean, std = mean_std([r["test_accuracy"] for r in results])
    first = results[0]
    sel = first.get("selection") or {}
    if not first.get("private", True):
        hpo = "none (non-private, ε = ∞)"
    elif first["method"] == "grid_oracle" or not sel.get("private", True):
        hpo = "NOT included (oracle)"
    else:
        hpo = "included"
    accountants = sorted({str((r.get("privacy") or {}).get("total", {}).get("accountant", "")) for r in results})
    return Summary(
        n=len(results),
        mean=mean,
        std=std,
        total_eps=max(as_float(r["total_eps"]) for r in results),
        target=as_float(first["target"]["eps"]),
        hpo=hpo,
        selection=selection_label(sel),
        accountant=", ".join(a for a in accountants if a) or "–",
        results=list(results),
    )


def selection_label(sel: dict) -> str:
    rule = sel.get("rule", "?")
    return f"{rule} ({'accounted' if sel.get('private', True) else 'non-private'})"


def points(x: float | None) -> float | None:
    return None if x is None else round(100.0 * x, 2)


# --------------------------------------------------------------------------------------------
# The tables


def _ours_cols(prefix: str = "") -> list[str]:
    return [f"{prefix}total ε (incl. search)", f"{prefix}HPO cost", f"{prefix}selection"]


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


def build_table2(p: Paper, plan: TablePlan, res: Results) -> Table:
    rows = []
    for rp in plan.rows:
        s = summarize(res.many(rp.sources["run"]))
        ref = SEED000["table2"].get((rp.key["_block"], rp.key["_method"])) if rp.key["dataset"] == "cifar10" else None
        rows.append(
            {**rp.key, "target ε": p.eps, **_summary_cells(s), "seed 000 (%)": ref}
        )
    cols = ["setting", "dataset", "extractor", "method", "target ε", "total ε (incl. search)", "HPO cost", "seeds", "test accuracy (%)", "selection", "seed 000 (%)"]
    caption = (
        f"Seed 000 Table 2 at target ε = {p.eps:g} (δ = {p.delta:g}): linear probing with a feature extractor pretrained "
        "on public data (Koskela & Kulkarni, Papernot & Steinke, ours) and without public data (random search, the "
        "grid-search oracle, ours). 'total ε (incl. search)' is the ε of every release composed (max over seeds); the "
        "oracle's covers only its released run."
    )
    return Table(cols, rows, caption, _notes(plan))


def plan_table3(p: Paper) -> TablePlan:
    rows = []
    for d, e in p.studies_of("table3"):
        rows.append(
            RowPlan(
                {"dataset": d, "extractor": e},
                {"random": p.source("random_search", d, e), "oracle": p.source("grid_oracle", d, e), "ours": p.source(LS, d, e)},
            )
        )
    return TablePlan("table3", rows)


def build_table3(p: Paper, plan: TablePlan, res: Results) -> Table:
    rows, oracles = [], []
    for rp in plan.rows:
        r, o, s = (summarize(res.many(rp.sources[k])) for k in ("random", "oracle", "ours"))
        oracles.append(o)
        rerr = None
        if r and o and s and not math.isclose(o.mean, r.mean):
            rerr = round(100.0 * (s.mean - r.mean) / (o.mean - r.mean), 2)
        ref = SEED000["table3"].get((rp.key["dataset"], rp.key["extractor"]))
        rows.append(
            {
                **rp.key,
                "target ε": p.eps,
                "total ε ours (incl. search)": s.total_eps if s else None,
                "total ε random search": r.total_eps if r else None,
                "random search (%)": r.acc if r else None,
                "oracle (%)": o.acc if o else None,
                "ours (%)": s.acc if s else None,
                "RERR (%)": rerr,
                "selection (ours)": s.selection if s else None,
                "seeds": s.n if s else None,
                "seed 000 R / O / ours / RERR": " / ".join(f"{v:g}" for v in ref) if ref else None,
            }
        )
    cols = list(rows[0]) if rows else ["dataset", "extractor"]
    caption = (
        f"Seed 000 Table 3 at target ε = {p.eps:g} (δ = {p.delta:g}): random search (one run at the full budget, "
        "accounted), the grid-search oracle (every grid point at the full budget, best on TEST — HPO cost NOT "
        "included, an upper reference) and ours (search included in the total). RERR = (ours − random) / "
        "(oracle − random) × 100, on the means over seeds."
    )
    return Table(cols, rows, caption, _notes(plan) + _oracle_note(p, oracles))


def plan_table4(p: Paper) -> TablePlan:
    studies = sorted(p.studies_of("table4"), key=lambda s: (s[1], s[0]))
    rows = [RowPlan({"model": e, "dataset": d}, {"ours": p.source(LS, d, e), "ref": p.reference_source(d, e)}) for d, e in studies]
    return TablePlan("table4", rows)


def build_table4(p: Paper, plan: TablePlan, res: Results) -> Table:
    rows = []
    for rp in plan.rows:
        s = summarize(res.many(rp.sources["ours"]))
        ref = SEED000["table4"].get((rp.key["model"], rp.key["dataset"]))
        rows.append(
            {
                **rp.key,
                "target ε": p.eps,
                **_summary_cells(s, acc_col=f"ε = {p.eps:g} (%)"),
                **_reference_cells(s, res.many(rp.sources["ref"])),
                "seed 000 ε = 1 / ∞": " / ".join(f"{v:g}" for v in ref) if ref else None,
            }
        )
    cols = ["model", "dataset", "target ε", "total ε (incl. search)", "HPO cost", "seeds", f"ε = {p.eps:g} (%)", "ε = ∞ (%)", "gap (points)", "selection", "seed 000 ε = 1 / ∞"]
    caption = (
        f"Seed 000 Table 4: every extractor × dataset, linear scaling at target ε = {p.eps:g} (δ = {p.delta:g}) with the "
        "search included in the total, against the non-private reference (σ = 0, best grid point on TEST: a ceiling, "
        "not a DP result). Gap = ε = ∞ minus the private mean."
    )
    return Table(cols, rows, caption, _notes(plan))


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
                srcs["models"] = Source([f.replace("result.json", "model.npz") for f in ours.files])
            if ref.ok:
                srcs["ref_model"] = Source([nonprivate_path(train, e, "model.npz")])
            if e in p.config.get("extractors", {}):
                srcs["test_features"] = Source([features_path(test, e)])
            else:
                srcs["test_features"] = Source(need=f"extractors.{e}: define it")
            rows.append(RowPlan({"train → test": f"{train} → {test}", "extractor": e, "_train": train, "_test": test, "_map": sh.get("label_map")}, srcs))
    return TablePlan("table5", rows, needs)


def build_table5(p: Paper, plan: TablePlan, res: Results) -> Table:
    rows = []
    for rp in plan.rows:
        s = summarize(res.many(rp.sources["ours"]))
        refs = res.many(rp.sources["ref"])
        ood, ref_ood, dropped = None, None, None
        if rp.sources["test_features"].ok and (s or refs):
            x, y, dropped = _shift_test_set(p, rp.key["_test"], rp.key["extractor"], rp.key["_map"], rp.sources["test_features"].files[0], rp.key["_train"])
            if s:
                accs = [_accuracy(np.load(m)["weights"], x, y) for m in rp.sources["models"].files]
                ood = pct(*mean_std(accs))
            if refs:
                ref_ood = f"{100 * _accuracy(np.load(rp.sources['ref_model'].files[0])['weights'], x, y):.2f}"
        ref = SEED000["table5"].get((rp.key["_train"], rp.key["_test"], rp.key["extractor"]))
        rows.append(
            {
                **rp.key,
                "target ε": p.eps,
                "total ε (incl. search)": s.total_eps if s else None,
                "HPO cost": s.hpo if s else None,
                "ID accuracy (%)": s.acc if s else None,
                "OOD accuracy (%)": ood,
                "non-private ID / OOD (%)": None if not refs else f"{100 * refs[0]['test_accuracy']:.2f} / {ref_ood}",
                "test classes dropped": dropped,
                "selection": s.selection if s else None,
                "seed 000 ID / OOD": " / ".join(f"{v:g}" for v in ref) if ref else None,
            }
        )
    cols = ["train → test", "extractor", "target ε", "total ε (incl. search)", "HPO cost", "ID accuracy (%)", "OOD accuracy (%)", "non-private ID / OOD (%)", "test classes dropped", "selection", "seed 000 ID / OOD"]
    caption = (
        f"Seed 000 Table 5 (distribution shift): the released linear-scaling heads at target ε = {p.eps:g} "
        "(search included), trained on the first dataset and applied unchanged (zero-shot) to the second's test "
        "split, labels remapped as configured (CIFAR10 → STL10: STL10's 'monkey' has no CIFAR10 class and is dropped; "
        "CIFAR10's 'frog' never appears). The OOD evaluation reads no training data: it costs no privacy."
    )
    return Table(cols, rows, caption, _notes(plan))


def plan_table10(p: Paper) -> TablePlan:
    section = p.section.get("table10")
    if not section:
        row_specs = TABLE10_ROWS
        need = "paper.table10: name the {dataset, extractor} study (seed 000: ImageNet)"
        return TablePlan("table10", [RowPlan({"method": r["label"], "variant": r["variant"]}, {"run": Source(need=need)}) for r in row_specs], [need])
    d, e = section["dataset"], section["extractor"]
    rows = [
        RowPlan({"method": r["label"], "variant": r["variant"], "dataset": d, "extractor": e}, {"run": p.source(LS, d, e, r["variant"])})
        for r in section.get("rows") or TABLE10_ROWS
    ]
    return TablePlan("table10", rows)


def build_table10(p: Paper, plan: TablePlan, res: Results) -> Table:
    rows = []
    for rp in plan.rows:
        s = summarize(res.many(rp.sources["run"]))
        conf = s.results[0]["search"].get("config", {}) if s else {}
        rows.append(
            {
                **rp.key,
                "stage budgets": None if not s else ", ".join(f"{x:g}" for x in s.results[0]["search"]["stage_budgets_eps"]),
                "trials per stage": conf.get("n_trials"),
                "degree": conf.get("degree"),
                "target ε": p.eps,
                **_summary_cells(s, acc_col="accuracy (%)"),
                "seed 000 (ImageNet, %)": SEED000["table10"].get(rp.key["method"]),
            }
        )
    cols = ["method", "variant", "stage budgets", "trials per stage", "degree", "target ε", "total ε (incl. search)", "HPO cost", "seeds", "accuracy (%)", "selection", "seed 000 (ImageNet, %)"]
    caption = (
        f"Seed 000 Table 10 at target ε = {p.eps:g}: the linear scaling rule with two stages and a line (the method), "
        "three stages and a line, three stages and a parabola. Every stage trial and selection release is in the total."
    )
    return Table(cols, rows, caption, _notes(plan))


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


def read_benchmark(path: str) -> dict[str, float]:
    """A Snakemake benchmark TSV: the mean of each numeric column over its repeats."""
    lines = [ln.rstrip("\n").split("\t") for ln in Path(path).read_text().splitlines() if ln.strip()]
    header, values = lines[0], lines[1:]
    out = {}
    for i, col in enumerate(header):
        nums = []
        for v in values:
            try:
                nums.append(float(v[i]))
            except (ValueError, IndexError):
                pass
        if nums:
            out[col] = float(np.mean(nums))
    return out


def build_table11(p: Paper, plan: TablePlan, res: Results) -> Table:
    rows = []
    base_hours = None
    for rp in plan.rows:
        m = rp.key["_method"]
        s = summarize(res.many(rp.sources["run"]))
        bench = rp.sources.get("bench")
        if not (s and bench and bench.ok):
            rows.append({**rp.key, "target ε": p.eps})
            continue
        per_seed = len(bench.files) // max(1, len(p.seeds))
        seconds = [read_benchmark(f).get("s", float("nan")) for f in bench.files]
        by_seed = [seconds[i * per_seed : (i + 1) * per_seed] for i in range(len(p.seeds))]
        device_h = float(np.mean([sum(x) for x in by_seed])) / 3600.0
        # The jobs of one seed form a chain (linear scaling: stage k needs stage k−1, the final job
        # every stage; a baseline is a single job), so the critical path is their sum as well.
        wall_h = device_h
        # Papernot–Steinke and Koskela release the best trial only: how many they trained (K) is secret,
        # so the table shows the planned E[K] and no trial-steps (the internal log has the real counts)
        runs = [
            len(r.get("trials", [])) + (1 if m == LS else 0)
            if r.get("trials_released", "all") == "all"
            else float(r["search"].get("mean_trials", float("nan")))
            for r in s.results
        ]
        steps = [
            sum(int(t.get("steps", 0)) for t in r.get("trials", [])) + (int(r["released"].get("steps", 0)) if m == LS else 0)
            if r.get("trials_released", "all") == "all"
            else float("nan")
            for r in s.results
        ]
        rounds = p.n_stages(DEFAULT) + 1 if m == LS else 1
        if m == "random_search":
            base_hours = device_h
        ref = SEED000["table11"].get(m)
        rows.append(
            {
                **rp.key,
                "target ε": p.eps,
                "jobs per seed": per_seed,
                "trained runs per target": round(float(np.mean(runs)), 2),
                "sequential rounds": rounds,
                "trial-steps per target": None if np.isnan(np.mean(steps)) else int(np.mean(steps)),
                "device hours per seed": round(device_h, 5),
                "wall-clock hours per seed (critical path)": round(wall_h, 5),
                "total ε (incl. search)": s.total_eps,
                "HPO cost": s.hpo,
                "selection": s.selection,
                "seed 000 GPU h / wall h": f"{ref[0]} / {ref[1]}" if ref else None,
            }
        )
    for row in rows:
        if base_hours and row.get("device hours per seed") is not None:
            row["relative to random search"] = round(row["device hours per seed"] / base_hours, 2)
    cols = ["method", "dataset", "extractor", "target ε", "jobs per seed", "trained runs per target", "sequential rounds", "trial-steps per target", "device hours per seed", "wall-clock hours per seed (critical path)", "relative to random search", "total ε (incl. search)", "HPO cost", "selection", "seed 000 GPU h / wall h"]
    caption = (
        "Seed 000 Table 11: compute of each method. Seed 000 counts one hour per trial: runs per target (random 1, grid "
        "100, ours 7) are its GPU hours and sequential rounds (1, 1, 3) its wall-clock; both are columns here. Measured: "
        "the `s` column of the Snakemake benchmark file of every job (one job trains all targets' trials of a stage at "
        "once, batched). Device hours = the sum over the method's jobs "
        "for one seed (GPU hours on a GPU, CPU hours here if no GPU); wall-clock = the sum along the chain of dependent "
        f"jobs (stage 1 → stage 2 → final for ours). Target ε = {p.eps:g}; trained runs per target from the result file."
    )
    notes = _notes(plan) + [
        "The grid-search oracle trains every grid point in one batched job; with one GPU per grid point (seed 000's "
        "setting) its wall-clock would be that of its longest single point.",
    ]
    return Table(cols, rows, caption, notes)


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


def build_table13(p: Paper, plan: TablePlan, res: Results) -> Table:
    rows, oracles = [], []
    for rp in plan.rows:
        s = summarize(res.many(rp.sources["run"]))
        if rp.key["variant"] == "–":
            oracles.append(s)
        e1 = e2 = ef = None
        if s and s.results[0]["method"] == LS:
            budgets = s.results[0]["search"]["stage_budgets_eps"]
            e1, e2 = budgets[0], budgets[1]
            ef = float(np.mean([r["released"]["standalone_eps"] for r in s.results]))
        elif s:
            ef = float(np.mean([as_float(r["released"].get("standalone_eps", r["target"]["eps"])) for r in s.results]))
        key = (None, None) if rp.key["variant"] == "–" else (_round(e1), _round(e2))
        ref = SEED000["table13"].get(key)
        rows.append(
            {
                **rp.key,
                "ε1": e1,
                "ε2": e2,
                "ε_f (final run alone)": ef,
                "target ε": p.eps,
                "total ε (incl. search)": s.total_eps if s else None,
                "HPO cost": s.hpo if s else None,
                "accuracy (%)": points(s.mean) if s else None,
                "std": points(s.std) if s else None,
                "seeds": s.n if s else None,
                "selection": s.selection if s else None,
                "seed 000 ε_f / acc": f"{ref[0]:g} / {ref[1]:g}" if ref else None,
            }
        )
    cols = ["method", "variant", "ε1", "ε2", "ε_f (final run alone)", "target ε", "total ε (incl. search)", "HPO cost", "accuracy (%)", "std", "seeds", "selection", "seed 000 ε_f / acc"]
    caption = (
        f"Seed 000 Table 13 at target ε = {p.eps:g} (δ = {p.delta:g}): the marginal cost of the search. The first row is "
        "the grid-search oracle (HPO cost not included); each further row spends n trials at ε1 and n at ε2 (standalone "
        "ε of each trial) plus the selection releases, and the final run gets ε_f, so that the total is the target."
    )
    return Table(cols, rows, caption, _notes(plan) + _oracle_note(p, oracles))


def plan_table15(p: Paper) -> TablePlan:
    section = p.section.get("table15")
    specs = (section or {}).get("rows") or TABLE15_ROWS
    if not section:
        need = "paper.table15: name the {dataset, extractor} study (seed 000: CIFAR100, eps = 0.1)"
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


def build_table15(p: Paper, plan: TablePlan, res: Results) -> Table:
    rows = []
    for rp in plan.rows:
        s = summarize(res.many(rp.sources["ours"]))
        b = summarize(res.many(rp.sources.get("baseline_run", Source(need="-"))))
        ref = SEED000["table15"].get(rp.key["variant"])
        rows.append(
            {
                **rp.key,
                "target ε": rp.key.get("_eps"),
                "baseline accuracy (%)": b.acc if b else None,
                "ours (%)": s.acc if s else None,
                "improvement (points)": None if not (s and b) else round(100.0 * (s.mean - b.mean), 2),
                "total ε baseline": b.total_eps if b else None,
                "total ε ours": s.total_eps if s else None,
                "accountant baseline / ours": None if not (s and b) else f"{b.accountant} / {s.accountant}",
                "HPO cost": s.hpo if s else None,
                "selection": s.selection if s else None,
                "seed 000 baseline / improvement": f"{ref[0]:g} / +{ref[1]:g}" if ref else None,
            }
        )
    eps = plan.rows[0].key.get("_eps") if plan.rows else None
    cols = ["design choice", "baseline", "variant", "target ε", "baseline accuracy (%)", "ours (%)", "improvement (points)", "total ε baseline", "total ε ours", "accountant baseline / ours", "HPO cost", "selection", "seed 000 baseline / improvement"]
    caption = (
        f"Seed 000 Table 15: each design choice of the method against the alternative prior work used, at target ε = "
        f"{'–' if eps is None else f'{eps:g}'} (δ = {p.delta:g}). Both columns run the whole linear scaling rule (search "
        "included in each total); the baseline changes one thing (a variant). Minibatch and RDP-accounting runs are "
        "calibrated and accounted with RDP (accountant 'rdp'); the rest compose exactly in GDP."
    )
    return Table(cols, rows, caption, _notes(plan))


def plan_table16(p: Paper) -> TablePlan:
    section = p.section.get("table16")
    if not section:
        need = "paper.table16: name the extractor and the datasets (seed 000: beitv2 on CIFAR10, CIFAR100)"
        return TablePlan("table16", [RowPlan({"method": "our method", "dataset": "–"}, {"ref": Source(need=need)})], [need])
    e, eps_list = section["extractor"], [float(x) for x in section.get("eps", [0.1, 1])]
    rows = []
    for d in section["datasets"]:
        srcs = {f"eps{x:g}": p.source(LS, d, e, DEFAULT, x) for x in eps_list}
        srcs["ref"] = p.reference_source(d, e)
        rows.append(RowPlan({"method": "our method", "dataset": d, "extractor": e, "_eps": eps_list}, srcs))
    return TablePlan("table16", rows)


def build_table16(p: Paper, plan: TablePlan, res: Results) -> Table:
    rows = []
    eps_list = plan.rows[0].key.get("_eps", [0.1, 1.0]) if plan.rows else [0.1, 1.0]
    for rp in plan.rows:
        row = dict(rp.key)
        sums = {x: summarize(res.many(rp.sources.get(f"eps{x:g}", Source(need="-")))) for x in eps_list}
        for x, s in sums.items():
            row[f"ε = {x:g} (%)"] = s.acc if s else None
        refs = res.many(rp.sources["ref"])
        ref_acc = refs[0]["test_accuracy"] if refs else None
        row["ε = ∞ (%)"] = points(ref_acc)
        last = sums.get(max(eps_list)) if eps_list else None
        row[f"gap ({max(eps_list):g} − ∞)" if eps_list else "gap"] = None if not (last and ref_acc is not None) else round(100.0 * (ref_acc - last.mean), 2)
        row["total ε (incl. search)"] = " / ".join("–" if s is None else f"{s.total_eps:.4g}" for s in sums.values())
        row["HPO cost"] = next((s.hpo for s in sums.values() if s), None)
        row["selection"] = next((s.selection for s in sums.values() if s), None)
        ref = SEED000["table16"].get((rp.key["dataset"], rp.key.get("extractor")))
        row["source"] = "this run" + (f" (seed 000: {' / '.join(f'{v:g}' for v in ref)})" if ref else "")
        rows.append(row)
    datasets = {rp.key["dataset"] for rp in plan.rows}
    for name, d, a01, a1, ainf in TABLE16_PRIOR:
        if d in datasets:
            rows.append({"method": name, "dataset": d, "ε = 0.1 (%)": a01, "ε = 1 (%)": a1, "ε = ∞ (%)": ainf, "HPO cost": "not reported", "source": "quoted from seed 000 Table 16, not reproduced"})
    gap_col = f"gap ({max(eps_list):g} − ∞)"
    cols = ["method", "dataset", "extractor", *[f"ε = {x:g} (%)" for x in eps_list], "ε = ∞ (%)", gap_col, "total ε (incl. search)", "HPO cost", "selection", "source"]
    caption = (
        "Seed 000 Table 16: our method at each listed target ε (search included in the total) and without privacy "
        "(ε = ∞, best grid point on TEST: a ceiling). Prior-work rows, when the dataset matches, are quoted from the "
        "paper (they do not report the privacy cost of their hyperparameter search)."
    )
    notes = _notes(plan)
    if not any(d in datasets for _, d, *_ in TABLE16_PRIOR):
        notes.append("seed 000's prior-work rows (Mehta 2023a, Bu 2022a, Cattan 2022, De 2022) are for cifar10/cifar100 only; none match these datasets")
    return Table(cols, rows, caption, notes)


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
            srcs["pretrained"] = Source([f"results/pretrained/{spec['pretrain']}.json"])
        else:
            srcs["pretrained"] = Source(need=f"extractors.{e}: kind pretrained_public with a `pretraining` section")
        rows.append(RowPlan({"dataset": d, "extractor": e}, srcs))
    return TablePlan("dp_continual", rows, needs)


def build_dp_continual(p: Paper, plan: TablePlan, res: Results) -> Table:
    rows = []
    for rp in plan.rows:
        s = summarize(res.many(rp.sources["ours"]))
        pre = read_json(rp.sources["pretrained"].files[0]) if rp.sources["pretrained"].ok else None
        stage = (pre or {}).get("private_stage")
        switch = (pre or {}).get("switch") or {}
        rows.append(
            {
                **rp.key,
                "public stage": None if pre is None else (
                    f"{pre['public_dataset']['name']}, epoch {switch.get('epoch', '?')} of {switch.get('epochs_run', '?')} "
                    f"({switch.get('rule', 'fixed')})"
                ),
                "private pre-training": "none (public only)" if pre is not None and not stage else None if stage is None else (
                    f"{stage['dataset']['name']}: {stage['plan']['steps']} DP-SGD steps, q = {stage['plan']['sample_rate']:.3g}, "
                    f"σ = {stage['plan']['sigma']:.3g}"
                ),
                "pre-training ε (its data)": None if not stage else round(stage["guarantee"]["eps"], 4),
                "pre-training δ": None if not stage else stage["guarantee"]["delta"],
                "target ε": p.eps,
                **_summary_cells(s, acc_col=f"ε = {p.eps:g} (%)"),
                **_reference_cells(s, res.many(rp.sources["ref"])),
            }
        )
    cols = ["dataset", "extractor", "public stage", "private pre-training", "pre-training ε (its data)", "pre-training δ",
            "target ε", "total ε (incl. search)", "HPO cost", "seeds", f"ε = {p.eps:g} (%)", "ε = ∞ (%)", "gap (points)",
            "selection"]
    caption = (
        f"Seed 003 (Bu et al.: pre-training DP models with limited public data) in front of seed 000's method: the "
        "extractor is pretrained on public data (the switch to the private stage chosen from public statistics only) "
        "and, where configured, pre-trained further with DP-SGD on *another* private dataset, then linear scaling runs "
        f"on the study's data at target ε = {p.eps:g} (δ = {p.delta:g}, search included). Two guarantees for two "
        "datasets: 'pre-training ε' is w.r.t. the pre-training data (prv-accountant upper bound), 'total ε' w.r.t. the "
        "study's data; a study on the pre-training data itself is refused by the config check."
    )
    return Table(cols, rows, caption, _notes(plan))


PLANS: dict[str, Callable[[Paper], TablePlan]] = {
    "table2": plan_table2,
    "table3": plan_table3,
    "table4": plan_table4,
    "table5": plan_table5,
    "table10": plan_table10,
    "table11": plan_table11,
    "table13": plan_table13,
    "table15": plan_table15,
    "table16": plan_table16,
    "dp_continual": plan_dp_continual,
}
BUILDERS = {
    "table2": build_table2,
    "table3": build_table3,
    "table4": build_table4,
    "table5": build_table5,
    "table10": build_table10,
    "table11": build_table11,
    "table13": build_table13,
    "table15": build_table15,
    "table16": build_table16,
    "dp_continual": build_dp_continual,
}


def plan(config: dict, name: str) -> TablePlan:
    if name not in PLANS:
        raise ValueError(f"unknown paper table {name!r}; known: {', '.join(PLANS)}")
    return PLANS[name](Paper(config))


def inputs(config: dict, name: str) -> dict[str, list[str]]:
    """Input files of a table rule: result files, and (Table 11) benchmark files, (Table 5) models and features."""
    tp = plan(config, name)
    groups: dict[str, dict[str, None]] = {"results": {}, "other": {}}
    for row in tp.rows:
        for src in row.sources.values():
            for f in src.files:
                groups["results" if f.endswith("result.json") else "other"].setdefault(f, None)
    return {k: list(v) for k, v in groups.items()}


def build(config: dict, name: str) -> Table:
    p = Paper(config)
    tp = PLANS[name](p)
    table = BUILDERS[name](p, tp, Results())
    table.caption = f"{TABLE_TITLES[name]}. {table.caption}"
    for bad in check_totals(table.rows):  # cannot happen with the ledger's planning; say so if it does
        table.notes.insert(0, f"WARNING: a reported total exceeds its target: {bad}")
    return apply_design_notes(table, config)


def write(config: dict, name: str, md: str, csv_path: str, tex: str, html_path: str | None = None) -> Table:
    table = build(config, name)
    table.write(md=md, csv_path=csv_path, tex=tex, html_path=html_path)
    return table


def provenance_table(paths: Iterable[str]) -> Table:
    """One row per (study, method, variant): where its numbers come from and how they were accounted."""
    groups: dict[tuple, list[dict]] = {}
    for path in paths:
        text = str(path).replace("\\", "/")
        if RESULT_RE.search(text):
            where = parse_result_path(text)
            key = (where["dataset"], where["extractor"], where["method"], where["variant"])
        else:
            m = NONPRIVATE_RE.search(text)
            key = (m["dataset"], m["extractor"], NONPRIVATE, "–") if m else ("?", "?", "?", "?")
        groups.setdefault(key, []).append(read_json(path))
    rows = []
    for (d, e, m, v), results in sorted(groups.items()):
        prov = [r.get("provenance") or {} for r in results]
        cache = [pv.get("feature_cache") or {} for pv in prov]
        versions = prov[0].get("package_versions") or {}

        def distinct(values: Iterable[Any], n: int = 12) -> str:
            vals = sorted({str(x)[:n] for x in values if x is not None and x != ""}, key=label_key)
            return ", ".join(vals) or "–"

        rows.append(
            {
                "dataset": d,
                "extractor": e,
                "method": m,
                "variant": v,
                "results": len(results),
                "seeds": distinct((pv.get("seed") for pv in prov), 6),
                "target ε": distinct((as_float(r["target"]["eps"]) for r in results), 8),
                "max total ε − target": max(as_float(r["total_eps"]) - as_float(r["target"]["eps"]) for r in results) if all(r.get("private", True) for r in results) else None,
                "δ": results[0].get("total_delta"),
                "accountant": distinct(
                    (((r.get("privacy") or {}).get("total", {}).get("accountant") if r.get("private", True) else "none (non-private)") for r in results),
                    40,
                ),
                "selection": distinct((selection_label(r.get("selection") or {}) for r in results), 60),
                "config sha256": distinct((pv.get("config_hash") for pv in prov)),
                # keyed MACs (dphpo.privacy.randomness.NoiseScope.mac): a plain hash of private data is a
                # membership oracle; the key's holder can still check which data made a result
                "feature cache MAC": distinct((c.get("content_sha256_mac") for c in cache)),
                "dataset MAC": distinct((c.get("dataset_checksum_mac") for c in cache)),
                "extractor's private pre-training": distinct(
                    (_upstream_label(c.get("upstream_privacy")) for c in cache), 60
                ),
                "packages": ", ".join(f"{k} {versions.get(k)}" for k in ("dphpo", "torch", "timm", "snakemake") if versions.get(k)),
            }
        )
    cols = ["dataset", "extractor", "method", "variant", "results", "seeds", "target ε", "max total ε − target", "δ", "accountant", "selection", "config sha256", "feature cache sha256", "dataset sha256", "extractor's private pre-training", "packages"]
    caption = (
        "Provenance of every result file the paper tables and figures read, grouped by study, method and variant: the "
        "config hash (the variant's merged config), the feature cache's content checksum and the dataset checksum "
        "(compare with the .h5 attributes), the accountant of the reported totals, the selection rule and the package "
        "versions. 'max total ε − target' ≤ 0 means no private result exceeds its target (sha256 prefixes shown). "
        "An extractor pre-trained with DP-SGD on other private data (seed 003) shows that data and its own (ε, δ)."
    )
    return Table(cols, rows, caption, ["each result.json holds the full provenance block and the privacy ledger of every release"])


# --------------------------------------------------------------------------------------------
# Helpers


def _summary_cells(s: Summary | None, acc_col: str = "test accuracy (%)") -> dict[str, Any]:
    return {
        "total ε (incl. search)": s.total_eps if s else None,
        "HPO cost": s.hpo if s else None,
        "seeds": s.n if s else None,
        acc_col: s.acc if s else None,
        "selection": s.selection if s else None,
    }


def _upstream_label(upstream: dict | None) -> str:
    if not upstream:
        return "none"
    return f"{upstream['dataset']}: ε = {upstream['eps']:.4g}, δ = {upstream['delta']:g}"


def _reference_cells(s: Summary | None, refs: Sequence[dict]) -> dict[str, Any]:
    """The non-private reference (ε = ∞) and its gap to the private mean, in points."""
    ref_acc = refs[0]["test_accuracy"] if refs else None
    gap = None if (s is None or ref_acc is None) else round(100.0 * (ref_acc - s.mean), 2)
    return {"ε = ∞ (%)": points(ref_acc), "gap (points)": gap}


def _notes(tp: TablePlan) -> list[str]:
    notes = [f"needs: {n}" for n in tp.all_needs()]
    notes.append("accuracies: mean ± std over seeds; 'total ε' is the max over seeds; every total is at most its target ε")
    return notes


def _oracle_note(p: Paper, oracles: Iterable[Summary | None]) -> list[str]:
    """The oracle is the best point of *its* grid: say how large that grid was."""
    sizes = sorted({len(s.results[0].get("trials", [])) for s in oracles if s})
    if not sizes:
        return []
    return [
        f"oracle: best on TEST of {'/'.join(map(str, sizes))} grid points (variant '{p.grid_variant}', key baselines.grid); "
        "ours searches the whole search space, so it can beat an oracle whose grid is coarser (RERR > 100 %)"
    ]


def _round(x: float | None) -> float | None:
    return None if x is None else float(f"{x:.6g}")


def _accuracy(weights: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    if len(y) == 0:
        return float("nan")
    return float(((x @ weights.T).argmax(axis=1) == y).mean())


def _shift_test_set(p: Paper, dataset: str, extractor: str, label_map: dict | None, features: str, train_dataset: str):
    """Test features of `dataset` prepared as the training study's were, labels mapped to the train classes."""
    from dphpo.studies import trainers

    prepared = trainers.load_features(p.config, features, dataset, extractor)
    x = prepared.x_test.cpu().numpy()
    y = prepared.y_test.cpu().numpy()
    if not label_map:
        return x, y, "none"
    mapping = {int(k): (None if v is None else int(v)) for k, v in label_map.items()}
    mapped = np.array([mapping.get(int(c), int(c)) if mapping.get(int(c), int(c)) is not None else -1 for c in y], dtype=np.int64)
    keep = mapped >= 0
    dropped = sorted(k for k, v in mapping.items() if v is None)
    return x[keep], mapped[keep], ", ".join(str(c) for c in dropped) or "none"


def check_totals(rows: Iterable[dict]) -> list[str]:
    """Rows whose reported total ε exceeds their target (should be none)."""
    bad = []
    for r in rows:
        target = r.get("target ε")
        for col, v in r.items():
            if col.startswith("total ε") and isinstance(v, float) and isinstance(target, float) and v > target * (1 + 1e-9):
                bad.append(f"{col}={v} > target {target}")
    return bad
