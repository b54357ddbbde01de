"""One record cannot break the clipped sum: a term whose norm overflows or is NaN is dropped, never summed
(dphpo.train.clipping). Before, one row of huge but finite features (which every loader accepts) or one
non-finite loss turned the whole release into NaN, revealing that the record was there."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dphpo.train.clipping import clip_factors, drop_nonfinite_, row_norms
from dphpo.train.dpgd import TrialBatch, clip_scales, clipped_sums, train_linear_dpgd
from dphpo.train.dpsgd import SmallCNN, train_cnn_oso, train_dpsgd
from dphpo.train.dpzo import DPZOSettings, train_dpzo
from dphpo.train.finetune import FinetuneSettings, train_dp
from dphpo.train.oso import OsoRule

N, D, K = 48, 8, 3


@pytest.fixture
def data():
    g = torch.Generator().manual_seed(0)
    return torch.randn(N, D, generator=g), torch.randint(0, K, (N,), generator=g)


def _with(x, y, row, label):
    return torch.cat([x, row]), torch.cat([y, torch.tensor([label])])


def _huge(value: float) -> torch.Tensor:
    row = torch.zeros(1, D)
    row[0, 0] = value
    return row


def test_factors_drop_what_is_not_finite_and_row_norms_do_not_overflow():
    assert clip_factors(torch.tensor([float("nan"), float("inf"), 0.0, 0.5, 4.0]), 2.0).tolist() == [0.0, 0.0, 1.0, 1.0, 0.5]
    rows = drop_nonfinite_(torch.tensor([[1.0, float("inf")], [3.0, 4.0]]), torch.tensor([float("inf"), 5.0]))
    assert rows.tolist() == [[0.0, 0.0], [3.0, 4.0]]
    x = torch.tensor([[3e30, 4e30], [3.0, 4.0], [2e19, 0.0]])
    assert x.norm(dim=1)[0].isinf()  # the plain formula overflows in fp32
    assert torch.allclose(row_norms(x), torch.tensor([5e30, 5.0, 2e19]), rtol=1e-6)


@pytest.mark.parametrize("value", [2e19, 1e30, 1e38])
@pytest.mark.parametrize("label", range(K))
@pytest.mark.parametrize("scale", [1.0, 100.0])  # 100: the row's logits overflow to ±inf, its residual is NaN
def test_the_clipped_sum_moves_by_at_most_c_whatever_one_row_holds(data, value, label, scale):
    """The sensitivity argument itself, on the fused pass every linear-head trainer uses (DP-GD, OSO, the
    audit): with any weights, adding one row changes Σ clip(g_i) by at most C, and the sum stays finite."""
    x, y = data
    w = scale * torch.randn(2, K, D, generator=torch.Generator().manual_seed(1))

    def sums(features, labels):
        onehot = F.one_hot(labels, K).float()
        return clipped_sums(features, row_norms(features), onehot, w, clip_scales(1.0))

    with_row = sums(*_with(x, y, _huge(value), label))
    assert torch.isfinite(with_row).all()
    assert float((with_row - sums(x, y)).flatten(1).norm(dim=1).max()) <= 1.0 + 1e-5


@pytest.mark.parametrize("value", [2e19, 1e38])
def test_dpgd_releases_finite_weights_beside_a_huge_row(data, value):
    x, y = data
    trials = TrialBatch(eta=[0.5, 2.0], steps=[20, 20], sigma=[1.0, 1.0], seeds=[11, 12])
    for label in range(K):
        w = train_linear_dpgd(*_with(x, y, _huge(value), label), K, trials, n_public=N, clip_norm=1.0)
        assert torch.isfinite(w).all(), (value, label)


def _flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def test_dpsgd_and_the_oso_cnn_release_finite_weights_beside_a_huge_image():
    g = torch.Generator().manual_seed(0)
    images, labels = torch.rand(16, 1, 8, 8, generator=g), torch.randint(0, K, (16,), generator=g)
    images, labels = torch.cat([images, torch.full((1, 1, 8, 8), 3e38)]), torch.cat([labels, torch.tensor([0])])
    torch.manual_seed(1)
    model, _ = train_dpsgd(SmallCNN(1, K, 8), lambda idx: images[idx], labels, sample_rate=1.0, n_public=16, steps=3,
                           sigma=1.0, clip_norm=1.0, lr=0.1, seed=5)
    assert torch.isfinite(_flat(model)).all()
    model, _ = train_cnn_oso(images, labels, K, sample_rate=1.0, n_public=16, steps=3, nu=1.0, eta0=0.1, rule=OsoRule(), seed=5)
    assert torch.isfinite(_flat(model)).all()


@pytest.mark.parametrize("kind, settings", [
    ("finetune", {"clipping": "hooks"}),
    ("finetune", {"clipping": "ghost"}),
    ("finetune", {"clipping": "hooks", "precision": "bfloat16"}),
    ("dpzo", {}),
])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), 1e20])
@pytest.mark.parametrize("physical", [64, 1])  # 1: the record alone in its chunk, which then keeps no example
def test_fine_tuning_and_dpzo_drop_an_example_whose_loss_or_norm_is_not_finite(data, kind, settings, value, physical):
    """A record whose per-example loss or gradient norm is NaN or inf (an unchecked hidden-state cache, an
    overflowing reduced-precision forward pass) is dropped; the release stays finite, also where it is alone
    in its chunk (ghost clipping's second forward ran on no example and failed). With a finite record,
    nothing is dropped: the release is the one its (ε, δ) describes."""
    x, y = data

    def train(features, labels):
        torch.manual_seed(1)
        model = nn.Linear(D, K)

        def losses(module, idx):
            if len(idx) == 0:  # a transformer cannot reshape an empty batch; every batch here holds all N records
                raise RuntimeError("a forward pass on no example")
            return F.cross_entropy(module(features[idx]), labels[idx], reduction="none")

        common = {"n_public": N, "lr": 0.1, "steps": 4, "sigma": 1.0, "seed": 3}
        if kind == "dpzo":
            return train_dpzo(model, losses, len(labels), settings=DPZOSettings(batch_size=N, physical_batch=physical, device="cpu",
                                                                                **settings), **common)[0]
        return train_dp(model, losses, len(labels), settings=FinetuneSettings(batch_size=N, physical_batch=physical, device="cpu",
                                                                              **settings), **common)[0]

    row = torch.randn(1, D)
    row[0, 0] = value
    assert torch.isfinite(_flat(train(*_with(x, y, row, 0)))).all()
