"""Choose the safeguard of the linear scaling rule on public data (issue 18, step 4).

The rule and one random run (the floor a tuning method must never fall below) on scikit-learn's
digits (raw pixels, its fixed public split) at the embedded study's target ε, several seeds: the
r -> (eta, T) decomposition (fewest vs most grid steps) and a cap on the extrapolation at c x the
largest stage pick. Public data and a fixed public noise key: nothing here touches a study's private
data or its secret key. Prints one table per setting (mean, std, worst seed per ε).

    .venv/bin/python experiments/safeguard_constants.py [--seeds 5] [--dataset digits]
"""

from __future__ import annotations

import argparse
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
from dphpo.studies.validate import validate_config  # noqa: E402
from dphpo.train.linear_head import LinearHeadTrainer, PreparedFeatures  # noqa: E402

PUBLIC_KEY = NoiseKey(bytes(32))  # a public key: these runs release nothing private


class CappedSpace(SearchSpace):
    """The search space with r capped (after the fit, before the decomposition) at `cap`."""

    def __init__(self, base: SearchSpace, cap: float) -> None:
        super().__init__(**{k: getattr(base, k) for k in base.__dataclass_fields__})
        object.__setattr__(self, "_cap", cap)

    def clamp_r(self, r: float) -> float:
        return min(super().clamp_r(r), max(self._cap, self.r_min))


def features(name: str) -> PreparedFeatures:
    ds = load_dataset(name, REPO / "data")
    flat = lambda x: torch.tensor(np.asarray(x, np.float32).reshape(len(x), -1) / 255.0)  # noqa: E731
    return PreparedFeatures(flat(ds.train_inputs), torch.tensor(ds.train_labels), flat(ds.test_inputs),
                            torch.tensor(ds.test_labels), ds.num_classes, ds.checksum, {}, n_public=ds.n_train)


def config() -> dict:
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    return cfg


def run_rule(trainer, cfg, policy: str, cap: float | None, seed: int) -> dict[float, float]:
    space = SearchSpace.from_config(cfg["search_space"] | {"decompose_policy": policy})
    lsc = ls.LinearScalingConfig.from_config(cfg.get("linear_scaling", {}))
    selection = SelectionRule.from_config(cfg.get("selection", {}))
    targets = [float(e) for e in cfg["privacy"]["target_eps"]]
    noise = PUBLIC_KEY.scope(study="safeguard", seed=seed)
    stages = []
    for k in range(1, lsc.n_stages + 1):
        stages.append(ls.run_stage(trainer, lsc, space, selection, targets, noise, k, stages[-1] if stages else None, False))
    out = {}
    for target in targets:
        key = ls.search_key(lsc, target)
        picks = [next(s for s in st["searches"] if s["key"] == key)["selected_r"] for st in stages]
        final_space = space if cap is None else CappedSpace(space, cap * max(picks))
        (result,) = ls.run_final(trainer, lsc, final_space, selection, [target], noise, stages, False)
        out[target] = 100 * result.test_accuracy
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
    p.add_argument("--noise-std", type=float, default=None, help="selection noise (default: the config's)")
    args = p.parse_args()
    torch.set_num_threads(1)
    cfg = config()
    if args.noise_std:
        cfg["selection"]["noise_std"] = args.noise_std
    key_file = Path("/tmp/dphpo-public-experiment.key")
    if not key_file.exists():
        key_file.write_text(bytes(32).hex())
        key_file.chmod(0o600)
    cfg.setdefault("privacy", {})["noise_key_file"] = str(key_file)
    validate_config(cfg, REPO / "workflow" / "schemas" / "config.schema.yaml")
    trainer = LinearHeadTrainer.from_config(features(args.dataset), cfg)
    targets = [float(e) for e in cfg["privacy"]["target_eps"]]
    print(f"{args.dataset}: n={trainer.n_train}, selection noise {cfg['selection']['noise_std']}, seeds {args.seeds}")
    print("setting | " + " | ".join(f"eps={e:g}" for e in targets))
    print("random search (one run) | " + summary([run_random(trainer, cfg, s) for s in range(args.seeds)]), flush=True)
    for policy in ("min_steps", "max_steps"):
        for cap in (None, 2.0, 4.0):
            rows = [run_rule(trainer, cfg, policy, cap, s) for s in range(args.seeds)]
            print(f"rule {policy} cap={cap} | " + summary(rows), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
