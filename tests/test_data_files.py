"""The user's own data from files (datasets.<name>: {kind, path}): loaders, checksums and bad input."""

import csv
import json
import os
import shutil

import numpy as np
import pytest
from PIL import Image
from sklearn.datasets import load_digits

from dphpo.data import dataset as dataset_mod
from dphpo.data import files
from dphpo.data.files import FileDataset, content_checksum
from dphpo.data.image_files import ImageFiles
from dphpo.errors import DatasetError


def _spec(name, **section):
    return FileDataset.from_config(name, section)


@pytest.fixture(scope="module")
def digits():
    d = load_digits()
    return (d.images * 255 / 16).astype(np.uint8), d.target


@pytest.fixture
def image_folder(tmp_path, digits):
    images, labels = digits
    root = tmp_path / "digits_png"
    for i in range(60):
        split = "test" if i % 5 == 0 else "train"
        folder = root / split / f"class_{labels[i]}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(images[i]).save(folder / f"{i}.png")
    return root


def test_image_folder_reads_the_imagefolder_layout(image_folder, digits):
    ds = _spec("mine", kind="image_folder", path=str(image_folder)).load()
    assert ds.modality == "image" and ds.train_inputs.shape[1:] == (8, 8)
    assert ds.n_train + ds.n_test == 60 and ds.n_test == 12
    assert ds.classes == sorted(f"class_{c}" for c in set(digits[1][:60].tolist()))
    first = ds.train_inputs[0]
    assert first.dtype == np.uint8 and first.max() > 0


def test_the_checksum_follows_the_bytes_not_the_location(image_folder, tmp_path):
    before = _spec("mine", kind="image_folder", path=str(image_folder)).load().checksum
    moved = tmp_path / "elsewhere" / "copy"
    shutil.copytree(image_folder, moved)  # new place, new mtimes
    assert _spec("mine", kind="image_folder", path=str(moved)).load().checksum == before
    one = next((moved / "train").rglob("*.png"))
    Image.fromarray(np.zeros((8, 8), np.uint8)).save(one)
    assert _spec("mine", kind="image_folder", path=str(moved)).load().checksum != before


def test_the_workflow_checksum_reuses_unchanged_digests_and_sees_an_edit(image_folder, tmp_path):
    config = {"datasets": {"mine": {"kind": "image_folder", "path": str(image_folder)}}}
    cache = tmp_path / "cache"
    first = content_checksum(config, "mine", cache)
    assert first == _spec("mine", kind="image_folder", path=str(image_folder)).load().checksum  # one formula
    assert len(json.loads((cache / "mine.json").read_text())) == 60
    assert content_checksum(config, "mine", cache) == first
    one = next((image_folder / "train").rglob("*.png"))
    Image.fromarray(np.full((8, 8), 7, np.uint8)).save(one)
    assert content_checksum(config, "mine", cache) != first
    assert content_checksum({"datasets": {}}, "mnist", cache) is None  # registry datasets: their own checksums


def test_without_test_folder_a_seeded_split_is_recorded(image_folder):
    shutil.rmtree(image_folder / "test")
    ds = _spec("mine", kind="image_folder", path=str(image_folder), test_fraction=0.25).load()
    assert ds.n_test > 0 and "test_fraction=0.25" in ds.source
    again = _spec("mine", kind="image_folder", path=str(image_folder), test_fraction=0.25).load()
    assert np.array_equal(ds.test_labels, again.test_labels)


def test_mixed_sizes_and_modes_need_a_declared_shape_and_get_it(tmp_path):
    root = tmp_path / "mixed"
    for c, (size, mode) in enumerate([((10, 12), "L"), ((10, 12), "RGB"), ((20, 20), "RGB")]):
        for split in ("train", "test"):  # a test/ folder: the split is not what this test is about
            (root / split / f"c{c}").mkdir(parents=True)
            Image.new(mode, size).save(root / split / f"c{c}" / "a.png")
    section = {"kind": "image_folder", "path": str(root)}
    with pytest.raises(DatasetError, match=r"datasets\.mixed\.image_size: .* 2 sizes \(12x10, 20x20\)"):
        _spec("mixed", **section).load()
    with pytest.raises(DatasetError, match=r"datasets\.mixed\.image_mode: .* both grey and colour"):
        _spec("mixed", **section, image_size=[12, 10]).load()
    with pytest.raises(DatasetError, match=r"datasets\.mixed\.image_mode: expected one of grey, rgb, got 'RGB'"):
        _spec("mixed", **section, image_size=[12, 10], image_mode="RGB")
    ds = _spec("mixed", **section, image_size=[12, 10], image_mode="rgb").load()
    assert ds.train_inputs.shape[1:] == (12, 10, 3) and "resized to 12x10" in ds.source
    assert _spec("mixed", **section, image_size=[6, 6], image_mode="grey").load().train_inputs.shape[1:] == (6, 6)


