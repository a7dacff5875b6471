"""Size accounting, least-recently-used eviction and inspection of the cache.

An entry's last use is the mtime of its ``meta.json`` (refreshed by ``get``).
Entries whose key lock is held by any thread or process are never evicted.
"""
from __future__ import annotations

import contextlib
import logging
import os
from typing import TYPE_CHECKING, ContextManager, List, NamedTuple, Optional

from mx_trt.cache.entry import Bad, CacheEntry, Vanished, make_entry, read_record
from mx_trt.cache.fs import remove_tree, unlink_quiet
from mx_trt.cache.key import KEY_RE, META, SHARD_RE
from mx_trt.cache.locking import LOCKS

logger = logging.getLogger(__package__)

ENV_MAX_MB = "MXNET_TENSORRT_CACHE_MAX_MB"
AUX = "files"
MIB = 1 << 20


class Usage(NamedTuple):
    """Size and last use of one entry directory."""

    key: str
    directory: str
    nbytes: int
    last_used_ns: int


def usage(key: str, directory: str) -> Optional[Usage]:
    """Size of an entry directory and its last use; ``None`` if it vanished."""
    total = 0
    last_used: Optional[int] = None
    try:
        with os.scandir(directory) as it:
            for f in it:
                st = f.stat(follow_symlinks=False)
                total += st.st_size
                if f.name == META:
                    last_used = st.st_mtime_ns
        if last_used is None:
            last_used = os.lstat(directory).st_mtime_ns
    except OSError:
        return None
    return Usage(key, directory, total, last_used)


class EvictionMixin:
    """Eviction and inspection methods of :class:`~mx_trt.cache.EngineCache`."""

    directory: str
    max_bytes: int
    read_only: bool

    if TYPE_CHECKING:  # provided by the other parts of EngineCache
        def _entry_dir(self, key: str) -> str:
            raise NotImplementedError

        def _discard_dir(self, directory: str) -> None:
            raise NotImplementedError

        def _lock_file(self, key: str) -> str:
            raise NotImplementedError

        def _lock_if_free(self, key: str) -> ContextManager[bool]:
            raise NotImplementedError

        def _sweep(self) -> None:
            raise NotImplementedError

    def _scan(self) -> List[Usage]:
        """Every entry directory with its size and last use, least recently used first.

        Links are never followed. Complexity: O(entries + files), stat calls only.
        """
        out: List[Usage] = []
        try:
            shards = os.scandir(self.directory)
        except OSError:
            return out
        with shards:
            for shard in shards:
                if not SHARD_RE.match(shard.name) or not shard.is_dir(follow_symlinks=False):
                    continue
                try:
                    keys = os.scandir(shard.path)
                except OSError:
                    continue
                with keys:
                    for ent in keys:
                        if not (KEY_RE.match(ent.name) and ent.name.startswith(shard.name)):
                            continue
                        if not ent.is_dir(follow_symlinks=False):
                            continue
                        u = usage(ent.name, ent.path)
                        if u is not None:
                            out.append(u)
        out.sort(key=lambda u: (u.last_used_ns, u.key))
        return out

    def _remove_if_unlocked(self, key: str) -> bool:
        """Remove an entry and its lock file unless its lock is held. O(entry files)."""
        with self._lock_if_free(key) as free:
            if not free:
                return False
            self._discard_dir(self._entry_dir(key))
            unlink_quiet(self._lock_file(key))  # safe under the lock: see locking.flock
            return True

    def _evict(self, keep: str) -> None:
        """Remove least-recently-used entries until within :attr:`max_bytes`, never ``keep``.

        Complexity: O(entries log entries + files).
        """
        if not self.max_bytes:
            return
        usages = self._scan()
        total = sum(u.nbytes for u in usages)
        removed = 0
        for u in usages:
            if total <= self.max_bytes:
                break
            if u.key != keep and self._remove_if_unlocked(u.key):
                total -= u.nbytes
                removed += 1
        if removed:
            logger.info("engine cache: evicted %d least recently used entries to stay under %s",
                        removed, self._limit_text())
        if total > self.max_bytes:
            mine = sum(u.nbytes for u in usages if u.key == keep)
            if mine > self.max_bytes:
                logger.warning(
                    "engine cache: entry %s takes %.1f MiB, more than the whole limit (%s); kept for now. "
                    "Raise %s to keep such engines cached.",
                    keep, mine / MIB, self._limit_text(), ENV_MAX_MB,
                )
            else:
                logger.debug("engine cache: %.1f MiB used, over the limit because some entries are in use",
                             total / MIB)

    def _limit_text(self) -> str:
        return f"{self.max_bytes / MIB:g} MiB"

    def entries(self) -> List[CacheEntry]:
        """Entries with a readable ``meta.json``, least recently used first.

        Files are not hashed here (:meth:`get` does); unreadable entries are skipped.

        Complexity: O(entries + files) plus reading each ``meta.json``.
        """
        out: List[CacheEntry] = []
        for u in self._scan():
            try:
                record = read_record(u.directory, u.key)
            except (Bad, Vanished, OSError):
                continue
            out.append(make_entry(u.key, u.directory, record, u.last_used_ns / 1e9))
        return out

    def total_bytes(self) -> int:
        """Bytes used by all entries (their files and ``meta.json``), as counted for the limit.

        Complexity: O(entries + files), stat calls only.
        """
        return sum(u.nbytes for u in self._scan())

    def clear(self) -> None:
        """Remove every entry, the auxiliary files and leftovers of crashed processes.

        Entries whose lock is held right now (by any thread or process) are
        kept. Best effort: never raises for I/O errors. Does nothing on a cache
        opened ``read_only``.
        """
        if self.read_only:
            return
        keys = {u.key for u in self._scan()}
        with contextlib.suppress(OSError):
            keys.update(n[: -len(".lock")] for n in os.listdir(os.path.join(self.directory, LOCKS))
                        if n.endswith(".lock") and KEY_RE.match(n[: -len(".lock")]))
        kept = [k for k in sorted(keys) if not self._remove_if_unlocked(k)]
        if kept:
            logger.info("engine cache: clear() kept %d entries in use", len(kept))
        remove_tree(os.path.join(self.directory, AUX))
        self._sweep()

