"""The table writer shared by every report table: HTML pages and the order of labels."""

import pytest

from dphpo import layout
from dphpo.io import write_json
from dphpo.report import provenance
from dphpo.report.tables import Table, html_page, label_key


def test_labels_sort_by_value_not_by_text():
    labels = ["16", "8", "0.5", "1", "inf", "0.25", "2"]
    assert sorted(labels) == ["0.25", "0.5", "1", "16", "2", "8", "inf"]  # what text order did
    assert sorted(labels, key=label_key) == ["0.25", "0.5", "1", "2", "8", "16", "inf"]
    assert sorted([10, "2", 1.5, "seed", "abc"], key=label_key) == [1.5, "2", 10, "abc", "seed"]


def test_html_page_escapes_cells_and_keeps_caption_and_notes():
    table = Table(["method", "ε"], [{"method": "<b>ours</b> & co", "ε": 0.25}, {"method": "oracle", "ε": float("inf")}], "cap <1>", ["a note"])
    page = table.to_html()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "<td>&lt;b&gt;ours&lt;/b&gt; &amp; co</td>" in page and "<b>ours" not in page
    assert "<td>0.25</td>" in page and "<td>∞</td>" in page
    assert "<p>cap &lt;1&gt;</p>" in page and "<li>a note</li>" in page
    assert "<th>method</th><th>ε</th>" in page
    two = html_page([table, table])
    assert two.count("<table>") == 2 and two.count("<!DOCTYPE html>") == 1


def test_write_writes_html_atomically(tmp_path):
    table = Table(["a"], [{"a": 1}])
    table.write(md=tmp_path / "t.md", html_path=tmp_path / "t.html")
    assert (tmp_path / "t.html").read_text() == table.to_html()
    assert not list(tmp_path.glob("*.tmp*"))


@pytest.mark.parametrize("seeds", [[0, 2, 10]])
def test_provenance_table_lists_targets_and_seeds_in_numeric_order(tmp_path, monkeypatch, seeds):
    monkeypatch.chdir(tmp_path)
    paths = []
    for seed in seeds:
        for eps in (16.0, 8.0, 0.5, 1.0):
            path = layout.path(layout.RESULT, dataset="mnist", extractor="raw", method="random_search", variant="default", seed=seed, eps=eps)
            write_json(path, {"target": {"eps": eps}, "total_eps": eps, "total_delta": 1e-5, "provenance": {"seed": seed}})
            paths.append(path)
    (row,) = provenance.provenance_table(paths).rows
    assert row["target ε"] == "0.5, 1.0, 8.0, 16.0"
    assert row["seeds"] == "0, 2, 10"


def test_provenance_table_shows_no_overrun_for_the_oracle_and_every_delta_of_a_group(tmp_path, monkeypatch):
    """Audit: the oracle's row read 'max total ε − target' = ∞ (an overrun, by the caption) and δ 0, and a group
    showed its first record's δ alone."""
    monkeypatch.chdir(tmp_path)
    paths = []
    for method, eps, delta in (("grid_oracle", 1.0, 1e-5), ("random_search", 1.0, 1e-5), ("random_search", 8.0, 2e-5)):
        oracle = method == "grid_oracle"
        path = layout.path(layout.RESULT, dataset="mnist", extractor="raw", method=method, variant="default", seed=0, eps=eps)
        write_json(path, {"method": method, "target": {"eps": eps, "delta": 1e-5}, "total_eps": math.inf if oracle else eps,
                          "total_delta": 0.0 if oracle else delta, "selection": {"rule": "test" if oracle else "noisy_train_accuracy"},
                          "provenance": {"seed": 0, "dataset": "mnist", "extractor": "raw"}})
        paths.append(path)
    oracle, random = provenance.provenance_table(paths).rows
    assert oracle["max total ε − target"] is None and oracle["δ"] == "1e-05"
    assert random["max total ε − target"] == 0.0 and random["δ"] == "1e-05, 2e-05"


# --- ε per run, non-private selection, settings chosen on private data (issue items 5 and 7) --------

import math  # noqa: E402

from dphpo.report import linear_scaling  # noqa: E402
from dphpo.report.tables import (  # noqa: E402
    PER_RUN_EPS_NOTE,
    PRIVATE_DESIGN_COLUMN,
    apply_design_notes,
    config_value,
    note_applies,
)


