"""A study's settings from the workflow config, for vision and language studies alike (torch-free).

Validation (`validate_config`: the JSON schema, the one source of defaults, then the cross-checks
the schema cannot express), variants merged over the base config, a language study's `overrides`
merged over the base config (`language_config`), target ε, the run settings a job computes from
and their hash, the trainer kind of a study. Nothing here imports torch, also not transitively at
import time (tests/test_studies.py): the workflow's parse step and the tables read it.

Vision studies are `studies[]` entries (dataset, extractor; trainer `linear_head`); language studies
are `language.studies[]` entries (a task, a trainer `finetune` | `dpzo`, model, data, `training`
and `overrides` of privacy.target_eps / delta, search_space, linear_scaling, selection, baselines),
so the HPO methods of dphpo.hpo run on both unchanged.
"""

from __future__ import annotations

import copy
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dphpo import layout
from dphpo.data.files import FileDataset, dataset_options, dataset_spec, file_section
from dphpo.data.overlap import OVERLAP_KEY
from dphpo.data.registry import DATASETS
from dphpo.data.registry import public_train_size as declared_size
from dphpo.errors import ConfigError, DPHPOError, OutputFileError
from dphpo.hpo import registry
from dphpo.hpo import selection as hpo_selection
from dphpo.hpo.linear_scaling_plan import (
    RECOMMENDED_SAFEGUARD,
    LinearScalingConfig,
    Safeguard,
    check_budgets,
    safeguarded_section,
)
from dphpo.hpo.space import SearchSpace
from dphpo.io import read_json
from dphpo.privacy.randomness import NoiseScope, key_from_config
from dphpo.provenance import config_hash, data_checksums
from dphpo.studies import checks

DEFAULT_VARIANT = "default"
# Top-level keys every variant shares with the base config (results/features/... has no variant; the
# workflow reads the others of the base config alone: threads and resources of a rule, not of a variant).
VARIANT_SHARED_KEYS = ("seeds", "studies", "datasets", "extractors", "pretraining", "data_dir", "variants", "threads",
                       "resources", "language", "paper", "audit")

# The trainer kinds (dphpo.hpo.registry.TRAINERS, built by dphpo.studies.trainers.TRAINERS) each half
# accepts, the first one its default when a study names none: vision `studies[].trainer` (the linear
# head), language `language.studies[].trainer` (every other kind).
VISION_TRAINERS: tuple[str, ...] = ("linear_head",)
LANGUAGE_TRAINERS: tuple[str, ...] = tuple(t for t in registry.TRAINERS if t not in VISION_TRAINERS)
LANGUAGE_TASKS = ("classification", "causal_lm", "question_answering")
#: The accountant of every language run (Poisson-subsampled DP-SGD / DP-ZO steps): `language_config`
#: sets privacy.accountant to it whatever the base config says.
LANGUAGE_ACCOUNTANT = "prv"
#: The methods a language study may run: those SUPPORTED on a language trainer with its accountant.
LANGUAGE_METHODS: tuple[str, ...] = tuple(
    m for m in registry.METHODS if any(m in registry.methods_for(t, LANGUAGE_ACCOUNTANT) for t in LANGUAGE_TRAINERS)
)


def deep_merge(base: dict, overrides: dict) -> dict:
    """A copy of `base` with `overrides` merged in, recursively for nested mappings."""
    merged = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def variant_config(config: dict, variant: str) -> dict:
    """The config of a named variant: `variants.<name>` merged over the base config.

    Variants are how ablations and alternative settings (other stage budgets, a quadratic fit,
    a bias, random init, ...) run beside the main study with their own result files.
    """
    if variant == DEFAULT_VARIANT:
        return config
    merged = merged_variant(config, variant)
    merged["variant"] = variant
    return merged


def merged_variant(config: dict, variant: str) -> dict:
    """`variants.<variant>` merged over the base config, shaped like a whole config file: the
    workflow validates it against the config schema, so a typo inside a variant is refused."""
    variants = config.get("variants", {})
    if variant not in variants:
        raise ConfigError(f"variants.{variant}: no such variant (defined: {', '.join(sorted(variants)) or 'none'})")
    overrides = variants[variant]
    if not isinstance(overrides, dict):
        raise ConfigError(f"variants.{variant} must be a mapping of config overrides, got {type(overrides).__name__}")
    shared = [k for k in VARIANT_SHARED_KEYS if k in overrides]
    if shared:
        raise ConfigError(
            f"variants.{variant}: {', '.join(shared)} cannot be overridden in a variant: seeds, studies and the "
            "feature caches (datasets, extractors, pretraining, data_dir) are shared by all variants, and threads, "
            "resources, language, paper and audit are read from the base config only"
        )
    if "target_eps" in (overrides.get("privacy") or {}):
        _check_target_subset(config, variant, overrides["privacy"]["target_eps"])
    return deep_merge({k: v for k, v in config.items() if k != "variants"}, overrides)


