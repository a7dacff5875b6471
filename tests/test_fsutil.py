"""mx_trt.fsutil: the atomic file writer every stage uses, and its fsync'd primitives."""
from __future__ import annotations

import os
import stat

import pytest

from mx_trt import fsutil
from mx_trt.fsutil import TMP_PREFIX, fsync_dir, write_atomic, write_new


def _leftovers(folder) -> list:
    return [p for p in os.listdir(folder) if p.startswith(TMP_PREFIX)]


def test_write_atomic_creates_then_replaces_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "sub" / "f.bin"
    write_atomic(str(path), b"one")
    assert path.read_bytes() == b"one"
    write_atomic(str(path), "two, as text")
    assert path.read_text(encoding="utf-8") == "two, as text"
    assert _leftovers(path.parent) == []


def test_write_atomic_writes_in_the_same_folder_fsyncs_and_renames(tmp_path, monkeypatch):
    path = tmp_path / "f.bin"
    path.write_bytes(b"old")
    calls = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        calls.append(("fsync", stat.S_ISDIR(os.fstat(fd).st_mode)))
        real_fsync(fd)

    def replace(src, dst):
        calls.append(("replace", os.path.dirname(src) == str(tmp_path), os.path.basename(src).startswith(
            f"{TMP_PREFIX}{os.getpid()}_"), open(src, "rb").read(), path.read_bytes()))
        real_replace(src, dst)

    monkeypatch.setattr(fsutil.os, "fsync", fsync)
    monkeypatch.setattr(fsutil.os, "replace", replace)
    write_atomic(str(path), b"new")
    # The file is fsynced before the rename, the old contents are in place until then, and the folder after.
    assert calls == [("fsync", False), ("replace", True, True, b"new", b"old"), ("fsync", True)]
    assert path.read_bytes() == b"new"


def test_write_atomic_failure_keeps_the_old_file_and_removes_the_temporary_one(tmp_path, monkeypatch):
    path = tmp_path / "f.bin"
    path.write_bytes(b"old")

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fsutil.os, "fsync", full)
    with pytest.raises(OSError, match="No space"):
        write_atomic(str(path), b"new")
    assert path.read_bytes() == b"old"
    assert _leftovers(tmp_path) == []


def test_write_atomic_mode_and_umask(tmp_path):
    private, shared = tmp_path / "private", tmp_path / "shared"
    old = os.umask(0o022)
    try:
        write_atomic(str(private), b"x", mode=0o600)
        write_atomic(str(shared), b"x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert stat.S_IMODE(shared.stat().st_mode) == 0o644


def test_write_new_refuses_an_existing_path_and_a_link(tmp_path):
    path = tmp_path / "f"
    write_new(str(path), b"data")
    assert path.read_bytes() == b"data"
    with pytest.raises(FileExistsError):
        write_new(str(path), b"again")
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "target")
    with pytest.raises(FileExistsError):
        write_new(str(link), b"through the link")
    assert not (tmp_path / "target").exists()


def test_fsync_dir_refuses_a_file(tmp_path):
    fsync_dir(str(tmp_path))
    f = tmp_path / "f"
    f.write_bytes(b"")
    with pytest.raises(NotADirectoryError):
        fsync_dir(str(f))
