"""The language tables of Panda et al. (Tables 6, 7, 8, 9, 17–20) and Fig. 4, from language study results.

What each table reads is config `language.tables` (study names from `language.studies`); results are
one `result.json` per study, method, seed and target ε (dphpo.layout.LANGUAGE_RESULT; the ε is read
from the record, never from its path) and `LANGUAGE_NONPRIVATE_RESULT`, read as the vision results are
(dphpo.report.tables.load_results). Every row states the total ε spent (max over
seeds, the search included: every stage trial, selection release and the final run), whether the
HPO cost is included, and the Panda et al. number where the study's `paper_ref` names the paper's own
row (a reference, never an input). Tables are written with dphpo.report.tables.Table (md, csv,
tex, html: `Table.write`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dphpo.io import atomic_path
from dphpo.report import specs
from dphpo.report.plotting import delta_text
from dphpo.report.tables import (
    Table,
    apply_design_notes,
    as_float,
    failure_notes,
    hpo_cost,
    load_results,
    mean_std,
    overrun_notes,
    plus_minus,
    stated_delta,
)
from dphpo.studies import config as study_config

FIGURE4 = "figure4_language_pareto"  # its name in dphpo.layout.FIGURE
LS, RANDOM, GRID, NONPRIVATE = "linear_scaling", "random_search", "grid_oracle", "nonprivate"
LS_SAFE = "linear_scaling_safeguarded"  # optional: rows only for studies that list it
#: The language tables (the `language_table` rule's wildcard values), their titles and the methods'
#: printed names: from dphpo.report.specs (a new table is a spec there and its `build_*` function here).
TABLES: tuple[str, ...] = specs.names("language")
TITLES = {name: specs.title(name) for name in TABLES}
METHOD_LABELS = specs.method_labels("language")

# Panda et al.'s numbers, keyed by a study's `paper_ref`
SEED000_TABLE6 = {  # eps -> (accuracy %, r)
    "SST-2": {0.1: (90.60, 0.975), 0.2: (90.83, 1.95), 0.7: (91.06, 5.07)},
    "QNLI": {0.1: (82.54, 3.9), 0.2: (84.00, 4.68), 1.3: (86.25, 26.52)},
    "QQP": {0.1: (81.07, 11.7), 0.2: (82.21, 17.55), 1.2: (84.69, 64.35)},
    "MNLI": {0.1: (77.52, 11.7), 0.2: (79.40, 17.55), 1.2: (81.86, 64.35)},  # matched (mismatched: 78.24, 79.98, 82.76)
}
SEED000_TABLE7 = {"PersonaChat": {0.7: 21.25, math.inf: 17.69}}
LI_ET_AL_2022 = {3.0: 24.59, math.inf: 18.52}  # Li et al. (2022b), quoted by Panda et al. Table 7
SEED000_TABLE8 = {  # eps -> (perplexity, TSS, TSS estimated by the rule)
    "WikiText-2": {0.2: (28.81, 0.008, False), 0.5: (28.37, 0.02, False), 1.4: (28.15, 0.04, True), 2.2: (27.98, 0.08, True),
                   3.0: (27.69, 0.12, True)},
    "Enron": {0.1: (14.35, 0.10, False), 0.2: (12.50, 0.58, False), 0.7: (11.56, 2.02, True), 1.1: (10.91, 4.41, True),
              1.9: (10.45, 9.19, True), 2.7: (10.14, 13.98, True)},
}
SEED000_TABLE9 = {RANDOM: (82.53, 1.01), LS: (83.02, 0.86), GRID: (83.87, 0.50)}
SEED000_HYPER = {
    "table17": {"clip_norm": "0.1", "learning rate": "[2, 5, 10, 20, 50, 100] x 1e-5", "batch size": "[64 ... 2048]",
                "epochs": "[3, 10, 20]", "delta": "1/(2|D|)"},
    "table18": {"clip_norm": "1", "learning rate": "eps 0.2: [2..10] x 1e-4; eps 0.5: [0.8, 1, 2] x 1e-3",
                "batch size": "2048 (full batch)", "epochs": "20", "delta": "1e-6"},
    "table19": {"clip_norm": "1", "learning rate": "per eps, 1e-4 (eps 0.1) ... 0.2 (eps 3)", "batch size": "1024",
                "epochs": "5", "delta": "1/(2|D|)"},
}
SEED000_TABLE20 = {"Full": {3.0: 17.91, 8.0: 17.27}, "Last Block": {3.0: 19.80, 8.0: 19.20}, "First-Last-Block": {3.0: 18.93, 8.0: 18.26}}


def section(config: dict) -> dict:
    return dict(((config.get("language") or {}).get("tables")) or {})


def configured_tables(config: dict) -> list[str]:
    return [t for t in TABLES if section(config).get(t)]


def _studies_of(config: dict, name: str) -> list[str]:
    value = section(config).get(name)
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [v["study"] if isinstance(v, dict) else v for v in value]


def _spec(config: dict, study: str) -> dict | None:
    return study_config.language_studies(config).get(study)


def _methods(spec: dict) -> list[str]:
    return list(spec.get("methods", [])) + ([NONPRIVATE] if spec.get("nonprivate", True) else [])


def _row_methods(config: dict, study: str, order: tuple[str, ...]) -> list[str]:
    """`order`, with the safeguarded rule after the paper's where the study runs it."""
    spec = _spec(config, study) or {}
    out = []
    for method in order:
        out.append(method)
        if method == LS and LS_SAFE in spec.get("methods", []):
            out.append(LS_SAFE)
    return out


