"""Glue between a workflow config and the library: parsed settings, features, provenance.

Workflow scripts stay thin by calling these helpers; everything here is plain Python and tested.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import sys
from pathlib import Path
from typing import Any, Iterator

import torch

from dphpo.hpo.common import LinearHeadTrainer, MethodResult, PreparedFeatures, TrainSettings, prepare_features
from dphpo.hpo.linear_scaling import LinearScalingConfig
from dphpo.privacy.accountant import accountant_from_config
from dphpo.privacy.randomness import NoiseScope, key_from_config
from dphpo.hpo.selection import SelectionRule
from dphpo.hpo.space import SearchSpace
from dphpo.provenance import config_hash, package_versions


DEFAULT_VARIANT = "default"
# Top-level keys every variant shares with the base config (results/features/... has no variant).
VARIANT_SHARED_KEYS = ("seeds", "studies", "datasets", "extractors", "pretraining", "data_dir", "variants")


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
    from dphpo.errors import ConfigError

    variants = config.get("variants", {})
    if variant not in variants:
        raise ConfigError(f"variants.{variant}: no such variant (defined: {', '.join(sorted(variants)) or 'none'})")
    overrides = variants[variant]
    if not isinstance(overrides, dict):
        raise ConfigError(f"variants.{variant} must be a mapping of config overrides, got {type(overrides).__name__}")
    shared = [k for k in VARIANT_SHARED_KEYS if k in overrides]
    if "target_eps" in (overrides.get("privacy") or {}):
        shared.append("privacy.target_eps")
    if shared:
        raise ConfigError(
            f"variants.{variant}: {', '.join(shared)} cannot be overridden in a variant: budgets, seeds, "
            "studies and the feature caches (datasets, extractors, pretraining, data_dir) are shared by all variants"
        )
    return deep_merge({k: v for k, v in config.items() if k != "variants"}, overrides)


def eps_label(eps: float) -> str:
    """How a target ε appears in file paths: 0.25 → '0.25', 1.0 → '1'."""
    return f"{float(eps):g}"


def target_eps(config: dict) -> list[float]:
    return [float(e) for e in config["privacy"]["target_eps"]]


# Config sections a training job's numbers depend on (its study's extractor is added per job).
RUN_SETTINGS_KEYS = ("data_dir", "privacy", "search_space", "training", "selection", "linear_scaling", "baselines")


def run_settings(cfg: dict, extractor: str | None = None, dataset: str | None = None) -> dict:
    """What a training job computes from, read off a variant's config (`variant_config`): the run
    settings sections, the study's extractor section and dataset options, the public size and the
    noise key's fingerprint (another key draws other noise)."""
    from dphpo.features.build import dataset_options

    settings = {key: cfg.get(key) for key in RUN_SETTINGS_KEYS}
    if extractor is not None:
        settings["extractor"] = cfg.get("extractors", {}).get(extractor)
    if dataset is not None:
        settings["dataset"] = dataset_options(cfg, dataset)
        settings["public_n_train"] = public_train_size(cfg, dataset)
    settings["noise_key"] = key_from_config(cfg).fingerprint()  # the key's path is not hashed
    settings["privacy"] = {k: v for k, v in (settings["privacy"] or {}).items() if k != "noise_key_file"}
    return settings


def run_settings_hash(config: dict, variant: str = DEFAULT_VARIANT, extractor: str | None = None,
                      dataset: str | None = None) -> str:
    """Hash of `run_settings`: a rule `params:` entry, so that Snakemake reruns exactly the jobs a
    config change affects, and what every result records (`provenance.settings_hash`) so that a
    consumer refuses a result of other settings (`check_inputs`) even where Snakemake did not rerun."""
    return config_hash(run_settings(variant_config(config, variant), extractor, dataset))


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def check_inputs(paths: Any, config: dict) -> None:
    """Refuse a stage or result file computed with other settings than `config` asks for (after
    `rm -rf .snakemake`, `--rerun-triggers mtime` or a copied tree, Snakemake may not rerun it),
    naming the file and the keys that differ. Raises OutputFileError."""
    import json

    from dphpo.errors import OutputFileError
    from dphpo.io import read_json

    for path in paths:
        prov = read_json(path).get("provenance") or {}
        if "settings_hash" not in prov:
            raise OutputFileError(f"{path} records no settings_hash: it was written by an older dphpo; delete it and rerun")
        want = run_settings(variant_config(config, prov.get("variant", DEFAULT_VARIANT)), prov.get("extractor"), prov.get("dataset"))
        if prov["settings_hash"] != config_hash(want):
            had, now = _flat(prov.get("settings") or {}), _flat(json.loads(json.dumps(want, default=str)))
            keys = sorted(k for k in set(had) | set(now) if had.get(k) != now.get(k)) or ["(unknown: no settings recorded)"]
            raise OutputFileError(
                f"{path} was computed with other settings than the config asks for ({', '.join(keys[:8])} differ); "
                f"delete it or rerun with `snakemake --forcerun {path}`"
            )


