"""ImageNet-1k (ILSVRC 2012) from a local copy: train/<wnid>/*.JPEG and val/<wnid>/*.JPEG.

That is torchvision's `ImageNet` layout once its devkit preparation has sorted the validation images
into class folders (or any ImageFolder with train/ and val/). The folder is `datasets.imagenet.path`,
else `data_dir`/imagenet. Classes are the train/ folders in sorted order (the wnids: the standard
0..999 index). Images are resized to `datasets.imagenet.image_size` (H, W; default 64 x 64) as they are
read: they stay on disk (`ImageFiles`), and feature extraction decodes a batch at a time, one batch
ahead, where one array of the 1,281,167 images would take 15.7 GB at 64 x 64 and 63 GB at 128 x 128.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dphpo.data.dataset import make_dataset
from dphpo.data.image_files import ImageFiles
from dphpo.data.local_files import files_digest
from dphpo.errors import DatasetError

SUFFIXES = (".jpeg", ".jpg", ".png")
DEFAULT_SIZE = (64, 64)


def _folder(root: Path) -> Path:
    for candidate in (Path(root), Path(root) / "imagenet"):
        if (candidate / "train").is_dir() and (candidate / "val").is_dir():
            return candidate
    raise DatasetError(
        f"datasets.imagenet.path: no train/ and val/ folders in {root} or {Path(root) / 'imagenet'}; expected "
        "train/<wnid>/*.JPEG and val/<wnid>/*.JPEG (torchvision ImageNet after devkit preparation, or an ImageFolder)"
    )


def _listing(split: Path, classes: list[str]) -> list[tuple[Path, int]]:
    out = []
    for i, c in enumerate(classes):
        folder = split / c
        if folder.is_dir():
            out += [(f, i) for f in sorted(folder.iterdir()) if f.suffix.lower() in SUFFIXES]
    return out


def imagenet_classes() -> list[str]:
    """ImageNet-1k's 1,000 wnids in the standard order (timm's copy of the published synset list): the label
    set is public, never read off the class folders (one folder more would renumber every label)."""
    from timm.data import ImageNetInfo

    return list(ImageNetInfo("imagenet-1k").label_names())


def load_imagenet(root: Path, download: bool = False, image_size=DEFAULT_SIZE):
    folder = _folder(root)
    size = (int(image_size[0]), int(image_size[1]))
    classes = imagenet_classes()
    for split in ("train", "val"):
        extra = sorted({p.name for p in (folder / split).iterdir() if p.is_dir()} - set(classes))
        if extra:
            raise DatasetError(f"datasets.imagenet: {split}/ has class folder(s) {', '.join(extra[:5])} outside ImageNet-1k's 1,000 wnids")
    files = {s: _listing(folder / s, classes) for s in ("train", "val")}
    if not files["train"]:
        raise DatasetError(f"datasets.imagenet.path: {folder / 'train'} holds no images ({', '.join(SUFFIXES)})")
    x = {s: ImageFiles([f for f, _ in fs], size, "datasets.imagenet") for s, fs in files.items()}
    y = {s: np.asarray([c for _, c in fs], dtype=np.int64) for s, fs in files.items()}
    return make_dataset("imagenet", "image", x["train"], y["train"], x["val"], y["val"], num_classes=len(classes),
                        source=f"ImageNet-1k local copy (train/, val/; resized to {size[0]}x{size[1]})", classes=classes,
                        checksum=files_digest(folder, [f.relative_to(folder).as_posix() for fs in files.values() for f, _ in fs]))
