"""One table system (issue 28, item 3): every table the workflow writes is one `TableSpec` in
dphpo.report.specs.TABLES, and its title, report labels and report caption come from there alone; a
new table is one spec (and its plan and builder functions), with no other registry to edit."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from types import SimpleNamespace

import jinja2
import pytest

from dphpo.report import comparison, language, paper, plan, specs
from dphpo.report.plan import RowPlan, Source, TablePlan
from dphpo.report.tables import Table

ROOT = Path(__file__).resolve().parents[1]
STUDY_TABLES = {"hpo_comparison", "linear_scaling", "study_provenance", "provenance"}
CONFIG = {
    # no study: every row of every paper table says what it needs, and no result file is read
    "studies": [],
    "privacy": {"delta": 1e-5, "target_eps": [1.0]},
    "paper": {"eps": 1},
    "seeds": [0],
}


def render(rst: str, caption: str, table: str, config: dict) -> str:
    """A report caption as Snakemake renders it (snakemake.report: jinja2, trim_blocks, lstrip_blocks)."""
    snakemake = SimpleNamespace(params=SimpleNamespace(caption=caption), wildcards=SimpleNamespace(table=table), config=config)
    return jinja2.Environment(trim_blocks=True, lstrip_blocks=True).from_string(rst).render(snakemake=snakemake)


def test_every_table_the_workflow_builds_has_exactly_one_spec():
    assert specs.names("paper") == plan.TABLES == tuple(plan.PLANS) == tuple(paper.BUILDERS) == tuple(paper.TABLE_TITLES)
    assert specs.names("language") == language.TABLES == tuple(language.BUILDERS) == tuple(language.TITLES)
    assert set(specs.names("study")) == STUDY_TABLES
    assert len(specs.TABLES) == len(plan.TABLES) + len(language.TABLES) + len(STUDY_TABLES)
    for name, spec in specs.TABLES.items():
        assert spec.name == name and spec.kind in specs.KINDS and spec.title and spec.item and spec.reproduces and spec.caption


def test_the_kinds_registries_are_the_specs_functions():
    for name in plan.TABLES:
        assert plan.PLANS[name] is getattr(plan, specs.get(name).plan)
        assert paper.BUILDERS[name] is getattr(paper, specs.get(name).builder)
        assert plan.TABLE_LABELS[name] == specs.report_labels(name)
    for name in language.TABLES:
        assert language.BUILDERS[name] is getattr(language, specs.get(name).builder)
        assert getattr(language, specs.get(name).plan) is language.inputs
    for name in STUDY_TABLES:  # the study tables' specs name real functions
        module, _, function = specs.get(name).builder.rpartition(".")
        assert callable(getattr(importlib.import_module(module), function))


def test_one_home_of_the_method_labels():
    assert plan.METHOD_LABELS is specs.METHOD_LABELS
    assert language.METHOD_LABELS == {**specs.METHOD_LABELS, **specs.KIND_METHOD_LABELS["language"]}
    assert comparison.LABELS is specs.COMPARISON_LABELS
    # the printed words of the rows the paper tables write
    assert plan.METHOD_LABELS["random_search"] == "Random search"
    assert language.METHOD_LABELS["random_search"] == "Random search (one run, full budget)"


@pytest.fixture
def no_evaluation(monkeypatch):
    """Table 5 reads its evaluation job's sealed record: none, here."""
    monkeypatch.setattr(paper, "read_json", lambda path: {"rows": []})


@pytest.mark.parametrize("name", specs.names("paper"))
def test_a_paper_table_prints_its_spec_title(name, no_evaluation):
    table = paper.build(CONFIG, name, method_jobs=[])
    assert table.caption.startswith(specs.title(name) + ". ")
    assert f"{specs.title(name)}. " in table.to_markdown()


@pytest.mark.parametrize("name", specs.names("language"))
def test_a_language_table_prints_its_spec_title(name):
    table = language.build(CONFIG, name)
    assert table.caption.startswith(specs.title(name) + ". ")


def test_a_study_specs_caption_is_its_report_caption():
    """The study tables' rules (baselines.smk, report.smk, paper.smk) name an .rst file: the spec holds its text."""
    files = {"hpo_comparison": "hpo_comparison_table.rst", "linear_scaling": "linear_scaling_table.rst",
             "study_provenance": "paper_provenance.rst", "provenance": "paper_provenance.rst"}
    for name, file in files.items():
        text = (ROOT / "workflow" / "report" / file).read_text()
        assert " ".join(text.split()) == " ".join(specs.get(name).caption.split()), name
    rules = "".join((ROOT / "workflow" / "rules" / f).read_text() for f in ("baselines.smk", "report.smk", "paper.smk"))
    for name in STUDY_TABLES - {"provenance"}:
        labels = specs.report_labels(name)
        assert f'labels={{"item": "{labels["item"]}", "shows": "{labels["shows"]}"}}' in rules, name


