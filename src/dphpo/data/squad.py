"""SQuAD v2 (Rajpurkar et al. 2018) read from the official JSON files (train-v2.0.json, dev-v2.0.json).

The file: {"version": "v2.0", "data": [{"title", "paragraphs": [{"context", "qas": [{"id", "question",
"answers": [{"text", "answer_start"}], "is_impossible"}]}]}]}. Each question becomes one `SquadExample`;
an unanswerable one (is_impossible) has no answers, scored against the empty string
(dphpo.data.metrics.squad_scores). The Hugging Face route (`rajpurkar/squad_v2` at a pinned revision)
is only an optional download: it needs the `datasets` package and a network.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from dphpo.errors import DatasetError
from dphpo.io import write_json

FILES = {"train": "train-v2.0.json", "dev": "dev-v2.0.json"}
#: Questions in the official files as published (Rajpurkar et al. 2018; the hub card of rajpurkar/squad_v2):
#: what a max_train subset of the private training file is a share of, never a count of it.
PUBLISHED_QUESTIONS = {"train": 130319, "dev": 11873}
HF_NAME = "rajpurkar/squad_v2"


@dataclass(frozen=True)
class SquadExample:
    id: str
    title: str
    context: str
    question: str
    answers: tuple[str, ...]  # empty: unanswerable

    @property
    def answerable(self) -> bool:
        return bool(self.answers)


def read_squad(path: str | Path, key: str = "datasets.squad.path") -> list[SquadExample]:
    """Every question of one official SQuAD v2 JSON file, in file order."""
    path = Path(path)
    if path.is_dir():
        raise DatasetError(f"{key}: {path} is a folder; name train-v2.0.json or dev-v2.0.json")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DatasetError(f"{key}: {path} does not exist (the official SQuAD v2 JSON, e.g. dev-v2.0.json)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DatasetError(f"{key}: cannot read {path} as JSON ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
        raise DatasetError(f"{key}: {path.name} has no 'data' list (not the official SQuAD format)")
    out = []
    try:
        for article in doc["data"]:
            for para in article["paragraphs"]:
                for qa in para["qas"]:
                    answers = () if qa.get("is_impossible") else tuple(a["text"] for a in qa["answers"])
                    out.append(SquadExample(str(qa["id"]), str(article.get("title", "")), para["context"], qa["question"], answers))
    except (KeyError, TypeError) as exc:
        raise DatasetError(f"{key}: {path.name}: an entry lacks {exc} (official SQuAD v2 format)") from None
    if not out:
        raise DatasetError(f"{key}: {path.name} holds no questions")
    seen: set[str] = set()
    for e in out:  # answers and predictions are keyed by id: a repeated id would score two questions as one
        if e.id in seen:
            raise DatasetError(f"{key}: {path.name}: question id {e.id!r} occurs more than once (ids must be unique)")
        seen.add(e.id)
    return out


def gold(examples: list[SquadExample]) -> dict[str, tuple[str, ...]]:
    """Question id -> gold answers, the input of dphpo.data.metrics.squad_scores."""
    return {e.id: e.answers for e in examples}


def download_squad(folder: str | Path, revision: str) -> dict[str, Path]:
    """Optional: fetch SQuAD v2 from the Hugging Face hub at `revision` and write the official JSON files."""
    try:
        import datasets
    except ImportError as exc:
        raise DatasetError("downloading SQuAD v2 needs the `datasets` package (pip install datasets), or place "
                           f"{FILES['train']} and {FILES['dev']} in {folder}") from exc
    folder = Path(folder)
    paths = {}
    for split, hf_split in (("train", "train"), ("dev", "validation")):
        articles: dict[str, dict] = {}
        for row in datasets.load_dataset(HF_NAME, split=hf_split, revision=revision):
            article = articles.setdefault(row["title"], {"title": row["title"], "paragraphs": []})
            if not article["paragraphs"] or article["paragraphs"][-1]["context"] != row["context"]:
                article["paragraphs"].append({"context": row["context"], "qas": []})
            texts, starts = row["answers"]["text"], row["answers"]["answer_start"]
            article["paragraphs"][-1]["qas"].append({
                "id": row["id"], "question": row["question"], "is_impossible": not texts,
                "answers": [{"text": t, "answer_start": s} for t, s in zip(texts, starts)],
            })
        paths[split] = folder / FILES[split]
        write_json(paths[split], {"version": "v2.0", "data": list(articles.values()), "source": f"hf:{HF_NAME}@{revision}"})
    return paths
