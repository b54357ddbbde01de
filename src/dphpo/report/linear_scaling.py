"""The linear scaling table and figure of the embedded study (issue: accuracy vs total ε)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Sequence

from dphpo.report.tables import Table, as_float, load_results, mean_std, pct
from dphpo.report.plotting import eps_axis, panel_grid, save_figure


def summarize(results: Sequence[dict], references: Sequence[dict]) -> list[dict]:
    """One row per (dataset, extractor, target ε): mean ± std over seeds, total ε, gap."""
    ref_acc = {(r["provenance"]["dataset"], r["provenance"]["extractor"]): r["test_accuracy"] for r in references}
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in results:
        prov = r["provenance"]
        groups[(prov["dataset"], prov["extractor"], as_float(r["target"]["eps"]))].append(r)
    rows = []
    for (dataset, extractor, target), runs in sorted(groups.items()):
        mean, std = mean_std([r["test_accuracy"] for r in runs])
        ref = ref_acc.get((dataset, extractor))
        rows.append(
            {
                "dataset": dataset,
                "extractor": extractor,
                "target ε": target,
                "total ε (incl. search)": max(as_float(r["total_eps"]) for r in runs),
                "δ": runs[0]["total_delta"],
                "seeds": len(runs),
                "test accuracy (%)": pct(mean, std),
                "non-private (%)": None if ref is None else f"{100 * ref:.2f}",
                "gap (points)": None if ref is None else round(100 * (ref - mean), 2),
                "selection": runs[0]["selection"]["rule"],
                "_mean": mean,
                "_std": std,
                "_ref": ref,
            }
        )
    return rows


COLUMNS = [
    "dataset",
    "extractor",
    "target ε",
    "total ε (incl. search)",
    "δ",
    "seeds",
    "test accuracy (%)",
    "non-private (%)",
    "gap (points)",
    "selection",
]


def build_table(rows: list[dict], results: Sequence[dict]) -> Table:
    search = results[0]["search"]["config"] if results else {}
    caption = (
        "Linear scaling rule: test accuracy (mean ± std over seeds) at each target ε. "
        "'total ε' is the ε of every release composed: all stage trials, every selection release and the final run."
    )
    notes = [
        f"search: {search.get('n_trials')} trials per stage at stage budgets {search.get('stage_eps')} "
        f"({search.get('budget_mode')} of the target), degree-{search.get('degree')} fit in {search.get('fit_in')}",
        "non-private: σ = 0, best grid point chosen on TEST data (a ceiling, not a DP result); gap = non-private − mean",
    ]
    if rows and rows[0]["selection"] in ("test", "train_nonprivate"):
        notes.append("WARNING: trials were selected by a NON-PRIVATE rule; the search is not fully accounted")
    return Table(columns=COLUMNS, rows=rows, caption=caption, notes=notes)


def plot(rows: list[dict], path: str | Path) -> None:
    """Accuracy vs target ε (log scale), one panel per (dataset, extractor), non-private as a dashed line."""
    studies = sorted({(r["dataset"], r["extractor"]) for r in rows})
    fig, axes = panel_grid(len(studies), 4.5, 3.6)
    for ax, (dataset, extractor) in zip(axes, studies):
        sub = [r for r in rows if (r["dataset"], r["extractor"]) == (dataset, extractor)]
        eps = [r["target ε"] for r in sub]
        ax.errorbar(eps, [100 * r["_mean"] for r in sub], yerr=[100 * r["_std"] for r in sub], marker="o", capsize=3, label="linear scaling (DP, search accounted)")
        if sub[0]["_ref"] is not None:
            ax.axhline(100 * sub[0]["_ref"], ls="--", color="k", lw=1, label="non-private (ε = ∞)")
        eps_axis(ax, eps, "total ε (search included)")
        ax.set_ylabel("test accuracy (%)")
        ax.set_title(f"{dataset} × {extractor}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    save_figure(fig, path)


def make(
    result_paths: Sequence[str],
    reference_paths: Sequence[str],
    md: str,
    csv_path: str,
    figure: str,
    tex: str | None = None,
    html_path: str | None = None,
) -> list[dict]:
    results = load_results(result_paths)
    rows = summarize(results, load_results(reference_paths))
    build_table(rows, results).write(md=md, csv_path=csv_path, tex=tex, html_path=html_path)
    plot(rows, figure)
    return rows
