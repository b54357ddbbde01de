"""benchmarks/noise_generators.py: its counter-based generator is Philox4x32-10 and draws standard normals."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import noise_generators as ng  # noqa: E402


def test_philox_matches_the_random123_known_answers():
    ng.known_answer()  # exits on a wrong word
    # one round changes the words; the known answers are of 10 rounds
    one = ng.philox4x32([torch.tensor([0])] * 4, (0, 0), rounds=1)
    assert [int(x) for x in one] != [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]


def test_philox_normals_are_standard_normal_and_a_function_of_key_and_stream():
    cpu = torch.device("cpu")
    z = ng.philox_normal(200_001, (7, 11), 0, cpu)
    assert z.shape == (200_001,) and z.dtype == torch.float32 and torch.isfinite(z).all()
    # mean and variance of 200k standard normals: within ~5 standard errors
    assert abs(z.mean().item()) < 0.012 and abs(z.var().item() - 1.0) < 0.016
    assert abs(((z > 0).double().mean() - 0.5).item()) < 0.006  # symmetric
    assert torch.equal(z[:1000], ng.philox_normal(1000, (7, 11), 0, cpu))  # counter-based: a prefix is the same draw
    assert not torch.equal(z[:1000], ng.philox_normal(1000, (7, 12), 0, cpu))  # another key
    assert not torch.equal(z[:1000], ng.philox_normal(1000, (7, 11), 1, cpu))  # another stream
