"""The user's own data, from files named in the config (`datasets.<name>: {kind: …, path: …}`).

Three kinds, each checked before any job with the key and the file named:
- `image_folder`: DIR/train/<class>/* and DIR/test/<class>/* (ImageFolder layout; PNG, JPEG, BMP, …,
  grey or RGB, any size); without test/, a per-record split of `test_fraction` (below). Past
  `STREAM_BYTES` decoded, the images stay on disk (`ImageFiles`), read a batch at a time. A folder
  of mixed sizes needs `image_size`, one of grey and colour images `image_mode`: a common shape
  picked from the private images (their most common size, colour if any is) would make every
  record's pixels depend on the others.
- `text_table`: a CSV, TSV, JSONL or Parquet file; `text_field` (one column, or two for sentence
  pairs), `label_field`, optional `split_field` (train/test), else a per-record split.
- `features`: precomputed features, an .npz with train_x, train_y, test_x, test_y, read by an
  extractor of kind `identity`.

The label set is public and declared (`classes`, which `dphpo init` writes): labels are mapped onto it
in its order (`encode_labels`), and a label outside it is refused. Read off the data, one
record with a new label would add a column to every released model. Undeclared (a library call, `dphpo
init`'s inspection), labels become classes in sorted order (integers by value: stars 1..5 are five). The content
checksum covers the files by relative path and bytes, never their location or mtimes: moving the
data changes nothing, editing one file changes the checksum.

Data without a split of its own are split record by record (`registry.split_population` →
`dphpo.data.subsets.split_test`, salt `split_seed`): an image goes to test by the keyed hash of its
pixels as read and its class folder's name, a row by its text and its label as written, so adding a
record to the user's data moves no other between train and test. The split is not stratified: on
tiny data a class may end up without training examples (the loader says so).
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, UnidentifiedImageError

from dphpo.data.dataset import take_records
from dphpo.data.image_files import ImageFiles
from dphpo.data.local_files import files_checksum
from dphpo.data.registry import (
    SPLIT_SEED,
    TEST_FRACTION,
    Dataset,
    DatasetSpec,
    bound_spec,
    make_dataset,
    split_population,
)
from dphpo.data.registry import dataset_options as registry_options
from dphpo.errors import DatasetError

KINDS = ("image_folder", "text_table", "features")
#: `image_mode`: what every image of a folder is converted to
IMAGE_MODES = ("grey", "rgb")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm")
TABLE_SUFFIXES = (".csv", ".tsv", ".jsonl", ".parquet")
PAIR_SEPARATOR = "\n"  # between the two texts of a sentence pair (text_field: [a, b])


@dataclass(frozen=True)
class FileDataset:
    """A `datasets.<name>` entry of kind image_folder, text_table or features."""

    name: str
    kind: str
    path: Path
    text_field: tuple[str, ...] = ()
    label_field: str = "label"
    split_field: str | None = None
    test_fraction: float = TEST_FRACTION
    split_seed: int = SPLIT_SEED
    image_size: tuple[int, int] | None = None
    image_mode: str | None = None
    classes: tuple[str, ...] | None = None  # declared: the public label set, in the model's order

    @property
    def key(self) -> str:
        return f"datasets.{self.name}"

    @property
    def modality(self) -> str:
        return {"image_folder": "image", "text_table": "text", "features": "features"}[self.kind]

    @classmethod
    def from_config(cls, name: str, section: dict) -> FileDataset:
        kind = section.get("kind")
        if kind not in KINDS:
            raise DatasetError(f"datasets.{name}.kind: expected one of {', '.join(KINDS)}, got {kind!r}")
        if not section.get("path"):
            raise DatasetError(f"datasets.{name}.path: a {kind} dataset needs the path of its data")
        text_field = section.get("text_field", "text")
        text_field = (text_field,) if isinstance(text_field, str) else tuple(text_field)
        if kind == "text_table" and not 1 <= len(text_field) <= 2:
            raise DatasetError(f"datasets.{name}.text_field: one column, or two for sentence pairs; got {list(text_field)}")
        size, mode, classes = section.get("image_size"), section.get("image_mode"), section.get("classes")
        if mode is not None and mode not in IMAGE_MODES:
            raise DatasetError(f"datasets.{name}.image_mode: expected one of {', '.join(IMAGE_MODES)}, got {mode!r}")
        return cls(
            name=name,
            kind=kind,
            path=Path(section["path"]).expanduser(),
            text_field=text_field,
            label_field=str(section.get("label_field", "label")),
            split_field=section.get("split_field"),
            test_fraction=float(section.get("test_fraction", TEST_FRACTION)),
            split_seed=int(section.get("split_seed", SPLIT_SEED)),
            image_size=None if size is None else (int(size[0]), int(size[1])),
            image_mode=mode,
            classes=None if classes is None else tuple(str(c) for c in classes),
        )

    def read_options(self) -> dict[str, Any]:
        """Every key that decides which records are read and how (classes, columns, split, image shape): a change
        of one changes the records, so it enters the feature job's params and the cache's attributes."""
        split = {"test_fraction": self.test_fraction, "split_seed": self.split_seed}
        labels = {"kind": self.kind, "classes": None if self.classes is None else list(self.classes)}
        if self.kind == "image_folder":
            size = None if self.image_size is None else list(self.image_size)
            return labels | {"image_size": size, "image_mode": self.image_mode} | split
        if self.kind == "text_table":
            fields = {"text_field": list(self.text_field), "label_field": self.label_field, "split_field": self.split_field}
            return labels | fields | (split if self.split_field is None else {})
        return labels

    def check_path(self) -> None:
        """The cheap check of the config stage: the path exists and has the right shape."""
        if not self.path.exists():
            raise DatasetError(f"{self.key}.path: {self.path} does not exist")
        if self.kind == "image_folder":
            if not self.path.is_dir():
                raise DatasetError(f"{self.key}.path: {self.path} is a file; an image folder is a folder holding train/<class>/<image>")
            if not (self.path / "train").is_dir():
                raise DatasetError(f"{self.key}.path: {self.path} has no train/ folder; expected {self.path}/train/<class>/<image> "
                                   f"(and optionally {self.path}/test/<class>/<image>){self._layout_hint()}")
        elif self.path.is_dir():
            raise DatasetError(f"{self.key}.path: {self.path} is a folder; a {self.kind} dataset is one file")
        elif self.kind == "text_table" and self.path.suffix.lower() not in TABLE_SUFFIXES:
            raise DatasetError(f"{self.key}.path: {self.path.name}: expected one of {', '.join(TABLE_SUFFIXES)}")
        elif self.kind == "text_table":
            self.check_columns()
        elif self.kind == "features" and self.path.suffix.lower() != ".npz":
            raise DatasetError(f"{self.key}.path: {self.path.name}: expected an .npz with train_x, train_y, test_x, test_y")

    def _layout_hint(self) -> str:
        """What an image folder without train/ holds instead, said in the words of the expected layout."""
        classes = sorted(d.name for d in self.path.iterdir() if d.is_dir() and any(
            f.suffix.lower() in IMAGE_SUFFIXES for f in d.iterdir()))
        if classes:
            return f": it has class folders ({', '.join(classes[:5])}{', ...' if len(classes) > 5 else ''}) directly under it: move them into train/"
        if any(f.suffix.lower() in IMAGE_SUFFIXES for f in self.path.iterdir()):
            return ": it holds images directly, without class folders: put each class's images in train/<class>/"
        return ""

    def check_columns(self) -> None:
        """The columns the keys name are in the table's header (before any job, not inside the extraction)."""
        columns = table_columns(self.path, f"{self.key}.path")
        named = [("text_field", c) for c in self.text_field] + [("label_field", self.label_field)]
        named += [("split_field", self.split_field)] if self.split_field else []
        for field_key, name in named:
            if name not in columns:
                raise DatasetError(f"{self.key}.{field_key}: column {name!r} is not in {self.path.name} (columns: {columns})")

    def load(self) -> Dataset:
        self.check_path()
        ds = {"image_folder": load_image_folder, "text_table": load_text_table, "features": load_feature_file}[self.kind](self)
        check_trainable(ds, f"{self.key} ({self.path.name})")
        return ds


