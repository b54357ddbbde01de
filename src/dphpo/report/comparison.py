"""The HPO comparison (issue #3): every method on the same features, search space and total budgets.

One row per (dataset, extractor, target ε, method): test accuracy mean ± std over seeds, the total
ε each method actually spent in one seed's run (its whole search included; the same for every seed,
the max over seeds shown: the seeds are separate runs, each of which costs it), and
RERR = (method − random)/(oracle − random) — for the linear scaling rule this is Panda et al. Table 3's
relative error-rate reduction. "random" is `random_search` (one run at the full budget with random
hyperparameters) and "oracle" is `grid_oracle`, whose search reads the TEST set and is not
accounted: it is labelled non-private HPO and its total ε is ∞. Rows that depend on a setting chosen
on private data (config `design_notes`) name it (`tables.apply_design_notes`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

from dphpo.hpo.registry import settings_sources
from dphpo.hpo.selection import accounted
from dphpo.io import write_text
from dphpo.report.plotting import delta_text, eps_axis, panel_grid, save_figure
from dphpo.report.specs import COMPARISON_LABELS
from dphpo.report.tables import (
    Table,
    apply_design_notes,
    as_float,
    design_notes,
    failure_notes,
    html_page,
    load_results,
    mean_std,
    method_id,
    no_signal_notes,
    overrun_notes,
    pct,
    private_design_keys,
    rerr,
    selection_noise_notes,
    settings_source,
)

RANDOM = "random_search"
ORACLE = "grid_oracle"
OURS = "linear_scaling"

#: Display order and names (dphpo.report.specs, the home of every method label); methods not listed
#: follow in alphabetical order under their own name.
LABELS = COMPARISON_LABELS

#: ε one seed's run of the method spent, its search included (∞: search not accounted)
TOTAL_EPS = "total ε spent (incl. search) per run"

COLUMNS = [
    "dataset",
    "extractor",
    "target ε",
    "method",
    "private HPO",
    "seeds",
    "test accuracy (%)",
    TOTAL_EPS,
    "δ",
    "RERR (%)",
    "accountant",
]
CSV_COLUMNS = [
    "dataset",
    "extractor",
    "target_eps",
    "method",
    "private_hpo",
    "seeds",
    "accuracy_mean",
    "accuracy_std",
    "total_eps",
    "total_delta",
    "rerr",
    "accountant",
    "selection",
    "design_on_private_data",
    "settings_source",
]


def method_label(method: str) -> str:
    """The display name of a method id; a variant not in LABELS is named after its base method."""
    base, _, variant = method.partition(":")
    return LABELS.get(method) or (f"{LABELS.get(base, base)} [{variant}]" if variant else method)


def _method_order(method: str) -> tuple[int, str]:
    names = list(LABELS)
    return (names.index(method), method) if method in names else (len(names), method)


def summarize(results: Sequence[dict]) -> list[dict]:
    """One row per (dataset, extractor, target ε, method), with RERR against random search and the oracle."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in results:
        prov = r["provenance"]
        groups[(prov["dataset"], prov["extractor"], as_float(r["target"]["eps"]), method_id(r))].append(r)
    stats = {key: (*mean_std([r["test_accuracy"] for r in runs]), len(runs)) for key, runs in groups.items()}
    rows = []
    for (dataset, extractor, target, method), runs in sorted(groups.items(), key=lambda kv: (*kv[0][:3], _method_order(kv[0][3]))):
        mean, std = mean_std([r["test_accuracy"] for r in runs])
        private_hpo = all(accounted(r) for r in runs)
        totals = [as_float(r["total_eps"]) for r in runs]
        total = max(totals) if private_hpo else math.inf
        value = None
        if method not in (RANDOM, ORACLE) and private_hpo:
            value = rerr(mean, stats.get((dataset, extractor, target, RANDOM)), stats.get((dataset, extractor, target, ORACLE)))
        accountant = runs[0]["privacy"]["total"].get("accountant", "")
        rows.append(
            {
                "dataset": dataset,
                "extractor": extractor,
                "target ε": target,
                "method": method_label(method),
                "private HPO": "yes" if private_hpo else "NO (oracle)" if method == ORACLE else "NO",
                "seeds": len(runs),
                "test accuracy (%)": pct(mean, std, len(runs)),
                TOTAL_EPS: total,
                "δ": max(as_float(r["total_delta"]) for r in runs),
                "RERR (%)": None if value is None else round(100 * value, 1),
                "accountant": f"not accounted (selection rule {runs[0]['selection'].get('rule')})" if not private_hpo else accountant,
                # CSV columns
                "target_eps": target,
                "method_id": method,
                "private_hpo": private_hpo,
                "accuracy_mean": mean,
                "accuracy_std": std,
                "total_eps": total,
                "total_delta": max(as_float(r["total_delta"]) for r in runs),
                "rerr": value,
                "selection": runs[0]["selection"].get("rule", ""),
                "within_budget": all(r.get("within_budget", True) for r in runs),
            }
        )
    return rows


