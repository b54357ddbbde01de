"""Private draws made one step ahead on worker threads give the numbers drawn in line, byte for byte."""

from __future__ import annotations

import threading

import pytest
import torch

from dphpo.train.dpgd import TrialBatch, train_linear_dpgd
from dphpo.train.noise import DrawAhead, StreamPool, secret_generator


def test_draw_ahead_returns_each_step_in_order_and_draws_off_the_calling_thread():
    threads = []

    def draw(t):
        threads.append(threading.current_thread().name)
        return t * t

    with DrawAhead(draw, 5) as draws:
        assert [draws.get(t) for t in range(5)] == [0, 1, 4, 9, 16]
    assert all(name.startswith("dphpo-noise") for name in threads)
    inline = DrawAhead(draw, 3, ahead=False)
    assert [inline.get(t) for t in range(3)] == [0, 1, 4]
    assert threads[-1] == threading.current_thread().name


def test_draw_ahead_refuses_steps_out_of_order_and_raises_a_failed_draw_at_its_step():
    with DrawAhead(lambda t: t, 3) as draws:
        with pytest.raises(ValueError, match="step order"):
            draws.get(1)

    def draw(t):
        if t == 1:
            raise RuntimeError("generator broke")
        return t

    with DrawAhead(draw, 3) as draws:
        assert draws.get(0) == 0
        with pytest.raises(RuntimeError, match="generator broke"):
            draws.get(1)


@pytest.mark.parametrize("threads", [1, 3])
def test_stream_pool_numbers_do_not_depend_on_the_thread_count(threads):
    def streams():
        return [torch.Generator().manual_seed(s) for s in range(6)]

    reference = [torch.randn(50, generator=g) for g in streams()]
    pool = StreamPool(threads)
    gens = streams()
    try:
        drawn = [None] * 6
        pool.map(lambda j: drawn.__setitem__(j, torch.randn(50, generator=gens[j])), range(6))
    finally:
        pool.close()
    assert all(torch.equal(a, b) for a, b in zip(reference, drawn))


@pytest.mark.parametrize("options", [{}, {"sample_rate": 0.4}, {"init_std": 0.05}])
def test_trainer_ahead_equals_inline_byte_for_byte(options):
    torch.manual_seed(0)
    x = torch.randn(400, 17) * torch.empty(400, 1).uniform_(0.05, 3.0)
    y = torch.randint(0, 5, (400,))
    trials = TrialBatch([0.2, 1.0, 0.5, 2.0], [6, 2, 4, 0], [1.0, 0.0, 3.0, 2.0], [7, 8, 9, 10])
    ahead = train_linear_dpgd(x, y, 5, trials, n_public=400, **options)
    inline = train_linear_dpgd(x, y, 5, trials, n_public=400, noise_ahead=False, **options)
    assert torch.equal(ahead, inline)
    # and the noise is there: another seed gives other weights
    other = TrialBatch(trials.eta, trials.steps, trials.sigma, [17, 18, 19, 20])
    assert not torch.equal(ahead, train_linear_dpgd(x, y, 5, other, n_public=400, **options))


def test_trainer_draws_each_trial_from_its_own_generator_in_step_order():
    """The in-line reference written out: trial j's step t noise is the t-th draw of generator(seed_j)."""
    torch.manual_seed(1)
    x = torch.randn(300, 9)
    y = torch.randint(0, 3, (300,))
    steps, sigma, eta = 3, 2.0, 0.3
    seen = []
    train_linear_dpgd(x, y, 3, TrialBatch([eta], [steps], [sigma], [42]), n_public=300, free_step=False,
                      on_step=lambda t, idx, w, g: seen.append(g.clone()))
    gen = secret_generator(42)
    w = torch.zeros(1, 3, 9)
    for t in range(steps):
        logits = x @ w[0].T
        resid = torch.softmax(logits, 1) - torch.nn.functional.one_hot(y, 3)
        scale = (1.0 / (resid.norm(dim=1) * x.norm(dim=1)).clamp_min(1e-12)).clamp(max=1.0)
        clipped = (resid * scale[:, None]).T @ x
        expected = (clipped + torch.randn(3, 9, generator=gen) * sigma) / 300
        assert torch.allclose(seen[t][0], expected, atol=1e-6)
        w = seen_weights(seen, t, eta)


def seen_weights(seen, t, eta, momentum=0.9):
    """The trainer's weights after step t, rebuilt from its noisy gradients (PyTorch's momentum convention)."""
    v = torch.zeros_like(seen[0])
    w = torch.zeros_like(seen[0])
    for g in seen[: t + 1]:
        v = momentum * v + g
        w = w - eta * v
    return w


