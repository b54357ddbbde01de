"""The linear scaling table and figure of the embedded study (issue: accuracy vs total ε).

The total ε of a row is what one seed's run spent, its whole search included (the same for every
seed; the largest is shown), or ∞ where the trials were selected by a non-private rule (`test`,
`train_nonprivate`): that search is not accounted, as the comparison table says of the oracle.
Rows whose numbers depend on a setting chosen on private data (config `design_notes`) say so.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

from dphpo.hpo.selection import accounted
from dphpo.report.plotting import delta_text, eps_axis, panel_grid, save_figure
from dphpo.report.tables import (
    DEFAULT_VARIANT,
    Table,
    apply_design_notes,
    as_float,
    failure_notes,
    load_results,
    mean_std,
    no_signal_notes,
    overrun_notes,
    pct,
    selection_noise_notes,
    stage_signal_notes,
    variant_of,
)

#: the rule of the main study's rows (variants' rows show the variant's name)
PAPER_RULE = "Panda et al."

#: ε of one seed's run, everything composed; ∞ when the selection was not private
TOTAL_EPS = "total ε (incl. search) per run"


def rule_name(variant: str) -> str:
    """The rule a variant's rows show: the paper's for the main study, else the variant's name."""
    return PAPER_RULE if variant == DEFAULT_VARIANT else variant


def summarize(results: Sequence[dict], references: Sequence[dict]) -> list[dict]:
    """One row per (dataset, extractor, rule, target ε): mean ± std over seeds, total ε per run, gap.
    The rule is the paper's (the main study) or a variant's (e.g. `safeguarded`), the paper's first."""
    ref_acc = {(r["provenance"]["dataset"], r["provenance"]["extractor"]): r["test_accuracy"] for r in references}
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in results:
        prov = r["provenance"]
        variant = variant_of(r)
        groups[(prov["dataset"], prov["extractor"], variant != DEFAULT_VARIANT, variant, as_float(r["target"]["eps"]))].append(r)
    rows = []
    for (dataset, extractor, _, variant, target), runs in sorted(groups.items()):
        mean, std = mean_std([r["test_accuracy"] for r in runs])
        ref = ref_acc.get((dataset, extractor))
        private = all(accounted(r) for r in runs)
        rows.append(
            {
                "dataset": dataset,
                "extractor": extractor,
                "rule": rule_name(variant),
                "target ε": target,
                TOTAL_EPS: max(as_float(r["total_eps"]) for r in runs) if private else math.inf,
                "δ": max(as_float(r["total_delta"]) for r in runs),
                "seeds": len(runs),
                "test accuracy (%)": pct(mean, std, len(runs)),
                "non-private (%)": None if ref is None else f"{100 * ref:.2f}",
                "gap (points)": None if ref is None else round(100 * (ref - mean), 2),
                "selection": runs[0]["selection"]["rule"] if private else f"{runs[0]['selection']['rule']} (NOT private)",
                "_private": private,
                "_method": "linear_scaling",
                "_mean": mean,
                "_std": std,
                "_ref": ref,
            }
        )
    return rows


COLUMNS = [
    "dataset",
    "extractor",
    "rule",
    "target ε",
    TOTAL_EPS,
    "δ",
    "seeds",
    "test accuracy (%)",
    "non-private (%)",
    "gap (points)",
    "selection",
]


def safeguard_notes(results: Sequence[dict]) -> list[str]:
    """One note per safeguarded rule in the table: its guards, and that they cost no privacy."""
    guards = {variant_of(r): r["search"]["config"]["safeguard"] for r in results if r.get("search", {}).get("config", {}).get("safeguard")}
    return [
        f"rule '{variant}' (linear_scaling.safeguard): r -> (η, T) by {g.get('decompose') or 'the search space policy'}"
        + (f", stage draws of r {g['sampling']}" if g.get("sampling") else "")
        + (", r = a·ε fitted through the origin" if g.get("fit") == "origin" else "")
        + (f", final r at most {g['max_extrapolation']:g} × the largest stage pick" if g.get("max_extrapolation") else "")
        + (" (beyond the grid if need be)" if g.get("beyond_grid") else "")
        + (f", stage picks the largest r within {g['tie_margin']:g} std of the best score" if g.get("tie_margin") is not None else "")
        + (f", stage 2 searches up to {g['later_stage_cap']:g}·r_max" if g.get("later_stage_cap") is not None else "")
        + (f", stage picks count only {g['informative_margin']:g} std above the null model's (r_max if none does)"
           if g.get("informative_margin") is not None else "")
        + ("; post-processing of the released picks but for the null model's one noisy score, in the ledger"
           if g.get("informative_margin") is not None else
           "; post-processing of the released picks: the same stages and ledger entries, no extra privacy cost")
        + " (docs/methods.md, 'The safeguarded rule')"
        for variant, g in sorted(guards.items())
    ]


