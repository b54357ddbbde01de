"""Public/private overlap guards: the data a model saw in public pretraining must not be a study's
private data.

Text (language studies): disjoint index partitions of one corpus (`data.partition`, checked by
`dphpo.studies.config.check_language_study`) can still share texts, since a corpus repeats itself (51 of
the 2,000 private tweets of the embedded config occur verbatim in the public half). Pretraining
therefore drops from the public corpus every text whose normalized form (`normalize_text`) occurs in
the private corpus of a study that starts from it (`drop_private_texts`), and records how many;
a study refuses a checkpoint not deduplicated against its corpus (`check_deduplicated`, by a
fingerprint of the corpus's content, so config defaults filled in or not do not matter). The
private corpus is taken whole (both splits, before `max_train`/`max_test` subsampling), so what
is dropped does not depend on which texts a study samples.

Images: a study may not train privately on the dataset its extractor was publicly pretrained on:
refused by name before any job (`check_study_extractors`); `check_public_checksum` compares the
content checksums once the dataset is loaded (for the feature-cache build, where the extractor's
checkpoint records its public data's checksum). Datasets drawn from another's source (STL-10 from
ImageNet) are warned about, not refused.
"""

from __future__ import annotations

import hashlib
import json
import logging
import unicodedata
import warnings

import numpy as np

from dphpo.errors import ConfigError

log = logging.getLogger(__name__)

NORMALIZATION = "unicode NFKC, lower case, whitespace collapsed and stripped"
SUBSAMPLE_KEYS = ("max_train", "max_test", "subsample_seed")
# (study dataset, public pretraining dataset) pairs that share a source: a caveat, not a refusal
SHARED_SOURCE = {
    ("stl10", "imagenet"): "STL-10's images were drawn from ImageNet",
    ("emnist", "mnist"): "EMNIST and MNIST both come from NIST Special Database 19",
    ("mnist", "emnist"): "EMNIST and MNIST both come from NIST Special Database 19",
}


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
    from dphpo.data.text import load_text

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


# --------------------------------------------------------------------------------------------
# images


def check_study_extractors(config: dict) -> None:
    """Refuse a study (`studies[i]`) whose dataset is its extractor's public pretraining dataset;
    warn where the two share a source (STL-10 and ImageNet)."""
    from dphpo.features.extractors import public_pretraining_dataset

    extractors, sections = config.get("extractors") or {}, config.get("pretraining") or {}
    caveats: dict[str, list[str]] = {}
    for i, study in enumerate(config.get("studies") or []):
        dataset, name = study["dataset"], study["extractor"]
        spec = extractors.get(name) or {}
        public = public_pretraining_dataset(spec, sections)
        if public is None:
            continue
        if public == dataset:
            source = (f"pretraining.{spec['pretrain']}.public_dataset" if spec.get("kind") == "pretrained_public"
                      else f"kind {spec.get('kind')!r}")
            raise ConfigError(
                f"studies[{i}]: dataset {dataset!r} with extractor {name!r}, which was publicly pretrained on "
                f"{public!r} ({source}): the private data would be the extractor's public pretraining data; "
                f"expected a dataset other than {public!r} for this extractor, or an extractor pretrained on other data"
            )
        if (dataset, public) in SHARED_SOURCE:
            caveats.setdefault(SHARED_SOURCE[dataset, public], []).append(f"studies[{i}] ({dataset}, {name})")
    for why, where in caveats.items():
        warnings.warn(
            f"{', '.join(where)}: {why}, which the extractor was publicly pretrained on; the guarantee covers the private "
            "training only, and the extractor may have seen some of these images (config/README.md, Public/private overlap)",
            stacklevel=2,
        )


def check_public_checksum(extractor_attrs: dict, dataset, where: str) -> None:
    """Once a dataset is loaded: ConfigError when it is (by name or content checksum) the public
    pretraining data recorded by its extractor (`pretrained_public` attrs)."""
    name, checksum = extractor_attrs.get("public_dataset"), extractor_attrs.get("public_dataset_checksum")
    if dataset.name == name or (checksum and dataset.checksum == checksum):
        raise ConfigError(
            f"{where}: dataset {dataset.name!r} (checksum {dataset.checksum[:12]}) is the public pretraining data of "
            f"extractor {extractor_attrs.get('extractor')!r} ({name}, checksum {str(checksum)[:12]}); "
            "expected private data the extractor has not been pretrained on"
        )
