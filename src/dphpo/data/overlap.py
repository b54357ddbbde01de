"""Public/private overlap guards: the data a model saw in public pretraining must not be a study's
private data.

Text (language studies): disjoint partitions of one corpus (`data.partition`, per record: a keyed hash
of each text and its label, dphpo.data.text.partition; checked by
`dphpo.studies.config.check_language_study`) can still share texts, since a corpus repeats itself
(texts equal once normalized, or the same text under another label; 51 of the 2,000 private tweets of
the embedded config occurred verbatim in the public half of the old index partitions). Two rules, each
a function of public data and of one record alone:

- the private side: a study drops every private *training* text whose normalized form
  (`normalize_text`) occurs in the public corpus its model was pretrained on
  (`drop_public_duplicates`). A decision per record on public data, so a neighbour changes the private
  set by its own record at most, and the public model never depends on the private data (dropping the
  public duplicates instead would make the public checkpoint a noiseless function of which texts the
  private corpus holds). How many were dropped is a private count: internal logs only.
- the public side: pretraining drops every public text that occurs in the test split of a study that
  starts from it (`drop_test_texts`: the test splits are public, so this costs nothing), so the
  reported test metric is not measured on text the model saw in pretraining. A study refuses a
  checkpoint not deduplicated against its test split (`check_deduplicated`, by a fingerprint of the
  split's content, so config defaults filled in or not do not matter). The whole corpus part is taken
  (before `max_train`/`max_test` subsampling), so what is dropped does not depend on what a study samples.

Images: `dphpo.features.overlap`; a study that acknowledges that its private data is its extractor's
public pretraining data (`studies[i].pretraining_overlap`) is named here (`pretraining_overlaps`), torch-free,
for the provenance of its results and the labels of its table rows.
"""

from __future__ import annotations

import hashlib
import json
import logging
import unicodedata

import numpy as np

from dphpo.data.text import TextSplits, load_text
from dphpo.errors import ConfigError

log = logging.getLogger(__name__)

#: the key of a `studies[]` entry that acknowledges a public/private overlap (its value: why)
OVERLAP_KEY = "pretraining_overlap"
#: what such a study's guarantee does and does not cover (every label and provenance record says it)
OVERLAP_NOTE = (
    "the extractor was publicly pretrained on this dataset's images: the DP guarantee covers the private "
    "fine-tuning only, not what the extractor saw in pretraining"
)


def pretraining_overlaps(config: dict | None) -> dict[tuple[str, str], str]:
    """(dataset, extractor) -> the reason, for every study that sets `studies[i].pretraining_overlap`."""
    return {
        (str(s["dataset"]), str(s["extractor"])): str(s[OVERLAP_KEY])
        for s in (config or {}).get("studies") or []
        if s.get(OVERLAP_KEY)
    }


def overlap_record(config: dict | None, dataset: str, extractor: str) -> dict | None:
    """What a result's provenance says about an acknowledged overlap of (dataset, extractor); None: none."""
    reason = pretraining_overlaps(config).get((str(dataset), str(extractor)))
    return None if reason is None else {"acknowledged_by": f"studies[].{OVERLAP_KEY}", "reason": reason, "note": OVERLAP_NOTE}

NORMALIZATION = "unicode NFKC, lower case, whitespace collapsed and stripped"
PUBLIC_RULE = "public texts that occur in a study's test split (public) are dropped from pretraining"
PRIVATE_RULE = (
    "private training texts that occur in the public pretraining corpus are dropped, each on its own text "
    "(a per-record decision on public data; the public model does not depend on the private data)"
)
#: the key of the private count of dropped training texts (dphpo.hpo.common.INTERNAL_KEYS: never released)
INTERNAL_DROPPED = "dropped_private_train"
SUBSAMPLE_KEYS = ("max_train", "max_test", "subsample_seed")


# --------------------------------------------------------------------------------------------
# text


def normalize_text(text: str | tuple) -> str:
    """The form two texts are compared in (a sentence pair is joined first)."""
    text = "\x1f".join(text) if isinstance(text, tuple) else text
    return " ".join(unicodedata.normalize("NFKC", text).lower().split())


def private_corpus(spec: dict) -> dict:
    """A study's `data` spec without its subsampling: the whole corpus part it draws from."""
    return {k: v for k, v in spec.items() if k not in SUBSAMPLE_KEYS}


