"""The studies layer: its config module is torch-free, one trainer registry serves both halves, and a
language study's result files are one per target ε (dphpo.layout)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dphpo import layout
from dphpo.errors import ConfigError
from dphpo.studies import config as study_config
from dphpo.studies.trainers import TRAINER_SETTINGS

ROOT = Path(__file__).resolve().parents[1]


def test_config_module_imports_no_torch():
    code = "import sys, dphpo.studies.config, dphpo.report.language; assert 'torch' not in sys.modules, 'torch imported'"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_trainer_registry_covers_every_kind_the_config_accepts():
    from dphpo.studies.trainers import TRAINERS

    kinds = set(study_config.VISION_TRAINERS) | set(study_config.LANGUAGE_TRAINERS)
    assert set(TRAINERS) == kinds == set(TRAINER_SETTINGS)


def test_trainer_kind_from_the_study_else_its_halfs_default():
    assert study_config.trainer_kind({"dataset": "digits", "extractor": "raw"}) == "linear_head"
    assert study_config.trainer_kind({"name": "s", "task": "causal_lm"}) == "finetune"
    assert study_config.trainer_kind({"name": "s", "task": "classification", "trainer": "dpzo"}) == "dpzo"


def test_language_result_files_are_one_per_seed_and_target():
    spec = {"name": "s", "task": "causal_lm", "overrides": {"privacy": {"target_eps": [1, 0.5]}}}
    config = {"seeds": [0, 2], "privacy": {"target_eps": [8], "delta": 1e-5}, "language": {"studies": [spec]}}
    files = study_config.language_result_files(config, "s", "random_search")
    assert files == [layout.path(layout.LANGUAGE_RESULT, study="s", method="random_search", seed=s, eps=e)
                     for s in (0, 2) for e in (1.0, 0.5)]
    assert files[1] == "results/language/s/random_search/seed0/eps0.5/result.json"
    assert study_config.language_result_files(config, "s", "nonprivate") == ["results/language/s/nonprivate/result.json"]
    with pytest.raises(ConfigError, match="no study named 't'"):
        study_config.language_result_files(config, "t", "random_search")


def test_a_stage_drawn_for_other_data_is_refused_naming_it(tmp_path):
    """Audit: stage files were checked for their identity and settings hash only, so a stage computed on
    another feature cache (a copied tree, Snakemake's metadata lost) joined a final run on this one."""
    from dphpo.errors import OutputFileError

    from conftest import noise_scope

    scope = noise_scope(0).over_data(["a" * 64])
    stage = {"provenance": {"randomness": scope.describe()}}
    study_config.check_noise_scope(["stage1.json"], [stage], scope)
    for other in (noise_scope(0).over_data(["b" * 64]), noise_scope(1).over_data(["a" * 64])):
        with pytest.raises(OutputFileError, match="stage1.json drew its noise for other data"):
            study_config.check_noise_scope(["stage1.json"], [stage], other)