def _check_target_subset(config: dict, variant: str, targets) -> None:
    """A variant's own targets (Panda et al. Fig. 2: one search shared by the targets it can pay for) are a
    subset of privacy.target_eps, the budgets every table and result path is drawn from."""
    key = f"variants.{variant}.privacy.target_eps"
    if not isinstance(targets, list) or not targets or not all(isinstance(e, (int, float)) and not isinstance(e, bool) for e in targets):
        raise ConfigError(f"{key}: expected a non-empty list of target budgets (numbers), got {targets!r}")
    _refuse_duplicates(key, targets, layout.eps_label)
    _refuse_inexact_labels(key, targets)
    base = {layout.eps_label(e) for e in config["privacy"]["target_eps"]}
    outside = [e for e in targets if layout.eps_label(e) not in base]
    if outside:
        raise ConfigError(
            f"{key}: {outside} not in privacy.target_eps; a variant's targets are a subset of the study's "
            f"({', '.join(sorted(base, key=float))}): add them there"
        )


def variant_targets(config: dict, variant: str) -> list | None:
    """The target list `variant` sets for itself (variants.<variant>.privacy.target_eps), None where it
    runs the study's privacy.target_eps."""
    return (((config.get("variants") or {}).get(variant) or {}).get("privacy") or {}).get("target_eps")


def own_target_variants(config: dict) -> list[str]:
    """The variants whose target list differs from privacy.target_eps: their final runs are one job per
    target (rule linear_scaling_target), since a rule's outputs cannot depend on its variant."""
    base = [layout.eps_label(e) for e in config["privacy"]["target_eps"]]
    return [
        name
        for name in config.get("variants") or {}
        if (own := variant_targets(config, name)) is not None and [layout.eps_label(e) for e in own] != base
    ]


def target_eps(config: dict) -> list[float]:
    return [float(e) for e in config["privacy"]["target_eps"]]


# Config sections a training job's numbers depend on (its study's extractor is added per job).
# Not data_dir: where the data lie is no setting (the caches record the data's checksum), so moving
# the same data reruns nothing.
RUN_SETTINGS_KEYS = ("privacy", "search_space", "training", "selection", "linear_scaling", "baselines")


def method_config(cfg: dict, method: str) -> dict:
    """`cfg` as `method` reads it: the shared sections whole, of `linear_scaling` and `baselines` only
    the parts the method declares (hpo.registry.READS). A job hands its method this and nothing more,
    so what it computes from is what its settings hash covers."""
    if method not in registry.READS:
        raise ConfigError(f"unknown method {method!r}; known: {', '.join(registry.READS)}")
    out = {k: v for k, v in cfg.items() if k not in registry.METHOD_SECTIONS}
    for path in registry.READS[method]:
        section, _, part = path.partition(".")
        value = cfg.get(section)
        if part:
            if part in (value or {}):
                out.setdefault(section, {})[part] = value[part]
        elif value is not None:
            out[section] = value
    return out


def run_settings(cfg: dict, extractor: str, dataset: str, method: str) -> dict:
    """What a training job of `method` computes from, read off a variant's config (`variant_config`): the
    shared run settings sections, the parts of `linear_scaling` and `baselines` the method reads
    (`method_config`), the study's extractor section (and the `pretraining` section it is trained by: another
    version of it gives other features, so its results must draw other noise) and dataset options, the public
    size and the noise key's fingerprint (another key draws other noise). `method` is recorded with them (it
    names the scope)."""
    scoped = method_config(cfg, method)
    settings: dict[str, Any] = {"method": method} | {key: scoped.get(key) for key in RUN_SETTINGS_KEYS}
    settings["extractor"] = cfg.get("extractors", {}).get(extractor)
    pretrain = (settings["extractor"] or {}).get("pretrain")
    if pretrain is not None:
        settings["pretraining"] = (cfg.get("pretraining") or {}).get(pretrain)
    settings["dataset"] = dataset_options(cfg, dataset)
    settings["public_n_train"] = public_train_size(cfg, dataset)
    settings["test_split"] = test_split(cfg, dataset)
    settings["noise_key"] = key_from_config(cfg).fingerprint()  # the key's path is not hashed
    settings["privacy"] = {k: v for k, v in (settings["privacy"] or {}).items() if k != "noise_key_file"}
    if (settings["training"] or {}).get("noise_generator") == "mt":  # the default stated: the same hash as unstated
        settings["training"] = {k: v for k, v in settings["training"].items() if k != "noise_generator"}
    if method == "nonprivate":  # the ceiling searches as far as the rule variants may go, densely
        settings["eta_ceiling_factor"] = ceiling_eta_factor(cfg)
        settings["eta_ceiling_density"] = CEILING_ETA_DENSITY
    ls = settings.get("linear_scaling") or {}
    if ls.get("safeguard") is True:  # `true` stands for the recommended guards: hash what they are
        settings["linear_scaling"] = ls | {"safeguard": RECOMMENDED_SAFEGUARD.to_dict()}
    return device_blind(settings)


def device_blind(settings: Any) -> Any:
    """`settings` with every `device` entry at its default, `auto`. Where a job computes is not what it
    computes: every private draw comes from generators that give the same numbers on any device (CPU Mersenne
    Twisters, dphpo.train.noise, or Philox, dphpo.train.philox), so a CPU and a GPU run of one config and key
    release the same noise and, to float rounding, the same numbers
    (benchmarks/gpu_check.py). A device change thus neither reruns a job nor changes its noise labels;
    provenance records the device used (`compute_device`)."""
    if isinstance(settings, dict):
        return {k: "auto" if k == "device" and isinstance(v, str) else device_blind(v) for k, v in settings.items()}
    if isinstance(settings, list):
        return [device_blind(v) for v in settings]
    return settings


