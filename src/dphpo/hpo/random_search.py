"""Random search (Panda et al. §2.1; docs/methods.md §4).

`random_search` is the paper's definition: draw (η, T) at random from the search space and do a
single run with the entire privacy budget — no selection, nothing else released.
`random_search_k` draws k candidates, trains each at μ_run and releases the best one chosen by the
honest selection rule; k·μ_run² plus the k selection releases compose to the target:
μ_run = √((μ(ε)² − k·μ_sel²)/k), planned by the accountant (`runs_mu`) and refused before training
when the selection releases alone exceed the budget. Both are `candidates.run_composed`.
"""

from __future__ import annotations

from dataclasses import dataclass

from dphpo.errors import ConfigError
from dphpo.hpo.candidates import (
    SAMPLINGS,
    baselines_section,
    candidate_sampling,
    context,
    draw_candidates,
    run_composed,
)
from dphpo.hpo.common import MethodResult
from dphpo.hpo.space import SearchSpace
from dphpo.privacy.randomness import NoiseScope
from dphpo.train.protocol import PrivateTrainer

METHOD = "random_search"
METHOD_K = "random_search_k"


@dataclass(frozen=True)
class RandomSearchConfig:
    k: int = 3
    sampling: str = "grid"

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ConfigError(f"baselines.random_search_k.k: must be >= 1, got {self.k}")
        if self.sampling not in SAMPLINGS:
            raise ConfigError(f"baselines.sampling: expected one of {SAMPLINGS}, got {self.sampling!r}")

    @classmethod
    def from_config(cls, config: dict) -> RandomSearchConfig:
        return cls(k=int(baselines_section(config, METHOD_K).get("k", 3)), sampling=candidate_sampling(config))


def run(trainer: PrivateTrainer, config: dict, noise: NoiseScope, progress: bool = False) -> list[MethodResult]:
    """Random search, the paper's definition: one random (η, T), one run at the full budget."""
    _, space, selection, targets = context(config, trainer, METHOD)
    rsc = RandomSearchConfig.from_config(config)
    candidates = {t: draw_candidates(space, noise.rng(METHOD, f"{t:.10g}"), 1, rsc.sampling) for t in targets}
    return run_composed(
        METHOD,
        trainer,
        selection,
        candidates,
        noise,
        search_info={"definition": "Panda et al. §2.1: one run at the full budget with (eta, T) drawn at random", "sampling": rsc.sampling},
        progress=progress,
    )


def run_k(trainer: PrivateTrainer, config: dict, noise: NoiseScope, progress: bool = False) -> list[MethodResult]:
    """k random candidates composed, the best released by the honest selection rule."""
    _, space, selection, targets = context(config, trainer)
    rsc = RandomSearchConfig.from_config(config)
    candidates = {t: draw_candidates(space, noise.rng(METHOD_K, f"{t:.10g}"), rsc.k, rsc.sampling) for t in targets}
    return run_composed(
        METHOD_K,
        trainer,
        selection,
        candidates,
        noise,
        search_info={
            "definition": "k random candidates, each at mu_run = sqrt((mu(eps)^2 - k mu_sel^2)/k), best released",
            "k": rsc.k,
            "sampling": rsc.sampling,
        },
        progress=progress,
    )


def check_drawn(config: dict) -> None:
    """Refuse `baselines.sampling: r` with `search_space.r_sampling: log_grid`, which draws nothing: the
    "random" search would run the same fixed candidates under every key (grid_accounted is that method)."""
    rsc = RandomSearchConfig.from_config(config)
    if rsc.sampling == "r" and SearchSpace.from_config(config["search_space"]).r_sampling == "log_grid":
        raise ConfigError(
            "search_space.r_sampling: log_grid places its candidates without a draw, so random search (Panda et al. "
            "§2.1: hyperparameters drawn at random) would run fixed ones; use a drawn r_sampling, or baselines.sampling: grid"
        )


def check(config: dict) -> None:
    """Refuse random_search_k's fixed candidates (`check_drawn`) or an infeasible plan before any job runs."""
    check_drawn(config)
    accountant, _, selection, targets = context(config)
    rsc = RandomSearchConfig.from_config(config)
    for target in targets:
        accountant.runs_mu(target, rsc.k, selection.at(target, rsc.k).mu_per_release, METHOD_K)
