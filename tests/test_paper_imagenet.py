"""Plans and builders of the ImageNet rows (Panda et al. Table 12, Fig. 2 tabulated, Table 10 with several
studies): fast, from config dicts and hand-written release records; no workflow run."""

from __future__ import annotations

import math
from pathlib import Path

import yaml

from dphpo.report import figures, paper, plan, specs
from dphpo.report.tables import OVERLAP_COLUMN

REPO = Path(__file__).resolve().parents[1]
JOBS = [("imagenet", "vit", "mehta"), ("cifar10", "vit", "mehta")]


def _config(**section) -> dict:
    return {
        "studies": [{"dataset": "imagenet", "extractor": "vit", "pretraining_overlap": "as Panda et al."}, {"dataset": "cifar10", "extractor": "vit"}],
        "extractors": {"vit": {"kind": "timm"}},
        "privacy": {"target_eps": [0.5, 1, 2], "delta": 1e-5},
        "seeds": [0],
        "paper": section,
    }


def test_table12_has_a_row_per_target_and_an_infinity_row_reading_ours_mehta_and_the_reference():
    tp = plan.plan(_config(table12={"dataset": "imagenet", "extractor": "vit", "eps": [0.5, 1, 10]}), "table12", JOBS)
    assert [r.key["ε"] for r in tp.rows] == [0.5, 1.0, 10.0, math.inf]
    assert set(tp.rows[0].sources) == {"ours", "mehta"} and set(tp.rows[-1].sources) == {"ref"}
    assert "/imagenet/vit/mehta/default/seed0/eps0.5/" in tp.rows[0].sources["mehta"].files[0]
    assert tp.rows[2].sources["ours"].need.startswith("privacy.target_eps: add 10")
    assert "rules linear_scaling_stage/linear_scaling_final produces" in tp.rows[2].sources["ours"].need


def test_figure2_reads_its_linear_scaling_variant_and_default_mehta():
    cfg = _config(figure2={"dataset": "imagenet", "extractor": "vit", "variant": "shared", "eps": [1]})
    cfg["variants"] = {"shared": {"linear_scaling": {"budget_mode": "absolute"}}}
    row = plan.plan(cfg, "figure2", JOBS).rows[0]
    assert "/linear_scaling/shared/" in row.sources["ours"].files[0] and "/mehta/default/" in row.sources["mehta"].files[0]


def test_figure2_of_a_variant_with_its_own_targets_names_that_list_where_a_target_is_missing():
    cfg = _config(figure2={"dataset": "imagenet", "extractor": "vit", "variant": "shared", "eps": [0.5, 1, 2]})
    cfg["variants"] = {"shared": {"linear_scaling": {"budget_mode": "absolute"}, "privacy": {"target_eps": [1, 2]}}}
    rows = plan.plan(cfg, "figure2", JOBS).rows
    assert rows[0].sources["ours"].need.startswith("variants.shared.privacy.target_eps: add 0.5")
    assert "rules linear_scaling_stage/linear_scaling_target produces" in rows[0].sources["ours"].need  # its per-target job
    assert rows[0].sources["mehta"].ok  # the baseline runs at every target of the study
    assert "/linear_scaling/shared/seed0/eps1/" in rows[1].sources["ours"].files[0]
    # its figure reads the targets the variant runs and says what the others need
    src = figures.sources(cfg, "figure2", method_jobs=JOBS)
    assert [f.split("/")[-2] for f in src["ours"].files] == ["eps1", "eps2"]
    assert src["ours"].need.startswith("variants.shared.privacy.target_eps: add 0.5")
    assert len(src["mehta"].files) == 3 and src["mehta"].ok and src["ref"].files[0].endswith("nonprivate/result.json")


def test_missing_sections_say_what_they_need():
    for name in ("table12", "figure2"):
        tp = plan.plan(_config(), name, JOBS)
        assert tp.needs and f"paper.{name}" in tp.needs[0]


def test_table10_takes_a_list_of_studies():
    tp = plan.plan(_config(table10=[{"dataset": "imagenet", "extractor": "vit"}, {"dataset": "cifar10", "extractor": "vit"}]), "table10", JOBS)
    assert [(r.key["dataset"], r.key["variant"]) for r in tp.rows][:4] == [
        ("imagenet", "default"), ("imagenet", "linear3"), ("imagenet", "quadratic3"), ("cifar10", "default")
    ]


