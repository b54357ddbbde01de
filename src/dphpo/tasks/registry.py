"""Language studies from the config (`language.studies[]`): each study's own config, its task and
its private trainer.

A study entry names a task (`classification` | `causal_lm`), a trainer (`finetune` | `dpzo`), the
model, the data, the trainer settings (`training`) and `overrides` merged over the base config
(privacy.target_eps / delta, search_space, linear_scaling, selection, baselines), so the HPO methods
of dphpo.hpo run on it unchanged. Every run is a Poisson-subsampled Gaussian mechanism (q = B/N)
accounted with prv-accountant's upper bound; the ledger composes them (PRV).
"""

from __future__ import annotations

from pathlib import Path

from dphpo.errors import ConfigError, DPHPOError

TASKS = ("classification", "causal_lm")
TRAINERS = ("finetune", "dpzo")
METHODS = ("linear_scaling", "random_search", "grid_oracle")  # the methods a language study may run


def studies(config: dict) -> dict[str, dict]:
    return {s["name"]: s for s in (config.get("language") or {}).get("studies", [])}


def study_spec(config: dict, name: str) -> dict:
    found = studies(config)
    if name not in found:
        raise ConfigError(f"language.studies: no study named {name!r} (defined: {', '.join(sorted(found)) or 'none'})")
    return found[name]


def public_size(spec: dict) -> int | None:
    """The declared public size of a study's private training set: `data.public_n_train`, else
    `data.max_train`, else the registry's published size of an unpartitioned registry corpus; None when
    only the hub's published split size can tell (`hub_published_size`, read in the job).
    The mechanism uses it for q = B/n, its normalizer and δ = 1/(2n), never the private count."""
    from dphpo.data.registry import DATASETS

    data = spec["data"]
    if data.get("public_n_train"):
        return int(data["public_n_train"])
    if data.get("max_train"):
        return int(data["max_train"])
    known = DATASETS.get(data["name"])
    if known is not None and known.public_n_train and not data.get("partition"):
        return int(known.public_n_train)
    if data["name"].startswith("hf:"):
        return None
    raise ConfigError(
        f"language.studies.{spec['name']}.data.public_n_train: declare the public size of the private training set "
        "(what DP-SGD normalizes by and samples with; never counted on the private data)"
    )


def hub_published_size(spec: dict) -> int:
    """The train split's size as the hub dataset's card publishes it (builder metadata, not a count of
    the downloaded private texts)."""
    import datasets

    data = spec["data"]
    info = datasets.load_dataset_builder(data["name"][3:], data.get("config"), revision=data.get("revision")).info
    split = data.get("train_split", "train")
    if not info.splits or split not in info.splits:
        raise ConfigError(
            f"language.studies.{spec['name']}.data.public_n_train: the hub card of {data['name']} publishes no size "
            f"of split {split!r}; declare the public size of the training set"
        )
    return int(info.splits[split].num_examples)


def resolve_delta(value, n_train: int, where: str) -> float:
    """δ as a number, or the paper's δ = 1/(2|D|) written as the string '1/(2N)' (N: the public size)."""
    if isinstance(value, str):
        if value.replace(" ", "") != "1/(2N)":
            raise ConfigError(f"{where}: expected a number or '1/(2N)', got {value!r}")
        return 1.0 / (2.0 * n_train)
    return float(value)


def study_config(config: dict, spec: dict, n_train: int | None = None) -> dict:
    """The base config with the study's overrides merged in (what dphpo.hpo methods read)."""
    from dphpo.study import deep_merge

    merged = deep_merge({k: v for k, v in config.items() if k not in ("variants", "language")}, spec.get("overrides") or {})
    merged["privacy"] = dict(merged["privacy"])
    merged["privacy"]["accountant"] = "prv"
    where = f"language.studies.{spec['name']}.overrides.privacy.delta"
    delta = merged["privacy"].get("delta", 1e-5)
    merged["privacy"]["delta"] = resolve_delta(delta, n_train, where) if n_train is not None else delta
    return merged


