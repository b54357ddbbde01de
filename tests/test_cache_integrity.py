"""A truncated or altered feature cache or result file is detected with a message naming the file
(issues 9 and 10): real caches of scikit-learn digits and real result files of the non-private
reference, damaged the ways a killed writer or a hand edit damages them."""

import json
import os
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml

from dphpo.errors import FeatureCacheError, OutputFileError
from dphpo.features import FORMAT_VERSION, build_feature_cache, load_feature_cache, read_cache_attrs
from dphpo.hpo import nonprivate
from dphpo.io import SEAL_KEY, TMP_SUFFIX, atomic_path, read_json, remove_orphan_temporaries, write_json
from dphpo.report import comparison, linear_scaling
from dphpo.studies import config as study_config
from dphpo.studies import trainers, writer

TINY = Path(__file__).resolve().parent / "configs" / "tiny.yaml"


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    """(config, path) of a real digits × raw cache."""
    root = tmp_path_factory.mktemp("digits")
    config = yaml.safe_load(TINY.read_text()) | {"data_dir": str(root / "data")}
    path = root / "features.h5"
    build_feature_cache("digits", "raw", config, path, progress=False)
    return config, path


@pytest.fixture
def cache(digits, tmp_path):
    """A fresh copy of the digits cache to damage."""
    config, path = digits
    copy = tmp_path / "raw.h5"
    copy.write_bytes(path.read_bytes())
    return config, copy


def test_intact_cache_loads(cache):
    config, path = cache
    prepared = trainers.load_features(config, path, "digits", "raw")
    assert prepared.num_classes == 10 and read_cache_attrs(path)["format_version"] == FORMAT_VERSION


@pytest.mark.parametrize("key,value", [("num_classes", 11), ("dataset_checksum", "0" * 64),
                                       ("upstream_privacy", json.dumps({"eps": 0.0}))])
def test_edited_result_attribute_is_refused(cache, key, value):
    # issue 10.6: num_classes 10 -> 11 gave 11-class models with content_sha256 unchanged
    config, path = cache
    with h5py.File(path, "a") as f:
        f.attrs[key] = value
    with pytest.raises(FeatureCacheError, match=rf"corrupt feature cache {path}: content sha256 .*{key}"):
        trainers.load_features(config, path, "digits", "raw")


def test_edited_array_is_refused(cache):
    config, path = cache
    with h5py.File(path, "a") as f:
        f["test/labels"][0] = (f["test/labels"][0] + 1) % 10
    with pytest.raises(FeatureCacheError, match=rf"corrupt feature cache {path}: content sha256"):
        trainers.load_features(config, path, "digits", "raw")


@pytest.mark.parametrize("attr", ["public_dataset", "checkpoint_sha256"])
def test_an_edited_attribute_that_reaches_a_release_is_refused(cache, attr):
    """Audit: `public_dataset` (copied into every release as `pretraining_data`, from which a bundle decides
    whether its ε is ∞) could be edited and the cache still verified."""
    config, path = cache
    with h5py.File(path, "a") as f:
        f.attrs[attr] = "edited"
    with pytest.raises(FeatureCacheError, match=rf"corrupt feature cache {path}: content sha256"):
        trainers.load_features(config, path, "digits", "raw")


@pytest.mark.parametrize("keep", [0.5, 0.95])
def test_truncated_cache_is_refused(cache, keep):
    config, path = cache
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(FeatureCacheError, match=rf"corrupt feature cache {path}.*delete it and rerun"):
        trainers.load_features(config, path, "digits", "raw")


def test_cache_of_an_older_format_says_so(cache):
    config, path = cache
    with h5py.File(path, "a") as f:
        f.attrs["format_version"] = 1
    with pytest.raises(FeatureCacheError, match=rf"{path} has format_version 1, .* reads {FORMAT_VERSION}"):
        load_feature_cache(path)


# --- result files -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def result_file(digits, tmp_path_factory):
    """A real result.json (non-private reference on the digits cache) and its record."""
    config, path = digits
    trainer, _ = trainers.build_trainer(config, {"dataset": "digits", "extractor": "raw"}, path)
    result = nonprivate.run(trainer, study_config.search_space(config), progress=False)
    out = tmp_path_factory.mktemp("runs")
    prov = writer.provenance(config, trainer, result, dataset="digits", extractor="raw", method="nonprivate")
    writer.write_result(result, out / "result.json", out / "model.npz", prov, out / "internal.json")
    return out / "result.json"


