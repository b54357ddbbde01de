"""The procedural public dataset `synthetic_shapes` (dphpo.data.synthetic)."""

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from dphpo.data import DATASETS
from dphpo.data.synthetic import (
    CHUNK,
    SHAPES,
    TEXTURES,
    class_names,
    generate_shapes,
    load_synthetic_shapes,
    num_classes,
)
from dphpo.errors import DatasetError

K = len(SHAPES) * len(TEXTURES)


def test_generator_is_deterministic_given_seed():
    x1, y1 = generate_shapes(300, seed=3)
    x2, y2 = generate_shapes(300, seed=3)
    assert np.array_equal(x1, x2) and np.array_equal(y1, y2)
    x3, _ = generate_shapes(300, seed=4)
    assert not np.array_equal(x1, x3)
    x_test, _ = generate_shapes(300, seed=3, split="test")
    assert not np.array_equal(x1, x_test)


def test_first_images_do_not_depend_on_how_many_are_generated():
    x_long, y_long = generate_shapes(CHUNK + 50, seed=1)
    x_short, y_short = generate_shapes(CHUNK + 10, seed=1)
    assert np.array_equal(x_long[: CHUNK + 10], x_short) and np.array_equal(y_long[: CHUNK + 10], y_short)


def test_images_are_uint8_rgb_at_the_requested_resolution():
    for res in (16, 32, 48):
        x, y = generate_shapes(20, resolution=res)
        assert x.shape == (20, res, res, 3) and x.dtype == np.uint8 and y.dtype == np.int64
        assert x.std() > 10  # not blank


def test_labels_are_balanced_within_every_chunk():
    _, y = generate_shapes(2 * CHUNK)
    counts = np.bincount(y, minlength=K)
    assert len(counts) == K == num_classes() == len(class_names())
    assert counts.min() == counts.max() == 2 * CHUNK // K
    _, y_small = generate_shapes(CHUNK, n_shapes=3, n_textures=2)
    assert set(np.unique(y_small)) == set(range(6))


def test_mean_colour_carries_no_label_information():
    """Colours are drawn independently of the label: per-image colour statistics give chance accuracy."""
    x_train, y_train = generate_shapes(2048, split="train")
    x_test, y_test = generate_shapes(1024, split="test")

    def colour_stats(x):
        x = x.reshape(len(x), -1, 3).astype(np.float32) / 255.0
        return np.concatenate([x.mean(1), x.std(1)], axis=1)

    clf = LogisticRegression(max_iter=500).fit(colour_stats(x_train), y_train)
    acc = clf.score(colour_stats(x_test), y_test)
    assert acc < 2.0 / K  # chance is 1/K = 3.1 %


def test_registered_in_the_dataset_registry():
    spec = DATASETS["synthetic_shapes"]
    assert spec.modality == "image" and spec.num_classes == K
    ds = load_synthetic_shapes(n_train=100, n_test=40, seed=0)
    assert ds.name == "synthetic_shapes" and ds.num_classes == K
    assert ds.train_inputs.shape == (100, 32, 32, 3) and ds.n_test == 40
    assert len(ds.checksum) == 64 and "seed=0" in ds.source
    assert ds.checksum == load_synthetic_shapes(n_train=100, n_test=40, seed=0).checksum
    assert ds.checksum != load_synthetic_shapes(n_train=100, n_test=40, seed=1).checksum


def test_bad_arguments_are_refused():
    with pytest.raises(DatasetError, match="split"):
        generate_shapes(10, split="valid")
    with pytest.raises(DatasetError, match="n_shapes"):
        generate_shapes(10, n_shapes=99)
    with pytest.raises(DatasetError, match="resolution"):
        generate_shapes(10, resolution=4)


@pytest.mark.slow
def test_a_small_cnn_learns_the_task_well_above_chance():
    from dphpo.features.pretrain import PretrainConfig, load_public_dataset, pretrain

    cfg = PretrainConfig.from_config(dict(arch="small_cnn", public_dataset="synthetic_shapes", width=8, epochs=3,
                                          max_train=2048, max_test=512, batch_size=64, lr=0.05))
    _, record = pretrain(cfg, load_public_dataset(cfg), progress=False)
    assert record["metrics"]["test_accuracy"] > 2.5 / K
