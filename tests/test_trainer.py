"""The batched full-batch DP-GD trainer (methods.md §1) against independent references.

References: opacus per-sample gradients (one step), a plain per-sample-clipped GD loop written with
torch.func (several steps, momentum, free step), the noise law σ·C/N, and direct argmax counting.
"""

import warnings

import pytest
import torch
import torch.nn.functional as F
from opacus import GradSampleModule

import dphpo.train.dpgd as dpgd
from dphpo.train.dpgd import TrialBatch, accuracy_counts, train_linear_dpgd
from dphpo.train.noise import secret_generator

N, D, K = 64, 20, 5


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """Tiny problems: with 2 intra-op threads on a loaded 2-core machine each call is ~60x slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def make_data(n=N, d=D, k=K, seed=0, dtype=torch.float32):
    """Features with norms spread over three decades, so some samples are clipped and some are not."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    x = x / x.norm(dim=1, keepdim=True) * torch.logspace(-2, 1, n, dtype=torch.float64)[torch.randperm(n, generator=g)].unsqueeze(1)
    y = torch.randint(0, k, (n,), generator=g)
    return x.to(dtype), y


def init_weights(seed, k, d, init_std):
    """The trainer's init for a trial: N(0, init_std²) drawn first from the trial's `secret_generator(seed)`."""
    return torch.randn(k, d, generator=secret_generator(seed)) * init_std


def opacus_clipped_sum(x, y, w0, clip):
    """Σ_i clip_C(∇ℓ_i) from opacus per-sample gradients of nn.Linear(d, K, bias=False), CE loss."""
    model = torch.nn.Linear(x.shape[1], w0.shape[0], bias=False).to(x.dtype)
    with torch.no_grad():
        model.weight.copy_(w0)
    gsm = GradSampleModule(model, loss_reduction="sum")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # full backward hook on inputs without grad
        F.cross_entropy(gsm(x), y, reduction="sum").backward()
    per_sample = model.weight.grad_sample  # (N, K, d)
    norms = per_sample.flatten(1).norm(dim=1)
    scale = torch.clamp(clip / norms, max=1.0)
    return (per_sample * scale.view(-1, 1, 1)).sum(0), int((norms > clip).sum())


def one_step(x, y, clip, seed=0, init_std=0.0):
    w = train_linear_dpgd(
        x, y, K, n_public=len(y), trials=TrialBatch([1.0], [1], [0.0], [seed]),
        clip_norm=clip, momentum=0.0, free_step=False, init_std=init_std,
    )
    return w[0]


@pytest.mark.parametrize("clip", [1.0, 0.3])
def test_one_step_from_zero_init_is_minus_opacus_clipped_sum_over_n(clip):
    x, y = make_data()
    clipped_sum, n_clipped = opacus_clipped_sum(x, y, torch.zeros(K, D), clip)
    assert 0 < n_clipped < N, "the case must mix clipped and unclipped samples"
    torch.testing.assert_close(one_step(x, y, clip), -clipped_sum / N, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("clip", [1.0, 0.3])
def test_one_step_from_random_init_matches_opacus_with_non_uniform_softmax(clip):
    x, y = make_data(seed=1)
    seed, init_std = 1237, 0.3
    w0 = init_weights(seed, K, D, init_std)
    probs = torch.softmax(x @ w0.T, dim=1)
    assert probs.max() > 0.9, "softmax must be far from uniform for this check to mean anything"
    # The trainer's init is reproduced from the seed: steps=0 returns it unchanged.
    w_init = train_linear_dpgd(x, y, K, n_public=len(y), trials=TrialBatch([1.0], [0], [0.0], [seed]), free_step=False, init_std=init_std)[0]
    torch.testing.assert_close(w_init, w0, rtol=0, atol=0)
    clipped_sum, n_clipped = opacus_clipped_sum(x, y, w0, clip)
    assert 0 < n_clipped < N
    w1 = one_step(x, y, clip, seed=seed, init_std=init_std)
    torch.testing.assert_close(w1, w0 - clipped_sum / N, rtol=1e-5, atol=1e-7)
    # The update alone (not swamped by w0) agrees too.
    torch.testing.assert_close((w1 - w0) * N, -clipped_sum, rtol=1e-4, atol=1e-5 * clipped_sum.abs().max().item())


def reference_clipped_gd(x, y, k, eta, steps, clip, momentum, free_step, w0):
    """Plain full-batch GD with per-sample clipping (torch.func) and PyTorch-style momentum, σ = 0."""

    def loss(w, xi, yi):
        return F.cross_entropy((xi @ w.T).unsqueeze(0), yi.unsqueeze(0), reduction="sum")

    per_sample_grad = torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0, 0))
    w, v = w0.clone(), torch.zeros_like(w0)
    for _ in range(steps):
        g = per_sample_grad(w, x, y)  # (N, K, d)
        factors = torch.clamp(clip / g.flatten(1).norm(dim=1), max=1.0)
        grad = (g * factors.view(-1, 1, 1)).sum(0) / x.shape[0]
        v = momentum * v + grad
        w = w - eta * v
    if free_step:
        w = w - eta * momentum * v
    return w


