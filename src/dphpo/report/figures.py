"""Every figure of Panda et al. from result files (matplotlib, Agg): what each needs, and the drawing.

Figures and the Panda et al. figure they reproduce:
- `figure3`: r = η·T against ε — the grid-search oracle's best r at each target with its least-squares
  line, the linear scaling rule's released r and one of its fits (stage points, line, extrapolation) —
  and accuracy of linear scaling (search accounted) against the grid-search oracle (Fig. 3).
- `heatmap` (one per study): test accuracy over the grid (η down, T across), one panel per target ε,
  the best cell starred and the linear scaling rule's r = η·T drawn as the curve η = r/T (Fig. 5, 17, 18).
- `figure6`: every grid point's r against its relative accuracy gap to the best point at the same ε (Fig. 6).
- `pareto` (one per dataset): best accuracy and its r against ε for each extractor — the grid-search
  oracle's frontier and the linear scaling rule (Fig. 19, 20).
- `figure2`: accuracy against ε of the linear scaling rule (paper.figure2.variant: one search shared by
  its targets) and of Mehta et al. (2023b) run here, under the non-private reference (Fig. 2; its table:
  dphpo.report.paper.build_figure2).
Grid data come from the `grid_oracle` results (every grid point at the full budget; its trial records).
A panel whose data the config cannot produce says what it needs instead of failing.
"""

from __future__ import annotations

import math
import textwrap
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dphpo.report.paper import Results
from dphpo.report.plan import DEFAULT, LS, Paper, Source, TablePlan, plan_figure2
from dphpo.report.plotting import delta_text, eps_axis, pyplot, save_figure
from dphpo.report.tables import as_float, mean_std, stated_delta

ORACLE = "grid_oracle"
Jobs = Iterable[Sequence[str]] | None  # the jobs of rule run_method (dphpo.report.plan.Paper)
FIGURES = ("figure2", "figure3", "heatmap", "figure6", "pareto")
# The figures of one file each (layout.FIGURE): file name -> figure (heatmaps and Pareto fronts: one
# file per study or dataset, layout.HEATMAP and layout.PARETO)
SINGLE_FIGURES = {"figure2_accuracy_vs_eps": "figure2", "figure3_r_vs_eps": "figure3", "figure6_r_vs_gap": "figure6"}


# --------------------------------------------------------------------------------------------
# What each figure needs


def _all_targets(p: Paper, method: str, dataset: str, extractor: str, variant: str = DEFAULT) -> Source:
    files, need = [], None
    for eps in p.targets:
        src = p.source(method, dataset, extractor, variant, eps)
        if not src.ok:
            return Source(need=src.need)
        files += src.files
    return Source(files, need)


def _rows(plan: TablePlan, key: str) -> Source:
    """The files of column `key` over a table plan's rows (those it can read) and the first thing a row needs."""
    cells = [r.sources[key] for r in plan.rows if key in r.sources]
    needs = [c.need for c in cells if c.need]
    return Source([f for c in cells if c.ok for f in c.files], needs[0] if needs else None)


def figure3_study(p: Paper) -> tuple[str, str]:
    s = p.section.get("figure3")
    return (s["dataset"], s["extractor"]) if s else p.studies[0]


def figure6_study(p: Paper) -> tuple[str, str]:
    s = p.section.get("figure6")
    return (s["dataset"], s["extractor"]) if s else figure3_study(p)


def heatmap_studies(p: Paper) -> list[tuple[str, str]]:
    return p.studies_of("heatmaps")


def pareto_datasets(p: Paper) -> list[str]:
    section = p.section.get("pareto") or {}
    return list(section.get("datasets") or dict.fromkeys(d for d, _ in p.studies))


def pareto_extractors(p: Paper, dataset: str) -> list[str]:
    section = p.section.get("pareto") or {}
    chosen = section.get("extractors")
    return [e for d, e in p.studies if d == dataset and (chosen is None or e in chosen)]