@pytest.mark.parametrize("added", ["another size", "colour"])
def test_one_added_image_changes_no_other_images_pixels(image_folder, added):
    """Add/remove adjacency before training: with the shape declared, adding one image of another size
    (which would have broken a tie of the most common size) or the first colour image among grey ones
    (which turned every image RGB) leaves every other record exactly as it was read before."""
    section = {"kind": "image_folder", "path": str(image_folder), "image_size": [8, 8], "image_mode": "grey"}
    before = _spec("mine", **section).load()
    z = Image.new("RGB", (8, 8), (200, 10, 10)) if added == "colour" else Image.new("L", (11, 13), 90)
    z.save(image_folder / "test" / "class_0" / "z.png")  # in test/: the training split is untouched
    after = _spec("mine", **section).load()
    assert np.array_equal(after.train_inputs, before.train_inputs)
    assert after.test_inputs.shape[1:] == before.test_inputs.shape[1:] == (8, 8)
    assert after.n_test == before.n_test + 1
    shared = [t for t in after.test_inputs if any(np.array_equal(t, b) for b in before.test_inputs)]
    assert len(shared) == before.n_test


def test_how_files_are_read_is_part_of_the_dataset_options(tmp_path):
    """A changed test_fraction, column or image shape reads other records, so it changes the options the
    feature job's params, the cache's attributes and the run hash are built from; a registry dataset's
    options carry no such key."""
    from dphpo.data.files import dataset_options

    def options(**extra):
        return dataset_options({"datasets": {"mine": {"kind": "image_folder", "path": str(tmp_path)} | extra}}, "mine")

    assert options()["read"] == {"kind": "image_folder", "classes": None, "image_size": None, "image_mode": None,
                                 "test_fraction": 0.2, "split_seed": 0}
    assert options(test_fraction=0.5) != options() != options(image_size=[8, 8]) != options(image_mode="rgb")
    assert options(classes=["a", "b"]) != options(classes=["b", "a"])  # the order is the model's
    assert options(test_fraction=0.2) == options()  # a default written out changes nothing
    assert "read" not in dataset_options({"datasets": {"digits": {"max_train": 100}}}, "digits")
    # the declared size is what max_train keeps a share of: another size keeps other records
    assert options(max_train=50, public_n_train=100) != options(max_train=50, public_n_train=200)
    assert "public_n_train" not in options(public_n_train=100)  # without max_train every record is kept
    # a registry loader's options too (another corruption of CIFAR-10-C is other data)
    blur, noise = ({"datasets": {"cifar10_c": {"corruption": c}}} for c in ("gaussian_blur", "gaussian_noise"))
    assert dataset_options(blur, "cifar10_c")["read"] == {"corruption": "gaussian_blur"} != dataset_options(noise, "cifar10_c")["read"]


def _mixed_folder(root, with_test=True):
    """Random pixels in three sizes and modes (grey 10x12, RGB 10x12, RGB 20x20)."""
    rng = np.random.default_rng(0)
    for c, (size, mode) in enumerate([((10, 12), "L"), ((10, 12), "RGB"), ((20, 20), "RGB")]):
        for split in ("train", "test") if with_test else ("train",):
            (root / split / f"c{c}").mkdir(parents=True)
            for i in range(4):
                pixels = rng.integers(0, 256, (size[1], size[0]) + (() if mode == "L" else (3,)), dtype=np.uint8)
                Image.fromarray(pixels, mode).save(root / split / f"c{c}" / f"{i}.png")
    return root


