"""What the study target (`all`) costs before it runs: `dphpo plan-cost` (issue 32).

Per rule of the DAG: its jobs (the searches `study_jobs` lists, every seed; the linear scaling rule's
stage and final jobs; the non-private references), the trial-steps they train in expectation (a
method's trials × the mean T of its grid: the r a search samples is not known before it runs), and
their FLOP: 4·N·d·K per trial-step, the batched trainer's two GEMMs (benchmarks/README.md). Time is
FLOP over a throughput measured here (`measure_gflops`: the trainer itself on synthetic features,
a few seconds) or given, plus a start-up cost per job (imports, reading the feature cache). The
CNN baseline and the language rules are listed with their job counts, not timed.
"""

from __future__ import annotations

import functools
import math
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from dphpo.data.registry import DATASETS, public_train_size
from dphpo.errors import DatasetError
from dphpo.features.networks import build_network
from dphpo.hpo.grid_search import ACCOUNTED, ORACLE, GridConfig
from dphpo.hpo.koskela import KoskelaConfig
from dphpo.hpo.linear_scaling_plan import LinearScalingConfig, stage_searches
from dphpo.hpo.nonprivate import ceiling_grid
from dphpo.hpo.oso import OsoConfig
from dphpo.hpo.papernot_steinke import PSConfig
from dphpo.hpo.random_search import RandomSearchConfig
from dphpo.hpo.space import SearchSpace
from dphpo.studies import config as study_config
from dphpo.train.dpgd import TrialBatch, shared_runs, train_linear_dpgd

#: Seconds a job spends before and after training on this kind of machine (imports, the feature
#: cache, writing): ~15 s per linear scaling job on 2 cores (results/benchmarks of `make study`).
JOB_OVERHEAD_S = 15.0
#: Feature widths of the extractors whose caches do not exist yet (the cache's own width wins); timm
#: models and the publicly pretrained networks are built on the `meta` device to read theirs.
FEATURE_DIMS = {"efficientnet_lite0": 1280, "minilm_l6": 384, "minilm": 384}
#: Raw pixels per image of the built-in image datasets (extractor kind `raw`).
RAW_WIDTHS = {"digits": 64, "mnist": 784, "fashion_mnist": 784, "emnist": 784, "cifar10": 3072, "cifar100": 3072,
              "svhn": 3072, "synthetic_shapes": 3072}
#: Methods whose cost this model does not cover (another model than the linear head).
NOT_MODELLED = {"oso_dpsgd_cnn": "a CNN on raw pixels (DP-SGD), not the linear head"}


@dataclass
class RuleCost:
    rule: str
    jobs: int
    trial_steps: float
    flop: float
    seconds: float | None
    note: str = ""
    longest_job_seconds: float | None = None  # the slowest single job's estimate (a cluster's runtime limit)
    examples: float = 0.0  # language rules: the training examples processed (trial-steps x the batch size)
    # language rules: the slowest job's estimate per language study (its own runtime limit; empty: one per rule)
    longest_by_study: dict[str, float] = field(default_factory=dict)

    def add(self, jobs: int, steps: float, flop: float | None, flop_rate: float | None, overhead_s: float,
            examples: float = 0.0, study: str | None = None) -> None:
        """Count `jobs` more jobs of `steps` trial-steps (`examples` examples) and `flop` FLOP, timed at `flop_rate`
        FLOP/s plus `overhead_s` of start-up per job (`flop_rate` None: not timed; `flop` None: a model of
        unknown size, counted but not timed), of language study `study` where given."""
        self.jobs, self.trial_steps, self.examples = self.jobs + jobs, self.trial_steps + steps, self.examples + examples
        self.flop += flop or 0.0
        if not flop_rate or flop is None:
            return
        self.seconds = (self.seconds or 0.0) + (jobs * overhead_s + flop / flop_rate)
        if jobs and flop:
            longest = overhead_s + flop / jobs / flop_rate
            self.longest_job_seconds = max(self.longest_job_seconds or 0.0, longest)
            if study is not None:
                self.longest_by_study[study] = max(self.longest_by_study.get(study, 0.0), longest)


def _mean_t(config: dict, space: SearchSpace) -> float:
    """E[T] of a random baseline's trial: uniform over the T grid (`baselines.sampling: grid`), or the T its r
    draws decompose into (`sampling: r`, as the rule's trials: a public Monte Carlo, `mean_decomposed_t`)."""
    if (config.get("baselines") or {}).get("sampling", "grid") == "r":
        return mean_decomposed_t(space)
    return float(np.mean(space.steps))


@functools.lru_cache(maxsize=256)
def mean_decomposed_t(space: SearchSpace) -> float:
    """E[T] of an r drawn as `space.r_sampling` says and decomposed by its policy (a fixed seed: public
    choices only)."""
    rng = np.random.default_rng(0)
    return float(np.mean([space.decompose(float(r)).steps for r in space.sample_r(rng, RULE_STEP_DRAWS)]))


