"""`synthetic_shapes`: procedurally generated public images that do not resemble real images.

Panda et al. (shared/seeds/000), App. A ("CIFAR training from scratch without public data") linear-probes a WideResNet-16-4
pretrained on synthetic images that never saw a real photo (Tang et al. 2023, after Baradad et al.
2021, "Learning to see by looking at noise"). This module is our offline, deterministic stand-in for
such data: every image is

1. a background of coloured fractal (1/f^β) noise, half of the time overlaid with a random grating;
2. 0–3 small distractors: solid primitives of random shape and colour (dead-leaves style);
3. one large *target* primitive of shape class `s` (disk, square, triangle, ring, cross, star,
   arc, bar), filled with texture class `t` (solid, stripes, checkerboard, dots) in two
   random colours, at a random position, size and rotation, drawn last (never occluded);
4. a quarter of the images are then turned grey (luminance), so that features also respond to
   colourless inputs (grey private data such as MNIST is replicated to 3 channels).

The label is `s * n_textures + t` (8 × 4 = 32 classes by default). Every colour is drawn
independently of the label, so the mean colour carries no label information; the task needs
shape and texture detectors (edges, corners, curvature, periodic patterns), which is what we want a
public pretraining task to teach.

Scene parameters live in normalized image coordinates, so one seed gives the same scenes at any
resolution. Images are generated in chunks of `CHUNK` with their own seeded generator
(`np.random.default_rng([seed, split, chunk])`): the first n images of a split do not depend on how
many are generated in total, and labels are balanced within every chunk. Pure numpy, vectorized over
a chunk: tens of thousands of 32×32 images per second on one core.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dphpo.data.dataset import make_dataset
from dphpo.errors import DatasetError

NAME = "synthetic_shapes"
SHAPES = ("disk", "square", "triangle", "ring", "cross", "star", "arc", "bar")
TEXTURES = ("solid", "stripes", "checkerboard", "dots")
CHUNK = 1024
DEFAULT_N_TRAIN = 50_000
DEFAULT_N_TEST = 10_000
DEFAULT_RESOLUTION = 32
DEFAULT_SEED = 0
_SPLIT_CODE = {"train": 0, "test": 1}
_NOISE_OCTAVES = (2, 4, 8, 16)  # grid sizes of the fractal noise (independent of the resolution)
_SQRT3 = np.sqrt(3.0)
GREY_FRACTION = 0.25
_LUMA = np.array([0.299, 0.587, 0.114], dtype=np.float32)  # ITU-R BT.601


# --------------------------------------------------------------------------------------------
# signed distance functions of the primitives, in object units (circumradius about 1; < 0 inside)


def _sdf(shape: int, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    name = SHAPES[shape]
    if name == "disk":
        return np.sqrt(u * u + v * v) - 1.0
    if name == "square":
        return np.maximum(np.abs(u), np.abs(v)) - 0.8
    if name == "triangle":  # equilateral, inradius 0.55
        return np.maximum.reduce([-v, 0.5 * v + 0.5 * _SQRT3 * u, 0.5 * v - 0.5 * _SQRT3 * u]) - 0.55
    if name == "ring":
        return np.abs(np.sqrt(u * u + v * v) - 0.72) - 0.28
    if name == "cross":
        au, av = np.abs(u), np.abs(v)
        return np.minimum(np.maximum(au - 0.95, av - 0.3), np.maximum(au - 0.3, av - 0.95))
    if name == "star":  # 5 points; not an exact distance, close enough for anti-aliasing
        r = np.sqrt(u * u + v * v)
        return r - (0.62 + 0.38 * np.cos(5.0 * np.arctan2(v, u)))
    if name == "arc":  # a thick "C": the ring minus a 120° wedge around +u
        ring = np.abs(np.sqrt(u * u + v * v) - 0.75) - 0.2
        return np.maximum(ring, u * 0.866 - np.abs(v) * 0.5)
    if name == "bar":
        return np.maximum(np.abs(u) - 1.0, np.abs(v) - 0.32)
    raise ValueError(f"unknown shape index {shape}")


def _texture(texture: int, u: np.ndarray, v: np.ndarray, freq: np.ndarray, angle: np.ndarray) -> np.ndarray:
    """Mix weight of the second colour (0..1), soft-edged; `freq` in cycles per object unit."""
    name = TEXTURES[texture]
    if name == "solid":
        return np.zeros_like(u)
    c, s = (np.stack([np.cos(angle), np.sin(angle)]) * freq).astype(np.float32)[:, :, None, None]
    a, b = c * u + s * v, c * v - s * u
    if name == "stripes":
        g = np.sin(2 * np.pi * a)
    elif name == "checkerboard":
        g = np.sin(2 * np.pi * a) * np.sin(2 * np.pi * b) * 2.0
    elif name == "dots":
        da, db = a - np.round(a), b - np.round(b)
        g = (0.3 - np.sqrt(da * da + db * db)) * 8.0
    else:
        raise ValueError(f"unknown texture index {texture}")
    return np.clip(0.5 + 2.0 * g, 0.0, 1.0)


# --------------------------------------------------------------------------------------------
# rendering


def _interp_matrix(n_out: int, n_in: int) -> np.ndarray:
    """(n_out, n_in) bilinear upsampling matrix (half-pixel centres, edge clamped)."""
    pos = (np.arange(n_out) + 0.5) * n_in / n_out - 0.5
    lo = np.clip(np.floor(pos).astype(int), 0, n_in - 1)
    hi = np.clip(lo + 1, 0, n_in - 1)
    w = np.clip(pos - lo, 0.0, 1.0)
    m = np.zeros((n_out, n_in), dtype=np.float32)
    m[np.arange(n_out), lo] += (1 - w).astype(np.float32)
    m[np.arange(n_out), hi] += w.astype(np.float32)
    return m


def _upsample(x: np.ndarray, size: int) -> np.ndarray:
    """Bilinear upsampling of the last two axes of x (..., g, g) to (..., size, size)."""
    m = _interp_matrix(size, x.shape[-1])
    return m @ x @ m.T


def _background(rng: np.random.Generator, n: int, res: int, coords: np.ndarray) -> np.ndarray:
    """(3, n, res, res) coloured fractal noise with a random spectral slope, plus gratings.

    Octaves on grids of 2, 4, 8, 16 cells, each upsampled onto the next and summed (a Laplacian
    pyramid run backwards), amplitude (g/2)^-β with β ~ U(0.5, 2) per image.
    """
    beta = rng.uniform(0.5, 2.0, n).astype(np.float32)
    noise = None
    for g in _NOISE_OCTAVES:
        octave = rng.standard_normal((3, n, g, g), dtype=np.float32)
        octave *= ((g / _NOISE_OCTAVES[0]) ** (-beta))[None, :, None, None]
        noise = octave if noise is None else _upsample(noise, g) + octave
    noise = _upsample(noise, res)
    noise /= noise.std(axis=(0, 2, 3))[None, :, None, None] + 1e-6
    base = rng.uniform(0.15, 0.85, (3, n, 1, 1)).astype(np.float32)
    contrast = rng.uniform(0.05, 0.25, (1, n, 1, 1)).astype(np.float32)
    img = base + contrast * noise
    # a random oriented grating on half of the images (period 0.08..0.5 of the image)
    has = rng.random(n) < 0.5
    theta = rng.uniform(0, np.pi, n)
    period = np.exp(rng.uniform(np.log(0.08), np.log(0.5), n))
    phase = rng.uniform(0, 2 * np.pi, n).astype(np.float32)
    gamp = (rng.uniform(0.05, 0.2, n) * has).astype(np.float32)
    gcol = rng.uniform(-1, 1, (3, n)).astype(np.float32)
    x, y = coords
    kx, ky = (2 * np.pi * np.stack([np.cos(theta), np.sin(theta)]) / period).astype(np.float32)
    grating = np.sin(kx[:, None, None] * x + ky[:, None, None] * y + phase[:, None, None])
    img += (gamp * gcol)[:, :, None, None] * grating[None]
    return img


def _object_frame(coords, cx, cy, radius, theta, aspect):
    """Object coordinates (u, v) of every pixel for n objects: (n, res, res) each, float32."""
    x, y = coords
    f32 = lambda a: np.asarray(a, dtype=np.float32)[:, None, None]  # noqa: E731
    scale_u, scale_v = f32(aspect / radius), f32(1.0 / (aspect * radius))
    c, s = f32(np.cos(theta)), f32(np.sin(theta))
    dx, dy = x[None] - f32(cx), y[None] - f32(cy)
    return (c * dx + s * dy) * scale_u, (c * dy - s * dx) * scale_v


def _layer(coords, res, shape, cx, cy, radius, theta, aspect):
    """Coverage (n, res, res) of one primitive per image (anti-aliased), and its object frame."""
    u, v = _object_frame(coords, cx, cy, radius, theta, aspect)
    sdf = np.empty_like(u)
    for s in np.unique(shape):
        idx = np.flatnonzero(shape == s)
        sdf[idx] = _sdf(int(s), u[idx], v[idx])
    # signed distance in pixels through a one-pixel ramp
    sdf *= (-radius * res).astype(np.float32)[:, None, None]
    alpha = np.clip(sdf + 0.5, 0.0, 1.0, out=sdf)
    return alpha, u, v


def _second_colour(rng: np.random.Generator, c1: np.ndarray) -> np.ndarray:
    """A colour at least 0.35 away from c1 in every channel (circular shift)."""
    return np.mod(c1 + rng.uniform(0.35, 0.65, c1.shape), 1.0).astype(np.float32)


def _render_chunk(rng: np.random.Generator, labels: np.ndarray, res: int, n_textures: int,
                  max_distractors: int) -> np.ndarray:
    """uint8 (n, res, res, 3) images of one chunk; painted channel-first (3, n, res, res)."""
    n = len(labels)
    centres = (np.arange(res, dtype=np.float32) + 0.5) / res
    coords = np.stack(np.meshgrid(centres, centres, indexing="xy"))  # x varies along columns
    img = _background(rng, n, res, coords)

    # distractors: small solid primitives of any shape, drawn first (the target may cover them)
    n_distract = rng.integers(0, max_distractors + 1, n)
    for k in range(max_distractors):
        shape = rng.integers(0, len(SHAPES), n)
        cx, cy = rng.uniform(0.05, 0.95, (2, n))
        radius = rng.uniform(0.07, 0.14, n)
        theta = rng.uniform(0, 2 * np.pi, n)
        aspect = rng.uniform(0.8, 1.25, n)
        colour = rng.uniform(0, 1, (3, n)).astype(np.float32)
        active = np.flatnonzero(n_distract > k)
        if active.size == 0:
            continue
        alpha, _, _ = _layer(coords, res, shape[active], cx[active], cy[active], radius[active],
                             theta[active], aspect[active])
        part = img[:, active]
        part += alpha[None] * (colour[:, active, None, None] - part)
        img[:, active] = part

    # the target: shape and texture classes from the label; everything else random
    shape, texture = labels // n_textures, labels % n_textures
    radius = rng.uniform(0.22, 0.4, n)
    cx = rng.uniform(radius * 0.8, 1 - radius * 0.8)
    cy = rng.uniform(radius * 0.8, 1 - radius * 0.8)
    theta = rng.uniform(0, 2 * np.pi, n)
    aspect = rng.uniform(0.85, 1.18, n)
    c1 = rng.uniform(0, 1, (3, n)).astype(np.float32)
    c2 = _second_colour(rng, c1)
    # texture period 0.1..0.18 of the image (≥ 3 px at 32 px), in cycles per object unit
    freq = radius / rng.uniform(0.1, 0.18, n)
    tex_angle = rng.uniform(0, np.pi, n)
    alpha, u, v = _layer(coords, res, shape, cx, cy, radius, theta, aspect)
    mix = np.zeros_like(u)
    for t in range(1, n_textures):  # texture 0 (solid) keeps mix = 0
        idx = np.flatnonzero(texture == t)
        if idx.size:
            mix[idx] = _texture(t, u[idx], v[idx], freq[idx], tex_angle[idx])
    colour = c1[:, :, None, None] + mix[None] * (c2 - c1)[:, :, None, None]
    img += alpha[None] * (colour - img)
    grey = np.flatnonzero(rng.random(n) < GREY_FRACTION)
    if grey.size:
        img[:, grey] = np.tensordot(_LUMA, img[:, grey], axes=1)[None]
    out = np.rint(np.clip(img, 0.0, 1.0, out=img) * 255.0).astype(np.uint8)
    return np.ascontiguousarray(out.transpose(1, 2, 3, 0))


def num_classes(n_shapes: int = len(SHAPES), n_textures: int = len(TEXTURES)) -> int:
    return int(n_shapes) * int(n_textures)


def class_names(n_shapes: int = len(SHAPES), n_textures: int = len(TEXTURES)) -> list[str]:
    return [f"{SHAPES[s]}/{TEXTURES[t]}" for s in range(n_shapes) for t in range(n_textures)]


def generate_shapes(
    n: int,
    *,
    resolution: int = DEFAULT_RESOLUTION,
    seed: int = DEFAULT_SEED,
    split: str = "train",
    n_shapes: int = len(SHAPES),
    n_textures: int = len(TEXTURES),
    max_distractors: int = 3,
) -> tuple[np.ndarray, np.ndarray]:
    """`n` images (uint8, (n, R, R, 3)) and labels (int64, `s * n_textures + t`) of one split.

    Deterministic in (seed, split, resolution, n_shapes, n_textures, max_distractors); the first
    n images are a prefix of any longer run with the same arguments.
    """
    if split not in _SPLIT_CODE:
        raise DatasetError(f"{NAME}: split must be 'train' or 'test', got {split!r}")
    if not 1 <= n_shapes <= len(SHAPES) or not 1 <= n_textures <= len(TEXTURES):
        raise DatasetError(f"{NAME}: 1 ≤ n_shapes ≤ {len(SHAPES)} and 1 ≤ n_textures ≤ {len(TEXTURES)}")
    if int(resolution) < 8:
        raise DatasetError(f"{NAME}: resolution must be ≥ 8, got {resolution}")
    n, res, k = int(n), int(resolution), num_classes(n_shapes, n_textures)
    images = np.empty((n, res, res, 3), dtype=np.uint8)
    labels = np.empty(n, dtype=np.int64)
    for chunk, start in enumerate(range(0, n, CHUNK)):
        rng = np.random.default_rng([int(seed), _SPLIT_CODE[split], chunk])
        chunk_labels = rng.permutation(np.arange(CHUNK) % k)
        stop = min(n, start + CHUNK)
        # rendering the whole chunk (even when truncated) keeps every image prefix-stable
        chunk_images = _render_chunk(rng, chunk_labels, res, n_textures, max_distractors)
        images[start:stop] = chunk_images[: stop - start]
        labels[start:stop] = chunk_labels[: stop - start]
    return images, labels


def load_synthetic_shapes(
    root: Path | None = None,
    download: bool = True,
    *,
    n_train: int = DEFAULT_N_TRAIN,
    n_test: int = DEFAULT_N_TEST,
    resolution: int = DEFAULT_RESOLUTION,
    seed: int = DEFAULT_SEED,
):
    """The `synthetic_shapes` dataset (nothing is read from or written to `root`)."""
    x_train, y_train = generate_shapes(n_train, resolution=resolution, seed=seed, split="train")
    x_test, y_test = generate_shapes(n_test, resolution=resolution, seed=seed, split="test")
    return make_dataset(
        NAME, "image", x_train, y_train, x_test, y_test,
        num_classes=num_classes(),
        source=(f"dphpo.data.synthetic.generate_shapes (procedural; seed={seed}, resolution={resolution}, "
                f"n_train={n_train}, n_test={n_test}, {len(SHAPES)} shapes x {len(TEXTURES)} textures)"),
        license="generated (no third-party content)",
        classes=class_names(),
    )
