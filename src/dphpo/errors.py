"""Errors that name what was wrong and where, for users of the workflow and the CLI."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any


class DPHPOError(Exception):
    """Base class: a user-facing error with a message that says what to fix."""


class ConfigError(DPHPOError):
    """A config key holds a value that cannot be used (the message names the key)."""


class InfeasibleBudgetError(DPHPOError):
    """A privacy plan spends more than the total budget (raised before any training)."""


class FeatureCacheError(DPHPOError):
    """A feature cache file is missing, corrupt or does not match what was asked for."""


class OutputFileError(DPHPOError):
    """A JSON file the workflow wrote (result.json, stage.json, ...) is truncated, unreadable or altered."""


class DatasetError(DPHPOError):
    """A dataset is unknown or its files cannot be found or verified."""


def dataclass_from_section(cls: type, section: Any, where: str, required: Sequence[str]) -> Any:
    """`cls(**section)` for a config mapping, refusing unknown and missing keys with messages naming `where`."""
    if not isinstance(section, Mapping):
        raise ConfigError(f"{where} must be a mapping, got {type(section).__name__}")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(section) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; known: {sorted(known)}")
    for key in required:
        if key not in section:
            raise ConfigError(f"{where}.{key} is required")
    return cls(**dict(section))
