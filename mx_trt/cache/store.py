"""The engine cache itself: configuration, reading, atomic writing (see the package docstring)."""
from __future__ import annotations

import contextlib
import logging
import os
import stat
import time
from typing import Any, ContextManager, Dict, Optional, Tuple

from mx_trt.errors import CacheError
from mx_trt.cache.entry import Bad, CacheEntry, Vanished, check_entry_dir, make_entry, read_record, verify_files
from mx_trt.cache.eviction import AUX, MIB, EvictionMixin
from mx_trt.cache.fs import describe, ensure_dir, lstat_or_none, remove_tree, unlink_quiet
from mx_trt.cache.key import META, check_key
from mx_trt.cache.locking import LOCKS, LockingMixin, _Staging, sweep_tmp
from mx_trt.cache.writing import TMP, WritingMixin
from mx_trt.settings import CACHE_DIR_ENV, DEFAULT_CACHE_MAX_MB, Settings

logger = logging.getLogger(__package__)

#: Default size limit in MiB: room for a few dozen large engines while staying
#: small next to a typical disk. ``MXNET_TENSORRT_CACHE_MAX_MB`` overrides it.
DEFAULT_MAX_MB: int = DEFAULT_CACHE_MAX_MB

ENV_DIR = CACHE_DIR_ENV


