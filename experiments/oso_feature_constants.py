"""Choose the OSO-DPSGD feature baseline's number of steps on public proxies (issue 29; `baselines.oso_dpsgd.steps`).

Galli et al. train 10 epochs per configuration; on a full-batch linear head one epoch is one step, and
with C_0 = 0.1 clipping every per-sample gradient and exp(ρ_c) = +0.25 % a step, 10 steps leave C near
0.1 and the head far from trained even without noise (MNIST × EfficientNet-Lite0 at ν → 0: 58–69 % at
T = 10, up to 93.9 % at T = 100). The steps are chosen here like the linear scaling rule's constants:
the `oso_dpsgd` baseline exactly as the workflow runs it (Galli et al.'s k = 5 initial learning rates
over [10^-2.5, 10^1.5], the honest selection, the whole grid's budget composed) at each candidate T
on public proxies only — scikit-learn's digits (raw pixels), `synthetic_shapes` × EfficientNet-Lite0
(MNIST's size; the safeguard's proxy) and MiniLM embeddings of tweets no study reads
(experiments/selection_planner.py's TWEETS_PROXY) — with a fixed public noise key. The score is the
mean test accuracy over the proxies, targets and seeds; the cheapest T within 0.5 points of the best
wins (its cost grows linearly in T). Prints one table per proxy and the ranking.

    .venv/bin/python experiments/oso_feature_constants.py --seeds 3 \
        --shapes-features results/features/synthetic_shapes/efficientnet_lite0.h5
(build that cache first: `snakemake --configfile <config.yaml with studies: [{dataset: synthetic_shapes,
extractor: efficientnet_lite0}]> results/features/synthetic_shapes/efficientnet_lite0.h5`)
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "experiments"))

from safeguard_constants import PUBLIC_KEY, config, features, summary  # noqa: E402
from selection_planner import tweet_features  # noqa: E402

from dphpo.hpo import registry  # noqa: E402
from dphpo.studies.trainers import load_features  # noqa: E402
from dphpo.studies.validate import validate_config  # noqa: E402
from dphpo.train.linear_head import LinearHeadTrainer  # noqa: E402

#: candidate T (⊆ the search space's steps grid, which the baseline requires)
STEPS = (10, 20, 50, 100)
#: a cheaper T within this many points of the best mean wins
TOLERANCE = 0.5


def proxies(args, cfg: dict) -> dict:
    out = {"digits (raw pixels)": lambda: features("digits"), "tweets x MiniLM": tweet_features}
    if args.shapes_features is not None:
        shapes = copy.deepcopy(cfg) | {"studies": [{"dataset": "synthetic_shapes", "extractor": "efficientnet_lite0"}]}
        out["synthetic_shapes x Lite0"] = lambda: load_features(shapes, args.shapes_features, "synthetic_shapes", "efficientnet_lite0")
    return out


def accuracies(method: str, trainer, cfg: dict, seed: int) -> dict[float, float]:
    noise = PUBLIC_KEY.scope(study=f"oso-proxy-{method}", seed=seed)
    return {r.target_eps: 100 * r.test_accuracy for r in registry.run_method(method, trainer, cfg, noise)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--eps", default="0.25,0.5,1,2,4,8", help="target eps values, comma-separated")
    p.add_argument("--steps", default=",".join(map(str, STEPS)), help="candidate T, comma-separated")
    p.add_argument("--shapes-features", type=Path, default=None, help="the synthetic_shapes x efficientnet_lite0 feature cache")
    p.add_argument("--config", type=Path, default=REPO / "config" / "config.yaml")
    args = p.parse_args()
    torch.set_num_threads(2)
    cfg = config(args.config)
    cfg.pop("design_notes", None)
    cfg["privacy"]["target_eps"] = [float(e) for e in args.eps.split(",")]
    key_file = Path("/tmp/dphpo-public-experiment.key")
    key_file.write_text(PUBLIC_KEY.secret.hex())
    key_file.chmod(0o600)
    cfg["privacy"]["noise_key_file"] = str(key_file)
    validate_config(cfg, REPO / "workflow" / "schemas" / "config.schema.yaml")
    steps = [int(t) for t in args.steps.split(",")]
    means: dict[int, list[float]] = {t: [] for t in steps}
    for name, load in proxies(args, cfg).items():
        trainer = LinearHeadTrainer.from_config(load(), cfg)
        print(f"{name}: N = {trainer.n_train}, {args.seeds} seeds | " + " | ".join(f"eps={e:g}" for e in cfg["privacy"]["target_eps"]))
        floor = [accuracies("random_search", trainer, cfg, s) for s in range(args.seeds)]
        print(f"  one random run | {summary(floor)}", flush=True)
        for t in steps:
            run_cfg = copy.deepcopy(cfg)
            run_cfg["baselines"]["oso_dpsgd"]["steps"] = [t]
            rows = [accuracies("oso_dpsgd", trainer, run_cfg, s) for s in range(args.seeds)]
            mean = statistics.mean(a for r in rows for a in r.values())
            means[t].append(mean)
            print(f"  OSO-DPSGD T = {t} (mean {mean:.1f}) | {summary(rows)}", flush=True)
    overall = {t: statistics.mean(v) for t, v in means.items()}
    best = max(overall.values())
    chosen = min(t for t, m in overall.items() if m >= best - TOLERANCE)
    print("mean over proxies: " + ", ".join(f"T = {t}: {m:.2f}" for t, m in overall.items()) + f" -> T = {chosen}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
