"""A synthetic_shapes × extractor feature cache at another training size than the registry's 50,000
(issue 29: the 60,000-record image-features proxy of experiments/selection_planner.py).

`generate_shapes` is prefix-stable (each chunk of images has its own seeded generator), so the first
50,000 records of a 60,000 cache are the registry's 50,000. Public, generated data only.

    .venv/bin/python experiments/shapes_cache.py --n-train 60000 --out results/features/shapes60k_lite0.h5
    .venv/bin/python experiments/selection_planner.py --dataset synthetic_shapes \
        --features results/features/shapes60k_lite0.h5 --sizes 60000 --noise planned_each --eps 0.1,0.25,0.5,1,2,4,8
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from dphpo.data import registry, synthetic  # noqa: E402
from dphpo.features.build import build_feature_cache  # noqa: E402
from dphpo.studies.validate import load_config  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n-train", type=int, default=60_000, help="generated training images")
    p.add_argument("--extractor", default="efficientnet_lite0", help="an extractor of --config")
    p.add_argument("--config", type=Path, default=REPO / "config" / "config.yaml")
    p.add_argument("--out", type=Path, required=True, help="the HDF5 cache to write")
    p.add_argument("--device", default="auto")
    args = p.parse_args()
    # this process only: the registry's spec with the generator's size (and the public size to match)
    spec = registry.DATASETS[synthetic.NAME]
    registry.DATASETS[synthetic.NAME] = dataclasses.replace(
        spec, loader=functools.partial(synthetic.load_synthetic_shapes, n_train=args.n_train), public_n_train=args.n_train)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    attrs = build_feature_cache(synthetic.NAME, args.extractor, load_config([args.config]), args.out, device=args.device)
    print(f"{args.out}: {args.n_train} training images, dataset checksum {attrs.get('dataset_checksum', '?')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
