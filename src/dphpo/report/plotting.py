"""Shared axis styling of the figures."""

from __future__ import annotations

from typing import Iterable

from matplotlib.ticker import FixedLocator, NullFormatter


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