def sources(
    config: dict, figure: str, dataset: str | None = None, extractor: str | None = None, method_jobs: Jobs = None
) -> dict[str, Source]:
    """Named sources of one figure (for a heatmap: of one study; for a Pareto figure: of one dataset);
    `method_jobs` as for `Paper` (the workflow passes them: the figure jobs import no torch)."""
    p = Paper(config, method_jobs)
    if figure == "figure2":
        rows = plan_figure2(p)
        return {key: _rows(rows, key) for key in ("ours", "mehta", "ref")}
    if figure == "figure3":
        d, e = figure3_study(p)
        return {"ours": _all_targets(p, LS, d, e), "oracle": _all_targets(p, ORACLE, d, e)}
    if figure == "heatmap":
        return {"oracle": _all_targets(p, ORACLE, dataset, extractor), "ours": _all_targets(p, LS, dataset, extractor)}
    if figure == "figure6":
        d, e = figure6_study(p)
        return {"oracle": _all_targets(p, ORACLE, d, e)}
    if figure == "pareto":
        out = {}
        for e in pareto_extractors(p, dataset):
            out[f"oracle:{e}"] = _all_targets(p, ORACLE, dataset, e)
            out[f"ours:{e}"] = _all_targets(p, LS, dataset, e)
        return out
    raise ValueError(f"unknown figure {figure!r}; known: {', '.join(FIGURES)}")


def inputs(
    config: dict, figure: str, dataset: str | None = None, extractor: str | None = None, method_jobs: Jobs = None
) -> list[str]:
    seen: dict[str, None] = {}
    for src in sources(config, figure, dataset, extractor, method_jobs).values():
        for f in src.files:
            seen.setdefault(f, None)
    return list(seen)


# --------------------------------------------------------------------------------------------
# Data


def by_target(results: list[dict]) -> dict[float, list[dict]]:
    out: dict[float, list[dict]] = defaultdict(list)
    for r in results:
        out[as_float(r["target"]["eps"])].append(r)
    return dict(sorted(out.items()))


def drawn_delta(*groups: dict[float, list[dict]]) -> str:
    """The δ of the records a panel draws (by_target groups), for its label: a variant may set its own
    `privacy.delta`, and a truncated random number of trials adds its δ_cap, so not the config's δ. A
    search that is not accounted (the oracle: total ε = ∞, δ 0) contributes the δ each of its runs had."""
    deltas = [stated_delta(r) for g in groups for v in g.values() for r in v]
    return delta_text(deltas) if deltas else "δ: none drawn"