NOTES = [
    "total ε spent per run: every release of one seed's run of the method composed (all trials, score/selection releases, "
    "final runs); the same for every seed, the max over seeds shown. The mean ± std is over seeds, separate runs that each "
    "spend this ε: releasing several seeds' models together would cost their composition; "
    "Papernot-Steinke and Koskela-Kulkarni are RDP-accounted (tuned-mechanism bound, Poisson amplification), OSO-DPSGD on "
    "the CNN with prv-accountant's upper bound, the rest in Gaussian DP.",
    "grid search ORACLE: every grid point trained at the full budget and the best chosen on TEST data; the search is not "
    "accounted (non-private HPO, total ε = ∞), exactly the paper's oracle. Its released run alone costs the target.",
    "RERR = (method − random search)/(oracle − random search), as in Panda et al. Table 3 (there for the linear scaling rule); "
    "'–' where the denominator is within noise (under 2 standard errors of the two means over seeds, or half a point).",
    "Koskela-Kulkarni is a reconstruction (docs/methods.md §4): P&S tuning on a Poisson subsample, hyperparameter transfer, final run.",
    "OSO-DPSGD (small CNN) trains on raw pixels of its own (opt-in) studies, not on the linear-head features.",
]


def build_table(rows: list[dict], config: Mapping | None = None, results: Sequence[dict] = ()) -> Table:
    """The comparison; `config` (its `design_notes`) labels rows that use settings chosen on private data."""
    caption = (
        "HPO methods compared at equal total budgets: test accuracy (mean ± std over seeds) and the total ε each "
        "method actually spent per run (one seed's run, its hyperparameter search included; the same for every seed)."
    )
    notes = overrun_notes(rows) + list(NOTES) + source_notes(rows, config) + selection_noise_notes(results) + no_signal_notes(results) + failure_notes(results)
    table = Table(columns=list(COLUMNS), rows=[dict(r) for r in rows], caption=caption, notes=notes)
    return apply_design_notes(table, config)


def source_notes(rows: list[dict], config: Mapping | None) -> list[str]:
    """One note per method of the table whose settings' source the config states (`settings_sources`)."""
    sources, seen = settings_sources(config), {}
    for r in rows:
        source = settings_source(r["method_id"], sources)
        if source and r["method"] not in seen:
            seen[r["method"]] = source
    return [f"settings of {method}: {source}" for method, source in seen.items()]


def build_csv_table(rows: list[dict], config: Mapping | None = None) -> Table:
    notes, sources = design_notes(config), settings_sources(config)
    csv_rows = [
        r
        | {
            "method": r["method_id"],
            "design_on_private_data": "; ".join(private_design_keys(r, notes, config)) or None,
            "settings_source": settings_source(r["method_id"], sources),
        }
        for r in rows
    ]
    return Table(columns=CSV_COLUMNS, rows=csv_rows)


def _marked(row: dict) -> str:
    """A row's accuracy cell, marked where its search is not accounted (a non-private selection rule)."""
    return row["test accuracy (%)"] + ("" if row["private_hpo"] else " (NON-PRIVATE HPO)")


def build_table3(rows: list[dict]) -> Table:
    """Panda et al.'s Table 3 layout: random / oracle / ours / RERR per study and target ε."""
    by_key: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for r in rows:
        by_key[(r["dataset"], r["extractor"], r["target ε"])][r["method_id"]] = r
    out, needs = [], []
    for (dataset, extractor, target), methods in sorted(by_key.items()):
        lacking = [m for m in (RANDOM, ORACLE, OURS) if m not in methods]
        if lacking:  # a row needs all three; say which is missing rather than drop it silently
            needs.append(f"needs: {', '.join(lacking)} on {dataset} × {extractor} at ε = {float(target):g} (no row without it)")
            continue
        out.append(
            {
                "dataset": dataset,
                "extractor": extractor,
                "target ε": target,
                "δ": max(methods[RANDOM]["δ"], methods[OURS]["δ"]),
                "random search (%)": _marked(methods[RANDOM]),
                "oracle, non-private HPO (%)": methods[ORACLE]["test accuracy (%)"],
                "linear scaling (%)": _marked(methods[OURS]),
                "RERR (%)": methods[OURS]["RERR (%)"],
            }
        )
    cols = ["dataset", "extractor", "target ε", "δ", "random search (%)", "oracle, non-private HPO (%)", "linear scaling (%)", "RERR (%)"]
    caption = (
        "Panda et al.'s Table 3 layout: RERR = (ours − random)/(oracle − random). Accuracies: mean ± std over seeds; "
        "target ε and δ: the total (ε, δ) per run (one seed's run, search included) of random search and ours (δ: "
        "the larger of the two); the oracle's search is not accounted."
    )
    return Table(columns=cols, rows=out, caption=caption, notes=needs)