@pytest.fixture
def result(result_file, tmp_path):
    copy = tmp_path / "runs" / "digits" / "raw" / "nonprivate" / "result.json"
    copy.parent.mkdir(parents=True)
    copy.write_text(result_file.read_text())
    return copy


def _make_tables(result, tmp_path):
    out = tmp_path / "tables"
    linear_scaling.make([], [str(result)], md=str(out / "ls.md"), csv_path=str(out / "ls.csv"),
                        figure=str(out / "ls.png"))
    comparison.make([str(result)], [], md=str(out / "c.md"), csv_path=str(out / "c.csv"),
                    tex=str(out / "c.tex"), figure=str(out / "c.png"))


def test_result_is_sealed_and_reads_back(result):
    raw = json.loads(result.read_text())
    assert len(raw[SEAL_KEY]) == 64
    back = read_json(result)
    assert SEAL_KEY not in back and back["test_accuracy"] == raw["test_accuracy"]


def test_truncated_result_is_named_by_the_table_rules(result, tmp_path):
    text = result.read_text()
    result.write_text(text[: len(text) // 2])
    with pytest.raises(OutputFileError, match=rf"{result} is not a complete JSON file .*delete it and rerun"):
        _make_tables(result, tmp_path)
    assert not (tmp_path / "tables" / "ls.md").exists()


def test_altered_result_is_named_by_the_table_rules(result, tmp_path):
    record = json.loads(result.read_text())
    record["test_accuracy"] = 0.999  # a hand edit, seal kept
    result.write_text(json.dumps(record, indent=2))
    with pytest.raises(OutputFileError, match=rf"{result} was altered after it was written"):
        _make_tables(result, tmp_path)


def test_result_whose_seal_was_removed_is_refused_like_an_altered_one(result, tmp_path):
    record = json.loads(result.read_text())
    record.pop(SEAL_KEY)
    record["test_accuracy"] = 0.9747  # a hand edit that also deletes the seal
    result.write_text(json.dumps(record, indent=2))
    with pytest.raises(OutputFileError, match=rf"{result} has no {SEAL_KEY}"):
        _make_tables(result, tmp_path)
    assert not (tmp_path / "tables" / "ls.md").exists()


def test_missing_result_is_named(tmp_path):
    with pytest.raises(OutputFileError, match=r"missing file .*result.json"):
        read_json(tmp_path / "result.json")


# --- temporaries of killed writers ----------------------------------------------------------------


def test_writer_removes_the_orphan_of_its_own_target(tmp_path):
    target = tmp_path / "result.json"
    orphan = tmp_path / f".result.json.abc123{TMP_SUFFIX}"  # what a writer killed mid-write leaves
    other = tmp_path / f".other.json.abc123{TMP_SUFFIX}"
    orphan.write_text('{"half')
    other.write_text('{"half')
    write_json(target, {"a": 1})
    assert not orphan.exists() and other.exists() and read_json(target) == {"a": 1}
    with atomic_path(target) as tmp:
        assert tmp.name.startswith(".result.json.") and tmp.name.endswith(TMP_SUFFIX)


def test_old_orphans_are_removed_young_ones_and_other_files_kept(tmp_path):
    old = tmp_path / "runs" / f".result.json.x{TMP_SUFFIX}"
    young = tmp_path / "runs" / f".model.npz.y{TMP_SUFFIX}"
    foreign = tmp_path / "runs" / "notes.tmp"
    old.parent.mkdir()
    for p in (old, young, foreign):
        p.write_text("x")
    day_ago = time.time() - 2 * 24 * 3600
    os.utime(old, (day_ago, day_ago))
    assert remove_orphan_temporaries(tmp_path, min_age_s=24 * 3600) == [old]
    assert young.exists() and foreign.exists() and not old.exists()
    np.testing.assert_equal(sorted(p.name for p in old.parent.iterdir()), sorted([young.name, foreign.name]))
