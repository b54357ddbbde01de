"""The trainer registry, keyed by kind, and the one `build_trainer` of both halves.

    build_trainer(config, study, inputs) -> (trainer, the config the HPO methods read)

`study` is a vision `studies[]` entry (dataset, extractor) or a language `language.studies[]` entry;
its kind is `dphpo.studies.config.trainer_kind(study)` (the study's `trainer` key, else its half's
default: `linear_head` for vision, `finetune` for language). `inputs` is the job's input file: the
feature cache of a vision study, the hidden-state cache or pretrained LM of a language one (or None).

Every trainer is a `dphpo.train.protocol.PrivateTrainer`; the HPO methods of dphpo.hpo take any of
them. The torch-side modules are imported when a trainer is built, not when this module is.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dphpo.errors import ConfigError
from dphpo.features.build import expected_attrs
from dphpo.features.cache import load_feature_cache
from dphpo.privacy.accountant import make_accountant
from dphpo.studies import config as study_config
from dphpo.tasks.causal_lm import CausalLMTask
from dphpo.tasks.classification import SequenceClassificationTask
from dphpo.tasks.question_answering import QuestionAnsweringTask
from dphpo.train.linear_head import LinearHeadTrainer, prepare_features


@dataclass(frozen=True)
class TrainerKind:
    """How to build one kind of trainer and how its provenance is laid out in a result.

    build(config, study, inputs) -> (trainer, config of the methods).
    packages: versions recorded beside the tracked ones (dphpo.provenance.package_versions).
    provenance_key: None: the trainer's `provenance()` is merged into the block, with the torch
    thread count and (vision) the run settings; else the block nested under this key.
    """

    build: Callable[[dict, dict, Any], tuple[Any, dict]]
    packages: tuple[str, ...] = ()
    provenance_key: str | None = None


# Where each trainer kind (dphpo.hpo.registry.TRAINERS) has its settings class (TRAINERS below builds the trainer):
# vision settings are read off the whole config (`training`, `privacy`), language ones off the study's `training`.
TRAINER_SETTINGS = {
    "linear_head": ("dphpo.train.linear_head", "TrainSettings"),
    "finetune": ("dphpo.train.finetune", "FinetuneSettings"),
    "dpzo": ("dphpo.train.dpzo", "DPZOSettings"),
}


def trainer_settings(config: dict, study: dict | None = None):
    """The settings of a study's trainer (raises ConfigError on bad keys; imports the trainer's module).
    No study: a vision study's (the linear head's settings, read off `config`)."""
    study = study or {}
    module, name = TRAINER_SETTINGS[study_config.trainer_kind(study)]
    cls = getattr(importlib.import_module(module), name)
    if not study_config.is_language(study):
        return cls.from_config(config)
    section = dict(study.get("training") or {})
    device = (config.get("training") or {}).get("device")
    if device is not None and "device" not in section:  # the top-level training.device, unless the study sets its own
        section["device"] = device
    return cls.from_config(section)


def load_features(config: dict, path: str | Path, dataset: str, extractor: str):
    """Read and verify a feature cache, then prepare it for training as the config says (PreparedFeatures)."""

    # a cache built under other dataset options (subsets) or extractor settings is refused, not used
    feature_set = load_feature_cache(path, expect=expected_attrs(dataset, extractor, config))
    return prepare_features(feature_set, trainer_settings(config), study_config.public_train_size(config, dataset))


def _linear_head(config: dict, study: dict, inputs: str | Path) -> tuple[Any, dict]:
    """The linear-head trainer over a verified feature cache, with the accountant the config asks for."""

    features = load_features(config, inputs, study["dataset"], study["extractor"])
    return LinearHeadTrainer.from_config(features, config), config


def run_accountant(sample_rate: float, delta: float, eps_error: float = 0.01):
    """PRV accountant of one language run: T compositions of the Poisson-subsampled Gaussian (q, σ)."""
    return make_accountant(study_config.LANGUAGE_ACCOUNTANT, delta, sample_rate=sample_rate, eps_error=eps_error)


def hub_published_size(spec: dict) -> int:
    """The train split's size as the hub dataset's card publishes it (builder metadata, not a count of
    the downloaded private texts)."""
    import datasets  # Hugging Face datasets: the language extra

    data = spec["data"]
    info = datasets.load_dataset_builder(data["name"][3:], data.get("config"), revision=data.get("revision")).info
    split = data.get("train_split", "train")
    if not info.splits or split not in info.splits:
        raise ConfigError(
            f"language.studies.{spec['name']}.data.public_n_train: the hub card of {data['name']} publishes no size "
            f"of split {split!r}; declare the public size of the training set"
        )
    return int(info.splits[split].num_examples)


def load_task(spec: dict, inputs: str | Path | None, device: str = "auto"):
    """The task of a language study from its input (hidden-state cache or pretrained LM checkpoint); a task
    that loads a hub model builds it on `device` (the study's training.device)."""
    if spec["task"] == "classification":

        return SequenceClassificationTask.from_cache(inputs, spec["model"])
    if spec["task"] == "question_answering":  # SQuAD v2 from its official JSON files (data.path), a hub LM
        return QuestionAnsweringTask.from_spec(spec, device)

    return CausalLMTask.from_spec(spec, inputs)


def _language(trainer_class: str) -> Callable[[dict, dict, Any], tuple[Any, dict]]:
    """Builder of a language trainer (`module:Class`): the study's task, settings and PRV accountant,
    and the study's config with δ = 1/(2N) resolved at the public size."""

    def build(config: dict, spec: dict, inputs: str | Path | None) -> tuple[Any, dict]:

        module, name = trainer_class.split(":")
        s = trainer_settings(config, spec)
        task = load_task(spec, inputs, s.device)
        n_public = study_config.language_public_size(spec) or hub_published_size(spec)
        cfg = study_config.language_config(config, spec, n_public)
        acc = run_accountant(s.sample_rate(n_public), cfg["privacy"]["delta"], float(cfg["privacy"].get("eps_error", 0.01)))
        return getattr(importlib.import_module(module), name)(task, acc, s, n_public), cfg

    return build


LANGUAGE_PACKAGES = ("transformers", "tokenizers", "peft")

#: How to build each trainer kind of dphpo.hpo.registry.TRAINERS, the one list of them (and of which
#: trainers each method accepts, SUPPORTED): the same kinds (tests/test_registries.py).
TRAINERS: dict[str, TrainerKind] = {
    "linear_head": TrainerKind(_linear_head),
    "finetune": TrainerKind(_language("dphpo.train.finetune:FinetuneTrainer"), LANGUAGE_PACKAGES, "trainer"),
    "dpzo": TrainerKind(_language("dphpo.train.dpzo:DPZOTrainer"), LANGUAGE_PACKAGES, "trainer"),
}


def build_trainer(config: dict, study: dict, inputs: str | Path | None) -> tuple[Any, dict]:
    """(trainer, config of the methods) of a study of either half: the trainer its kind names, over its
    input file. Vision: `config` is the variant's config and is returned as is; language: the base config,
    and the study's merged config (overrides, δ resolved) is returned."""
    return TRAINERS[study_config.trainer_kind(study)].build(config, study, inputs)