def file_section(config: dict, name: str) -> dict | None:
    """The `datasets.<name>` section of a dataset read from files (it has a `kind`), else None."""
    section = (config.get("datasets") or {}).get(name) or {}
    return section if section.get("kind") else None


def dataset_options(config: dict, name: str) -> dict[str, Any]:
    """`registry.dataset_options`, with how the user's own files are read (`read`: columns, split, image
    shape, classes; `FileDataset.read_options`) for a dataset read from files."""
    opts = registry_options(config, name)
    section = file_section(config, name)
    if section is not None:
        opts["read"] = FileDataset.from_config(name, section).read_options()
        if opts["max_train"] is not None:  # the share max_train keeps is max_train / the declared size
            opts["public_n_train"] = section.get("public_n_train")
    return opts


def dataset_spec(config: dict, name: str) -> DatasetSpec | None:
    """What is known of dataset `name` before loading it: a registry name, or the user's files
    (`datasets.<name>: {kind, path, …}`; its class count when `classes` declares them). None: unknown."""
    section = file_section(config, name)
    if section is None:
        return bound_spec(config, name)
    spec = FileDataset.from_config(name, section)
    classes = section.get("classes")
    return DatasetSpec(
        name=name,
        modality=spec.modality,
        num_classes=len(classes) if classes else None,
        loader=lambda root, download: spec.load(),
        description=f"{spec.kind} {spec.path.name}",
        # declared, never counted: what a max_train subset is a share of (registry.load_dataset)
        public_n_train=section.get("public_n_train"),
    )


