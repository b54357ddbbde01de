"""The table writer shared by every report table: HTML pages and the order of labels."""

import pytest

from dphpo.io import write_json
from dphpo.report import paper
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
            path = paper.result_path("mnist", "raw", "random_search", "default", seed, eps)
            write_json(path, {"target": {"eps": eps}, "total_eps": eps, "total_delta": 1e-5, "provenance": {"seed": seed}})
            paths.append(path)
    (row,) = paper.provenance_table(paths).rows
    assert row["target ε"] == "0.5, 1.0, 8.0, 16.0"
    assert row["seeds"] == "0, 2, 10"