@pytest.mark.parametrize("free_step", [False, True])
def test_noiseless_trainer_equals_reference_clipped_gd_with_momentum(free_step):
    x, y = make_data(seed=2, dtype=torch.float64)
    etas, steps, seeds = [0.5, 2.0, 1.0, 4.0], [6, 3, 9, 1], [0, 1, 2, 3]
    for init_std in (0.0, 0.2):
        got = train_linear_dpgd(
            x, y, K, n_public=len(y), trials=TrialBatch(etas, steps, [0.0] * 4, seeds),
            clip_norm=0.5, momentum=0.9, free_step=free_step, init_std=init_std,
        )
        for j in range(4):
            w0 = init_weights(seeds[j], K, D, init_std).double()
            want = reference_clipped_gd(x, y, K, etas[j], steps[j], 0.5, 0.9, free_step, w0)
            assert not torch.allclose(want, w0), "the reference must move"
            torch.testing.assert_close(got[j].double(), want, rtol=1e-5, atol=1e-6)


def test_float64_features_train_in_float64_and_return_float64_weights():
    # The trainer computes in the features' dtype (noise and init are cast to it); the result
    # must keep that dtype instead of failing to write into a float32 buffer.
    x, y = make_data(seed=10, dtype=torch.float64)
    trials = TrialBatch([1.0, 0.5], [3, 5], [1.0, 0.0], [1, 2])
    w64 = train_linear_dpgd(x, y, K, n_public=len(y), trials=trials, init_std=0.1)
    w32 = train_linear_dpgd(x.float(), y, K, trials, n_public=len(y), init_std=0.1)
    assert w64.dtype == torch.float64 and w32.dtype == torch.float32
    torch.testing.assert_close(w64.float(), w32, rtol=1e-4, atol=1e-5)


def test_noise_on_zero_gradient_has_std_sigma_c_over_n_and_zero_mean():
    # Zero features: every per-sample gradient is zero, so one step with η = 1, ρ = 0 gives
    # W = −σ C ξ / N exactly, ξ standard normal (K·d = 10000 entries per trial).
    n, d, k, clip = 50, 1000, 10, 0.7
    x, y = torch.zeros(n, d), torch.arange(n) % k
    sigmas = [0.5, 3.0, 20.0]
    w = train_linear_dpgd(
        x, y, k, n_public=len(y), trials=TrialBatch([1.0] * 3, [1] * 3, sigmas, [11, 12, 13]), clip_norm=clip, momentum=0.0, free_step=False
    )
    for j, sigma in enumerate(sigmas):
        expected = sigma * clip / n
        entries = w[j].flatten()
        assert entries.std().item() == pytest.approx(expected, rel=0.03)
        assert abs(entries.mean().item()) < 4 * expected / entries.numel() ** 0.5
    # Independent noise per trial: standardized draws are uncorrelated.
    z = w.flatten(1) / torch.tensor(sigmas).unsqueeze(1)
    corr = torch.corrcoef(z)
    assert (corr - torch.eye(3)).abs().max() < 0.05


def test_noise_is_added_every_step_and_accumulates_as_a_random_walk():
    # ρ = 0, zero features: after T steps W = −η σ C Σ_t ξ_t / N, std √T·σC/N.
    n, d, k, steps = 40, 1000, 10, 9
    w = train_linear_dpgd(
        torch.zeros(n, d), torch.arange(n) % k, k, TrialBatch([1.0], [steps], [2.0], [5]), n_public=n,
        clip_norm=1.0, momentum=0.0, free_step=False,
    )
    assert w.std().item() == pytest.approx(steps**0.5 * 2.0 / n, rel=0.03)


def batch(etas, steps, sigmas, seeds, x, y, **kw):
    kw = {"clip_norm": 1.0, "momentum": 0.9, "free_step": True, "init_std": 0.05} | kw
    return train_linear_dpgd(x, y, K, n_public=len(y), trials=TrialBatch(etas, steps, sigmas, seeds), **kw)