# ------------------------------------------------------------------------------------------------
# checksums and labels


def data_files(spec: FileDataset) -> tuple[Path, list[Path]]:
    """The files a dataset is read from, and the root their checksum names them relative to."""
    if spec.kind == "image_folder":
        return spec.path, [f for split in ("train", "test") if (spec.path / split).is_dir()
                           for fs in _image_files(spec.path / split, spec.key).values() for f in fs]
    return spec.path.parent, [spec.path]


def content_checksum(config: dict, name: str, cache_dir: Path | None = None) -> str | None:
    """The content checksum of a dataset read from files (None for registry datasets): what the
    workflow hands its feature job, so editing one file rebuilds the cache and moving the data does not."""
    section = file_section(config, name)
    if section is None:
        return None
    spec = FileDataset.from_config(name, section)
    spec.check_path()
    root, files = data_files(spec)
    return files_checksum(root, files, None if cache_dir is None else cache_dir / f"{name}.json")


def check_trainable(ds: Dataset, where: str) -> None:
    """Refuse data no study can report on: fewer than two classes in the training split (a one-class
    "classifier" scores 100 % on a one-class test split), or an empty test split (no test metric)."""
    classes = np.unique(np.asarray(ds.train_labels))
    if len(classes) < 2:
        raise DatasetError(f"{where}: the training split holds {len(classes)} class(es); a classifier needs at least two "
                           "(check the label column or the class folders)")
    if len(ds.test_labels) == 0:
        raise DatasetError(f"{where}: the test split is empty, so no test metric can be reported; add test records "
                           "(a test/ folder, split_field rows marked test, or test_x/test_y), or drop split_field to carve a share")