def _grid_steps(config: dict, space: SearchSpace, method: str) -> float:
    return float(sum(t for _, t in GridConfig.from_config(config, method).points(space)))


def _reference_steps(config: dict, space: SearchSpace) -> float:
    """The non-private reference's trial-steps: its ceiling grid, of which the noiseless trials of one η
    are one run to their largest T (dphpo.train.dpgd)."""
    grid = ceiling_grid(space, study_config.ceiling_eta_factor(config), study_config.CEILING_ETA_DENSITY)
    runs, _ = shared_runs(TrialBatch([e for e, _ in grid], [t for _, t in grid], [0.0] * len(grid), [0] * len(grid)), None, 0.0)
    return float(sum(runs.steps))


def _koskela_runs(kc: KoskelaConfig) -> float:
    """Full-size runs of one Koskela-Kulkarni target: its trials on the q-subsample (a q share of the
    rows each), then one final run on all of them."""
    return kc.q * kc.ps.k_dist.mean_trials + 1


#: Expected trial-steps of one search job (one seed, every target) of each method.
TRIAL_STEPS: dict[str, Callable[[dict, SearchSpace, int], float]] = {
    "random_search": lambda c, s, n: n * _mean_t(c, s),
    "random_search_k": lambda c, s, n: n * RandomSearchConfig.from_config(c).k * _mean_t(c, s),
    "grid_oracle": lambda c, s, n: n * _grid_steps(c, s, ORACLE),
    "grid_accounted": lambda c, s, n: n * _grid_steps(c, s, ACCOUNTED),
    "papernot_steinke": lambda c, s, n: n * PSConfig.from_config(c).k_dist.mean_trials * _mean_t(c, s),
    "koskela": lambda c, s, n: n * _koskela_runs(KoskelaConfig.from_config(c)) * _mean_t(c, s),
    "oso_dpsgd": lambda c, s, n: n * sum(t for _, t in OsoConfig.from_config(c).candidates(s)),
    "mehta": lambda c, s, n: float(n),
}


def study_shape(config: dict, dataset: str, extractor: str, feature_dim: int | None = None) -> tuple[int, int | None, int]:
    """(N, d, K) of a study from public sizes: the dataset's public N and classes (registry or the
    config's own-data section), the extractor's width (the cache's if given, else FEATURE_DIMS)."""
    own = (config.get("datasets") or {}).get(dataset) or {}
    spec = DATASETS.get(dataset)
    k = len(own["classes"]) if own.get("classes") else (spec.num_classes if spec else 0)  # own data: its declared label set
    return published_train_size(config, dataset), feature_dim or feature_width(config, dataset, extractor), k


def published_train_size(config: dict, dataset: str) -> int:
    """The training split's declared (`datasets.<name>.public_n_train`) or published size, not capped by
    max_train (dphpo.data.registry.public_train_size); 0 where none is known."""
    try:
        return public_train_size(dataset, None, ((config.get("datasets") or {}).get(dataset) or {}).get("public_n_train"))
    except DatasetError:
        return 0


def feature_width(config: dict, dataset: str, extractor: str) -> int | None:
    """The width d of an extractor's features, without weights or data (None where unknown)."""
    spec = (config.get("extractors") or {}).get(extractor) or {}
    kind = spec.get("kind", extractor)
    if extractor in FEATURE_DIMS or kind in FEATURE_DIMS:
        return FEATURE_DIMS.get(extractor) or FEATURE_DIMS[kind]
    if kind == "raw":
        return RAW_WIDTHS.get(dataset)
    own = (config.get("datasets") or {}).get(dataset) or {}
    if kind == "identity" and own.get("kind") == "features":  # the user's own features: the .npz header's width
        return _npz_width(own["path"])
    with torch.device("meta"):  # the architecture only: no weights, no memory
        net, _ = extractor_network(config, spec, kind)
    if net is None:
        return None
    return int(net.feature_dim if kind == "pretrained_public" else net.num_features)


def extractor_network(config: dict, spec: dict, kind: str) -> tuple[torch.nn.Module | None, int]:
    """An image extractor's architecture (section `spec` of kind `kind`; random weights, on the current device:
    `meta` for its shape alone) and its input resolution; (None, 0) for a kind without one here."""
    if kind in ("efficientnet_lite0_packaged", "timm"):
        import timm

        lite0 = kind == "efficientnet_lite0_packaged"
        net = timm.create_model("tf_efficientnet_lite0" if lite0 else spec["model"], pretrained=False, num_classes=0)
        default = 64 if lite0 else net.pretrained_cfg.get("input_size", (3, 224, 224))[-1]
        return net, int(spec.get("resolution") or default)
    if kind == "pretrained_public":
        section = (config.get("pretraining") or {}).get(spec.get("pretrain")) or {}
        if not section.get("arch"):
            return None, 0
        return build_network(section["arch"], 10), int(spec.get("resolution") or section.get("resolution", 32))
    return None, 0


