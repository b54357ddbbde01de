"""scikit-learn's 8x8 digits (a copy of the UCI test set of handwritten digits), always offline.

The pixel values 0..16 are rescaled to uint8 0..255 (round(v * 255 / 16)). There is no official
train/test split: we use a fixed per-record 80/20 split with salt `SPLIT_SEED` = 0 (an image goes to
test iff the keyed hash of its pixels and label falls under 0.2; see `registry.split_population`), so
adding an image moves no other. About 1438 / 359 images (the realized sizes are not published: the
public training size stays the declared 1438 = round(0.8 * 1797)).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dphpo.data.dataset import SPLIT_SEED, TEST_FRACTION, make_dataset, split_population
from dphpo.errors import DatasetError


def load_digits_dataset(root: Path | None = None, download: bool = True):
    try:
        from sklearn.datasets import load_digits
    except ImportError as exc:  # pragma: no cover - scikit-learn is a dependency
        raise DatasetError("the digits dataset needs scikit-learn: pip install scikit-learn") from exc
    bunch = load_digits()
    images = np.rint(bunch.images * (255.0 / 16.0)).clip(0, 255).astype(np.uint8)  # (1797, 8, 8)
    labels = bunch.target.astype(np.int64)
    classes = [str(i) for i in range(10)]
    train_idx, test_idx = split_population(images, labels, classes, TEST_FRACTION, SPLIT_SEED)
    return make_dataset(
        "digits", "image", images[train_idx], labels[train_idx], images[test_idx], labels[test_idx],
        num_classes=10,
        source=f"scikit-learn load_digits(); per-record {1 - TEST_FRACTION:.0%}/{TEST_FRACTION:.0%} split, salt {SPLIT_SEED}",
        license="CC BY 4.0",
        classes=classes,
    )
