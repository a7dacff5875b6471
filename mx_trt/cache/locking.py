"""Inter-process locks of the cache, its private staging area, and the sweeping of leftovers.

* Per-key locks: ``locks/<key>.lock`` held with ``flock`` (released by the
  kernel when the holder dies), plus a re-entrant thread lock per key shared by
  every :class:`~mx_trt.cache.EngineCache` of the process.
* Staging: a private path under ``tmp/`` guarded by a ``flock`` its owner holds
  while alive; whatever a dead process left there is swept by the next writer.
* Work directories outside any cache (a backend building without one) are
  named ``mx_trt_<what>_<pid>_...`` in the system temporary folder and swept
  once their process is gone (:func:`sweep_orphans`).
"""
from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import secrets
import stat
import tempfile
import threading
import time
from typing import Dict, Iterator, Optional, Tuple

from mx_trt.cache.fs import ensure_dir, lstat_or_none, remove_tree, unlink_quiet
from mx_trt.cache.key import check_key

logger = logging.getLogger(__package__)

LOCKS = "locks"
# A staging lock file is created under a ".new" name and renamed once locked;
# one left behind by a crash in between is harmless and swept after this delay.
STALE_NEW_LOCK_S = 3600.0
#: The whole name of a work folder (:func:`make_work_dir`: ``mkdtemp``'s 8 random characters after the pid)
#: or of an atomic write's temporary file (``mx_trt.fsutil``: 12 hex digits and ``.tmp``). Anchored at both
#: ends: a folder of ``TemporaryDirectory(prefix="mx_trt_native_")`` whose random part happens to read
#: ``717_oppy`` is not the work folder of a process 717.
_ORPHAN_RE = re.compile(r"mx_trt_[a-z]+_(\d+)_(?:[a-z0-9_]{8}|[0-9a-f]{12}\.tmp)$")


class _KeyLock:
    """Per-process state of one key's lock: a re-entrant thread lock and the flock's fd."""

    __slots__ = ("rlock", "depth", "fd")

    def __init__(self) -> None:
        self.rlock = threading.RLock()
        self.depth = 0
        self.fd: Optional[int] = None


# Shared by every EngineCache of the process, keyed by (real cache directory, key),
# so two instances on the same directory also exclude each other's threads.
_registry_guard = threading.Lock()
_registry: Dict[Tuple[str, str], _KeyLock] = {}


def flock(path: str, blocking: bool, create: bool = True) -> Optional[int]:
    """Take an exclusive ``flock`` on ``path`` and return its fd; ``None`` if busy.

    The file is never opened through a symbolic link (``O_NOFOLLOW``). A holder
    may unlink the file before releasing it (eviction does), so after locking
    we check that the path still names the locked inode, and retry if not.

    Raises:
        OSError: the file cannot be opened (``FileNotFoundError`` when
            ``create`` is false and it does not exist; ``ELOOP`` for a link).
    """
    flags = os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK | (os.O_CREAT if create else 0)
    while True:
        fd = os.open(path, flags, 0o666)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(21, "not a regular file", path)
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        try:
            same = os.path.samestat(os.fstat(fd), os.lstat(path))
        except FileNotFoundError:
            same = False
        except BaseException:
            os.close(fd)
            raise
        if same:
            return fd
        os.close(fd)
        if not create:
            return None


def unlock(fd: int) -> None:
    """Release a lock taken by :func:`flock` and close its fd."""
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


class _Staging:
    """A private path under ``tmp/``, guarded by a flock held for the object's life.

    The lock file ``<id>.lock`` appears only once locked (it is created as
    ``<id>.lock.new`` and renamed), and exists before the directory ``<id>``,
    so a sweeper that can lock it knows the owner is gone.
    """

    def __init__(self, tmp_root: str, make_dir: bool) -> None:
        self.path = os.path.join(tmp_root, f"{os.getpid()}-{secrets.token_hex(8)}")
        self._lock_path = self.path + ".lock"
        new = self._lock_path + ".new"
        fd = os.open(new, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # a brand-new file: never contended
            os.rename(new, self._lock_path)
        except BaseException:
            os.close(fd)
            unlink_quiet(new)
            raise
        self._fd: Optional[int] = fd
        if make_dir:
            try:
                os.mkdir(self.path)
            except BaseException:
                self.close()
                raise

    def close(self) -> None:
        """Delete whatever is at :attr:`path`, then the lock file. Idempotent, never raises OSError."""
        if self._fd is None:
            return
        remove_tree(self.path)
        unlink_quiet(self._lock_path)
        with contextlib.suppress(OSError):
            unlock(self._fd)
        self._fd = None

    def __enter__(self) -> str:
        return self.path

    def __exit__(self, *exc: object) -> None:
        self.close()


def sweep_tmp(tmp: str) -> None:
    """Delete what dead processes left in the cache's ``tmp/``. O(items in tmp/); best effort.

    ``tmp`` itself must have been checked to be a real directory.
    """
    try:
        names = os.listdir(tmp)
    except OSError:
        return
    now = time.time()
    for name in names:
        path = os.path.join(tmp, name)
        try:
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                unlink_quiet(path)  # nothing of ours is a link
            elif name.endswith(".lock"):
                fd = flock(path, blocking=False, create=False)
                if fd is None:
                    continue  # its owner is alive
                try:
                    remove_tree(path[: -len(".lock")])
                    unlink_quiet(path)
                finally:
                    unlock(fd)
                logger.debug("engine cache: removed %s left by a dead process", path[: -len(".lock")])
            elif name.endswith(".lock.new"):
                if now - st.st_mtime > STALE_NEW_LOCK_S:
                    unlink_quiet(path)
            elif lstat_or_none(path + ".lock") is None:
                # Owners create the lock before the directory and delete it after.
                remove_tree(path)
        except OSError:
            continue


def make_work_dir(prefix: str, parent: Optional[str] = None) -> str:
    """A new private directory for a build's temporary files (mode 0700).

    Under ``parent`` when given (a cache's staging directory, swept with it);
    otherwise in the system temporary folder, named ``<prefix><pid>_...`` so
    that :func:`sweep_orphans` removes it once this process is gone.

    Args:
        prefix: ``mx_trt_<what>_``, e.g. ``"mx_trt_ort_"``.
        parent: A directory to create it in, or ``None``.
    """
    return tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}_", dir=parent)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: alive, someone else's
        return True
    return True