def load_test_texts(spec: dict) -> tuple[set[str], str]:
    """The normalized texts of the test split of a study's whole corpus part (public data) and their
    fingerprint (sha256 of the sorted texts), which identifies the split by content."""
    part = load_text(private_corpus(spec))
    texts = {normalize_text(t) for t in part.test}
    return texts, hashlib.sha256("\0".join(sorted(texts)).encode("utf-8", "surrogatepass")).hexdigest()


def drop_texts(texts_of, dropped: set[str], splits: tuple[str, ...] = ("train", "test")) -> dict:
    """Remove from `texts_of` (a TextSplits, in place) every text of `splits` whose normalized form is in
    `dropped`; returns how many were dropped from each split."""
    counts = {}
    for split in splits:
        texts = getattr(texts_of, split)
        keep = np.array([normalize_text(t) not in dropped for t in texts], dtype=bool)
        setattr(texts_of, split, [t for t, k in zip(texts, keep) if k])
        y = getattr(texts_of, f"y_{split}")
        if y is not None:
            setattr(texts_of, f"y_{split}", y[keep])
        counts[f"dropped_{split}"] = int((~keep).sum())
    return counts


def drop_test_texts(public, study_specs: list[dict]) -> dict:
    """Deduplicate a public corpus against the test splits of the studies that start from it (public
    data); returns the record the pretraining provenance keeps (public quantities only)."""
    corpora = list({json.dumps(private_corpus(s), sort_keys=True): private_corpus(s) for s in study_specs}.values())
    test: set[str] = set()
    record = {"normalization": NORMALIZATION, "rule": PUBLIC_RULE, "test_corpora": corpora, "test_fingerprints": []}
    for spec in corpora:
        texts, fingerprint = load_test_texts(spec)
        test |= texts
        record["test_fingerprints"].append(fingerprint)
    record |= {"test_texts": len(test)} | drop_texts(public, test)
    log.info("public corpus %s: dropped %d train and %d test texts that occur (normalized) in the test splits of %s",
             public.name, record["dropped_train"], record["dropped_test"], [c.get("name") for c in corpora])
    return record


def drop_public_duplicates(private, public_specs: list[dict]) -> dict:
    """Drop from a study's private data (a TextSplits, in place) every training text whose normalized form
    occurs in the public corpus `public_specs` (both its splits, as listed before any deduplication):
    a decision per record on public data. Returns what the provenance says: the rule and the public
    corpus's size (public); the count dropped, a private statistic, under `INTERNAL_DROPPED` (internal logs)."""
    public = load_texts(public_specs)
    texts = {normalize_text(t) for t in (*public.train, *public.test)}
    dropped = drop_texts(private, texts, ("train",))["dropped_train"]
    return {"normalization": NORMALIZATION, "rule": PRIVATE_RULE, "public_texts": len(texts), INTERNAL_DROPPED: dropped}


def shared_texts(a, b) -> set[str]:
    """Normalized texts that two TextSplits have in common (train and test of both)."""
    return {normalize_text(t) for t in (*a.train, *a.test)} & {normalize_text(t) for t in (*b.train, *b.test)}


def check_deduplicated(pretraining: dict, data_spec: dict, where: str) -> None:
    """ConfigError unless the pretraining report shows its public corpus was deduplicated against the test
    split of the corpus of `data_spec` (a study's `data`), compared by content fingerprint."""
    dedup = (pretraining.get("public_data") or {}).get("dedup") or {}
    if load_test_texts(data_spec)[1] not in dedup.get("test_fingerprints", []):
        raise ConfigError(
            f"{where}.model.pretrain: the checkpoint's public corpus was not deduplicated against this study's test split "
            f"{private_corpus(data_spec)} (deduplicated against: {dedup.get('test_corpora') or 'nothing'}); "
            "rerun rule language_pretrain (snakemake --forcerun language_pretrain) so it drops the shared texts"
        )


def load_texts(specs: list[dict], studies: list[dict] | None = None) -> TextSplits:
    """Several corpora concatenated (train with train, test with test; unlabelled): pretraining text.

    `studies`: the `data` specs of the studies that start from this text; every public text whose
    normalized form occurs in their test splits is dropped, and `source["dedup"]` says how many
    (`drop_test_texts`)."""
    parts = [load_text(s) for s in specs]
    out = TextSplits(
        "+".join(p.name for p in parts),
        [t for p in parts for t in p.train],
        [t for p in parts for t in p.test],
        source={"corpora": [p.source for p in parts]},
    )
    if studies is not None:
        out.source["dedup"] = drop_test_texts(out, studies)
    return out
