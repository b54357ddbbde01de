"""A study on its extractor's public pretraining data (Panda et al.'s ImageNet-1k rows on ImageNet-21k
extractors): refused unless `studies[i].pretraining_overlap` acknowledges it; then every table row and
result provenance of the study names the overlap."""

from __future__ import annotations

import warnings

import pytest

from dphpo.data.overlap import OVERLAP_NOTE, overlap_record
from dphpo.errors import ConfigError
from dphpo.features.overlap import check_study_extractors
from dphpo.report.tables import OVERLAP_COLUMN, Table, apply_design_notes


def _config(**study_keys) -> dict:
    return {
        "extractors": {"vit": {"kind": "timm", "model": "vit_large_patch16_384.augreg_in21k_ft_in1k"}},
        "studies": [{"dataset": "cifar10", "extractor": "vit"}, {"dataset": "imagenet", "extractor": "vit", **study_keys}],
    }


def test_study_on_extractor_pretraining_data_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"studies\[1\]\.pretraining_overlap"):
        check_study_extractors(_config())


def test_acknowledged_overlap_passes_with_a_warning():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_study_extractors(_config(pretraining_overlap="Panda et al. Table 12"))
    assert any("covers the private fine-tuning only" in str(w.message) for w in caught)


def test_acknowledged_overlap_labels_rows_of_that_study_only():
    table = Table(["dataset", "extractor"], [{"dataset": "imagenet", "extractor": "vit"}, {"dataset": "cifar10", "extractor": "vit"}], "cap")
    apply_design_notes(table, _config(pretraining_overlap="Panda et al. Table 12"))
    assert OVERLAP_COLUMN in table.columns
    assert table.rows[0][OVERLAP_COLUMN] == "imagenet × vit" and table.rows[1][OVERLAP_COLUMN] is None
    assert OVERLAP_NOTE in table.caption and any("Panda et al. Table 12" in n for n in table.notes)


def test_tables_without_an_acknowledged_overlap_are_unchanged():
    table = Table(["dataset"], [{"dataset": "cifar10", "extractor": "vit"}], "cap")
    apply_design_notes(table, {"studies": [{"dataset": "cifar10", "extractor": "vit"}]})
    assert OVERLAP_COLUMN not in table.columns and OVERLAP_COLUMN not in table.rows[0] and table.caption == "cap"


def test_provenance_record_names_the_overlap():
    cfg = _config(pretraining_overlap="why")
    assert overlap_record(cfg, "imagenet", "vit") == {"acknowledged_by": "studies[].pretraining_overlap", "reason": "why", "note": OVERLAP_NOTE}
    assert overlap_record(cfg, "cifar10", "vit") is None
