"""Errors that name what was wrong and where, for users of the workflow and the CLI."""


class DPHPOError(Exception):
    """Base class: a user-facing error with a message that says what to fix."""


class ConfigError(DPHPOError):
    """A config key holds a value that cannot be used (the message names the key)."""


class InfeasibleBudgetError(DPHPOError):
    """A privacy plan spends more than the total budget (raised before any training)."""


class FeatureCacheError(DPHPOError):
    """A feature cache file is missing, corrupt or does not match what was asked for."""


class DatasetError(DPHPOError):
    """A dataset is unknown or its files cannot be found or verified."""
