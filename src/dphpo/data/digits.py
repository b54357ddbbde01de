"""scikit-learn's 8x8 digits (a copy of the UCI test set of handwritten digits), always offline.

The pixel values 0..16 are rescaled to uint8 0..255 (round(v * 255 / 16)). There is no official
train/test split: we use a fixed stratified 80/20 split with seed `SPLIT_SEED` = 0 (per class, a
seeded random 20 % goes to test; see `registry.stratified_split`), giving 1438 / 359 images.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dphpo.data.registry import SPLIT_SEED, TEST_FRACTION, make_dataset, stratified_split
from dphpo.errors import DatasetError


def load_digits_dataset(root: Path | None = None, download: bool = True):
    try:
        from sklearn.datasets import load_digits
    except ImportError as exc:  # pragma: no cover - scikit-learn is a dependency
        raise DatasetError("the digits dataset needs scikit-learn: pip install scikit-learn") from exc
    bunch = load_digits()
    images = np.rint(bunch.images * (255.0 / 16.0)).clip(0, 255).astype(np.uint8)  # (1797, 8, 8)
    labels = bunch.target.astype(np.int64)
    train_idx, test_idx = stratified_split(labels, TEST_FRACTION, SPLIT_SEED)
    return make_dataset(
        "digits", "image", images[train_idx], labels[train_idx], images[test_idx], labels[test_idx],
        num_classes=10,
        source=f"scikit-learn load_digits(); stratified {1 - TEST_FRACTION:.0%}/{TEST_FRACTION:.0%} split, seed {SPLIT_SEED}",
        license="CC BY 4.0",
        classes=[str(i) for i in range(10)],
    )