def inputs(config: dict, name: str) -> list[str]:
    """Every result file table / figure `name` reads (only studies and methods the config defines)."""
    files: dict[str, None] = {}
    studies = _studies_of(config, name) if name != "figure4" else [section(config).get("figure4")]
    if name in ("table17", "table18", "table19"):
        return []  # hyperparameters come from the config itself
    for study in studies:
        spec = _spec(config, study) if study else None
        if spec is None:
            continue
        for method in _methods(spec):
            for f in study_config.language_result_files(config, study, method):
                files.setdefault(f, None)
    return list(files)


# --------------------------------------------------------------------------------------------
# reading


class Reader:
    def __init__(self, config: dict):
        self.config = config
        self.notes: list[str] = []
        self._read: dict[tuple[str, str], list[dict]] = {}  # (study, method): its records, read and checked once

    def records(self, study: str, method: str) -> list[dict]:
        """Records of `method` on `study`, all seeds and targets (nonprivate: one)."""
        spec = _spec(self.config, study)
        if spec is None:
            self.notes.append(f"language.studies: define a study named {study!r}")
            return []
        if method not in _methods(spec):
            self.notes.append(f"language.studies.{study}.methods: add {method} for its rows")
            return []
        if (study, method) not in self._read:
            paths = study_config.language_result_files(self.config, study, method)
            records = load_results(paths)
            study_config.check_language_inputs(paths, records, self.config, study, method)  # Snakemake may not have rerun them
            self._read[study, method] = records
        return self._read[study, method]

    def read(self) -> list[dict]:
        """Every record read so far."""
        return [r for records in self._read.values() for r in records]

    def at(self, study: str, method: str, eps: float) -> list[dict]:
        return [r for r in self.records(study, method) if math.isclose(as_float(r["target"]["eps"]), eps, rel_tol=1e-9)]

    def targets(self, study: str) -> list[float]:
        spec = _spec(self.config, study) or {"name": study}
        return study_config.language_targets(self.config, spec)


def summary(records: list[dict], scale: float) -> dict[str, Any]:
    """Mean ± std of the test metric (×scale), max total ε, mean released r, HPO cost label."""
    if not records:
        return {}
    mean, std = mean_std([as_float(r["test_metric"]) * scale for r in records])
    return {
        "metric": plus_minus(mean, std, len(records)),
        "mean": mean,
        "total ε (incl. search)": max(as_float(r["total_eps"]) for r in records),
        "δ": max(as_float(r["total_delta"]) for r in records),
        "r = η·T": float(np.mean([r["released"]["r"] for r in records])),
        "HPO cost": hpo_cost(records),
        "seeds": len(records),
    }