def train_settings(config: dict) -> TrainSettings:
    return TrainSettings.from_config(config)


def search_space(config: dict) -> SearchSpace:
    return SearchSpace.from_config(config["search_space"])


def selection_rule(config: dict) -> SelectionRule:
    return SelectionRule.from_config(config.get("selection", {}))


def linear_scaling_config(config: dict) -> LinearScalingConfig:
    return LinearScalingConfig.from_config(config.get("linear_scaling", {}))


def load_features(config: dict, path: str | Path, dataset: str, extractor: str) -> PreparedFeatures:
    """Read and verify a feature cache, then prepare it for training as the config says."""
    from dphpo.features.cache import load_feature_cache

    from dphpo.features.build import expected_attrs

    # a cache built under other dataset options (subsets) or extractor settings is refused, not used
    feature_set = load_feature_cache(path, expect=expected_attrs(dataset, extractor, config))
    return prepare_features(feature_set, train_settings(config), public_train_size(config, dataset))


def public_train_size(config: dict, dataset: str) -> int:
    """The declared public size of a study's training set (`datasets.<name>.public_n_train`, else the
    dataset's published size capped by max_train): what the mechanism divides by, never the private count."""
    from dphpo.data.registry import public_train_size as declared_size

    section = (config.get("datasets") or {}).get(dataset) or {}
    return declared_size(dataset, section.get("max_train"), section.get("public_n_train"))


def load_trainer(config: dict, path: str | Path, dataset: str, extractor: str) -> LinearHeadTrainer:
    """The linear-head trainer over a verified feature cache, with the accountant the config asks for."""
    return LinearHeadTrainer.from_config(load_features(config, path, dataset, extractor), config)


def noise_scope(config: dict, dataset: str, extractor: str, variant: str, seed: int) -> NoiseScope:
    """The private draws of one study run: the secret key (privacy.noise_key_file) scoped by every label
    that tells two published results apart, so no two of them share noise."""
    return key_from_config(config).scope(dataset=dataset, extractor=extractor, variant=variant, seed=int(seed))


def provenance(config: dict, trainer: Any | None = None, result: MethodResult | None = None,
               noise: NoiseScope | None = None, **extra: Any) -> dict:
    """The provenance block of every result file.

    accountant: how each training run was accounted — the trainer's run accountant (`describe()`:
    name and parameters; read off the config when no trainer is given) — and, for a result, what
    composed its ledger (`ledger_total`: gdp_closed_form, rdp, or the PRV accountant). The trainer adds
    its own block (linear head: feature cache checksums and the training settings).
    """
    accountant = trainer.accountant.describe() if trainer is not None else accountant_from_config(config).describe()
    if result is not None and result.private:
        accountant["ledger_total"] = result.total["accountant"]
    block: dict[str, Any] = {
        "config_hash": config_hash(config),
        "package_versions": package_versions(),
        "accountant": accountant,
        "torch_threads": torch.get_num_threads(),
    }
    if trainer is not None:
        block.update(trainer.provenance())
    else:
        block["training"] = train_settings(config).__dict__
    if "dataset" in extra and "extractor" in extra:  # what Snakemake's params hash: consumers check it
        block["settings"] = run_settings(config, extra["extractor"], extra["dataset"])
        block["settings_hash"] = config_hash(block["settings"])
    if noise is not None:
        block["randomness"] = noise.describe()
        cache = block.get("feature_cache") or {}
        for name in ("content_sha256", "dataset_checksum"):  # the plain checksums stay in the internal log
            if cache.get(name):
                cache[name + "_mac"] = noise.mac(cache[name])
    block.update(extra)
    return block


