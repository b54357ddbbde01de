"""Public/private overlap guards for images: the data an extractor saw in public pretraining must not
be a study's private data (the text guards: `dphpo.data.overlap`).

A study may not train privately on the dataset its extractor was publicly pretrained on:
refused by name before any job (`check_study_extractors`); `check_public_checksum` compares the
content checksums once the dataset is loaded (for the feature-cache build, where the extractor's
checkpoint records its public data's checksum). Datasets drawn from another's source (STL-10 from
ImageNet) are warned about, not refused.

A study may acknowledge the overlap explicitly (`studies[i].pretraining_overlap: <reason>`, Panda et
al.'s ImageNet-1k rows on ImageNet-21k extractors): the guard then lets it through with a warning, and
every result's provenance and every table row of that study names the overlap
(`dphpo.data.overlap.pretraining_overlaps`, `dphpo.report.tables.apply_design_notes`).
"""

from __future__ import annotations

import warnings

from dphpo.data.overlap import OVERLAP_KEY, OVERLAP_NOTE
from dphpo.errors import ConfigError
from dphpo.features.extractors import public_pretraining_dataset

# (study dataset, public pretraining dataset) pairs that share a source: a caveat, not a refusal
SHARED_SOURCE = {
    ("stl10", "imagenet"): "STL-10's images were drawn from ImageNet",
    ("emnist", "mnist"): "EMNIST and MNIST both come from NIST Special Database 19",
    ("mnist", "emnist"): "EMNIST and MNIST both come from NIST Special Database 19",
}


def check_study_extractors(config: dict) -> None:
    """Refuse a study (`studies[i]`) whose dataset is its extractor's public pretraining dataset, unless
    the study acknowledges it (`studies[i].pretraining_overlap`: then a warning); warn where the two share
    a source (STL-10 and ImageNet)."""
    extractors, sections = config.get("extractors") or {}, config.get("pretraining") or {}
    caveats: dict[str, list[str]] = {}
    for i, study in enumerate(config.get("studies") or []):
        dataset, name = study["dataset"], study["extractor"]
        spec = extractors.get(name) or {}
        public = public_pretraining_dataset(spec, sections)
        if public is None:
            continue
        if public == dataset and study.get(OVERLAP_KEY):
            warnings.warn(
                f"studies[{i}] ({dataset}, {name}): the private data is the extractor's public pretraining data "
                f"{public!r}, acknowledged by studies[{i}].{OVERLAP_KEY} ({study[OVERLAP_KEY]}); {OVERLAP_NOTE}",
                stacklevel=2,
            )
            continue
        if public == dataset:
            source = (f"pretraining.{spec['pretrain']}.public_dataset" if spec.get("kind") == "pretrained_public"
                      else f"kind {spec.get('kind')!r}")
            raise ConfigError(
                f"studies[{i}]: dataset {dataset!r} with extractor {name!r}, which was publicly pretrained on "
                f"{public!r} ({source}): the private data would be the extractor's public pretraining data; "
                f"expected a dataset other than {public!r} for this extractor, or an extractor pretrained on other data, or "
                f"(to reproduce such a setting, labelled as such) studies[{i}].{OVERLAP_KEY}: <why> ({OVERLAP_NOTE})"
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
    pretraining data recorded by its extractor (`pretrained_public` attrs), or (by name) the data of its
    DP continual pre-training stage. The checksum matches the same data read by the same loader only: a
    copy in another form (the images as files of a folder) is not recognised."""
    name, checksum = extractor_attrs.get("public_dataset"), extractor_attrs.get("public_dataset_checksum")
    if dataset.name == name or (checksum and dataset.checksum == checksum):
        raise ConfigError(
            f"{where}: dataset {dataset.name!r} (checksum {dataset.checksum[:12]}) is the public pretraining data of "
            f"extractor {extractor_attrs.get('extractor')!r} ({name}, checksum {str(checksum)[:12]}); "
            "expected private data the extractor has not been pretrained on"
        )
    stage = extractor_attrs.get("upstream_privacy") or {}
    if stage.get("dataset") == dataset.name:  # also for a checkpoint given by path (studies check only sections)
        raise ConfigError(
            f"{where}: extractor {extractor_attrs.get('extractor')!r} was pre-trained with DP on {dataset.name!r} itself "
            f"({stage.get('pretraining')}): the downstream (eps, delta) would not include the pre-training's cost "
            "(composition is not implemented); study another dataset or pre-train privately on another one"
        )
