"""Choose the selection planner's constants on public proxies (issue 29; dphpo.hpo.selection.plan_selection_noise).

The recommended (safeguarded) linear scaling rule against one random run — the floor a tuning method
must never fall below — on public data cut to several sizes N by fixed public indices (the first N of
a public permutation), each with the selection noise given as an absolute count (the embedded
config's 300, set for MNIST's 60,000) or as the planner chooses it from public quantities (N, the
target ε, δ, the rule's number of released scores). Public data and a fixed public noise key:
nothing here touches a study's private data or its secret key. Prints one row per (N, setting):
mean ± std over seeds, and the worst seed, per target ε.

    .venv/bin/python experiments/selection_planner.py --dataset digits --sizes 500,1000,1438 --seeds 5
    .venv/bin/python experiments/selection_planner.py --dataset synthetic_shapes --noise planned_each \
        --features results/features/synthetic_shapes/efficientnet_lite0.h5 --sizes 500,1000,5000 --eps 0.1,0.25,0.5,1,2,4,8
    .venv/bin/python experiments/selection_planner.py --dataset wordnet_minilm --noise planned_each \
        --sizes 500,1000,5000,60000 --eps 0.1,0.25,0.5,1,2,4,8   # after experiments/wordnet_glosses.py
    # docs/methods.md §3's small-N table: each proxy with --sizes 500,1000 --seeds 100 --noise planned_each
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "experiments"))

from safeguard_constants import PUBLIC_KEY, config, features, summary  # noqa: E402
from wordnet_glosses import wordnet_features  # noqa: E402

from dphpo.data.text import load_text  # noqa: E402
from dphpo.features.extractors import MiniLMExtractor  # noqa: E402
from dphpo.hpo import registry  # noqa: E402
from dphpo.hpo import selection as selection_module  # noqa: E402
from dphpo.hpo.linear_scaling_plan import RECOMMENDED_SAFEGUARD, LinearScalingConfig  # noqa: E402
from dphpo.hpo.selection import plan_selection_noise  # noqa: E402
from dphpo.privacy.accountant import config_delta  # noqa: E402
from dphpo.studies.trainers import load_features  # noqa: E402
from dphpo.studies.validate import validate_config  # noqa: E402
from dphpo.train.linear_head import LinearHeadTrainer, PreparedFeatures  # noqa: E402

METHOD = "linear_scaling_safeguarded"


#: Tweets no study reads: the embedded MiniLM study's 4,000/1,000 and config/language_proxy.yaml's next
#: 4,000/1,000 are inside this spec's share, which `exclude` drops (dphpo.data.text.select).
TWEETS_PROXY = {"name": "tweets", "max_train": 5000, "max_test": 1500, "exclude": {"max_train": 8000, "max_test": 2000}}


def tweet_features() -> PreparedFeatures:
    """MiniLM sentence embeddings (384-d, unit norm) of the public proxy tweets: a text-feature proxy."""
    splits = load_text(TWEETS_PROXY)
    extractor = MiniLMExtractor("minilm_l6")
    embed = lambda texts: torch.tensor(extractor.extract(texts, progress=False), dtype=torch.float32)  # noqa: E731
    return PreparedFeatures(embed(splits.train), torch.tensor(splits.y_train), embed(splits.test), torch.tensor(splits.y_test),
                            int(splits.num_classes), splits.checksum(), {}, n_public=len(splits.train))


def proxy_features(name: str) -> PreparedFeatures:
    """A public proxy by name: the text-feature proxies (tweets_minilm, wordnet_minilm) or a registry
    dataset's raw pixels (digits, mnist)."""
    text_proxies = {"tweets_minilm": tweet_features, "wordnet_minilm": wordnet_features}
    return text_proxies.get(name, lambda: features(name))()


def subset(f: PreparedFeatures, n: int) -> PreparedFeatures:
    """The first n training records of a fixed public permutation (seed 0): a public choice."""
    order = torch.randperm(f.x_train.shape[0], generator=torch.Generator().manual_seed(0))[:n]
    return dataclasses.replace(f, x_train=f.x_train[order], y_train=f.y_train[order], n_public=n)


def accuracies(method: str, trainer, cfg: dict, seed: int, study: str) -> dict[float, float]:
    noise = PUBLIC_KEY.scope(study=study, seed=seed)
    return {r.target_eps: 100 * r.test_accuracy for r in registry.run_method(method, trainer, cfg, noise)}