def test_declared_classes_are_the_label_space_in_their_order(image_folder, tmp_path):
    """One record with a new label must not add a column to the model: labels map onto the declared
    classes (integers index them), a label outside them is refused, and the count K is len(classes)."""
    folders = sorted(p.name for p in (image_folder / "train").iterdir())
    declared = list(reversed(folders)) + ["class_unseen_in_test"]
    (image_folder / "train" / "class_unseen_in_test").mkdir()
    Image.new("L", (8, 8), 7).save(image_folder / "train" / "class_unseen_in_test" / "x.png")
    ds = _spec("mine", kind="image_folder", path=str(image_folder), classes=declared).load()
    assert ds.classes == declared and ds.num_classes == len(declared)
    assert set(np.asarray(ds.train_labels).tolist()) == set(range(len(declared)))  # indices in the declared order
    with pytest.raises(DatasetError, match=r"datasets\.mine\.classes: class folder\(s\) class_unseen_in_test .* not among"):
        _spec("mine", kind="image_folder", path=str(image_folder), classes=folders).load()

    rows = "text,label\n" + "".join(f"text {i},{'ab'[i % 2]}\n" for i in range(40))
    (tmp_path / "t.csv").write_text(rows)
    table = {"kind": "text_table", "path": str(tmp_path / "t.csv")}
    ds = _spec("t", **table, classes=["b", "a"]).load()
    assert ds.classes == ["b", "a"] and all(ds.train_labels[i] == (0 if t.endswith(("1", "3", "5", "7", "9")) else 1)
                                            for i, t in enumerate(ds.train_inputs))
    with pytest.raises(DatasetError, match=r"label\(s\) 'b' are not among the declared classes \(a, c\)"):
        _spec("t", **table, classes=["a", "c"]).load()
    (tmp_path / "n.csv").write_text("text,label\n" + "".join(f"text {i},{i % 2}\n" for i in range(40)))
    ints = {"kind": "text_table", "path": str(tmp_path / "n.csv")}
    assert _spec("n", **ints, classes=["neg", "pos"]).load().classes == ["neg", "pos"]  # names for 0 and 1
    with pytest.raises(DatasetError, match=r"label\(s\) 1 are not among the declared classes \(neg\) \(integer labels index"):
        _spec("n", **ints, classes=["neg"]).load()
    # integer names are the labels' values (stars 1..5), in the declared order
    by_value = _spec("n", **ints, classes=[1, 0]).load()
    assert by_value.classes == ["1", "0"] and all(by_value.train_labels[i] == (0 if t.endswith(("1", "3", "5", "7", "9")) else 1)
                                                 for i, t in enumerate(by_value.train_inputs))
    with pytest.raises(DatasetError, match=r"label\(s\) 0 are not among the declared classes \(1, 2\):"):
        _spec("n", **ints, classes=[1, 2]).load()


def test_undeclared_integer_labels_are_classes_by_value():
    """What `dphpo init` reads before any classes are declared: integer labels name their classes, so
    stars 1..5 or labels -1/1 are classes of their own, never indices that leave a class without examples."""
    y_train, y_test, classes = files.encode_labels([5, 1, 3, 1, 5], [3], "t")
    assert classes == ["1", "3", "5"] and y_train.tolist() == [2, 0, 1, 0, 2] and y_test.tolist() == [1]
    assert files.encode_labels([-1, 1, 1], [-1], "t")[2] == ["-1", "1"]
    with pytest.raises(DatasetError, match=r"integer labels index the declared classes, so must be 0..K-1, found -1"):
        files.encode_labels([-1, 1], [], "t", ["neg", "pos"])


@pytest.mark.parametrize(("cells", "classes", "first"), [
    (["+1", "-1", "+1", "-1"], ["-1", "1"], 1),  # signed labels: integers, not +1 a string beside -1
    (["2.0", "10.0", "1.0", "2.0"], ["1", "2", "10"], 1),  # integers as spreadsheets write them, by value
    (["0.5", "1.0", "1.5", "10.0"], ["0.5", "1", "1.5", "10"], 0),  # half-star ratings: by value, not as text
    (["pos", "neg", "pos", "neg"], ["neg", "pos"], 1),
])
def test_table_labels_as_written_become_classes_by_value(tmp_path, cells, classes, first):
    path = tmp_path / "t.csv"
    path.write_text("text,label,split\n" + "".join(f"row {i},{c},{'Train' if i < 4 else 'TEST'}\n"
                                                   for i, c in enumerate(cells + cells)))
    ds = _spec("t", kind="text_table", path=str(path), split_field="split").load()
    assert ds.classes == classes and ds.n_train == 4 and ds.n_test == 4  # Train / TEST: any case
    assert ds.train_labels[0] == first
    declared = _spec("t", kind="text_table", path=str(path), split_field="split", classes=classes).load()
    assert declared.train_labels.tolist() == ds.train_labels.tolist()  # init's declared classes read the same


