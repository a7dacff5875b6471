"""Cache keys: a sha256 over canonical settings and raw binary inputs."""
from __future__ import annotations

import hashlib
import json
import os
import re
import struct
from typing import Any, Dict, Iterable, Mapping, Optional, Union

import numpy as np

from mx_trt.errors import CacheError

#: What :func:`make_key` hashes besides ``parts``.
Blob = Union[bytes, bytearray, memoryview, np.ndarray, np.generic]

META = "meta.json"
KEY_RE = re.compile(r"[0-9a-f]{64}\Z")
SHARD_RE = re.compile(r"[0-9a-f]{2}\Z")
_KEY_DOMAIN = b"mx_trt.cache.make_key/1\n"


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
            _feed(h, b"B", byte_view(blob))
        else:
            raise CacheError(
                f"make_key: blob {i} has type {type(blob).__name__}; expected bytes, memoryview or ndarray"
            )
    return h.hexdigest()


def _feed(h: Any, tag: bytes, data: Any) -> None:
    """Add a tagged, length-prefixed field to a hash (``data`` is any byte buffer)."""
    h.update(tag + struct.pack(">Q", memoryview(data).nbytes))
    h.update(data)


def byte_view(obj: Union[bytes, bytearray, memoryview]) -> memoryview:
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


def check_key(key: Any) -> None:
    """Raise :class:`CacheError` unless ``key`` is 64 lowercase hex digits."""
    if not isinstance(key, str) or not KEY_RE.match(key):
        raise CacheError(f"invalid cache key {key!r}: expected 64 lowercase hex digits (see make_key)")


def bad_file_name(name: Any) -> Optional[str]:
    """Why ``name`` cannot be an entry's file name, or ``None``. Keeps files inside the entry."""
    if not isinstance(name, str) or not name:
        return f"file name {name!r} must be a non-empty str"
    if "/" in name or "\0" in name or name.startswith(".") or name == META:
        return f"file name {name!r} must be one path component, not start with '.', and not be {META!r}"
    if len(os.fsencode(name)) > 255:
        return f"file name {name[:40]!r}... is longer than 255 bytes"
    return None
