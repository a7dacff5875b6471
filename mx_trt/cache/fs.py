"""Filesystem primitives of the cache that never follow a link inside its tree.

The cache directory itself may be a symbolic link (a user's choice); below it,
every directory is checked with ``lstat`` before use, files are read only when
they are regular files (checked before and after opening, so a swap is seen),
created with ``O_EXCL`` (which never follows a link) and lock files are opened
with ``O_NOFOLLOW``. Everything is created with the process umask: directories
``0o777 & ~umask``, files ``0o666 & ~umask``, nothing wider.
"""
from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import stat
from typing import Any, Dict, Optional, Tuple, Union

from mx_trt.cache.key import byte_view
from mx_trt.fsutil import write_new

_xxhash: Any
try:  # a pinned dependency (requirements/base.txt); sha256 keeps working without it
    import xxhash as _xxhash
except ImportError:  # pragma: no cover - exercised by the fallback tests through monkeypatch
    _xxhash = None

logger = logging.getLogger(__package__)

CHUNK = 4 << 20
#: Largest ``meta.json`` read (a real one is a few KiB).
MAX_META_BYTES = 16 << 20


class UnsafePathError(OSError):
    """A path inside the cache tree is a symbolic link or not of the expected kind."""


def describe(exc: BaseException) -> str:
    """One line for an ``OSError``: its reason and the path it concerns."""
    if isinstance(exc, OSError) and exc.strerror:
        where = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror}{where}"
    return str(exc) or type(exc).__name__


def process_umask() -> int:
    """The process umask, read without changing it (``/proc``); ``0o022`` if unknown."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def ensure_dir(path: str) -> None:
    """Make ``path`` a real directory (not a link): create it (umask applies) or check it.

    A symbolic link found there is removed (it points out of the tree) with a
    warning, and a directory created in its place.

    Raises:
        OSError: it cannot be created; :class:`UnsafePathError` when something
            other than a directory is there.
    """
    for _ in range(3):
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            try:
                os.mkdir(path)
            except FileExistsError:
                continue
            return
        if stat.S_ISDIR(st.st_mode):
            return
        if stat.S_ISLNK(st.st_mode):
            logger.warning("engine cache: %s is a symbolic link; removed, the cache never follows links in its tree",
                           path)
            os.unlink(path)
            continue
        raise UnsafePathError(20, "Not a directory", path)  # ENOTDIR
    raise UnsafePathError(20, "keeps changing while being created", path)


def check_dir(path: str) -> bool:
    """Whether ``path`` is a real directory; ``False`` if missing.

    Raises:
        UnsafePathError: it is a link or not a directory.
        OSError: it cannot be examined.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(40, "is a symbolic link", path)  # ELOOP
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePathError(20, "Not a directory", path)
    return True


@contextlib.contextmanager
def open_regular(path: str) -> Any:
    """Open ``path`` for reading only if it is a regular file, not through a link.

    Yields the binary file object and its ``os.stat_result``.

    Raises:
        FileNotFoundError: it does not exist.
        UnsafePathError: it is a link, a FIFO, a device, a directory, or was
            replaced while being opened.
        OSError: it cannot be read.
    """
    before = os.lstat(path)
    if not stat.S_ISREG(before.st_mode):
        kind = "a symbolic link" if stat.S_ISLNK(before.st_mode) else "not a regular file"
        raise UnsafePathError(40, f"is {kind}", path)
    with open(path, "rb") as f:
        after = os.fstat(f.fileno())
        if not os.path.samestat(before, after):
            raise UnsafePathError(40, "was replaced while being opened", path)
        yield f, after


def read_regular(path: str, limit: int) -> bytes:
    """The contents of the regular file ``path`` (see :func:`open_regular`), at most ``limit`` bytes.

    Raises:
        UnsafePathError: as :func:`open_regular`, or it is larger than ``limit``.
    """
    with open_regular(path) as (f, st):
        if st.st_size > limit:
            raise UnsafePathError(27, f"is larger than {limit} bytes", path)  # EFBIG
        return bytes(f.read(limit + 1))