def test_integer_labels_are_looked_up_by_value_among_decimal_classes(tmp_path):
    """Declared half-star classes and a table whose rows all happen to be whole stars: the labels name
    classes by value (indexing the class list would read 2 as '10' and train silently), so the class
    left without examples is named."""
    path = tmp_path / "t.csv"
    path.write_text("text,label\n" + "".join(f"row {i},{(1, 2, 10)[i % 3]}\n" for i in range(60)))
    ds = _spec("t", kind="text_table", path=str(path), classes=["1", "2", "10", "1.5"])
    with pytest.raises(DatasetError, match=r"class\(es\) 1.5 have no training examples"):
        ds.load()


@pytest.mark.parametrize("folder", ["grey_with_test", "grey_split", "mixed_with_test", "mixed_split"])
def test_a_folder_too_large_for_memory_stays_on_disk_and_reads_the_same(image_folder, tmp_path, monkeypatch, folder):
    if folder.startswith("mixed"):
        root = _mixed_folder(tmp_path / "mixed", with_test=folder.endswith("with_test"))
    else:
        root = image_folder
        if folder.endswith("split"):
            shutil.rmtree(root / "test")
    section = {"kind": "image_folder", "path": str(root), "public_n_train": 60}
    if folder.startswith("mixed"):
        section |= {"image_size": [12, 10], "image_mode": "rgb"}
    in_memory = _spec("mine", **section).load()
    monkeypatch.setattr(files, "STREAM_BYTES", 0)  # any folder is "too large"
    on_disk = _spec("mine", **section).load()
    assert isinstance(on_disk.train_inputs, ImageFiles) and isinstance(on_disk.test_inputs, ImageFiles)
    assert on_disk.train_inputs.shape == in_memory.train_inputs.shape  # grey stays grey, mixed become RGB
    for part in ("train", "test"):  # the same pixels, labels and per-record split
        assert np.array_equal(np.asarray(getattr(on_disk, f"{part}_inputs")), getattr(in_memory, f"{part}_inputs"))
        assert np.array_equal(getattr(on_disk, f"{part}_labels"), getattr(in_memory, f"{part}_labels"))
    assert (on_disk.checksum, on_disk.source) == (in_memory.checksum, in_memory.source)
    kept = [dataset_mod.subset(ds, max_train=5, seed=1, public_n_train=60) for ds in (on_disk, in_memory)]
    assert np.array_equal(np.asarray(kept[0].train_inputs), kept[1].train_inputs)  # per-record subsets too


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".jsonl"])
def test_text_tables_with_string_labels(tmp_path, suffix):
    rows = [{"text": f"text number {i}", "label": ["neg", "pos", "neutral"][i % 3]} for i in range(30)]
    path = tmp_path / f"texts{suffix}"
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        with path.open("w", newline="") as fh:
            w = csv.DictWriter(fh, ["text", "label"], delimiter="\t" if suffix == ".tsv" else ",")
            w.writeheader()
            w.writerows(rows)
    ds = _spec("texts", kind="text_table", path=str(path)).load()
    assert ds.modality == "text" and ds.classes == ["neg", "neutral", "pos"]
    assert ds.n_train + ds.n_test == 30 and 0 < ds.n_test < 15  # a per-record split: about 20 % of the rows


def test_a_tsv_quote_is_a_character_and_a_jsonl_line_must_be_an_object(tmp_path):
    # TSV has no quoting: a text opening with a quote used to swallow the rows up to the next quote
    path = tmp_path / "texts.tsv"
    lines = ["text\tlabel"] + [f'"quoted {i} text\tpos' if i % 3 == 0 else f"plain {i}\tneg" for i in range(12)]
    path.write_text("\n".join(lines) + "\n")
    ds = _spec("texts", kind="text_table", path=str(path)).load()
    texts = list(ds.train_inputs) + list(ds.test_inputs)
    assert len(texts) == 12 and '"quoted 0 text' in texts
    path = tmp_path / "texts.jsonl"
    path.write_text(json.dumps({"text": "a", "label": "x"}) + "\n" + json.dumps(["b", "y"]) + "\n")
    with pytest.raises(DatasetError, match=r"texts.jsonl line 2: not a JSON object"):
        _spec("texts", kind="text_table", path=str(path)).load()


