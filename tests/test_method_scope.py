"""Per-method settings (issue 27): a job reads, hashes and draws its noise from its own method's part of
`baselines` and `linear_scaling` only (hpo.registry.READS), so a change to a sibling's section reruns
none of its jobs, and nothing a method reads escapes its hash."""

import copy

import numpy as np
import pytest
import yaml

from dphpo.errors import ConfigError
from dphpo.hpo import registry
from dphpo.hpo.common import LinearHeadTrainer
from dphpo.studies import config as study_config
from dphpo.studies.validate import SCHEMA, validate_config

from conftest import noise_scope
from test_workflow import TINY

# Every section a method can read, each set away from its default, so that a method whose scope
# missed a key it reads would compute something else from its scope than from the whole config.
CONFIG = {
    "privacy": {"delta": 1e-5, "target_eps": [1.0, 8.0]},
    "search_space": {"eta": {"min": 0.01, "max": 2.0, "num": 5}, "steps": [5, 10, 20, 40]},
    "selection": {"rule": "noisy_train_accuracy", "noise_std": 50.0},
    "linear_scaling": {"n_trials": 2, "stage_eps": [0.1, 0.2]},
    "baselines": {
        "sampling": "r",
        "random_search_k": {"k": 2},
        "grid": {"eta_num": 3, "steps": [10, 40]},
        "grid_accounted": {"eta_num": 2, "steps": [5, 20]},
        "papernot_steinke": {"distribution": "poisson", "mean_trials": 2, "max_trials": 40},
        "koskela": {"q": 0.25, "mean_trials": 2, "max_trials": 60},
        "oso_dpsgd": {"eta0_num": 2, "steps": [5], "clip_init": 0.2},
        "oso_dpsgd_cnn": {"epochs": 1, "batch_size": 128, "channels": [4, 8], "eta0": 0.2},
        "mehta": {"loss": "sigmoid", "eta": 0.5, "sigmoid_bias": -5.0},
    },
}


def test_reads_declares_every_method_and_only_sections_the_config_has():
    assert set(registry.READS) == set(registry.METHODS) | {"nonprivate"}
    for method, paths in registry.READS.items():
        for path in paths:
            assert path.split(".")[0] in registry.METHOD_SECTIONS, (method, path)


def test_a_method_sees_only_its_declared_sections():
    scoped = study_config.method_config(CONFIG, "mehta")
    assert scoped["baselines"] == {"mehta": CONFIG["baselines"]["mehta"]} and "linear_scaling" not in scoped
    assert study_config.method_config(CONFIG, "linear_scaling")["linear_scaling"] == CONFIG["linear_scaling"]
    assert "baselines" not in study_config.method_config(CONFIG, "linear_scaling")
    assert {"baselines", "linear_scaling"}.isdisjoint(study_config.method_config(CONFIG, "nonprivate"))
    assert study_config.method_config(CONFIG, "mehta")["search_space"] is CONFIG["search_space"]  # shared: whole
    with pytest.raises(ConfigError, match="unknown method 'nope'"):
        study_config.method_config(CONFIG, "nope")


@pytest.mark.parametrize("method", [*registry.FEATURE_BASELINES, "oso_dpsgd_cnn"])
def test_each_method_computes_from_its_scope_what_it_computes_from_the_whole_config(digits_features, method):
    whole = registry.run_method(method, LinearHeadTrainer.from_config(digits_features, CONFIG), CONFIG, noise_scope(0))
    scoped_cfg = study_config.method_config(CONFIG, method)
    scoped = registry.run_method(method, LinearHeadTrainer.from_config(digits_features, scoped_cfg), scoped_cfg, noise_scope(0))
    for a, b in zip(whole, scoped, strict=True):
        assert a.search == b.search and a.total == b.total and a.test_metric == b.test_metric, method
        if a.weights is not None:
            assert np.array_equal(np.asarray(a.weights), np.asarray(b.weights)), method


def _tiny() -> dict:
    cfg = yaml.safe_load(TINY.read_text())
    validate_config(cfg, SCHEMA)
    return cfg


def _set(cfg: dict, path: str, value) -> dict:
    out = copy.deepcopy(cfg)
    section, _, part = path.partition(".")
    if part:
        out.setdefault(section, {})[part] = value
    else:
        out[section] = value
    return out