def check_study(config: dict, spec: dict) -> None:
    """What the schema cannot say; raises ConfigError before any job runs."""
    where = f"language.studies.{spec['name']}"
    if spec["task"] not in TASKS:
        raise ConfigError(f"{where}.task: expected one of {TASKS}, got {spec['task']!r}")
    if spec.get("trainer", "finetune") not in TRAINERS:
        raise ConfigError(f"{where}.trainer: expected one of {TRAINERS}, got {spec.get('trainer')!r}")
    for m in spec.get("methods", []):
        if m not in METHODS:
            raise ConfigError(f"{where}.methods: unknown method {m!r}; known: {', '.join(METHODS)}")
    pre = spec["model"].get("pretrain")
    if pre and pre not in ((config.get("language") or {}).get("pretrain") or {}):
        raise ConfigError(f"{where}.model.pretrain: {pre!r} is not defined under language.pretrain")
    if pre and spec["task"] != "causal_lm":
        raise ConfigError(f"{where}.model.pretrain: only causal_lm studies use a pretrained small LM")
    if pre:
        from dphpo.data.text import overlapping_parts

        shared = overlapping_parts(config["language"]["pretrain"][pre]["data"], spec["data"])
        if shared:
            raise ConfigError(
                f"{where}.data: the public pretraining corpus of {pre!r} includes {shared[0]!r}, the study's private data; "
                "give both a data.partition [k, m] with the same m and different k so they cannot share texts"
            )
    settings(spec)  # raises on bad training keys
    check_plan(config, spec)


def check_plan(config: dict, spec: dict) -> None:
    """The search space and, for the linear scaling rule, the stage budgets against every target ε
    (InfeasibleBudgetError before any job runs). δ = 1/(2N) is checked at N = data.max_train when set."""
    from dphpo import study
    from dphpo.hpo.linear_scaling import check_budgets

    cfg = study_config(config, spec, public_size(spec))
    if isinstance(cfg["privacy"]["delta"], str):
        return  # δ = 1/(2N) and N is known only once the data is loaded; the job checks again before training
    study.search_space(cfg)
    if "linear_scaling" in spec.get("methods", []):
        try:
            check_budgets(study.linear_scaling_config(cfg), study.selection_rule(cfg), study.target_eps(cfg), float(cfg["privacy"]["delta"]))
        except DPHPOError as err:
            raise type(err)(f"language.studies.{spec['name']}: {err}") from None


def uses_cache(spec: dict) -> bool:
    """Classification studies train the top layers on cached hidden states of the frozen bottom."""
    return spec["task"] == "classification"


def settings(spec: dict):
    from dphpo.train.dpzo import DPZOSettings
    from dphpo.train.finetune import FinetuneSettings

    cls = DPZOSettings if spec.get("trainer", "finetune") == "dpzo" else FinetuneSettings
    return cls.from_config(spec.get("training"))


def run_accountant(sample_rate: float, delta: float, eps_error: float = 0.01):
    """PRV accountant of one run: T compositions of the Poisson-subsampled Gaussian (q, σ)."""
    from dphpo.privacy.accountant import make_accountant

    return make_accountant("prv", delta, sample_rate=sample_rate, eps_error=eps_error)


def load_task(spec: dict, input_path: str | Path | None):
    """The task of a study from its input (hidden-state cache or pretrained LM checkpoint)."""
    if spec["task"] == "classification":
        from dphpo.tasks.classification import SequenceClassificationTask

        return SequenceClassificationTask.from_cache(input_path, spec["model"])
    from dphpo.tasks.causal_lm import CausalLMTask

    return CausalLMTask.from_spec(spec, input_path)