#: The vision non-private reference tries this many η per log interval of the search grid (the grid's own
#: points included; dphpo.hpo.nonprivate.ceiling_grid): at the grid's density a private run between two
#: grid η beat it (issue 29). The language references, full fine-tuning runs, stay on the grid.
CEILING_ETA_DENSITY = 4


def ceiling_eta_factor(config: dict) -> float:
    """How far above search_space.eta.max the non-private reference must search to stay a ceiling: the
    largest `max_extrapolation` of a rule variant whose final run may leave the grid (`beyond_grid`), else 1."""
    factors = [1.0]
    for variant in rule_variants(config):
        guards = linear_scaling_config(variant_config(config, variant)).safeguard
        if guards is not None and guards.beyond_grid and guards.max_extrapolation:
            factors.append(float(guards.max_extrapolation))
    return max(factors)


def test_split(config: dict, dataset: str) -> str:
    """What a study's test split is: "official" (a published dataset's public test split) or "public" (the
    user's own data, whose test split the config declares public: `datasets.<name>.test_split`)."""
    section = (config.get("datasets") or {}).get(dataset) or {}
    return "public" if section.get("test_split") == "public" else "official"


def run_settings_hash(config: dict, variant: str, extractor: str, dataset: str, method: str) -> str:
    """Hash of `run_settings`: a rule `params:` entry, so that Snakemake reruns exactly the jobs a
    config change affects (a method's own section reruns its jobs, not its siblings'), and what every
    result records (`provenance.settings_hash`) so that a consumer refuses a result of other settings
    (`check_inputs`) even where Snakemake did not rerun."""
    return config_hash(run_settings(variant_config(config, variant), extractor, dataset, method))


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def rule_variants(config: dict) -> list[str]:
    """The main study and every variant that safeguards its rule (`variants.<name>.linear_scaling.safeguard`):
    the rules `all` runs and the linear scaling and comparison tables show side by side."""
    safeguarded = [
        name for name, overrides in (config.get("variants") or {}).items() if ((overrides or {}).get("linear_scaling") or {}).get("safeguard")
    ]
    return [DEFAULT_VARIANT, *safeguarded]


def reduce_spec(variant_cfg: dict) -> dict | None:
    """A variant's `reduce_eps` block (Panda et al. Table 14) with its defaults filled in: how, from_eps
    (1) and source_variant (the main study); None when the variant has none."""
    spec = variant_cfg.get("reduce_eps")
    if not spec:
        return None
    return {"how": spec.get("how"), "from_eps": float(spec.get("from_eps", 1)), "source_variant": spec.get("source_variant", DEFAULT_VARIANT)}


def changed_settings(path: str | Path, config: dict, record: dict | None = None) -> list[str]:
    """The run-settings keys whose values differ between what `path` (a stage or result file; its
    `record` when already read) was computed with and what `config` asks for; [] when they agree.
    Raises OutputFileError for a file without a settings hash."""
    prov = (read_json(path) if record is None else record).get("provenance") or {}
    if "settings_hash" not in prov:
        raise OutputFileError(f"{path} records no settings_hash: it was written by an older dphpo; delete it and rerun")
    method = (prov.get("settings") or {}).get("method")
    if method not in registry.READS:  # written before settings were scoped per method
        return ["(the settings of an older dphpo)"]
    want = run_settings(variant_config(config, prov.get("variant", DEFAULT_VARIANT)), prov.get("extractor"), prov.get("dataset"), method)
    if prov["settings_hash"] == config_hash(want):
        return []
    had, now = _flat(prov.get("settings") or {}), _flat(json.loads(json.dumps(want, default=str)))
    return sorted(k for k in set(had) | set(now) if had.get(k) != now.get(k)) or ["(unknown: no settings recorded)"]


