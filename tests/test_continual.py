"""DP continual pre-training (Bu et al.): the private stage, its accounting, the switch and the config rules."""

from __future__ import annotations

import math

import pytest
import torch
from prv_accountant import PRVAccountant
from prv_accountant.privacy_random_variables import PoissonSubsampledGaussianMechanism

from dphpo.errors import ConfigError
from dphpo.features import build_feature_cache, expected_attrs, get_extractor, load_feature_cache
from dphpo.features import pretrain as pt
from dphpo.features.checkpoint import load_checkpoint, network_from_checkpoint
from dphpo.features.continual import PrivateStageConfig, check_study_overlap
from dphpo.features.extractors import upstream_privacy
from dphpo.io import file_sha256
from dphpo.train.dpsgd import train_dpsgd
from dphpo.train.noise import secret_generator

from conftest import noise_scope

PRIVATE = {"dataset": "digits", "eps": 2.0, "epochs": 1, "batch_size": 64, "lr": 0.5}
TINY = dict(arch="small_cnn", public_dataset="synthetic_shapes", width=4, epochs=2, batch_size=64, lr=0.05,
            max_train=256, max_test=64, resolution=16, norm="group", switch="early_stopping", patience=1,
            device="cpu", private_stage=PRIVATE)


@pytest.fixture(scope="module")
def continual_checkpoint(tmp_path_factory):
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("continual") / "cont.pt"
    try:
        summary = pt.run_pretraining("cont", TINY, out, summary_path=out.with_suffix(".json"), progress=False,
                                     noise=noise_scope(0, pretraining="cont"))
    finally:
        torch.set_num_threads(before)
    return out, summary


def test_private_stage_spends_at_most_its_budget_by_an_independent_prv_computation(continual_checkpoint):
    _, summary = continual_checkpoint
    stage = summary["private_stage"]
    plan, guarantee = stage["plan"], stage["guarantee"]
    assert stage["dataset"]["name"] == "digits" and plan["n_public"] == 1438
    assert plan["sample_rate"] == pytest.approx(64 / 1438) and plan["steps"] == math.ceil(1438 / 64)
    # prv-accountant called directly with the recorded mechanism: its upper bound is the reported ε
    acc = PRVAccountant(prvs=[PoissonSubsampledGaussianMechanism(sampling_probability=plan["sample_rate"],
                                                                  noise_multiplier=plan["sigma"])],
                        max_self_compositions=[plan["steps"]], eps_error=0.01, delta_error=1e-8)
    upper = acc.compute_epsilon(delta=1e-5, num_self_compositions=[plan["steps"]])[2]
    assert guarantee["eps"] == pytest.approx(upper, rel=1e-6)
    assert 0.9 * PRIVATE["eps"] < guarantee["eps"] <= PRIVATE["eps"]  # calibrated to the budget, not far below
    entry = stage["privacy"]["entries"][0]
    assert entry["details"]["q"] == plan["sample_rate"] and entry["details"]["steps"] == plan["steps"]
    assert stage["privacy"]["total"]["rdp_eps"] >= guarantee["eps"]  # the looser RDP bound is recorded beside it


def test_checkpoint_after_the_private_stage_has_the_private_head_and_the_public_input_convention(continual_checkpoint):
    path, summary = continual_checkpoint
    ckpt = load_checkpoint(path)
    assert ckpt["num_classes"] == 10 and ckpt["state_dict"]["head.weight"].shape[0] == 10
    assert ckpt["input"]["resolution"] == 16 and ckpt["public_dataset"]["name"] == "synthetic_shapes"
    assert summary["switch"]["rule"] == "early_stopping" and 1 <= summary["switch"]["epoch"] <= 2
    net = network_from_checkpoint(ckpt)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in net.modules())


