"""Glue between a workflow config and the library: parsed settings, features, provenance.

Workflow scripts stay thin by calling these helpers; everything here is plain Python and tested.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from pathlib import Path
from typing import Any, Iterator

import torch

from dphpo.hpo.common import PreparedFeatures, TrainSettings, prepare_features
from dphpo.hpo.linear_scaling import LinearScalingConfig
from dphpo.hpo.selection import SelectionRule
from dphpo.hpo.space import SearchSpace
from dphpo.provenance import config_hash, package_versions


def eps_label(eps: float) -> str:
    """How a target ε appears in file paths: 0.25 → '0.25', 1.0 → '1'."""
    return f"{float(eps):g}"


def target_eps(config: dict) -> list[float]:
    return [float(e) for e in config["privacy"]["target_eps"]]


def train_settings(config: dict) -> TrainSettings:
    return TrainSettings.from_config(config)


def search_space(config: dict) -> SearchSpace:
    return SearchSpace.from_config(config["search_space"])


def selection_rule(config: dict) -> SelectionRule:
    return SelectionRule.from_config(config.get("selection", {}))


def linear_scaling_config(config: dict) -> LinearScalingConfig:
    return LinearScalingConfig.from_config(config.get("linear_scaling", {}))


def load_features(config: dict, path: str | Path, dataset: str, extractor: str) -> PreparedFeatures:
    """Read and verify a feature cache, then prepare it for training as the config says."""
    from dphpo.features.cache import load_feature_cache

    feature_set = load_feature_cache(path, expect={"dataset": dataset, "extractor": extractor})
    return prepare_features(feature_set, train_settings(config))


def provenance(config: dict, features: PreparedFeatures | None = None, **extra: Any) -> dict:
    """The provenance block of every result file."""
    block: dict[str, Any] = {
        "config_hash": config_hash(config),
        "package_versions": package_versions(),
        "accountant": {"name": "gdp_closed_form", "delta": config["privacy"]["delta"], "adjacency": config["privacy"].get("adjacency", "add_remove")},
        "training": train_settings(config).__dict__,
        "torch_threads": torch.get_num_threads(),
    }
    if features is not None:
        block["feature_cache"] = {
            "content_sha256": features.checksum,
            "extractor": features.attrs.get("extractor"),
            "dataset_checksum": features.attrs.get("dataset_checksum"),
            "n_train": features.n_train,
            "n_test": features.n_test,
        }
    block.update(extra)
    return block


@contextlib.contextmanager
def job_log(log_path: str | Path, threads: int = 1) -> Iterator[logging.Logger]:
    """Send a job's stdout, stderr (progress bars included) and logging to its Snakemake log file."""
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(max(1, int(threads)))
    with open(log_path, "w", buffering=1) as fh, contextlib.redirect_stdout(fh), contextlib.redirect_stderr(fh):
        handler = logging.StreamHandler(fh)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root = logging.getLogger()
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        try:
            yield logging.getLogger("dphpo")
        except BaseException:
            import traceback

            traceback.print_exc(file=fh)
            raise
        finally:
            root.removeHandler(handler)
            sys.stderr.flush()


def check_config(config: dict) -> None:
    """Checks the JSON schema cannot express; raises ConfigError / InfeasibleBudgetError before any job runs."""
    from dphpo.data import DATASETS
    from dphpo.errors import ConfigError
    from dphpo.hpo.linear_scaling import check_budgets

    for i, entry in enumerate(config["studies"]):
        if entry["dataset"] not in DATASETS:
            raise ConfigError(
                f"studies[{i}].dataset: unknown dataset {entry['dataset']!r}; known: {', '.join(sorted(DATASETS))}"
            )
        if entry["extractor"] not in config["extractors"]:
            raise ConfigError(
                f"studies[{i}].extractor: {entry['extractor']!r} is not defined under `extractors` "
                f"(defined: {', '.join(sorted(config['extractors']))})"
            )
    space = search_space(config)  # raises ConfigError on bad grids
    del space
    selection = selection_rule(config)
    lsc = linear_scaling_config(config)
    check_budgets(lsc, selection, target_eps(config), float(config["privacy"]["delta"]))
