"""Evaluation metrics as the paper's datasets define them, one implementation each.

- Group accuracies (WILDS, Koh et al. 2021): Waterbirds reports the worst-group accuracy over the four
  (label y, background place) groups beside the average accuracy; fMoW the worst-region accuracy over
  the five regions (WILDS excludes its sixth region, "Other", from the worst case) beside the average;
  Camelyon17 plain accuracy on the test hospital (center 2).
- SQuAD v2 F1 and exact match as the official evaluate-v2.0.py computes them: answers normalized
  (lowercase, punctuation and the articles a/an/the removed, whitespace collapsed), the maximum over
  the gold answers, and an unanswerable question's gold answer the empty string.

- A classifier's null model, the majority training label (the linear rule's `informative_margin`).

Every number here but the null model's train count is computed on test data and released as such;
that count is private and released only noised. Nothing divides by a private count.
"""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Sequence

import numpy as np

from dphpo.errors import DatasetError

# ------------------------------------------------------------------------------------------------
# group accuracies (WILDS)


def accuracy(predictions: np.ndarray, labels: np.ndarray) -> float:
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    if predictions.shape != labels.shape:
        raise DatasetError(f"{len(predictions)} predictions for {len(labels)} labels")
    return float((predictions == labels).mean()) if len(labels) else float("nan")


def majority_label_scores(y_train, y_test, num_classes: int) -> tuple[float, float, float]:
    """A classifier's null model: the most frequent training label, predicted for every example. Its
    train count is the largest class count: private (sensitivity 1 under add/remove), released only
    noised, by the caller (`dphpo.hpo.linear_scaling`); its test count and accuracy. Labels: integer
    arrays or (CPU or GPU) tensors."""
    train, test = (np.asarray(y.cpu() if hasattr(y, "cpu") else y).ravel() for y in (y_train, y_test))
    counts = np.bincount(train, minlength=num_classes)
    label = int(counts.argmax())
    return float(counts[label]), float(np.sum(test == label)), float(np.mean(test == label))


def group_accuracies(predictions: np.ndarray, labels: np.ndarray, groups: np.ndarray, names: Sequence[str]) -> dict[str, float]:
    """Accuracy within each group that has test examples (`groups[i]` indexes `names`)."""
    predictions, labels, groups = np.asarray(predictions), np.asarray(labels), np.asarray(groups)
    if len(groups) != len(labels):
        raise DatasetError(f"{len(groups)} group ids for {len(labels)} test examples")
    out = {}
    for g, name in enumerate(names):
        mask = groups == g
        if mask.any():
            out[str(name)] = accuracy(predictions[mask], labels[mask])
    return out


def worst_group_accuracy(
    predictions: np.ndarray, labels: np.ndarray, groups: np.ndarray, names: Sequence[str], exclude: Sequence[str] = ()
) -> dict:
    """{"average", "worst_group", "worst_group_name", "groups"}: WILDS's worst-group (fMoW: worst-region)
    accuracy over the groups with test examples, `exclude`d groups left out of the worst case only."""
    per_group = group_accuracies(predictions, labels, groups, names)
    candidates = {k: v for k, v in per_group.items() if k not in set(exclude)}
    if not candidates:
        raise DatasetError("no group with test examples to take the worst case over")
    worst = min(candidates, key=candidates.get)
    return {"average": accuracy(predictions, labels), "worst_group": candidates[worst], "worst_group_name": worst, "groups": per_group}


# ------------------------------------------------------------------------------------------------
# SQuAD v2 (the official evaluate-v2.0.py)


def normalize_answer(s: str) -> str:
    """Lowercase, remove punctuation, the articles a/an/the and extra whitespace (evaluate-v2.0.py)."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def _tokens(s: str) -> list[str]:
    return normalize_answer(s).split() if s else []


def exact_match(prediction: str, gold: str) -> int:
    return int(normalize_answer(gold) == normalize_answer(prediction))


def f1(prediction: str, gold: str) -> float:
    gold_toks, pred_toks = _tokens(gold), _tokens(prediction)
    if not gold_toks or not pred_toks:  # unanswerable: F1 is 1 when both are empty, else 0
        return float(gold_toks == pred_toks)
    common = collections.Counter(gold_toks) & collections.Counter(pred_toks)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_toks), same / len(gold_toks)
    return 2 * precision * recall / (precision + recall)


def gold_answers(answers: Sequence[str]) -> list[str]:
    """The gold answers a prediction is scored against: the non-empty ones, or [""] when unanswerable."""
    golds = [a for a in answers if normalize_answer(a)]
    return golds or [""]


def squad_scores(predictions: dict[str, str], answers: dict[str, Sequence[str]]) -> dict[str, float]:
    """Mean exact match and F1 in percent over every question of `answers`, each the maximum over the
    gold answers. A question without a prediction is refused (the official script would silently
    drop it from the mean)."""
    if not answers:
        raise DatasetError("SQuAD scores need at least one question")
    missing = [qid for qid in answers if qid not in predictions]
    if missing:
        raise DatasetError(f"no prediction for {len(missing)} of {len(answers)} questions (first: {missing[0]})")
    em, f = [], []
    for qid, gold in answers.items():
        golds, pred = gold_answers(gold), predictions[qid]
        em.append(max(exact_match(pred, g) for g in golds))
        f.append(max(f1(pred, g) for g in golds))
    return {"exact": 100.0 * sum(em) / len(em), "f1": 100.0 * sum(f) / len(f), "total": len(answers)}
