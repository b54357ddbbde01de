"""Choose the safeguard of the linear scaling rule on public data (issue 18, step 4).

The rule and one random run (the floor a tuning method must never fall below) on scikit-learn's
digits (raw pixels, its fixed public split) at the embedded study's target ε, several seeds: the
r -> (eta, T) decomposition (fewest vs most grid steps) and a cap on the extrapolation at c x the
largest stage pick (`linear_scaling.safeguard`). `--noise-std` sets the selection noise (counts): the
config's 300 is 0.5 % of MNIST's 60k but 21 % of digits' 1,438, so `--noise-std 7.2` puts digits in
MNIST's regime (the dataset sizes are public). Public data and a fixed public noise key: nothing here touches a study's private
data or its secret key. Prints one table per setting (mean, std, worst seed per ε).

    .venv/bin/python experiments/safeguard_constants.py [--seeds 5] [--dataset digits]

The recommended guards (docs/methods.md §2a) came from the public MNIST-sized proxy:

    snakemake --configfile <config.yaml with studies: [{dataset: synthetic_shapes, extractor: efficientnet_lite0}]> \
        results/features/synthetic_shapes/efficientnet_lite0.h5
    .venv/bin/python experiments/safeguard_constants.py --seeds 3 --project-dim 128 --dataset synthetic_shapes \
        --features results/features/synthetic_shapes/efficientnet_lite0.h5 --policies max_steps,min_steps --caps none,2,4
    (then --sampling stratified_log_uniform --policies max_steps --caps none,4: the stratified rows;
     then --seeds 8 --sampling stratified_log_uniform --policies max_steps --caps none,4 --fits line,origin)
The tie margin's value came from the language proxy, config/language_proxy.yaml (MiniLM on tweets its
study never reads: the workflow's own method runs); `--tie-margin` here checked it costs nothing on this one.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import sys
from pathlib import Path

import numpy as np
import torch
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from dphpo.data.registry import load_dataset  # noqa: E402
from dphpo.hpo import linear_scaling as ls  # noqa: E402
from dphpo.hpo import registry  # noqa: E402
from dphpo.hpo.selection import SelectionRule  # noqa: E402
from dphpo.hpo.space import SearchSpace  # noqa: E402
from dphpo.privacy.randomness import NoiseKey  # noqa: E402
from dphpo.studies.trainers import load_features  # noqa: E402
from dphpo.studies.validate import validate_config  # noqa: E402
from dphpo.train.linear_head import LinearHeadTrainer, PreparedFeatures  # noqa: E402

# a public key (these runs release nothing private): a fixed constant that passes the key's entropy check
PUBLIC_KEY = NoiseKey(hashlib.sha256(b"dphpo public experiment key").digest())


def features(name: str) -> PreparedFeatures:
    ds = load_dataset(name, REPO / "data")
    flat = lambda x: torch.tensor(np.asarray(x, np.float32).reshape(len(x), -1) / 255.0)  # noqa: E731
    return PreparedFeatures(flat(ds.train_inputs), torch.tensor(ds.train_labels), flat(ds.test_inputs),
                            torch.tensor(ds.test_labels), ds.num_classes, ds.checksum, {}, n_public=ds.n_train)


def project(f: PreparedFeatures, dim: int) -> PreparedFeatures:
    """The features times a fixed N(0, 1/dim) matrix (a public seed): the same geometry, narrower."""
    r = torch.randn(f.x_train.shape[1], dim, generator=torch.Generator().manual_seed(0)) / dim**0.5
    return dataclasses.replace(f, x_train=f.x_train @ r, x_test=f.x_test @ r)


def config(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def run_rule(trainer, cfg, policy: str, caps: list[float | None], seed: int, sampling: str | None = None,
             fits: tuple[str | None, ...] = (None,), margin: float | None = None,
             tie_margin: float | None = None, stage_cap: float | None = None, beyond_grid: bool = False) -> dict[float | None, dict[float, float]]:
    """The rule at every target with r -> (eta, T) by `policy`, one final run per fit and cap on the
    extrapolation (None: the paper's line, no cap); the stages, run once, are the same for every fit and
    cap (both are post-processing)."""
    space = SearchSpace.from_config(cfg["search_space"])
    selection = SelectionRule.from_config(cfg.get("selection", {}))
    targets = [float(e) for e in cfg["privacy"]["target_eps"]]
    noise = PUBLIC_KEY.scope(study="safeguard", seed=seed)
    base = cfg.get("linear_scaling", {})
    # the informative test, the tie margin and the stage cap change the stages (the null model's release, stage 2's range)
    tested = ({"fit": "origin", "informative_margin": margin} if margin is not None else {}) | (
        {"tie_margin": tie_margin} if tie_margin is not None else {}) | (
        {"later_stage_cap": stage_cap} if stage_cap is not None else {})
    lsc = ls.LinearScalingConfig.from_config(base | {"safeguard": {"decompose": policy, "sampling": sampling} | tested})
    stages = []
    for k in range(1, lsc.n_stages + 1):
        stages.append(ls.run_stage(trainer, lsc, space, selection, targets, noise, k, stages[-1] if stages else None, False))
    out = {}
    for fit in fits:
        for cap in caps:
            if margin is not None and fit != "origin":
                continue  # the informative test needs the fit through the origin
            guards = {"decompose": policy, "max_extrapolation": cap, "sampling": sampling, "fit": fit, "beyond_grid": beyond_grid or None} | tested
            capped = ls.LinearScalingConfig.from_config(base | {"safeguard": guards})
            results = ls.run_final(trainer, capped, space, selection, targets, noise, stages, False)
            out[fit, cap] = {r.target_eps: 100 * r.test_accuracy for r in results}
    return out


def run_random(trainer, cfg, seed: int) -> dict[float, float]:
    noise = PUBLIC_KEY.scope(study="safeguard-random", seed=seed)
    return {r.target_eps: 100 * r.test_accuracy for r in registry.run_method("random_search", trainer, cfg, noise)}


def summary(rows: list[dict[float, float]]) -> str:
    cells = []
    for eps in rows[0]:
        acc = np.array([r[eps] for r in rows])
        cells.append(f"{acc.mean():5.1f}±{acc.std():4.1f} (min {acc.min():4.1f})")
    return " | ".join(cells)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--dataset", default="digits")
    p.add_argument("--config", type=Path, default=REPO / "config" / "config.yaml", help="settings of the rule and the baselines")
    p.add_argument("--features", type=Path, default=None,
                   help="a feature cache of a public dataset (e.g. synthetic_shapes x efficientnet_lite0, MNIST's size) "
                        "instead of --dataset's raw pixels")
    p.add_argument("--extractor", default="efficientnet_lite0", help="the extractor --features was built with")
    p.add_argument("--project-dim", type=int, default=None,
                   help="a fixed Gaussian random projection of the features to this width (Johnson-Lindenstrauss: norms and "
                        "inner products kept to a few %%), to fit 50k x 1280 features into a 2-core budget")
    p.add_argument("--policies", default="min_steps,max_steps", help="r -> (eta, T) decompositions (min_steps: the paper's)")
    p.add_argument("--caps", default="none,2,4,8", help="caps on the extrapolation, multiples of the largest stage pick")
    p.add_argument("--fits", default="line", help="the rule through the stage picks: line (the paper's), origin")
    p.add_argument("--sampling", default=None, help="the stage trials' r sampling (e.g. stratified_log_uniform)")
    p.add_argument("--margin", type=float, default=None,
                   help="safeguard.informative_margin: stage picks must beat the null model by this many std (needs --fits origin)")
    p.add_argument("--tie-margin", type=float, default=None,
                   help="safeguard.tie_margin: each stage picks the largest r within this many std of the best score")
    p.add_argument("--later-stage-cap", type=float, default=None,
                   help="safeguard.later_stage_cap: stage 2 samples [r1, this x r_max] (the paper's 0.2)")
    p.add_argument("--beyond-grid", action="store_true",
                   help="safeguard.beyond_grid: the final r may exceed the grid's r_max up to the cap (needs a numeric --caps)")
    p.add_argument("--eps", default=None, help="target eps values, comma-separated (default: the config's)")
    p.add_argument("--no-random", action="store_true", help="skip the one-random-run floor")
    p.add_argument("--noise-std", type=float, default=None, help="selection noise (default: the config's)")
    args = p.parse_args()
    torch.set_num_threads(1)
    cfg = config(args.config)
    if args.eps:
        cfg["privacy"]["target_eps"] = [float(e) for e in args.eps.split(",")]
    if args.noise_std:
        cfg["selection"]["noise_std"] = args.noise_std
    key_file = Path("/tmp/dphpo-public-experiment.key")
    if not key_file.exists() or key_file.read_text().strip() != PUBLIC_KEY.secret.hex():
        key_file.write_text(PUBLIC_KEY.secret.hex())
        key_file.chmod(0o600)
    cfg.setdefault("privacy", {})["noise_key_file"] = str(key_file)
    if args.features is not None:
        cfg["studies"] = [{"dataset": args.dataset, "extractor": args.extractor}]
        cfg.pop("design_notes", None)
    validate_config(cfg, REPO / "workflow" / "schemas" / "config.schema.yaml")
    prepared = features(args.dataset) if args.features is None else load_features(cfg, args.features, args.dataset, args.extractor)
    if args.project_dim:
        prepared = project(prepared, args.project_dim)
    trainer = LinearHeadTrainer.from_config(prepared, cfg)
    targets = [float(e) for e in cfg["privacy"]["target_eps"]]
    print(f"{args.dataset}: n={trainer.n_train}, selection noise {cfg['selection']['noise_std']}, seeds {args.seeds}")
    print("setting | " + " | ".join(f"eps={e:g}" for e in targets))
    if not args.no_random:
        print("random search (one run) | " + summary([run_random(trainer, cfg, s) for s in range(args.seeds)]), flush=True)
    caps = [None if c == "none" else float(c) for c in args.caps.split(",")]
    fits = tuple(None if f == "line" else f for f in args.fits.split(","))
    for policy in args.policies.split(","):
        runs = [run_rule(trainer, cfg, policy, caps, s, args.sampling, fits, args.margin, args.tie_margin,
                         args.later_stage_cap, args.beyond_grid) for s in range(args.seeds)]
        for key in runs[0]:
            fit, cap = key
            label = (f"rule {policy} fit={fit or 'line'} cap={cap}" + (f" margin={args.margin:g}" if args.margin is not None else "")
                     + (f" tie={args.tie_margin:g}" if args.tie_margin is not None else "")
                     + (f" stage_cap={args.later_stage_cap:g}" if args.later_stage_cap is not None else "")
                     + (" beyond_grid" if args.beyond_grid else ""))
            print(f"{label} | " + summary([r[key] for r in runs]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