def _npz_width(path: str) -> int | None:
    """The width of `train_x` in an .npz, read from its header (no array loaded); None where unreadable
    (the workflow's own checks name the file)."""
    try:
        with zipfile.ZipFile(path) as archive, archive.open("train_x.npy") as f:
            major, _ = np.lib.format.read_magic(f)
            header = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
            shape = header(f)[0]
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return None
    return int(shape[1]) if len(shape) == 2 else None


def _search_rules(config: dict, method: str, variant: str) -> list[tuple[str, int, float]]:
    """(rule, jobs, trial-steps) of one search at one seed."""
    cfg = study_config.variant_config(config, variant)
    space = SearchSpace.from_config(cfg["search_space"])
    n_targets = len(study_config.target_eps(cfg))
    if method == "linear_scaling":
        lsc = LinearScalingConfig.from_config(cfg.get("linear_scaling", {}))
        (first, later), final = _linear_scaling_steps(cfg, lsc, space, n_targets)
        stages = [("linear_scaling_stage", 1, first)] + ([("linear_scaling_stage", lsc.n_stages - 1, later)] if lsc.n_stages > 1 else [])
        if variant in study_config.own_target_variants(config):  # its final runs: a job per target
            return [*stages, ("linear_scaling_target", n_targets, final)]
        return [*stages, ("linear_scaling_final", 1, final)]
    return [("run_method", 1, TRIAL_STEPS[method](study_config.method_config(cfg, method), space, n_targets))]


def _linear_scaling_steps(cfg: dict, lsc: LinearScalingConfig, space: SearchSpace,
                          n_targets: int) -> tuple[tuple[float, float], float]:
    """((stage 1, all later stages), final) trial-steps of the linear scaling rule at one seed."""
    searches = len(stage_searches(lsc, study_config.target_eps(cfg), 1))
    first, later, final = rule_mean_steps(lsc, space)
    per_stage = searches * lsc.n_trials
    return (per_stage * first, per_stage * (lsc.n_stages - 1) * later), n_targets * final


#: Draws of a stage's trials in the Monte Carlo of the rule's steps (`rule_mean_steps`)
RULE_STEP_DRAWS = 400


@functools.lru_cache(maxsize=256)
def rule_mean_steps(lsc: LinearScalingConfig, space: SearchSpace) -> tuple[float, float, float]:
    """E[T] of a stage-1 trial, of a later stage's trial and of the final run, for the r the rule draws and
    decomposes (`lsc.space`: the safeguard's sampling and decomposition; a later stage samples above the
    previous pick, [r_{k-1}, cap·r_max]). A Monte Carlo over public choices only (a fixed seed, no data).
    The final r is data-dependent; its T is taken as the larger of the stages' means (under the monotone
    guard it is at least the stage picks). The grid's mean T misjudged the safeguarded rule 2.5x (its
    max_steps decomposition runs the grid's most steps for every r above η_min·T_max)."""
    sp, rng = lsc.space(space), np.random.default_rng(0)
    first, later = [], []
    for _ in range(RULE_STEP_DRAWS):
        rs = sp.sample_r(rng, lsc.n_trials)
        first += [sp.decompose(float(r)).steps for r in rs]
        if lsc.later_stage_range == "full":
            nxt = sp.sample_r(rng, lsc.n_trials)
        else:  # the range AbovePrevious gives, from one of the trials as the pick
            lo, hi = float(rng.choice(rs)), lsc.stage_cap * sp.r_max
            nxt = sp.sample_r(rng, lsc.n_trials, lo=lo, hi=hi if hi > lo else sp.r_max)
        later += [sp.decompose(float(r)).steps for r in nxt]
    t1, tk = float(np.mean(first)), float(np.mean(later))
    return t1, tk, max(t1, tk)


def search_trial_steps(cfg: dict, method: str, space: SearchSpace, n_targets: int) -> float:
    """Expected trial-steps of one seed's search of `method` in one job's config (the linear scaling rule
    and its safeguarded variant: stages and final runs together)."""
    if method.startswith("linear_scaling"):
        stages, final = _linear_scaling_steps(cfg, LinearScalingConfig.from_config(cfg.get("linear_scaling", {})), space, n_targets)
        return sum(stages) + final
    return TRIAL_STEPS[method](cfg, space, n_targets)


