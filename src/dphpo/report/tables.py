"""Tables from result.json files: one writer for Markdown, CSV and LaTeX.

A table is a list of rows (dicts) plus its column order and a caption; every table states the
total (ε, δ) spent, search included, and the selection rule.

Two labels every table carries where they apply:
- ε per run: a table that shows a mean ± std over seeds next to a "total ε" column says (a note,
  added when rendering unless the caption or notes already say "per run") that this ε is what ONE
  seed's run spends, not a guarantee for the seeds together (`PER_RUN_EPS_NOTE`).
- design on private data: `design_notes` in the config names settings that were chosen by looking
  at private data, so no ε covers them; `apply_design_notes` adds a column naming them on every row
  that uses one, a caption sentence and one note per setting (config/README.md).
- public/private overlap: a study on its extractor's public pretraining data, accepted by
  `studies[i].pretraining_overlap` (dphpo.features.overlap), is named on each of its rows the same way.
"""

from __future__ import annotations

import csv
import html
import io
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dphpo.data.overlap import OVERLAP_KEY, OVERLAP_NOTE, pretraining_overlaps
from dphpo.hpo.selection import accounted
from dphpo.io import read_json, write_text
from dphpo.studies.config import DEFAULT_VARIANT, check_identity, config_value


@dataclass
class Table:
    columns: list[str]
    rows: list[dict[str, Any]]
    caption: str = ""
    notes: list[str] = field(default_factory=list)

    def to_markdown(self) -> str:
        lines = []
        if self.caption:
            lines += [self.caption, ""]
        lines.append("| " + " | ".join(self.columns) + " |")
        lines.append("|" + "|".join("---" for _ in self.columns) + "|")
        for row in self.rows:
            lines.append("| " + " | ".join(format_cell(row.get(c)) for c in self.columns) + " |")
        notes = self.rendered_notes()
        if notes:
            lines += [""] + [f"- {n}" for n in notes]
        return "\n".join(lines) + "\n"

    def shows_mean_std_beside_eps(self) -> bool:
        """A "total ε" column next to a mean ± std over seeds (a '±' cell or a std column)."""
        if not any("total ε" in c for c in self.columns):
            return False
        if any("±" in c or "std" in c for c in self.columns):
            return True
        return any("±" in str(row.get(c, "")) for row in self.rows for c in self.columns)

    def rendered_notes(self) -> list[str]:
        """The notes as written: `notes`, plus `PER_RUN_EPS_NOTE` where the table shows a mean ± std
        over seeds next to a total ε and neither its caption nor its notes already say "per run"."""
        notes = list(self.notes)
        said = "per run" in self.caption or any("per run" in n for n in notes)
        if not said and self.shows_mean_std_beside_eps():
            notes.append(PER_RUN_EPS_NOTE)
        return notes

    def to_csv(self) -> str:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=self.columns, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        for row in self.rows:
            writer.writerow({c: csv_cell(row.get(c)) for c in self.columns})
        return buf.getvalue()

    def to_latex(self) -> str:
        def esc(text: str) -> str:
            for a, b in (("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("_", r"\_"), ("#", r"\#")):
                text = text.replace(a, b)
            return text.replace("±", r"$\pm$").replace("ε", r"$\varepsilon$").replace("δ", r"$\delta$").replace("∞", r"$\infty$")

        lines = [r"\begin{table}[t]", r"\centering"]
        if self.caption:
            lines.append(r"\caption{" + esc(self.caption) + "}")
        lines.append(r"\begin{tabular}{" + "l" * len(self.columns) + "}")
        lines.append(r"\toprule")
        lines.append(" & ".join(esc(c) for c in self.columns) + r" \\")
        lines.append(r"\midrule")
        for row in self.rows:
            lines.append(" & ".join(esc(format_cell(row.get(c))) for c in self.columns) + r" \\")
        lines += [r"\bottomrule", r"\end{tabular}"]
        notes = self.rendered_notes()
        if notes:
            lines.append(r"\par\footnotesize")
            lines += [esc(n) + r"\\" for n in notes]
        lines.append(r"\end{table}")
        return "\n".join(lines) + "\n"

    def to_html(self) -> str:
        """A self-contained HTML page (the Snakemake report renders HTML inline, Markdown only as a download)."""
        return html_page([self])

    def html_fragment(self) -> str:
        esc = html.escape
        head = "".join(f"<th>{esc(c)}</th>" for c in self.columns)
        body = "".join("<tr>" + "".join(f"<td>{esc(format_cell(r.get(c)))}</td>" for c in self.columns) + "</tr>" for r in self.rows)
        notes = "".join(f"<li>{esc(n)}</li>" for n in self.rendered_notes())
        return f"<p>{esc(self.caption)}</p><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table><ul>{notes}</ul>"

    def write(
        self,
        md: str | Path | None = None,
        csv_path: str | Path | None = None,
        tex: str | Path | None = None,
        html_path: str | Path | None = None,
    ) -> None:
        if md:
            write_text(md, self.to_markdown())
        if csv_path:
            write_text(csv_path, self.to_csv())
        if tex:
            write_text(tex, self.to_latex())
        if html_path:
            write_text(html_path, self.to_html())


HTML_STYLE = (
    "body{font-family:sans-serif;font-size:13px}table{border-collapse:collapse}"
    "td,th{border:1px solid #ccc;padding:3px 6px;text-align:left}th{background:#f3f3f3}"
)


def html_page(tables: Sequence[Table]) -> str:
    """One self-contained HTML page showing the tables one after the other."""
    body = "".join(t.html_fragment() for t in tables)
    return f"<!DOCTYPE html><html><head><meta charset='utf-8'><style>{HTML_STYLE}</style></head><body>{body}</body></html>\n"


def format_cell(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        if math.isinf(value):
            return "∞"
        if math.isnan(value):
            return "–"
        return f"{value:.4g}"
    return str(value)


def label_key(label: Any) -> tuple:
    """Sort key for table labels: numbers by value (0.5 < 1 < 8 < 16, '10' after '9'), then text.

    Labels reach the tables as floats, ints or strings ("1", "0.25", "inf"); sorting their text
    would put 16 before 8 and seed 10 before seed 2.
    """
    try:
        return (0, float(label), "")
    except (TypeError, ValueError):
        return (1, 0.0, str(label))


def csv_cell(value: Any) -> Any:
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    return "" if value is None else value


def read_record(path: str | Path) -> dict:
    """A result record, refused (naming the file and the field) unless it is what its path names:
    every table reads its records through here."""
    record = read_json(path)
    check_identity(path, record)
    return record


def load_results(paths: Iterable[str | Path]) -> list[dict]:
    return [read_record(p) for p in paths]


def variant_of(record: Mapping) -> str:
    """The variant a result was computed under (`variants.<name>`; "default" for the main study)."""
    return (record.get("provenance") or {}).get("variant", DEFAULT_VARIANT)


def method_id(record: Mapping) -> str:
    """A result's method, its variant appended when not the main study's (`linear_scaling:safeguarded`)."""
    variant = variant_of(record)
    return record["method"] if variant == DEFAULT_VARIANT else f"{record['method']}:{variant}"


def selection_label(sel: dict) -> str:
    rule = sel.get("rule", "?")
    return f"{rule} ({'accounted' if sel.get('private', True) else 'non-private'})"


def as_float(value: Any) -> float:
    """Numbers from result.json: JSON has no infinity or NaN, so they are stored as the string 'inf' and as
    null (a diverged run's metric: NaN)."""
    return math.nan if value is None else float(value)


def stated_delta(record: dict) -> float:
    """The δ a record's runs are stated at: its total δ, or, for a search that is not accounted (the
    oracle: total ε = ∞ and δ 0), the δ each of its runs had."""
    return as_float(record["total_delta"] if accounted(record) else record["target"]["delta"])


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    arr = np.asarray(values, dtype=float)
    return float(arr.mean()), float(arr.std(ddof=1)) if len(arr) > 1 else 0.0


#: RERR's denominator (oracle − random search) must exceed this many standard errors of the difference
#: of the two means over seeds, and half a point of accuracy: below either, the ratio divides by noise
#: (a tie printed as −3,100 %), so the tables show "–".
RERR_MIN_SE, RERR_MIN_GAP = 2.0, 0.005


def rerr(method_mean: float, random: tuple[float, float, int] | None, oracle: tuple[float, float, int] | None) -> float | None:
    """(method − random)/(oracle − random) on means over seeds (Panda et al. Table 3); `random` and `oracle`
    are (mean, std, seeds). None ("–") when either is missing or the denominator is within noise."""
    if random is None or oracle is None or not all(map(math.isfinite, (method_mean, random[0], oracle[0]))):
        return None  # a mean over a diverged run (NaN, ∞) has no ratio
    gap = oracle[0] - random[0]
    se = math.sqrt(oracle[1] ** 2 / oracle[2] + random[1] ** 2 / random[2])
    if abs(gap) < max(RERR_MIN_SE * se, RERR_MIN_GAP):
        return None
    return (method_mean - random[0]) / gap


def hpo_cost(records: Sequence[dict], nonprivate: str = "none (non-private)") -> str:
    """A row's HPO-cost label over every seed's record: `nonprivate` where any run is non-private, "NOT included
    (oracle)" where any search is not accounted (the grid oracle, a non-private selection rule), else "included"."""
    if not all(r.get("private", True) for r in records):
        return nonprivate
    return "included" if all(accounted(r) for r in records) else "NOT included (oracle)"


def plus_minus(mean: float, std: float, n: int, scale: float = 1.0) -> str:
    """"mean ± std" over `n` seeds (×scale); one seed has no spread to show ("± 0.00" would claim one): its value
    alone. A mean over a diverged run (∞ perplexity, no score) shows as ∞ or –: the table's failure notes name it."""
    if not math.isfinite(mean):
        return "–" if math.isnan(mean) else ("∞" if mean > 0 else "−∞")
    return f"{scale * mean:.2f}" if n < 2 else f"{scale * mean:.2f} ± {scale * std:.2f}"


def pct(mean: float, std: float, n: int) -> str:
    """`plus_minus` of accuracies, in percent."""
    return plus_minus(mean, std, n, 100.0)


# --- ε per run ------------------------------------------------------------------------------------

#: Said by every table that shows a mean ± std over seeds next to a total ε (added by `Table`).
PER_RUN_EPS_NOTE = (
    "ε per run: every seed is a separate run on the same data, and each run spends this total ε (its "
    "search included; the same for every seed, the largest shown). The mean ± std is over those runs: "
    "releasing the models of several seeds together would cost the composition of their ε, not this ε."
)


# --- where each method's settings come from (config key `settings_sources`: hpo.registry.settings_sources)


def settings_source(method: str, sources: Mapping[str, str]) -> str | None:
    """The source of a method id's settings: its own entry, else its base method's (a variant's rows)."""
    return sources.get(method) or sources.get(method.partition(":")[0])


# --- settings chosen on private data (config key `design_notes`) ----------------------------------

PRIVATE_DESIGN = "chosen on private data (not accounted)"
#: the column that names, on each row, the settings of `design_notes` that row depends on
PRIVATE_DESIGN_COLUMN = "settings chosen on private data"

#: `baselines.<key>` sections used by more than one method (the rest are named after their method)
_SHARED_BASELINE_KEYS = {
    "grid": {"grid_oracle", "grid_accounted"},
    "sampling": {"random_search", "random_search_k", "papernot_steinke", "koskela"},
}
#: `baselines.<method>` sections that only their method reads
_METHOD_BASELINE_KEYS = {"random_search_k", "grid_accounted", "papernot_steinke", "koskela", "oso_dpsgd", "oso_dpsgd_cnn", "mehta"}
_LINEAR_SCALING = "linear_scaling"


def design_notes(config: Mapping | None) -> dict[str, str]:
    """`design_notes` of a config: dotted config key -> where its value came from (private data)."""
    notes = (config or {}).get("design_notes") or {}
    if not isinstance(notes, Mapping):
        raise TypeError(f"design_notes: expected a mapping of config keys to text, got {type(notes).__name__}")
    return {str(k): str(v) for k, v in notes.items()}


def note_applies(key: str, row: Mapping, config: Mapping | None = None) -> bool:
    """Whether a row's numbers depend on the setting `key`. Conservative: True unless the key is
    scoped to something the row is not (another extractor, dataset, pretraining or method; a
    baseline's section on a linear-scaling row; the language half on a linear-head row)."""
    parts = key.split(".")
    head, name = parts[0], parts[1] if len(parts) > 1 else None
    extractor, dataset = row.get("extractor"), row.get("dataset")
    method = row.get("method_id", row.get("_method"))
    if head == "extractors" and name and extractor is not None:
        return extractor == name
    if head == "datasets" and name and dataset is not None:
        return dataset == name
    if head == "pretraining" and name and extractor is not None:
        found, pretrain = config_value(config, f"extractors.{extractor}.pretrain")
        return pretrain == name if found else not (config or {}).get("extractors")
    if head == "language":
        return "study" in row  # the language tables' rows; the linear-head tables have none
    if head == "baselines" and method is not None:
        if method == _LINEAR_SCALING:
            return False
        if name in _SHARED_BASELINE_KEYS:
            return method in _SHARED_BASELINE_KEYS[name]
        if name in _METHOD_BASELINE_KEYS:
            return method == name
        return True  # baselines.methods, or a section not known here: every baseline row
    if head == "linear_scaling" and method is not None:
        return method == _LINEAR_SCALING
    return True


def private_design_keys(row: Mapping, notes: Mapping[str, str], config: Mapping | None = None) -> list[str]:
    return [key for key in notes if note_applies(key, row, config)]


def apply_design_notes(table: Table, config: Mapping | None, column: str = PRIVATE_DESIGN_COLUMN) -> Table:
    """Label every row that uses a setting chosen on private data (config `design_notes`), and every
    row of a study on its extractor's public pretraining data (`studies[i].pretraining_overlap`).

    For each kind, where any row has it: a column (`column`; OVERLAP_COLUMN) naming it on each row
    (empty where none), a caption sentence, and one note per setting or study saying where its value
    came from or why the overlap is accepted. A table neither touches is returned unchanged. Returns
    `table` (modified in place)."""
    notes = design_notes(config)
    used = _label_rows(table, column, lambda row: private_design_keys(row, notes, config))
    if used:
        table.caption = (
            f"{table.caption} Rows marked in '{column}' depend on settings {PRIVATE_DESIGN}: " + ", ".join(used)
            + "; their ε does not cover that choice (notes)."
        ).strip()
    for key, rows in used.items():
        found, value = config_value(config, key)
        shown = f" = {value}" if found and not isinstance(value, (Mapping, list)) else "" if found else " (not a key of this config)"
        table.notes.append(f"{PRIVATE_DESIGN}: {key}{shown}: {notes[key]} [{_row_scope(rows, len(table.rows))}]")
    overlaps = pretraining_overlaps(config if isinstance(config, dict) else dict(config or {}))
    labels = {f"{d} × {e}": reason for (d, e), reason in overlaps.items()}
    used = _label_rows(table, OVERLAP_COLUMN, lambda row: [f"{d} × {e}" for d, e in overlaps if overlap_applies(d, e, row)])
    if used:
        table.caption = (
            f"{table.caption} Rows marked in '{OVERLAP_COLUMN}' are studies on their extractor's public pretraining "
            f"data (studies[].{OVERLAP_KEY}): {OVERLAP_NOTE}."
        )
    for label, rows in used.items():
        table.notes.append(f"public/private overlap: {label}: {labels[label]}; {OVERLAP_NOTE} [{_row_scope(rows, len(table.rows))}]")
    return table


#: the column that names, on each row, an acknowledged public/private overlap of its study
OVERLAP_COLUMN = "public/private overlap"


def overlap_applies(dataset: str, extractor: str, row: Mapping) -> bool:
    """Whether a row is of the study (dataset, extractor); conservative: True where the row does not say
    (a row without a dataset, or without an extractor or model, of that dataset)."""
    row_dataset, row_extractor = row.get("dataset", row.get("_train")), row.get("extractor", row.get("model"))
    if row_dataset is not None and row_dataset != dataset:
        return False
    return row_extractor is None or row_extractor == extractor


def _label_rows(table: Table, column: str, keys_of) -> dict[str, list[Mapping]]:
    """Set `column` on every row to the labels `keys_of(row)` gives (None where none); add the column
    where any row has one, drop it where none does. Returns label -> its rows."""
    used: dict[str, list[Mapping]] = {}
    for row in table.rows:
        keys = keys_of(row)
        row[column] = ", ".join(keys) if keys else None
        for key in keys:
            used.setdefault(key, []).append(row)
    if not used:
        for row in table.rows:
            row.pop(column, None)
    elif column not in table.columns:
        table.columns = [*table.columns, column]
    return used


def _row_scope(rows: Sequence[Mapping], n_rows: int) -> str:
    if len(rows) == n_rows:
        return "every row"
    studies = sorted({f"{r.get('dataset')} × {r.get('extractor')}" for r in rows if r.get("dataset") is not None})
    return "rows of " + ", ".join(studies) if studies else f"{len(rows)} of {n_rows} rows"


# A noisy score release whose noise std exceeds this share of the public training size blurs accuracy
# by more than 5 points per score: the noisy selection then picks little better than at random.
SELECTION_NOISE_SHARE = 0.05


def failure_notes(results: Iterable[dict]) -> list[str]:
    """One note per group of runs whose released model diverged (`failed` in the record): they are
    scored as released (typically at chance) and named, never passed off as a working DP model."""
    failed: dict[tuple, list[str]] = defaultdict(list)
    for r in results:
        if r.get("failed"):
            prov = r.get("provenance") or {}
            failed[(str(r.get("method")), str(prov.get("dataset", prov.get("study"))), as_float(r["target"]["eps"]))].append(str(prov.get("seed", "?")))
    return [f"FAILED: {method} on {dataset} at target ε = {eps:g} diverged for seed(s) {', '.join(seeds)} (non-finite model, "
            "scored as released): lower the step size (search_space.eta)" for (method, dataset, eps), seeds in sorted(failed.items())]


def selection_noise_notes(results: Iterable[dict]) -> list[str]:
    """A warning per study whose selection noise dwarfs its training size (both public: the config's
    noise std and the declared public size), so the table says what the log alone said before."""
    found: dict[tuple[str, str, str, int], float] = {}  # the largest noise per study and variant, whatever the order read
    for r in results:
        sel, cache = r.get("selection") or {}, (r.get("provenance") or {}).get("feature_cache") or {}
        std, n = sel.get("noise_std"), cache.get("public_n_train")
        if sel.get("rule") == "noisy_train_accuracy" and std and n:
            prov = r.get("provenance") or {}
            key = (prov.get("dataset", "?"), prov.get("extractor", "?"), prov.get("variant", DEFAULT_VARIANT), int(n))
            found[key] = max(found.get(key, 0.0), float(std))
    return [
        f"WARNING: {d} × {e}{'' if v == DEFAULT_VARIANT else f' (variant {v})'}: selection noise std {std:g} on correct-prediction "
        f"counts of n = {n:,} training examples blurs each released accuracy by ±{100 * std / n:.0f} points (one std): "
        "stage picks are close to random"
        for (d, e, v, n), std in sorted(found.items())
        if std > SELECTION_NOISE_SHARE * n
    ]


def no_signal_notes(results: Iterable[dict]) -> list[str]:
    """A note per study and rule whose releases took the no-signal path (`safeguard.no_signal_prior`):
    at those targets the selection noise could not rank trials at the study's public size, or the first
    stage's trials would have learnt too little to differ (`safeguard.stage_snr`), so no stage ran and
    the whole budget went to one run at the public prior r (read off the release itself)."""
    found: dict[tuple[str, str, str, str], set[float]] = {}
    for r in results:
        fit = (r.get("search") or {}).get("fit") or {}
        if fit.get("no_signal"):
            prov = r.get("provenance") or {}
            key = (prov.get("dataset", "?"), prov.get("extractor", "?"), prov.get("variant", "default"), str(fit.get("prior", "")))
            found.setdefault(key, set()).add(as_float(r["target"]["eps"]))
    return [
        f"NOTE: {d} × {e} [{v}] at target ε = {', '.join(f'{x:g}' for x in sorted(eps))}: too few training records for "
        "the stages at this ε (the planned selection noise could not rank trials, or stage 1's trials would learn about "
        "as much at any r: its mu_1*N/sqrt(P) below the guard): no stage ran, the whole budget went "
        f"to one run at the public prior {prior} (docs/methods.md §3)"
        for (d, e, v, prior), eps in sorted(found.items())
    ]


#: A stage ranks r only if its released scores differ by more than this many standard deviations of the
#: difference of two released scores (σ√2, σ = selection.noise_std).
STAGE_SIGNAL_SDS = 2.0


def stage_signal_notes(results: Iterable[dict]) -> list[str]:
    """A warning per study and rule where some stage's released scores (noisy counts, in the release) all
    lie within STAGE_SIGNAL_SDS standard deviations of a difference of each other: that stage's pick, and
    the line through it, follow the noise, not r. Post-processing of released values only."""
    found: dict[tuple[str, str, str], list[int]] = {}
    for r in results:
        std = (r.get("selection") or {}).get("noise_std")
        stages: dict[int, list[float]] = {}
        for t in r.get("trials") or []:
            if t.get("stage") is not None and t.get("score") is not None:
                stages.setdefault(int(t["stage"]), []).append(float(t["score"]))
        if not std or not stages:
            continue
        prov = r.get("provenance") or {}
        key = (prov.get("dataset", "?"), prov.get("extractor", "?"), prov.get("variant", "default"))
        flat = any(max(s) - min(s) < STAGE_SIGNAL_SDS * math.sqrt(2) * float(std) for s in stages.values() if len(s) > 1)
        found.setdefault(key, []).append(int(flat))
    return [
        f"WARNING: {d} × {e} [{v}]: in {sum(flags)} of {len(flags)} runs a stage's released scores differ by less than "
        f"{STAGE_SIGNAL_SDS:g} noise standard deviations of a difference: that stage picked on noise, not r (too few "
        "training records for this ε and selection.noise_std); compare with random search"
        for (d, e, v), flags in sorted(found.items())
        if sum(flags)
    ]


def overrun_notes(rows: Iterable[dict]) -> list[str]:
    """A warning per total above its target (`check_totals`): cannot happen with the ledger's planning; a
    table says so if it does, and its figures (drawn at the target ε) say nothing."""
    return [f"WARNING: a reported total exceeds its target: {bad}" for bad in check_totals(rows)]


def check_totals(rows: Iterable[dict]) -> list[str]:
    """Rows whose accounted total ε exceeds their target (should be none). An unaccounted search (the
    oracle, a non-private rule) states ε = ∞ on purpose: its row says so, it is no overrun."""
    bad = []
    for r in rows:
        target = r.get("target ε")
        for col, v in r.items():
            if (col.startswith("total ε") and isinstance(v, float) and math.isfinite(v) and isinstance(target, float)
                    and v > target * (1 + 1e-9)):
                bad.append(f"{col}={v} > target {target}")
    return bad