def ls_result(eps, seed, acc, *, dataset="mnist", extractor="efficientnet_lite0", rule="noisy_train_accuracy", private=True):
    return {
        "method": "linear_scaling",
        "target": {"eps": eps, "delta": 1e-5},
        "total_eps": eps * (1 - 1e-9),
        "total_delta": 1e-5,
        "private": True,
        "test_accuracy": acc,
        "selection": {"rule": rule, "private": private},
        "search": {"config": {"n_trials": 3, "stage_eps": [0.1, 0.2], "budget_mode": "fraction", "degree": 1, "fit_in": "eps"}},
        "provenance": {"dataset": dataset, "extractor": extractor, "seed": seed},
    }


def test_linear_scaling_total_eps_is_infinite_when_the_selection_is_not_private():
    """A search whose trials were picked on test data is not accounted: its total ε is ∞, as in
    the comparison table, not the finite ε of the ledger (which covers the final run only)."""
    results = [ls_result(1.0, s, 0.9) for s in (0, 1)] + [ls_result(2.0, s, 0.9, rule="test", private=False) for s in (0, 1)]
    rows = linear_scaling.summarize(results, [])
    by_eps = {r["target ε"]: r for r in rows}
    assert by_eps[1.0][linear_scaling.TOTAL_EPS] == pytest.approx(1.0)
    assert math.isinf(by_eps[2.0][linear_scaling.TOTAL_EPS])
    assert "NOT private" in by_eps[2.0]["selection"]
    # a record marked non-private is enough, whatever its selection says
    (row,) = linear_scaling.summarize([ls_result(1.0, 0, 0.9) | {"private": False}], [])
    assert math.isinf(row[linear_scaling.TOTAL_EPS])
    table = linear_scaling.build_table(rows, results, config={})
    md, csv_text = table.to_markdown(), table.to_csv()
    assert "| mnist | efficientnet_lite0 | 2 | ∞ |" in md
    assert ",inf," in csv_text and "NON-PRIVATE" in md


def test_linear_scaling_header_says_eps_is_per_run():
    results = [ls_result(1.0, s, 0.9 + 0.01 * s) for s in (0, 1, 2)]
    table = linear_scaling.build_table(linear_scaling.summarize(results, []), results, config={})
    assert "per run" in linear_scaling.TOTAL_EPS and linear_scaling.TOTAL_EPS in table.columns
    assert "per run" in table.caption and "mean ± std" in table.caption and "same for every seed" in table.caption
    assert "total ε (incl. search)" in table.to_csv().splitlines()[0]  # the header the workflow test reads


def test_table_says_eps_is_per_run_beside_a_mean_over_seeds():
    """Any table (paper, language) with a total-ε column next to mean ± std gets the note once."""
    rows = [{"method": "ours", "acc (%)": "90.00 ± 1.00", "total ε (incl. search)": 1.0}]
    table = Table(["method", "acc (%)", "total ε (incl. search)"], rows, "cap")
    assert table.rendered_notes() == [PER_RUN_EPS_NOTE]
    for text in (table.to_markdown(), table.to_html(), table.to_latex()):
        assert "ε per run" in text or "$\\varepsilon$ per run" in text
    assert table.notes == []  # rendering does not change the table
    said = Table(table.columns, rows, "ε per run: said already")
    assert said.rendered_notes() == []
    assert Table(["method", "total ε"], [{"method": "a", "total ε": 1.0}]).rendered_notes() == []  # no mean ± std
    assert Table(["acc (%)"], rows).rendered_notes() == []  # no ε


def test_design_note_scopes():
    row = {"dataset": "mnist", "extractor": "efficientnet_lite0", "method_id": "oso_dpsgd"}
    ls_row = {"dataset": "mnist", "extractor": "efficientnet_lite0", "_method": "linear_scaling"}
    tweets = {"dataset": "tweets", "extractor": "minilm_l6", "method_id": "grid_oracle"}
    assert note_applies("extractors.efficientnet_lite0.resolution", row)
    assert not note_applies("extractors.efficientnet_lite0.resolution", tweets)
    assert note_applies("datasets.tweets.max_train", tweets) and not note_applies("datasets.tweets.max_train", row)
    assert note_applies("baselines.oso_dpsgd.steps", row) and not note_applies("baselines.oso_dpsgd.steps", tweets)
    assert not note_applies("baselines.oso_dpsgd.steps", ls_row)  # the rule reads no baseline setting
    assert note_applies("baselines.grid.eta_num", tweets) and not note_applies("baselines.grid.eta_num", row)
    assert note_applies("linear_scaling.stage_eps", ls_row) and not note_applies("linear_scaling.stage_eps", row)
    assert note_applies("search_space.eta", row) and note_applies("search_space.eta", ls_row)  # every method
    assert not note_applies("language.studies", row) and note_applies("language.studies", {"study": "x"})
    cfg = {"extractors": {"syn_cnn": {"pretrain": "syn_cnn"}, "efficientnet_lite0": {"kind": "efficientnet_lite0_packaged"}}}
    assert note_applies("pretraining.syn_cnn.lr", {"extractor": "syn_cnn"}, cfg)
    assert not note_applies("pretraining.syn_cnn.lr", row, cfg)
    assert note_applies("seeds", {})  # unknown scope: labelled (conservative)
    assert config_value(cfg, "extractors.syn_cnn.pretrain") == (True, "syn_cnn")
    assert config_value(cfg, "extractors.nope") == (False, None)
    assert config_value({"studies": [{"dataset": "mnist"}]}, "studies.0.dataset") == (True, "mnist")