def explain_reruns(paths: Any, config: dict, metadata_lost: bool = False) -> list[str]:
    """One line per group of existing result files that the current config reruns, naming the keys
    that changed (Snakemake itself only says "Params have changed", with opaque hashes).

    Where Snakemake's metadata (`.snakemake/metadata`) was lost (`rm -rf .snakemake`, a copied tree), its
    params trigger cannot fire: each such file is then dated to the epoch, older than any input, so that
    the mtime trigger reruns its job. Otherwise nothing is touched: a dry run of an edited config, undone
    afterwards, must leave no result out of date. Either way the file is refused by every consumer
    (`check_inputs`) until its job has rerun."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for path in paths:
        try:
            keys = changed_settings(path, config)
        except OutputFileError:
            continue  # unreadable or old files are refused where they are read
        if keys:
            if metadata_lost:
                os.utime(path, (0, 0))
            groups.setdefault(tuple(keys), []).append(str(path))
    return [
        f"{len(files)} result file(s) were computed with other settings ({', '.join(keys[:8])} changed): each reruns "
        f"when a target needs it, and every table refuses it until then, e.g. {files[0]}"
        for keys, files in sorted(groups.items(), key=lambda kv: -len(kv[1]))
    ]


#: The record files whose path says what they hold, and the templates that say it.
IDENTIFIED_FILES = (layout.RESULT, layout.STAGE, layout.NONPRIVATE_RESULT, layout.LANGUAGE_RESULT, layout.LANGUAGE_NONPRIVATE_RESULT)


def record_identity(record: dict) -> dict[str, str]:
    """What a record says it is, in the words of the results tree's wildcards (dphpo.layout)."""
    prov = record.get("provenance") or {}
    target = (record.get("target") or {}).get("eps")
    found = {
        "dataset": prov.get("dataset"), "extractor": prov.get("extractor"), "study": prov.get("study"),
        "variant": prov.get("variant", DEFAULT_VARIANT), "method": record.get("method") or prov.get("method"),
        "seed": record.get("seed", prov.get("seed")), "stage": record.get("stage"),
        "eps": layout.eps_label(float(target)) if target not in (None, "inf") else None,
    }
    if (record.get("search") or {}).get("reduced"):  # Table 14's redone final runs live in their own folder
        found["method"] = layout.REDUCED_METHOD
    return {k: str(v) for k, v in found.items() if v is not None}


def identity_problems(path: str | Path, record: dict) -> list[str]:
    """How a record disagrees with what its path says it is (method, study, variant, seed, stage,
    target ε): a record copied or moved into another run's place is refused by every consumer."""
    for template in IDENTIFIED_FILES:
        expected = layout.parse(template, path)
        if expected is not None:
            break
    else:
        return []
    found = record_identity(record)
    return [f"its {key} is {found.get(key, '(none)')!r}, its path says {want!r}"
            for key, want in expected.items() if found.get(key) != want]


def check_identity(path: str | Path, record: dict) -> None:
    """OutputFileError naming `path` and each field where the record is not what its path says."""
    problems = identity_problems(path, record)
    if problems:
        raise OutputFileError(f"{path} is not the record its path names ({'; '.join(problems)}): it was copied or "
                              f"moved from another run; delete it and rerun `snakemake {path}`")


def check_inputs(paths: Any, config: dict) -> list[dict]:
    """The records at `paths`, in order, once each is checked: a stage or result file that is not the record
    its path names (`check_identity`) or was computed with other settings than `config` asks for (after
    `rm -rf .snakemake`, `--rerun-triggers mtime` or a copied tree, Snakemake may not rerun it) is refused,
    naming the file and the keys that differ. Raises OutputFileError."""
    records = []
    for path in paths:
        record = read_json(path)
        check_identity(path, record)
        keys = changed_settings(path, config, record)
        if keys:
            raise OutputFileError(
                f"{path} was computed with other settings than the config asks for ({', '.join(keys[:8])} differ); "
                f"delete it or rerun with `snakemake --forcerun {path}`"
            )
        records.append(record)
    return records


def check_noise_scope(paths: Any, records: Any, noise) -> None:
    """Each record read from `paths` (a search's stage files) drew its noise in `noise`'s scope: the same key,
    settings, seed and data (its feature cache's checksums), so a stage computed on other data (a copied tree,
    Snakemake's metadata lost) never joins a run on this data. Raises OutputFileError naming the file."""
    want = json.loads(json.dumps(noise.describe()))
    for path, record in zip(paths, records, strict=True):
        had = (record.get("provenance") or {}).get("randomness")
        if had != want:
            raise OutputFileError(f"{path} drew its noise for other data, another seed or another noise key than this job "
                                  f"(provenance.randomness {json.dumps(had)[:120]}, this job's {json.dumps(want)[:120]}); "
                                  f"delete it or rerun with `snakemake --forcerun {path}`")


def language_settings_hash(config: dict, name: str, method: str | None = None) -> str:
    """The hash of `language_settings`: the language rules' params, recorded by each language release
    as `provenance.settings_hash` (method None or "nonprivate": the non-private reference)."""
    return config_hash(language_settings(config, name, None if method == "nonprivate" else method))


def check_language_inputs(paths: Any, records: Any, config: dict, name: str, method: str) -> None:
    """`check_inputs` for the releases of `method` on language study `name`, as read (`records`, each the
    record its path names: dphpo.report.tables.load_results): each must be of the settings the config asks
    for. Raises OutputFileError."""
    want = language_settings_hash(config, name, method)
    for path, record in zip(paths, records, strict=True):
        had = (record.get("provenance") or {}).get("settings_hash")
        if had != want:
            why = "records no settings_hash: it was written by an older dphpo" if had is None else (
                f"was computed with other settings than language.studies.{name} and the sections it reads ask for")
            raise OutputFileError(f"{path} {why}; delete it or rerun with `snakemake --forcerun {path}`")


def check_language_results(paths: Any, config: dict) -> None:
    """`check_language_inputs` for the language releases among `paths` (`layout.LANGUAGE_RESULT`: e.g. the
    language rows of the paper's Table 3), each (study, method) against its own settings."""
    groups: dict[tuple[str, str], list[str]] = {}
    for path in paths:
        if (w := layout.parse(layout.LANGUAGE_RESULT, path)) is not None:
            groups.setdefault((w["study"], w["method"]), []).append(str(path))
    for (study, method), files in groups.items():
        check_language_inputs(files, [read_json(f) for f in files], config, study, method)


