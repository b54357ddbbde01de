"""What the figures share: the headless pyplot, atomic saving, panel grids and the ε axis."""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

from matplotlib.ticker import FixedLocator, NullFormatter

from dphpo.io import atomic_path

# Panels per row of the one-panel-per-study figures: more than three become unreadably wide.
MAX_PANEL_COLUMNS = 3


def pyplot():
    """matplotlib.pyplot on the headless Agg backend (jobs have no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: str | Path, dpi: int = 130, **kwargs) -> None:
    """Write a figure atomically (temporary file, then rename) in the format of its suffix, and close it."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=Path(path).suffix.lstrip(".") or "png", dpi=dpi, **kwargs)
    pyplot().close(fig)


def panel_grid(n: int, panel_width: float, panel_height: float, max_columns: int = MAX_PANEL_COLUMNS):
    """(figure, the first n axes) on a grid of at most `max_columns` columns; spare axes are hidden."""
    n = max(1, n)
    cols = min(n, max_columns)
    rows = math.ceil(n / cols)
    fig, axes = pyplot().subplots(rows, cols, figsize=(panel_width * cols, panel_height * rows), squeeze=False)
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def delta_text(deltas: Iterable[float]) -> str:
    """The δ of a panel's runs for its axis label: 'δ = 1e-05', or 'δ ≤ …' where they differ (a truncated
    random number of trials adds its δ_cap)."""
    found = sorted({float(d) for d in deltas})
    return f"δ = {found[0]:.3g}" if len(found) == 1 else f"δ ≤ {found[-1]:.3g}"


def eps_axis(ax, eps_values: Iterable[float], label: str = "total ε") -> None:
    """Log-scaled ε axis ticked at the budgets that were run, labelled plainly (0.25, 1, 8).

    Matplotlib's default log ticks label minor ticks as 3×10⁻¹ when the range spans under two
    decades; the labels then overlap and hide which budgets exist.
    """
    ticks = sorted({float(e) for e in eps_values if e is not None and 0 < float(e) < float("inf")})
    ax.set_xscale("log")
    ax.set_xlabel(label)
    if ticks:
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.set_xticklabels([f"{t:g}" for t in ticks])
        ax.xaxis.set_minor_formatter(NullFormatter())