def _result(method: str, eps: float, acc: float, budget_mode: str = "fraction") -> dict:
    return {
        "method": method, "test_accuracy": acc, "total_eps": eps * 0.99, "target": {"eps": eps}, "private": True,
        "selection": {"rule": "noisy_train_accuracy", "private": True}, "privacy": {"total": {"accountant": "gdp_closed_form"}},
        "search": {"config": {"budget_mode": budget_mode}}, "released": {"r": 12.5},
    }


class FakeResults(paper.Results):
    def __init__(self, by_file: dict[str, dict]):
        super().__init__()
        self._cache = by_file


def test_table12_builder_shows_ours_mehta_quoted_columns_and_the_overlap_label():
    cfg = _config(table12={"dataset": "imagenet", "extractor": "vit", "eps": [1]})
    p = paper.Paper(cfg, JOBS)
    tp = plan.PLANS["table12"](p)
    files = {tp.rows[0].sources["ours"].files[0]: _result("linear_scaling", 1.0, 0.85),
             tp.rows[0].sources["mehta"].files[0]: _result("mehta", 1.0, 0.80),
             tp.rows[1].sources["ref"].files[0]: {"test_accuracy": 0.9, "private": False}}
    table = paper.BUILDERS["table12"](p, tp, FakeResults(files))
    paper.apply_design_notes(table, cfg)
    first, inf = table.rows
    assert first["ours (%)"].startswith("85.00") and first["Mehta et al. 2023b, run here (%)"].startswith("80.00")
    assert first["Mehta et al. 2023b (%), quoted"] == 81.1 and first["Mehta et al. 2023a (%), quoted"] == 86.8
    assert first["Panda et al. ours / r"] == "83.2 / 1100" and first["ours r = η·T"] == 12.5
    assert first["search"].startswith("one per target") and inf["ours (%)"] == 90.0
    assert first[OVERLAP_COLUMN] == "imagenet × vit" and "QUOTED" in table.caption


def _built(name: str, dataset: str):
    """Table `name` on one study at ε = 1, from hand-written records, labelled as paper.build labels it."""
    cfg = _config(**{name: {"dataset": dataset, "extractor": "vit", "eps": [1]}})
    p = paper.Paper(cfg, JOBS)
    tp = plan.PLANS[name](p)
    files = {tp.rows[0].sources["ours"].files[0]: _result("linear_scaling", 1.0, 0.85),
             tp.rows[0].sources["mehta"].files[0]: _result("mehta", 1.0, 0.80),
             tp.rows[1].sources["ref"].files[0]: {"test_accuracy": 0.9, "private": False}}
    return paper.apply_design_notes(paper.BUILDERS[name](p, tp, FakeResults(files)), cfg)


def test_table12_and_figure2_name_the_study_they_read_and_claim_no_overlap_it_does_not_have():
    for name, head in (("table12", "Panda et al. Table 12"), ("figure2", "Panda et al. Figure 2, tabulated")):
        title = specs.title(name)
        assert "ImageNet accuracy" not in title and "(Panda et al.: ImageNet)" in title  # the paper's setting, not a claim
        table = _built(name, "cifar10")
        assert table.caption.startswith(f"{head} on cifar10 × vit (δ = 1e-05)")
        assert OVERLAP_COLUMN not in table.columns and all(OVERLAP_COLUMN not in r for r in table.rows)
        assert "public/private overlap" in specs.get(name).caption  # the report caption: marked only where it applies
        table = _built(name, "imagenet")
        assert table.caption.startswith(f"{head} on imagenet × vit (") and table.rows[0][OVERLAP_COLUMN] == "imagenet × vit"


def test_paper_yaml_names_the_imagenet_rows():
    cfg = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    imagenet = [s for s in cfg["studies"] if s["dataset"] == "imagenet"]
    assert len(imagenet) == 1 and imagenet[0]["pretraining_overlap"]
    study = {"dataset": "imagenet", "extractor": imagenet[0]["extractor"]}
    p = cfg["paper"]
    assert study in p["table3"] and study in p["table10"]
    assert {k: p["table12"][k] for k in study} == study and {k: p["figure2"][k] for k in study} == study
    assert all(any(math.isclose(x, t) for t in cfg["privacy"]["target_eps"]) for x in p["table12"]["eps"] + p["figure2"]["eps"])
