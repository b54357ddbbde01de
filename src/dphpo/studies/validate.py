"""Everything the workflow checks before any job, for both halves (one entry point, `validate_config`):
the schema, every variant, the cross-checks of dphpo.studies.config, the baselines, public
pretraining and each language study with its trainer's settings. It loads the method registry and
the trainers' settings classes (torch); dphpo.studies.config itself stays torch-free."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import jsonschema
import torch
import yaml

from dphpo.data.files import dataset_spec
from dphpo.data.text import overlapping_parts
from dphpo.errors import ConfigError
from dphpo.features.extractors import EXTRACTOR_KINDS
from dphpo.features.pretrain import check_pretraining_config
from dphpo.hpo import registry
from dphpo.privacy.randomness import key_from_config
from dphpo.studies import checks
from dphpo.studies.config import (
    DEFAULT_VARIANT,
    LANGUAGE_ACCOUNTANT,
    LANGUAGE_TASKS,
    LANGUAGE_TRAINERS,
    check_config,
    check_language_plan,
    deep_merge,
    language_studies,
    merged_variant,
    trainer_kind,
    variant_config,
    vision_study,
)
from dphpo.studies.trainers import trainer_settings
from dphpo.train.philox import require_mt

#: The workflow's config schema (the one source of defaults).
SCHEMA = Path(__file__).resolve().parents[3] / "workflow" / "schemas" / "config.schema.yaml"


def load_config(paths: Sequence[str | Path], schema: str | Path = SCHEMA) -> dict:
    """The config of one or more files read as `snakemake --configfile A B` reads them (later files
    override earlier keys, nested mappings merged), each file strictly (a key written twice or invalid
    YAML: file and line), then validated as the workflow validates it, without touching the noise key
    (for readers of a finished tree: `dphpo verify`, `dphpo release`). Raises a DPHPOError naming the
    file or the key."""
    config: dict = {}
    for path in paths:
        if not Path(path).is_file():
            raise ConfigError(f"config file {path} {'is a folder' if Path(path).is_dir() else 'does not exist'}")
        data = checks.load_config_file(path)
        if not isinstance(data, dict):
            raise ConfigError(f"config file {path}: expected a mapping of config keys, got {type(data).__name__}")
        config = deep_merge(config, data)
    validate_config(config, schema, create_key=False)
    return config


def validate_config(config: dict, schema: str | Path, cuda_available: bool | None = None, create_key: bool = True) -> None:
    """Everything the workflow checks before any job, in order: the JSON schema (Snakemake's
    validator, filling in defaults), each variant merged over the base config against the same
    closed schema, then the cross-checks of `check_config`, every vision method against the trainers
    and accountants it accepts (`check_supported_methods`), the baselines' plans and pretraining, and
    last every language study (`check_language_study`). One entry point for both halves.
    Before the schema: `--config key=[...]` lists parsed, every number finite, names path-safe.
    `cuda_available`: whether this machine runs the jobs and has CUDA (None: the jobs run elsewhere or
    not at all, e.g. a dry run or a cluster; `training.device: cuda` is then not checked here).
    Raises a DPHPOError (ConfigError, InfeasibleBudgetError) naming the key."""
    from snakemake.exceptions import WorkflowError  # the workflow extra
    from snakemake.utils import validate

    checks.coerce_command_line_lists(config, yaml.safe_load(Path(schema).read_text()))
    checks.check_finite(config)
    checks.check_names(config)
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
    checks.check_modalities(
        config["studies"], config["extractors"], lambda d: dataset_spec(config, d).modality, lambda k: EXTRACTOR_KINDS[k].modality
    )
    if cuda_available is not None:
        for variant in [DEFAULT_VARIANT, *config.get("variants", {})]:
            where = "training.device" if variant == DEFAULT_VARIANT else f"variants.{variant}.training.device"
            checks.check_device(variant_config(config, variant)["training"], cuda_available, where)
        for name, spec in language_studies(config).items():  # a study's own device, else the top-level one
            checks.check_device(spec.get("training") or {}, cuda_available, f"language.studies.{name}.training.device")
    check_supported_methods(config)  # every method on its study's trainer and accountant (hpo.registry.SUPPORTED)
    registry.check_config(config)  # baselines: known names, feasible plans
    check_pretraining_config(config)  # pretrained_public names a section
    if create_key:
        key_from_config(config)  # create the secret noise key now, once, before any job can race to create it
    for spec in language_studies(config).values():
        check_language_study(config, spec)


def cuda_visible() -> bool:
    """Whether this process sees a CUDA device."""
    return bool(torch.cuda.is_available())


def _schema_message(err: Exception) -> str:
    """`key.path: what is wrong` from Snakemake's wrapper of a jsonschema ValidationError (whose
    own text dumps the schema); for a oneOf, why each alternative failed."""
    cause = err.__context__
    if not isinstance(cause, jsonschema.ValidationError):
        return str(err)
    where = ".".join(str(p) for p in cause.absolute_path) or "the config"
    message = f"{where}: {cause.message}{checks.yaml_number_hint(cause.instance)}"
    if cause.context:
        message += " (" + "; ".join(dict.fromkeys(c.message for c in cause.context)) + ")"
    return message


def supported(method: str, trainer: str, accountant: str, where: str) -> None:
    """`hpo.registry.check_supported`, its ConfigError prefixed with the config key `where`."""
    try:
        registry.check_supported(method, trainer, accountant)
    except ConfigError as err:
        raise ConfigError(f"{where}: {err}") from None


def check_supported_methods(config: dict) -> None:
    """Refuse, naming the config key, a vision method that SUPPORTED (dphpo.hpo.registry) does not list
    for its study's trainer (`studies[].trainer`) and privacy.accountant: the linear scaling rule of
    every study in the main study and in every variant (each at its own accountant), the baselines of
    `baselines.methods` and the opt-in CNN baseline on its studies (main study: `registry.method_jobs`).
    Language studies: `check_language_study`. Raises ConfigError before any job runs."""
    studies = {(s["dataset"], s["extractor"]): i for i, s in enumerate(config["studies"])}
    for variant in [DEFAULT_VARIANT, *config.get("variants", {})]:
        accountant = variant_config(config, variant)["privacy"].get("accountant", "gdp")
        where = "" if variant == DEFAULT_VARIANT else f"variants.{variant} "
        for (dataset, extractor), i in studies.items():
            trainer = trainer_kind(config["studies"][i])
            supported("linear_scaling", trainer, accountant, f"{where}studies[{i}] ({dataset}/{extractor})")
    accountant = config["privacy"].get("accountant", "gdp")
    generator = (config.get("training") or {}).get("noise_generator", "mt")
    for dataset, extractor, method in registry.method_jobs(config):
        where = f"baselines.{method}.studies" if method in registry.IMAGE_METHODS else "baselines.methods"
        trainer = trainer_kind(vision_study(config, dataset, extractor))
        supported(method, trainer, accountant, f"{where} ({dataset}/{extractor})")
        if method in registry.IMAGE_METHODS:
            require_mt(generator, f"{where} ({dataset}/{extractor})")


def check_language_study(config: dict, spec: dict) -> None:
    """What the schema cannot say of a language study; raises ConfigError before any job runs."""
    where = f"language.studies.{spec['name']}"
    if spec["task"] not in LANGUAGE_TASKS:
        raise ConfigError(f"{where}.task: expected one of {LANGUAGE_TASKS}, got {spec['task']!r}")
    if trainer_kind(spec) not in LANGUAGE_TRAINERS:
        raise ConfigError(f"{where}.trainer: expected one of {LANGUAGE_TRAINERS}, got {spec.get('trainer')!r}")
    for m in spec.get("methods", []):  # each method on the study's trainer (dphpo.hpo.registry.SUPPORTED)
        supported(m, trainer_kind(spec), LANGUAGE_ACCOUNTANT, f"{where}.methods")
    pre = spec["model"].get("pretrain")
    if pre and pre not in ((config.get("language") or {}).get("pretrain") or {}):
        raise ConfigError(f"{where}.model.pretrain: {pre!r} is not defined under language.pretrain")
    if pre and spec["task"] != "causal_lm":
        raise ConfigError(f"{where}.model.pretrain: only causal_lm studies use a pretrained small LM")
    if pre:
        shared = overlapping_parts(config["language"]["pretrain"][pre]["data"], spec["data"])
        if shared:
            raise ConfigError(
                f"{where}.data: the public pretraining corpus of {pre!r} includes {shared[0]!r}, the study's private data; "
                "give both a data.partition [k, m] with the same m and different k so they cannot share texts"
            )
    settings = trainer_settings(config, spec)  # raises on bad training keys
    dtype = spec["model"].get("dtype", "float32")
    if dtype != "float32" and getattr(settings, "clipping", None) == "ghost":
        raise ConfigError(
            f"{where}: model.dtype: {dtype} with training.clipping: ghost is refused: ghost clipping's second "
            "backward re-rounds the clipped backprops through the low-precision frozen layers, which breaks the "
            "per-example bound C (docs/privacy.md, Precision); use training.clipping: hooks or model.dtype: float32"
        )
    check_language_plan(config, spec)