def _is_integer(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


#: A label or class name written as an integer: 3, +1, -1, and 2.0 as spreadsheets and pandas write it.
INTEGER_TEXT = re.compile(r"[+-]?[0-9]+(\.0*)?")


def integer_text(text: str) -> int | None:
    """The integer a label or class name `text` writes (`INTEGER_TEXT`), else None."""
    text = text.strip()
    return int(text.split(".")[0]) if INTEGER_TEXT.fullmatch(text) else None


def _class_order(names: set[str]) -> list[str]:
    """Class names read off the data in sorted order: numbers by value where every name is one (ratings
    0.5 .. 10.0), else as text."""
    if all(map(_is_number, names)):
        return sorted(names, key=lambda n: (float(n), n))
    return sorted(names)


def encode_labels(train: Sequence[Any], test: Sequence[Any], where: str,
                  declared: Sequence[str] | None = None) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Labels as indices into the class list: the `declared` classes in their order (integer labels are
    looked up by value where every declared name is an integer, `classes: [1, 2, 3]`, else they index
    the names, `classes: [neg, pos]`; a label outside them is refused), else the distinct labels in
    sorted order (integers by value: stars 1..5 are five classes, not six with an empty 0). Every class
    needs training examples."""
    values = list(train) + list(test)
    by_position = False  # integer labels index the class list (0..K-1), not name it
    if all(_is_integer(v) for v in values):
        if declared is None or all(integer_text(str(c)) is not None for c in declared):
            classes = list(declared) if declared is not None else [str(c) for c in sorted(set(values))]
            index = {integer_text(str(c)): i for i, c in enumerate(classes)}
        else:
            if values and min(values) < 0:
                raise DatasetError(f"{where}: integer labels index the declared classes, so must be 0..K-1, "
                                   f"found {min(values)}")
            by_position = True
            classes, index = list(declared), {c: c for c in range(len(declared))}
    elif all(isinstance(v, str) for v in values):
        classes = list(declared) if declared is not None else _class_order(set(values))
        index = {c: i for i, c in enumerate(classes)}
    else:
        kinds = sorted({type(v).__name__ for v in values})
        raise DatasetError(f"{where}: labels must be all integers or all strings, found {', '.join(kinds)}")
    undeclared = sorted({v for v in values if v not in index}, key=str)
    if undeclared:
        shown = ", ".join(classes[:8]) + (", ..." if len(classes) > 8 else "")
        how = " (integer labels index them: 0..K-1)" if by_position else ""
        raise DatasetError(f"{where}: label(s) {', '.join(map(repr, undeclared[:5]))} are not among the declared classes "
                           f"({shown}){how}: add them to `classes` if the label set includes them")
    y_train = np.asarray([index[v] for v in train], dtype=np.int64)
    y_test = np.asarray([index[v] for v in test], dtype=np.int64)
    missing = sorted(set(range(len(classes))) - set(y_train.tolist()))
    if missing:
        names = ", ".join(classes[i] for i in missing[:5])
        raise DatasetError(
            f"{where}: class(es) {names} have no training examples ({len(missing)} of {len(classes)}); a model cannot "
            "learn a class it never sees: remove them or add examples"
        )
    return y_train, y_test, classes


def _split(spec: FileDataset, records: Sequence[Any], labels: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Per-record train/test split of data without one; `labels` as written (class names or integers)."""
    if not 0.0 < spec.test_fraction < 1.0:
        raise DatasetError(f"{spec.key}.test_fraction: must lie in (0, 1), got {spec.test_fraction}")
    return split_population(records, list(labels), None, spec.test_fraction, spec.split_seed)


# ------------------------------------------------------------------------------------------------
# image_folder


#: PIL modes read as grey (one channel); every other mode is read as RGB
GREY_MODES = ("L", "1", "I", "I;16", "I;16L", "I;16B", "I;16N", "F")
#: Grey modes without a fixed range: scaling them by their own values would make a pixel depend on others.
WIDE_GREY_MODES = {"I": "32-bit integer", "F": "32-bit float"}
#: a folder whose images, decoded to their common shape, would take more bytes than this stays on disk
#: (`ImageFiles`, decoded a batch at a time) instead of becoming one array
STREAM_BYTES = 2 << 30


def _read_image(path: Path, key: str) -> np.ndarray:
    """One image as read: its own size, grey (H, W) or RGB (H, W, 3)."""
    try:
        with Image.open(path) as im:
            im.load()
            if im.mode in WIDE_GREY_MODES:
                raise DatasetError(f"{key}: image {path} is {WIDE_GREY_MODES[im.mode]}, whose range is not fixed: "
                                   "convert the images to 8- or 16-bit (scaling by one public range for all of them)")
            if im.mode.startswith("I;16"):  # 16-bit grey: the full range 0..65535 onto 0..255 (convert("L") clips at 255)
                arr = (np.asarray(im, dtype=np.uint32) // 257).astype(np.uint8)
            else:
                arr = np.asarray(im.convert("L" if im.mode in GREY_MODES else "RGB"), dtype=np.uint8)
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise DatasetError(f"{key}: cannot read image {path} ({exc})") from None
    if arr.size == 0:
        raise DatasetError(f"{key}: image {path} is empty")
    return arr


def _header(path: Path, key: str) -> tuple[tuple[int, int], bool]:
    """((H, W), colour) of one image from its header, without decoding its pixels."""
    try:
        with Image.open(path) as im:
            return (im.size[1], im.size[0]), im.mode not in GREY_MODES
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise DatasetError(f"{key}: cannot read image {path} ({exc})") from None


def _fit(arr: np.ndarray, size: tuple[int, int] | None, rgb: bool) -> np.ndarray:
    """An image as read, in the folder's common shape: grey replicated to RGB, or RGB converted to grey, as
    `image_mode` says; resized (bilinear) to `image_size` where it is given."""
    if rgb and arr.ndim == 2:
        arr = np.repeat(arr[:, :, None], 3, axis=2)
    elif not rgb and arr.ndim == 3:
        arr = np.asarray(Image.fromarray(arr).convert("L"), dtype=np.uint8)
    if size is not None and arr.shape[:2] != size:
        arr = np.asarray(Image.fromarray(arr).resize((size[1], size[0]), Image.BILINEAR), dtype=np.uint8)
    return arr


def _folder_image(path: Path, size: tuple[int, int] | None, rgb: bool, key: str) -> np.ndarray:
    """One image of a streamed folder (`ImageFiles.read`): read, then fitted as `_fit` does."""
    return _fit(_read_image(path, key), size, rgb)


class _ImagesAsRead(Sequence):
    """The images of a streamed folder at their own size, read one at a time: what its per-record split
    hashes, as the in-memory path does."""

    def __init__(self, files: list[Path], key: str):
        self.files, self.key = files, key

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i):
        return _read_image(self.files[i], self.key)


def _hidden(path: Path, root: Path) -> bool:
    """A name below `root` starting with '.': .ipynb_checkpoints/, .thumbs/, macOS' ._x.png (AppleDouble, no image)."""
    return any(part.startswith(".") for part in path.relative_to(root).parts)


def _image_files(folder: Path, key: str) -> dict[str, list[Path]]:
    """{class: its image files} of train/ or test/: class folders and files whose names start with '.' skipped."""
    classes = sorted(p for p in folder.iterdir() if p.is_dir() and not _hidden(p, folder))
    files = {c.name: sorted(f for f in c.rglob("*") if f.is_file() and f.suffix.lower() in IMAGE_SUFFIXES
                            and not _hidden(f, folder)) for c in classes}
    if not files:
        raise DatasetError(f"{key}.path: {folder} holds no class folders (expected {folder.name}/<class>/<image>)")
    return files


def _stack(images: list[np.ndarray], size: tuple[int, int] | None, rgb: bool) -> np.ndarray:
    out = [_fit(arr, size, rgb) for arr in images]
    return np.stack(out) if out else np.zeros((0, *(size or (1, 1)), *((3,) if rgb else ())), np.uint8)


def image_shapes(spec: FileDataset, files: Sequence[Path] | None = None) -> tuple[set[tuple[int, int]], set[bool]]:
    """The sizes (H, W) and colour flags of a folder's images (`files`, else all of them), from their
    headers: which of `image_size` and `image_mode` the folder needs (`dphpo init`, the loader)."""
    headers = [_header(f, spec.key) for f in (data_files(spec)[1] if files is None else files)]
    return {hw for hw, _ in headers}, {colour for _, colour in headers}


def check_one_shape(spec: FileDataset, sizes: set[tuple[int, int]], colours: set[bool]) -> None:
    """Refuse a folder of several sizes without `image_size`, or of grey and colour images without
    `image_mode`: the common shape is the user's public choice, never one read off the private images."""
    if spec.image_size is None and len(sizes) > 1:
        shown = ", ".join(f"{h}x{w}" for h, w in sorted(sizes)[:4]) + (", ..." if len(sizes) > 4 else "")
        raise DatasetError(
            f"{spec.key}.image_size: the images of {spec.path} come in {len(sizes)} sizes ({shown}); name the [height, "
            "width] every image is resized to, e.g. the extractor's input resolution. A size picked from the images "
            "themselves (say the most common) would depend on every private record, so the workflow does not pick one"
        )
    if spec.image_mode is None and len(colours) > 1:
        raise DatasetError(
            f"{spec.key}.image_mode: {spec.path} holds both grey and colour images; name what every image is converted "
            "to: rgb (grey replicated to three channels, as a pretrained network reads it anyway) or grey. Converting "
            "all of them because one is in colour would make every record's pixels depend on the others"
        )


def load_image_folder(spec: FileDataset) -> Dataset:
    root = spec.path
    train_files = _image_files(root / "train", spec.key)
    has_test = (root / "test").is_dir()
    test_files = _image_files(root / "test", spec.key) if has_test else {}
    unknown = sorted(set(test_files) - set(train_files))
    if unknown:
        raise DatasetError(f"{spec.key}: test/ has class folder(s) {', '.join(unknown)} that train/ lacks")
    paths = {"train": [(f, c) for c, fs in train_files.items() for f in fs],
             "test": [(f, c) for c, fs in test_files.items() for f in fs]}
    files = [f for split in paths.values() for f, _ in split]
    if not files:
        raise DatasetError(f"{spec.key}.path: {root} holds no images ({', '.join(IMAGE_SUFFIXES)})")
    sizes, colours = image_shapes(spec, files)
    check_one_shape(spec, sizes, colours)
    # past the check, an undeclared size or mode is the one every image shares
    rgb = spec.image_mode == "rgb" if spec.image_mode else colours.pop()
    size = spec.image_size
    shape = size or sizes.pop()
    stream = len(files) * shape[0] * shape[1] * (3 if rgb else 1) > STREAM_BYTES
    if stream:  # on disk: decoded a batch at a time where they are read (features, subsets)
        read = partial(_folder_image, size=size, rgb=rgb, key=spec.key)
        x = {s: ImageFiles([f for f, _ in paths[s]], shape, spec.key, grey=not rgb, read=read) for s in paths}
        as_read = _ImagesAsRead([f for f, _ in paths["train"]], spec.key)
    else:
        images = {s: [_read_image(f, spec.key) for f, _ in paths[s]] for s in paths}
        x = {s: _stack(images[s], size, rgb) for s in images}
        as_read = images["train"]
    # the declared classes in their order, else the class folders of train/ in sorted order
    classes = list(spec.classes) if spec.classes is not None else sorted(train_files)
    undeclared = sorted((set(train_files) | set(test_files)) - set(classes))
    if undeclared:
        raise DatasetError(f"{spec.key}.classes: class folder(s) {', '.join(undeclared[:5])} of {root} are not among the "
                           "declared classes: add them if the label set includes them")
    empty = [c for c in classes if not train_files.get(c)]
    if empty:
        raise DatasetError(
            f"{spec.key}: class folder(s) {', '.join(empty[:5])} of {root / 'train'} hold no images; a model cannot "
            "learn a class it never sees: remove them or add examples"
        )
    y_train = np.asarray([classes.index(c) for _, c in paths["train"]], dtype=np.int64)
    y_test = np.asarray([classes.index(c) for _, c in paths["test"]], dtype=np.int64)
    source = f"image folder {root.name}/ ({len(files)} images, {'RGB' if rgb else 'grey'}"
    source += f", resized to {size[0]}x{size[1]})" if size else ")"
    if not has_test:  # by each image's pixels as read and its class name, before any resizing
        train_idx, test_idx = _split(spec, as_read, [c for _, c in paths["train"]])
        x["train"], x["test"] = take_records(x["train"], train_idx), take_records(x["train"], test_idx)
        y_train, y_test = y_train[train_idx], y_train[test_idx]
        lacking = sorted(set(range(len(classes))) - set(y_train.tolist()))
        if lacking:
            raise DatasetError(
                f"{spec.key}: class(es) {', '.join(classes[i] for i in lacking[:5])} have no training examples after the "
                f"per-record split (test_fraction={spec.test_fraction:g}); add examples or a test/ folder"
            )
        source += f"; per-record split test_fraction={spec.test_fraction:g}, split_seed={spec.split_seed}"
    return make_dataset(spec.name, "image", x["train"], y_train, x["test"], y_test, num_classes=len(classes),
                        source=source, classes=classes, checksum=files_checksum(*data_files(spec)))


# ------------------------------------------------------------------------------------------------
# text_table


def read_table(path: Path, key: str) -> list[dict]:
    """A text table's rows as dicts of cells; `key` names the table in an error."""
    suffix = path.suffix.lower()
    try:
        if suffix in (".csv", ".tsv"):
            return _read_delimited(path, key, "\t" if suffix == ".tsv" else ",")
        if suffix == ".jsonl":
            rows = []
            for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if line.strip():
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise DatasetError(f"{key}.path: {path} line {i}: not JSON ({exc.msg})") from None
                    if not isinstance(row, dict):
                        raise DatasetError(f"{key}.path: {path} line {i}: not a JSON object (one record per line, "
                                           f"its fields by name), got {type(row).__name__}")
                    rows.append(row)
            return rows
        import pandas as pd  # Parquet only: pandas takes a second to import

        return pd.read_parquet(path).to_dict("records")
    except (OSError, UnicodeDecodeError, csv.Error, ImportError, ValueError) as exc:
        raise DatasetError(f"{key}.path: cannot read {path} ({_why_unreadable(exc)})") from None


def _why_unreadable(exc: Exception) -> str:
    """Why a table cannot be read, with the fix where it is a common one (a table saved in Latin-1 or
    cp1252 rather than UTF-8)."""
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8: byte {exc.object[exc.start]:#04x} at offset {exc.start}; save the table as UTF-8"
    return str(exc)


def table_columns(path: Path, key: str) -> list[str]:
    """The column names of a text table, read from its header (its first record for JSONL) only; `key`
    names the table in an error (`datasets.<name>.path`, or init's `--texts`)."""
    suffix = path.suffix.lower()
    try:
        if suffix in (".csv", ".tsv"):
            with path.open(newline="", encoding="utf-8-sig") as fh:
                return next(csv.reader(fh, delimiter="\t" if suffix == ".tsv" else ","), [])
        if suffix == ".jsonl":
            with path.open(encoding="utf-8") as fh:
                first = next((line for line in fh if line.strip()), "{}")
            record = json.loads(first)
            return list(record) if isinstance(record, dict) else []
        import pandas as pd  # Parquet only (pandas takes a second to import)

        return [str(c) for c in pd.read_parquet(path).columns]
    except (OSError, UnicodeDecodeError, csv.Error, json.JSONDecodeError, ImportError, ValueError) as exc:
        raise DatasetError(f"{key}: cannot read the header of {path} ({_why_unreadable(exc)})") from None


def _read_delimited(path: Path, key: str, delimiter: str) -> list[dict]:
    """A CSV or TSV as rows (a UTF-8 byte-order mark, as Excel writes, is accepted); a ragged row or an
    unterminated quote is refused naming its line."""
    rows = []
    with path.open(newline="", encoding="utf-8-sig") as fh:
        # TSV has no quoting (IANA text/tab-separated-values): a quote is a character of the text, never the
        # start of a cell that runs on over the next rows (several records read as one)
        quoting = {"quoting": csv.QUOTE_NONE} if delimiter == "\t" else {}
        reader = csv.DictReader(fh, delimiter=delimiter, strict=True, **quoting)
        names = reader.fieldnames or []
        if repeated := sorted({n for n in names if names.count(n) > 1}):  # a dict keeps the last, silently
            raise DatasetError(f"{key}.path: {path.name}'s header repeats column {', '.join(map(repr, repeated))}: "
                               "name each column once")
        try:
            for row in reader:
                if None in row or None in row.values():  # more, or fewer, cells than the header names
                    raise DatasetError(f"{key}.path: {path.name} line {reader.line_num}: the row's cells do not match the "
                                       f"header's {len(reader.fieldnames or [])} columns (a ragged row)")
                rows.append(row)
        except csv.Error as exc:
            raise DatasetError(f"{key}.path: {path.name} line {reader.line_num}: {exc} (an unterminated quote?)") from None
    return rows


def _label_value(value: Any) -> Any:
    """CSV cells are strings: '3', '+1' and '3.0' are integers (`INTEGER_TEXT`); other strings are class
    names; JSON's true and false are the classes 'true' and 'false'."""
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value)).lower()
    if isinstance(value, str):
        number = integer_text(value)
        return value.strip() if number is None else number
    if isinstance(value, (float, np.floating)) and math.isfinite(value):
        # 3.0 (pandas' integers beside a missing cell) is 3; a half-star rating 0.5 a class named by its text, as in a CSV
        return int(value) if float(value).is_integer() else f"{float(value):g}"
    return value


