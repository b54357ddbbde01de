"""Public/private overlap guards: the data a model saw in public pretraining must not be a study's
private data.

Text (language studies): disjoint partitions of one corpus (`data.partition`, per record: a keyed hash
of each text and its label, dphpo.data.text.partition; checked by
`dphpo.studies.config.check_language_study`) can still share texts, since a corpus repeats itself
(texts equal once normalized, or the same text under another label; 51 of the 2,000 private tweets of
the embedded config occurred verbatim in the public half of the old index partitions). Pretraining
therefore drops from the public corpus every text whose normalized form (`normalize_text`) occurs in
the private corpus of a study that starts from it (`drop_private_texts`), and records how many;
a study refuses a checkpoint not deduplicated against its corpus (`check_deduplicated`, by a
fingerprint of the corpus's content, so config defaults filled in or not do not matter). The
private corpus is taken whole (both splits, before `max_train`/`max_test` subsampling), so what
is dropped does not depend on which texts a study samples.

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


def load_private_corpus(spec: dict) -> tuple[set[str], str]:
    """The normalized texts of a study's whole corpus part (train and test) and their fingerprint
    (sha256 of the sorted texts), which identifies the corpus by content."""
    part = load_text(private_corpus(spec))
    texts = {normalize_text(t) for t in (*part.train, *part.test)}
    return texts, hashlib.sha256("\0".join(sorted(texts)).encode("utf-8", "surrogatepass")).hexdigest()


def drop_texts(public, private_texts: set[str]) -> dict:
    """Remove from `public` (a TextSplits, in place) every text whose normalized form is in
    `private_texts`; returns how many were dropped from each split."""
    counts = {}
    for split in ("train", "test"):
        texts = getattr(public, split)
        keep = np.array([normalize_text(t) not in private_texts for t in texts], dtype=bool)
        setattr(public, split, [t for t, k in zip(texts, keep) if k])
        y = getattr(public, f"y_{split}")
        if y is not None:
            setattr(public, f"y_{split}", y[keep])
        counts[f"dropped_{split}"] = int((~keep).sum())
    return counts


def drop_private_texts(public, private_specs: list[dict]) -> dict:
    """Deduplicate a public corpus against the private corpora of the studies that start from it;
    returns the record the pretraining provenance keeps."""
    corpora = list({json.dumps(private_corpus(s), sort_keys=True): private_corpus(s) for s in private_specs}.values())
    private: set[str] = set()
    record = {"normalization": NORMALIZATION, "private_corpora": corpora, "private_fingerprints": []}
    for spec in corpora:
        texts, fingerprint = load_private_corpus(spec)
        private |= texts
        record["private_fingerprints"].append(fingerprint)
    record |= {"private_texts": len(private)} | drop_texts(public, private)
    log.info("public corpus %s: dropped %d train and %d test texts that occur (normalized) in the private corpora %s",
             public.name, record["dropped_train"], record["dropped_test"], [c.get("name") for c in corpora])
    return record


def shared_texts(a, b) -> set[str]:
    """Normalized texts that two TextSplits have in common (train and test of both)."""
    return {normalize_text(t) for t in (*a.train, *a.test)} & {normalize_text(t) for t in (*b.train, *b.test)}


def check_deduplicated(pretraining: dict, data_spec: dict, where: str) -> None:
    """ConfigError unless the pretraining report shows its public corpus was deduplicated against
    the corpus of `data_spec` (a study's `data`), compared by content fingerprint."""
    dedup = (pretraining.get("public_data") or {}).get("dedup") or {}
    if load_private_corpus(data_spec)[1] not in dedup.get("private_fingerprints", []):
        raise ConfigError(
            f"{where}.model.pretrain: the checkpoint's public corpus was not deduplicated against this study's data "
            f"{private_corpus(data_spec)} (deduplicated against: {dedup.get('private_corpora') or 'nothing'}); "
            "rerun rule language_pretrain (snakemake --forcerun language_pretrain) so it drops the shared texts"
        )


def load_texts(specs: list[dict], private: list[dict] | None = None) -> TextSplits:
    """Several corpora concatenated (train with train, test with test; unlabelled): pretraining text.

    `private`: the `data` specs of the studies that start from this text; every public text whose
    normalized form occurs in their corpora is dropped, and `source["dedup"]` says how many
    (`drop_private_texts`)."""
    parts = [load_text(s) for s in specs]
    out = TextSplits(
        "+".join(p.name for p in parts),
        [t for p in parts for t in p.train],
        [t for p in parts for t in p.test],
        source={"corpora": [p.source for p in parts]},
    )
    if private is not None:
        out.source["dedup"] = drop_private_texts(out, private)
    return out
