"""Public/private overlap guards (dphpo.data.overlap): text deduplication between a public
pretraining corpus and the private corpora, and studies refused on their extractor's public
pretraining data."""

from __future__ import annotations

import copy
import re
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from dphpo.data.overlap import (
    INTERNAL_DROPPED,
    check_deduplicated,
    drop_public_duplicates,
    drop_test_texts,
    drop_texts,
    load_texts,
    normalize_text,
    shared_texts,
)
from dphpo.data.text import TextSplits, load_text
from dphpo.errors import ConfigError
from dphpo.features.overlap import check_public_checksum, check_study_extractors
from dphpo.features.pretrain import check_pretraining_config

ROOT = Path(__file__).resolve().parents[1]


def config(name: str) -> dict:
    return yaml.safe_load((ROOT / "config" / name).read_text())


# --------------------------------------------------------------------------------------------
# text


def test_normalize_text_folds_case_unicode_forms_and_whitespace():
    assert normalize_text("  Hello\t WORLD\n") == "hello world"
    assert normalize_text("ｈｅｌｌｏ　ｗｏｒｌｄ") == "hello world"  # full-width letters and space (NFKC)
    assert normalize_text(("Is it", "raining")) == normalize_text(("is  it", "Raining"))
    assert normalize_text("hello world!") != "hello world"


def test_synthetic_duplicates_are_dropped_from_the_public_side_and_counted():
    public = TextSplits("pub", ["Hello  World", "ｈｅｌｌｏ world", "unique"], ["HELLO WORLD\n", "other"],
                        np.array([0, 1, 2]), np.array([3, 4]))
    counts = drop_texts(public, {normalize_text("hello world")})
    assert counts == {"dropped_train": 2, "dropped_test": 1}
    assert public.train == ["unique"] and public.test == ["other"]
    assert public.y_train.tolist() == [2] and public.y_test.tolist() == [4]


def test_embedded_tweets_partitions_share_no_normalized_text_after_dedup():
    """Pretraining drops the public texts of the study's (public) test split; the study drops its private
    training texts that occur in the public corpus: afterwards the two share no normalized text."""
    lang = config("paper_embedded.yaml")["language"]
    public_specs = lang["pretrain"]["pydocs_tweets_gpt2"]["data"]
    studies = [s for s in lang["studies"] if s["model"].get("pretrain") == "pydocs_tweets_gpt2"]
    assert studies, "the embedded config pretrains pydocs_tweets_gpt2 for a study"
    whole = {k: v for k, v in studies[0]["data"].items() if k not in ("max_train", "max_test")}
    private = load_text(whole)
    before = load_texts(public_specs)
    after = load_texts(public_specs, studies=[s["data"] for s in studies])
    assert shared_texts(before, private), "the partitions alone share texts (equal once normalized, or with other labels)"
    test_only = TextSplits("test", [], list(private.test))
    assert shared_texts(before, test_only) and shared_texts(after, test_only) == set()
    dedup = after.source["dedup"]
    assert dedup["test_corpora"] == [{"name": "tweets", "partition": [1, 2]}]
    assert dedup["dropped_train"] == len(before.train) - len(after.train) > 0
    assert dedup["dropped_test"] == len(before.test) - len(after.test)
    record = drop_public_duplicates(private, public_specs)
    assert record[INTERNAL_DROPPED] > 0 and record["public_texts"] == len(shared_texts(before, before))
    assert shared_texts(after, TextSplits("train", list(private.train), [])) == set()


def test_the_private_side_drop_is_a_decision_per_record_on_public_data():
    """A neighbour (one private text more, a duplicate of a public one or not) changes the kept private set
    by that record at most, and the public corpus and its dedup record not at all."""
    public_specs = [{"name": "tweets", "partition": [0, 2]}]
    study = {"name": "tweets", "partition": [1, 2]}
    public = load_texts(public_specs)
    base = load_text(study)
    dup, fresh = public.train[3], "a text no corpus holds, written for this test"
    kept = []
    for extra in ([], [dup], [fresh]):
        d = TextSplits("d", list(base.train) + extra, list(base.test), np.r_[base.y_train, [0] * len(extra)], base.y_test)
        drop_public_duplicates(d, public_specs)
        kept.append(d.train)
    assert kept[1] == kept[0]  # the duplicate is dropped, nothing else moves
    assert kept[2] == kept[0] + [fresh]
    a = load_texts(public_specs, studies=[study])
    assert a.train == load_texts(public_specs, studies=[study | {"max_train": 10}]).train  # the whole part's test split


def test_a_checkpoint_not_deduplicated_against_the_study_is_refused():
    public = load_texts([{"name": "python_docs", "partition": [0, 2]}])
    report = {"public_data": {"dedup": drop_test_texts(public, [{"name": "python_docs", "partition": [1, 2]}])}}
    # the same corpus part, subsampled and with an explicit default key, is recognised by content
    study = {"name": "python_docs", "partition": [1, 2], "max_train": 50, "subsample_seed": 3, "max_test": None}
    check_deduplicated(report, study, "language.studies.s")
    with pytest.raises(ConfigError, match=r"language.studies.s.model.pretrain: .*not deduplicated.*language_pretrain"):
        check_deduplicated(report, {"name": "python_docs", "partition": [0, 2]}, "language.studies.s")
    with pytest.raises(ConfigError, match="deduplicated against: nothing"):
        check_deduplicated({"public_data": {}}, {"name": "python_docs"}, "language.studies.s")


