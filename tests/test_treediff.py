"""`dphpo diff`: two results trees compared by what their files hold."""

import shutil

import numpy as np
import pytest

from dphpo.cli import main
from dphpo.io import write_json
from dphpo.treediff import compare_trees


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "a"
    run = root / "runs" / "digits" / "raw" / "linear_scaling" / "default" / "seed0" / "eps1"
    write_json(run / "result.json", {"test_accuracy": 0.9, "provenance": {"package_versions": {"dphpo_source_sha256": "a" * 64}}})
    np.savez(run / "model.npz", weights=np.arange(6.0).reshape(2, 3))
    (root / "tables").mkdir()
    (root / "tables" / "provenance.md").write_text(f"| source | {'a' * 12} |\n")
    (root / "logs").mkdir()
    (root / "logs" / "job.log").write_text("took 3 s\n")
    return root


def _copy(tree, name):
    other = tree.parent / name
    shutil.copytree(tree, other)
    return other


def test_a_copy_is_identical_and_logs_are_not_compared(tree):
    other = _copy(tree, "b")
    (other / "logs" / "job.log").write_text("took 4 s\n")
    found, n = compare_trees(tree, other)
    assert found == [] and n == 3


def test_a_changed_number_is_found_with_its_json_path(tree):
    other = _copy(tree, "b")
    result = other / "runs/digits/raw/linear_scaling/default/seed0/eps1/result.json"
    write_json(result, {"test_accuracy": 0.91, "provenance": {"package_versions": {"dphpo_source_sha256": "a" * 64}}})
    found, _ = compare_trees(tree, other)
    assert [(d.path.endswith("result.json"), d.what) for d in found] == [(True, "/test_accuracy: 0.9 vs 0.91")]


def test_the_code_version_is_ignored_only_when_asked(tree):
    other = _copy(tree, "b")
    result = other / "runs/digits/raw/linear_scaling/default/seed0/eps1/result.json"
    write_json(result, {"test_accuracy": 0.9, "provenance": {"package_versions": {"dphpo_source_sha256": "b" * 64}}})
    (other / "tables" / "provenance.md").write_text(f"| source | {'b' * 12} |\n")
    assert len(compare_trees(tree, other)[0]) == 2
    assert compare_trees(tree, other, ignore_code_version=True)[0] == []


def test_model_arrays_missing_files_and_the_exit_codes(tree, capsys):
    other = _copy(tree, "b")
    np.savez(other / "runs/digits/raw/linear_scaling/default/seed0/eps1/model.npz", weights=np.zeros((2, 3)))
    (other / "tables" / "extra.md").write_text("new\n")
    found, _ = compare_trees(tree, other)
    assert {(d.path.rsplit("/", 1)[-1], d.what) for d in found} == {
        ("extra.md", "only in the second tree"),
        ("model.npz", "array weights differs"),
    }
    assert main(["diff", str(tree), str(other)]) == 1
    assert main(["diff", str(tree), str(tree.parent / "missing")]) == 2
    assert main(["diff", str(tree), str(_copy(tree, "c"))]) == 0
    assert "0 difference(s)" in capsys.readouterr().out


def test_hdf5_shapes_dtypes_and_every_objects_attributes_count_and_a_damaged_file_is_named(tree):
    """Audit: HDF5 data were compared by their bytes alone and only the root's attributes: a (2, 3) and a (3, 2)
    array, a float32 zero and an int64 zero, or another unit of a dataset were "identical"; a truncated
    file raised a traceback (exit 1, "differences")."""
    import h5py

    def cache(root, shape=(2, 3), dtype="float32", unit="a"):
        path = root / "features" / "x.h5"
        path.parent.mkdir(exist_ok=True)
        with h5py.File(path, "w") as f:
            f.create_dataset("x", data=np.zeros(shape, dtype)).attrs["unit"] = unit
            f.attrs["created_utc"] = str(root)  # volatile: never a difference
        return path

    cache(tree)
    for kwargs, what in (({"shape": (3, 2)}, "dataset x: float32[2, 3] vs float32[3, 2]"),
                         ({"dtype": "int32"}, "dataset x: float32[2, 3] vs int32[2, 3]"),
                         ({"unit": "b"}, "attribute unit of x differs (values differ)"), ({}, None)):
        other = tree.parent / f"o{len(kwargs)}{kwargs.get('unit', '')}{kwargs.get('dtype', '')}"
        shutil.copytree(tree, other)
        cache(other, **kwargs)
        found = {d.path: d.what for d in compare_trees(tree, other)[0]}
        assert found.get("features/x.h5") == what
    damaged = _copy(tree, "damaged")
    h5 = damaged / "features" / "x.h5"
    h5.write_bytes(h5.read_bytes()[:100])
    (damaged / "runs/digits/raw/linear_scaling/default/seed0/eps1/result.json").write_text('{"test_accuracy": 0.')
    found = {d.path.rsplit("/", 1)[-1]: d.what for d in compare_trees(tree, damaged)[0]}
    assert found["x.h5"].startswith("unreadable as .h5") and found["result.json"].startswith("unreadable as .json")


def test_checkpoints_are_compared_by_their_tensors_not_their_timings_or_code_version(tree):
    """Audit: every .pt differed under --ignore-code-version (its package versions hold the source hash) and
    across any two runs (its time_s); a changed weight must still be found."""
    import torch

    def save(root, source, seconds, weight):
        ckpt = {"state_dict": {"w": torch.full((2, 2), weight), "n": torch.tensor(3)}, "time_s": {"train": seconds},
                "package_versions": {"dphpo_source_sha256": source}}
        (root / "pretrained").mkdir(exist_ok=True)
        torch.save(ckpt, root / "pretrained" / "syn.pt")

    other = _copy(tree, "b")
    save(tree, "a" * 64, 1.5, 0.25)
    save(other, "a" * 64, 2.5, 0.25)
    assert compare_trees(tree, other)[0] == []  # another run's timings
    save(other, "c" * 64, 2.5, 0.25)
    assert [d.path for d in compare_trees(tree, other)[0]] == ["pretrained/syn.pt"]
    assert compare_trees(tree, other, ignore_code_version=True)[0] == []
    save(other, "a" * 64, 1.5, 0.5)
    (found,) = compare_trees(tree, other, ignore_code_version=True)[0]
    assert found.path == "pretrained/syn.pt" and "/state_dict/w" in found.what