def planned_noise(cfg: dict, n: int) -> float:
    lsc = LinearScalingConfig.from_config(cfg.get("linear_scaling", {}) | {"safeguard": cfg.get("linear_scaling", {}).get("safeguard") or True})
    targets = [float(e) for e in cfg["privacy"]["target_eps"]]
    return plan_selection_noise(n, min(targets), config_delta(cfg), lsc.selection_releases).noise_std


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="digits", help="digits, mnist (raw pixels), tweets_minilm or wordnet_minilm (text "
                   "features; the latter from experiments/wordnet_glosses.py), or the dataset of --features")
    p.add_argument("--features", type=Path, default=None,
                   help="a public feature cache instead (e.g. synthetic_shapes x efficientnet_lite0: image features)")
    p.add_argument("--extractor", default="efficientnet_lite0", help="the extractor --features was built with")
    p.add_argument("--sizes", default="500,1000,1438", help="training-set sizes N, comma-separated")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--eps", default="0.25,0.5,1,2,4,8", help="target eps values, comma-separated")
    p.add_argument("--noise", default="300,planned,planned_each",
                   help="selection noise settings: counts, planned (at the smallest target), planned_each (per target)")
    p.add_argument("--config", type=Path, default=REPO / "config" / "config.yaml")
    p.add_argument("--prior", type=float, default=None,
                   help="safeguard.no_signal_prior: the no-signal path's slope (r = prior * mu * N); default: the recommended guards'")
    p.add_argument("--stage-snr", default=None,
                   help="safeguard.stage_snr values to compare, comma-separated ('off': the guard off; a huge value forces "
                   "the no-signal path); default: the recommended guards'")
    p.add_argument("--signal", type=float, default=None, help="SIGNAL_FRACTION to try (noise above this fraction of N: no signal)")
    args = p.parse_args()
    if args.signal is not None:
        selection_module.SIGNAL_FRACTION = args.signal
    torch.set_num_threads(1)
    cfg = config(args.config)
    cfg["privacy"]["target_eps"] = [float(e) for e in args.eps.split(",")]
    guards = dataclasses.asdict(RECOMMENDED_SAFEGUARD) | ({} if args.prior is None else {"no_signal_prior": args.prior})
    stage_snrs = [None] if args.stage_snr is None else args.stage_snr.split(",")
    key_file = Path("/tmp/dphpo-public-experiment.key")
    key_file.write_text(PUBLIC_KEY.secret.hex())
    key_file.chmod(0o600)
    cfg["privacy"]["noise_key_file"] = str(key_file)
    validate_config(cfg, REPO / "workflow" / "schemas" / "config.schema.yaml")
    if args.features is not None:
        study = cfg | {"studies": [{"dataset": args.dataset, "extractor": args.extractor}]}
        full = load_features({k: v for k, v in study.items() if k != "design_notes"}, args.features, args.dataset, args.extractor)
    else:
        full = proxy_features(args.dataset)
    print(f"{args.dataset}, {args.seeds} seeds | " + " | ".join(f"eps={e}" for e in args.eps.split(",")))
    for n in (int(s) for s in args.sizes.split(",")):
        trainer = LinearHeadTrainer.from_config(subset(full, n), cfg)
        floor = [accuracies("random_search", trainer, cfg, s, "planner-random") for s in range(args.seeds)]
        print(f"N={n} one random run | {summary(floor)}", flush=True)
        for setting, snr in ((setting, snr) for setting in args.noise.split(",") for snr in stage_snrs):
            if snr is not None:
                guards["stage_snr"] = None if snr == "off" else float(snr)
            cfg["linear_scaling"] = cfg.get("linear_scaling", {}) | {"safeguard": guards}
            if setting == "planned_each":  # each target its own search and its own planned noise
                noise_std = planned_noise(cfg, n)
                rows = [{} for _ in range(args.seeds)]
                for eps in cfg["privacy"]["target_eps"]:
                    one = cfg | {"privacy": cfg["privacy"] | {"target_eps": [eps]}}
                    one["selection"] = cfg["selection"] | {"noise_std": planned_noise(one, n)}
                    for s in range(args.seeds):
                        rows[s] |= accuracies(METHOD, trainer, one, s, "planner-rule")
            else:
                noise_std = planned_noise(cfg, n) if setting == "planned" else float(setting)
                run_cfg = cfg | {"selection": cfg["selection"] | {"noise_std": noise_std}}
                rows = [accuracies(METHOD, trainer, run_cfg, s, "planner-rule") for s in range(args.seeds)]
            means = np.mean([[r[e] for e in r] for r in rows], axis=0) - np.mean([[r[e] for e in r] for r in floor], axis=0)
            print(f"N={n} rule, noise {setting} ({noise_std:.3g} = {noise_std / n:.1%} of N), stage_snr {guards.get('stage_snr')} | {summary(rows)} "
                  f"| vs random: {' '.join(f'{d:+.1f}' for d in means)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