@contextlib.contextmanager
def job_log(log_path: str | Path, threads: int = 1) -> Iterator[logging.Logger]:
    """Send a job's stdout, stderr (progress bars included) and logging to its Snakemake log file."""
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(max(1, int(threads)))
    with open(log_path, "w", buffering=1) as fh, contextlib.redirect_stdout(fh), contextlib.redirect_stderr(fh):
        handler = logging.StreamHandler(fh)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root = logging.getLogger()
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        try:
            yield logging.getLogger("dphpo")
        except BaseException:
            import traceback

            traceback.print_exc(file=fh)
            raise
        finally:
            root.removeHandler(handler)
            sys.stderr.flush()


def validate_config(config: dict, schema: str | Path) -> None:
    """Everything the workflow checks before any job, in order: the JSON schema (Snakemake's
    validator, filling in defaults), each variant merged over the base config against the same
    closed schema, then the cross-checks of `check_config`, the baselines and pretraining.
    Raises a DPHPOError (ConfigError, InfeasibleBudgetError) naming the key."""
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    from dphpo.errors import ConfigError
    from dphpo.features.pretrain import check_pretraining_config
    from dphpo.hpo import registry

    try:
        validate(config, schema=str(schema))
    except WorkflowError as err:
        raise ConfigError(_schema_message(err)) from None
    for variant in config.get("variants", {}):
        try:
            validate(merged_variant(config, variant), schema=str(schema))
        except WorkflowError as err:
            raise ConfigError(f"variants.{variant} (merged over the base config): {_schema_message(err)}") from None
    check_config(config)
    registry.check_config(config)  # baselines: known names, feasible plans
    check_pretraining_config(config)  # pretrained_public names a section
    key_from_config(config)  # create the secret noise key now, once, before any job can race to create it


def _schema_message(err: Exception) -> str:
    """`key.path: what is wrong` from Snakemake's wrapper of a jsonschema ValidationError (whose
    own text dumps the schema); for a oneOf, why each alternative failed."""
    import jsonschema

    cause = err.__context__
    if not isinstance(cause, jsonschema.ValidationError):
        return str(err)
    where = ".".join(str(p) for p in cause.absolute_path) or "the config"
    message = f"{where}: {cause.message}"
    if cause.context:
        message += " (" + "; ".join(dict.fromkeys(c.message for c in cause.context)) + ")"
    return message


def check_config(config: dict) -> None:
    """Checks the JSON schema cannot express; raises ConfigError / InfeasibleBudgetError before any job runs."""
    from dphpo.data import DATASETS
    from dphpo.errors import ConfigError, DPHPOError
    from dphpo.hpo.linear_scaling import check_budgets

    _refuse_duplicates("seeds", [int(s) for s in config["seeds"]], str)
    # two budgets that share a results path (eps_label) would overwrite each other's files
    _refuse_duplicates("privacy.target_eps", list(config["privacy"]["target_eps"]), eps_label)
    for name in config.get("datasets") or {}:
        if name not in DATASETS:
            raise ConfigError(f"datasets.{name}: unknown dataset {name!r}; known: {', '.join(sorted(DATASETS))}")
    for i, entry in enumerate(config["studies"]):
        if entry["dataset"] not in DATASETS:
            raise ConfigError(
                f"studies[{i}].dataset: unknown dataset {entry['dataset']!r}; known: {', '.join(sorted(DATASETS))}"
            )
        if entry["extractor"] not in config["extractors"]:
            raise ConfigError(
                f"studies[{i}].extractor: {entry['extractor']!r} is not defined under `extractors` "
                f"(defined: {', '.join(sorted(config['extractors']))})"
            )
    for variant in [DEFAULT_VARIANT, *config.get("variants", {})]:
        cfg = variant_config(config, variant)
        try:
            search_space(cfg)  # raises ConfigError on bad grids
            check_budgets(linear_scaling_config(cfg), selection_rule(cfg), target_eps(cfg), float(cfg["privacy"]["delta"]))
        except DPHPOError as err:
            where = "" if variant == DEFAULT_VARIANT else f"variants.{variant}: "
            raise type(err)(where + str(err)) from None


def _refuse_duplicates(key: str, values: list, label) -> None:
    """ConfigError naming `key` when two of its values are the same once written as `label(value)`."""
    from dphpo.errors import ConfigError

    seen: dict[str, Any] = {}
    for value in values:
        if label(value) in seen:
            raise ConfigError(
                f"{key}: {seen[label(value)]!r} and {value!r} are the same entry ({label(value)!r}) listed twice; "
                "list each once (a duplicate would only repeat identical runs and overwrite their results)"
            )
        seen[label(value)] = value