@pytest.mark.parametrize("rule, rst", [("paper_table", "paper_table.rst"), ("language_table", "language_table.rst")])
def test_the_table_rules_take_labels_and_caption_from_the_spec(rule, rst):
    smk = (ROOT / "workflow" / "rules").glob("*.smk")
    body = next(t for t in (f.read_text() for f in smk) if f"rule {rule}:" in t).split(f"rule {rule}:", 1)[1].split("\nrule ", 1)[0]
    assert "labels=lambda w: report_specs.report_labels(w.table)" in body
    assert "caption=lambda w: report_specs.report_caption(w.table, config)" in body
    template = (ROOT / "workflow" / "report" / rst).read_text()
    assert "{% if" not in template and "{{ snakemake.params.caption }}" in template


def test_every_paper_tables_report_caption_renders_from_its_spec():
    template = (ROOT / "workflow" / "report" / "paper_table.rst").read_text()
    config = {"paper": {"eps": 0.7}, "privacy": {"delta": 1e-06}}
    for name in specs.names("paper") + specs.names("language"):
        caption = specs.report_caption(name, config)
        out = render(template, caption, name, config)
        assert out.strip() == caption and "{" not in caption, name
        assert specs.report_labels(name) == {"item": specs.get(name).item, "reproduces": specs.get(name).reproduces}
    # config values render where the caption names them
    assert "target ε = 0.7, δ = 1e-06;" in specs.report_caption("table2", config)
    assert "Target ε = 0.7." in specs.report_caption("table3", config)
    assert "; table9):" in specs.report_caption("table9", config)


def test_a_new_table_is_one_spec(monkeypatch, no_evaluation):
    """A toy paper table and a toy language table: registered in TABLES alone, each is planned, built
    with its title and labelled and captioned in the report."""

    def plan_toy(p):
        return TablePlan("toy", [RowPlan({"method": "toy"}, {"run": Source(need="nothing here")})])

    def build_toy(p, tp, res):
        return Table(["method"], [dict(r.key) for r in tp.rows], f"A toy at ε = {p.eps:g}.", [])

    def build_toy_language(config, rd):
        return Table(["study"], [{"study": "toy"}], "A language toy.")

    toys = [
        specs.TableSpec("toy", "paper", title="Table 99: a toy", item="Table 99", reproduces="nothing",
                        caption="A toy at ε = {eps}.", plan=plan_toy, builder=build_toy),
        specs.TableSpec("toy_language", "language", title="Table 98: a language toy", item="Table 98", reproduces="nothing",
                        caption="A language toy ({table}).", plan=language.inputs, builder=build_toy_language),
    ]
    monkeypatch.setattr(specs, "TABLES", {**specs.TABLES, **{t.name: t for t in toys}})

    assert plan.plan(CONFIG, "toy", []).rows[0].needs == ["nothing here"]
    assert plan.inputs(CONFIG, "toy", []) == {"results": [], "other": []}
    table = paper.build(CONFIG, "toy", method_jobs=[])
    assert table.caption == "Table 99: a toy. A toy at ε = 1." and table.rows == [{"method": "toy"}]
    assert language.build(CONFIG, "toy_language").caption == "Table 98: a language toy. A language toy."

    assert specs.report_labels("toy") == {"item": "Table 99", "reproduces": "nothing"}
    template = (ROOT / "workflow" / "report" / "paper_table.rst").read_text()
    assert render(template, specs.report_caption("toy", CONFIG), "toy", CONFIG).strip() == "A toy at ε = 1."
    assert specs.report_caption("toy_language", CONFIG) == "A language toy (toy_language)."


def test_an_unknown_table_is_named():
    with pytest.raises(ValueError, match=r"unknown paper table 'table99'; known: table2, "):
        plan.plan(CONFIG, "table99")
    with pytest.raises(ValueError, match=r"unknown language table 'table2'"):
        language.build(CONFIG, "table2")
    assert re.search(r"\bTABLES\b", (ROOT / "src" / "dphpo" / "report" / "specs.py").read_text())
