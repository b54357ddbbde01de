"""The trainer protocol: the linear head as a PrivateTrainer, accountants chosen by the config, provenance."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
from prv_accountant import PRVAccountant
from prv_accountant.privacy_random_variables import GaussianMechanism, PoissonSubsampledGaussianMechanism

from dphpo.errors import ConfigError
from dphpo.hpo import linear_scaling as ls
from dphpo.hpo import random_search
from dphpo.hpo.common import LinearHeadTrainer
from dphpo.hpo.selection import SelectionRule
from dphpo.hpo.space import SearchSpace
from dphpo.io import read_json
from dphpo.studies import writer
from dphpo.train.protocol import PrivateTrainer, best_index

from conftest import noise_scope

DELTA = 1e-5
CONFIG = {
    "privacy": {"delta": DELTA, "target_eps": [1.0]},
    "search_space": {"eta": {"min": 0.05, "max": 2.0, "num": 4}, "steps": [5, 10, 20]},
    "selection": {"rule": "noisy_train_accuracy", "noise_std": 50.0},
    "linear_scaling": {"n_trials": 1, "stage_eps": [0.1, 0.2]},
    "training": {},
}
SPACE = SearchSpace(eta_min=0.05, eta_max=2.0, eta_num=4, steps=(5, 10, 20))


def variant(**sections):
    cfg = copy.deepcopy(CONFIG)
    for key, value in sections.items():
        cfg[key] = cfg[key] | value
    return cfg


def run_linear_scaling(trainer, cfg):
    return ls.run(
        trainer,
        ls.LinearScalingConfig.from_config(cfg["linear_scaling"]),
        SPACE,
        SelectionRule.from_config(cfg["selection"]),
        cfg["privacy"]["target_eps"],
        noise=noise_scope(0),
    )


def test_linear_head_is_a_private_trainer_with_count_scores(digits_features):
    trainer = LinearHeadTrainer.from_config(digits_features, CONFIG)
    assert isinstance(trainer, PrivateTrainer) and trainer.kind == "linear_head" and trainer.metric == "accuracy"
    out = trainer.run_trials([0.5, 0.5], [10, 10], [0.0, 5.0], [1, 2], progress=False)
    assert out.models.shape == (2, 10, 64)
    # score sums are counts of correct predictions (sensitivity 1); metrics are their fractions
    np.testing.assert_array_equal(out.train_metric, out.train_score_sums / 1400)
    np.testing.assert_array_equal(out.test_metric, out.test_score_sums / (1797 - 1400))
    assert out.train_metric[0] > 0.8 and out.train_score_sums.dtype.kind == "i"


def test_best_index_knows_which_way_a_metric_points():
    assert best_index("accuracy", [0.2, 0.9, 0.5]) == 1
    assert best_index("perplexity", [12.0, 30.0, 9.5]) == 2
    with pytest.raises(ValueError, match="metric"):
        best_index("bleu", [1.0])


@pytest.mark.parametrize(
    "sections, name, sample_rate",
    [
        ({}, "gdp", None),
        ({"privacy": {"accountant": "rdp"}}, "rdp", None),
        ({"training": {"batch_size": 280}}, "rdp", 0.2),  # gdp has no exact form for minibatch runs
    ],
    ids=["default", "rdp_accounting", "minibatch"],
)
def test_provenance_names_the_accountant_each_variant_really_used(digits_features, tmp_path, sections, name, sample_rate):
    cfg = variant(**sections)
    trainer = LinearHeadTrainer.from_config(digits_features, cfg)
    (result,) = run_linear_scaling(trainer, cfg)
    prov = writer.provenance(cfg, trainer, result, noise=noise_scope(0))
    writer.write_result(result, tmp_path / "result.json", tmp_path / "model.npz", prov, tmp_path / "internal.json")
    acc = read_json(tmp_path / "result.json")["provenance"]["accountant"]
    assert acc["name"] == name and acc["delta"] == DELTA and acc["sample_rate"] == sample_rate
    assert acc["ledger_total"] == ("gdp_closed_form" if name == "gdp" else "rdp")
    assert acc["ledger_total"] == read_json(tmp_path / "result.json")["privacy"]["total"]["accountant"]
    assert result.total["eps"] <= 1.0
    if name == "rdp":  # every run of the variant is an RDP entry: no total of it is claimed as GDP
        assert all(e.mechanism == "rdp" for e in result.ledger.entries if "trial" in e.what or e.what == "final run")


@pytest.mark.slow  # ~1 min: prv-accountant sizes its domain by RDP for every composition
def test_linear_scaling_on_a_prv_trainer_spends_its_budget_by_prv_accountant(digits_features):
    cfg = variant(privacy={"accountant": "prv", "eps_error": 0.05}, training={"batch_size": 280})
    trainer = LinearHeadTrainer.from_config(digits_features, cfg)
    assert trainer.accountant.name == "prv" and trainer.accountant.describe()["sample_rate"] == 0.2
    (result,) = run_linear_scaling(trainer, cfg)
    runs = [e for e in result.ledger.entries if e.mechanism == "prv"]
    assert [e.what for e in runs] == ["stage 1 trial 0", "stage 2 trial 0", "final run"]
    # prv-accountant called directly on the recorded runs and the noisy selection scores
    gauss = [e for e in result.ledger.entries if e.mechanism == "gdp"]
    mu = math.sqrt(sum(e.mu_total**2 for e in gauss))
    prvs = [PoissonSubsampledGaussianMechanism(sampling_probability=e.details["q"], noise_multiplier=e.details["sigma"]) for e in runs]
    counts = [e.details["steps"] for e in runs]
    acc = PRVAccountant(prvs=prvs + [GaussianMechanism(noise_multiplier=1 / mu)], max_self_compositions=counts + [1],
                        eps_error=0.05, delta_error=DELTA / 1000)
    upper = acc.compute_epsilon(delta=DELTA, num_self_compositions=counts + [1])[2]
    assert result.total["eps"] == pytest.approx(upper, rel=1e-9)
    assert 0.98 <= result.total["eps"] <= 1.0  # the final run fills what the search left
    assert result.released["mu"] is None and result.released["standalone_eps"] < 1.0


def test_baselines_refuse_a_trainer_whose_runs_are_not_exact_gdp(digits_features):
    cfg = variant(privacy={"accountant": "prv"}, training={"batch_size": 280})
    # composed candidates are planned in exact GDP: refused; a single full-budget run (random_search,
    # each grid_oracle point) is calibrated by any accountant (the PRV fine-tuning trainers)
    with pytest.raises(ConfigError, match="exact GDP"):
        random_search.run_k(LinearHeadTrainer.from_config(digits_features, cfg), cfg, noise=noise_scope(0))
