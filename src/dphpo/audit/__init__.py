"""Empirical privacy audit of the trainer: canary runs (run), lower bounds (bounds), report (table).

The defaults live here, free of heavy imports, so the command line can show them without torch.
"""

from __future__ import annotations

from typing import Any

THREAT_MODELS = ("white-box", "black-box")

#: Defaults of the `audit:` config section (workflow/schemas/config.schema.yaml) and of `dphpo audit`.
CONFIG_DEFAULTS: dict[str, Any] = {
    "eps": [1.0, 4.0],
    "delta": 1e-5,
    "runs": 40000,
    "steps": 5,
    "lr": 1.0,
    "batch_size": None,
    "accountant": None,
    "alpha": 0.05,
    "seed": 0,
    "data": "digits",
    "max_train": 128,
    "threat_models": list(THREAT_MODELS),
    "canary_norm": 10.0,
}
