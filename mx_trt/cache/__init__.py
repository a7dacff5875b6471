"""On-disk cache of built engines and their side files, shared by every backend.

An entry is a small JSON metadata dict plus any number of named binary files
(an engine plan, an ONNX model and its external data, an ONNX Runtime
optimized model...), stored under a 64-hex-digit key made by :func:`make_key`.

Layout of the cache directory::

    <dir>/<key[:2]>/<key>/meta.json     format, key, file sizes and digests, user metadata
    <dir>/<key[:2]>/<key>/<name>        the entry's files
    <dir>/locks/<key>.lock              per-key inter-process lock (fcntl.flock)
    <dir>/tmp/                          staging, deletion and build work area (same filesystem)
    <dir>/files/<name>                  shared auxiliary files, see EngineCache.path

Modules: :mod:`.key` (keys), :mod:`.fs` (link-safe file primitives),
:mod:`.entry` (checks of an entry), :mod:`.locking` (locks, staging, sweeping),
:mod:`.writing` (atomic ``put``), :mod:`.eviction` (size limit, inspection),
:mod:`.store` (:class:`EngineCache`, configuration).

Guarantees:

* The cache is an optimization, never a condition: ``get`` treats every
  problem as a miss, ``put`` turns I/O failures into a logged warning plus
  :class:`CacheError` for the caller to catch, ``lock`` degrades to a
  thread-only lock, and :meth:`EngineCache.probe` says in one line why a
  directory cannot be used, so callers build in memory instead.
* Readers never see a partial entry: :meth:`EngineCache.put` writes and fsyncs
  everything in a private directory under ``tmp/`` and publishes it with one
  ``rename``. Removal also renames the entry away before deleting it.
* :meth:`EngineCache.get` checks every file's size and content digest
  (xxh3-128, sha256 without ``xxhash``; entries that list sha256 stay readable)
  against ``meta.json``; a bad entry is removed, reported with one warning and treated
  as a miss. Entries of another layout version (``"format"`` in ``meta.json``,
  currently :data:`FORMAT_VERSION`) are removed silently (INFO log).
* Nothing in the tree is followed through a symbolic link: directories are
  checked with ``lstat`` (a link where one should be is removed with a
  warning), files are read only when regular, created with ``O_EXCL`` and
  locks opened with ``O_NOFOLLOW``. File paths are always the entry directory
  plus a single-component name from the checked file list, never a path taken
  from metadata. Everything is created with the process umask, nothing wider.
* A process that dies mid-write leaves its staging or work directory under
  ``tmp/``; the next use of the cache in any process removes it. Each is
  guarded by a ``flock`` its owner holds while alive, so live ones are never
  touched. Work directories of builds without a cache are named by pid and
  swept by :func:`sweep_orphans` once that process is gone.
* A cache opened ``read_only`` (an export folder) is never modified.

Size limit: after each ``put``, least-recently-used entries (by the mtime of
their ``meta.json``, refreshed by ``get``) are evicted until the entries take
at most ``max_bytes``. Entries whose key lock is held (by any thread or
process) are never evicted, nor is the entry just written.

Configuration (:meth:`EngineCache.from_settings`, from the bind's settings, which
:meth:`mx_trt.settings.Settings.from_env` reads from):

* ``MXNET_TENSORRT_CACHE_DIR``: cache directory; unset means
  :func:`default_cache_dir`, set to the empty string disables the cache.
* ``MXNET_TENSORRT_CACHE_MAX_MB``: size limit in MiB (default
  :data:`DEFAULT_MAX_MB`; empty means the default); ``0`` means no limit.

A bad value of either makes :meth:`EngineCache.from_settings` raise
:class:`~mx_trt.errors.CacheError` naming the variable, the value and what is
allowed (a bind then runs without its plan cache, with one warning).
"""
from __future__ import annotations

import os  # noqa: F401  (tests patch ``mx_trt.cache.os``)

from mx_trt.cache.entry import FORMAT_VERSION, CacheEntry
from mx_trt.cache.eviction import ENV_MAX_MB
from mx_trt.cache.fs import UnsafePathError
from mx_trt.cache.key import Blob, bad_file_name as _bad_file_name, check_key as _check_key, make_key
from mx_trt.cache.locking import _Staging, flock as _flock, make_work_dir, sweep_orphans, unlock as _unlock
from mx_trt.cache.store import DEFAULT_MAX_MB, ENV_DIR, EngineCache
from mx_trt.settings import default_cache_dir
from mx_trt.cache.writing import FileSource

__all__ = [
    "DEFAULT_MAX_MB", "ENV_DIR", "ENV_MAX_MB", "FORMAT_VERSION", "Blob", "CacheEntry", "EngineCache", "FileSource",
    "UnsafePathError", "default_cache_dir", "make_key", "make_work_dir", "sweep_orphans",
]