def test_the_digest_cache_sees_a_copy_that_keeps_size_and_mtime(image_folder, tmp_path):
    # `cp -p` / `rsync -t`: other bytes, the same size and mtime; the inode or ctime tell the copy apart
    config = {"datasets": {"mine": {"kind": "image_folder", "path": str(image_folder)}}}
    cache = tmp_path / "cache"
    first = content_checksum(config, "mine", cache)
    one = next((image_folder / "train").rglob("*.png"))
    st = one.stat()
    other = tmp_path / "other.png"
    Image.fromarray(np.full((8, 8), 9, np.uint8)).save(other)
    other.write_bytes(other.read_bytes()[: st.st_size].ljust(st.st_size, b"\0"))  # the same size
    shutil.move(other, one)
    os.utime(one, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert one.stat().st_size == st.st_size and one.stat().st_mtime_ns == st.st_mtime_ns
    assert content_checksum(config, "mine", cache) != first


def test_sentence_pairs_and_a_split_column(tmp_path):
    path = tmp_path / "pairs.csv"
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["a", "b", "label", "split"])
        for i in range(8):
            w.writerow([f"first {i}", f"second {i}", i % 2, "test" if i >= 6 else "train"])
    ds = _spec("pairs", kind="text_table", path=str(path), text_field=["a", "b"], split_field="split").load()
    assert ds.n_train == 6 and ds.n_test == 2 and ds.train_inputs[0] == "first 0\nsecond 0"
    assert ds.num_classes == 2 and ds.classes == ["0", "1"]