def _paper_ref(config: dict, study: str) -> str | None:
    return (_spec(config, study) or {}).get("paper_ref")


# --------------------------------------------------------------------------------------------
# the tables


def build_table6(config: dict, rd: Reader) -> Table:
    cols = ["study", "target ε", "method", "test accuracy (%)", "r = η·T", "total ε (incl. search)", "δ", "HPO cost", "Panda et al. acc (%)", "Panda et al. r"]
    rows = []
    for study in _studies_of(config, "table6"):
        ref = SEED000_TABLE6.get(_paper_ref(config, study) or "", {})
        for eps in rd.targets(study):
            for method in _row_methods(config, study, (LS, RANDOM, GRID)):
                s = summary(rd.at(study, method, eps), 100.0)
                if not s:
                    continue
                paper = ref.get(eps) if method == LS else None
                rows.append({"study": study, "target ε": eps, "method": METHOD_LABELS[method], "test accuracy (%)": s["metric"],
                             "r = η·T": s["r = η·T"], "total ε (incl. search)": s["total ε (incl. search)"], "δ": s["δ"], "HPO cost": s["HPO cost"],
                             "Panda et al. acc (%)": paper[0] if paper else None, "Panda et al. r": paper[1] if paper else None})
        s = summary(rd.records(study, NONPRIVATE), 100.0)
        if s:
            rows.append({"study": study, "target ε": math.inf, "method": METHOD_LABELS[NONPRIVATE], "test accuracy (%)": s["metric"],
                         "r = η·T": s["r = η·T"], "total ε (incl. search)": math.inf, "HPO cost": s["HPO cost"]})
    return Table(cols, rows, caption="Panda et al.: RoBERTa-base, full fine-tuning on GLUE.")


def build_lm_rows(config: dict, rd: Reader, studies: list[str], paper: dict) -> list[dict]:
    rows = []
    for study in studies:
        ref = paper.get(_paper_ref(config, study) or "", {})
        for eps in rd.targets(study):
            for method in _row_methods(config, study, (LS, GRID, RANDOM)):
                s = summary(rd.at(study, method, eps), 1.0)
                if not s:
                    continue
                p = ref.get(eps) if method == LS else None
                p = p if isinstance(p, tuple) or p is None else (p,)
                rows.append({"study": study, "target ε": eps, "method": METHOD_LABELS[method], "perplexity": s["metric"],
                             "TSS (r = η·T)": s["r = η·T"], "total ε (incl. search)": s["total ε (incl. search)"], "δ": s["δ"], "HPO cost": s["HPO cost"],
                             "Panda et al. ppl": p[0] if p else None, "Panda et al. TSS": p[1] if p and len(p) > 1 else None})
        s = summary(rd.records(study, NONPRIVATE), 1.0)
        if s:
            p = ref.get(math.inf)
            rows.append({"study": study, "target ε": math.inf, "method": METHOD_LABELS[NONPRIVATE], "perplexity": s["metric"],
                         "TSS (r = η·T)": s["r = η·T"], "total ε (incl. search)": math.inf, "HPO cost": s["HPO cost"],
                         "Panda et al. ppl": p if isinstance(p, float) else None})
    return rows


LM_COLS = ["study", "target ε", "method", "perplexity", "TSS (r = η·T)", "total ε (incl. search)", "δ", "HPO cost", "Panda et al. ppl", "Panda et al. TSS"]


def build_table7(config: dict, rd: Reader) -> Table:
    rows = build_lm_rows(config, rd, _studies_of(config, "table7"), SEED000_TABLE7)
    rows += [{"study": "Li et al. (2022b), quoted by Panda et al.", "target ε": e, "method": "prior work", "Panda et al. ppl": p}
             for e, p in LI_ET_AL_2022.items()]
    return Table(LM_COLS, rows, caption="Panda et al.: GPT-2, all layers, PersonaChat, δ = 1/(2|D|).")


