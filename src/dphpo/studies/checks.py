"""Config checks that stop a careless config before any job (issue 16), each naming the key or file.

Torch-free: what needs the extractors or the GPU is passed in by the caller.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml

from dphpo.errors import ConfigError

NAME_RE = re.compile(r"^[A-Za-z0-9_]+$")  # variant, study and extractor names appear in paths and wildcards
# A grid larger than this is a typo (steps {min: 5, max: 5000000}), not a study: grid_oracle would train
# every configuration. The paper's largest grid (language, 5 x 3 configurations, T up to 10,000) is far below.
MAX_GRID_CONFIGS = 10_000
MAX_GRID_STEPS = 10_000_000  # sum of T over the grid's configurations


# ------------------------------------------------------------------------------------------------
# the files


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key written twice in one mapping (PyYAML keeps the last silently)."""


def _mapping_without_duplicates(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue  # `<<: *anchor` merges another mapping; its keys may be overridden, not duplicated
        key = loader.construct_object(key_node, deep=deep)
        line = key_node.start_mark.line + 1
        if key in seen:
            raise ConfigError(
                f"{loader.name}: line {line}: key {key!r} is written twice (first on line {seen[key]}); YAML would keep "
                "only the last one and silently drop the first block: merge them"
            )
        seen[key] = line
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)


def load_config_file(path: str | Path) -> Any:
    """A config file parsed strictly: duplicate keys and invalid YAML are refused with file and line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"config file {path}: cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path}: not UTF-8 text (byte {exc.start}: {exc.object[exc.start:exc.start + 1]!r}); "
                          "save it as UTF-8 YAML") from None
    loader = _StrictLoader(text)
    loader.name = str(path)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"config file {path}: {where}invalid YAML ({problem})") from None
    finally:
        loader.dispose()


def check_config_files(paths: Iterable[str | Path]) -> None:
    for path in paths:
        load_config_file(path)


def yaml_number_hint(value: Any) -> str:
    """A hint for a number PyYAML (YAML 1.1) read as a string: `1e-6` needs a dot (`1.0e-6`)."""
    if isinstance(value, str) and "e" in value.lower():
        try:
            float(value)
        except ValueError:
            return ""
        return f" (YAML 1.1 reads {value!r} as a string: write it with a dot and a signed exponent, e.g. 1.0e-6)"
    return ""


def coerce_command_line_lists(config: dict, schema: dict) -> None:
    """`--config seeds=[0,1]` arrives as the string '[0,1]' or the list ['0', '1']: parse such top-level
    values as YAML where the schema expects a list (of numbers) or a mapping (README: override any key
    with --config key=value)."""
    for key, spec in (schema.get("properties") or {}).items():
        value = config.get(key)
        types = _types(spec)
        if isinstance(value, str) and types & {"array", "object"}:
            parsed = _yaml_scalar(value)  # unparsable text stays: the schema names the key and what it expects
            if isinstance(parsed, (list, dict)):
                value = config[key] = parsed
        if isinstance(value, list) and "array" in types and _types(spec.get("items") or {}) & {"integer", "number"}:
            config[key] = [_yaml_scalar(v) for v in value]


def _types(spec: dict) -> set[str]:
    types = spec.get("type")
    return {types} if isinstance(types, str) else set(types or ())


def _yaml_scalar(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return yaml.safe_load(value)
    except yaml.YAMLError:
        return value


# ------------------------------------------------------------------------------------------------
# the values


def check_finite(config: Any, where: str = "") -> None:
    """Every number finite: NaN clips nothing and trains at chance, inf trains at η = ∞; provenance
    would write NaN as null, which reads as 'off'."""
    if isinstance(config, dict):
        for key, value in config.items():
            check_finite(value, f"{where}.{key}" if where else str(key))
    elif isinstance(config, list):
        for i, value in enumerate(config):
            check_finite(value, f"{where}[{i}]")
    elif isinstance(config, float) and not math.isfinite(config):
        raise ConfigError(f"{where}: expected a finite number, got {config}")


def check_names(config: dict) -> None:
    """Names that become path parts and wildcard values: letters, digits and underscores only."""
    for section in ("variants", "extractors"):
        for name in config.get(section) or {}:
            if not NAME_RE.match(str(name)):
                raise ConfigError(f"{section}.{name}: names may hold letters, digits and underscores only")
    if "default" in (config.get("variants") or {}):
        raise ConfigError(
            "variants.default: 'default' is the base config itself (results/runs/…/default/); a variant of that "
            "name would be ignored: rename it, or change the base config"
        )


def grid_size(search_space: dict) -> tuple[int, int]:
    """(configurations, sum of T over them) of a search space, without expanding a range of steps."""
    eta_num = int(search_space["eta"].get("num", 10))
    steps = search_space["steps"]
    if isinstance(steps, dict):
        low, high, step = int(steps["min"]), int(steps["max"]), int(steps.get("step", 1))
        count = max(0, (high - low) // step + 1)
        total = count * low + step * count * (count - 1) // 2
    else:
        count, total = len(set(steps)), sum(set(int(t) for t in steps))
    return eta_num * count, eta_num * total


def check_grid_size(search_space: dict, where: str = "search_space") -> None:
    configs, steps = grid_size(search_space)
    if configs > MAX_GRID_CONFIGS or steps > MAX_GRID_STEPS:
        raise ConfigError(
            f"{where}.steps: the grid has {configs:,} configurations and {steps:,} training steps in all (limits "
            f"{MAX_GRID_CONFIGS:,} and {MAX_GRID_STEPS:,}): grid_oracle and grid search train every one; "
            "list the step counts, or use a coarser {min, max, step}"
        )


def check_selection(selection: dict, where: str = "selection") -> None:
    if selection.get("rule") == "public_validation":
        raise ConfigError(
            f"{where}.rule: public_validation needs a public validation split, and no dataset of this workflow "
            "supplies one; use noisy_train_accuracy (accounted), or test / train_nonprivate (labelled as not private)"
        )


def check_device(training: dict, cuda_available: bool, where: str = "training.device") -> None:
    """`cuda` on a machine without one fails inside the first job; refuse it before (a cluster whose
    GPU nodes differ from the submitting node passes cuda_available=True)."""
    device = str(training.get("device", "auto"))
    if device.startswith("cuda") and not cuda_available:
        raise ConfigError(
            f"{where}: {device!r} but no CUDA device is visible here; use auto (CUDA when present, else CPU), or run "
            "the GPU rules through a cluster profile (profiles/slurm)"
        )


def check_modalities(
    studies: list[dict],
    extractors: dict,
    dataset_modality: Callable[[str], str],
    extractor_modality: Callable[[str], str],
) -> None:
    """Each study pairs a dataset and an extractor of the same modality (an image network cannot read texts)."""
    for i, study in enumerate(studies):
        kind = extractors[study["extractor"]]["kind"]
        wanted, has = extractor_modality(kind), dataset_modality(study["dataset"])
        if wanted not in ("any", has):
            raise ConfigError(
                f"studies[{i}]: dataset {study['dataset']!r} is {has} but extractor {study['extractor']!r} (kind {kind}) "
                f"reads {wanted} inputs; pair image datasets with image extractors and texts with text extractors"
            )