def test_a_small_models_noise_is_its_generators_draws_tensor_by_tensor(monkeypatch):
    from dphpo.train import noise

    shapes = [(30, 7), (13,), (5, 5, 5)]
    reference_gen = torch.Generator().manual_seed(3)
    reference = [torch.randn(s, generator=reference_gen) for s in shapes * 2]
    streams = noise.ParameterNoise(shapes, torch.Generator().manual_seed(3), 3, torch.device("cpu"), StreamPool(1))
    assert len(streams.generators) == 1
    assert all(torch.equal(a, b) for a, b in zip(reference, streams.draw() + streams.draw()))


@pytest.mark.parametrize("threads", [1, 4])
def test_a_large_models_noise_streams_do_not_depend_on_the_thread_count(monkeypatch, threads):
    from dphpo.train import noise

    monkeypatch.setattr(noise, "STREAM_ELEMENTS", 64)  # 12 streams for 748 parameters; pieces cut inside tensors
    shapes = [(30, 7), (13,), (5, 5, 5), (10, 40)]

    def two_steps(pool_threads):
        pool = StreamPool(pool_threads)
        try:
            streams = noise.ParameterNoise(shapes, secret_generator(5), 5, torch.device("cpu"), pool)
            return len(streams.generators), streams.draw() + streams.draw()
        finally:
            pool.close()

    count, drawn = two_steps(threads)
    assert count == 12
    assert all(torch.equal(a, b) for a, b in zip(drawn, two_steps(1)[1]))
    flat = torch.cat([t.flatten() for t in drawn])
    assert abs(float(flat.mean())) < 0.1 and abs(float(flat.std()) - 1) < 0.1
    assert not torch.equal(drawn[0], drawn[4])  # a new step draws new noise
    other = noise.ParameterNoise(shapes, secret_generator(6), 6, torch.device("cpu"), StreamPool(1)).draw()
    assert not torch.equal(drawn[3], other[3])  # the streams follow the run's (secret) seed


def test_a_secret_generator_uses_every_bit_of_its_seed():
    """torch's manual_seed keeps the low 32 bits: two trial seeds equal there drew equal noise (2^32 seeds
    to try would give any draw away). secret_generator fills the whole Mersenne Twister state from a hash
    of the seed and its labels; the same seed and labels give the same numbers."""
    low, high = 0xDEADBEEF, (0x12345678 << 32) | 0xDEADBEEF
    assert torch.equal(torch.randn(8, generator=torch.Generator().manual_seed(low)),
                       torch.randn(8, generator=torch.Generator().manual_seed(high)))  # the weakness itself
    assert not torch.equal(torch.randn(8, generator=secret_generator(low)), torch.randn(8, generator=secret_generator(high)))
    assert torch.equal(torch.randn(8, generator=secret_generator(high)), torch.randn(8, generator=secret_generator(high)))
    # labels give independent states (DP-ZO's public directions reveal nothing of its noise)
    directions, noise_draws = (torch.randn(8, generator=secret_generator(high, label)) for label in ("directions", "noise"))
    assert not torch.equal(directions, noise_draws)
    draws = torch.randn(200_000, generator=secret_generator(high))
    assert abs(float(draws.mean())) < 0.01 and abs(float(draws.std()) - 1) < 0.01
    # a trial's seed is 63 bits (NoiseScope.seed): 10^5 trial seeds give 10^5 distinct noise vectors
    firsts = {float(torch.randn(1, generator=secret_generator(s << 32))) for s in range(2000)}
    assert len(firsts) == 2000


def test_a_trials_noise_differs_from_a_seed_equal_in_its_low_32_bits():
    """End to end: two trials whose seeds share their low 32 bits no longer train to the same weights."""
    torch.manual_seed(2)
    x, y = torch.randn(100, 5), torch.randint(0, 3, (100,))
    seeds = [0x0BADC0DE, (1 << 40) | 0x0BADC0DE]
    w = train_linear_dpgd(x, y, 3, TrialBatch([0.5, 0.5], [3, 3], [2.0, 2.0], seeds), n_public=100)
    assert not torch.equal(w[0], w[1])


def test_a_secret_generator_keeps_no_trace_of_its_seed():
    # torch stores a generator's seed in its state (bytes 0-7) and initial_seed(): from the state of one
    # label (e.g. DP-ZO's directions) the others' (its noise) could be rebuilt
    from dphpo.train.noise import secret_generator

    seed = 0x5EC2E7_0123_4567
    directions, noise = secret_generator(seed, "directions"), secret_generator(seed, "noise")
    assert directions.initial_seed() == noise.initial_seed() == 0
    state = directions.get_state()
    assert int.from_bytes(bytes(state[:8].tolist()), "little") == 0
    assert not torch.equal(torch.randn(8, generator=directions), torch.randn(8, generator=noise))
