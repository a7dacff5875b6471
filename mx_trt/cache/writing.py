"""Atomic writing of cache entries: stage under ``tmp/``, fsync, publish with one ``rename``."""
from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional, Union

from mx_trt.errors import CacheError
from mx_trt.cache.entry import FORMAT_VERSION, CacheEntry, make_entry
from mx_trt.cache.fs import describe, ensure_dir, unlink_quiet, write_bytes, write_path
from mx_trt.cache.key import META, bad_file_name, check_key
from mx_trt.cache.locking import _Staging, sweep_tmp
from mx_trt.fsutil import fsync_dir

logger = logging.getLogger(__package__)

#: What a stored file may be given as: its bytes, or the path of a file to copy (or move) in.
FileSource = Union[bytes, bytearray, memoryview, str, "os.PathLike[str]"]
_Source = Union[bytes, bytearray, memoryview, str]
#: The cache's staging and deletion area (same filesystem as the entries).
TMP = "tmp"


class WritingMixin:
    """``put`` of :class:`~mx_trt.cache.EngineCache`."""

    directory: str
    read_only: bool

    @property
    def _tmp_dir(self) -> str:
        return os.path.join(self.directory, TMP)

    if TYPE_CHECKING:  # provided by the other parts of EngineCache
        def _entry_dir(self, key: str) -> str:
            raise NotImplementedError

        def _load(self, key: str) -> Optional[CacheEntry]:
            raise NotImplementedError

        def _touch(self, directory: str) -> float:
            raise NotImplementedError

        def _evict(self, keep: str) -> None:
            raise NotImplementedError

    def put(
        self,
        key: str,
        meta: Mapping[str, Any],
        files: Mapping[str, FileSource],
        *,
        move: bool = False,
    ) -> CacheEntry:
        """Store an entry atomically, then evict old entries down to :attr:`max_bytes`.

        Everything is written and fsynced in a private directory under
        ``tmp/``, then renamed into place, so readers see all or nothing. If a
        valid entry for ``key`` already exists (another process won the race),
        it is kept, returned, and the new data is dropped; a corrupt one is
        replaced. The new entry is never evicted by this call; if it alone
        exceeds the limit it is kept with a warning (the next ``put`` evicts it
        first unless it is used meanwhile). Files get the umask's permissions.

        Args:
            key: From :func:`make_key`.
            meta: JSON-serializable metadata, returned as ``CacheEntry.meta``.
            files: File name -> its contents (bytes-like) or the path of an
                existing file (str or path-like). Names are single path
                components, not starting with ``.`` and not ``meta.json``.
            move: Take path sources over instead of copying them: they are
                hard-linked in when possible (copied otherwise) and unlinked
                once the entry is published or dropped. Untouched on failure.

        Returns:
            The stored entry (or the one that was already there).

        Raises:
            CacheError: invalid key, file name or metadata (a bug in the
                caller); the cache is read-only; or an I/O failure (disk full,
                permission denied, missing source file...), in which case a
                warning has already been logged, nothing partial is left
                behind, and the caller should carry on without caching.

        Complexity: O(bytes written) plus O(entries) for eviction.
        """
        check_key(key)
        try:
            user_meta = json.loads(json.dumps(dict(meta), sort_keys=True))
        except (TypeError, ValueError) as e:
            raise CacheError(f"put({key}): metadata is not JSON-serializable: {e}") from e
        sources: Dict[str, _Source] = {}
        for name, src in files.items():
            problem = bad_file_name(name)
            if problem is not None:
                raise CacheError(f"put({key}): {problem}")
            if isinstance(src, (bytes, bytearray, memoryview)):
                sources[name] = src
            elif isinstance(src, (str, os.PathLike)):
                sources[name] = os.fsdecode(src)
            else:
                raise CacheError(f"put({key}): file {name!r} is a {type(src).__name__}; expected bytes or a path")
        if self.read_only:
            raise CacheError(f"cannot store cache entry {key}: {self.directory} is opened read-only")
        try:
            entry = self._store(key, user_meta, sources, move)
        except OSError as e:
            logger.warning(
                "engine cache: cannot store entry %s in %s (%s); continuing without caching it", key, self.directory,
                describe(e),
            )
            raise CacheError(f"cannot store cache entry {key} in {self.directory}: {describe(e)}") from e
        if move:
            for src in sources.values():
                if isinstance(src, str):
                    unlink_quiet(src)
        self._evict(keep=key)
        return entry

    def _store(self, key: str, user_meta: Dict[str, Any], sources: Mapping[str, _Source], move: bool) -> CacheEntry:
        os.makedirs(self.directory, exist_ok=True)
        ensure_dir(self._tmp_dir)
        sweep_tmp(self._tmp_dir)
        staging = _Staging(self._tmp_dir, make_dir=True)
        try:
            listing: Dict[str, Dict[str, Any]] = {}
            for name, src in sources.items():
                dst = os.path.join(staging.path, name)
                listing[name] = write_path(src, dst, move) if isinstance(src, str) else write_bytes(src, dst)
            record = {"format": FORMAT_VERSION, "key": key, "created": time.time(), "files": listing, "meta": user_meta}
            write_bytes(json.dumps(record, sort_keys=True, indent=1).encode("utf-8") + b"\n",
                        os.path.join(staging.path, META))
            fsync_dir(staging.path)
            return self._commit(key, staging.path, record)
        finally:
            staging.close()

    def _commit(self, key: str, staged: str, record: Mapping[str, Any]) -> CacheEntry:
        """Rename ``staged`` to the entry's place unless a valid entry is there already."""
        final = self._entry_dir(key)
        ensure_dir(os.path.dirname(final))  # a real shard directory, never a link
        for _ in range(3):
            if os.path.lexists(final):
                existing = self._load(key)  # removes it if it is bad (a link included)
                if existing is not None:
                    logger.debug("engine cache: entry %s was stored meanwhile by someone else; kept it", key)
                    existing.last_used = self._touch(final)
                    return existing
            try:
                os.rename(staged, final)
            except OSError as e:
                if os.path.isdir(final):  # ENOTEMPTY/EEXIST: lost a race; look again
                    continue
                raise e
            with contextlib.suppress(OSError):
                fsync_dir(os.path.dirname(final))
            logger.debug("engine cache: stored %s", key)
            # Stamp the use time with the same clock as get(): file-write mtimes
            # come from a coarser kernel clock and could sort before a later get.
            return make_entry(key, final, record, self._touch(final))
        raise OSError(f"entry {key} keeps being replaced concurrently")