def plan_cost(config: dict, gflops: float | None, overhead_s: float = JOB_OVERHEAD_S,
              feature_dims: dict[tuple[str, str], int] | None = None) -> list[RuleCost]:
    """The study target's cost per rule (jobs, expected trial-steps, FLOP, seconds at `gflops`)."""
    seeds = len(config["seeds"])
    rules: dict[str, RuleCost] = {}
    shapes: dict[tuple[str, str], tuple[int, int | None, int]] = {}

    def shape(dataset: str, extractor: str) -> tuple[int, int | None, int]:
        if (dataset, extractor) not in shapes:
            shapes[dataset, extractor] = study_shape(config, dataset, extractor, (feature_dims or {}).get((dataset, extractor)))
        return shapes[dataset, extractor]

    def add(rule: str, jobs: int, steps: float, flop: float, note: str = "") -> None:
        rules.setdefault(rule, RuleCost(rule, 0, 0.0, 0.0, None, note)).add(jobs, steps, flop, gflops and gflops * 1e9, overhead_s)

    for dataset, extractor, method, variant in study_config.study_jobs(config):
        if method in NOT_MODELLED:
            add(f"run_method ({method})", seeds, 0.0, 0.0, NOT_MODELLED[method])
            continue
        n, d, k = shape(dataset, extractor)
        for rule, jobs, steps in _search_rules(config, method, variant):
            add(rule, jobs * seeds, steps * seeds, 4.0 * n * (d or 0) * k * steps * seeds)
    for study in config["studies"]:
        n, d, k = shape(study["dataset"], study["extractor"])
        steps = _reference_steps(config, SearchSpace.from_config(config["search_space"]))
        add("nonprivate_reference", 1, steps, 4.0 * n * (d or 0) * k * steps)
    return list(rules.values())


def measure_gflops(n: int = 8192, d: int = 512, k: int = 10, trials: int = 16, steps: int = 5) -> float:
    """GFLOP/s of the batched trainer here, on synthetic features (one warm-up call, then the best of three)."""
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(n, d, generator=gen), torch.randint(0, k, (n,), generator=gen)
    batch = TrialBatch([0.1] * trials, [steps] * trials, [1.0] * trials, list(range(trials)))
    train_linear_dpgd(x, y, k, TrialBatch([0.1] * trials, [1] * trials, [1.0] * trials, list(range(trials))), n_public=n)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        train_linear_dpgd(x, y, k, batch, n_public=n)
        best = min(best, time.perf_counter() - t0)
    return 4.0 * n * d * k * trials * steps / best / 1e9


#: A runtime limit is this many times the slowest job's estimate (the estimate is an expectation; a
#: Papernot–Steinke search's trial count is random, machines differ), and never below RUNTIME_FLOOR_MIN.
RUNTIME_SAFETY = 3.0
RUNTIME_FLOOR_MIN = 10


def runtime_limit(seconds: float) -> int:
    """The runtime limit in minutes (Snakemake's and SLURM's unit) of a job estimated at `seconds`."""
    return max(RUNTIME_FLOOR_MIN, math.ceil(RUNTIME_SAFETY * seconds / 60))


#: A runtime limit above this many minutes (7 days) is past most SLURM partitions' MaxTime
LONG_LIMIT_MIN = 7 * 24 * 60


def long_limits(limits: dict[str, dict]) -> list[tuple[str, int]]:
    """(config key, minutes) of every limit of `runtime_limits` above LONG_LIMIT_MIN."""
    found = []
    for rule, entry in sorted(limits.items()):
        found += [(f"resources.{rule}.runtime", entry["runtime"])] if entry["runtime"] > LONG_LIMIT_MIN else []
        found += [(f"resources.{rule}.by_study.{study}.runtime", e["runtime"]) for study, e in sorted((entry.get("by_study") or {}).items())
                  if e["runtime"] > LONG_LIMIT_MIN]
    return found


def runtime_limits(rules: list[RuleCost]) -> dict[str, dict]:
    """`resources:` config entries with each estimated rule's runtime limit: RUNTIME_SAFETY x its slowest
    job, at least RUNTIME_FLOOR_MIN (`runtime_limit`). The language rules (one generic rule for every
    study) also get one per study, `by_study: {study: {runtime}}` from that study's slowest job; the
    rule's own `runtime`, the slowest study's, stays for a study without an estimate. A rule without an
    estimate (not modelled, or no throughput) keeps the limit its rule or config sets, and so does a rule
    with some jobs not modelled ("run_method (oso_dpsgd_cnn)": a limit sized for its linear heads killed
    the CNN's jobs)."""
    limits: dict[str, dict] = {}
    partly = {r.rule.split(" ")[0] for r in rules if " " in r.rule}
    for r in rules:
        if r.longest_job_seconds is not None and r.rule not in partly and " " not in r.rule:
            limits[r.rule] = {"runtime": runtime_limit(r.longest_job_seconds)}
            if r.longest_by_study:
                limits[r.rule]["by_study"] = {s: {"runtime": runtime_limit(t)} for s, t in sorted(r.longest_by_study.items())}
    return limits
