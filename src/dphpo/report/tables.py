"""Tables from result.json files: one writer for Markdown, CSV and LaTeX.

A table is a list of rows (dicts) plus its column order and a caption; every table states the
total (ε, δ) spent, search included, and the selection rule.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from dphpo.io import read_json, write_text


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
        if self.notes:
            lines += [""] + [f"- {n}" for n in self.notes]
        return "\n".join(lines) + "\n"

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
        lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
        return "\n".join(lines) + "\n"

    def write(self, md: str | Path | None = None, csv_path: str | Path | None = None, tex: str | Path | None = None) -> None:
        if md:
            write_text(md, self.to_markdown())
        if csv_path:
            write_text(csv_path, self.to_csv())
        if tex:
            write_text(tex, self.to_latex())


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


def csv_cell(value: Any) -> Any:
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    return "" if value is None else value


def load_results(paths: Iterable[str | Path]) -> list[dict]:
    return [read_json(p) for p in paths]


def as_float(value: Any) -> float:
    """Numbers from result.json: JSON has no infinity, so it is stored as the string 'inf'."""
    if isinstance(value, str):
        return float(value)
    return float(value)


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    arr = np.asarray(values, dtype=float)
    return float(arr.mean()), float(arr.std(ddof=1)) if len(arr) > 1 else 0.0


def pct(mean: float, std: float) -> str:
    return f"{100 * mean:.2f} ± {100 * std:.2f}"
