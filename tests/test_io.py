"""Atomic outputs: a failed write keeps the previous file and leaves no temporary behind."""

import json
import os
import stat

import pytest

from dphpo.io import SEAL_KEY, atomic_path, read_json, write_json


def test_failed_write_keeps_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "out" / "result.json"
    write_json(path, {"a": 1})
    with pytest.raises(RuntimeError):
        with atomic_path(path) as tmp:
            tmp.write_text("half a fi")
            raise RuntimeError("killed")
    assert read_json(path) == {"a": 1}
    assert sorted(p.name for p in path.parent.iterdir()) == ["result.json"]


def test_written_files_get_the_mode_of_a_plain_open(tmp_path):
    old = os.umask(0o022)
    try:
        write_json(tmp_path / "r.json", {"eps": float("inf")})
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "r.json").stat().st_mode) == 0o644
    assert read_json(tmp_path / "r.json") == {"eps": "inf"}
    (tmp_path / "r.json").chmod(0o600)  # a file the user keeps private stays so when it is rewritten
    write_json(tmp_path / "r.json", {"eps": 1})
    assert stat.S_IMODE((tmp_path / "r.json").stat().st_mode) == 0o600


def test_torch_save_to_an_atomic_handle_writes_the_same_bytes_for_the_same_object(tmp_path):
    """Saved to a (random temporary) path, torch named the archive's folder after it: two identical runs
    wrote different bytes, so a checkpoint's sha256 in provenance differed between them."""
    import hashlib

    import torch

    from dphpo.io import atomic_open

    obj = {"state_dict": {"w": torch.arange(6.0).reshape(2, 3)}, "report": {"steps": 3}}
    for name in ("a.pt", "b.pt"):
        with atomic_open(tmp_path / name) as fh:
            torch.save(obj, fh)
    digest = [hashlib.sha256((tmp_path / n).read_bytes()).hexdigest() for n in ("a.pt", "b.pt")]
    assert digest[0] == digest[1]
    assert torch.equal(torch.load(tmp_path / "a.pt")["state_dict"]["w"], obj["state_dict"]["w"])


def test_a_language_jobs_staged_files_reach_their_run_folder_as_links(tmp_path):
    import os

    import pytest

    from dphpo import layout
    from dphpo.studies.staged import release_language_run

    job = str(tmp_path / "results/language/s/linear_scaling/seed0/job")
    os.makedirs(job)
    for name in layout.LANGUAGE_STAGED:
        (tmp_path / layout.language_staged(job, 3.0, name)).write_text(name)
    targets = [str(tmp_path / layout.path(t, study="s", method="linear_scaling", seed=0, eps=3.0))
               for t in (layout.LANGUAGE_RESULT, layout.LANGUAGE_MODEL, layout.LANGUAGE_INTERNAL)]
    release_language_run(job, "3", targets, str(tmp_path / "release.log"))
    assert (tmp_path / "release.log").read_text().count(" -> ") == 3
    for name, target in zip(layout.LANGUAGE_STAGED, targets):
        assert open(target).read() == name and os.path.samefile(target, layout.language_staged(job, "3", name))
        assert os.path.getmtime(target) >= os.path.getmtime(job)  # newer than the job: Snakemake keeps it
    with pytest.raises(FileNotFoundError, match="eps8.result.json"):
        release_language_run(job, "8", targets)


def test_a_record_holding_nan_is_refused_naming_the_file(tmp_path):
    """Audit: json reads NaN and Infinity, which the seal cannot cover: `dphpo release` ended with a bare
    'Out of range float values' and no file named."""
    from dphpo.errors import OutputFileError

    path = tmp_path / "result.json"
    path.write_text(json.dumps({"eps": float("nan"), SEAL_KEY: "x"}))
    with pytest.raises(OutputFileError, match=rf"{path} holds a value its seal cannot cover"):
        read_json(path)


def test_an_atomic_write_flushes_the_file_then_the_rename_to_disk(tmp_path, monkeypatch):
    """Renaming an unflushed temporary can leave an empty file under the new name after a power loss: the
    bytes are fsynced before the rename, and the folder (the rename itself) after it."""
    from dphpo.io import write_text

    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real_fsync(fd)))
    write_text(tmp_path / "a.txt", "content")
    assert (tmp_path / "a.txt").read_text() == "content"
    assert len(synced) == 2 and synced[0].startswith(str(tmp_path / ".a.txt.")) and synced[1] == str(tmp_path)
