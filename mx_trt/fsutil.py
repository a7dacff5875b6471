"""Durable file writes: the one atomic file writer, and the fsync'd primitives under it.

A leaf (it imports only the standard library), so that every stage that writes a
file others may read at any moment uses it: the calibration table
(:mod:`mx_trt.export.calibration`), TensorRT's timing and runtime caches and plans
(:mod:`mx_trt.builder.backends.tensorrt.caches`), the plan cache's staged entries
(:mod:`mx_trt.cache.fs`) and the serving folder's owner record
(:mod:`mx_trt.serving.lifecycle`).

:func:`write_atomic` guarantees that a reader of ``path`` sees the old contents or
the new ones, never a part: the data goes to a new temporary file in the same
folder (so the rename stays on one filesystem), is fsynced, and replaces ``path``
with one ``os.replace``; the folder is then fsynced so that the rename survives a
crash. On any failure the temporary file is removed and ``path`` is untouched.
Temporary files are named ``mx_trt_write_<pid>_<random>.tmp``, the form
:func:`mx_trt.cache.locking.sweep_orphans` recognises, so what a killed process
left behind can be told from a live writer's file.
"""
from __future__ import annotations

import contextlib
import os
import secrets
from typing import Union

__all__ = ["TMP_PREFIX", "fsync_dir", "write_atomic", "write_new"]

#: Prefix of :func:`write_atomic`'s temporary files (``mx_trt_<what>_<pid>_``).
TMP_PREFIX = "mx_trt_write_"

Data = Union[bytes, bytearray, memoryview, str]


def _as_bytes(data: Data) -> Union[bytes, bytearray, memoryview]:
    return data.encode("utf-8") if isinstance(data, str) else data


def _write_fd(fd: int, data: Data) -> None:
    """Write all of ``data`` to the open ``fd``, fsync it and close it (also on failure)."""
    with os.fdopen(fd, "wb") as f:
        f.write(_as_bytes(data))
        f.flush()
        os.fsync(f.fileno())


def write_new(path: str, data: Data, mode: int = 0o666) -> None:
    """Create ``path`` (which must not exist; never through a link), write and fsync ``data``.

    Args:
        path: The new file.
        data: Its contents; a ``str`` is written as UTF-8.
        mode: Permission bits before the umask.

    Raises:
        OSError: ``path`` exists (a link included), or cannot be written.
    """
    _write_fd(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode), data)


def fsync_dir(path: str) -> None:
    """fsync a directory, so that a rename or a creation in it is durable.

    Raises:
        OSError: ``path`` is not a directory (a link to one included) or cannot be opened.
    """
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str, data: Data, mode: int = 0o666) -> None:
    """Replace ``path`` with ``data`` atomically and durably.

    A temporary file beside ``path`` is created (``O_EXCL``), written and
    fsynced, then renamed over ``path`` (``os.replace``); the folder is fsynced
    afterwards (best effort: some filesystems refuse it). Missing folders are
    created. O(len(data)).

    Args:
        path: The file to write or replace.
        data: Its new contents; a ``str`` is written as UTF-8.
        mode: Permission bits of the new file before the umask (``0o600``: private).

    Raises:
        OSError: the folder or the file cannot be written; the temporary file is
            removed and ``path`` keeps its old contents.
    """
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    while True:
        tmp = os.path.join(folder, f"{TMP_PREFIX}{os.getpid()}_{secrets.token_hex(6)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
        except FileExistsError:  # another writer drew the same name
            continue
        break
    try:
        _write_fd(fd, data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):
        fsync_dir(folder)
