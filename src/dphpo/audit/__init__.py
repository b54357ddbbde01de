"""Empirical privacy audit of the trainer: canary runs (run), lower bounds (bounds), report (table).

The defaults live here, free of heavy imports, so the command line can show them without torch.
"""

from __future__ import annotations

from typing import Any

THREAT_MODELS = ("white-box", "black-box")
#: add_remove: world 1 is world 0 plus the canary (the workflow's adjacency: the worlds differ in size);
#: replace_one: the canary replaces an all-zero record (the same size in both worlds).
NEIGHBOURS = ("add_remove", "replace_one")
#: What the noisy gradient sum is divided by: public, the declared size |D| in both worlds (the
#: trainer as the workflow runs it); private_count, each world's own record count (the old, leaking trainer).
NORMALIZERS = ("public", "private_count")
#: gradient: s·e_c in a feature column of its own (worst-case gradient); zero: an all-zero record,
#: whose gradient is zero, so only the worlds' sizes differ.
CANARIES = ("gradient", "zero")

#: Runs per budget: at least 2 per world and half (the bounds split each world's runs in two); at most
#: a million, since each is a model trained in one batched tensor program (10^12 would ask for
#: terabytes before the first step) and a million already resolves ε to its second decimal.
MIN_RUNS, MAX_RUNS = 8, 1_000_000

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