class EngineCache(WritingMixin, LockingMixin, EvictionMixin):
    """A size-limited, multi-process-safe cache of engines on disk.

    Typical use by a backend (build once even when processes race)::

        key = make_key({...settings...}, weights)
        with cache.lock(key):
            entry = cache.get(key)
            if entry is None:
                plan = build()
                try:
                    entry = cache.put(key, {"inputs": ...}, {"plan": plan})
                except CacheError:
                    pass  # already logged; run without caching

    Instances are cheap and hold no open files; threads may share one.

    Attributes:
        directory: Absolute path of the cache directory (created on first write).
        max_bytes: Size limit of all entries together; ``0`` means no limit.
        read_only: Nothing is ever written, renamed or removed: corrupt entries
            are skipped, not removed; ``put`` and ``path`` raise; locks only
            exclude this process's threads.
    """

    def __init__(self, directory: str, max_bytes: Optional[int] = None, *, read_only: bool = False) -> None:
        """Use ``directory`` (not touched until needed).

        Args:
            directory: The cache directory; ``~`` is expanded, relative paths
                are made absolute now.
            max_bytes: Size limit in bytes; ``None`` means
                :data:`DEFAULT_MAX_MB` MiB, ``0`` means no limit.
            read_only: Never modify anything in ``directory`` (an export folder).

        Raises:
            CacheError: ``max_bytes`` is negative or not an int.
        """
        if max_bytes is None:
            max_bytes = DEFAULT_MAX_MB * MIB
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise CacheError(f"max_bytes={max_bytes!r}: expected an int >= 0 (0 = no limit)")
        self.directory = os.path.abspath(os.path.expanduser(os.fspath(directory)))
        self.max_bytes = max_bytes
        self.read_only = bool(read_only)
        self._identity = os.path.realpath(self.directory)
        self._lock_warned = False

    def __repr__(self) -> str:
        limit = f"{self.max_bytes / MIB:g} MiB" if self.max_bytes else "no limit"
        return f"EngineCache({self.directory!r}, {limit}{', read-only' if self.read_only else ''})"

    @classmethod
    def from_settings(cls, settings: Settings) -> Optional["EngineCache"]:
        """The plan cache of a bind with ``settings``, or ``None`` if it has none.

        ``settings.cache_dir`` ``None`` or blank: no cache. ``settings.cache_max_mb``:
        the limit in MiB, ``0`` meaning none; ``None``: :data:`DEFAULT_MAX_MB`.
        Nothing is created or checked on disk here (see :meth:`probe`).

        Raises:
            CacheError: a cache variable of the environment had a bad value
                (``settings.cache_errors``; the message names the variable, the
                value and what it may be).
        """
        if settings.cache_errors:
            raise CacheError(settings.cache_errors[0])
        folder = settings.cache_dir or ""
        if not folder.strip():
            logger.debug("engine cache disabled (no folder: %s is empty)", ENV_DIR)
            return None
        mb = DEFAULT_MAX_MB if settings.cache_max_mb is None else settings.cache_max_mb
        return cls(folder, max_bytes=mb * MIB)

    # -- paths and state

    def _entry_dir(self, key: str) -> str:
        return os.path.join(self.directory, key[:2], key)

    def path(self, name: str) -> str:
        """A stable path for a shared auxiliary file, e.g. a TensorRT timing cache.

        Only its parent directories are created (as real directories; a link
        found on the way, or at the file itself, is removed). These files are
        not entries: not verified, counted nor evicted; :meth:`clear` removes them.

        Args:
            name: A relative ``/``-separated path without ``.`` or ``..``
                components, e.g. ``"timing/tensorrt-10.13-sm86.cache"``.

        Raises:
            CacheError: ``name`` is not such a path, the directories cannot be
                created, or the cache is read-only.
        """
        parts = name.split("/") if isinstance(name, str) else []
        if not parts or "\0" in name or any(p in ("", ".", "..") for p in parts):
            raise CacheError(
                f"invalid auxiliary cache file name {name!r}: expected a relative path like 'timing/x.cache'"
            )
        full = os.path.join(self.directory, AUX, *parts)
        if self.read_only:
            raise CacheError(f"cannot provide {full}: the cache {self.directory} is opened read-only")
        try:
            os.makedirs(self.directory, exist_ok=True)
            d = os.path.join(self.directory, AUX)
            ensure_dir(d)
            for p in parts[:-1]:
                d = os.path.join(d, p)
                ensure_dir(d)
            st = lstat_or_none(full)
            if st is not None and not stat.S_ISREG(st.st_mode):
                logger.warning("engine cache: %s is not a regular file; removed", full)
                remove_tree(full)
        except OSError as e:
            raise CacheError(f"cannot create the directory of {full}: {describe(e)}") from e
        return full

    def probe(self) -> Optional[str]:
        """Make sure the cache can be used: ``None`` if so, else why not (one line).

        Creates the directory and its ``tmp/`` and ``locks/`` (umask applies),
        checks that nothing in the way is a link, that files can be created,
        and sweeps what dead processes left in ``tmp/``. O(items in tmp/).
        """
        if self.read_only:
            return f"{self.directory} is opened read-only"
        try:
            if os.path.lexists(self.directory) and not os.path.isdir(self.directory):
                raise NotADirectoryError(20, "Not a directory", self.directory)
            os.makedirs(self.directory, exist_ok=True)
            for sub in (TMP, LOCKS, AUX):
                ensure_dir(os.path.join(self.directory, sub))
            _Staging(self._tmp_dir, make_dir=False).close()  # can we create (and lock) files?
        except OSError as e:
            return describe(e)
        self._sweep()
        return None

    def readable(self) -> bool:
        """Whether stored entries can be read (the directory exists and may be listed)."""
        return os.path.isdir(self.directory) and os.access(self.directory, os.R_OK | os.X_OK)

    def read_only_view(self) -> "EngineCache":
        """The same directory, opened ``read_only``."""
        return EngineCache(self.directory, self.max_bytes, read_only=True)

    def work_dir(self) -> ContextManager[str]:
        """A private directory under ``tmp/`` for a build's temporary files (``with cache.work_dir() as d:``).

        It is removed on exit, and by the next writer if this process dies first.

        Raises:
            OSError: it cannot be created (read-only or unusable cache).
        """
        if self.read_only:
            raise PermissionError(13, "the cache is opened read-only", self.directory)
        os.makedirs(self.directory, exist_ok=True)
        ensure_dir(self._tmp_dir)
        return _Staging(self._tmp_dir, make_dir=True)

    # -- reading

    def get(self, key: str) -> Optional[CacheEntry]:
        """The entry for ``key`` after checking its integrity, or ``None``.

        A corrupt entry (unparsable or inconsistent ``meta.json``, a missing
        file, a size or digest mismatch, a link anywhere in it) is removed,
        reported with one warning naming the key and the fault, and is a miss;
        so is an entry of another layout format (removed, INFO log). An
        unreadable entry (permissions), or a corrupt one in a read-only cache,
        is a miss with a warning and is left in place. A hit is marked as the
        most recently used.

        Raises:
            CacheError: ``key`` is not 64 lowercase hex digits. Never for a bad entry.

        Complexity: O(entry bytes) to hash its files.
        """
        check_key(key)
        entry = self._load(key)
        if entry is not None:
            if not self.read_only:
                entry.last_used = self._touch(entry.directory)
            logger.debug("engine cache: hit %s", key)
        return entry

    def inspect(self, key: str) -> Optional[CacheEntry]:
        """Like :meth:`get`, but a bad entry raises instead, and nothing is ever modified.

        Returns:
            The verified entry, or ``None`` if there is no entry for ``key``.

        Raises:
            CacheError: invalid key; or the entry is corrupt or unreadable (the
                message names the file at fault and what is wrong).
        """
        check_key(key)
        directory = self._entry_dir(key)
        try:
            record, last_used = self._verified(key, directory)
        except Vanished:
            return None
        except Bad as bad:
            where = os.path.join(directory, bad.file) if bad.file else directory
            raise CacheError(f"{where}: {bad.reason}") from None
        except OSError as e:
            raise CacheError(f"cannot read cache entry {directory}: {describe(e)}") from None
        return make_entry(key, directory, record, last_used)

    def discard(self, key: str) -> None:
        """Remove the entry for ``key`` (unusable for its caller). Best effort; no-op if read-only."""
        check_key(key)
        self._discard_dir(self._entry_dir(key))

    def _verified(self, key: str, directory: str) -> Tuple[Dict[str, Any], float]:
        check_entry_dir(directory)
        record = read_record(directory, key)
        verify_files(directory, record["files"])
        return record, os.lstat(os.path.join(directory, META)).st_mtime

    def _load(self, key: str) -> Optional[CacheEntry]:
        directory = self._entry_dir(key)
        try:
            record, last_used = self._verified(key, directory)
        except Vanished:
            return None
        except Bad as bad:
            if self.read_only:
                logger.warning("engine cache: entry %s is corrupt (%s); skipped (the cache is read-only)",
                               key, bad.reason)
            elif bad.warn:
                logger.warning("engine cache: entry %s is corrupt (%s); removed, it will be rebuilt", key, bad.reason)
            else:
                logger.info("engine cache: entry %s has %s; removed", key, bad.reason)
            self._discard_dir(directory)
            return None
        except OSError as e:
            logger.warning("engine cache: cannot read entry %s in %s (%s); treated as a miss", key, directory, e)
            return None
        return make_entry(key, directory, record, last_used)

    def _touch(self, directory: str) -> float:
        """Mark an entry as used now (mtime of its ``meta.json``); best effort."""
        now = time.time_ns()
        with contextlib.suppress(OSError):
            os.utime(os.path.join(directory, META), ns=(now, now), follow_symlinks=False)
        return now / 1e9

    # -- removal

    def _discard_dir(self, directory: str) -> None:
        """Remove an entry directory, first renaming it away so no reader sees it half deleted.

        A link (or a stray file) where the shard or the entry should be is
        unlinked, never followed. Nothing happens on a read-only cache.
        """
        if self.read_only:
            return
        for p in (os.path.dirname(directory), directory):
            st = lstat_or_none(p)
            if st is None:
                return
            if not stat.S_ISDIR(st.st_mode):
                unlink_quiet(p)
                return
        try:
            ensure_dir(self._tmp_dir)
            trash = _Staging(self._tmp_dir, make_dir=False)
        except OSError:
            remove_tree(directory)
            return
        try:
            os.rename(directory, trash.path)
        except FileNotFoundError:
            pass
        except OSError as e:
            logger.debug("engine cache: cannot rename %s away (%s); deleting in place", directory, e)
            remove_tree(directory)
        finally:
            trash.close()

    def _sweep(self) -> None:
        """Delete what crashed processes left in ``tmp/`` (if it is a real directory)."""
        try:
            if not self.read_only and ensure_dir_exists(self._tmp_dir):
                sweep_tmp(self._tmp_dir)
        except OSError:
            pass


def ensure_dir_exists(path: str) -> bool:
    """Whether ``path`` is a real directory; a link there is removed (see :func:`ensure_dir`)."""
    st = lstat_or_none(path)
    if st is None:
        return False
    if stat.S_ISLNK(st.st_mode):
        ensure_dir(path)  # removes the link with a warning, makes a real directory
    return stat.S_ISDIR(os.lstat(path).st_mode)

