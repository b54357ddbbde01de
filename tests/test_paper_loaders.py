"""The paper's file-backed datasets read from tiny fixtures written in each published on-disk format,
and the metrics they are scored with (dphpo.data.metrics), against hand-worked cases."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from PIL import Image

from dphpo.data import metrics
from dphpo.data.image_files import ImageFiles
from dphpo.data.registry import bound_spec, dataset_groups, load_dataset
from dphpo.data.squad import gold, read_squad
from dphpo.errors import DatasetError


def _png(path, value, size=(8, 8)):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((*size, 3), value, np.uint8)).save(path)


def _csv(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


# ------------------------------------------------------------------------------------------------
# ImageNet


def test_imagenet_reads_train_and_val_class_folders(tmp_path):
    for split in ("train", "val"):
        for i, wnid in enumerate(["n01440764", "n01443537"]):
            _png(tmp_path / "imagenet" / split / wnid / f"{split}_{i}.JPEG", 10 * i, size=(10, 6))
    cfg = {"data_dir": str(tmp_path), "datasets": {"imagenet": {"image_size": [4, 4]}}}
    ds = load_dataset("imagenet", tmp_path, spec=bound_spec(cfg, "imagenet"))
    assert ds.train_inputs.shape == (2, 4, 4, 3) and ds.test_inputs.shape == (2, 4, 4, 3)
    # the label set is ImageNet-1k's 1,000 published wnids, never the folders found
    assert len(ds.classes) == 1000 and ds.classes[:2] == ["n01440764", "n01443537"] and ds.train_labels.tolist() == [0, 1]


def test_imagenet_missing_names_the_key_and_layout(tmp_path):
    with pytest.raises(DatasetError, match=r"datasets.imagenet.path.*train/<wnid>/\*.JPEG"):
        load_dataset("imagenet", tmp_path, download=False)


# ------------------------------------------------------------------------------------------------
# WILDS


def _waterbirds(root):
    folder = root / "waterbirds_v1.0"
    rows = []
    for i, (y, split, place) in enumerate([(0, 0, 0), (1, 0, 1), (0, 1, 0), (0, 2, 0), (0, 2, 1), (1, 2, 0), (1, 2, 1)]):
        name = f"{'001.Albatross' if y else '002.Sparrow'}/img_{i}.jpg"
        _png(folder / name, 30 * i, size=(12, 9))
        rows.append({"img_id": i, "img_filename": name, "y": y, "split": split, "place": place, "place_filename": "x"})
    _csv(folder / "metadata.csv", rows)


def test_waterbirds_train_is_split0_test_is_split2_with_groups(tmp_path):
    _waterbirds(tmp_path)
    ds = load_dataset("waterbirds", tmp_path, download=False)
    assert ds.train_labels.tolist() == [0, 1] and ds.test_labels.tolist() == [0, 0, 1, 1]
    assert ds.test_inputs.shape == (4, 224, 224, 3)
    groups, names = dataset_groups({"data_dir": str(tmp_path)}, "waterbirds")
    assert groups.tolist() == [0, 1, 2, 3] and names[3] == "waterbird on water"


def _camelyon(root):
    folder = root / "camelyon17_v1.0"
    rows = []
    for i, (center, split, tumor) in enumerate([(0, 0, 0), (3, 0, 1), (4, 1, 1), (1, 0, 0), (2, 0, 1), (2, 0, 0)]):
        row = {"patient": 10 + i, "node": i % 5, "x_coord": 100 * i, "y_coord": 7, "tumor": tumor, "center": center, "split": split}
        p, n = row["patient"], row["node"]
        _png(folder / f"patches/patient_{p:03}_node_{n}/patch_patient_{p:03}_node_{n}_x_{100 * i}_y_7.png", i, size=(96, 96))
        rows.append(row)
    _csv(folder / "metadata.csv", rows)


def test_camelyon17_id_is_training_centers_and_ood_is_center_2(tmp_path):
    _camelyon(tmp_path)
    ds = load_dataset("camelyon17", tmp_path, download=False)
    assert ds.train_labels.tolist() == [0, 1] and ds.test_labels.tolist() == [1]
    ood = load_dataset("camelyon17_ood", tmp_path, download=False)
    assert ood.n_train == 0 and ood.test_labels.tolist() == [1, 0]
    assert ood.test_inputs[:, 0, 0, 0].tolist() == [4, 5]  # read from the patch paths of center 2
    assert isinstance(ood.test_inputs, ImageFiles) and ood.test_inputs.shape == (2, 96, 96, 3)  # on disk until read


def _fmow(root):
    folder = root / "fmow_v1.1"
    rows = [
        {"split": "train", "category": "airport", "country_code": "USA", "timestamp": "2010-05-01T00:00:00Z"},
        {"split": "seq", "category": "zoo", "country_code": "USA", "timestamp": "2011-05-01T00:00:00Z"},
        {"split": "train", "category": "zoo", "country_code": "FRA", "timestamp": "2012-05-01T00:00:00Z"},
        {"split": "train", "category": "dam", "country_code": "FRA", "timestamp": "2014-05-01T00:00:00Z"},  # OOD val years
        {"split": "test", "category": "dam", "country_code": "KEN", "timestamp": "2011-01-01T00:00:00Z"},
        {"split": "test", "category": "barn", "country_code": "KEN", "timestamp": "2016-03-01T00:00:00Z"},
        {"split": "test", "category": "zoo", "country_code": "XXX", "timestamp": "2017-03-01T00:00:00Z"},
    ]
    _csv(folder / "rgb_metadata.csv", rows)
    _csv(folder / "country_code_mapping.csv", [{"alpha-3": "USA", "region": "Americas"}, {"alpha-3": "FRA", "region": "Europe"},
                                               {"alpha-3": "KEN", "region": "Africa"}])
    for i in range(len(rows)):
        _png(folder / "images" / f"rgb_img_{i}.png", i)


def test_fmow_official_splits_by_year_and_regions(tmp_path):
    _fmow(tmp_path)
    ds = load_dataset("fmow", tmp_path, download=False)
    assert ds.train_inputs[:, 0, 0, 0].tolist() == [0, 2]  # image = metadata row, seq rows never loaded
    assert ds.test_inputs[:, 0, 0, 0].tolist() == [4]
    ood = load_dataset("fmow_ood", tmp_path, download=False)
    assert ood.n_train == 0 and ood.test_inputs[:, 0, 0, 0].tolist() == [5, 6]
    groups, names = dataset_groups({"datasets": {"fmow_ood": {"path": str(tmp_path / "fmow_v1.1")}}}, "fmow_ood")
    assert [names[g] for g in groups] == ["Africa", "Other"]


def test_wilds_missing_folder_names_the_key(tmp_path):
    with pytest.raises(DatasetError, match=r"datasets.waterbirds.*waterbirds_v1.0/metadata.csv"):
        load_dataset("waterbirds", tmp_path, download=False)


# ------------------------------------------------------------------------------------------------
# CIFAR-10.1, CIFAR-10-C / CIFAR-100-C


def test_cifar10_1_reads_the_v6_npy_files(tmp_path):
    folder = tmp_path / "CIFAR-10.1"
    folder.mkdir()
    np.save(folder / "cifar10.1_v6_data.npy", np.full((3, 32, 32, 3), 7, np.uint8))
    np.save(folder / "cifar10.1_v6_labels.npy", np.array([0, 9, 3]))
    ds = load_dataset("cifar10_1", tmp_path, download=False)
    assert ds.n_train == 0 and ds.test_labels.tolist() == [0, 9, 3]


@pytest.mark.parametrize("severities", [[1, 2, 3, 4, 5], [1], [5], [2, 4]])
def test_cifar_c_selects_severities(tmp_path, severities):
    folder = tmp_path / "CIFAR-100-C"
    folder.mkdir()
    x = np.repeat(np.arange(5, dtype=np.uint8), 10_000)[:, None, None, None] * np.ones((1, 32, 32, 3), np.uint8)
    np.save(folder / "gaussian_blur.npy", x)
    np.save(folder / "labels.npy", np.arange(50_000) % 100)
    cfg = {"data_dir": str(tmp_path), "datasets": {"cifar100_c": {"severities": severities}}}
    ds = load_dataset("cifar100_c", tmp_path, spec=bound_spec(cfg, "cifar100_c"))
    assert ds.n_test == 10_000 * len(severities)
    assert sorted(set(ds.test_inputs[:, 0, 0, 0].tolist())) == [s - 1 for s in severities]


def test_cifar_c_unknown_corruption_names_the_key(tmp_path):
    (tmp_path / "CIFAR-10-C").mkdir()
    np.save(tmp_path / "CIFAR-10-C" / "labels.npy", np.zeros(50_000, np.int64))
    cfg = {"data_dir": str(tmp_path), "datasets": {"cifar10_c": {"corruption": "fog"}}}
    with pytest.raises(DatasetError, match="datasets.cifar10_c.corruption"):
        load_dataset("cifar10_c", tmp_path, spec=bound_spec(cfg, "cifar10_c"))


# ------------------------------------------------------------------------------------------------
# SQuAD v2


def test_squad_reads_the_official_json(tmp_path):
    doc = {"version": "v2.0", "data": [{"title": "T", "paragraphs": [{"context": "The cat sat.", "qas": [
        {"id": "q1", "question": "Who sat?", "answers": [{"text": "The cat", "answer_start": 0}], "is_impossible": False},
        {"id": "q2", "question": "Who flew?", "answers": [], "plausible_answers": [{"text": "cat", "answer_start": 4}],
         "is_impossible": True},
    ]}]}]}
    (tmp_path / "dev-v2.0.json").write_text(json.dumps(doc))
    examples = read_squad(tmp_path / "dev-v2.0.json")
    assert [e.answerable for e in examples] == [True, False]
    scores = metrics.squad_scores({"q1": "cat", "q2": ""}, gold(examples))
    assert scores == {"exact": 100.0, "f1": 100.0, "total": 2}


def test_squad_refuses_a_repeated_question_id(tmp_path):
    # answers and predictions are keyed by id: two questions of one id were scored as one
    qa = {"id": "q1", "question": "Who sat?", "answers": [{"text": "The cat", "answer_start": 0}], "is_impossible": False}
    doc = {"data": [{"title": "T", "paragraphs": [{"context": "The cat sat.", "qas": [qa, dict(qa, question="Who?")]}]}]}
    (tmp_path / "dev-v2.0.json").write_text(json.dumps(doc))
    with pytest.raises(DatasetError, match="question id 'q1' occurs more than once"):
        read_squad(tmp_path / "dev-v2.0.json")


def test_squad_missing_file_names_the_key(tmp_path):
    with pytest.raises(DatasetError, match="datasets.squad.path"):
        read_squad(tmp_path / "dev-v2.0.json")


# ------------------------------------------------------------------------------------------------
# metrics, hand-worked


def test_normalize_answer_as_evaluate_v2():
    assert metrics.normalize_answer("The  Quick, brown fox!") == "quick brown fox"
    assert metrics.normalize_answer("an apple a day") == "apple day"


def test_squad_f1_by_hand():
    # pred tokens [big, red, dog], gold [red, dog, house]: 2 common, P = R = 2/3, F1 = 2/3
    assert metrics.f1("big red dog", "the red dog house") == pytest.approx(2 / 3)
    assert metrics.f1("", "") == 1.0 and metrics.f1("something", "") == 0.0
    assert metrics.exact_match("The Dog.", "dog") == 1


def test_squad_scores_take_the_max_over_gold_answers_and_empty_gold_for_unanswerable():
    answers = {"a": ["Denver Broncos", "Broncos"], "b": [], "c": ["x y"]}
    scores = metrics.squad_scores({"a": "broncos", "b": "no", "c": "x"}, answers)
    assert scores["exact"] == pytest.approx(100 / 3)  # a matches "Broncos"; b needs ""; c partial
    assert scores["f1"] == pytest.approx(100 * (1 + 0 + 2 / 3) / 3)
    with pytest.raises(DatasetError, match="no prediction"):
        metrics.squad_scores({"a": "x"}, answers)


def test_worst_group_accuracy_by_hand():
    y = np.array([0, 0, 1, 1, 1, 0])
    pred = np.array([0, 1, 1, 1, 0, 0])
    groups = np.array([0, 0, 1, 1, 2, 3])  # group accuracies 1/2, 1, 0, 1
    out = metrics.worst_group_accuracy(pred, y, groups, ["a", "b", "c", "Other"])
    assert out["average"] == pytest.approx(4 / 6) and out["worst_group"] == 0.0 and out["worst_group_name"] == "c"
    out = metrics.worst_group_accuracy(pred, y, groups, ["a", "b", "Other", "d"], exclude=["Other"])
    assert out["worst_group"] == 0.5 and out["worst_group_name"] == "a"