def test_features_of_another_dataset_carry_the_extractors_guarantee(continual_checkpoint, tmp_path):
    path, summary = continual_checkpoint
    config = {"data_dir": "data", "datasets": {"mnist": {"max_train": 50, "max_test": 20}},
              "extractors": {"cont": {"kind": "pretrained_public", "pretrain": "cont", "checkpoint": str(path)}}}
    attrs = build_feature_cache("mnist", "cont", config, tmp_path / "mnist" / "cont.h5", device="cpu", progress=False)
    up = attrs["upstream_privacy"]
    assert up["dataset"] == "digits" and up["eps"] == summary["private_stage"]["guarantee"]["eps"]
    assert up["delta"] == 1e-5 and "prv" in up["accountant"]
    # the stage's own ledger entries travel with it: a bundle composes them into the statement of its data
    assert up["entries"] == summary["private_stage"]["privacy"]["entries"] and up["entries"][0]["mechanism"] == "prv"
    assert up["pretraining"] == "cont" and len(up["weights_sha256"]) == 64  # which run: a bundle composes each once
    assert upstream_privacy(None) is None
    public_only = get_extractor("p", {"kind": "raw"})
    assert "upstream_privacy" not in public_only.attrs()
    # the stage's own data, with the checkpoint given by path (the config check reads sections only): refused
    config["datasets"]["digits"] = {"max_train": 50, "max_test": 20}
    with pytest.raises(ConfigError, match=r"pre-trained with DP on 'digits' itself"):
        build_feature_cache("digits", "cont", config, tmp_path / "digits" / "cont.h5", device="cpu", progress=False)
    assert not (tmp_path / "digits" / "cont.h5").exists()


def test_a_cache_built_as_the_workflow_builds_it_loads_for_training(continual_checkpoint, tmp_path):
    # the rule passes the checkpoint it found (its input) to a config section that names only `pretrain`:
    # the cache must record the config's section, or every trainer refused the cache as of other settings
    path, _ = continual_checkpoint
    config = {"data_dir": "data", "datasets": {"mnist": {"max_train": 50, "max_test": 20}},
              "extractors": {"cont": {"kind": "pretrained_public", "pretrain": "cont"}}}
    out = tmp_path / "mnist" / "cont.h5"
    attrs = build_feature_cache("mnist", "cont", config, out, device="cpu", progress=False, checkpoint=path)
    assert attrs["extractor_spec"] == {"kind": "pretrained_public", "pretrain": "cont"}
    assert attrs["checkpoint_sha256"] == file_sha256(path)  # which file it was: by content, not by path
    assert load_feature_cache(out, expect=expected_attrs("mnist", "cont", config)).x_train.shape[1] == attrs["feature_dim"]


def test_one_dpsgd_step_is_the_clipped_noisy_sum_over_the_expected_batch():
    g = torch.Generator().manual_seed(0)
    n, d, k, clip, sigma, lr, seed = 40, 6, 3, 0.5, 0.7, 0.3, 11
    x = torch.randn(n, d, generator=g) * torch.logspace(-1, 1, n).unsqueeze(1)
    y = torch.randint(0, k, (n,), generator=g)
    model = torch.nn.Linear(d, k)
    w0 = [p.detach().clone() for p in model.parameters()]
    # reference: per-sample gradients by hand, the same generator draws (Poisson mask, then the noise)
    per_sample = []
    for i in range(n):
        ref = torch.nn.Linear(d, k)
        with torch.no_grad():
            ref.weight.copy_(w0[0])
            ref.bias.copy_(w0[1])
        torch.nn.functional.cross_entropy(ref(x[i : i + 1]), y[i : i + 1], reduction="sum").backward()
        per_sample.append(torch.cat([ref.weight.grad.reshape(-1), ref.bias.grad]))
    per_sample = torch.stack(per_sample)
    gen = secret_generator(seed)
    keep = torch.rand(n, generator=gen, dtype=torch.float64) < 0.5  # as the trainer draws it
    noise = torch.randn(per_sample.shape[1], generator=gen) * sigma * clip
    scale = torch.clamp(clip / per_sample.norm(dim=1), max=1.0) * keep
    expected = torch.cat([w.reshape(-1) for w in w0]) - lr * (scale @ per_sample + noise) / (0.5 * n)
    trained, trace = train_dpsgd(model, lambda idx: x[idx], y, sample_rate=0.5, n_public=len(y), steps=1, sigma=sigma, clip_norm=clip,
                                 lr=lr, momentum=0.0, seed=seed)
    got = torch.cat([p.detach().reshape(-1) for p in trained.parameters()])
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    assert trace["mean_batch"] == int(keep.sum())