def build_table(rows: list[dict], results: Sequence[dict], config: Mapping | None = None) -> Table:
    """The table; `config` (its `design_notes`) labels rows that use settings chosen on private data."""
    search = results[0]["search"]["config"] if results else {}
    caption = (
        "Linear scaling rule: test accuracy (mean ± std over seeds) at each target ε. "
        f"'{TOTAL_EPS}' is the ε one seed's run spends, every release composed: all stage trials, every "
        "selection release and the final run. It is the same for every seed; the seeds are separate runs, "
        "so the mean ± std describes runs that each cost this ε (not one guarantee for all of them). "
        "∞: trials selected by a non-private rule, the search is not accounted."
    )
    notes = overrun_notes(rows) + [
        f"search: {search.get('n_trials')} trials per stage at stage budgets {search.get('stage_eps')} "
        f"({search.get('budget_mode')} of the target), degree-{search.get('degree')} fit in {search.get('fit_in')}",
        "non-private: σ = 0, best grid point chosen on TEST data (a ceiling, not a DP result); gap = non-private − mean",
    ]
    notes += safeguard_notes(results)
    notes += selection_noise_notes(results) + stage_signal_notes(results) + no_signal_notes(results) + failure_notes(results)
    if any(not r["_private"] for r in rows):
        notes.append(
            "WARNING: rows marked NOT private selected their trials by a NON-PRIVATE rule: the search is not "
            "accounted, so their total ε is ∞ (the ε of the final run alone is no guarantee for the result)"
        )
    # the rule column only where a safeguarded rule stands beside the paper's
    columns = [c for c in COLUMNS if c != "rule" or any(r["rule"] != PAPER_RULE for r in rows)]
    return apply_design_notes(Table(columns=columns, rows=rows, caption=caption, notes=notes), config)


def plot(rows: list[dict], path: str | Path) -> None:
    """Accuracy vs target ε (log scale), one panel per (dataset, extractor), non-private as a dashed line."""
    studies = sorted({(r["dataset"], r["extractor"]) for r in rows})
    fig, axes = panel_grid(len(studies), 4.5, 3.6)
    for ax, (dataset, extractor) in zip(axes, studies):
        sub = [r for r in rows if (r["dataset"], r["extractor"]) == (dataset, extractor)]
        eps = [r["target ε"] for r in sub]
        for rule in dict.fromkeys(r["rule"] for r in sub):  # the paper's rule first
            line = [r for r in sub if r["rule"] == rule]
            private = all(r.get("_private", True) for r in line)
            label = "linear scaling (DP, search accounted)" if private else "linear scaling (NON-PRIVATE selection)"
            label += "" if rule == PAPER_RULE else f", {rule}"
            ax.errorbar([r["target ε"] for r in line], [100 * r["_mean"] for r in line], yerr=[100 * r["_std"] for r in line],
                        marker="o", capsize=3, label=label)
        if sub[0]["_ref"] is not None:
            ax.axhline(100 * sub[0]["_ref"], ls="--", color="k", lw=1, label="non-private reference (ε = ∞, selected on test)")
        eps_axis(ax, eps, f"target ε (a run's total, search included, ≤ it; {delta_text([r['δ'] for r in sub if r['_private']] or [r['δ'] for r in sub])})")
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
    config: Mapping | None = None,
) -> list[dict]:
    """Write the table and figure. `config`: the workflow config whose `design_notes` label rows."""
    results = load_results(result_paths)
    rows = summarize(results, load_results(reference_paths))
    build_table(rows, results, config or {}).write(md=md, csv_path=csv_path, tex=tex, html_path=html_path)
    plot(rows, figure)
    return rows