def run_results(paths: Any) -> list[str]:
    """The vision releases among `paths` (`layout.RESULT`, `layout.NONPRIVATE_RESULT`): the records whose run
    settings `check_inputs` can compare (a paper table also reads benchmarks, evaluations, language results)."""
    return [str(p) for p in paths if layout.parse(layout.RESULT, p) or layout.parse(layout.NONPRIVATE_RESULT, p)]


def search_space(config: dict):
    """The config's SearchSpace (dphpo.hpo.space)."""
    return SearchSpace.from_config(config["search_space"])


def selection_rule(config: dict, n_public: int | None = None):
    """The config's SelectionRule (dphpo.hpo.selection), planning with the public size `n_public` and
    δ where `selection.noise_std` is auto (without N: the plan's most costly noise, for checks)."""
    return hpo_selection.selection_rule(config, n_public)


def linear_scaling_config(config: dict):
    """The config's LinearScalingConfig (dphpo.hpo.linear_scaling_plan)."""
    return LinearScalingConfig.from_config(config.get("linear_scaling", {}))


#: The most result files a config may imply: the paper's grid implies 21,505; Snakemake's DAG (memory,
#: parse time) grows with them, and a typo such as 10^4 seeds would otherwise run for minutes first.
MAX_RESULTS = 100_000


def study_jobs(config: dict) -> list[tuple[str, str, str, str]]:
    """(dataset, extractor, method, variant) of every search the study target (`all`) runs: the linear
    scaling rule (the paper's and each safeguarded variant's) and the baselines."""
    jobs = [(s["dataset"], s["extractor"], "linear_scaling", v) for s in config["studies"] for v in rule_variants(config)]
    return jobs + [(d, e, m, DEFAULT_VARIANT) for d, e, m in registry.method_jobs(config)]


def study_results(config: dict) -> list[str]:
    """Every result.json the study target (`all`) writes, as dphpo.layout paths: every search of
    `study_jobs` at every seed × target ε."""
    return [layout.path(layout.RESULT, dataset=d, extractor=e, method=m, variant=v, seed=int(seed), eps=eps)
            for d, e, m, v in study_jobs(config) for seed in config["seeds"] for eps in target_eps(variant_config(config, v))]


def result_file_count(config: dict) -> tuple[int, int, int]:
    """(searches, seeds, target_eps) of the study target: their product is the result files it implies."""
    return len(study_jobs(config)), len(config["seeds"]), len(config["privacy"]["target_eps"])


def check_size(config: dict) -> None:
    """Refuse, with the estimate, a config that implies more than MAX_RESULTS result files."""
    jobs, seeds, targets = result_file_count(config)
    if jobs * seeds * targets > MAX_RESULTS:
        raise ConfigError(
            f"the config implies {jobs * seeds * targets:,} result files ({jobs:,} searches (studies × methods and "
            f"variants) × {seeds:,} seeds × {targets:,} target_eps); at most {MAX_RESULTS:,}: fewer seeds, "
            "privacy.target_eps or studies"
        )


def public_train_size(config: dict, dataset: str) -> int:
    """The declared public size of a study's training set (`datasets.<name>.public_n_train`, else the
    dataset's published size capped by max_train): what the mechanism divides by, never the private count."""
    section = (config.get("datasets") or {}).get(dataset) or {}
    return declared_size(dataset, section.get("max_train"), section.get("public_n_train"))


def noise_scope(config: dict, dataset: str, extractor: str, variant: str, seed: int, method: str, trainer) -> NoiseScope:
    """The private draws of one study run: the secret key (privacy.noise_key_file) scoped by every label
    that tells two published results apart, so no two of them share noise — the study, the seed, the
    job's settings hash and the data: `config` is the variant's config the job reads (`variant_config`),
    and the hash is the one its results record as `provenance.settings_hash` (= `run_settings_hash` of its
    `method`, the rules' params), so two versions of a study's config under one key draw independent
    noise, and the same config and key the same noise; `trainer`'s data checksums (its feature cache's)
    label it too, so an edited dataset or features of another precision draw other noise."""
    settings = config_hash(run_settings(config, extractor, dataset, method))
    scope = key_from_config(config).scope(dataset=dataset, extractor=extractor, variant=variant, seed=int(seed), settings=settings)
    return scope.over_data(data_checksums(trainer.provenance()))


def is_language(study: dict) -> bool:
    """A language study (`language.studies[]`: it names a task) rather than a vision one (`studies[]`)."""
    return "task" in study


def trainer_kind(study: dict) -> str:
    """The trainer a study runs (a key of dphpo.studies.trainers.TRAINERS): its `trainer`, else its half's default."""
    kinds = LANGUAGE_TRAINERS if is_language(study) else VISION_TRAINERS
    return study.get("trainer") or kinds[0]