def grid_accuracy(results: list[dict]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(η values, T values, mean test accuracy over seeds of shape (len η, len T)) of oracle results at one ε;
    a diverged grid point (accuracy NaN, stored as null) is NaN in its cell."""
    acc: dict[tuple[float, int], list[float]] = defaultdict(list)
    for r in results:
        for t in r["trials"]:
            acc[(round(float(t["eta"]), 12), int(t["steps"]))].append(as_float(t["test_accuracy"]))
    etas = np.array(sorted({k[0] for k in acc}))
    steps = np.array(sorted({k[1] for k in acc}))
    grid = np.full((len(etas), len(steps)), np.nan)
    for (e, t), v in acc.items():
        grid[np.searchsorted(etas, e), np.searchsorted(steps, t)] = np.mean(v)
    return etas, steps, grid


def best_cell(grid: np.ndarray) -> tuple[int, int] | None:
    """The index of the grid's best finite cell; None where every cell diverged."""
    if not np.isfinite(grid).any():
        return None
    i, j = np.unravel_index(np.nanargmax(np.where(np.isfinite(grid), grid, -np.inf)), grid.shape)
    return int(i), int(j)


def best_point(results: list[dict]) -> tuple[float, float, float]:
    """(best mean accuracy, its η, its T) over the grid at one ε; NaNs where every grid point diverged."""
    etas, steps, grid = grid_accuracy(results)
    cell = best_cell(grid)
    if cell is None:
        return math.nan, math.nan, math.nan
    i, j = cell
    return float(grid[i, j]), float(etas[i]), float(steps[j])


# --------------------------------------------------------------------------------------------
# Drawing


def _save(fig, path: str | Path) -> None:
    save_figure(fig, path, dpi=120, bbox_inches="tight")


def _needs(ax, *needs: str | None) -> bool:
    """Write what a panel needs into it; True when something is missing."""
    missing = [n for n in needs if n]
    if missing:
        ax.text(0.5, 0.5, "needs:\n" + "\n".join(_wrap(n) for n in missing), ha="center", va="center", fontsize=8, transform=ax.transAxes, wrap=True)
        ax.set_xticks([])
        ax.set_yticks([])
    return bool(missing)


def _missing(ax, *needs: str | None) -> None:
    """A small note, inside a drawn panel, of the data it lacks."""
    missing = [n for n in needs if n]
    if missing:
        ax.text(0.01, 0.01, "not drawn, needs: " + "; ".join(missing), fontsize=6, color="gray", transform=ax.transAxes, va="bottom", wrap=True)


def _wrap(text: str, width: int = 60) -> str:
    return "\n".join(textwrap.wrap(text, width))


def draw_figure2(config: dict, path: str | Path, method_jobs: Jobs = None) -> None:
    p, res, plt = Paper(config, method_jobs), Results(), pyplot()
    src = sources(config, "figure2", method_jobs=method_jobs)
    section = p.section.get("figure2") or {}
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    ax.set_title(f"{section.get('dataset', '?')} × {section.get('extractor', '?')}: accuracy against ε (Panda et al., Fig. 2)", fontsize=9)
    ours, mehta = by_target(res.many(src["ours"])), by_target(res.many(src["mehta"]))
    if not _needs(ax, *(() if ours or mehta else (src["ours"].need, src["mehta"].need))):
        _missing(ax, src["ours"].need, src["mehta"].need, src["ref"].need)
        shared = any(((r.get("search") or {}).get("config") or {}).get("budget_mode") == "absolute" for v in ours.values() for r in v)
        label = "linear scaling, " + ("one search shared by all targets" if shared else "a search per target") + " (search incl.)"
        for results, name, color in ((ours, label, "C0"), (mehta, "Mehta et al. (2023b), run here", "C2")):
            if results:
                ms = [mean_std([r["test_accuracy"] for r in v]) for v in results.values()]
                ax.errorbar(list(results), [100 * m for m, _ in ms], yerr=[100 * s for _, s in ms], marker="o", capsize=3, color=color, label=name)
        refs = res.many(src["ref"])
        if refs:
            ax.axhline(100 * refs[0]["test_accuracy"], color="gray", ls="--", lw=1, label="non-private reference (ε = ∞, selected on test)")
        eps_axis(ax, [*ours, *mehta], f"total target ε ({drawn_delta(ours, mehta)}), search included")
        ax.set_ylabel("test accuracy (%)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    _save(fig, path)


def draw_figure3(config: dict, path: str | Path, method_jobs: Jobs = None) -> None:
    p, res, plt = Paper(config, method_jobs), Results(), pyplot()
    src = sources(config, "figure3", method_jobs=method_jobs)
    d, e = figure3_study(p)
    fig, (ax_r, ax_acc) = plt.subplots(1, 2, figsize=(11, 4.2))
    fig.suptitle(f"{d} × {e}: linear scaling vs grid search (Panda et al., Fig. 3)", fontsize=11)
    ours, oracle = by_target(res.many(src["ours"])), by_target(res.many(src["oracle"]))
    if not (ours or oracle):
        _needs(ax_r, src["oracle"].need, src["ours"].need)
    else:
        _missing(ax_r, src["oracle"].need, src["ours"].need)
        if oracle:
            eps = np.array(list(oracle))
            best_r = []
            for target, rs in oracle.items():  # a diverged grid point (accuracy null) is never the best
                per_seed = [max(r["trials"], key=lambda t: np.nan_to_num(as_float(t["test_accuracy"]), nan=-np.inf)) for r in rs]
                best_r.append([t["eta"] * t["steps"] for t in per_seed])
                ax_r.scatter([target] * len(per_seed), best_r[-1], color="C1", s=12, alpha=0.5)
            mean_r = np.array([np.mean(x) for x in best_r])
            ax_r.plot(eps, mean_r, "o", color="C1", label="grid search: best r (per seed, mean)")
            if len(eps) >= 2:
                a, b = np.polyfit(eps, mean_r, 1)
                xs = np.linspace(0, eps.max(), 50)
                ax_r.plot(xs, a * xs + b, "-", color="C1", lw=1, label=f"least-squares line r = {a:.3g}·ε + {b:.3g}")
        if ours:
            eps = np.array(list(ours))
            rs = [mean_std([r["released"]["r"] for r in v]) for v in ours.values()]
            ax_r.errorbar(eps, [m for m, _ in rs], yerr=[s for _, s in rs], fmt="s", color="C0", capsize=3, label="linear scaling: released r (mean ± std)")
            target = min(ours, key=lambda t: abs(t - p.eps))
            shown = ours[target][0]  # one seed's fit: the first record read, named by its own seed
            fit = shown["search"]["fit"]
            if fit.get("x") == "eps":
                xs_pts = [q["x"] for q in fit["points"]]
                ys_pts = [q["r"] for q in fit["points"]]
                xs = np.linspace(0, max(fit["x_final"], *xs_pts), 50)
                ax_r.plot(xs, np.polyval(fit["coefficients"], xs), "--", color="C0", lw=1, label=f"its fit at target ε = {target:g}, seed {(shown.get('provenance') or {}).get('seed', '?')} (x: standalone ε)")
                ax_r.plot(xs_pts, ys_pts, "^", color="C0", ms=7, mfc="none", label="stage picks (ε_k, r_k)")
                ax_r.plot([fit["x_final"]], [fit["r_clamped"]], "*", color="C0", ms=11, label="extrapolated to ε_f")
        ax_r.set_xlabel("ε")
        ax_r.set_ylabel("r = η · T")
        ax_r.grid(alpha=0.3)
        ax_r.legend(fontsize=7)
    if not (ours or oracle):
        _needs(ax_acc, src["oracle"].need, src["ours"].need)
    else:
        _missing(ax_acc, src["oracle"].need, src["ours"].need)
        for results, label, color in ((ours, "linear scaling (search accounted)", "C0"), (oracle, "grid-search oracle (HPO cost NOT included)", "C1")):
            if not results:
                continue
            eps = list(results)
            ms = [mean_std([r["test_accuracy"] for r in v]) for v in results.values()]
            ax_acc.errorbar(eps, [100 * m for m, _ in ms], yerr=[100 * s for _, s in ms], marker="o", capsize=3, color=color, label=label)
        eps_axis(ax_acc, [e for results in (ours, oracle) for e in results], f"total target ε ({drawn_delta(ours, oracle)})")
        ax_acc.set_ylabel("test accuracy (%)")
        ax_acc.grid(alpha=0.3)
        ax_acc.legend(fontsize=8)
    fig.tight_layout()
    _save(fig, path)


def draw_heatmap(config: dict, dataset: str, extractor: str, path: str | Path, method_jobs: Jobs = None) -> None:
    res, plt = Results(), pyplot()
    src = sources(config, "heatmap", dataset, extractor, method_jobs)
    oracle = by_target(res.many(src["oracle"]))
    ours = by_target(res.many(src["ours"]))
    n = max(1, len(oracle))
    cols = min(n, 6)
    rows = int(np.ceil(n / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(2.6 * cols + 1, 2.5 * rows + 0.8), squeeze=False)
    fig.suptitle(
        f"{dataset} × {extractor}: test accuracy (%) of every grid point at the full budget, {drawn_delta(oracle)} (grid-search oracle; Panda et al., Fig. 5/17/18)\n"
        "star: best cell; white curve: η = r/T for the r the linear scaling rule released (search accounted)",
        fontsize=9,
    )
    if not oracle:
        _needs(axes[0][0], src["oracle"].need)
    for k, (target, results) in enumerate(oracle.items()):
        ax = axes[k // cols][k % cols]
        etas, steps, grid = grid_accuracy(results)
        im = ax.imshow(100 * grid, aspect="auto", cmap="viridis", origin="upper")
        cell = best_cell(grid)
        if cell is not None:  # no star where every grid point diverged
            ax.plot(cell[1], cell[0], "*", color="red", ms=10)
        if target in ours:
            r = float(np.mean([x["released"]["r"] for x in ours[target]]))
            # η = r/T on the image's index axes (log-spaced η grid: interpolate in log η)
            ts = np.linspace(0, len(steps) - 1, 100)
            t_val = np.interp(ts, np.arange(len(steps)), steps)
            eta_val = r / t_val
            if len(etas) > 1:
                yi = np.interp(np.log(eta_val), np.log(etas), np.arange(len(etas)), left=np.nan, right=np.nan)
                ax.plot(ts, yi, "-", color="white", lw=1.2)
        ax.set_title(f"ε = {target:g}", fontsize=9)
        ax.set_xticks(range(len(steps)))
        ax.set_xticklabels([str(int(t)) for t in steps], fontsize=6, rotation=90)
        ax.set_yticks(range(len(etas)))
        ax.set_yticklabels([f"{e:.2g}" for e in etas], fontsize=6)
        if k % cols == 0:
            ax.set_ylabel("η (increasing ↓)", fontsize=8)
        ax.set_xlabel("steps T (= epochs, full batch)", fontsize=7)
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.02).ax.tick_params(labelsize=6)
    for k in range(len(oracle), rows * cols):
        if k or oracle:
            axes[k // cols][k % cols].axis("off")
    fig.tight_layout()
    _save(fig, path)


def draw_figure6(config: dict, path: str | Path, method_jobs: Jobs = None) -> None:
    p, res, plt = Paper(config, method_jobs), Results(), pyplot()
    src = sources(config, "figure6", method_jobs=method_jobs)
    d, e = figure6_study(p)
    oracle = by_target(res.many(src["oracle"]))
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    ax.set_title(f"{d} × {e}: r vs relative accuracy gap to the best r at the same ε, {drawn_delta(oracle)} (Panda et al., Fig. 6)", fontsize=9)
    if not _needs(ax, src["oracle"].need if not oracle else None):
        cmap = plt.get_cmap("viridis")
        for k, (target, results) in enumerate(oracle.items()):
            etas, steps, grid = grid_accuracy(results)
            if best_cell(grid) is None:
                continue  # every grid point diverged: no gap to draw
            best = np.nanmax(grid)
            r = np.outer(etas, steps).ravel()
            gap = (100.0 * (best - grid) / best).ravel()
            ax.scatter(r, gap, s=10, color=cmap(k / max(1, len(oracle) - 1)), label=f"ε = {target:g}", alpha=0.8)
        ax.set_xscale("log")
        ax.set_xlabel("r = η · T")
        ax.set_ylabel("relative gap to the best grid point (%)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    _save(fig, path)


def draw_pareto(config: dict, dataset: str, path: str | Path, method_jobs: Jobs = None) -> None:
    p, res, plt = Paper(config, method_jobs), Results(), pyplot()
    src = sources(config, "pareto", dataset, method_jobs=method_jobs)
    fig, (ax_acc, ax_r) = plt.subplots(1, 2, figsize=(11, 4.2))
    fig.suptitle(f"{dataset}: Pareto frontier of ε vs test accuracy and vs total step size r (Panda et al., Fig. 19/20)", fontsize=10)
    extractors = pareto_extractors(p, dataset)
    missing = [s.need for s in src.values() if s.need]
    drawn, all_eps, groups = False, [], []
    for k, e in enumerate(extractors):
        oracle = by_target(res.many(src[f"oracle:{e}"]))
        ours = by_target(res.many(src[f"ours:{e}"]))
        color = f"C{k}"
        all_eps += list(oracle) + list(ours)
        groups += [oracle, ours]
        if oracle:
            eps = list(oracle)
            bests = [best_point(v) for v in oracle.values()]
            ax_acc.plot(eps, [100 * b[0] for b in bests], "o-", color=color, label=f"{e}: grid oracle (HPO not incl.)")
            ax_r.plot(eps, [b[1] * b[2] for b in bests], "o-", color=color, label=f"{e}: grid oracle's best r")
            drawn = True
        if ours:
            eps = list(ours)  # mean ± std over seeds, as in Fig. 2 and 3
            accs = [mean_std([r["test_accuracy"] for r in v]) for v in ours.values()]
            rs = [mean_std([r["released"]["r"] for r in v]) for v in ours.values()]
            ax_acc.errorbar(eps, [100 * m for m, _ in accs], yerr=[100 * s for _, s in accs], fmt="s--", color=color, mfc="none", capsize=3, label=f"{e}: linear scaling (search incl., mean ± std)")
            ax_r.errorbar(eps, [m for m, _ in rs], yerr=[s for _, s in rs], fmt="s--", color=color, mfc="none", capsize=3, label=f"{e}: linear scaling's r (mean ± std)")
            drawn = True
    if not drawn:
        _needs(ax_acc, *(missing or [f"studies: no extractor on {dataset}"]))
        _needs(ax_r, *(missing or [f"studies: no extractor on {dataset}"]))
    else:
        for ax, ylabel in ((ax_acc, "test accuracy (%)"), (ax_r, "r = η · T")):
            eps_axis(ax, all_eps, f"total target ε ({drawn_delta(*groups)})")
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        ax_r.set_yscale("log")
    fig.tight_layout()
    _save(fig, path)


def draw(config: dict, figure: str, path: str | Path, method_jobs: Jobs = None, **wildcards: Any) -> None:
    if figure == "figure2":
        draw_figure2(config, path, method_jobs)
    elif figure == "figure3":
        draw_figure3(config, path, method_jobs)
    elif figure == "heatmap":
        draw_heatmap(config, wildcards["dataset"], wildcards["extractor"], path, method_jobs)
    elif figure == "figure6":
        draw_figure6(config, path, method_jobs)
    elif figure == "pareto":
        draw_pareto(config, wildcards["dataset"], path, method_jobs)
    else:
        raise ValueError(f"unknown figure {figure!r}; known: {', '.join(FIGURES)}")