def test_switch_keeps_the_epoch_with_the_best_public_validation_loss(monkeypatch):
    losses = [1.0, 0.5, 0.7]  # epoch 3 is worse than epoch 2: with patience 1 the public stage ends there
    states = []

    def scripted(model, *args, **kwargs):
        if len(states) < len(losses):  # the per-epoch validation calls; the final accuracy calls get 0
            states.append({k: v.clone() for k, v in model.state_dict().items()})
            return 0.0, losses[len(states) - 1]
        return 0.0, 0.0

    monkeypatch.setattr(pt, "evaluate", scripted)
    cfg = pt.PretrainConfig.from_config({**TINY, "epochs": 4, "private_stage": None}, "p")
    data = pt.load_public_dataset(cfg)
    model, record = pt.pretrain(cfg, data, progress=False)
    assert record["switch"] == {"rule": "early_stopping", "epoch": 2, "epochs_run": 3, "max_epochs": 4,
                                "statistic": "public test-split loss (no privacy cost)"}
    for key, value in model.state_dict().items():  # the weights of epoch 2, not those of epoch 3
        torch.testing.assert_close(value, states[1][key])


def test_private_stage_config_errors_name_the_key():
    base = {k: v for k, v in TINY.items() if k != "device"}
    with pytest.raises(ConfigError, match="pretraining.p.norm"):
        pt.PretrainConfig.from_config({**base, "norm": "batch"}, "p")
    with pytest.raises(ConfigError, match="private_stage.dataset: 'synthetic_shapes' is also the public"):
        pt.PretrainConfig.from_config({**base, "private_stage": {**PRIVATE, "dataset": "synthetic_shapes"}}, "p")
    with pytest.raises(ConfigError, match="private_stage.dataset: 'tweets' is not an image dataset"):
        pt.PretrainConfig.from_config({**base, "private_stage": {**PRIVATE, "dataset": "tweets"}}, "p")
    with pytest.raises(ConfigError, match="private_stage: unknown key"):
        pt.PretrainConfig.from_config({**base, "private_stage": {**PRIVATE, "sigma": 1.0}}, "p")
    with pytest.raises(ConfigError, match="switch"):
        pt.PretrainConfig.from_config({**base, "switch": "never"}, "p")
    assert PrivateStageConfig.from_config(PRIVATE, "x").plan(1000) == {"n_public": 1000, "sample_rate": 0.064,
                                                                      "steps": 16}


def test_a_study_on_the_private_stage_data_is_refused_and_other_data_allowed():
    config = {"pretraining": {"cont": TINY}, "extractors": {"cont": {"kind": "pretrained_public", "pretrain": "cont"}},
              "studies": [{"dataset": "mnist", "extractor": "cont"}, {"dataset": "digits", "extractor": "cont"}]}
    with pytest.raises(ConfigError, match=r"studies\[1\].*private_stage already trained on 'digits'"):
        check_study_overlap(config)
    config["studies"].pop()
    check_study_overlap(config)
    pt.check_pretraining_config(config)
    # a stage on EMNIST and a study on MNIST: one source (NIST SD19), two statements that add up for a person in both
    emnist = {"pretraining": {"cont": {**TINY, "private_stage": {**PRIVATE, "dataset": "emnist"}}},
              "extractors": config["extractors"], "studies": [{"dataset": "mnist", "extractor": "cont"}]}
    with pytest.warns(UserWarning, match=r"studies\[0\] \(mnist, cont\): EMNIST and MNIST both come from NIST .*two"):
        check_study_overlap(emnist)
