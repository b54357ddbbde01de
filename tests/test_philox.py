"""`training.noise_generator: philox` (dphpo.train.philox): Random123's known answers, the normal law, draws
addressed by (trial, step, what) alone, and the trainers on features drawing from it end to end."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats

from dphpo.errors import ConfigError
from dphpo.train import philox
from dphpo.train.dpgd import TrialBatch, train_linear_dpgd
from dphpo.train.oso import OsoRule, train_linear_oso

CPU = torch.device("cpu")


def test_philox_gives_the_random123_known_answers_and_ten_rounds_matter():
    philox.check_known_answers()
    one = philox.philox4x32([torch.tensor([0])] * 4, (0, 0), rounds=1)
    assert tuple(int(x) for x in one) != philox.KNOWN_ANSWERS[0]


def test_normals_follow_the_normal_law_and_uniforms_lie_in_the_open_unit_interval():
    draws = philox.PhiloxTrials([11, 12], CPU)
    z = draws.normal(2, 100_003, 0, philox.NOISE)
    assert z.shape == (2, 100_003) and z.dtype == torch.float32 and torch.isfinite(z).all()
    for row in z.double().numpy():
        assert stats.kstest(row, "norm").pvalue > 1e-4
        assert abs(row.mean()) < 0.02 and abs(row.var() - 1) < 0.03
    # the two trials' draws are independent of each other (their correlation ~ N(0, 1/n))
    assert abs(np.corrcoef(z.numpy())[0, 1]) < 5 / math.sqrt(100_003)
    u = draws.uniform(2, 50_000, 3, philox.MASK)
    assert u.dtype == torch.float64 and 0 < u.min() and u.max() <= 1 and abs(u.mean().item() - 0.5) < 0.005


def test_a_trials_draw_depends_on_its_seed_step_and_purpose_only():
    """Counter-based: trial j's draw at step t is the same whatever other trials share the batch and in
    whatever order steps are drawn; another step, purpose or seed gives other numbers."""
    batch = philox.PhiloxTrials([5, 6, 7], CPU)
    z = batch.normal(3, 1001, 4, philox.NOISE)
    assert torch.equal(batch.normal(2, 1001, 4, philox.NOISE), z[:2])  # fewer active trials
    assert torch.equal(philox.PhiloxTrials([6], CPU).normal(1, 1001, 4, philox.NOISE)[0], z[1])  # alone
    assert torch.equal(batch.normal(3, 500, 4, philox.NOISE), z[:, :500])  # a prefix
    for other in (batch.normal(3, 1001, 5, philox.NOISE), batch.normal(3, 1001, 4, philox.NOISE_Q),
                  philox.PhiloxTrials([8, 9, 10], CPU).normal(3, 1001, 4, philox.NOISE)):
        assert not torch.isclose(other, z).any(dim=1).all()
    # the secret words: 128 bits, none of them the seed's
    words = philox.secret_words(6)
    assert len(set(words)) == 4 and all(0 <= w < 2**32 for w in words) and 6 not in words


def test_a_poisson_mask_keeps_each_record_with_probability_q():
    keep = philox.PhiloxTrials([1], CPU).uniform(1, 400_000, 0, philox.MASK) < 0.01
    rate = keep.double().mean().item()
    assert abs(rate - 0.01) < 5 * math.sqrt(0.01 * 0.99 / 400_000)


def _data(n=300, d=6, k=3):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, d, generator=g)
    y = torch.randint(0, k, (n,), generator=g)
    return x, y, k


def test_dpgd_with_philox_is_reproducible_other_than_mt_and_its_noise_has_the_calibrated_scale():
    x, y, k = _data()
    trials = TrialBatch([0.5, 0.2], [4, 2], [2.0, 0.0], [101, 102])
    a = train_linear_dpgd(x, y, k, trials, n_public=300, noise_generator="philox")
    assert torch.equal(a, train_linear_dpgd(x, y, k, trials, n_public=300, noise_generator="philox"))
    assert not torch.equal(a, train_linear_dpgd(x, y, k, trials, n_public=300))  # mt: other numbers
    # trial 1 has σ = 0: the same run under either generator
    assert torch.equal(a[1], train_linear_dpgd(x, y, k, trials, n_public=300)[1])
    # alone, trial 0 trains to the same weights (its draws are its own)
    alone = train_linear_dpgd(x, y, k, TrialBatch([0.5], [4], [2.0], [101]), n_public=300, noise_generator="philox")
    assert torch.allclose(alone[0], a[0], rtol=1e-6, atol=1e-7)
    # the noisy gradient minus the clipped sum is σ C / N times a standard normal (C = 1, σ = 40: noise dominates)
    grads = []
    train_linear_dpgd(torch.zeros(300, 200), y, k, TrialBatch([0.0], [1], [40.0], [7]), n_public=300, noise_generator="philox",
                      on_step=lambda t, idx, w, g: grads.append(g.clone()))
    z = grads[0].flatten().double() * 300 / 40.0
    assert stats.kstest(z.numpy(), "norm").pvalue > 1e-4


def test_poisson_minibatches_and_oso_draw_from_philox_too():
    x, y, k = _data()
    trials = TrialBatch([0.5], [3], [1.0], [3])
    a = train_linear_dpgd(x, y, k, trials, n_public=300, sample_rate=0.2, noise_generator="philox")
    assert torch.equal(a, train_linear_dpgd(x, y, k, trials, n_public=300, sample_rate=0.2, noise_generator="philox"))
    assert not torch.equal(a, train_linear_dpgd(x, y, k, trials, n_public=300, sample_rate=0.2))
    rule = OsoRule()
    w, _ = train_linear_oso(x, y, k, [0.3, 0.1], [3, 2], [1.5, 1.5], [8, 9], rule, n_public=300, noise_generator="philox")
    again, _ = train_linear_oso(x, y, k, [0.3, 0.1], [3, 2], [1.5, 1.5], [8, 9], rule, n_public=300, noise_generator="philox")
    mt, _ = train_linear_oso(x, y, k, [0.3, 0.1], [3, 2], [1.5, 1.5], [8, 9], rule, n_public=300)
    assert torch.equal(w, again) and not torch.equal(w, mt)
    with pytest.raises(ValueError, match="noise_generator: expected one of mt, philox"):
        train_linear_dpgd(x, y, k, trials, n_public=300, noise_generator="curand")


def test_the_config_key_reaches_the_trainer_and_its_hash_and_the_cnn_refuses_it():
    from dphpo.studies import config as study_config
    from dphpo.train.linear_head import TrainSettings

    base = {"training": {"clip_norm": 1.0}, "privacy": {"delta": 1e-5}}
    assert TrainSettings.from_config(base).noise_generator == "mt"
    assert TrainSettings.from_config(base | {"training": {"noise_generator": "philox"}}).noise_generator == "philox"
    with pytest.raises(ValueError):
        TrainSettings(noise_generator="xorshift")
    from test_baselines import CONFIG  # a whole, validated config

    def settings_hash(generator):
        cfg = {**CONFIG, "training": {**CONFIG.get("training", {}), **({"noise_generator": generator} if generator else {})}}
        return study_config.config_hash(study_config.run_settings(cfg, "x", "digits", "linear_scaling"))

    assert settings_hash(None) == settings_hash("mt") != settings_hash("philox")  # philox: other noise labels
    from dphpo.hpo import oso

    class Trainer:
        kind = "linear_head"
        settings = TrainSettings(noise_generator="philox")

    with pytest.raises(ConfigError, match="oso_dpsgd_cnn: training.noise_generator: philox"):
        oso.run_cnn(Trainer(), {**CONFIG}, None)


def test_check_config_refuses_philox_for_the_cnn_baseline_before_any_job(tmp_path, capsys):
    import yaml

    from dphpo.cli import main as dphpo

    config = yaml.safe_load((Path(__file__).resolve().parents[1] / "config" / "config.yaml").read_text())
    assert config["baselines"]["oso_dpsgd_cnn"]["studies"]  # the embedded study runs the CNN baseline
    config.setdefault("training", {})["noise_generator"] = "philox"
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    assert dphpo(["check-config", str(tmp_path / "c.yaml")]) == 2
    assert "baselines.oso_dpsgd_cnn.studies" in capsys.readouterr().err
    del config["baselines"]["oso_dpsgd_cnn"]
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    assert dphpo(["check-config", str(tmp_path / "c.yaml")]) == 0


def test_a_step_beyond_the_counters_range_is_refused_rather_than_repeating_draws():
    draws = philox.PhiloxTrials([1], CPU)
    draws.normal(1, 4, (1 << 29) - 1, philox.NOISE)
    with pytest.raises(ValueError, match="Philox draws address steps"):
        draws.normal(1, 4, 1 << 29, philox.NOISE)