def vision_study(config: dict, dataset: str, extractor: str) -> dict:
    """The `studies[]` entry of (dataset, extractor); an opt-in CNN study (baselines.oso_dpsgd_cnn.studies)
    or a study of another config section is the bare pair (trainer: the default)."""
    for entry in config.get("studies") or []:
        if entry["dataset"] == dataset and entry["extractor"] == extractor:
            return entry
    return {"dataset": dataset, "extractor": extractor}


def check_config(config: dict) -> None:
    """Checks the JSON schema cannot express; raises ConfigError / InfeasibleBudgetError before any job runs."""
    _refuse_duplicates("seeds", [int(s) for s in config["seeds"]], str)
    # two budgets that share a results path (eps_label) would overwrite each other's files
    _refuse_duplicates("privacy.target_eps", list(config["privacy"]["target_eps"]), layout.eps_label)
    _refuse_inexact_labels("privacy.target_eps", list(config["privacy"]["target_eps"]))
    check_size(config)
    check_study_resources(config)
    # a study listed twice would count one run twice in every table row (n = 2, ± 0.00)
    _refuse_duplicates("studies", [(e["dataset"], e["extractor"]) for e in config["studies"]], lambda e: "/".join(e))
    _refuse_duplicates("baselines.methods", list((config.get("baselines") or {}).get("methods") or []), str)
    for name, section in (config.get("datasets") or {}).items():
        if file_section(config, name) is not None:
            if name in DATASETS:  # the registry's published size would be its public N, its paths theirs
                raise ConfigError(
                    f"datasets.{name}: {name!r} is a dataset of dphpo's registry, so your files under that name would take "
                    f"its published training size as the public size (what DP-GD divides by, δ is checked against) and "
                    f"share its result paths; name your data otherwise, e.g. my_{name}"
                )
            FileDataset.from_config(name, section).check_path()  # missing path, wrong shape: before any job
            if section.get("test_split") != "public":
                raise ConfigError(
                    f"datasets.{name}.test_split: your own data's test split (its own files, or carved out of "
                    "the training data) is the private data of the people in it, and every release publishes its "
                    "exact test metrics; declare it public with `test_split: public` (PRIVACY.md states it) or "
                    "hold out a test set that is public"
                )
            if not section.get("classes"):
                raise ConfigError(
                    f"datasets.{name}.classes: declare your data's class names (the label set, in the model's order; "
                    "`dphpo init` writes the ones it found). Read off the private data, one record with a new label "
                    "would add a column to every released model"
                )
        elif name not in DATASETS:
            raise ConfigError(f"datasets.{name}: unknown dataset {name!r}; known: {', '.join(sorted(DATASETS))}")
    for i, entry in enumerate(config["studies"]):
        spec = dataset_spec(config, entry["dataset"])
        if spec is None:
            raise ConfigError(
                f"studies[{i}].dataset: unknown dataset {entry['dataset']!r}; known: {', '.join(sorted(DATASETS))}"
            )
        max_train, classes = dataset_options(config, entry["dataset"])["max_train"], spec.num_classes
        if max_train is not None and classes is not None and max_train < classes:
            raise ConfigError(
                f"datasets.{entry['dataset']}.max_train: {max_train} training examples cannot cover its {classes} classes; "
                "a model never sees the missing ones (they score 0 %): raise max_train"
            )
        n_public = public_train_size(config, entry["dataset"])
        delta = float(config["privacy"]["delta"])
        if delta * n_public >= 1 and not config["privacy"].get("delta_acknowledged"):
            raise ConfigError(
                f"privacy.delta: {delta:g} is at least 1/N for studies[{i}] ({entry['dataset']}: N = {n_public} declared "
                "training records): a mechanism that publishes one random record outright is (0, 1/N)-DP, so such a "
                f"δ protects nobody; use δ well below 1/N (e.g. {min(1e-5, 0.1 / n_public):.1g}), or set "
                "privacy.delta_acknowledged: true to report it anyway"
            )
        if entry["extractor"] not in config["extractors"]:
            raise ConfigError(
                f"studies[{i}].extractor: {entry['extractor']!r} is not defined under `extractors` "
                f"(defined: {', '.join(sorted(config['extractors']))})"
            )
    for variant in [DEFAULT_VARIANT, *config.get("variants", {})]:
        cfg = variant_config(config, variant)
        prefix = "" if variant == DEFAULT_VARIANT else f"variants.{variant}."
        checks.check_grid_size(cfg["search_space"], prefix + "search_space")
        checks.check_selection(cfg["selection"], prefix + "selection")
        try:
            search_space(cfg)  # raises ConfigError on bad grids
            check_budgets(linear_scaling_config(cfg), selection_rule(cfg), target_eps(cfg), float(cfg["privacy"]["delta"]))
        except DPHPOError as err:
            where = "" if variant == DEFAULT_VARIANT else f"variants.{variant}: "
            raise type(err)(where + str(err)) from None


def _refuse_duplicates(key: str, values: list, label) -> None:
    """ConfigError naming `key` when two of its values are the same once written as `label(value)`."""
    seen: dict[str, Any] = {}
    for value in values:
        if label(value) in seen:
            raise ConfigError(
                f"{key}: {seen[label(value)]!r} and {value!r} are the same entry ({label(value)!r}) listed twice; "
                "list each once (a duplicate would only repeat identical runs and overwrite their results)"
            )
        seen[label(value)] = value


