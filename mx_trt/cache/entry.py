"""Cache entries: the verified view handed to callers, and the checks of ``meta.json`` and files.

Every file an entry holds is named by ``meta.json``'s file list, whose names
are single path components checked by :func:`~mx_trt.cache.key.bad_file_name`;
the path of a file is always ``<entry directory>/<name>``, never a path taken
from the metadata. Files are read only when they are regular files (no link).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Tuple

from mx_trt.errors import CacheError
from mx_trt.cache.fs import MAX_META_BYTES, UnsafePathError, check_dir, file_digest, open_regular, read_regular
from mx_trt.cache.key import META, bad_file_name

#: Layout version stored in every ``meta.json``; entries of another version are misses.
FORMAT_VERSION: int = 1


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
        if not isinstance(name, str) or name not in self.files:
            raise CacheError(f"cache entry {self.key} has no file {name!r} (it has {sorted(self.files)})")
        return os.path.join(self.directory, name)

    def read(self, name: str) -> bytes:
        """Contents of the stored file ``name`` (a regular file, never read through a link).

        Raises:
            CacheError: no such file, or it cannot be read (removed meanwhile...).
        """
        path = self.file(name)
        try:
            with open_regular(path) as (f, _):
                return bytes(f.read())
        except OSError as e:
            raise CacheError(f"cannot read {name!r} of cache entry {self.key}: {e}") from e

    @property
    def nbytes(self) -> int:
        """Total size of the stored files (``meta.json`` excluded)."""
        return sum(self.files.values())


class Bad(Exception):
    """An entry to remove. ``warn`` is false for an outdated layout (not a fault).

    Attributes:
        reason: What is wrong, in words.
        file: The entry's file at fault, when one is (a name, not a path).
    """

    def __init__(self, reason: str, warn: bool = True, file: Optional[str] = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.warn = warn
        self.file = file


class Vanished(Exception):
    """The entry was removed by someone else while we read it: a plain miss."""


def check_entry_dir(directory: str) -> None:
    """The entry directory and its shard must be real directories.

    Raises:
        Vanished: it does not exist.
        Bad: it (or its shard) is a link or not a directory.
        OSError: it cannot be examined.
    """
    try:
        for d in (os.path.dirname(directory), directory):
            if not check_dir(d):
                raise Vanished()
    except UnsafePathError as e:
        raise Bad(f"{e.filename} {e.strerror}; the cache never follows links in its tree") from None


def read_record(directory: str, key: str) -> Dict[str, Any]:
    """Parse and check an entry's ``meta.json`` (not the files themselves).

    Raises:
        Vanished: the entry directory is gone.
        Bad: the record is missing, malformed, of another format or key, or a link.
        OSError: it cannot be read for another reason.
    """
    try:
        raw = read_regular(os.path.join(directory, META), MAX_META_BYTES)
    except FileNotFoundError:
        if not os.path.isdir(directory):
            raise Vanished() from None
        raise Bad(f"{META} is missing", file=META) from None
    except UnsafePathError as e:
        raise Bad(f"{META} {e.strerror}", file=META) from None
    try:
        record = json.loads(raw)
    except ValueError:
        raise Bad(f"{META} is not valid JSON", file=META) from None
    except RecursionError:  # nested deeper than the parser's stack: damaged like any other
        raise Bad(f"{META} is not valid JSON (nested too deeply)", file=META) from None
    if not isinstance(record, dict):
        raise Bad(f"{META} is not a JSON object", file=META)
    if "format" not in record:
        raise Bad(f"{META} has no layout format", file=META)
    fmt = record["format"]
    if type(fmt) is not int or fmt != FORMAT_VERSION:
        raise Bad(f"layout format {fmt!r}, this version reads format {FORMAT_VERSION}", warn=False)
    if record.get("key") != key:
        raise Bad(f"{META} names key {record.get('key')!r}", file=META)
    files, meta = record.get("files"), record.get("meta")
    if not isinstance(files, dict) or not isinstance(meta, dict):
        raise Bad(f"{META} lacks its file list or its metadata", file=META)
    for name, info in files.items():
        if bad_file_name(name) is not None:
            raise Bad(f"{META} lists an invalid file name {name!r}", file=META)
        ok = (
            isinstance(info, dict)
            and type(info.get("size")) is int
            and info["size"] >= 0
            and _recorded_digest(info) is not None
        )
        if not ok:
            raise Bad(f"{META} has a malformed record for {name!r}", file=META)
    return record


def _recorded_digest(info: Mapping[str, Any]) -> Optional[Tuple[str, str]]:
    """(algorithm, ``"<algo>:<hex>"``) a file record holds, or ``None`` if it holds none it can.

    Entries list ``"digest": "<algo>:<hex>"`` (xxh3_128 or sha256); older ones
    ``"sha256": "<hex>"``, which stays readable.
    """
    d = info.get("digest")
    if isinstance(d, str):
        algo, _, hexd = d.partition(":")
        return (algo, d) if algo in ("xxh3_128", "sha256") and hexd else None
    legacy = info.get("sha256")
    return ("sha256", f"sha256:{legacy}") if isinstance(legacy, str) and legacy else None


def verify_files(directory: str, files: Mapping[str, Mapping[str, Any]]) -> None:
    """Check each listed file is a regular file of the right size and content digest. O(total bytes).

    Raises:
        Vanished, Bad, OSError: as :func:`read_record`.
    """
    for name, info in files.items():
        path = os.path.join(directory, name)
        recorded = _recorded_digest(info)
        if recorded is None:
            raise Bad(f"{META} has a malformed record for {name!r}", file=META)
        algo, want = recorded
        try:
            size = os.lstat(path).st_size
            if size != info["size"]:
                raise Bad(f"file {name!r} has {size} bytes, expected {info['size']}", file=name)
            try:
                size, digest = file_digest(path, algo)
            except ValueError as exc:
                raise Bad(f"file {name!r} cannot be checked: {exc}", file=name) from None
        except FileNotFoundError:
            if not os.path.isdir(directory):
                raise Vanished() from None
            raise Bad(f"file {name!r} is missing", file=name) from None
        except UnsafePathError as e:
            raise Bad(f"file {name!r} {e.strerror}", file=name) from None
        if size != info["size"]:
            raise Bad(f"file {name!r} has {size} bytes, expected {info['size']}", file=name)
        if digest != want:
            raise Bad(f"file {name!r} fails its {algo} check", file=name)


def make_entry(key: str, directory: str, record: Mapping[str, Any], last_used: float) -> CacheEntry:
    """The :class:`CacheEntry` of a checked record."""
    sizes = {name: int(info["size"]) for name, info in record["files"].items()}
    return CacheEntry(key=key, meta=dict(record["meta"]), directory=directory, files=sizes, last_used=last_used)
