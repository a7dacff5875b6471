"""On-disk cache of built engines and their side files, shared by every backend.

An entry is a small JSON metadata dict plus any number of named binary files
(an engine plan, an ONNX model and its external data, an ONNX Runtime
optimized model...), stored under a 64-hex-digit key made by :func:`make_key`.

Layout of the cache directory::

    <dir>/<key[:2]>/<key>/meta.json     format, key, file sizes and sha256, user metadata
    <dir>/<key[:2]>/<key>/<name>        the entry's files
    <dir>/locks/<key>.lock              per-key inter-process lock (fcntl.flock)
    <dir>/tmp/                          staging and deletion area (same filesystem)
    <dir>/files/<name>                  shared auxiliary files, see EngineCache.path

Guarantees:

* Readers never see a partial entry: :meth:`EngineCache.put` writes and fsyncs
  everything in a private directory under ``tmp/`` and publishes it with one
  ``rename``. Removal also renames the entry away before deleting it.
* :meth:`EngineCache.get` checks every file's size and sha256 against
  ``meta.json``; a bad entry is removed, reported with one warning and treated
  as a miss. Entries of another layout version (``"format"`` in ``meta.json``,
  currently :data:`FORMAT_VERSION`) are removed silently (INFO log).
* A process that crashes mid-``put`` leaves its staging directory behind; the
  next ``put`` in any process removes it. Each staging directory is guarded by a
  ``flock`` its owner holds while alive, so live ones are never touched.
* The cache never makes a bind fail: ``get`` treats every problem as a miss,
  ``put`` turns I/O failures into a logged warning plus :class:`CacheError`
  for the caller to catch, ``lock`` degrades to a thread-only lock.

Size limit: after each ``put``, least-recently-used entries (by the mtime of
their ``meta.json``, refreshed by ``get``) are evicted until the entries take
at most ``max_bytes``. Entries whose key lock is held (by any thread or
process) are never evicted, nor is the entry just written.

Environment (read by :meth:`EngineCache.from_env`):

* ``MXNET_TENSORRT_CACHE_DIR``: cache directory; unset means
  :func:`default_cache_dir`, set to the empty string disables the cache.
* ``MXNET_TENSORRT_CACHE_MAX_MB``: size limit in MiB (default
  :data:`DEFAULT_MAX_MB`); ``0`` means no limit.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any, ContextManager, Dict, Iterable, Iterator, List, Mapping, NamedTuple, Optional, Tuple, Union

import numpy as np

from .errors import CacheError

logger = logging.getLogger(__name__)

#: Default size limit in MiB: room for a few dozen large engines while staying
#: small next to a typical disk. ``MXNET_TENSORRT_CACHE_MAX_MB`` overrides it.
DEFAULT_MAX_MB: int = 4096

#: Layout version stored in every ``meta.json``; entries of another version are misses.
FORMAT_VERSION: int = 1

ENV_DIR = "MXNET_TENSORRT_CACHE_DIR"
ENV_MAX_MB = "MXNET_TENSORRT_CACHE_MAX_MB"

#: What a stored file may be given as: its bytes, or the path of a file to copy (or move) in.
FileSource = Union[bytes, bytearray, memoryview, str, "os.PathLike[str]"]
#: What :func:`make_key` hashes besides ``parts``.
Blob = Union[bytes, bytearray, memoryview, np.ndarray, np.generic]

_MIB = 1 << 20
_CHUNK = 4 * _MIB
_META = "meta.json"
_TMP = "tmp"
_LOCKS = "locks"
_AUX = "files"
_KEY_RE = re.compile(r"[0-9a-f]{64}\Z")
_SHARD_RE = re.compile(r"[0-9a-f]{2}\Z")
# A staging lock file is created under a ".new" name and renamed once locked;
# one left behind by a crash in between is harmless and swept after this delay.
_STALE_NEW_LOCK_S = 3600.0
_KEY_DOMAIN = b"mx_trt.cache.make_key/1\n"


# --------------------------------------------------------------------------- keys


def make_key(parts: Mapping[str, Any], blobs: Iterable[Blob] = ()) -> str:
    """A cache key: sha256 hex over canonical ``parts`` and the raw ``blobs``.

    ``parts`` is encoded as JSON with sorted keys and no whitespace; tuples
    become lists, sets and frozensets become lists sorted by their elements'
    encoding, numpy scalars become Python numbers and ``np.dtype`` its name.
    Each blob adds its bytes; a numpy array (or scalar) also adds its dtype and shape, and
    is hashed in place when C-contiguous. Every field is length-prefixed, so
    ``("ab", "c")`` and ``("a", "bc")`` differ. The result depends only on the
    values, never on dict or set order, the process or the hash seed.

    Args:
        parts: Settings and descriptions (graph JSON, shapes, backend version...).
            Dict keys must be strings.
        blobs: Weights and other binary inputs, in a meaningful order.

    Returns:
        64 lowercase hex digits, accepted by :class:`EngineCache`.

    Raises:
        CacheError: a value has no canonical form (an arbitrary object, a
            non-string dict key, an object array).

    Complexity: O(size of parts + total blob bytes); no blob is copied unless
    it is not contiguous.
    """
    h = hashlib.sha256(_KEY_DOMAIN)
    text = json.dumps(_canonical(parts, "parts"), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    _feed(h, b"P", text.encode("ascii"))
    for i, blob in enumerate(blobs):
        if isinstance(blob, np.generic):
            blob = np.asarray(blob)  # a numpy scalar is a 0-d array
        if isinstance(blob, np.ndarray):
            if blob.dtype.hasobject:
                raise CacheError(f"make_key: blob {i} is an object array, which has no byte representation")
            dtype = blob.dtype.str if blob.dtype.names is None else repr(blob.dtype.descr)
            header = json.dumps([dtype, list(blob.shape)], separators=(",", ":"))
            _feed(h, b"A", header.encode("ascii"))
            flat = np.ascontiguousarray(blob).reshape(-1).view(np.uint8)  # a view when already contiguous
            _feed(h, b"D", flat)
        elif isinstance(blob, (bytes, bytearray, memoryview)):
            _feed(h, b"B", _byte_view(blob))
        else:
            raise CacheError(
                f"make_key: blob {i} has type {type(blob).__name__}; expected bytes, memoryview or ndarray"
            )
    return h.hexdigest()


def _feed(h: Any, tag: bytes, data: Any) -> None:
    """Add a tagged, length-prefixed field to a hash (``data`` is any byte buffer)."""
    h.update(tag + struct.pack(">Q", memoryview(data).nbytes))
    h.update(data)


def _byte_view(obj: Union[bytes, bytearray, memoryview]) -> memoryview:
    """A flat unsigned-byte view of a buffer (a copy only if it is not contiguous)."""
    mv = memoryview(obj)
    if mv.format == "B" and mv.ndim == 1 and mv.c_contiguous:
        return mv
    if mv.c_contiguous:
        return mv.cast("B")
    return memoryview(mv.tobytes())


def _canonical(obj: Any, where: str) -> Any:
    """A JSON-ready value with a single encoding per meaning (see :func:`make_key`)."""
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return float(obj)
    if isinstance(obj, np.generic):
        return _canonical(obj.item(), where)
    if isinstance(obj, np.dtype):
        return str(obj)
    if isinstance(obj, Mapping):
        out: Dict[str, Any] = {}
        for k, v in obj.items():
            if not isinstance(k, str):
                raise CacheError(f"make_key: {where} has a key {k!r} of type {type(k).__name__}; keys must be str")
            out[k] = _canonical(v, f"{where}[{k!r}]")
        return out
    if isinstance(obj, (list, tuple)):
        return [_canonical(v, f"{where}[{i}]") for i, v in enumerate(obj)]
    if isinstance(obj, (set, frozenset)):
        items = [_canonical(v, f"{where} item") for v in obj]
        return sorted(items, key=lambda v: json.dumps(v, sort_keys=True, separators=(",", ":")))
    raise CacheError(
        f"make_key: {where} has type {type(obj).__name__}, which has no canonical form; "
        "use str, int, float, bool, None, lists, tuples, sets or dicts"
    )


def _check_key(key: Any) -> None:
    if not isinstance(key, str) or not _KEY_RE.match(key):
        raise CacheError(f"invalid cache key {key!r}: expected 64 lowercase hex digits (see make_key)")


def _bad_file_name(name: Any) -> Optional[str]:
    """Why ``name`` cannot be an entry's file name, or ``None``. Keeps files inside the entry."""
    if not isinstance(name, str) or not name:
        return f"file name {name!r} must be a non-empty str"
    if "/" in name or "\0" in name or name.startswith(".") or name == _META:
        return f"file name {name!r} must be one path component, not start with '.', and not be {_META!r}"
    if len(os.fsencode(name)) > 255:
        return f"file name {name[:40]!r}... is longer than 255 bytes"
    return None


