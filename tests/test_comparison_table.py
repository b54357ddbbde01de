"""The HPO comparison table: rows, columns, the oracle's label, RERR, and the files `make` writes."""

import csv
import io
import math

import pytest

from dphpo.io import write_json
from dphpo.report import comparison
from dphpo.report.tables import PRIVATE_DESIGN_COLUMN

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
    for col in ("method", "test accuracy (%)", comparison.TOTAL_EPS, "RERR (%)", "private HPO"):
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
    assert comparison.rerr(0.9, (0.8, 0.0, 1), (0.8, 0.0, 1)) is None  # no oracle gap: undefined


def test_rerr_is_a_dash_where_its_denominator_is_within_noise():
    """Issue 30: an oracle and random search that tie up to seed noise made RERR −3,100 %."""
    assert comparison.rerr(0.5, (0.800, 0.0, 3), (0.801, 0.0, 3)) is None  # under half a point
    assert comparison.rerr(0.5, (0.80, 0.05, 3), (0.85, 0.05, 3)) is None  # 5 points, but 2 SE = 8.2 points
    assert comparison.rerr(0.9, (0.80, 0.01, 3), (0.85, 0.01, 3)) == pytest.approx(2.0)  # 2 SE = 1.6 points


def test_oracle_row_says_non_private_hpo_and_spends_infinite_eps(results):
    rows = comparison.summarize(results)
    oracle = [r for r in rows if r["method_id"] == "grid_oracle"]
    assert oracle and all(r["private HPO"] == "NO (oracle)" for r in oracle)
    assert all(math.isinf(r[comparison.TOTAL_EPS]) for r in oracle)
    assert all("non-private" in r["method"] for r in oracle)
    private = [r for r in rows if r["method_id"] != "grid_oracle"]
    assert all(r[comparison.TOTAL_EPS] <= r["target ε"] for r in private)
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
        {"dataset": d, "extractor": e, "method_id": m, "target ε": eps, "accuracy_mean": 0.5, "accuracy_std": 0.01,
         "private_hpo": m != comparison.ORACLE, "total_delta": 1e-5}
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


def test_the_figure_axis_states_delta_and_names_the_oracle_only_where_it_is_drawn():
    rows = [{"dataset": "digits", "extractor": "raw", "method_id": m, "target ε": eps, "accuracy_mean": 0.5,
             "accuracy_std": 0.01, "private_hpo": m != comparison.ORACLE, "total_delta": delta}
            for m, delta in (("linear_scaling", 1e-5), ("papernot_steinke", 1.01e-5), (comparison.ORACLE, 1e-5))
            for eps in (1.0, 8.0)]
    (ax,) = [a for a in comparison.figure(rows).axes if a.get_visible()]
    assert ax.get_xlabel() == "target ε at δ ≤ 1.01e-05 (a run's total, search included, ≤ it; oracle: search not accounted)"
    private = [r for r in rows if r["method_id"] == "linear_scaling"]
    (ax,) = [a for a in comparison.figure(private).axes if a.get_visible()]
    assert ax.get_xlabel() == "target ε at δ = 1e-05 (a run's total, search included, ≤ it)"  # a bundle without the oracle


def test_eps_is_labelled_per_run_beside_the_mean_over_seeds(results):
    """Item 7: mean ± std over seeds is shown with ONE run's ε: the header and caption say so."""
    rows = comparison.summarize(results)
    table, table3 = comparison.build_table(rows, config={}), comparison.build_table3(rows)
    assert "per run" in comparison.TOTAL_EPS and comparison.TOTAL_EPS in table.columns
    assert "per run" in table.caption and "same for every seed" in table.caption
    assert "per run" in table3.caption and "mean ± std over seeds" in table3.caption
    assert any("composition" in n for n in table.notes)


def test_the_table3_layout_names_the_method_a_row_lacks(results):
    """A study without the oracle (or random search) has no Table 3 row: the table says which is missing."""
    rows = [r for r in comparison.summarize(results) if r["method_id"] != comparison.ORACLE]
    table3 = comparison.build_table3(rows)
    assert table3.rows == [] and table3.notes
    assert all(n.startswith(f"needs: {comparison.ORACLE} on ") for n in table3.notes)
    assert comparison.build_table3(comparison.summarize(results)).notes == []


