"""The HPO comparison table: rows, columns, the oracle's label, RERR, and the files `make` writes."""

import csv
import io
import math

import pytest

from dphpo.io import write_json
from dphpo.report import comparison

STUDIES = [("mnist", "efficientnet_lite0"), ("tweets", "minilm_l6")]
# accuracy by method (mean over the two seeds below); the oracle is best, random worst
ACC = {"random_search": 0.80, "grid_oracle": 0.90, "linear_scaling": 0.88, "papernot_steinke": 0.84, "mehta": 0.70}


def fake_result(method, dataset, extractor, eps, seed, acc):
    oracle = method == "grid_oracle"
    return {
        "method": method,
        "target": {"eps": eps, "delta": 1e-5},
        "total_eps": eps * (1 - 1e-9),
        "total_delta": 1e-5,
        "private": True,
        "within_budget": True,
        "test_accuracy": acc,
        "selection": {"rule": "test" if oracle else "noisy_train_accuracy", "private": not oracle},
        "privacy": {"total": {"accountant": "rdp" if method == "papernot_steinke" else "gdp_closed_form"}},
        "provenance": {"dataset": dataset, "extractor": extractor, "seed": seed},
    }


@pytest.fixture
def results():
    out = []
    for dataset, extractor in STUDIES:
        for eps in (1.0, 8.0):
            for method, acc in ACC.items():
                for seed, delta in ((0, -0.01), (1, 0.01)):
                    out.append(fake_result(method, dataset, extractor, eps, seed, acc + delta))
    return out


def test_one_row_per_study_target_and_method(results):
    rows = comparison.summarize(results)
    assert len(rows) == len(STUDIES) * 2 * len(ACC)
    table = comparison.build_table(rows)
    assert table.columns == comparison.COLUMNS
    for col in ("method", "test accuracy (%)", "total ε spent (incl. search)", "RERR (%)", "private HPO"):
        assert col in table.columns
    first = [r for r in rows if r["dataset"] == "mnist" and r["target ε"] == 1.0]
    # linear scaling first, then the baselines in registry order
    assert [r["method_id"] for r in first] == ["linear_scaling", "random_search", "grid_oracle", "papernot_steinke", "mehta"]
    ls = first[0]
    assert ls["test accuracy (%)"] == "88.00 ± 1.41"
    assert ls["seeds"] == 2


def test_rerr_is_ours_minus_random_over_oracle_minus_random(results):
    rows = {(r["dataset"], r["target ε"], r["method_id"]): r for r in comparison.summarize(results)}
    ls = rows[("mnist", 8.0, "linear_scaling")]
    assert ls["rerr"] == pytest.approx((0.88 - 0.80) / (0.90 - 0.80))
    assert ls["RERR (%)"] == pytest.approx(80.0)
    assert rows[("mnist", 8.0, "mehta")]["rerr"] == pytest.approx((0.70 - 0.80) / 0.10)
    assert rows[("mnist", 8.0, "random_search")]["rerr"] is None
    assert rows[("mnist", 8.0, "grid_oracle")]["rerr"] is None
    assert comparison.rerr(0.9, 0.8, 0.8) is None  # no oracle gap: undefined


def test_oracle_row_says_non_private_hpo_and_spends_infinite_eps(results):
    rows = comparison.summarize(results)
    oracle = [r for r in rows if r["method_id"] == "grid_oracle"]
    assert oracle and all(r["private HPO"] == "NO (oracle)" for r in oracle)
    assert all(math.isinf(r["total ε spent (incl. search)"]) for r in oracle)
    assert all("non-private" in r["method"] for r in oracle)
    private = [r for r in rows if r["method_id"] != "grid_oracle"]
    assert all(r["total ε spent (incl. search)"] <= r["target ε"] for r in private)
    md = comparison.build_table(rows).to_markdown()
    assert "non-private HPO" in md and "∞" in md


def test_make_writes_markdown_csv_latex_and_figure(results, tmp_path):
    paths = []
    for i, r in enumerate(results):
        p = tmp_path / "runs" / f"{i}.json"
        write_json(p, r)
        paths.append(str(p))
    out = {k: tmp_path / f"hpo_comparison.{k}" for k in ("md", "csv", "tex", "html")}
    fig = tmp_path / "fig.png"
    comparison.make(
        paths, [], md=str(out["md"]), csv_path=str(out["csv"]), figure=str(fig), tex=str(out["tex"]), html_path=str(out["html"])
    )
    rows = list(csv.DictReader(io.StringIO(out["csv"].read_text())))
    assert list(rows[0]) == comparison.CSV_COLUMNS
    assert len(rows) == len(STUDIES) * 2 * len(ACC)
    ls = [r for r in rows if r["method"] == "linear_scaling" and r["dataset"] == "tweets" and r["target_eps"] == "1.0"][0]
    assert float(ls["rerr"]) == pytest.approx(0.8)
    assert [r for r in rows if r["method"] == "grid_oracle"][0]["total_eps"] == "inf"
    md = out["md"].read_text()
    assert "Table 3" in md and "RERR" in md
    assert r"\begin{tabular}" in out["tex"].read_text()
    assert fig.stat().st_size > 5000
    # the report's HTML page: both tables (the comparison and Table 3's layout), one row per method and target
    page = out["html"].read_text()
    assert page.startswith("<!DOCTYPE html>") and page.count("<table>") == 2
    assert page.count("<td>grid search ORACLE (non-private HPO)</td>") == len(STUDIES) * 2
    assert "RERR = (method − random search)/(oracle − random search)" in page  # the notes come along


@pytest.mark.parametrize("n_studies", [1, 2, 4])
def test_figure_legend_lies_inside_the_saved_image(results, n_studies, tmp_path):
    """The legend under the panels used to be cut off by the figure's edge (issue 9)."""
    studies = [("mnist", "efficientnet_lite0"), ("tweets", "minilm_l6"), ("digits", "raw"), ("cifar10", "resnet")][:n_studies]
    rows = [
        {"dataset": d, "extractor": e, "method_id": m, "target ε": eps, "accuracy_mean": 0.5, "accuracy_std": 0.01}
        for d, e in studies
        for m in comparison.LABELS
        for eps in (0.25, 1.0, 8.0)
    ]
    refs = [{"provenance": {"dataset": "mnist", "extractor": "efficientnet_lite0"}, "test_accuracy": 0.95}]
    fig = comparison.figure(rows, refs)
    fig.canvas.draw()
    (legend,) = fig.legends
    box, page = legend.get_window_extent(), fig.bbox
    assert len(legend.get_texts()) == len(comparison.LABELS) + 1
    assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 and box.y1 <= page.y1
    for ax in fig.axes:  # and it covers no panel
        if ax.get_visible():
            assert not box.overlaps(ax.get_tightbbox())
    comparison.plot(rows, tmp_path / "fig.png", refs)
    assert (tmp_path / "fig.png").stat().st_size > 5000