def build_table8(config: dict, rd: Reader) -> Table:
    rows = build_lm_rows(config, rd, _studies_of(config, "table8"), SEED000_TABLE8)
    return Table(LM_COLS, rows, caption=(
        "Panda et al.: GPT-2 on WikiText-2 (δ = 1e-6) and Enron (δ = 1/(2|D|)); the rule's TSS is extrapolated (Panda et al. marks it *) "
        "for every final run."))


def build_table9(config: dict, rd: Reader) -> Table:
    eps = float(section(config).get("eps", 1.0))
    cols = ["study", "method", "target ε", "mean accuracy (std) (%)", "total ε (incl. search)", "δ", "HPO cost", "Panda et al. (std)"]
    rows = []
    for study in _studies_of(config, "table9"):
        targets = rd.targets(study) if _spec(config, study) else []
        if targets and not any(math.isclose(eps, t, rel_tol=1e-9) for t in targets):
            rd.notes.append(f"language.tables.eps = {eps:g} is not a target ε of {study} (its targets: "
                            f"{', '.join(f'{t:g}' for t in targets)}): set it to one of them")
        for method in _row_methods(config, study, (RANDOM, LS, GRID)):
            s = summary(rd.at(study, method, eps), 100.0)
            if s:
                p = SEED000_TABLE9.get(method)
                rows.append({"study": study, "method": METHOD_LABELS[method], "target ε": eps, "mean accuracy (std) (%)": s["metric"],
                             "total ε (incl. search)": s["total ε (incl. search)"], "δ": s["δ"], "HPO cost": s["HPO cost"],
                             "Panda et al. (std)": f"{p[0]:.2f} ({p[1]:.2f})" if p else None})
    return Table(cols, rows, caption="DP-ZO: per step one public random direction, per-example clipped finite differences, Gaussian noise.")


def build_hyper(config: dict, rd: Reader, name: str) -> Table:
    """The hyperparameters of a study (its config) beside Panda et al.'s."""
    cols = ["study", "parameter", "this study", "Panda et al."]
    rows = []
    for study in _studies_of(config, name):
        spec = _spec(config, study)
        if spec is None:
            rd.notes.append(f"language.studies: define a study named {study!r}")
            continue
        cfg = study_config.language_config(config, spec)
        t, space = spec.get("training") or {}, cfg["search_space"]
        steps = space["steps"] if isinstance(space["steps"], list) else f"{space['steps']['min']}..{space['steps']['max']}"
        ours = {
            "clip_norm": t.get("clip_norm", 1.0),
            "learning rate": f"log grid [{space['eta']['min']:g}, {space['eta']['max']:g}], {space['eta'].get('num', 10)} points ({t.get('optimizer', 'sgd')})",
            "batch size": f"{t.get('batch_size', 64)} (expected Poisson batch)",
            "epochs": f"steps T in {steps}",
            "delta": cfg["privacy"].get("delta"),
            "trained layers": trained_layers(spec["model"]),
            "data": f"{spec['data']['name']} (max_train {spec['data'].get('max_train')}"
                    + (f", partition {spec['data']['partition']})" if spec["data"].get("partition") else ")"),
        }
        for key, value in ours.items():
            rows.append({"study": study, "parameter": key, "this study": value, "Panda et al.": SEED000_HYPER[name].get(key)})
    return Table(cols, rows, caption="Hyperparameters; the rule searches r = η·T over these grids with the other values fixed.")


def trained_layers(model: dict) -> str:
    layers = str(model.get("train_layers", "all"))
    lora = model.get("lora")
    if lora is None:
        return layers
    return f"{layers}, LoRA rank {lora.get('rank', 8)} on {', '.join(lora.get('targets') or ['default targets'])}"


