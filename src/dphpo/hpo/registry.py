"""Every HPO method behind one interface.

    METHODS[name](trainer: PrivateTrainer, config: dict, noise: NoiseScope, progress: bool) -> list[MethodResult]

returns one result per target ε of config["privacy"]["target_eps"] (in that order); each result's
ledger covers every trial, score release and final run the method made for that target. The trainer
is any `dphpo.train.protocol.PrivateTrainer` (the workflow builds `LinearHeadTrainer.from_config`
over a feature cache). SUPPORTED is the gate: `dphpo.studies.validate.validate_config` refuses, before
any job and naming the config key, a configured method on a trainer kind or an accountant it does not
list (`check_supported`); the language studies' methods are `methods_for` their trainers.
Adding a method is one module with a `run` (and a `check` that refuses an infeasible plan before any
job runs) plus one line here and one in SUPPORTED (the trainers and accountants it accepts:
`check_supported`, `methods_for`); the workflow's generic `run_method` rule picks it up by name.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dphpo.errors import ConfigError
from dphpo.privacy.accountant import ACCOUNTANTS
from dphpo.privacy.randomness import NoiseScope

if TYPE_CHECKING:  # the methods' modules load torch; the registry itself is read by torch-free table jobs
    from dphpo.hpo.common import MethodResult
    from dphpo.train.protocol import PrivateTrainer

MethodFn = Callable[["PrivateTrainer", dict, NoiseScope, bool], "list[MethodResult]"]


class _Lazy:
    """A method imported on first use (keeps the workflow's parse step free of opacus and friends)."""

    def __init__(self, module: str, run: str, check: str | None = None) -> None:
        self.module, self.run_name, self.check_name = module, run, check

    def __call__(self, trainer: PrivateTrainer, config: dict, noise: NoiseScope, progress: bool = False) -> list[MethodResult]:
        return getattr(importlib.import_module(self.module), self.run_name)(trainer, config, noise, progress)

    def check(self, config: dict) -> None:
        if self.check_name:
            getattr(importlib.import_module(self.module), self.check_name)(config)


_HPO = "dphpo.hpo."
METHODS: dict[str, MethodFn] = {
    "linear_scaling": _Lazy(_HPO + "linear_scaling", "run_from_config"),  # the workflow runs it stage by stage
    # feature studies run it stage by stage as the variant `safeguarded`; language studies as a method
    "linear_scaling_safeguarded": _Lazy(_HPO + "linear_scaling", "run_safeguarded_from_config"),
    "random_search": _Lazy(_HPO + "random_search", "run", "check_drawn"),
    "random_search_k": _Lazy(_HPO + "random_search", "run_k", "check"),
    "grid_oracle": _Lazy(_HPO + "grid_search", "run_oracle"),
    "grid_accounted": _Lazy(_HPO + "grid_search", "run_accounted", "check"),
    "papernot_steinke": _Lazy(_HPO + "papernot_steinke", "run", "check"),
    "koskela": _Lazy(_HPO + "koskela", "run", "check"),
    "oso_dpsgd": _Lazy(_HPO + "oso", "run", "check"),
    "oso_dpsgd_cnn": _Lazy(_HPO + "oso", "run_cnn", "check_cnn"),
    "mehta": _Lazy(_HPO + "mehta", "run", "check"),
}

#: Trainer kinds (`dphpo.train`), the one list of them: the batched linear head over cached features,
#: full fine-tuning (DP-SGD/Adam) and zeroth-order fine-tuning (DP-ZO) of a language model.
#: `dphpo.studies.trainers.TRAINERS` builds each (tests/test_registries.py: the same kinds), and
#: `dphpo.studies.config` says which half of the workflow runs which.
TRAINERS: tuple[str, ...] = ("linear_head", "finetune", "dpzo")


@dataclass(frozen=True)
class Supports:
    """What a method accepts: trainer kinds and values of privacy.accountant."""

    trainers: tuple[str, ...]
    accountants: tuple[str, ...]


_ANY = ACCOUNTANTS
#: Beside each method of METHODS: the trainers it runs on and the accountants it plans with. Methods
#: that compose several runs plan them as exactly μ-GDP (full-batch linear head, "gdp"); methods of
#: single full-budget runs calibrate them with any accountant, so the PRV-accounted fine-tuning
#: trainers run them too. oso_dpsgd_cnn runs on a linear-head trainer too (over a raw-pixel feature
#: cache, which it reads back as images to train its own small CNN) and accounts its Poisson-minibatch
#: CNN runs by PRV itself; its config must still be the exact-GDP one of every baseline.
SUPPORTED: dict[str, Supports] = {
    "linear_scaling": Supports(("linear_head", "finetune", "dpzo"), _ANY),
    "linear_scaling_safeguarded": Supports(("finetune", "dpzo"), _ANY),
    "random_search": Supports(("linear_head", "finetune", "dpzo"), _ANY),
    "random_search_k": Supports(("linear_head",), ("gdp",)),
    "grid_oracle": Supports(("linear_head", "finetune", "dpzo"), _ANY),
    "grid_accounted": Supports(("linear_head",), ("gdp",)),
    "papernot_steinke": Supports(("linear_head",), ("gdp",)),
    "koskela": Supports(("linear_head",), ("gdp",)),
    "oso_dpsgd": Supports(("linear_head",), ("gdp",)),
    "oso_dpsgd_cnn": Supports(("linear_head",), ("gdp",)),
    "mehta": Supports(("linear_head",), ("gdp",)),
}


#: The config each method reads beyond the run settings every job shares (privacy, search_space,
#: training, selection, the study's extractor and dataset): the parts of `linear_scaling` and
#: `baselines` it declares here, and only those (dotted paths). The workflow hands a method nothing
#: else (`dphpo.studies.config.method_config`) and hashes exactly this (its settings hash and noise
#: label), so a change to a sibling method's section reruns none of its jobs. `nonprivate`: the
#: non-private reference (dphpo.hpo.nonprivate), which reads the shared settings and how far the rule
#: variants may reach beyond the grid (`studies.config.ceiling_eta_factor`, hashed with its settings).
READS: dict[str, tuple[str, ...]] = {
    "linear_scaling": ("linear_scaling",),
    "linear_scaling_safeguarded": ("linear_scaling",),
    "random_search": ("baselines.sampling",),
    "random_search_k": ("baselines.sampling", "baselines.random_search_k"),
    "grid_oracle": ("baselines.grid",),
    "grid_accounted": ("baselines.grid", "baselines.grid_accounted"),  # its own grid, else the shared one
    "papernot_steinke": ("baselines.sampling", "baselines.papernot_steinke"),
    "koskela": ("baselines.sampling", "baselines.koskela"),
    "oso_dpsgd": ("baselines.oso_dpsgd",),
    "oso_dpsgd_cnn": ("baselines.oso_dpsgd_cnn",),
    "mehta": ("baselines.mehta",),
    "nonprivate": (),
}
#: The config sections a method sees only in the parts READS declares.
METHOD_SECTIONS: tuple[str, ...] = ("linear_scaling", "baselines")


def check_supported(method: str, trainer: str, accountant: str) -> None:
    """Refuse a method on a trainer kind or an accountant it does not accept, naming the method."""
    if method not in SUPPORTED:
        raise ConfigError(f"unknown method {method!r}; known: {', '.join(SUPPORTED)}")
    supports = SUPPORTED[method]
    if trainer not in supports.trainers:
        raise ConfigError(
            f"method {method!r} does not run on the {trainer!r} trainer; it accepts {', '.join(supports.trainers)}"
        )
    if accountant not in supports.accountants:
        raise ConfigError(
            f"method {method!r} does not plan with privacy.accountant={accountant!r}; it accepts {', '.join(supports.accountants)}"
        )


def methods_for(trainer: str, accountant: str | None = None) -> tuple[str, ...]:
    """The methods (in METHODS order) that run on a trainer kind (and, if given, with an accountant)."""
    if trainer not in TRAINERS:
        raise ConfigError(f"unknown trainer {trainer!r}; known: {', '.join(TRAINERS)}")
    return tuple(
        m for m, s in SUPPORTED.items() if trainer in s.trainers and (accountant is None or accountant in s.accountants)
    )


#: Methods run by the generic workflow rule (everything but the staged linear scaling rule and its
#: safeguarded form, which feature studies run staged as a variant).
BASELINES: tuple[str, ...] = tuple(m for m in METHODS if not m.startswith("linear_scaling"))
#: Baselines that need raw images instead of features; they run on their own studies (opt-in).
IMAGE_METHODS: tuple[str, ...] = ("oso_dpsgd_cnn",)
#: Baselines on the linear head over cached features: run on every study of the config.
FEATURE_BASELINES: tuple[str, ...] = tuple(m for m in BASELINES if m not in IMAGE_METHODS)
#: Results that are not private HPO, whatever their ledger says (tables label them).
NONPRIVATE_HPO: tuple[str, ...] = ("grid_oracle",)
#: Methods whose releases are not DP (ε = ∞): the non-private reference and the test-selected oracles.
#: A bundle holds them only with `dphpo release --include-nonprivate`.
NOT_DP_METHODS: tuple[str, ...] = ("nonprivate", *NONPRIVATE_HPO)


def configured_baselines(config: dict) -> list[str]:
    """The feature baselines the config runs on every study (`baselines.methods`)."""
    methods = list(config.get("baselines", {}).get("methods", FEATURE_BASELINES))
    for m in methods:
        if m not in FEATURE_BASELINES:
            hint = f" ({m} runs on baselines.{m}.studies)" if m in IMAGE_METHODS else ""
            raise ConfigError(f"baselines.methods: unknown method {m!r}{hint}; expected some of {', '.join(FEATURE_BASELINES)}")
    return methods


def cnn_studies(config: dict) -> list[tuple[str, str]]:
    """(dataset, extractor) pairs of the opt-in CNN baseline (`baselines.oso_dpsgd_cnn.studies`)."""
    return [(s["dataset"], s["extractor"]) for s in config.get("baselines", {}).get("oso_dpsgd_cnn", {}).get("studies", [])]


def method_jobs(config: dict) -> list[tuple[str, str, str]]:
    """Every (dataset, extractor, method) the workflow runs with the generic rule."""
    jobs = [(s["dataset"], s["extractor"], m) for s in config["studies"] for m in configured_baselines(config)]
    jobs += [(d, e, "oso_dpsgd_cnn") for d, e in cnn_studies(config)]
    return jobs


def check_config(config: dict) -> None:
    """Refuse unknown baselines, infeasible baseline plans and `settings_sources` of unknown methods
    before any job runs."""
    for name in configured_baselines(config):
        METHODS[name].check(config)
    METHODS["oso_dpsgd_cnn"].check(config)
    settings_sources(config)


def settings_sources(config: Mapping) -> dict[str, str]:
    """`settings_sources` of a config: method id (`method` or `method:variant`) -> where its settings
    come from. A ConfigError names a key whose method is not in METHODS."""
    sources = {str(k): str(v) for k, v in ((config or {}).get("settings_sources") or {}).items()}
    for key in sources:
        if key.partition(":")[0] not in METHODS:
            raise ConfigError(f"settings_sources.{key}: not a method; known: {', '.join(METHODS)} (or method:variant)")
    return sources


def run_method(name: str, trainer: PrivateTrainer, config: dict, noise: NoiseScope, progress: bool = False) -> list[MethodResult]:
    if name not in METHODS:
        raise ConfigError(f"unknown method {name!r}; known: {', '.join(METHODS)}")
    results = METHODS[name](trainer, config, noise, progress)
    targets = [float(e) for e in config["privacy"]["target_eps"]]
    if [r.target_eps for r in results] != targets:
        raise RuntimeError(f"{name} returned results for {[r.target_eps for r in results]}, expected {targets}")
    return results
