"""Tables from result.json files: one writer for Markdown, CSV and LaTeX.

A table is a list of rows (dicts) plus its column order and a caption; every table states the
total (ε, δ) spent, search included, and the selection rule.
"""

from __future__ import annotations

import csv
import html
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

    def to_html(self) -> str:
        """A self-contained HTML page (the Snakemake report renders HTML inline, Markdown only as a download)."""
        return html_page([self])

    def html_fragment(self) -> str:
        esc = html.escape
        head = "".join(f"<th>{esc(c)}</th>" for c in self.columns)
        body = "".join("<tr>" + "".join(f"<td>{esc(format_cell(r.get(c)))}</td>" for c in self.columns) + "</tr>" for r in self.rows)
        notes = "".join(f"<li>{esc(n)}</li>" for n in self.notes)
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