def test_apply_design_notes_labels_rows_caption_and_notes():
    cfg = {
        "extractors": {"efficientnet_lite0": {"resolution": 64}},
        "design_notes": {"extractors.efficientnet_lite0.resolution": "picked on MNIST", "search_space.typo": "gone"},
    }
    rows = [{"dataset": "mnist", "extractor": "efficientnet_lite0"}, {"dataset": "tweets", "extractor": "minilm_l6"}]
    table = apply_design_notes(Table(["dataset", "extractor"], rows, "cap"), cfg)
    assert table.columns[-1] == PRIVATE_DESIGN_COLUMN
    assert rows[0][PRIVATE_DESIGN_COLUMN] == "extractors.efficientnet_lite0.resolution, search_space.typo"
    assert rows[1][PRIVATE_DESIGN_COLUMN] == "search_space.typo"
    assert table.caption.startswith("cap ") and "chosen on private data (not accounted)" in table.caption
    res, typo = table.notes
    assert "resolution = 64: picked on MNIST [rows of mnist × efficientnet_lite0]" in res
    assert "(not a key of this config): gone [every row]" in typo
    assert "chosen on private data" in table.to_latex() and "picked on MNIST" in table.to_html()
    # nothing chosen on private data: the table is left as it was
    plain = apply_design_notes(Table(["dataset"], [{"dataset": "mnist"}], "cap"), {"design_notes": {}})
    assert plain.columns == ["dataset"] and plain.caption == "cap" and plain.notes == [] and plain.rows == [{"dataset": "mnist"}]


def test_linear_scaling_make_labels_settings_chosen_on_private_data(tmp_path):
    paths = []
    for i, r in enumerate([ls_result(1.0, 0, 0.9), ls_result(1.0, 0, 0.7, dataset="tweets", extractor="minilm_l6")]):
        paths.append(tmp_path / f"{i}.json")
        write_json(paths[-1], r)
    cfg = {"design_notes": {"extractors.efficientnet_lite0.resolution": "picked on MNIST"}}
    out = {k: tmp_path / f"ls.{k}" for k in ("md", "csv", "png")}
    linear_scaling.make([str(p) for p in paths], [], md=str(out["md"]), csv_path=str(out["csv"]), figure=str(out["png"]), config=cfg)
    md = out["md"].read_text()
    assert "picked on MNIST" in md and PRIVATE_DESIGN_COLUMN in md
    csv_lines = out["csv"].read_text().splitlines()
    assert PRIVATE_DESIGN_COLUMN in csv_lines[0]
    assert csv_lines[1].endswith("extractors.efficientnet_lite0.resolution") and csv_lines[2].endswith(",")


def test_selection_noise_that_dwarfs_the_training_size_is_warned_in_the_table():
    from dphpo.report.tables import selection_noise_notes

    def record(dataset, n):
        return {"selection": {"rule": "noisy_train_accuracy", "noise_std": 300.0},
                "provenance": {"dataset": dataset, "extractor": "raw", "feature_cache": {"public_n_train": n}}}

    notes = selection_noise_notes([record("digits", 1438), record("mnist", 60000)])
    assert len(notes) == 1 and "digits × raw" in notes[0] and "±21 points" in notes[0]


def test_a_diverged_language_run_is_a_dash_or_infinity_not_a_crash():
    from dphpo.report import language

    def record(metric, seed):
        return {"method": "linear_scaling", "test_metric": metric, "total_eps": 1.0, "total_delta": 1e-5,
                "target": {"eps": 1.0}, "released": {"r": 2.0}, "selection": {"rule": "noisy_train_accuracy"},
                "provenance": {"study": "wikitext", "seed": seed}, "private": True}

    # perplexity: NaN is stored as null, infinity as "inf"
    assert language.summary([record(None, 0), record(30.0, 1)], 1.0)["metric"] == "–"
    assert language.summary([record("inf", 0), record(30.0, 1)], 1.0)["metric"] == "∞"
    assert language.summary([record(20.0, 0), record(30.0, 1)], 1.0)["metric"] == "25.00 ± 7.07"
