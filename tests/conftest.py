"""Fixtures shared by several test modules."""

import pytest
import torch
from sklearn.datasets import load_digits

from dphpo.hpo.common import PreparedFeatures


@pytest.fixture(scope="module")
def digits_features():
    """scikit-learn digits scaled to [0, 1], shuffled with a fixed seed: 1,400 train, 397 test rows."""
    d = load_digits()
    x = torch.tensor(d.data / 16.0, dtype=torch.float32)
    y = torch.tensor(d.target, dtype=torch.int64)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    x, y = x[perm], y[perm]
    return PreparedFeatures(x[:1400], y[:1400], x[1400:], y[1400:], 10, "digits-test", {})
