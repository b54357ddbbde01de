"""A paper table is one spec (dphpo.report.specs.TABLES): every table the `paper_table` rule can build
has a plan, a builder, a title, report labels and a caption, all read from its spec, and the wildcard
accepts exactly those (docs/architecture.md, "A new table of the paper"; tests/test_table_specs.py)."""

from pathlib import Path

from dphpo.report import paper, plan, specs

ROOT = Path(__file__).resolve().parents[1]


def captions() -> set[str]:
    return {name for name in specs.names("paper") if specs.get(name).caption}


def test_every_paper_table_has_one_entry_in_each_registry_and_a_caption():
    tables = set(plan.TABLES)
    assert set(plan.PLANS) == tables
    assert set(paper.BUILDERS) == tables
    assert set(paper.TABLE_TITLES) == tables
    assert set(plan.TABLE_LABELS) == tables
    assert captions() == tables


def test_the_report_labels_name_the_table_they_caption():
    for name, labels in plan.TABLE_LABELS.items():
        assert set(labels) == {"item", "reproduces"} and labels["item"], name
        assert paper.TABLE_TITLES[name].startswith(labels["item"].split(" (")[0]) or name == "dp_continual", name


def test_the_rule_reads_the_labels_from_report_not_from_a_copy():
    smk = (ROOT / "workflow" / "rules" / "paper.smk").read_text()
    assert "report_specs.report_labels(w.table)" in smk and "PAPER_TABLE_LABELS" not in smk