def build_table20(config: dict, rd: Reader) -> Table:
    cols = ["layers trained", "study", "target ε", "perplexity", "total ε (incl. search)", "δ", "Panda et al. ppl"]
    rows = []
    for item in section(config).get("table20") or []:
        label, study = (item["label"], item["study"]) if isinstance(item, dict) else (item, item)
        paper = SEED000_TABLE20.get(label, {}) if _paper_ref(config, study) == "PersonaChat" else {}
        for eps in rd.targets(study):
            s = summary(rd.at(study, LS, eps), 1.0)
            if s:
                rows.append({"layers trained": label, "study": study, "target ε": eps, "perplexity": s["metric"],
                             "total ε (incl. search)": s["total ε (incl. search)"], "δ": s["δ"], "Panda et al. ppl": paper.get(eps)})
        s = summary(rd.records(study, NONPRIVATE), 1.0)
        if s:
            rows.append({"layers trained": label, "study": study, "target ε": math.inf, "perplexity": s["metric"], "total ε (incl. search)": math.inf})
    return Table(cols, rows, caption="Panda et al.: GPT-2 on PersonaChat; embeddings and the last LayerNorm trainable in every row.")


def build_table17(config: dict, rd: Reader) -> Table:
    return build_hyper(config, rd, "table17")


def build_table18(config: dict, rd: Reader) -> Table:
    return build_hyper(config, rd, "table18")


def build_table19(config: dict, rd: Reader) -> Table:
    return build_hyper(config, rd, "table19")


#: Each language table's builder, named by its spec's `builder` (dphpo.report.specs).
BUILDERS = {name: specs.resolve(specs.get(name).builder, globals()) for name in TABLES}


def build(config: dict, name: str) -> Table:
    spec = specs.get(name, "language")
    rd = Reader(config)
    table = specs.resolve(spec.builder, globals())(config, rd)
    table.caption = f"{spec.title}. {table.caption}"
    table.notes = sorted(set(rd.notes)) + failure_notes(rd.read()) + [
        "Every private row's total ε includes every trial of its search, every selection release and the final run "
        "(PRV accounting of Poisson-subsampled Gaussian runs, prv-accountant upper bound); oracle rows say they do not."
    ]
    if not table.rows and not rd.notes:
        table.notes.insert(0, f"no rows: set language.tables.{name} to studies defined under language.studies")
    table.notes = overrun_notes(table.rows) + table.notes
    return apply_design_notes(table, config)


def write(config: dict, name: str, md: str, csv_path: str, tex: str, html_path: str | None = None) -> Table:
    table = build(config, name)
    table.write(md=md, csv_path=csv_path, tex=tex, html_path=html_path)
    return table


def figure4(config: dict, path: str) -> None:
    """Panda et al. Fig. 4: (a) test perplexity vs ε, (b) total step size vs ε — the rule (search included)
    against the grid oracle (each grid point at the given ε, best on test, search not accounted)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    study = section(config).get("figure4")
    rd = Reader(config)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    drawn = []
    for method, style in ((LS, "o-"), (GRID, "s--")):
        xs, ppl, r = [], [], []
        for eps in rd.targets(study):
            recs = rd.at(study, method, eps)
            drawn += recs
            if recs:
                xs.append(eps)
                ppl.append(np.mean([as_float(x["test_metric"]) for x in recs]))
                r.append(np.mean([x["released"]["r"] for x in recs]))
        if xs:
            axes[0].plot(xs, ppl, style, label=METHOD_LABELS[method])
            axes[1].plot(xs, r, style, label=METHOD_LABELS[method])
    ref = rd.records(study, NONPRIVATE)
    if ref:
        axes[0].axhline(as_float(ref[0]["test_metric"]), color="grey", ls=":", label="non-private reference (ε = ∞, selected on test)")
    delta = delta_text(stated_delta(x) for x in drawn) if drawn else "δ: none drawn"
    axes[0].set(xlabel=f"ε at {delta} (rule: total, search included)", ylabel="test perplexity", title=f"(a) ε vs perplexity ({study})")
    axes[1].set(xlabel=f"ε at {delta}", ylabel="total step size r = η·T", title="(b) ε vs total step size")
    for ax in axes:
        ax.legend(fontsize=7)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)
