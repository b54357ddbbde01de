"""Atomic outputs: a failed write keeps the previous file and leaves no temporary behind."""

import os
import stat

import pytest

from dphpo.io import atomic_path, read_json, write_json


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