def sweep_orphans(folder: Optional[str] = None) -> int:
    """Remove ``mx_trt_<what>_<pid>_*`` work directories of dead processes; how many.

    Only entries owned by this user, not links, whose process no longer exists.
    Best effort, O(items in the folder).

    Args:
        folder: Where to look (default: the system temporary folder).
    """
    folder = folder or tempfile.gettempdir()
    try:
        names = os.listdir(folder)
    except OSError:
        return 0
    removed = 0
    me = os.getpid()
    for name in names:
        m = _ORPHAN_RE.match(name)
        if m is None or int(m.group(1)) == me:
            continue
        path = os.path.join(folder, name)
        st = lstat_or_none(path)
        if st is None or stat.S_ISLNK(st.st_mode) or st.st_uid != os.getuid() or _alive(int(m.group(1))):
            continue
        remove_tree(path)
        removed += 1
        logger.debug("removed %s, left by process %s which is gone", path, m.group(1))
    return removed


class LockingMixin:
    """``lock(key)`` of :class:`~mx_trt.cache.EngineCache` (thread and process exclusion)."""

    directory: str
    read_only: bool
    _identity: str
    _lock_warned: bool

    def _lock_file(self, key: str) -> str:
        return os.path.join(self.directory, LOCKS, key + ".lock")

    def _state(self, key: str) -> _KeyLock:
        with _registry_guard:
            return _registry.setdefault((self._identity, key), _KeyLock())

    def lock(self, key: str) -> "contextlib.AbstractContextManager[None]":
        """Hold ``key`` exclusively across threads and processes (``with cache.lock(key):``).

        Re-entrant within a thread. Other threads of this process wait on a
        thread lock, other processes on ``flock`` of ``locks/<key>.lock``
        (released by the kernel if the holder dies). If the lock file cannot be
        used (read-only cache...), one warning is logged and only threads are
        excluded; a cache opened ``read_only`` excludes only threads, silently.
        Entries whose lock is held are never evicted.

        Raises:
            CacheError: invalid key (raised by this call, before any waiting).
        """
        check_key(key)
        return self._hold(key)

    @contextlib.contextmanager
    def _hold(self, key: str) -> Iterator[None]:
        state = self._state(key)
        with state.rlock:
            if state.depth == 0:
                state.fd = None if self.read_only else self._acquire_file_lock(key)
            state.depth += 1
            try:
                yield
            finally:
                state.depth -= 1
                if state.depth == 0 and state.fd is not None:
                    fd, state.fd = state.fd, None
                    with contextlib.suppress(OSError):
                        unlock(fd)

    def _acquire_file_lock(self, key: str) -> Optional[int]:
        path = self._lock_file(key)
        try:
            os.makedirs(self.directory, exist_ok=True)
            ensure_dir(os.path.dirname(path))
            fd = flock(path, blocking=False)
            if fd is None:
                logger.info("engine cache: waiting for another process working on entry %s", key)
                fd = flock(path, blocking=True)
            return fd
        except OSError as e:
            if not self._lock_warned:
                self._lock_warned = True
                logger.warning(
                    "engine cache: cannot lock %s (%s); processes sharing %s may build the same engine twice",
                    path, e, self.directory,
                )
            return None

    @contextlib.contextmanager
    def _lock_if_free(self, key: str) -> Iterator[bool]:
        """Like :meth:`lock` without waiting: yields whether the lock was taken.

        A lock held by the calling thread itself counts as busy.
        """
        state = self._state(key)
        if not state.rlock.acquire(blocking=False):
            yield False
            return
        try:
            fd: Optional[int] = None
            if state.depth == 0 and not self.read_only:
                try:
                    ensure_dir(os.path.join(self.directory, LOCKS))
                    fd = flock(self._lock_file(key), blocking=False)
                except OSError:
                    fd = None
            if fd is None:
                yield False
                return
            state.depth, state.fd = 1, fd
            try:
                yield True
            finally:
                state.depth, state.fd = 0, None
                with contextlib.suppress(OSError):
                    unlock(fd)
        finally:
            state.rlock.release()


__all__ = ["LOCKS", "LockingMixin", "_Staging", "flock", "make_work_dir", "sweep_orphans", "sweep_tmp",
           "unlock"]