def test_trial_weights_do_not_depend_on_the_other_trials_in_its_batch():
    x, y = make_data(seed=3)
    alone = batch([0.7], [5], [2.0], [42], x, y)[0]
    # The same trial placed among 3 others with smaller and larger T, at every position.
    others = ([0.1, 3.0, 1.0], [2, 9, 5], [0.5, 8.0, 1.0], [1, 2, 3])
    for pos in range(4):
        etas, steps, sigmas, seeds = (list(v) for v in others)
        for lst, val in zip((etas, steps, sigmas, seeds), (0.7, 5, 2.0, 42)):
            lst.insert(pos, val)
        together = batch(etas, steps, sigmas, seeds, x, y)
        torch.testing.assert_close(together[pos], alone, rtol=0, atol=1e-6)


def test_trial_with_smaller_t_stops_updating_while_longer_trials_continue():
    x, y = make_data(seed=4)
    pair = batch([1.0, 1.0], [3, 7], [1.0, 1.0], [9, 9], x, y)
    short_alone = batch([1.0], [3], [1.0], [9], x, y)[0]
    long_alone = batch([1.0], [7], [1.0], [9], x, y)[0]
    torch.testing.assert_close(pair[0], short_alone, rtol=0, atol=1e-6)
    torch.testing.assert_close(pair[1], long_alone, rtol=0, atol=1e-6)
    # Same seed and η: the two trials share their first 3 steps, then the longer one moves on.
    assert (pair[1] - pair[0]).abs().max() > 1e-3


def test_zero_step_trial_keeps_its_init_in_a_batch_with_longer_trials():
    x, y = make_data(seed=5)
    w = batch([1.0, 1.0], [0, 4], [1.0, 1.0], [7, 8], x, y)
    torch.testing.assert_close(w[0], init_weights(7, K, D, 0.05), rtol=0, atol=0)


def test_same_seeds_give_identical_weights_and_different_seeds_differ():
    x, y = make_data(seed=6)
    args = ([0.5, 1.0, 2.0], [4, 2, 6], [1.0, 5.0, 0.5])
    a = batch(*args, [1, 2, 3], x, y)
    b = batch(*args, [1, 2, 3], x, y)
    c = batch(*args, [4, 5, 6], x, y)
    assert torch.equal(a, b)
    for j in range(3):
        assert (a[j] - c[j]).abs().max() > 1e-4


def test_seed_acts_only_through_noise_and_init():
    x, y = make_data(seed=7)
    a = batch([1.0], [4], [0.0], [1], x, y, init_std=0.0)
    b = batch([1.0], [4], [0.0], [2], x, y, init_std=0.0)
    assert torch.equal(a, b)


@pytest.mark.parametrize("max_elements", [0, N * K, 2 * N * K, 3 * N * K + 1])
def test_splitting_into_logit_groups_keeps_results_and_original_trial_order(monkeypatch, max_elements):
    x, y = make_data(seed=8)
    # Unsorted T (with ties and a zero) so that sorting and regrouping must be undone.
    etas = [0.3, 1.0, 2.0, 0.5, 1.5, 0.8, 1.2]
    steps = [2, 6, 0, 4, 6, 1, 3]
    sigmas = [1.0, 0.5, 2.0, 0.0, 3.0, 1.0, 0.7]
    seeds = [10, 11, 12, 13, 14, 15, 16]
    whole = batch(etas, steps, sigmas, seeds, x, y)
    singles = torch.stack([batch([e], [t], [s], [sd], x, y)[0] for e, t, s, sd in zip(etas, steps, sigmas, seeds)])
    monkeypatch.setattr(dpgd, "MAX_LOGIT_ELEMENTS", max_elements)
    split = batch(etas, steps, sigmas, seeds, x, y)
    torch.testing.assert_close(split, whole, rtol=0, atol=1e-6)
    torch.testing.assert_close(split, singles, rtol=0, atol=1e-6)


