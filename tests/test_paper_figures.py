"""The paper's figures drawn from result files: the δ each states is that of the records it draws, and a
diverged grid point (test accuracy NaN, stored as null) is a blank cell rather than a crash."""

import math

import numpy as np
import pytest

from dphpo import layout
from dphpo.io import write_json
from dphpo.report import figures

GRID = [(eta, steps) for eta in (0.1, 1.0, 10.0) for steps in (10, 100)]
DIVERGED = (10.0, 100)  # the grid point whose run diverged


def record(method, delta, trials=()):
    oracle = method == "grid_oracle"
    return {
        "method": method, "target": {"eps": 1.0, "delta": delta},
        "total_eps": math.inf if oracle else 1.0 - 1e-9, "total_delta": 0.0 if oracle else delta,
        "private": True, "within_budget": not oracle, "test_accuracy": 0.9,
        "selection": {"rule": "test" if oracle else "noisy_train_accuracy", "private": not oracle},
        "privacy": {"total": {"accountant": "none (selection rule test is not accounted)" if oracle else "gdp_closed_form"}},
        "provenance": {"dataset": "mnist", "extractor": "raw", "seed": 0}, "released": {"r": 10.0},
        "trials": list(trials), "search": {"config": {}, "fit": {}},
    }


@pytest.fixture
def drawn(tmp_path, monkeypatch):
    """Every figure of a config whose Fig. 2 reads a variant at δ = 1e-6 (the config's δ is 1e-5); the grid
    oracle has one diverged point. Returns {figure: matplotlib figure}."""
    monkeypatch.chdir(tmp_path)
    trials = [{"eta": e, "steps": t, "test_accuracy": None if (e, t) == DIVERGED else 0.5 + e / 100 + t / 10000} for e, t in GRID]
    write_json(layout.path(layout.RESULT, dataset="mnist", extractor="raw", method="grid_oracle", variant="default", seed=0, eps=1.0),
               record("grid_oracle", 1e-5, trials))
    write_json(layout.path(layout.RESULT, dataset="mnist", extractor="raw", method="linear_scaling", variant="default", seed=0, eps=1.0),
               record("linear_scaling", 1e-5))
    shared = record("linear_scaling", 1e-6) | {"provenance": {"dataset": "mnist", "extractor": "raw", "seed": 0, "variant": "shared"}}
    write_json(layout.path(layout.RESULT, dataset="mnist", extractor="raw", method="linear_scaling", variant="shared", seed=0, eps=1.0), shared)
    reference = record("nonprivate", 1e-5) | {"private": False, "total_eps": math.inf, "target": {"eps": math.inf, "delta": 0.0}}
    write_json(layout.path(layout.NONPRIVATE_RESULT, dataset="mnist", extractor="raw"), reference)
    config = {"studies": [{"dataset": "mnist", "extractor": "raw"}], "seeds": [0], "privacy": {"target_eps": [1.0], "delta": 1e-5},
              "variants": {"shared": {"privacy": {"delta": 1e-6}}},
              "paper": {"figure2": {"dataset": "mnist", "extractor": "raw", "variant": "shared", "eps": [1.0]},
                        "figure3": {"dataset": "mnist", "extractor": "raw"}, "pareto": {"datasets": ["mnist"]}}}
    jobs = [("mnist", "raw", "grid_oracle")]
    saved = {}
    monkeypatch.setattr(figures, "_save", lambda fig, path: saved.__setitem__(path, fig))
    for name in ("figure2", "figure3", "figure6"):
        figures.draw(config, name, name, jobs)
    figures.draw(config, "heatmap", "heatmap", jobs, dataset="mnist", extractor="raw")
    figures.draw(config, "pareto", "pareto", jobs, dataset="mnist")
    return saved


def texts(fig):
    return [t for ax in fig.axes for t in (ax.get_xlabel(), ax.get_title())] + ([fig._suptitle.get_text()] if fig._suptitle else [])


def test_each_figure_states_the_delta_of_the_records_it_draws(drawn):
    """Fig. 2 and 3 stated the config's δ (1e-5) for a variant run at 1e-6; the heatmap, Fig. 6 and the
    Pareto fronts stated none. The oracle's search is not accounted (δ 0): its runs' δ is stated."""
    assert "total target ε (δ = 1e-06), search included" in texts(drawn["figure2"])
    assert "total target ε (δ = 1e-05)" in texts(drawn["figure3"])
    for name in ("heatmap", "figure6", "pareto"):
        assert any("δ = 1e-05" in t for t in texts(drawn[name])), (name, texts(drawn[name]))
    assert not any("δ = 0" in t for fig in drawn.values() for t in texts(fig))


def test_a_diverged_grid_point_is_never_the_best_cell(drawn):
    etas, steps, grid = figures.grid_accuracy(
        [record("grid_oracle", 1e-5, [{"eta": e, "steps": t, "test_accuracy": None if (e, t) == DIVERGED else 0.5} for e, t in GRID])])
    assert np.isnan(grid[2, 1]) and np.isfinite(np.delete(grid.ravel(), 5)).all()
    (star,) = [line for line in drawn["heatmap"].axes[0].get_lines() if line.get_marker() == "*"]
    assert (star.get_xdata()[0], star.get_ydata()[0]) == (0, 2)  # η 10, T 10: the best finite cell
    assert all(math.isnan(v) for v in figures.best_point([record("grid_oracle", 1e-5, [{"eta": 1.0, "steps": 10, "test_accuracy": None}])]))