def build_trainer(config: dict, spec: dict, input_path: str | Path | None):
    """(trainer, study config with δ resolved): the study's task, settings and PRV accountant."""
    from dphpo.train.dpzo import DPZOTrainer
    from dphpo.train.finetune import FinetuneTrainer

    task = load_task(spec, input_path)
    s = settings(spec)
    n_public = public_size(spec) or hub_published_size(spec)
    cfg = study_config(config, spec, n_public)
    acc = run_accountant(s.sample_rate(n_public), cfg["privacy"]["delta"], float(cfg["privacy"].get("eps_error", 0.01)))
    cls = DPZOTrainer if spec.get("trainer", "finetune") == "dpzo" else FinetuneTrainer
    return cls(task, acc, s, n_public), cfg


# --------------------------------------------------------------------------------------------
# what the workflow's jobs run (workflow/scripts/language_*.py)


def source_of(config: dict, spec: dict) -> dict[str, str]:
    """The input file of a study's training jobs: its hidden-state cache or its pretrained LM."""
    if uses_cache(spec):
        return {"source": f"results/language/cache/{spec['name']}.h5"}
    if spec["model"].get("pretrain"):
        return {"source": f"results/language/pretrained/{spec['model']['pretrain']}.pt"}
    return {}


def result_files(config: dict, name: str, method: str) -> list[str]:
    if method == "nonprivate":
        return [f"results/language/{name}/nonprivate/result.json"]
    return [f"results/language/{name}/{method}/seed{s}/results.json" for s in config.get("seeds", [0])]


def _provenance(config: dict, cfg: dict, trainer, **extra) -> dict:
    from dphpo.provenance import config_hash, package_versions

    return {
        "config_hash": config_hash(cfg),
        "package_versions": package_versions() | package_versions(("transformers", "tokenizers", "peft")),
        "accountant": trainer.accountant.describe(),
        "trainer": trainer.provenance(),
    } | extra


def run_study_method(config: dict, name: str, method: str, seed: int, source, results_path, models_dir, internal_path) -> list[dict]:
    """Run `method` (dphpo.hpo.registry) on the study; write results.json (the release: one record per
    target ε), internal.json (the internal log, not for publication) and the models."""
    from pathlib import Path

    from dphpo.hpo import registry as hpo
    from dphpo.hpo.common import INTERNAL_NOTICE, release_record
    from dphpo.io import write_json
    from dphpo.privacy.randomness import key_from_config
    from dphpo.study import eps_label

    spec = study_spec(config, name)
    trainer, cfg = build_trainer(config, spec, source)
    noise = key_from_config(config).scope(study=name, seed=int(seed))
    results = hpo.run_method(method, trainer, cfg, noise, progress=True)
    Path(models_dir).mkdir(parents=True, exist_ok=True)
    releases, internal = [], []
    for r in results:
        r.save_model(Path(models_dir) / f"eps{eps_label(r.target_eps)}.pt")
        prov = _provenance(config, cfg, trainer, seed=seed, study=name, method=method, randomness=noise.describe())
        internal.append(r.record(prov))
        releases.append(release_record(r, prov))
    head = {"study": name, "method": method, "seed": seed, "metric": trainer.metric}
    write_json(internal_path, {"internal": INTERNAL_NOTICE} | head | {"results": internal})
    write_json(results_path, head | {"results": releases})
    return releases


def run_study_nonprivate(config: dict, name: str, source, result_path) -> dict:  # ε = ∞: no release split
    """Every search-space grid point trained without noise (σ = 0), best on TEST: the ε = ∞ reference."""
    from dphpo.hpo import nonprivate
    from dphpo.hpo.space import SearchSpace
    from dphpo.io import write_json

    spec = study_spec(config, name)
    trainer, cfg = build_trainer(config, spec, source)
    result = nonprivate.run(trainer, SearchSpace.from_config(cfg["search_space"]), progress=True)
    record = result.record(_provenance(config, cfg, trainer, study=name, method="nonprivate"))
    write_json(result_path, record)
    return record