def test_features_from_an_npz(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "feats.npz"
    np.savez(path, train_x=rng.normal(size=(40, 5)), train_y=np.arange(40) % 4, test_x=rng.normal(size=(10, 5)),
             test_y=np.arange(10) % 4)
    ds = _spec("feats", kind="features", path=str(path)).load()
    assert ds.modality == "features" and ds.train_inputs.shape == (40, 5) and ds.train_inputs.dtype == np.float32
    assert ds.num_classes == 4


# -- bad input: each names the key or the file --------------------------------------------------------


def test_missing_path_and_wrong_shapes(tmp_path):
    with pytest.raises(DatasetError, match="datasets.mine.path: .* does not exist"):
        _spec("mine", kind="image_folder", path=str(tmp_path / "nope")).load()
    (tmp_path / "flat").mkdir()
    with pytest.raises(DatasetError, match="has no train/ folder"):
        _spec("mine", kind="image_folder", path=str(tmp_path / "flat")).load()
    with pytest.raises(DatasetError, match="datasets.mine.kind"):
        _spec("mine", kind="images", path=str(tmp_path))


def test_a_class_without_training_examples(image_folder):
    (image_folder / "train" / "class_empty").mkdir()
    with pytest.raises(DatasetError, match="class_empty .* hold no images"):
        _spec("mine", kind="image_folder", path=str(image_folder)).load()


def test_hidden_folders_and_files_are_neither_classes_nor_images(image_folder):
    """What tools leave in a folder (a thumbnail cache, an empty .ipynb_checkpoints/, macOS' ._x.png
    AppleDouble files, which are not images) is skipped: same classes, same records, same checksum."""
    before = _spec("mine", kind="image_folder", path=str(image_folder)).load()
    thumbs = image_folder / "train" / ".thumbs"
    thumbs.mkdir()
    Image.fromarray(np.zeros((8, 8), np.uint8)).save(thumbs / "t.png")
    (image_folder / "train" / ".ipynb_checkpoints").mkdir()
    (image_folder / "train" / "class_0" / "._0.png").write_bytes(b"\x00\x05\x16\x07 AppleDouble")
    after = _spec("mine", kind="image_folder", path=str(image_folder)).load()
    assert after.classes == before.classes and after.n_train == before.n_train
    assert after.checksum == before.checksum


def test_sixteen_bit_grey_keeps_its_range_and_float_images_are_refused(image_folder):
    """A 16-bit grey image (microscopy, medical) maps 0..65535 onto 0..255 by a fixed division, not PIL's
    convert("L"), which clips everything above 255 to white; a 32-bit float image has no fixed range: refused."""
    wide = np.arange(64, dtype=np.uint16).reshape(8, 8) * 1000
    for path in (image_folder / "train").rglob("*.png"):
        Image.fromarray(wide).save(path)
    ds = _spec("mine", kind="image_folder", path=str(image_folder)).load()
    assert ds.train_inputs[0].tolist() == (wide // 257).astype(np.uint8).tolist()
    one = next((image_folder / "train").rglob("*.png"))
    Image.fromarray(wide.astype(np.float32)).save(one.with_suffix(".tif"))
    with pytest.raises(DatasetError, match=r"\.tif is 32-bit float, whose range is not fixed"):
        _spec("mine", kind="image_folder", path=str(image_folder)).load()


def test_an_unreadable_or_empty_image(image_folder):
    bad = image_folder / "train" / "class_0" / "broken.png"
    bad.write_bytes(b"not a png")
    with pytest.raises(DatasetError, match="cannot read image .*broken.png"):
        _spec("mine", kind="image_folder", path=str(image_folder)).load()


def test_empty_texts_unknown_splits_and_mixed_labels(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("text,label\nhello,a\n,b\n")
    with pytest.raises(DatasetError, match="t.csv row 2: empty text"):
        _spec("t", kind="text_table", path=str(path)).load()
    path.write_text("text,label,split\nhello,a,train\nworld,b,validation\n")
    with pytest.raises(DatasetError, match=r"split_field: t.csv has split value\(s\) \['validation'\]"):
        _spec("t", kind="text_table", path=str(path), split_field="split").load()
    rows = [{"text": "x", "label": 1}, {"text": "y", "label": "b"}]
    jl = tmp_path / "t.jsonl"
    jl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DatasetError, match="labels must be all integers or all strings"):
        _spec("t", kind="text_table", path=str(jl)).load()
    with pytest.raises(DatasetError, match="text_field: column 'body' is not in t.csv"):
        _spec("t", kind="text_table", path=str(path), text_field="body").load()


def test_bad_features(tmp_path):
    path = tmp_path / "f.npz"
    good = dict(train_x=np.ones((4, 3)), train_y=np.array([0, 1, 0, 1]), test_x=np.ones((2, 3)), test_y=np.array([0, 1]))
    np.savez(path, **(good | {"train_x": np.array([[1.0, np.nan, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0]])}))
    with pytest.raises(DatasetError, match="train_x holds NaN or inf"):
        _spec("f", kind="features", path=str(path)).load()
    np.savez(path, **(good | {"test_x": np.ones((2, 4))}))
    with pytest.raises(DatasetError, match="train_x has width 3 but test_x 4"):
        _spec("f", kind="features", path=str(path)).load()
    np.savez(path, **{k: v for k, v in good.items() if k != "test_y"})
    with pytest.raises(DatasetError, match="lacks array\\(s\\) test_y"):
        _spec("f", kind="features", path=str(path)).load()
    np.savez(path, **(good | {"train_y": np.array([0, 0, 0, 0])}))
    with pytest.raises(DatasetError, match="class\\(es\\) 1 have no training examples"):
        _spec("f", kind="features", path=str(path)).load()


# -- the workflow on the user's own files (issue 17) ------------------------------------------------


@pytest.mark.slow
def test_own_images_texts_and_features_run_the_rule_and_a_baseline_end_to_end(tmp_path, digits):
    import subprocess
    import sys
    from pathlib import Path

    import yaml

    repo = Path(__file__).resolve().parents[1]
    images, labels = digits
    folder = tmp_path / "pngs"
    for i in range(400):
        target = folder / ("test" if i % 5 == 0 else "train") / f"digit{labels[i]}"
        target.mkdir(parents=True, exist_ok=True)
        Image.fromarray(images[i]).save(target / f"{i}.png")
    words = {0: "awful bad sad", 1: "great good happy"}
    with (tmp_path / "texts.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["text", "label"])
        for i in range(300):
            w.writerow([f"{words[i % 2]} message {i}", ["negative", "positive"][i % 2]])
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(3, 16))
    y_tr, y_te = np.arange(600) % 3, np.arange(150) % 3
    np.savez(tmp_path / "feats.npz", train_x=centers[y_tr] + rng.normal(size=(600, 16)), train_y=y_tr,
             test_x=centers[y_te] + rng.normal(size=(150, 16)), test_y=y_te)
    config = {
        "data_dir": str(tmp_path / "data"),
        "datasets": {
            "my_images": {"kind": "image_folder", "path": str(folder), "classes": [f"digit{d}" for d in range(10)],
                          "public_n_train": 320, "test_split": "public"},
            "my_texts": {"kind": "text_table", "path": str(tmp_path / "texts.csv"), "classes": ["negative", "positive"],
                         "public_n_train": 240, "test_split": "public"},
            "my_features": {"kind": "features", "path": str(tmp_path / "feats.npz"), "classes": ["a", "b", "c"],
                            "public_n_train": 600, "test_split": "public"},
        },
        "studies": [{"dataset": "my_images", "extractor": "raw"}, {"dataset": "my_texts", "extractor": "minilm_l6"},
                    {"dataset": "my_features", "extractor": "given"}],
        "extractors": {"raw": {"kind": "raw"}, "minilm_l6": {"kind": "minilm"}, "given": {"kind": "identity"}},
        "privacy": {"delta": 1.0e-5, "target_eps": [2]},
        "seeds": [0],
        "search_space": {"eta": {"min": 0.05, "max": 2.0, "num": 3}, "steps": [5, 10]},
        "selection": {"rule": "noisy_train_accuracy", "noise_std": 10.0},
        "baselines": {"methods": ["random_search"]},
        "threads": {"extract": 1, "train": 1},
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--snakefile", str(repo / "Snakefile"), "-d", str(tmp_path), "--cores", "2",
         "--configfile", str(tmp_path / "config.yaml"), "--replace-workflow-config"],
        cwd=repo, capture_output=True, text=True, timeout=1200,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    for dataset, extractor in [("my_images", "raw"), ("my_texts", "minilm_l6"), ("my_features", "given")]:
        for method in ("linear_scaling", "random_search"):
            result = json.loads((tmp_path / "results/runs" / dataset / extractor / method / "default/seed0/eps2/result.json").read_text())
            assert result["total_eps"] <= 2 + 1e-9 and 0 <= result["test_accuracy"] <= 1, (dataset, method)
    table = (tmp_path / "results/tables/hpo_comparison.md").read_text()
    assert "my_images" in table and "my_texts" in table and "my_features" in table

    def dry_run(cfg):
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
        out = subprocess.run(
            [sys.executable, "-m", "snakemake", "--snakefile", str(repo / "Snakefile"), "-d", str(tmp_path), "-n", "--cores", "1",
             "--configfile", str(tmp_path / "config.yaml"), "--replace-workflow-config"],
            cwd=repo, capture_output=True, text=True, timeout=600,
        )
        assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
        return out.stdout + out.stderr

    # the data moved: nothing reruns; one image edited: its feature cache (and what reads it) rebuilds
    moved = tmp_path / "moved pngs"
    shutil.move(folder, moved)
    config["datasets"]["my_images"]["path"] = str(moved)
    assert "Nothing to be done" in dry_run(config)
    Image.fromarray(np.zeros((8, 8), np.uint8)).save(next((moved / "train").rglob("*.png")))
    log = dry_run(config)
    assert "output: results/features/my_images/raw.h5" in log and "results/features/my_texts" not in log
    # how a table is read changed (another split): its features rebuild, not reused from the old split
    config["datasets"]["my_texts"]["test_fraction"] = 0.3
    assert "output: results/features/my_texts/minilm_l6.h5" in dry_run(config)


def test_a_null_text_a_repeated_header_and_complex_features_are_refused(tmp_path):
    """Audit: a Parquet null text was read as the text "nan" (NaN is truthy), a CSV header naming `text` twice
    used its last column without a word, and complex features lost their imaginary part to a NumPy warning."""
    import pandas as pd

    frame = pd.DataFrame({"text": [f"text {i}" for i in range(12)], "label": [i % 2 for i in range(12)]})
    frame.loc[3, "text"] = None
    frame.to_parquet(tmp_path / "t.parquet")
    with pytest.raises(DatasetError, match="row 4: empty text in text"):
        _spec("t", kind="text_table", path=str(tmp_path / "t.parquet")).load()
    (tmp_path / "r.csv").write_text("text,label,text\n" + "".join(f"a {i},{i % 2},b {i}\n" for i in range(12)))
    with pytest.raises(DatasetError, match=r"datasets.t.path: r.csv's header repeats column 'text'"):
        _spec("t", kind="text_table", path=str(tmp_path / "r.csv")).load()
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "c.npz", train_x=rng.normal(size=(40, 5)) + 1j, train_y=np.arange(40) % 4,
             test_x=rng.normal(size=(10, 5)), test_y=np.arange(10) % 4)
    with pytest.raises(DatasetError, match="train_x must be real numbers"):
        _spec("c", kind="features", path=str(tmp_path / "c.npz")).load()