def figure(rows: list[dict], references: Sequence[dict] = ()):
    """Accuracy vs total ε, one line per method, one panel per (dataset, extractor); the oracle dashed."""
    ref_acc = {(r["provenance"]["dataset"], r["provenance"]["extractor"]): r["test_accuracy"] for r in references}
    studies = sorted({(r["dataset"], r["extractor"]) for r in rows})
    fig, axes = panel_grid(len(studies), 5.2, 4.2)
    # constrained layout makes room for an "outside" legend instead of letting the saved figure clip it
    fig.set_layout_engine("constrained")
    for ax, (dataset, extractor) in zip(axes, studies):
        sub = [r for r in rows if (r["dataset"], r["extractor"]) == (dataset, extractor)]
        for method in sorted({r["method_id"] for r in sub}, key=_method_order):
            line = sorted((r for r in sub if r["method_id"] == method), key=lambda r: r["target ε"])
            # a method keeps its colour and marker in every panel; past ten methods the colours repeat
            # with another marker and a dash-dot line
            order = _method_order(method)[0]
            color, marker = f"C{order % 10}", "os^"[order // 10 % 3]
            private_hpo = all(r["private_hpo"] for r in line)
            style = {"ls": "--", "color": "0.4"} if method == ORACLE else {"lw": 2.2, "color": color} if method.startswith(OURS) else {"color": color}
            style |= {"ls": "-."} if order >= 10 and method != ORACLE else {}
            style |= {"ls": ":", "mfc": "none"} if not private_hpo and method != ORACLE else {}
            ax.errorbar(
                [r["target ε"] for r in line],
                [100 * r["accuracy_mean"] for r in line],
                yerr=[100 * r["accuracy_std"] for r in line],
                marker=marker,
                ms=3.5,
                capsize=2,
                label=method_label(method) + ("" if private_hpo or method == ORACLE else " (NON-PRIVATE HPO)"),
                **style,
            )
        if (dataset, extractor) in ref_acc:
            ax.axhline(100 * ref_acc[(dataset, extractor)], ls=":", color="k", lw=1, label="non-private reference (ε = ∞, selected on test)")
        oracle = "; oracle: search not accounted" if any(r["method_id"] == ORACLE for r in sub) else ""
        oracle += "; dotted: search not accounted (ε = ∞)" if any(not r["private_hpo"] and r["method_id"] != ORACLE for r in sub) else ""
        private = [r["total_delta"] for r in sub if r["private_hpo"]] or [r["total_delta"] for r in sub]
        eps_axis(ax, [r["target ε"] for r in sub], f"target ε at {delta_text(private)} (a run's total, search included, ≤ it{oracle})")
        ax.set_ylabel("test accuracy (%)")
        ax.set_title(f"{dataset} × {extractor}")
        ax.grid(alpha=0.3)
    # one legend under the panels (inside them it hid the low-ε end of the curves), as many columns
    # as fit the figure's width: a label at fontsize 8 with its marker takes up to ~3.2 inches
    legend = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(label, handle)
    ncol = max(1, min(len(legend), int(fig.get_figwidth() // 3.2)))
    fig.set_figheight(fig.get_figheight() + 0.2 * math.ceil(len(legend) / ncol))  # the panels keep their height
    fig.legend(list(legend.values()), list(legend), loc="outside lower center", ncol=ncol, fontsize=8)
    return fig


def plot(rows: list[dict], path: str | Path, references: Sequence[dict] = ()) -> None:
    # bbox_inches="tight": the saved image grows to whatever the legend needs rather than cut it
    save_figure(figure(rows, references), path, bbox_inches="tight")


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
    """Write the tables and figure. `config`: the workflow config whose `design_notes` label rows."""
    config = config or {}
    results = load_results(result_paths)
    rows = summarize(results)
    table, table3 = build_table(rows, config, results), apply_design_notes(build_table3(rows), config)
    write_text(md, table.to_markdown() + "\n" + table3.to_markdown())
    if html_path:
        write_text(html_path, html_page([table, table3]))
    build_csv_table(rows, config).write(csv_path=csv_path)
    if tex:
        table.write(tex=tex)
    plot(rows, figure, load_results(reference_paths))
    return rows
