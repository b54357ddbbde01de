"""Full-batch DP-GD on a linear head, many trials at once (Panda et al., Algorithm 1).

Per step, for every trial h:  g̃ = (Σ_i clip_C(∇ℓ(x_i, W_h)) + σ_h C ξ) / N_pub,
v ← ρ v + g̃,  W_h ← W_h − η_h v  (PyTorch's momentum convention).

For softmax cross-entropy on a linear head the per-sample gradient is (p_i − y_i) x_iᵀ with norm
‖p_i − y_i‖·‖x_i‖, so the clipped sum is Xᵀ(s ⊙ (P − Y)) with s_i = min(1, C/‖g_i‖): two GEMMs per
step, no per-sample gradient tensor. Trials share X: their weights form one (H·K)×d matrix, so a
step of H trials is one (N×d)·(d×HK) GEMM. Trials are sorted by T; the active ones form a prefix,
so finished trials cost nothing. Each trial draws its noise from its own generator: its result does
not depend on which other trials share its batch. Noiseless full-batch trials from the zero init
with the same η follow one trajectory, so they are trained once, as the longest of them, and each
shorter one is released from its prefix (`shared_runs`): a σ = 0 grid of η × T costs η × max T
trial-steps, not η × ΣT.

One step is one pass over X in row chunks (`clipped_sums`): logits, softmax, clipping and the
clipped sum of a chunk run while its rows are still in cache, so X streams from memory once per
step instead of twice, and the softmax over the short class axis is done in place (torch.softmax
on a last axis of K = 10 costs as much as a GEMM). benchmarks/trainer.py measures the gain.

Minibatch ablation (Panda et al., Table 15 "SGD (Batch=4096)"): with `sample_rate` q < 1 every step of
every trial draws its own Poisson subset (each example kept with probability q, from the trial's
generator, before that step's noise), sums the clipped gradients of that subset only, adds the same
noise σ·C·ξ and divides by the expected batch size q·N (the normalization the subsampled-Gaussian
accountants assume). Full batch (the method) is q = None.

N_pub is the *declared public* size of the training set, never the private count N: under
add/remove adjacency a neighbour differs in N, so ÷N would leak membership through the scale of the
update, a channel the ledger does not charge (docs/privacy.md). Dividing by a public constant is
post-processing of the noisy sum.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from dphpo.train.clipping import row_norms
from dphpo.train.noise import DrawAhead, host_buffer, secret_generator, to_device
from dphpo.train.philox import INIT, MASK, NOISE, PhiloxTrials, check_generator

# Bound on the floats of one tensor: a chunk's logits (rows × H × K) and a group's weights (H × K × d);
# larger trial batches are split into groups.
MAX_LOGIT_ELEMENTS = 1 << 26
# Bytes of X per row chunk on the CPU: small enough to stay in a last-level cache between a chunk's
# two GEMMs (measured on a 32 MiB L3: 1–8 MiB chunks all give the full gain).
CPU_CHUNK_BYTES = 8 << 20


@dataclass
class TrialBatch:
    """Hyperparameters of H trials trained together on the same features."""

    eta: Sequence[float]
    steps: Sequence[int]
    sigma: Sequence[float]
    seeds: Sequence[int]

    def __post_init__(self) -> None:
        sizes = {len(self.eta), len(self.steps), len(self.sigma), len(self.seeds)}
        if len(sizes) != 1:
            raise ValueError(f"eta, steps, sigma and seeds must have one value per trial, got sizes {sizes}")
        if any(int(t) < 0 for t in self.steps):
            raise ValueError("steps must be >= 0")
        if not all(math.isfinite(s) and s >= 0 for s in self.sigma):  # NaN > 0 is False: it would draw no noise
            raise ValueError(f"sigma must be finite numbers >= 0, got {list(self.sigma)}")

    def __len__(self) -> int:
        return len(self.eta)


def with_bias_column(features: torch.Tensor) -> torch.Tensor:
    return torch.cat([features, torch.ones(features.shape[0], 1, dtype=features.dtype, device=features.device)], 1)


def train_linear_dpgd(
    features: torch.Tensor,
    labels: torch.Tensor,
    num_classes: int,
    trials: TrialBatch,
    *,
    n_public: float,
    clip_norm: float = 1.0,
    momentum: float = 0.9,
    free_step: bool = True,
    init_std: float = 0.0,
    progress: bool = False,
    desc: str = "DP-GD",
    sample_rate: float | None = None,
    on_step: Callable[[int, np.ndarray, torch.Tensor, torch.Tensor], None] | None = None,
    noise_ahead: bool = True,
    noise_generator: str = "mt",
) -> torch.Tensor:
    """Train every trial of `trials` and return their weights, shape (H, K, d) on the CPU, in the features' dtype.

    `features` (N×d) and `labels` (N) may live on any device; training runs there. `n_public` is the
    declared public size the noisy sum is divided by (times q for Poisson minibatches). A bias is a
    column of ones appended by the caller (`with_bias_column`). `init_std > 0` replaces the zero
    init by N(0, init_std²) weights drawn from each trial's seed (ablation only). `sample_rate`
    q in (0, 1) switches to Poisson-subsampled minibatch DP-SGD (ablation only); None or 1 is full batch.
    `on_step(t, index, weights, noisy_grad)`, if given, sees every step's release (privacy audits,
    dphpo.audit: the white-box adversary): `index` holds the positions in `trials` of the active
    trials, `weights` (active, K, d) the models the step's gradients were taken at, `noisy_grad`
    (active, K, d) the noisy averaged gradient of the step, before the update. `noise_ahead=False` draws
    each step's noise in line instead of one step ahead (`dphpo.train.noise`; the same numbers, slower).
    `noise_generator`: "mt", each trial's CPU Mersenne Twister (`dphpo.train.noise`), or "philox", each
    trial's Philox4x32 streams drawn on the features' device (`dphpo.train.philox`); other numbers, both
    the same on any device.
    """
    check_generator(noise_generator)
    if not float(n_public) > 0:
        raise ValueError(f"n_public must be a positive declared size, got {n_public}")
    if not (math.isfinite(clip_norm) and clip_norm > 0):
        raise ValueError(f"clip_norm must be a finite number > 0, got {clip_norm}")
    if sample_rate is not None and not 0.0 < float(sample_rate) <= 1.0:
        raise ValueError(f"sample_rate must lie in (0, 1], got {sample_rate}")
    q = None if sample_rate is None or float(sample_rate) >= 1.0 else float(sample_rate)
    n, d = features.shape
    h_total = len(trials)
    weights = torch.zeros(h_total, num_classes, d, dtype=features.dtype)
    if h_total == 0:
        return weights
    # an audit hook sees every trial's own steps: then nothing is shared
    runs, run_of = (trials, list(range(h_total))) if on_step is not None else shared_runs(trials, q, init_std)
    prefixes = [set() for _ in range(len(runs))]  # per run: the step counts its shorter trials are released at
    for i, r in enumerate(run_of):
        if int(trials.steps[i]) < int(runs.steps[r]):
            prefixes[r].add(int(trials.steps[i]))
    per_group = max(1, MAX_LOGIT_ELEMENTS // max(1, num_classes * d))
    order = np.argsort(-np.asarray(runs.steps, dtype=np.int64), kind="stable")
    bar = tqdm(total=int(sum(int(t) for t in runs.steps)), desc=desc, unit="trial-step", disable=not progress)
    run_weights = torch.zeros(len(runs), num_classes, d, dtype=features.dtype)
    released_prefixes: dict[tuple[int, int], torch.Tensor] = {}
    for start in range(0, len(runs), per_group):
        idx = order[start : start + per_group]
        group = TrialBatch(*(np.asarray(v)[idx].tolist() for v in (runs.eta, runs.steps, runs.sigma, runs.seeds)))
        hook = None if on_step is None else (lambda t, w, g, idx=idx: on_step(t, idx[: w.shape[0]], w, g))
        final, early = _train_group(
            features, labels, num_classes, group, float(n_public), clip_norm, momentum, free_step, init_std, bar, q, hook, noise_ahead,
            [prefixes[r] for r in idx], noise_generator,
        )
        run_weights[torch.as_tensor(idx)] = final.cpu()
        released_prefixes.update({(int(idx[j]), t): w.cpu() for (j, t), w in early.items()})
    bar.close()
    for i, r in enumerate(run_of):
        t = int(trials.steps[i])
        weights[i] = run_weights[r] if t == int(runs.steps[r]) else released_prefixes[(r, t)]
    return weights


def shared_runs(trials: TrialBatch, sample_rate: float | None, init_std: float) -> tuple[TrialBatch, list[int]]:
    """The runs to train for `trials`, and per trial the index of its run. A noiseless (σ = 0) full-batch
    trial of T ≥ 1 steps is a deterministic function of η (and of its seed, through a random init only):
    the trials that share them are one run of their longest T, the others released from its prefix."""
    runs: list[list] = []  # [η, T, σ, seed] per run
    shared: dict[tuple, int] = {}
    run_of = []
    for e, t, s, seed in zip(trials.eta, trials.steps, trials.sigma, trials.seeds):
        key = (float(e), int(seed) if init_std > 0 else None) if float(s) == 0.0 and sample_rate is None and int(t) >= 1 else None
        if key is not None and key in shared:
            runs[shared[key]][1] = max(runs[shared[key]][1], int(t))
        else:
            if key is not None:
                shared[key] = len(runs)
            runs.append([float(e), int(t), float(s), int(seed)])
        run_of.append(shared[key] if key is not None else len(runs) - 1)
    if len(runs) == len(trials):
        return trials, run_of
    return TrialBatch(*(list(v) for v in zip(*runs))), run_of


def _train_group(
    features, labels, num_classes, trials, n_public, clip_norm, momentum, free_step, init_std, bar, sample_rate=None, on_step=None,
    noise_ahead=True, prefixes=None, noise_generator="mt",
):
    """Train one group; returns its final weights (h, K, d) and {(j, t): trial j's release after t of its
    steps} for every t in `prefixes[j]` (each below trial j's own T)."""
    device, dtype = features.device, features.dtype
    n, d = features.shape
    h = len(trials)
    eta = torch.tensor(trials.eta, dtype=dtype, device=device).view(h, 1, 1)
    steps = [int(t) for t in trials.steps]  # sorted descending
    sigma = [float(s) for s in trials.sigma]
    philox = noise_generator == "philox"
    gens = PhiloxTrials(trials.seeds, device) if philox else [secret_generator(s) for s in trials.seeds]
    onehot = torch.nn.functional.one_hot(labels, num_classes).to(dtype)  # (N, K)
    x_norm = row_norms(features)  # (N,), computed once
    w = torch.zeros(h, num_classes, d, dtype=dtype, device=device)
    if init_std > 0 and philox:
        w += gens.normal(h, num_classes * d, 0, INIT).view(h, num_classes, d).to(dtype) * init_std
    elif init_std > 0:
        for j, g in enumerate(gens):
            w[j] = (torch.randn(num_classes, d, generator=g) * init_std).to(device)
    v = torch.zeros_like(w)
    total_steps = steps[0] if steps else 0
    early: dict[tuple[int, int], torch.Tensor] = {}
    scale = torch.tensor(sigma, dtype=torch.float32, device=device).view(h, 1, 1) * clip_norm if philox else None  # σ_j C

    def draw(t: int):  # the active trials of step t are a prefix, since steps are sorted descending
        active = sum(1 for s in steps if s > t)
        if philox:  # on the device, in line: nothing to wait for
            keep = None if sample_rate is None else (gens.uniform(active, n, t, MASK) < sample_rate).T
            return keep, gens.normal(active, num_classes * d, t, NOISE).view(active, num_classes, d) * scale[:active]
        return _draw_step(gens, active, n, (num_classes, d), sigma, clip_norm, sample_rate, device)

    with DrawAhead(draw, total_steps, ahead=noise_ahead and not philox) as draws:
        for t in range(total_steps):
            keep_host, noise_host = draws.get(t)
            active = noise_host.shape[0]
            keep = None if keep_host is None else to_device(keep_host, device).to(dtype)
            clipped_sum = clipped_sums(features, x_norm, onehot, w[:active], clip_scales(clip_norm, keep))
            noise = to_device(noise_host, device, dtype)
            grad = (clipped_sum + noise) / (n_public if sample_rate is None else sample_rate * n_public)
            if on_step is not None:
                on_step(t, w[:active], grad)
            v[:active] = momentum * v[:active] + grad
            w[:active] = w[:active] - eta[:active] * v[:active]
            bar.update(active)
            for j in range(active if prefixes else 0):
                if t + 1 in prefixes[j]:
                    early[(j, t + 1)] = _released(w[j : j + 1], v[j : j + 1], eta[j : j + 1], momentum, free_step)[0]
    return _released(w, v, eta, momentum, free_step), early


def _released(w, v, eta, momentum, free_step):
    """The weights a run releases: with the free step (post-processing, Panda et al., Fig. 9) the momentum
    part of the next update, ρ·v, applied, which needs no new gradient and so costs no privacy."""
    return w - eta * momentum * v if free_step else w.clone()


def _draw_step(gens, active, n, shape, sigma, clip_norm, sample_rate, device):
    """One step's private draws of the `active` trials, on the CPU, each trial from its own generator in the
    order the step uses them (its Poisson mask, then its noise): (keep (N, active) bool or None, noise
    (active, K, d) fp32), in pinned memory when training runs on a GPU. One thread draws them all: split
    over a pool, the trials' small draws ran slower on one H100 (GIL and intra-op threads contend)."""
    keep = None if sample_rate is None else host_buffer((n, active), device, torch.bool)
    noise = host_buffer((active, *shape), device)
    for j in range(active):
        if keep is not None:
            keep[:, j] = torch.rand(n, generator=gens[j], dtype=torch.float64) < sample_rate  # float32 would round q up
        if sigma[j] > 0:  # torch.randn(shape, generator=gens[j]) * (σ_j C), drawn in place
            noise[j].normal_(generator=gens[j]).mul_(sigma[j] * clip_norm)
        else:
            noise[j].zero_()
    return keep, noise


def chunk_rows(features: torch.Tensor, columns: int) -> int:
    """Rows of X per chunk of a fused pass: the logits budget, and on the CPU the cache budget."""
    n, d = features.shape
    rows = MAX_LOGIT_ELEMENTS // max(1, columns)
    if features.device.type == "cpu":
        rows = min(rows, CPU_CHUNK_BYTES // (features.element_size() * max(1, d)))
    return max(1, min(n, rows))


def clip_scales(clip_norm: float, keep: torch.Tensor | None = None):
    """`scales_of` of `clipped_sums` for DP-GD: min(1, C/‖g_i‖), times a Poisson keep mask (N, H) if given."""

    def scales(norms: torch.Tensor, rows: slice) -> list[torch.Tensor]:
        s = norms.reciprocal_().mul_(clip_norm).clamp_max_(1.0)
        return [s if keep is None else s.mul_(keep[rows])]

    return scales


def softmax_residuals_(logits: torch.Tensor, onehot: torch.Tensor) -> torch.Tensor:
    """P − Y of logits (n, H, K) (in place on the CPU): a numerically stable softmax over the class axis, minus the labels."""
    if logits.device.type != "cpu":
        # One fused kernel on a GPU; on the CPU torch.softmax over a short last axis costs as much as a GEMM.
        return torch.softmax(logits, dim=2).sub_(onehot.unsqueeze(1))
    logits.sub_(logits.amax(dim=2, keepdim=True)).exp_()
    logits.div_(logits.sum(dim=2, keepdim=True))
    return logits.sub_(onehot.unsqueeze(1))


def residual_norms(resid: torch.Tensor) -> torch.Tensor:
    """‖p_i − y_i‖ per row and trial (n, H): one reading pass on a GPU, the CPU's historical formula there."""
    if resid.device.type != "cpu":
        return torch.linalg.vector_norm(resid, dim=2)
    return resid.square().sum(dim=2).sqrt_()


def clipped_sums(
    features: torch.Tensor,
    x_norm: torch.Tensor,
    onehot: torch.Tensor,
    weights: torch.Tensor,
    scales_of: Callable[[torch.Tensor, slice], list[torch.Tensor]],
) -> torch.Tensor:
    """Σ_i s_i (p_i − y_i) x_iᵀ for every trial and every family of per-sample scales, in one pass over X.

    weights (H, K, d). For each row chunk the per-sample gradient norms ‖p_i − y_i‖·‖x_i‖ (H columns,
    clamped away from 0) go to `scales_of(norms, rows)`, which returns M tensors (n_chunk, H) of
    scales (it may overwrite `norms`). A term whose norm is not finite is dropped (dphpo.train.clipping).
    Returns (M·H, K, d): family m's sums in rows m·H … (m+1)·H − 1.
    """
    n, d = features.shape
    h, k, _ = weights.shape
    w_flat = weights.reshape(h * k, d)
    rows = chunk_rows(features, 2 * h * k)
    out = None
    for start in range(0, max(n, 1), rows):  # no rows (an empty Poisson subsample): one empty chunk, zero sums
        sl = slice(start, min(n, start + rows))
        x = features[sl]
        resid = softmax_residuals_((x @ w_flat.T).view(-1, h, k), onehot[sl])
        norms = residual_norms(resid).mul_(x_norm[sl].unsqueeze(1))
        dropped = ~torch.isfinite(norms)  # (n_chunk, H): a logit or norm overflow on this record
        family = scales_of(norms.clamp_min_(1e-12), sl)
        if len(family) == 1:
            coef = resid.mul_(family[0].unsqueeze(2))
        else:
            coef = torch.cat([resid * s.unsqueeze(2) for s in family], dim=1)
        coef.masked_fill_(dropped.repeat(1, len(family)).unsqueeze(2), 0.0)
        part = coef.flatten(1).T @ x
        out = part if out is None else out.add_(part)
    return out.view(-1, k, d)


@torch.no_grad()
def accuracy_counts(weights: torch.Tensor, features: torch.Tensor, labels: torch.Tensor, chunk: int = 8192) -> torch.Tensor:
    """Number of correct predictions of each trial's head, shape (H,), int64 on the CPU."""
    h, k, d = weights.shape
    w = weights.to(device=features.device, dtype=features.dtype).reshape(h * k, d)
    correct = torch.zeros(h, dtype=torch.int64, device=features.device)
    for start in range(0, features.shape[0], chunk):
        x = features[start : start + chunk]
        pred = (x @ w.T).view(x.shape[0], h, k).argmax(dim=2)
        correct += (pred == labels[start : start + chunk].unsqueeze(1)).sum(dim=0)
    return correct.cpu()
