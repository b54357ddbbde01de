"""Panda et al. Table 16 (ImageNet-21k models on CIFAR10/100 against prior work): paper.table16 in either form
(one extractor on several datasets, or one {dataset, extractor} row per study), its plan and its builder; fast,
from config dicts and hand-written release records, no workflow run."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from dphpo.errors import ConfigError
from dphpo.report import paper, plan
from dphpo.report.published import SEED000
from dphpo.studies.validate import validate_config

REPO = Path(__file__).resolve().parents[1]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
TINY = REPO / "tests" / "configs" / "tiny.yaml"
JOBS = [("cifar10", "beitv2", "mehta"), ("imagenet", "eva02_l", "mehta")]


def _config(table16: dict) -> dict:
    return {
        "studies": [{"dataset": "cifar10", "extractor": "beitv2"}, {"dataset": "imagenet", "extractor": "eva02_l"}],
        "extractors": {"beitv2": {"kind": "timm"}, "eva02_l": {"kind": "timm"}},
        "privacy": {"target_eps": [0.1, 1], "delta": 1e-5},
        "seeds": [0],
        "baselines": {"methods": ["mehta"]},
        "paper": {"table16": table16},
    }


def _validated(table16) -> dict:
    cfg = yaml.safe_load(TINY.read_text())
    cfg["paper"] = {"table16": copy.deepcopy(table16)}
    validate_config(cfg, SCHEMA, create_key=False)
    return cfg


def test_schema_takes_one_extractor_for_all_datasets_or_one_row_per_study():
    old = _validated({"extractor": "raw", "datasets": ["digits"]})
    assert old["paper"]["table16"] == {"extractor": "raw", "datasets": ["digits"], "eps": [0.1, 1]}
    rows = _validated(
        {
            "rows": [{"dataset": "digits", "extractor": "raw"}, {"dataset": "imagenet", "extractor": "eva02_l"}],
            "eps": [1],
        }
    )
    assert rows["paper"]["table16"]["eps"] == [1] and len(rows["paper"]["table16"]["rows"]) == 2


@pytest.mark.parametrize(
    "table16",
    [
        {"extractor": "raw", "datasets": ["digits"], "rows": [{"dataset": "digits", "extractor": "raw"}]},  # both forms
        {"extractor": "raw", "rows": [{"dataset": "digits", "extractor": "raw"}]},  # mixed
        {"datasets": ["digits"]},  # no extractor
        {"rows": []},
        {"rows": [{"dataset": "digits"}]},  # a row without its extractor
        {"rows": [{"dataset": "digits", "extractor": "raw", "variant": "x"}]},
        {"rows": [{"dataset": "digits", "extractor": "raw"}], "eps": [0]},
        "raw",  # not a mapping: refused by type before any default is filled in
    ],
)
def test_schema_refuses_a_mixed_or_incomplete_table16_naming_it(table16):
    with pytest.raises(ConfigError, match=r"paper\.table16"):
        _validated(table16)


def test_rows_of_different_extractors_read_their_own_studies():
    tp = plan.plan(
        _config(
            {"rows": [{"dataset": "cifar10", "extractor": "beitv2"}, {"dataset": "imagenet", "extractor": "eva02_l"}]}
        ),
        "table16",
        JOBS,
    )
    assert [(r.key["dataset"], r.key["extractor"]) for r in tp.rows] == [("cifar10", "beitv2"), ("imagenet", "eva02_l")]
    for row in tp.rows:
        where = f"/{row.key['dataset']}/{row.key['extractor']}/"
        assert set(row.sources) == {"eps0.1", "eps1", "ref"} and not row.needs
        assert all(where in f for src in row.sources.values() for f in src.files)
    assert "/imagenet/eva02_l/linear_scaling/default/seed0/eps0.1/" in tp.rows[1].sources["eps0.1"].files[0]


def test_both_forms_plan_the_same_files_and_paper_yaml_keeps_its_studies():
    old = plan.plan(_config({"extractor": "beitv2", "datasets": ["cifar10", "imagenet"]}), "table16", JOBS)
    new = plan.plan(
        _config(
            {"rows": [{"dataset": "cifar10", "extractor": "beitv2"}, {"dataset": "imagenet", "extractor": "beitv2"}]}
        ),
        "table16",
        JOBS,
    )
    assert [r.key for r in old.rows] == [r.key for r in new.rows] and old.inputs() == new.inputs()
    assert old.all_needs() == new.all_needs()
    section = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())["paper"]["table16"]
    assert plan.table16_studies(section) == [("cifar10", "beitv2"), ("cifar100", "beitv2")]


def test_a_row_whose_study_is_not_configured_says_what_it_needs():
    tp = plan.plan(
        _config({"rows": [{"dataset": "cifar10", "extractor": "beitv2"}, {"dataset": "cifar100", "extractor": "vit"}]}),
        "table16",
        JOBS,
    )
    missing = tp.rows[1]
    assert missing.key["extractor"] == "vit" and not any(src.files for src in missing.sources.values())
    assert all(n.startswith("studies: add {dataset: cifar100, extractor: vit}") for n in missing.needs)
    assert not tp.rows[0].needs and all("cifar100" not in f for f in tp.inputs())
    p = paper.Paper(_config({"rows": [{"dataset": "cifar100", "extractor": "vit"}]}), JOBS)
    table = paper.BUILDERS["table16"](p, plan.PLANS["table16"](p), FakeResults({}))
    assert table.rows[0]["ε = 1 (%)"] is None and any(
        "studies: add {dataset: cifar100, extractor: vit}" in n for n in table.notes
    )


def _result(eps: float, acc: float) -> dict:
    return {
        "method": "linear_scaling",
        "test_accuracy": acc,
        "total_eps": eps * 0.99,
        "target": {"eps": eps},
        "private": True,
        "selection": {"rule": "noisy_train_accuracy", "private": True},
        "privacy": {"total": {"accountant": "gdp_closed_form"}},
    }


class FakeResults(paper.Results):
    def __init__(self, by_file: dict[str, dict]):
        super().__init__()
        self._cache = by_file


def test_builder_shows_each_rows_extractor_and_quotes_prior_work_only_for_its_datasets():
    cfg = _config(
        {"rows": [{"dataset": "cifar10", "extractor": "beitv2"}, {"dataset": "imagenet", "extractor": "eva02_l"}]}
    )
    p = paper.Paper(cfg, JOBS)
    tp = plan.PLANS["table16"](p)
    files = {}
    for row, acc in zip(tp.rows, (0.98, 0.80)):
        for x in (0.1, 1.0):
            files[row.sources[f"eps{x:g}"].files[0]] = _result(x, acc)
        files[row.sources["ref"].files[0]] = {"test_accuracy": acc + 0.01, "private": False}
    table = paper.BUILDERS["table16"](p, tp, FakeResults(files))
    ours, prior = table.rows[:2], table.rows[2:]
    assert [(r["dataset"], r["extractor"]) for r in ours] == [("cifar10", "beitv2"), ("imagenet", "eva02_l")]
    panda = " / ".join(f"{v:g}" for v in SEED000["table16"][("cifar10", "beitv2")])
    assert ours[0]["source"] == f"this run (Panda et al.: {panda})" and ours[1]["source"] == "this run"
    assert ours[1]["ε = 1 (%)"].startswith("80.00") and ours[1]["ε = ∞ (%)"] == 81.0
    # prior work for cifar10 only, quoted; Mehta et al. 2023a stays quoted although `mehta` (2023b) runs here
    assert {r["dataset"] for r in prior} == {"cifar10"} and len(prior) == 4
    assert all(r["source"].startswith("quoted from Panda et al. Table 16") for r in prior)
    assert [r["method"] for r in table.rows].count("Mehta et al. 2023a") == 1
    assert not any("2023b" in str(r.get("method")) for r in table.rows)
