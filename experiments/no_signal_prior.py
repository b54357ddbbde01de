"""Measure a private class prior for the linear scaling rule's no-signal path (issue 29; not built).

Where the stages cannot rank r, the safeguarded rule spends the whole target on one run at the public
prior r (`linear_scaling_plan.prior_r`). On imbalanced data such a run can sit below the majority
class. This measures the alternative: a share of the run's Gaussian budget (μ_h² = share·μ², the run
keeps μ_w² = (1 − share)·μ², so the pair composes to μ exactly) releases the class histogram with
Gaussian noise (L2 sensitivity 1 under add/remove, √2 under replace-one), and the classifier is
argmax_k x·W_k / s + τ·log π̂_k, where s is the public, predicted noise std of a test logit
(η·c·√T·σ/N for unit-norm features, c the mean momentum factor) and π̂ the released histogram, raw
(clipped at one count) or shrunk towards uniform by the positive-part James–Stein factor (free:
post-processing of released counts). The free alternative: the no-signal run itself trains a bias,
a column of constant a appended to the features (no budget of its own: the clipped sum holds it, at a
clipping cost of √(‖x‖² + a²)), its logit a·b_k scaled by τ after training and shrunk as above in units
of its own predicted noise. Public data and a fixed public noise key; prints mean ± std
test accuracy (%) over seeds per (N, ε) and setting, with the public μN/√P.

    .venv/bin/python experiments/no_signal_prior.py --dataset wordnet_minilm   # after experiments/wordnet_glosses.py
    .venv/bin/python experiments/no_signal_prior.py --dataset digits --sizes 500,1000
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "experiments"))

from safeguard_constants import config  # noqa: E402
from selection_planner import proxy_features, subset  # noqa: E402

from dphpo.hpo.linear_scaling_plan import RECOMMENDED_SAFEGUARD, LinearScalingConfig, prior_r  # noqa: E402
from dphpo.hpo.space import SearchSpace  # noqa: E402
from dphpo.train.dpgd import TrialBatch, train_linear_dpgd  # noqa: E402
from dphpo.train.linear_head import LinearHeadTrainer  # noqa: E402


def james_stein(values: np.ndarray, sigma: float) -> np.ndarray:
    """`values` (noise std σ each) shrunk towards their mean by the positive-part James–Stein factor
    max(0, 1 − (K − 3)σ²/Σ(v − v̄)²): post-processing of released values."""
    centred = values - values.mean()
    return values.mean() + max(0.0, 1 - (len(values) - 3) * sigma**2 / float(centred @ centred)) * centred


def log_prior(noisy: np.ndarray, sigma_h: float, how: str) -> np.ndarray:
    """log π̂ from noisy class counts: `raw` clips at one count; `js` shrinks them first (`james_stein`)."""
    p = np.clip(james_stein(noisy, sigma_h) if how == "js" else noisy, 1.0, None)
    return np.log(p / p.sum())


def momentum_factor(steps: int, momentum: float) -> float:
    """The mean over steps of Σ_j ρ^j up to the end: how much heavy-ball momentum amplifies a step's noise."""
    return sum((1 - momentum ** (steps - t)) / (1 - momentum) for t in range(steps)) / steps


def no_signal_runs(trainer: LinearHeadTrainer, lsc, space, x_train: torch.Tensor, mu: float, n_parameters: int, seeds: list[int]):
    """One seed's no-signal run per seed (the rule's: `prior_r` at μ, on `x_train`): the weights (H, K, d),
    the (η, T) decomposition, and s, the public predicted noise std of one weight (= of a unit-norm
    input's logit): η · momentum factor · √T · σ / N."""
    f, settings = trainer.features, trainer.settings
    choice = prior_r(lsc, space, mu, f.n_public, n_parameters)
    dec = choice.space.decompose(choice.r)
    sigma = trainer.accountant.sigma_for_mu(mu, dec.steps)
    h = len(seeds)
    w = train_linear_dpgd(x_train, f.y_train, f.num_classes, TrialBatch([dec.eta] * h, [dec.steps] * h, [sigma] * h, seeds),
                          n_public=f.n_public, clip_norm=settings.clip_norm, momentum=settings.momentum)
    s = dec.eta * momentum_factor(dec.steps, settings.momentum) * math.sqrt(dec.steps) * sigma / f.n_public
    return w, dec, s