# one changed value per path (sections changed as a whole get a new key, as a user's edit would)
CHANGES = {"baselines.sampling": "r", "linear_scaling": {"n_trials": 4, "stage_eps": [0.1, 0.2]}}


def test_a_sibling_section_leaves_a_methods_settings_hash_and_its_own_changes_it():
    cfg = _tiny()
    paths = sorted({p for reads in registry.READS.values() for p in reads})
    for method, reads in registry.READS.items():
        before = study_config.run_settings_hash(cfg, "default", "raw", "digits", method)
        for path in paths:
            section, _, part = path.partition(".")
            old = (cfg.get(section) or {}).get(part) if part else cfg.get(section)
            new = CHANGES.get(path, {**(old or {}), "changed_by_test": 1} if isinstance(old, dict) or old is None else old)
            after = study_config.run_settings_hash(_set(cfg, path, new), "default", "raw", "digits", method)
            assert (after != before) == (path in reads), (method, path)
    # the shared settings concern every method
    clip = _set(cfg, "training", {**cfg.get("training", {}), "clip_norm": 0.5})
    for method in registry.READS:
        assert study_config.run_settings_hash(clip, "default", "raw", "digits", method) != study_config.run_settings_hash(
            cfg, "default", "raw", "digits", method
        )


def test_a_record_of_a_sibling_change_is_current_and_its_own_change_is_named(tmp_path):
    from dphpo.io import write_json
    from dphpo.studies import writer

    cfg = _tiny()
    prov = writer.provenance(cfg, dataset="digits", extractor="raw", variant="default", method="mehta")
    assert prov["settings"]["method"] == "mehta"
    path = tmp_path / "result.json"
    write_json(path, {"method": "mehta", "provenance": prov})
    sibling = _set(cfg, "baselines.grid", {"eta_num": 3, "steps": [10, 40]})
    assert study_config.changed_settings(path, sibling) == []
    own = _set(cfg, "baselines.mehta", {**cfg["baselines"]["mehta"], "eta": 0.5})
    assert study_config.changed_settings(path, own) == ["baselines.mehta.eta"]


def test_the_nonprivate_reference_searches_as_far_as_the_safeguarded_rule_may_go(digits_features):
    """Issue 29: the safeguarded rule's final run may leave the grid (beyond_grid, up to max_extrapolation ×
    r_max), so a reference on the grid alone was no ceiling (negative gaps in the tables)."""
    from dphpo.hpo import nonprivate
    from dphpo.hpo.space import SearchSpace

    cfg = _tiny()
    assert study_config.ceiling_eta_factor(cfg) == 1.0  # the paper's rule stays on the grid
    safeguarded = _set(cfg, "variants", {"safeguarded": {"linear_scaling": {"safeguard": True}}})
    assert study_config.ceiling_eta_factor(safeguarded) == 4.0
    space = SearchSpace.from_config(cfg["search_space"])
    grid = nonprivate.ceiling_grid(space, 4.0)
    assert grid[: len(space.grid())] == space.grid()  # the grid's own points, unchanged
    assert max(e for e, _ in grid) >= 4.0 * space.eta_max and {t for _, t in grid} == set(space.steps)
    for method, changed in (("nonprivate", True), ("linear_scaling", False), ("random_search", False)):
        before = study_config.run_settings_hash(cfg, "default", "raw", "digits", method)
        assert (study_config.run_settings_hash(safeguarded, "default", "raw", "digits", method) != before) == changed
    dense = nonprivate.ceiling_grid(space, 4.0, study_config.CEILING_ETA_DENSITY)
    assert dense[: len(grid)] == grid and len(set(dense)) == len(dense)  # the coarse points first, none twice
    etas = sorted({e for e, _ in dense})
    assert len(etas) == study_config.CEILING_ETA_DENSITY * (len({e for e, _ in grid}) - 1) + 1
    assert max(b / a for a, b in zip(etas, etas[1:])) < 1.01 * min(b / a for a, b in zip(etas, etas[1:]))  # even log steps
    trainer = LinearHeadTrainer.from_config(digits_features, CONFIG)
    result = nonprivate.run(trainer, space, progress=False, eta_factor=4.0, eta_density=2)
    assert len(result.trials) == len(nonprivate.ceiling_grid(space, 4.0, 2))
    assert result.released["eta"] in {e for e, _ in nonprivate.ceiling_grid(space, 4.0, 2)}