def test_pretraining_drops_test_tweets_and_the_study_drops_its_public_duplicates(tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    from dphpo.hpo.common import INTERNAL_KEYS
    from dphpo.tasks.causal_lm import CausalLMTask, pretrain_small_lm

    private = {"name": "tweets", "partition": [1, 2], "max_train": 20, "max_test": 10}
    spec = {"data": [{"name": "tweets", "partition": [0, 2]}], "vocab_size": 300, "n_layer": 1, "n_embd": 16,
            "n_head": 2, "n_positions": 16, "block_len": 16, "steps": 2, "batch_size": 4}
    ckpt = tmp_path / "lm.pt"
    report = pretrain_small_lm(spec, ckpt, progress=False, studies=[private])
    dedup = report["public_data"]["dedup"]
    assert dedup["dropped_train"] > 0 and set(dedup) >= {"test_fingerprints", "test_texts", "rule"}
    study = {"name": "s", "model": {"pretrain": "lm", "max_len": 8}, "data": private}
    task = CausalLMTask.from_spec(study, ckpt)
    prov = task.provenance()
    assert prov["pretraining"]["public_data"]["dedup"] == dedup
    assert INTERNAL_DROPPED in INTERNAL_KEYS and prov["public_duplicates"]["rule"]
    assert task.n_train == len(load_text(private).train) - prov["public_duplicates"][INTERNAL_DROPPED]
    with pytest.raises(ConfigError, match="language.studies.t.model.pretrain"):
        CausalLMTask.from_spec(study | {"name": "t", "data": {"name": "tweets", "max_train": 20, "max_test": 10}}, ckpt)


# --------------------------------------------------------------------------------------------
# images


def cifar100_config() -> dict:
    return {
        "studies": [{"dataset": "cifar10", "extractor": "resnet20_cifar100"},
                    {"dataset": "cifar100", "extractor": "resnet20_cifar100"}],
        "extractors": {"resnet20_cifar100": {"kind": "pretrained_public", "pretrain": "resnet20_cifar100"}},
        "pretraining": {"resnet20_cifar100": {"arch": "resnet20", "public_dataset": "cifar100"}},
    }


def test_cifar100_study_on_an_extractor_pretrained_on_cifar100_is_refused():
    with pytest.raises(ConfigError, match=r"studies\[1\]: dataset 'cifar100' with extractor 'resnet20_cifar100'.*"
                                          r"pretraining.resnet20_cifar100.public_dataset"):
        check_pretraining_config(cifar100_config())
    cfg = cifar100_config()
    cfg["studies"].pop()
    check_pretraining_config(cfg)  # CIFAR10 on the CIFAR100 extractor is the paper's Table 2 setting


def test_the_paper_config_with_a_cifar100_on_cifar100_study_is_refused_before_any_job():
    from dphpo.studies.validate import validate_config

    cfg = config("paper.yaml")
    n = len(cfg["studies"])
    cfg["studies"].append({"dataset": "cifar100", "extractor": "resnet20_cifar100"})
    with pytest.raises(ConfigError, match=rf"studies\[{n}\]: .*'resnet20_cifar100'"):
        validate_config(cfg, ROOT / "workflow/schemas/config.schema.yaml")


def test_imagenet_extractors_are_refused_on_imagenet_by_name():
    cfg = {"studies": [{"dataset": "imagenet", "extractor": "vit"}], "extractors": {"vit": {"kind": "timm", "model": "vit"}}}
    with pytest.raises(ConfigError, match=r"studies\[0\].*'vit'.*'imagenet' \(kind 'timm'\)"):
        check_study_extractors(cfg)


def test_stl10_with_an_imagenet_extractor_warns_and_the_shipped_configs_pass():
    with pytest.warns(UserWarning) as warned:
        check_pretraining_config(config("paper.yaml"))
    messages = [str(w.message) for w in warned]
    assert any(re.search(r"studies\[12\] \(stl10, beitv2\).*STL-10's images were drawn from ImageNet", m) for m in messages)
    # the one other warning: ImageNet on an IN-22k extractor, acknowledged by studies[i].pretraining_overlap
    assert [m for m in messages if "stl10" not in m] == [m for m in messages if "pretraining_overlap" in m] != []
    for name in ("paper_embedded.yaml", "config.yaml"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            check_pretraining_config(config(name))
    cfg = copy.deepcopy(config("paper.yaml"))
    cfg["studies"] = [s for s in cfg["studies"] if s["dataset"] != "stl10" and "pretraining_overlap" not in s]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_pretraining_config(cfg)


def test_a_loaded_dataset_with_the_public_checksum_is_refused():
    attrs = {"extractor": "e", "public_dataset": "synthetic_shapes", "public_dataset_checksum": "ab" * 32}
    check_public_checksum(attrs, SimpleNamespace(name="mnist", checksum="cd" * 32), "features")
    with pytest.raises(ConfigError, match="features: dataset 'renamed'.*public pretraining data of extractor 'e'"):
        check_public_checksum(attrs, SimpleNamespace(name="renamed", checksum="ab" * 32), "features")
    with pytest.raises(ConfigError, match="public pretraining data"):
        check_public_checksum(attrs, SimpleNamespace(name="synthetic_shapes", checksum="ef" * 32), "features")
