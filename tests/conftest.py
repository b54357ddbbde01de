"""Fixtures shared by several test modules."""

import hashlib
import os

import pytest
import torch
from sklearn.datasets import load_digits

from dphpo.hpo.common import PreparedFeatures
from dphpo.privacy.randomness import ENV_VAR, NoiseKey, NoiseScope, load_key


@pytest.fixture(scope="session", autouse=True)
def noise_key_file(tmp_path_factory):
    """One key for the whole test session (workflow subprocesses inherit it through the environment),
    so no test writes .dphpo/noise.key into the checkout. It is a fixed, public *test* key, so that
    tests see the same draws on every machine; a real study's key is secret and random."""
    path = tmp_path_factory.mktemp("noise-key") / "noise.key"
    path.write_text(hashlib.sha256(b"dphpo public test key").hexdigest() + "\n")
    path.chmod(0o600)
    previous = os.environ.get(ENV_VAR)
    os.environ[ENV_VAR] = str(path)
    yield path
    if previous is None:
        os.environ.pop(ENV_VAR, None)
    else:
        os.environ[ENV_VAR] = previous


def noise_scope(seed: int = 0, key: NoiseKey | None = None, **labels) -> NoiseScope:
    """The noise scope of a test study (the session's key unless another is given)."""
    return (key or load_key()).scope(dataset="test", extractor="test", variant="default", seed=seed, **labels)


@pytest.fixture
def noise() -> NoiseScope:
    return noise_scope(0)


@pytest.fixture(scope="module")
def digits_features():
    """scikit-learn digits scaled to [0, 1], shuffled with a fixed seed: 1,400 train, 397 test rows."""
    d = load_digits()
    x = torch.tensor(d.data / 16.0, dtype=torch.float32)
    y = torch.tensor(d.target, dtype=torch.int64)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    x, y = x[perm], y[perm]
    return PreparedFeatures(x[:1400], y[:1400], x[1400:], y[1400:], 10, "digits-test", {}, n_public=1400)