# --------------------------------------------------------------------------- paths


def default_cache_dir() -> str:
    """``$XDG_CACHE_HOME/mx_trt``, or ``~/.cache/mx_trt`` when it is unset or relative.

    The XDG specification says a relative ``XDG_CACHE_HOME`` is invalid and must be ignored.
    """
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "mx_trt")


# --------------------------------------------------------------------------- locks


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


def _flock(path: str, blocking: bool, create: bool = True) -> Optional[int]:
    """Take an exclusive ``flock`` on ``path`` and return its fd; ``None`` if busy.

    A holder may unlink the file before releasing it (eviction does), so after
    locking we check that the path still names the locked inode, and retry if not.

    Raises:
        OSError: the file cannot be opened (``FileNotFoundError`` when
            ``create`` is false and it does not exist).
    """
    flags = os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT if create else 0)
    while True:
        fd = os.open(path, flags, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
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


def _unlock(fd: int) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _unlink_quiet(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


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
        fd = os.open(new, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # a brand-new file: never contended
            os.rename(new, self._lock_path)
        except BaseException:
            os.close(fd)
            _unlink_quiet(new)
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
        shutil.rmtree(self.path, ignore_errors=True)
        _unlink_quiet(self._lock_path)
        with contextlib.suppress(OSError):
            _unlock(self._fd)
        self._fd = None


# --------------------------------------------------------------------------- entries


@dataclass
class CacheEntry:
    """One verified cache entry.

    Attributes:
        key: Its key.
        meta: The metadata given to :meth:`EngineCache.put` (after a JSON round
            trip: tuples come back as lists).
        directory: The entry's directory; its files are read-only by convention.
        files: Stored file name -> size in bytes.
        last_used: Last use, in seconds since the epoch (``put`` or ``get``).
    """

    key: str
    meta: Dict[str, Any]
    directory: str
    files: Dict[str, int] = field(default_factory=dict)
    last_used: float = 0.0

    def file(self, name: str) -> str:
        """Path of the stored file ``name``.

        Raises:
            CacheError: the entry has no such file.
        """
        if name not in self.files:
            raise CacheError(f"cache entry {self.key} has no file {name!r} (it has {sorted(self.files)})")
        return os.path.join(self.directory, name)

    def read(self, name: str) -> bytes:
        """Contents of the stored file ``name``.

        Raises:
            CacheError: no such file, or it cannot be read (removed meanwhile...).
        """
        path = self.file(name)
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as e:
            raise CacheError(f"cannot read {name!r} of cache entry {self.key}: {e}") from e

    @property
    def nbytes(self) -> int:
        """Total size of the stored files (``meta.json`` excluded)."""
        return sum(self.files.values())


class _Bad(Exception):
    """An entry to remove. ``warn`` is false for an outdated layout (not a fault)."""

    def __init__(self, reason: str, warn: bool = True) -> None:
        super().__init__(reason)
        self.reason = reason
        self.warn = warn


class _Vanished(Exception):
    """The entry was removed by someone else while we read it: a plain miss."""


class _Usage(NamedTuple):
    key: str
    directory: str
    nbytes: int
    last_used_ns: int


def _sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            chunk = f.read(_CHUNK)
            if not chunk:
                return h.hexdigest()
            h.update(chunk)


def _write_bytes(data: Union[bytes, bytearray, memoryview], dst: str) -> Dict[str, Any]:
    mv = _byte_view(data)
    with open(dst, "xb") as f:
        f.write(mv)
        f.flush()
        os.fsync(f.fileno())
    return {"size": mv.nbytes, "sha256": hashlib.sha256(mv).hexdigest()}


def _write_path(src: str, dst: str, move: bool) -> Dict[str, Any]:
    if move:
        try:
            os.link(src, dst)  # O(1) on the same filesystem; the source goes after commit
        except OSError:
            pass  # another filesystem, or links not allowed: copy
        else:
            with open(dst, "rb") as f:
                os.fsync(f.fileno())
            return {"size": os.stat(dst).st_size, "sha256": _sha256_file(dst)}
    h = hashlib.sha256()
    size = 0
    with open(src, "rb") as fi, open(dst, "xb") as fo:
        while True:
            chunk = fi.read(_CHUNK)
            if not chunk:
                break
            h.update(chunk)
            fo.write(chunk)
            size += len(chunk)
        fo.flush()
        os.fsync(fo.fileno())
    return {"size": size, "sha256": h.hexdigest()}


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_record(directory: str, key: str) -> Dict[str, Any]:
    """Parse and check an entry's ``meta.json`` (not the files themselves).

    Raises:
        _Vanished: the entry directory is gone.
        _Bad: the record is missing, malformed, of another format or key.
        OSError: it cannot be read for another reason.
    """
    try:
        with open(os.path.join(directory, _META), "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        if not os.path.isdir(directory):
            raise _Vanished() from None
        raise _Bad(f"{_META} is missing") from None
    try:
        record = json.loads(raw)
    except ValueError:
        raise _Bad(f"{_META} is not valid JSON") from None
    if not isinstance(record, dict):
        raise _Bad(f"{_META} is not a JSON object")
    if "format" not in record:
        raise _Bad(f"{_META} has no layout format")
    fmt = record["format"]
    if type(fmt) is not int or fmt != FORMAT_VERSION:
        raise _Bad(f"layout format {fmt!r}, this version reads format {FORMAT_VERSION}", warn=False)
    if record.get("key") != key:
        raise _Bad(f"{_META} names key {record.get('key')!r}")
    files, meta = record.get("files"), record.get("meta")
    if not isinstance(files, dict) or not isinstance(meta, dict):
        raise _Bad(f"{_META} lacks its file list or its metadata")
    for name, info in files.items():
        if _bad_file_name(name) is not None:
            raise _Bad(f"{_META} lists an invalid file name {name!r}")
        ok = (
            isinstance(info, dict)
            and type(info.get("size")) is int
            and info["size"] >= 0
            and isinstance(info.get("sha256"), str)
        )
        if not ok:
            raise _Bad(f"{_META} has a malformed record for {name!r}")
    return record


def _verify_files(directory: str, files: Mapping[str, Mapping[str, Any]]) -> None:
    """Check each listed file's size, then its sha256. O(total bytes).

    Raises:
        _Vanished, _Bad, OSError: as :func:`_read_record`.
    """
    for name, info in files.items():
        path = os.path.join(directory, name)
        try:
            size = os.stat(path).st_size
            if size != info["size"]:
                raise _Bad(f"file {name!r} has {size} bytes, expected {info['size']}")
            digest = _sha256_file(path)
        except FileNotFoundError:
            if not os.path.isdir(directory):
                raise _Vanished() from None
            raise _Bad(f"file {name!r} is missing") from None
        if digest != info["sha256"]:
            raise _Bad(f"file {name!r} fails its sha256 check")


def _entry(key: str, directory: str, record: Mapping[str, Any], last_used: float) -> CacheEntry:
    sizes = {name: int(info["size"]) for name, info in record["files"].items()}
    return CacheEntry(key=key, meta=dict(record["meta"]), directory=directory, files=sizes, last_used=last_used)


# --------------------------------------------------------------------------- the cache


class EngineCache:
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
    """

    def __init__(self, directory: str, max_bytes: Optional[int] = None) -> None:
        """Use ``directory`` (not touched until needed).

        Args:
            directory: The cache directory; ``~`` is expanded, relative paths
                are made absolute now.
            max_bytes: Size limit in bytes; ``None`` means
                :data:`DEFAULT_MAX_MB` MiB, ``0`` means no limit.

        Raises:
            CacheError: ``max_bytes`` is negative or not an int.
        """
        if max_bytes is None:
            max_bytes = DEFAULT_MAX_MB * _MIB
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise CacheError(f"max_bytes={max_bytes!r}: expected an int >= 0 (0 = no limit)")
        self.directory = os.path.abspath(os.path.expanduser(os.fspath(directory)))
        self.max_bytes = max_bytes
        self._identity = os.path.realpath(self.directory)
        self._lock_warned = False

    def __repr__(self) -> str:
        limit = f"{self.max_bytes / _MIB:g} MiB" if self.max_bytes else "no limit"
        return f"EngineCache({self.directory!r}, {limit})"

    @classmethod
    def from_env(cls) -> Optional["EngineCache"]:
        """The cache configured by the environment, or ``None`` if disabled.

        ``MXNET_TENSORRT_CACHE_DIR`` unset: :func:`default_cache_dir`; set to an
        empty (or blank) string: disabled. ``MXNET_TENSORRT_CACHE_MAX_MB``: an
        integer number of MiB >= 0, ``0`` meaning no limit; unset or empty:
        :data:`DEFAULT_MAX_MB`.

        Raises:
            CacheError: ``MXNET_TENSORRT_CACHE_MAX_MB`` is not an integer >= 0
                (the message names the variable).
        """
        raw_dir = os.environ.get(ENV_DIR)
        if raw_dir is None:
            directory = default_cache_dir()
        elif not raw_dir.strip():
            logger.debug("engine cache disabled (%s is empty)", ENV_DIR)
            return None
        else:
            directory = raw_dir
        raw_mb = os.environ.get(ENV_MAX_MB, "")
        mb = DEFAULT_MAX_MB
        if raw_mb.strip():
            try:
                mb = int(raw_mb)
            except ValueError:
                mb = -1
            if mb < 0:
                raise CacheError(f"{ENV_MAX_MB}={raw_mb!r}: expected a whole number of MiB >= 0 (0 = no limit)")
        return cls(directory, max_bytes=mb * _MIB)

    # -- paths

    def _entry_dir(self, key: str) -> str:
        return os.path.join(self.directory, key[:2], key)

    def _lock_file(self, key: str) -> str:
        return os.path.join(self.directory, _LOCKS, key + ".lock")

    @property
    def _tmp_dir(self) -> str:
        return os.path.join(self.directory, _TMP)

    def path(self, name: str) -> str:
        """A stable path for a shared auxiliary file, e.g. a TensorRT timing cache.

        The file itself is not created, only its parent directories. These
        files are not entries: they are neither verified, counted in
        :meth:`total_bytes` nor evicted; :meth:`clear` removes them.

        Args:
            name: A relative ``/``-separated path without ``.`` or ``..``
                components, e.g. ``"timing/tensorrt-10.13-sm86.cache"``.

        Raises:
            CacheError: ``name`` is not such a path, or the directories cannot be created.
        """
        parts = name.split("/") if isinstance(name, str) else []
        if not parts or "\0" in name or any(p in ("", ".", "..") for p in parts):
            raise CacheError(
                f"invalid auxiliary cache file name {name!r}: expected a relative path like 'timing/x.cache'"
            )
        full = os.path.join(self.directory, _AUX, *parts)
        try:
            os.makedirs(os.path.dirname(full), exist_ok=True)
        except OSError as e:
            raise CacheError(f"cannot create the directory of {full}: {e}") from e
        return full

    # -- locking

    def _state(self, key: str) -> _KeyLock:
        with _registry_guard:
            return _registry.setdefault((self._identity, key), _KeyLock())

    def lock(self, key: str) -> ContextManager[None]:
        """Hold ``key`` exclusively across threads and processes (``with cache.lock(key):``).

        Re-entrant within a thread. Other threads of this process wait on a
        thread lock, other processes on ``flock`` of ``locks/<key>.lock``
        (released by the kernel if the holder dies). If the lock file cannot be
        used (read-only cache...), one warning is logged and only threads are
        excluded. Entries whose lock is held are never evicted.

        Raises:
            CacheError: invalid key (raised by this call, before any waiting).
        """
        _check_key(key)
        return self._hold(key)

    @contextlib.contextmanager
    def _hold(self, key: str) -> Iterator[None]:
        state = self._state(key)
        with state.rlock:
            if state.depth == 0:
                state.fd = self._acquire_file_lock(key)
            state.depth += 1
            try:
                yield
            finally:
                state.depth -= 1
                if state.depth == 0 and state.fd is not None:
                    fd, state.fd = state.fd, None
                    with contextlib.suppress(OSError):
                        _unlock(fd)

    def _acquire_file_lock(self, key: str) -> Optional[int]:
        path = self._lock_file(key)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = _flock(path, blocking=False)
            if fd is None:
                logger.info("engine cache: waiting for another process working on entry %s", key)
                fd = _flock(path, blocking=True)
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
            if state.depth == 0:
                try:
                    os.makedirs(os.path.join(self.directory, _LOCKS), exist_ok=True)
                    fd = _flock(self._lock_file(key), blocking=False)
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
                    _unlock(fd)
        finally:
            state.rlock.release()

    # -- reading

    def get(self, key: str) -> Optional[CacheEntry]:
        """The entry for ``key`` after checking its integrity, or ``None``.

        A corrupt entry (unparsable or inconsistent ``meta.json``, a missing
        file, a size or sha256 mismatch) is removed, reported with one warning
        naming the key and the fault, and is a miss; so is an entry of another
        layout format (removed, INFO log). An unreadable entry (permissions) is
        a miss with a warning and is left in place. A hit is marked as the most
        recently used.

        Raises:
            CacheError: ``key`` is not 64 lowercase hex digits. Never for a bad entry.

        Complexity: O(entry bytes) to hash its files.
        """
        _check_key(key)
        entry = self._load(key)
        if entry is not None:
            entry.last_used = self._touch(entry.directory)
            logger.debug("engine cache: hit %s", key)
        return entry

    def _load(self, key: str) -> Optional[CacheEntry]:
        directory = self._entry_dir(key)
        try:
            record = _read_record(directory, key)
            _verify_files(directory, record["files"])
            last_used = os.stat(os.path.join(directory, _META)).st_mtime
        except _Vanished:
            return None
        except _Bad as bad:
            if bad.warn:
                logger.warning("engine cache: entry %s is corrupt (%s); removed, it will be rebuilt", key, bad.reason)
            else:
                logger.info("engine cache: entry %s has %s; removed", key, bad.reason)
            self._discard_dir(directory)
            return None
        except OSError as e:
            logger.warning("engine cache: cannot read entry %s in %s (%s); treated as a miss", key, directory, e)
            return None
        return _entry(key, directory, record, last_used)

    def _touch(self, directory: str) -> float:
        """Mark an entry as used now (mtime of its ``meta.json``); best effort."""
        now = time.time_ns()
        with contextlib.suppress(OSError):
            os.utime(os.path.join(directory, _META), ns=(now, now))
        return now / 1e9

    # -- writing

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
        first unless it is used meanwhile).

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
                caller); or an I/O failure (disk full, permission denied,
                missing source file...), in which case a warning has already
                been logged, nothing partial is left behind, and the caller
                should carry on without caching.

        Complexity: O(bytes written) plus O(entries) for eviction.
        """
        _check_key(key)
        try:
            user_meta = json.loads(json.dumps(dict(meta), sort_keys=True))
        except (TypeError, ValueError) as e:
            raise CacheError(f"put({key}): metadata is not JSON-serializable: {e}") from e
        sources: Dict[str, Union[bytes, bytearray, memoryview, str]] = {}
        for name, src in files.items():
            problem = _bad_file_name(name)
            if problem is not None:
                raise CacheError(f"put({key}): {problem}")
            if isinstance(src, (bytes, bytearray, memoryview)):
                sources[name] = src
            elif isinstance(src, (str, os.PathLike)):
                sources[name] = os.fsdecode(src)
            else:
                raise CacheError(f"put({key}): file {name!r} is a {type(src).__name__}; expected bytes or a path")
        try:
            entry = self._store(key, user_meta, sources, move)
        except OSError as e:
            logger.warning(
                "engine cache: cannot store entry %s in %s (%s); continuing without caching it", key, self.directory, e
            )
            raise CacheError(f"cannot store cache entry {key} in {self.directory}: {e}") from e
        if move:
            for src in sources.values():
                if isinstance(src, str):
                    _unlink_quiet(src)
        self._evict(keep=key)
        return entry

    def _store(
        self, key: str, user_meta: Dict[str, Any], sources: Mapping[str, Union[bytes, bytearray, memoryview, str]],
        move: bool,
    ) -> CacheEntry:
        os.makedirs(self._tmp_dir, exist_ok=True)
        self._sweep_tmp()
        staging = _Staging(self._tmp_dir, make_dir=True)
        try:
            listing: Dict[str, Dict[str, Any]] = {}
            for name, src in sources.items():
                dst = os.path.join(staging.path, name)
                listing[name] = _write_path(src, dst, move) if isinstance(src, str) else _write_bytes(src, dst)
            record = {"format": FORMAT_VERSION, "key": key, "created": time.time(), "files": listing, "meta": user_meta}
            _write_bytes(json.dumps(record, sort_keys=True, indent=1).encode("utf-8") + b"\n",
                         os.path.join(staging.path, _META))
            _fsync_dir(staging.path)
            return self._commit(key, staging.path, record)
        finally:
            staging.close()

    def _commit(self, key: str, staged: str, record: Mapping[str, Any]) -> CacheEntry:
        """Rename ``staged`` to the entry's place unless a valid entry is there already."""
        final = self._entry_dir(key)
        os.makedirs(os.path.dirname(final), exist_ok=True)
        for _ in range(3):
            if os.path.lexists(final):
                existing = self._load(key)  # removes it if it is bad
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
                _fsync_dir(os.path.dirname(final))
            logger.debug("engine cache: stored %s", key)
            # Stamp the use time with the same clock as get(): file-write mtimes
            # come from a coarser kernel clock and could sort before a later get.
            return _entry(key, final, record, self._touch(final))
        raise OSError(f"entry {key} keeps being replaced concurrently")

    def _discard_dir(self, directory: str) -> None:
        """Remove an entry directory, first renaming it away so no reader sees it half deleted."""
        try:
            os.makedirs(self._tmp_dir, exist_ok=True)
            trash = _Staging(self._tmp_dir, make_dir=False)
        except OSError:
            shutil.rmtree(directory, ignore_errors=True)
            return
        try:
            os.rename(directory, trash.path)
        except FileNotFoundError:
            pass
        except OSError as e:
            logger.debug("engine cache: cannot rename %s away (%s); deleting in place", directory, e)
            shutil.rmtree(directory, ignore_errors=True)
        finally:
            trash.close()

    def _sweep_tmp(self) -> None:
        """Delete what crashed processes left in ``tmp/``. O(items in tmp/); best effort."""
        tmp = self._tmp_dir
        try:
            names = os.listdir(tmp)
        except OSError:
            return
        now = time.time()
        for name in names:
            path = os.path.join(tmp, name)
            try:
                if name.endswith(".lock"):
                    fd = _flock(path, blocking=False, create=False)
                    if fd is None:
                        continue  # its owner is alive
                    try:
                        shutil.rmtree(path[: -len(".lock")], ignore_errors=True)
                        _unlink_quiet(path)
                    finally:
                        _unlock(fd)
                    logger.debug("engine cache: removed %s left by a dead process", path[: -len(".lock")])
                elif name.endswith(".lock.new"):
                    if now - os.lstat(path).st_mtime > _STALE_NEW_LOCK_S:
                        _unlink_quiet(path)
                elif not os.path.exists(path + ".lock"):
                    # Owners create the lock before the directory and delete it after.
                    shutil.rmtree(path, ignore_errors=True)
            except OSError:
                continue

    # -- size and eviction

    def _scan(self) -> List[_Usage]:
        """Every entry directory with its size and last use, least recently used first.

        Complexity: O(entries + files), stat calls only.
        """
        out: List[_Usage] = []
        try:
            shards = os.scandir(self.directory)
        except OSError:
            return out
        with shards:
            for shard in shards:
                if not _SHARD_RE.match(shard.name) or not shard.is_dir(follow_symlinks=False):
                    continue
                try:
                    keys = os.scandir(shard.path)
                except OSError:
                    continue
                with keys:
                    for ent in keys:
                        if not (_KEY_RE.match(ent.name) and ent.name.startswith(shard.name)):
                            continue
                        if not ent.is_dir(follow_symlinks=False):
                            continue
                        usage = _usage(ent.name, ent.path)
                        if usage is not None:
                            out.append(usage)
        out.sort(key=lambda u: (u.last_used_ns, u.key))
        return out

    def _remove_if_unlocked(self, key: str) -> bool:
        """Remove an entry and its lock file unless its lock is held. O(entry files)."""
        with self._lock_if_free(key) as free:
            if not free:
                return False
            self._discard_dir(self._entry_dir(key))
            _unlink_quiet(self._lock_file(key))  # safe under the lock: see _flock
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
                    keep, mine / _MIB, self._limit_text(), ENV_MAX_MB,
                )
            else:
                logger.debug("engine cache: %.1f MiB used, over the limit because some entries are in use",
                             total / _MIB)

    def _limit_text(self) -> str:
        return f"{self.max_bytes / _MIB:g} MiB"

    # -- inspection

    def entries(self) -> List[CacheEntry]:
        """Entries with a readable ``meta.json``, least recently used first.

        Files are not hashed here (:meth:`get` does); unreadable entries are skipped.

        Complexity: O(entries + files) plus reading each ``meta.json``.
        """
        out: List[CacheEntry] = []
        for u in self._scan():
            try:
                record = _read_record(u.directory, u.key)
            except (_Bad, _Vanished, OSError):
                continue
            out.append(_entry(u.key, u.directory, record, u.last_used_ns / 1e9))
        return out

    def total_bytes(self) -> int:
        """Bytes used by all entries (their files and ``meta.json``), as counted for the limit.

        Complexity: O(entries + files), stat calls only.
        """
        return sum(u.nbytes for u in self._scan())

    def clear(self) -> None:
        """Remove every entry, the auxiliary files and leftovers of crashed processes.

        Entries whose lock is held right now (by any thread or process) are
        kept. Best effort: never raises for I/O errors.
        """
        keys = {u.key for u in self._scan()}
        with contextlib.suppress(OSError):
            keys.update(n[: -len(".lock")] for n in os.listdir(os.path.join(self.directory, _LOCKS))
                        if n.endswith(".lock") and _KEY_RE.match(n[: -len(".lock")]))
        kept = [k for k in sorted(keys) if not self._remove_if_unlocked(k)]
        if kept:
            logger.info("engine cache: clear() kept %d entries in use", len(kept))
        shutil.rmtree(os.path.join(self.directory, _AUX), ignore_errors=True)
        self._sweep_tmp()


def _usage(key: str, directory: str) -> Optional[_Usage]:
    """Size of an entry directory and its last use; ``None`` if it vanished."""
    total = 0
    last_used: Optional[int] = None
    try:
        with os.scandir(directory) as it:
            for f in it:
                st = f.stat(follow_symlinks=False)
                total += st.st_size
                if f.name == _META:
                    last_used = st.st_mtime_ns
        if last_used is None:
            last_used = os.stat(directory).st_mtime_ns
    except OSError:
        return None
    return _Usage(key, directory, total, last_used)