def test_accuracy_counts_equal_direct_argmax_counts():
    g = torch.Generator().manual_seed(9)
    n, d, k, h = 1003, 16, 7, 5
    x = torch.randn(n, d, generator=g)
    y = (x @ torch.randn(k, d, generator=g).T + 2 * torch.randn(n, k, generator=g)).argmax(1)  # learnable labels
    w = torch.randn(h, k, d, generator=g)
    w[0] = 0.0  # all-tied logits: argmax picks class 0 in both
    w[1] = torch.linalg.lstsq(x, F.one_hot(y, k).float()).solution.T  # a head better than chance
    direct = torch.tensor([int(((x @ w[j].T).argmax(1) == y).sum()) for j in range(h)])
    for chunk in (8192, 100, 1):
        counts = accuracy_counts(w, x, y, chunk=chunk)
        assert counts.dtype == torch.int64 and counts.shape == (h,)
        assert torch.equal(counts, direct)
    assert direct[0] == int((y == 0).sum())
    assert direct[1] > 2 * n / k


@pytest.mark.parametrize("chunk_bytes", [1, 4 * D * 7, 4 * D * N])
def test_row_chunks_of_the_fused_pass_do_not_change_results(monkeypatch, chunk_bytes):
    # one row per chunk, chunks of 7 rows (the last one short), and the whole batch at once
    x, y = make_data(seed=10)
    args = ([0.3, 1.0, 0.5], [4, 6, 2], [1.0, 0.5, 0.0], [21, 22, 23])
    monkeypatch.setattr(dpgd, "CPU_CHUNK_BYTES", 4 * D * N)
    whole = batch(*args, x, y)
    poisson = batch(*args, x, y, sample_rate=0.5)
    monkeypatch.setattr(dpgd, "CPU_CHUNK_BYTES", chunk_bytes)
    torch.testing.assert_close(batch(*args, x, y), whole, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(batch(*args, x, y, sample_rate=0.5), poisson, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("free_step", [True, False])
def test_noiseless_trials_with_one_eta_are_one_run_released_at_each_t(monkeypatch, free_step):
    x, y = make_data(seed=9)
    # σ = 0 trials at two η and three T, with a noisy trial and a 0-step one among them
    etas, steps = [0.5, 0.5, 2.0, 0.5, 2.0, 0.5, 0.5], [3, 7, 4, 1, 7, 4, 0]
    sigmas, seeds = [0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0], [1, 2, 3, 4, 5, 6, 7]
    singles = torch.stack([batch([e], [t], [s], [sd], x, y, free_step=free_step, init_std=0.0)[0]
                           for e, t, s, sd in zip(etas, steps, sigmas, seeds)])
    rows = []
    real = dpgd.clipped_sums
    monkeypatch.setattr(dpgd, "clipped_sums", lambda f, n, o, w, s: rows.append(w.shape[0]) or real(f, n, o, w, s))
    together = batch(etas, steps, sigmas, seeds, x, y, free_step=free_step, init_std=0.0)
    torch.testing.assert_close(together, singles, rtol=0, atol=1e-6)
    # one run per η at its longest T (7 + 7) and the noisy trial (4): 18 trial-steps instead of 26
    assert sum(rows) == 18


def test_noisy_or_subsampled_trials_are_never_shared():
    from dphpo.train.dpgd import shared_runs

    trials = TrialBatch([1.0, 1.0, 1.0], [2, 5, 9], [0.5, 0.5, 0.0], [1, 1, 1])
    assert shared_runs(trials, None, 0.0)[1] == [0, 1, 2]
    noiseless = TrialBatch([1.0, 1.0], [2, 5], [0.0, 0.0], [1, 2])
    assert shared_runs(noiseless, 0.5, 0.0)[1] == [0, 1]  # Poisson subsets differ per trial
    assert shared_runs(noiseless, None, 0.1)[1] == [0, 1]  # random inits from different seeds
    runs, run_of = shared_runs(noiseless, None, 0.0)
    assert run_of == [0, 0] and list(runs.steps) == [5]


@pytest.mark.parametrize("sigma", [float("nan"), float("inf"), -1.0])
def test_a_non_finite_or_negative_sigma_is_refused_not_trained_without_noise(sigma):
    # NaN > 0 is False: before the check, σ = NaN drew no noise and trained the noiseless run
    with pytest.raises(ValueError, match="sigma must be finite"):
        TrialBatch(eta=[0.1], steps=[3], sigma=[sigma], seeds=[0])


@pytest.mark.parametrize("clip", [0.0, -1.0, float("inf"), float("nan")])
def test_a_clip_norm_that_bounds_nothing_is_refused(clip):
    x, y = make_data()
    with pytest.raises(ValueError, match="clip_norm must be"):
        train_linear_dpgd(x, y, K, TrialBatch(eta=[0.1], steps=[2], sigma=[1.0], seeds=[0]), n_public=N, clip_norm=clip)
