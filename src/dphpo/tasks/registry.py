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

from dphpo.errors import ConfigError

TASKS = ("classification", "causal_lm")
TRAINERS = ("finetune", "dpzo")
METHODS = ("linear_scaling", "random_search", "grid_oracle")


def studies(config: dict) -> dict[str, dict]:
    return {s["name"]: s for s in (config.get("language") or {}).get("studies", [])}


def study_spec(config: dict, name: str) -> dict:
    found = studies(config)
    if name not in found:
        raise ConfigError(f"language.studies: no study named {name!r} (defined: {', '.join(sorted(found)) or 'none'})")
    return found[name]


def resolve_delta(value, n_train: int, where: str) -> float:
    """δ as a number, or the paper's δ = 1/(2|D|) written as the string '1/(2N)'."""
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
    settings(spec)  # raises on bad training keys


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
    from dphpo.train._protocol_shim import PrvRunAccountant

    return PrvRunAccountant(sample_rate, delta, eps_error)


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
    cfg = study_config(config, spec, task.n_train)
    acc = run_accountant(s.sample_rate(task.n_train), cfg["privacy"]["delta"], float(cfg["privacy"].get("eps_error", 0.01)))
    cls = DPZOTrainer if spec.get("trainer", "finetune") == "dpzo" else FinetuneTrainer
    return cls(task, acc, s), cfg