def _refuse_inexact_labels(key: str, targets: list) -> None:
    """ConfigError naming `key` when a target ε is not the number its path label (`layout.eps_label`, 6
    significant digits) reads back as: a job that takes its ε from the label would run at another budget
    (float rounding, 0.35000000000000003 for 0.35, is the same budget: the searches key ε to 10 digits)."""
    for eps in targets:
        if not math.isclose(float(layout.eps_label(eps)), float(eps), rel_tol=1e-10):
            raise ConfigError(f"{key}: {eps!r} is written {layout.eps_label(eps)!r} in result paths, another budget; "
                              "give each target ε in at most 6 significant digits")


# --------------------------------------------------------------------------------------------
# language studies (`language.studies[]`)


def language_studies(config: dict) -> dict[str, dict]:
    return {s["name"]: s for s in (config.get("language") or {}).get("studies", [])}


#: The rules with a `study` wildcard (workflow/rules/language.smk): the rules whose config
#: `resources.<rule>.by_study` may give each language study its own runtime and mem_mb.
STUDY_RULES = ("language_cache", "language_method", "language_nonprivate")


def check_study_resources(config: dict) -> None:
    """`resources.<rule>.by_study` only on a rule with a `study` wildcard (STUDY_RULES), naming only
    language studies of the config; raises ConfigError naming the key."""
    studies = language_studies(config)
    for rule, entry in (config.get("resources") or {}).items():
        for name in (entry or {}).get("by_study") or {}:
            where = f"resources.{rule}.by_study.{name}"
            if rule not in STUDY_RULES:
                raise ConfigError(f"{where}: only the rules with a study wildcard take per-study resources "
                                  f"({', '.join(STUDY_RULES)}); rule {rule} has none")
            if name not in studies:
                raise ConfigError(f"{where}: no language study named {name!r} "
                                  f"(language.studies: {', '.join(sorted(studies)) or 'none'})")


def language_study(config: dict, name: str) -> dict:
    found = language_studies(config)
    if name not in found:
        raise ConfigError(f"language.studies: no study named {name!r} (defined: {', '.join(sorted(found)) or 'none'})")
    return found[name]


def language_public_size(spec: dict) -> int | None:
    """The declared public size of a study's private training set: `data.public_n_train`, else
    `data.max_train`, else the registry's published size of an unpartitioned registry corpus; None when
    only the hub's published split size can tell (`hub_published_size`, read in the job).
    The mechanism uses it for q = B/n, its normalizer and δ = 1/(2n), never the private count."""
    data = spec["data"]
    if data.get("public_n_train"):
        return int(data["public_n_train"])
    if data.get("max_train"):
        return int(data["max_train"])
    known = DATASETS.get(data["name"])
    if known is not None and known.public_n_train and not data.get("partition"):
        return int(known.public_n_train)
    if data["name"].startswith("hf:"):
        return None
    raise ConfigError(
        f"language.studies.{spec['name']}.data.public_n_train: declare the public size of the private training set "
        "(what DP-SGD normalizes by and samples with; never counted on the private data)"
    )


def resolve_delta(value, n_train: int, where: str) -> float:
    """δ as a number, or the paper's δ = 1/(2|D|) written as the string '1/(2N)' (N: the public size)."""
    if isinstance(value, str):
        if value.replace(" ", "") != "1/(2N)":
            raise ConfigError(f"{where}: expected a number or '1/(2N)', got {value!r}")
        return 1.0 / (2.0 * n_train)
    return float(value)


def language_config(config: dict, spec: dict, n_train: int | None = None) -> dict:
    """The base config with the study's overrides merged in (what dphpo.hpo methods read); δ = 1/(2N)
    resolved at the public size `n_train` when given."""
    merged = deep_merge({k: v for k, v in config.items() if k not in ("variants", "language")}, spec.get("overrides") or {})
    merged["privacy"] = dict(merged["privacy"])
    merged["privacy"]["accountant"] = LANGUAGE_ACCOUNTANT
    where = f"language.studies.{spec['name']}.overrides.privacy.delta"
    delta = merged["privacy"].get("delta", 1e-5)
    merged["privacy"]["delta"] = resolve_delta(delta, n_train, where) if n_train is not None else delta
    return merged


def language_settings(config: dict, name: str, method: str | None = None) -> dict:
    """What a language job computes from: its study entry and the shared sections it merges over; for
    a private `method`, the noise key's fingerprint too (another key draws other noise), and for
    `linear_scaling_safeguarded` its guards as they stand: none set (or `true`) means the recommended
    ones, so new recommended constants rerun it. `method` None: the non-private reference."""
    settings = {"study": language_study(config, name), "base": {k: config.get(k) for k in RUN_SETTINGS_KEYS}}
    pretrain = (settings["study"].get("model") or {}).get("pretrain")
    if pretrain is not None:  # the LM it fine-tunes: another version of it, other noise
        settings["pretrain"] = ((config.get("language") or {}).get("pretrain") or {}).get(pretrain)
    if method is not None:
        settings["noise_key"] = key_from_config(config).fingerprint()
    if method == "linear_scaling_safeguarded":
        guards = safeguarded_section(language_config(config, settings["study"]).get("linear_scaling"))["safeguard"]
        settings["safeguard"] = Safeguard.from_config(guards).to_dict()
    return device_blind(settings)