def new_hasher(algo: Optional[str] = None) -> Tuple[str, Any]:
    """(name, hash object): ``algo`` if given (``"xxh3_128"`` or ``"sha256"``), else the fastest available.

    xxh3-128 (the pinned ``xxhash`` package, about 12 GB/s here) guards the cache
    against damage, not against an attacker, who could as well rewrite the recorded
    digest; sha256 is the fallback without ``xxhash``.

    Raises:
        ValueError: ``algo`` is unknown, or is xxh3_128 without ``xxhash``.
    """
    if algo in (None, "xxh3_128") and _xxhash is not None:
        return "xxh3_128", _xxhash.xxh3_128()
    if algo in (None, "sha256"):
        return "sha256", hashlib.sha256()
    raise ValueError(f"no {algo} digest here" + (" (xxhash is not installed)" if algo == "xxh3_128" else ""))


def stream_digest(f: Any, algo: Optional[str] = None) -> Tuple[int, str]:
    """(size, ``"<algo>:<hex>"``) of what is left to read in the binary file object ``f``; O(size)."""
    name, h = new_hasher(algo)
    size = 0
    while True:
        chunk = f.read(CHUNK)
        if not chunk:
            return size, f"{name}:{h.hexdigest()}"
        h.update(chunk)
        size += len(chunk)


def file_digest(path: str, algo: Optional[str] = None) -> Tuple[int, str]:
    """(size, ``"<algo>:<hex>"``) of the regular file ``path``; O(size). Raises as :func:`open_regular`."""
    with open_regular(path) as (f, _):
        return stream_digest(f, algo)


def write_bytes(data: Union[bytes, bytearray, memoryview], dst: str) -> Dict[str, Any]:
    """Create ``dst`` (never through a link), write and fsync ``data``; its size and digest (:func:`new_hasher`)."""
    mv = byte_view(data)
    write_new(dst, mv)
    name, h = new_hasher()
    h.update(mv)
    return {"size": mv.nbytes, "digest": f"{name}:{h.hexdigest()}"}


def write_path(src: str, dst: str, move: bool) -> Dict[str, Any]:
    """Copy (or, with ``move``, hard-link when possible) the file ``src`` to the new ``dst``."""
    if move:
        try:
            os.link(src, dst)  # O(1) on the same filesystem; the source goes after commit
        except OSError:
            pass  # another filesystem, or links not allowed: copy
        else:
            _narrow_mode(dst)
            size, digest = file_digest(dst)
            with open(dst, "rb") as f:
                os.fsync(f.fileno())
            return {"size": size, "digest": digest}
    name, h = new_hasher()
    size = 0
    with open(src, "rb") as fi, open(dst, "xb") as fo:
        while True:
            chunk = fi.read(CHUNK)
            if not chunk:
                break
            h.update(chunk)
            fo.write(chunk)
            size += len(chunk)
        fo.flush()
        os.fsync(fo.fileno())
    return {"size": size, "digest": f"{name}:{h.hexdigest()}"}


def _narrow_mode(path: str) -> None:
    """A file taken over by a link keeps no permission bit beyond ``0o666 & ~umask``."""
    allowed = 0o666 & ~process_umask()
    mode = stat.S_IMODE(os.lstat(path).st_mode)
    if mode & ~allowed:
        os.chmod(path, mode & allowed)


def unlink_quiet(path: str) -> None:
    """Remove a file or link if it is there; never raises ``OSError``."""
    with contextlib.suppress(OSError):
        os.unlink(path)


def remove_tree(path: str) -> None:
    """Remove ``path`` without following links: a link or file is unlinked, a directory deleted.

    Never raises ``OSError`` (best effort).
    """
    try:
        st = os.lstat(path)
    except OSError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path, ignore_errors=True)  # never follows links inside
    else:
        unlink_quiet(path)


def lstat_or_none(path: str) -> Optional[os.stat_result]:
    """``os.lstat(path)``, or ``None`` if it is missing or cannot be examined."""
    try:
        return os.lstat(path)
    except OSError:
        return None
