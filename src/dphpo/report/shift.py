"""Table 5's evaluation (distribution shift): the released heads applied unchanged to another dataset's
test split, labels mapped to the training study's classes.

Its own job (rule paper_evaluation), because it loads feature caches (torch); the table job reads the
sealed record this writes (`dphpo.report.paper.build_table5`). The OOD evaluation reads no private
training data: it costs no privacy. Which models and test sets: `dphpo.report.plan.plan_table5`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

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
        return x, y, "none"
    mapping = {int(k): (None if v is None else int(v)) for k, v in label_map.items()}
    mapped = np.array([mapping.get(int(c), int(c)) if mapping.get(int(c), int(c)) is not None else -1 for c in y], dtype=np.int64)
    keep = mapped >= 0
    dropped = sorted(k for k, v in mapping.items() if v is None)
    return x[keep], mapped[keep], ", ".join(str(c) for c in dropped) or "none"


def evaluate(config: dict, method_jobs: Iterable[Sequence[str]] | None = None) -> dict:
    """One record row per (train → test, extractor) whose models and test features the config provides."""
    p = Paper(config, method_jobs)
    rows = []
    for rp in plan_table5(p).rows:
        models, ref_model, features = (rp.sources.get(k) for k in ("models", "ref_model", "test_features"))
        if not (features.ok and (models or ref_model)):
            continue
        x, y, dropped = shift_test_set(p, rp.key["_test"], rp.key["extractor"], rp.key["_map"], features.files[0])
        row = {
            "train": rp.key["_train"],
            "test": rp.key["_test"],
            "extractor": rp.key["extractor"],
            "label_map": None if rp.key["_map"] is None else {str(k): v for k, v in rp.key["_map"].items()},
            "test_classes_dropped": dropped,
            "n_test": int(len(y)),
            "models": list(models.files) if models else [],
            "accuracy": [accuracy(np.load(m)["weights"], x, y) for m in models.files] if models else [],
            "reference_model": ref_model.files[0] if ref_model else None,
            "reference_accuracy": accuracy(np.load(ref_model.files[0])["weights"], x, y) if ref_model else None,
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