def language_method_config(cfg: dict, method: str) -> dict:
    """A language study's merged config as `method` reads it: `linear_scaling` is the paper's rule,
    exact, so the study's `linear_scaling.safeguard` (the settings of `linear_scaling_safeguarded`)
    is dropped for it; other methods read the config as is."""
    if method != "linear_scaling" or "safeguard" not in (cfg.get("linear_scaling") or {}):
        return cfg
    return cfg | {"linear_scaling": {k: v for k, v in cfg["linear_scaling"].items() if k != "safeguard"}}


def check_language_plan(config: dict, spec: dict) -> None:
    """The search space and, for the linear scaling rule, the stage budgets against every target ε
    (InfeasibleBudgetError before any job runs). δ = 1/(2N) is checked at N = data.max_train when set."""
    cfg = language_config(config, spec, language_public_size(spec))
    if isinstance(cfg["privacy"]["delta"], str):
        return  # δ = 1/(2N) and N is known only once the data is loaded; the job checks again before training
    search_space(cfg)
    if {"linear_scaling", "linear_scaling_safeguarded"} & set(spec.get("methods", [])):
        try:
            check_budgets(linear_scaling_config(cfg), selection_rule(cfg), target_eps(cfg), float(cfg["privacy"]["delta"]))
        except DPHPOError as err:
            raise type(err)(f"language.studies.{spec['name']}: {err}") from None


def uses_cache(spec: dict) -> bool:
    """Classification studies train the top layers on cached hidden states of the frozen bottom."""
    return spec["task"] == "classification"


def language_targets(config: dict, spec: dict) -> list[float]:
    """The target ε of a language study (its overrides.privacy.target_eps, else the base config's)."""
    return target_eps(language_config(config, spec))


def language_source(config: dict, spec: dict) -> dict[str, str]:
    """The input file of a study's training jobs: its hidden-state cache or its pretrained LM."""
    if uses_cache(spec):
        return {"source": layout.path(layout.LANGUAGE_CACHE, study=spec["name"])}
    if spec["model"].get("pretrain"):
        return {"source": layout.path(layout.LANGUAGE_PRETRAINED, name=spec["model"]["pretrain"])}
    return {}


def language_result_files(config: dict, name: str, method: str) -> list[str]:
    """Every result.json of `method` on language study `name`: seeds × the study's target ε (seed-major);
    the non-private reference has one."""
    if method == "nonprivate":
        return [layout.path(layout.LANGUAGE_NONPRIVATE_RESULT, study=name)]
    targets = language_targets(config, language_study(config, name))
    return [layout.path(layout.LANGUAGE_RESULT, study=name, method=method, seed=s, eps=e)
            for s in config.get("seeds", [0]) for e in targets]


def config_value(config: Mapping | None, key: str) -> tuple[bool, Any]:
    """(found, value) of a dotted key such as `extractors.efficientnet_lite0.resolution`."""
    node: Any = config or {}
    for part in key.split("."):
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False, None
    return True, node


def table_labels(config: Mapping | None) -> dict:
    """What of a config the bundle's tables read (their labels): the settings chosen on private data
    (`design_notes`) with their values, where methods' settings come from (`settings_sources`), the studies
    on their extractor's public pretraining data and, for a note on a pretraining, each extractor's. Every release's
    provenance records it and a bundle's privacy.json too, so `dphpo release` labels its tables without the
    config and `verify --release` rebuilds them from the bundle alone."""
    config = config or {}
    picked: dict = {}
    for key in config.get("design_notes") or {}:
        _copy_path(config, picked, key.split("."))
    for section in ("design_notes", "settings_sources"):
        if config.get(section):
            picked[section] = copy.deepcopy(config[section])
    overlaps = [{"dataset": s["dataset"], "extractor": s["extractor"], OVERLAP_KEY: s[OVERLAP_KEY]}
                for s in config.get("studies") or [] if s.get(OVERLAP_KEY)]
    if overlaps and "studies" not in picked:
        picked["studies"] = overlaps
    if any(key.startswith("pretraining.") for key in config.get("design_notes") or {}):
        for name, e in (config.get("extractors") or {}).items():  # such a note applies by each extractor's pretraining
            entry = picked.setdefault("extractors", {}).setdefault(name, {})
            if isinstance(e, Mapping) and "pretrain" in e:
                entry["pretrain"] = copy.deepcopy(e["pretrain"])
    return picked


def _copy_path(source: Any, target: dict, parts: list[str]) -> None:
    """Copy the value at a dotted key's `parts` from `source` into `target`; a list on the way is copied whole."""
    for i, part in enumerate(parts):
        if not isinstance(source, Mapping) or part not in source:
            return
        if i == len(parts) - 1 or isinstance(source[part], list):
            target[part] = copy.deepcopy(source[part])
            return
        source, target = source[part], target.setdefault(part, {})
