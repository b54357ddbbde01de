"""Table 5's evaluation (distribution shift): the released heads applied unchanged to another dataset's
test split, labels mapped to the training study's classes.

Its own job (rule paper_evaluation), because it loads feature caches (torch); the table job reads the
sealed record this writes (`dphpo.report.paper.build_table5`). The OOD evaluation reads no private
training data: it costs no privacy. Which models and test sets: `dphpo.report.plan.plan_table5`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from dphpo.data.files import dataset_options
from dphpo.data.metrics import worst_group_accuracy
from dphpo.data.registry import dataset_groups
from dphpo.errors import ConfigError
from dphpo.io import write_json
from dphpo.report.plan import Paper, plan_table5
from dphpo.studies.trainers import load_features


def accuracy(weights: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    if len(y) == 0:
        return float("nan")
    return float(((x @ weights.T).argmax(axis=1) == y).mean())


def shift_test_set(p: Paper, dataset: str, extractor: str, label_map: dict | None, features: str):
    """Test features of `dataset` prepared as the training study's were, labels mapped to the train classes."""
    prepared = load_features(p.config, features, dataset, extractor)
    x = prepared.x_test.cpu().numpy()
    y = prepared.y_test.cpu().numpy()
    if not label_map:
        return x, y, "none", np.ones(len(y), dtype=bool)
    mapping = {int(k): (None if v is None else int(v)) for k, v in label_map.items()}
    mapped = np.array([mapping.get(int(c), int(c)) if mapping.get(int(c), int(c)) is not None else -1 for c in y], dtype=np.int64)
    keep = mapped >= 0
    dropped = sorted(k for k, v in mapping.items() if v is None)
    return x[keep], mapped[keep], ", ".join(str(c) for c in dropped) or "none", keep


METRICS = ("accuracy", "worst_group")


def test_groups(config: dict, dataset: str, keep: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """The shifted test set's evaluation groups (WILDS), aligned with its feature cache's test split."""
    if dataset_options(config, dataset)["max_test"] is not None:
        raise ConfigError(f"datasets.{dataset}.max_test: a worst-group metric needs the whole test split "
                          "(its groups are read in the loader's order); remove max_test")
    groups, names = dataset_groups(config, dataset)
    if len(groups) != len(keep):
        raise ConfigError(f"{dataset}: {len(groups)} group ids for {len(keep)} cached test examples; rebuild its feature cache")
    return groups[keep], names


def score(weights: np.ndarray, x: np.ndarray, y: np.ndarray, metric: str, groups=None, exclude=()) -> float:
    """The OOD number of Table 5: accuracy, or WILDS's worst-group (fMoW: worst-region) accuracy."""
    if metric == "accuracy":
        return accuracy(weights, x, y)
    return worst_group_accuracy((x @ weights.T).argmax(axis=1), y, groups[0], groups[1], exclude)["worst_group"]


def evaluate(config: dict, method_jobs: Iterable[Sequence[str]] | None = None) -> dict:
    """One record row per (train → test, extractor) whose models and test features the config provides."""
    p = Paper(config, method_jobs)
    rows = []
    for rp in plan_table5(p).rows:
        models, ref_model, features = (rp.sources.get(k) for k in ("models", "ref_model", "test_features"))
        if not (features.ok and (models or ref_model)):
            continue
        x, y, dropped, keep = shift_test_set(p, rp.key["_test"], rp.key["extractor"], rp.key["_map"], features.files[0])
        metric, exclude = rp.key["_metric"], rp.key["_exclude"]
        if metric not in METRICS:
            raise ConfigError(f"paper.table5 ({rp.key['train → test']}).metric: one of {', '.join(METRICS)}, got {metric!r}")
        groups = test_groups(config, rp.key["_test"], keep) if metric == "worst_group" else None
        test = (x, y, metric, groups, exclude)
        row = {
            "train": rp.key["_train"],
            "test": rp.key["_test"],
            "extractor": rp.key["extractor"],
            "label_map": None if rp.key["_map"] is None else {str(k): v for k, v in rp.key["_map"].items()},
            "test_classes_dropped": dropped,
            "n_test": int(len(y)),
            "metric": metric,
            "models": list(models.files) if models else [],
            "accuracy": [score(np.load(m)["weights"], *test) for m in models.files] if models else [],
            "reference_model": ref_model.files[0] if ref_model else None,
            "reference_accuracy": score(np.load(ref_model.files[0])["weights"], *test) if ref_model else None,
        }
        rows.append(row)
    return {
        "evaluation": "Table 5: released heads applied unchanged to shifted test sets (no private training data read)",
        "rows": rows,
    }


def write(config: dict, path: str, method_jobs: Iterable[Sequence[str]] | None = None) -> dict:
    """Evaluate and write the sealed record (dphpo.io.write_json: atomic, sealed)."""
    record = evaluate(config, method_jobs)
    write_json(path, record)
    return record
