"""Add/remove canaries through the subset path: does a neighbour change the subset by one record at most?

The trainer's audit (dphpo.audit.run) assumes the data it trains on are D and D ∪ {z}. That holds
only if the step before training, choosing the subset (`max_train`) or the train/test split of a
dataset without one, maps neighbours to neighbours: a positional draw (`default_rng(seed).choice`)
reshuffles hundreds of records when one is added, and every trial then sees two datasets far apart
(issue #26). This check builds, with the workflow's own functions (`dphpo.data.registry.subset`, as
`load_dataset` calls it, and `registry.split_population`, as the loaders of digits, tweets and the
user's files call it), the subset and the split of D and of D ∪ {z} for a canary z inserted at the
front, in the middle and at the end, and counts the records in which they differ (as multisets of
records: content and label). More than one is a failure, raised before any run is trained.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

import numpy as np

from dphpo.data.dataset import take_records
from dphpo.data.registry import SPLIT_SEED, TEST_FRACTION, Dataset, split_population, subset
from dphpo.data.subsets import SUBSET_RULE, class_names, record_bytes
from dphpo.errors import DPHPOError

POSITIONS = ("front", "middle", "end")
#: What the check tolerates: D ∪ {z} may differ from D by the canary itself, nothing else.
MAX_DIFFERENCE = 1


class SubsetCanaryError(DPHPOError):
    """Subsets (or splits) of neighbouring datasets differ by more than one record: the subset rule is broken."""


def canary_record(x: Any) -> Any:
    """A record that is not in D: D's first record inverted (images), negated and shifted (features), marked (texts)."""
    if isinstance(x, np.ndarray):
        if x.dtype == np.uint8:
            return (255 - x).astype(np.uint8)
        return (-x - 1).astype(x.dtype)
    if isinstance(x, str):
        return x + " [subset canary]"
    raise TypeError(f"subset canaries: no canary for a record of type {type(x).__name__}")


def _insert(inputs, labels: np.ndarray, z, z_label, position: str):
    at = {"front": 0, "middle": len(labels) // 2, "end": len(labels)}[position]
    y = np.insert(np.asarray(labels), at, z_label)
    if isinstance(inputs, np.ndarray):
        return np.insert(inputs, at, z, axis=0), y
    return [*inputs[:at], z, *inputs[at:]], y


def record_difference(a_inputs, a_labels, b_inputs, b_labels, classes=None) -> int:
    """How many records two datasets differ in, as multisets of (content, label)."""
    a = Counter(record_bytes(x, y) for x, y in zip(a_inputs, class_names(a_labels, classes)))
    b = Counter(record_bytes(x, y) for x, y in zip(b_inputs, class_names(b_labels, classes)))
    return sum(((a - b) + (b - a)).values())


def check_subset_canaries(
    ds: Dataset,
    *,
    max_train: int | None,
    seed: int = 0,
    public_n_train: int | None = None,
    test_fraction: float = TEST_FRACTION,
    split_seed: int = SPLIT_SEED,
) -> dict:
    """Subsets and splits of D (the training split of `ds`) and D ∪ {z}, z at the front, middle and end.

    subset: `registry.subset(…, max_train, seed, public_n_train)` of D and of D ∪ {z}, as `load_dataset`
    draws it; split: `registry.split_population` of D and D ∪ {z} into train and test (test_fraction,
    split_seed), the differences of both parts added. Returns the report (every difference, the
    maximum, pass); raises SubsetCanaryError when a difference exceeds one record.
    """
    if ds.n_train == 0:
        raise SubsetCanaryError(f"subset canaries: {ds.name} has no training records to check")
    z, z_label = canary_record(ds.train_inputs[0]), int(ds.train_labels[0])
    base = subset(ds, max_train, None, seed, public_n_train=public_n_train)
    base_tr, base_te = split_population(ds.train_inputs, ds.train_labels, ds.classes, test_fraction, split_seed)
    report: dict[str, Any] = {
        "rule": SUBSET_RULE,
        "canary": f"{ds.name}'s first training record, {'inverted' if isinstance(z, np.ndarray) else 'marked'}, label {z_label}",
        "subset": {"max_train": max_train, "public_n_train": public_n_train, "subset_seed": seed, "difference": {}},
        "split": {"test_fraction": test_fraction, "split_seed": split_seed, "difference": {}},
    }
    for position in POSITIONS:
        x, y = _insert(ds.train_inputs, ds.train_labels, z, z_label, position)
        neighbour = replace(ds, train_inputs=x, train_labels=y)
        sub = subset(neighbour, max_train, None, seed, public_n_train=public_n_train)
        report["subset"]["difference"][position] = record_difference(
            base.train_inputs, base.train_labels, sub.train_inputs, sub.train_labels, ds.classes)
        tr, te = split_population(x, y, ds.classes, test_fraction, split_seed)
        report["split"]["difference"][position] = sum(
            record_difference(take_records(ds.train_inputs, a), ds.train_labels[a], take_records(x, b), y[b], ds.classes)
            for a, b in ((base_tr, tr), (base_te, te)))
    report["max_difference"] = max(max(report[k]["difference"].values()) for k in ("subset", "split"))
    report["pass"] = report["max_difference"] <= MAX_DIFFERENCE
    if not report["pass"]:
        raise SubsetCanaryError(
            f"subset canaries FAILED on {ds.name}: adding one record changed the subset by "
            f"{report['subset']['difference']} and the train/test split by {report['split']['difference']} records "
            f"(front, middle, end); neighbouring datasets must differ by at most {MAX_DIFFERENCE}. The subset rule "
            "breaks add/remove adjacency: every ε claimed on such a subset is void."
        )
    return report


def summary(report: dict) -> str:
    """One line for the audit's data note and the command line."""
    parts = ", ".join(f"{k} {'/'.join(str(report[k]['difference'][p]) for p in POSITIONS)}" for k in ("subset", "split"))
    verdict = "pass" if report["pass"] else "FAIL"
    return (f"add/remove subset canaries (z at front/middle/end; {report['rule']}): records changed {parts}; "
            f"max {report['max_difference']} <= {MAX_DIFFERENCE}: {verdict}")