def accuracy(logits: torch.Tensor, labels: torch.Tensor) -> float:
    return 100 * float((logits.argmax(1) == labels).float().mean())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="wordnet_minilm", help="wordnet_minilm, tweets_minilm, digits or mnist (raw pixels)")
    p.add_argument("--sizes", default="500,1000")
    p.add_argument("--eps", default="0.1,0.25,0.5,1,2")
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--shares", default="0.1,0.25", help="shares of μ² spent on the histogram")
    p.add_argument("--weights", default="1,2", help="prior weights τ, in units of the predicted logit noise")
    p.add_argument("--estimators", default="raw,js")
    p.add_argument("--bias-columns", default="0.3,1", help="constants a of the trained bias column (the free variant)")
    args = p.parse_args()
    torch.set_num_threads(2)
    full = proxy_features(args.dataset)
    cfg = config(REPO / "config" / "config.yaml")
    lsc = LinearScalingConfig.from_config(cfg.get("linear_scaling", {}) | {"safeguard": dataclasses.asdict(RECOMMENDED_SAFEGUARD)})
    space = lsc.space(SearchSpace.from_config(cfg["search_space"]))
    seeds = list(range(1000, 1000 + args.seeds))
    shares = [float(s) for s in args.shares.split(",")]
    taus = [float(t) for t in args.weights.split(",")]
    estimators = args.estimators.split(",")
    columns = [float(a) for a in args.bias_columns.split(",")]
    settings = [(0.0, 0.0, "none")] + [(s, t, e) for s in shares for t in taus for e in estimators]
    print(f"{args.dataset}, {args.seeds} seeds; settings (share of mu^2 / tau / estimator): "
          + " | ".join(f"{s:g}/{t:g}/{e}" for s, t, e in settings)
          + " | " + " | ".join(f"bias a={a:g}/{t:g}/{e}" for a in columns for t in taus for e in estimators))
    for n in (int(s) for s in args.sizes.split(",")):
        f = subset(full, n)
        trainer = LinearHeadTrainer.from_config(f, cfg)
        acc, k, p_ = trainer.accountant, f.num_classes, trainer.n_parameters
        counts = np.bincount(f.y_train.numpy(), minlength=k).astype(float)
        sensitivity = 1.0 if acc.factor == 1 else math.sqrt(2)
        majority = 100 * float((f.y_test == int(counts.argmax())).float().mean())
        for eps in (float(e) for e in args.eps.split(",")):
            mu = acc.full_budget_mu(eps)
            by_share = {}  # share -> (test logits in units of s, decomposition)
            for share in sorted({s for s, _, _ in settings}):
                w, dec, s = no_signal_runs(trainer, lsc, space, f.x_train, mu * math.sqrt(1 - share), p_, seeds)
                by_share[share] = (torch.einsum("nd,hkd->hnk", f.x_test, w) / s, dec)
            cells = []
            for share, tau, how in settings:
                logits = by_share[share][0]
                rng = np.random.default_rng(7)  # the same histogram noise for every (τ, estimator)
                accs = []
                for h in range(len(seeds)):
                    bias = 0.0
                    if share > 0:
                        sigma_h = sensitivity / (mu * math.sqrt(share))
                        bias = torch.tensor(tau * log_prior(counts + rng.normal(0, sigma_h, k), sigma_h, how), dtype=logits.dtype)
                    accs.append(accuracy(logits[h] + bias, f.y_test))
                cells.append(f"{np.mean(accs):.1f}±{np.std(accs):.1f}")
            for a in columns:  # the whole μ, a bias column of constant a: P grows by K
                x_train = torch.cat([f.x_train, torch.full((f.x_train.shape[0], 1), a)], 1)
                w, _, s = no_signal_runs(trainer, lsc, space, x_train, mu, p_ + k, seeds)
                logits, bias = torch.einsum("nd,hkd->hnk", f.x_test, w[:, :, :-1]) / s, w[:, :, -1] / s  # bias: noise std 1
                for tau in taus:
                    for how in estimators:
                        shrunk = [james_stein(b.numpy().astype(float), 1.0) if how == "js" else b.numpy().astype(float) for b in bias]
                        accs = [accuracy(logits[h] + tau * a * torch.tensor(shrunk[h], dtype=logits.dtype), f.y_test)
                                for h in range(len(seeds))]
                        cells.append(f"{np.mean(accs):.1f}±{np.std(accs):.1f}")
            dec = by_share[0.0][1]
            print(f"N={n} eps={eps:g} muN/sqrtP={mu * f.n_public / math.sqrt(p_):.2f} (eta {dec.eta:.3g}, T {dec.steps}; "
                  f"majority {majority:.1f}) | " + " | ".join(cells), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