def test_the_table3_layout_states_delta():
    """Audit: the Table 3 layout had a target-ε column and no δ anywhere (columns, caption, notes)."""
    rows = comparison.summarize([fake_result(m, "mnist", "raw", 1.0, 0, ACC[m]) | {"total_delta": 2e-5 if m == "random_search" else 1e-5}
                                 for m in ("random_search", "grid_oracle", "linear_scaling")])
    table3 = comparison.build_table3(rows)
    assert table3.columns[3] == "δ" and [r["δ"] for r in table3.rows] == [2e-5]
    assert "(ε, δ)" in table3.caption


DESIGN = {
    "extractors": {"efficientnet_lite0": {"resolution": 64}},
    "baselines": {"mehta": {"loss": "ce"}},
    "design_notes": {"extractors.efficientnet_lite0.resolution": "picked on MNIST", "baselines.mehta.loss": "picked on MNIST too"},
}


def test_rows_using_a_setting_chosen_on_private_data_are_labelled(results):
    """Item 5: every row that depends on a setting in `design_notes` names it (md, tex, html, csv)."""
    rows = comparison.summarize(results)
    table = comparison.build_table(rows, DESIGN)
    col = PRIVATE_DESIGN_COLUMN
    assert table.columns[-1] == col and col not in rows[0]  # the summary rows stay as they were
    labelled = {(r["dataset"], r["method_id"]): r[col] for r in table.rows}
    assert labelled[("mnist", "linear_scaling")] == "extractors.efficientnet_lite0.resolution"
    assert labelled[("mnist", "mehta")] == "extractors.efficientnet_lite0.resolution, baselines.mehta.loss"
    assert labelled[("tweets", "mehta")] == "baselines.mehta.loss"
    assert labelled[("tweets", "linear_scaling")] is None
    assert "chosen on private data (not accounted)" in table.caption
    assert any(n.startswith("chosen on private data (not accounted): baselines.mehta.loss = ce: picked on MNIST too") for n in table.notes)
    csv_rows = list(csv.DictReader(io.StringIO(comparison.build_csv_table(rows, DESIGN).to_csv())))
    by = {(r["dataset"], r["method"], r["target_eps"]): r["design_on_private_data"] for r in csv_rows}
    assert by[("mnist", "mehta", "1.0")] == "extractors.efficientnet_lite0.resolution; baselines.mehta.loss"
    assert by[("tweets", "random_search", "1.0")] == ""
    # no design_notes: no column, nothing added
    assert PRIVATE_DESIGN_COLUMN not in comparison.build_table(rows, {}).columns


def test_make_labels_design_notes_of_the_config_it_is_given(results, tmp_path):
    """The workflow's table job passes its config (workflow/scripts/table_hpo_comparison.py)."""
    paths = []
    for i, r in enumerate(results):
        paths.append(str(tmp_path / "runs" / f"{i}.json"))
        write_json(paths[-1], r)

    def md_of(name, config):
        out = {k: tmp_path / f"{name}.{k}" for k in ("md", "csv", "png")}
        comparison.make(paths, [], md=str(out["md"]), csv_path=str(out["csv"]), figure=str(out["png"]), config=config)
        return out["md"].read_text(), out["csv"].read_text()

    md, csv_text = md_of("plain", {})
    assert "chosen on private data" not in md
    md, csv_text = md_of("notes", DESIGN)
    assert "picked on MNIST" in md and "extractors.efficientnet_lite0.resolution" in csv_text


def test_the_table_states_where_each_methods_settings_come_from(results):
    """Issue 29: each baseline's source (published, public proxy, a priori) under the table and in the CSV;
    a variant's rows take their base method's entry unless the config gives them their own."""
    from dphpo.errors import ConfigError

    variant = [r | {"provenance": r["provenance"] | {"variant": "safeguarded"}} for r in results if r["method"] == "linear_scaling"]
    rows = comparison.summarize(results + variant)
    config = {"settings_sources": {"mehta": "Mehta et al. §5.1", "linear_scaling": "Panda et al. as published"}}
    notes = comparison.build_table(rows, config).notes
    assert "settings of Mehta et al. (1 DP-Adam step): Mehta et al. §5.1" in notes
    assert sum(n.endswith("Panda et al. as published") for n in notes) == 2  # the rule and its variant
    assert not any("Papernot" in n and n.startswith("settings of") for n in notes)  # no entry: no note
    by = {(r["method"], r["target_eps"]): r["settings_source"] for r in comparison.build_csv_table(rows, config).rows if r["dataset"] == "mnist"}
    assert by[("mehta", 1.0)] == "Mehta et al. §5.1" and by[("papernot_steinke", 1.0)] is None
    assert by[("linear_scaling:safeguarded", 1.0)] == "Panda et al. as published"
    own = config["settings_sources"] | {"linear_scaling:safeguarded": "public proxies"}
    assert {r["method"]: r["settings_source"] for r in comparison.build_csv_table(rows, {"settings_sources": own}).rows}[
        "linear_scaling:safeguarded"] == "public proxies"
    with pytest.raises(ConfigError, match=r"settings_sources\.mehtaa: not a method"):
        comparison.build_table(rows, {"settings_sources": {"mehtaa": "typo"}})


