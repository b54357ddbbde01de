"""Public pretraining (dphpo.features.pretrain), its networks, the `pretrained_public` extractor and rule."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from dphpo.data.synthetic import load_synthetic_shapes
from dphpo.errors import ConfigError
from dphpo.features import build_feature_cache, get_extractor
from dphpo.features import pretrain as pt
from dphpo.features.checkpoint import CHECKPOINT_FORMAT, network_from_checkpoint, save_checkpoint
from dphpo.features.networks import ARCHS, build_network
from dphpo.features.tensors import images_to_tensor, state_dict_sha256
from dphpo.io import file_sha256

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "tests" / "configs" / "tiny.yaml"
# A tiny run: 256 synthetic images, one epoch, a 4-channel small_cnn (feature dim 4 * 8 * 2 * 2 = 128).
TINY_PRETRAIN = dict(arch="small_cnn", public_dataset="synthetic_shapes", width=4, epochs=1, batch_size=64,
                     lr=0.05, max_train=256, max_test=64, seed=0, device="cpu")


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    out = tmp_path_factory.mktemp("pretrained") / "tiny.pt"
    summary = pt.run_pretraining("tiny", TINY_PRETRAIN, out, summary_path=out.with_suffix(".json"), progress=False)
    return out, summary


@pytest.mark.parametrize("arch", sorted(ARCHS))
@pytest.mark.parametrize("norm", ["batch", "group"])
def test_networks_output_pooled_features_of_the_declared_dim(arch, norm):
    torch.manual_seed(0)
    net = build_network(arch, 7, norm=norm).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert net.forward_features(x).shape == (2, net.feature_dim)
        assert net(x).shape == (2, 7)
    expected = {"small_cnn": 512, "wrn16_4": 256, "resnet20": 64}[arch]
    assert net.feature_dim == expected


def test_paper_architectures_have_their_published_sizes():
    n_params = {a: sum(p.numel() for p in build_network(a, 10).parameters()) for a in ("wrn16_4", "resnet20")}
    assert 2.70e6 < n_params["wrn16_4"] < 2.80e6  # WRN-16-4: 2.7M (Zagoruyko & Komodakis, Table 1)
    assert 0.26e6 < n_params["resnet20"] < 0.28e6  # ResNet-20: 0.27M (He et al., Table 6)


def test_augmentation_crops_and_flips_each_image():
    x = torch.arange(2 * 3 * 8 * 8, dtype=torch.float32).reshape(2, 3, 8, 8)
    out1 = pt.augment_batch(x, torch.Generator().manual_seed(0))
    out2 = pt.augment_batch(x, torch.Generator().manual_seed(0))
    assert out1.shape == x.shape and torch.equal(out1, out2)
    # every output pixel is an input pixel of the same image and channel, or zero padding
    for b in range(2):
        for c in range(3):
            assert set(out1[b, c].flatten().tolist()) <= set(x[b, c].flatten().tolist()) | {0.0}


def test_tiny_pretraining_writes_a_checkpoint_with_provenance(tiny_checkpoint):
    path, summary = tiny_checkpoint
    assert path.is_file() and not list(path.parent.glob("*.tmp"))
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    assert ckpt["format"] == CHECKPOINT_FORMAT and ckpt["name"] == "tiny"
    assert ckpt["arch"] == "small_cnn" and ckpt["arch_options"] == {"norm": "batch", "width": 4}
    assert ckpt["feature_dim"] == 128 and ckpt["num_classes"] == 32
    public = ckpt["public_dataset"]
    assert public["name"] == "synthetic_shapes" and (public["n_train"], public["n_test"]) == (256, 64)
    assert public["checksum"] == load_synthetic_shapes(n_train=256, n_test=64, resolution=32, seed=0).checksum
    assert ckpt["training"]["epochs"] == 1 and ckpt["training"]["lr"] == 0.05
    assert len(ckpt["training_config_hash"]) == 64
    assert 0.0 <= ckpt["metrics"]["train_accuracy"] <= 1.0 and 0.0 <= ckpt["metrics"]["test_accuracy"] <= 1.0
    assert len(ckpt["metrics"]["history"]) == 1
    assert ckpt["package_versions"]["torch"] and ckpt["package_versions"]["python"]
    assert ckpt["input"]["resolution"] == 32 and len(ckpt["input"]["mean"]) == 3
    # the JSON summary: everything but the weights, plus the file's sha256
    js = json.loads(path.with_suffix(".json").read_text())
    assert js["checkpoint_sha256"] == file_sha256(path) == summary["checkpoint_sha256"]
    assert "state_dict" not in js and js["public_dataset"]["checksum"] == public["checksum"]


def test_pretraining_is_deterministic_given_seed():
    cfg = pt.PretrainConfig.from_config(dict(TINY_PRETRAIN, max_train=128, max_test=16))
    data = pt.load_public_dataset(cfg)
    m1, _ = pt.pretrain(cfg, data, progress=False)
    m2, _ = pt.pretrain(cfg, data, progress=False)
    m3, _ = pt.pretrain(pt.PretrainConfig.from_config(dict(TINY_PRETRAIN, max_train=128, seed=1)), data, progress=False)
    sha = [state_dict_sha256(m.state_dict()) for m in (m1, m2, m3)]
    assert sha[0] == sha[1] != sha[2]


def test_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "x.pt"
    path.write_bytes(b"previous")

    def failing_save(obj, f, *args, **kwargs):
        f.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", failing_save)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint({"format": CHECKPOINT_FORMAT}, path)
    assert path.read_bytes() == b"previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.pt"]


def test_extractor_loads_the_checkpoint_and_normalizes_like_pretraining(tiny_checkpoint):
    path, _ = tiny_checkpoint
    ext = get_extractor("syn", {"kind": "pretrained_public", "pretrain": "tiny", "checkpoint": str(path)})
    rng = np.random.default_rng(0)
    grey = rng.integers(0, 256, (5, 28, 28), dtype=np.uint8)  # MNIST-like: grey, 28 px
    feats = ext.extract(grey, device="cpu", batch_size=2, progress=False)
    assert feats.shape == (5, 128) and feats.dtype == np.float32 and np.isfinite(feats).all()
    # grey images are replicated to 3 channels
    rgb = np.repeat(grey[..., None], 3, axis=-1)
    assert np.allclose(ext.extract(rgb, device="cpu", progress=False), feats, atol=1e-5)
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    attrs = ext.attrs()
    assert attrs["extractor_kind"] == "pretrained_public" and attrs["feature_dim"] == 128
    assert attrs["checkpoint_sha256"] == file_sha256(path)
    assert attrs["resolution"] == 32 and attrs["normalization"]["mean"] == ckpt["input"]["mean"]
    assert attrs["public_dataset"] == "synthetic_shapes"
    assert attrs["public_dataset_checksum"] == ckpt["public_dataset"]["checksum"]
    # the same features as the pretrained network's penultimate layer
    net = network_from_checkpoint(ckpt)
    x = images_to_tensor(grey, resolution=32, mean=ckpt["input"]["mean"], std=ckpt["input"]["std"])
    with torch.no_grad():
        assert np.allclose(net.forward_features(x).numpy(), feats, atol=1e-5)


def test_extractor_finds_the_workflow_checkpoint_by_name(tiny_checkpoint, tmp_path, monkeypatch):
    path, _ = tiny_checkpoint
    (tmp_path / "results" / "pretrained").mkdir(parents=True)
    (tmp_path / "results" / "pretrained" / "tiny.pt").write_bytes(path.read_bytes())
    monkeypatch.chdir(tmp_path)
    ext = get_extractor("syn", {"kind": "pretrained_public", "pretrain": "tiny"})
    assert ext.extract(np.zeros((2, 32, 32, 3), np.uint8), device="cpu", progress=False).shape == (2, 128)
    missing = get_extractor("syn", {"kind": "pretrained_public", "pretrain": "other"})
    with pytest.raises(ConfigError, match="pretrain_public"):
        missing.extract(np.zeros((2, 32, 32, 3), np.uint8), device="cpu", progress=False)


def test_feature_cache_of_a_private_dataset_records_the_checkpoint(tiny_checkpoint, tmp_path):
    path, _ = tiny_checkpoint
    config = {"data_dir": str(tmp_path / "data"), "datasets": {"digits": {"max_train": 60, "max_test": 20}},
              "extractors": {"syn": {"kind": "pretrained_public", "pretrain": "tiny", "checkpoint": str(path)}}}
    attrs = build_feature_cache("digits", "syn", config, tmp_path / "digits" / "syn.h5", device="cpu",
                                progress=False)
    assert attrs["feature_dim"] == 128 and abs(attrs["n_train"] - 60) < 25  # a per-record subset: about 60
    assert attrs["checkpoint_sha256"] == file_sha256(path)
    assert attrs["public_dataset"] == "synthetic_shapes"


def test_config_errors_name_the_key():
    base = {"extractors": {"syn": {"kind": "pretrained_public", "pretrain": "nope"}}, "pretraining": {}}
    with pytest.raises(ConfigError, match="extractors.syn.pretrain"):
        pt.check_pretraining_config(base)
    with pytest.raises(ConfigError, match="pretraining.p.arch"):
        pt.check_pretraining_config({"pretraining": {"p": {"arch": "vgg", "public_dataset": "cifar100"}}})
    with pytest.raises(ConfigError, match="public_dataset"):
        pt.check_pretraining_config({"pretraining": {"p": {"arch": "resnet20", "public_dataset": "imagenet_21k"}}})
    with pytest.raises(ConfigError, match="width"):
        pt.PretrainConfig.from_config({"arch": "resnet20", "public_dataset": "cifar100", "width": 8}, "p")
    # audit: small_cnn's three max pools need 8 pixels; a side of 6 passed and crashed inside torch
    with pytest.raises(ConfigError, match="pretraining.p.resolution: small_cnn needs images of at least 8 pixels"):
        pt.PretrainConfig.from_config({"arch": "small_cnn", "public_dataset": "digits", "resolution": 6}, "p")
    pt.PretrainConfig.from_config({"arch": "small_cnn", "public_dataset": "digits", "resolution": 8}, "p")
    pt.PretrainConfig.from_config({"arch": "resnet20", "public_dataset": "digits", "resolution": 4}, "p")
    pt.check_pretraining_config({"pretraining": {"p": {"arch": "resnet20", "public_dataset": "cifar100"}}})


def test_workflow_pretrains_before_extracting_features(tmp_path):
    cfg = yaml.safe_load(TINY.read_text())
    cfg["extractors"]["syn_cnn"] = {"kind": "pretrained_public", "pretrain": "syn_cnn"}
    cfg["studies"].append({"dataset": "digits", "extractor": "syn_cnn"})
    cfg["pretraining"] = {"syn_cnn": {"arch": "small_cnn", "public_dataset": "synthetic_shapes", "epochs": 1,
                                      "max_train": 256}}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--configfile", str(path),
           "--replace-workflow-config", "-d", str(tmp_path)]
    proc = subprocess.run([*cmd, "-n"], cwd=REPO, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "rule pretrain_public:" in out and "results/pretrained/syn_cnn.pt" in out
    dag = subprocess.run([*cmd, "--dag"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert dag.returncode == 0, dag.stderr
    nodes = {}
    for line in dag.stdout.splitlines():
        if "label = \"" in line:
            node = line.strip().split("[")[0].strip()
            nodes[line.split("label = \"")[1].split("\"")[0].split("\\n")[0]] = node
    assert f"{nodes['pretrain_public']} -> {nodes['extract_features']}" in dag.stdout