def _is_number(value: Any) -> bool:
    try:
        return _is_integer(value) or math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def _one_kind(labels: list[Any], declared: Sequence[str] | None) -> list[Any]:
    """Numeric labels written both as integers and as decimals (ratings 0.5, 1, 1.5) as one kind, their
    text (classes then sort by value), also where the declared classes name such decimals (integer labels
    would otherwise index them); any other mix is left for `encode_labels` to refuse."""
    integers = sum(_is_integer(v) for v in labels)
    decimal_classes = declared is not None and all(map(_is_number, declared)) and any(integer_text(c) is None for c in declared)
    if integers and (integers < len(labels) or decimal_classes) and all(map(_is_number, labels)):
        return [str(v) for v in labels]
    return labels


def _cell_text(value) -> str:
    """A text cell stripped; a missing one (None, or a Parquet null read as NaN, which is truthy) empty."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return str(value).strip()


def load_text_table(spec: FileDataset) -> Dataset:
    """A text table as a `Dataset`; `FileDataset.load` checked its named columns against the header first."""
    path = spec.path
    rows = read_table(path, spec.key)
    if not rows:
        raise DatasetError(f"{spec.key}.path: {path} has no rows")
    texts, labels, splits = [], [], []
    for i, row in enumerate(rows, 1):
        parts = [_cell_text(row.get(f)) for f in spec.text_field]
        if not all(parts):
            raise DatasetError(f"{spec.key}: {path.name} row {i}: empty text in {', '.join(spec.text_field)}")
        texts.append(PAIR_SEPARATOR.join(parts))
        label = _label_value(row.get(spec.label_field))
        if label is None or label == "":
            raise DatasetError(f"{spec.key}.label_field: {path.name} row {i}: empty label in column {spec.label_field!r}")
        labels.append(label)
        if spec.split_field:
            splits.append(str(row.get(spec.split_field)).strip().lower())  # Train, TEST as written by hand
    labels = _one_kind(labels, spec.classes)
    if spec.split_field:
        unknown = sorted(set(splits) - {"train", "test"})
        if unknown:
            raise DatasetError(f"{spec.key}.split_field: {path.name} has split value(s) {unknown} in column "
                               f"{spec.split_field!r}; expected train or test (map a validation split to one of them)")
        train_idx = np.flatnonzero(np.asarray(splits) == "train")
        test_idx = np.flatnonzero(np.asarray(splits) == "test")
        how = f"split by column {spec.split_field!r}"
    else:
        encode_labels(labels, [], f"{spec.key} ({path.name})", spec.classes)  # checks the labels before splitting
        train_idx, test_idx = _split(spec, texts, labels)
        how = f"per-record split test_fraction={spec.test_fraction:g}, split_seed={spec.split_seed}"
    y_train, y_test, classes = encode_labels(
        [labels[i] for i in train_idx], [labels[i] for i in test_idx], f"{spec.key} ({path.name})", spec.classes
    )
    return make_dataset(spec.name, "text", [texts[i] for i in train_idx], y_train, [texts[i] for i in test_idx], y_test,
                        num_classes=len(classes), source=f"text table {path.name} ({len(rows)} rows; {how})", classes=classes,
                        checksum=files_checksum(path.parent, [path]))


# ------------------------------------------------------------------------------------------------
# features


def load_feature_file(spec: FileDataset) -> Dataset:
    """Precomputed features as a `Dataset` of modality "features" (inputs: float32 (N, d) arrays)."""
    path = spec.path
    try:
        with np.load(path, allow_pickle=False) as f:
            missing = sorted({"train_x", "train_y", "test_x", "test_y"} - set(f.files))
            if missing:
                raise DatasetError(f"{spec.key}.path: {path.name} lacks array(s) {', '.join(missing)}")
            arrays = {k: f[k] for k in ("train_x", "train_y", "test_x", "test_y")}
    except (OSError, ValueError, EOFError) as exc:
        why = "not a NumPy .npz archive of plain arrays" if "pickle" in str(exc) or isinstance(exc, EOFError) else exc
        raise DatasetError(f"{spec.key}.path: cannot read {path} as .npz ({why})") from None
    x_train, x_test = arrays["train_x"], arrays["test_x"]
    for split, x in (("train_x", x_train), ("test_x", x_test)):
        if x.dtype == object or x.ndim != 2:
            raise DatasetError(f"{spec.key}: {path.name} {split} must be a 2-D numeric array (N, d), got shape {x.shape}")
        if not (np.issubdtype(x.dtype, np.integer) or np.issubdtype(x.dtype, np.floating)):  # complex: not features
            raise DatasetError(f"{spec.key}: {path.name} {split} must be real numbers (integers or floats), got {x.dtype}")
        if not np.isfinite(x).all():
            raise DatasetError(f"{spec.key}: {path.name} {split} holds NaN or inf values")
    for split, x in (("train_x", x_train), ("test_x", x_test)):
        with np.errstate(over="ignore"):
            if not np.isfinite(x.astype(np.float32)).all():
                raise DatasetError(f"{spec.key}: {path.name} {split} holds values beyond float32's range (|x| > 3.4e38), "
                                   "which the features are stored in: rescale them")
    if x_train.shape[1] != x_test.shape[1]:
        raise DatasetError(f"{spec.key}: {path.name} train_x has width {x_train.shape[1]} but test_x {x_test.shape[1]}")
    for split in ("train", "test"):
        if len(arrays[f"{split}_x"]) != len(arrays[f"{split}_y"]):
            raise DatasetError(f"{spec.key}: {path.name} {split}_x has {len(arrays[f'{split}_x'])} rows, {split}_y {len(arrays[f'{split}_y'])}")
    y_train, y_test, classes = encode_labels(
        [_label_value(v) for v in arrays["train_y"].tolist()], [_label_value(v) for v in arrays["test_y"].tolist()],
        f"{spec.key} ({path.name})", spec.classes,
    )
    ds = Dataset(
        name=spec.name, modality="features",
        train_inputs=np.ascontiguousarray(x_train, dtype=np.float32), train_labels=y_train,
        test_inputs=np.ascontiguousarray(x_test, dtype=np.float32), test_labels=y_test,
        num_classes=len(classes), checksum=files_checksum(path.parent, [path]),
        source=f"precomputed features {path.name} ({x_train.shape[0]}/{x_test.shape[0]}, d={x_train.shape[1]})",
        classes=classes,
    )
    return ds