@pytest.mark.parametrize("name", ["config/config.yaml", "config/paper_embedded.yaml"])
def test_the_embedded_configs_state_every_baselines_source(name):
    import yaml

    config = yaml.safe_load(open(name))
    sources = config["settings_sources"]
    assert set(config["baselines"]["methods"]) | {"linear_scaling", "oso_dpsgd_cnn"} <= set(sources)
    assert "public proxies" in sources["oso_dpsgd"] and "T = 50" in sources["oso_dpsgd"]


def test_tables_warn_where_a_stage_picked_on_noise_and_where_selection_noise_dwarfs_n():
    """Issue 29: a stage whose released scores lie within noise of each other picked on noise; the tables say
    so (from released values only). The selection-noise warning read a key the records never had."""
    from dphpo.report.tables import selection_noise_notes, stage_signal_notes

    def record(scores, std=50.0, n=1000, variant="default"):
        trials = [{"stage": s, "score": v} for s, vs in scores.items() for v in vs]
        return {"selection": {"rule": "noisy_train_accuracy", "noise_std": std}, "trials": trials,
                "provenance": {"dataset": "d", "extractor": "e", "variant": variant, "feature_cache": {"public_n_train": n}}}

    flat = record({1: [500.0, 520.0, 560.0], 2: [300.0, 600.0]})  # stage 1 spread 60 < 2·√2·50 ≈ 141
    ranked = record({1: [300.0, 600.0, 700.0], 2: [400.0, 700.0]})
    (note,) = stage_signal_notes([flat, ranked, ranked])
    assert note.startswith("WARNING: d × e [default]: in 1 of 3 runs") and "picked on noise" in note
    assert stage_signal_notes([ranked]) == []
    assert selection_noise_notes([record({}, std=300.0, n=1000)])[0].startswith("WARNING: d × e: selection noise std 300")
    assert selection_noise_notes([record({}, std=300.0, n=60000)]) == []
    # audit: keyed by study alone, the last record read decided whether a variant's warning appeared
    quiet, loud = record({}, std=50.0), record({}, std=300.0, variant="noisy")
    assert selection_noise_notes([quiet, loud]) == selection_noise_notes([loud, quiet]) != []
    assert selection_noise_notes([loud, quiet])[0].startswith("WARNING: d × e (variant noisy): selection noise std 300")


def test_a_total_above_its_target_is_a_warning_of_the_table(results):
    # the figure draws every point at its target ε: the table must say where a run spent more
    over = fake_result("linear_scaling", "digits", "raw", 1.0, 0, 0.5)
    over["total_eps"] = 1.3
    table = comparison.build_table(comparison.summarize([over]))
    assert table.notes[0] == "WARNING: a reported total exceeds its target: total ε spent (incl. search) per run=1.3 > target 1.0"
    assert not any(n.startswith("WARNING: a reported total") for n in comparison.build_table(comparison.summarize(results)).notes)


def test_a_diverged_run_shows_no_number_and_no_nan_ratio(results):
    # a diverged model's score is stored as null (NaN): the cell says "–", never "nan ± nan", and no RERR
    # of the other methods is divided by it
    for r in results:
        if r["method"] == "random_search" and r["provenance"]["dataset"] == "mnist" and r["target"]["eps"] == 8.0:
            r["test_accuracy"] = None
    rows = {(r["dataset"], r["target ε"], r["method_id"]): r for r in comparison.summarize(results)}
    assert rows[("mnist", 8.0, "random_search")]["test accuracy (%)"] == "–"
    assert rows[("mnist", 8.0, "linear_scaling")]["rerr"] is None
    assert rows[("mnist", 1.0, "linear_scaling")]["rerr"] == pytest.approx(0.8)
    assert comparison.pct(math.inf, math.nan, 3) == "∞"
