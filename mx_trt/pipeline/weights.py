"""The weights of one bind, held once: views over the caller's memory and fast digests of it.

* :func:`view` gives a numpy array over a CPU NDArray's own memory (no copy);
  the view keeps the NDArray alive, so an engine that reads it may outlive the
  caller's dict.
* :func:`digest` fingerprints an array's bytes in place: xxh3-128 (about 12 GB/s
  here) when ``xxhash`` is installed, else sha256. The algorithm is part of the
  digest string (``"xxh3_128:..."``), so digests of the two never compare equal,
  and dtype and shape are hashed with the bytes.
"""
from __future__ import annotations

import ctypes
from typing import Any, Callable, Dict, Mapping, Set, cast

import numpy as np

from mx_trt.cache.fs import new_hasher
from mx_trt.errors import ShapeError
from mx_trt.runtime.fused_op import data_ptr


def _is_cpu_ndarray(a: Any) -> bool:
    import mxnet as mx

    return isinstance(a, mx.nd.NDArray) and a.context.device_type == "cpu" and a.stype == "default"


def view(a: Any) -> np.ndarray:
    """A numpy array over the bytes of ``a`` without copying them, where possible.

    A CPU NDArray gives a read-only view of its own memory (after waiting for
    pending writes); the view keeps the NDArray alive. A numpy array is returned
    as is. Anything else (a GPU NDArray, a sparse one, a list) is copied once.

    The caller must not resize the NDArray while the view is used. Complexity: O(1)
    for views, O(bytes) for copies.
    """
    if isinstance(a, np.ndarray):
        return a
    if _is_cpu_ndarray(a):
        a.wait_to_read()
        dt = np.dtype(a.dtype)
        n = int(np.prod(a.shape, dtype=np.int64)) * dt.itemsize
        if n == 0:
            return np.zeros(a.shape, dt)
        buf = (ctypes.c_char * n).from_address(data_ptr(a))
        buf._mx_trt_owner = a  # type: ignore[attr-defined]  # the view's base keeps the NDArray alive
        out = np.frombuffer(cast(Any, buf), dtype=dt).reshape(a.shape)
        out.flags.writeable = False  # the caller's weights: an exporter must never write them
        return out
    return to_numpy(a)


def digest(a: Any) -> str:
    """A fingerprint of an array's dtype, shape and bytes, read in place (no copy for CPU NDArrays).

    Returns ``"<algorithm>:<hex>"``; equal strings mean equal dtype, shape and bytes
    (up to the hash's collision odds: xxh3-128 is not a cryptographic hash, which
    a local plan cache keyed by the user's own weights does not need).
    """
    arr = view(a)
    arr = np.ascontiguousarray(arr)
    algo, h = new_hasher()
    h.update(f"{arr.dtype.str}{tuple(arr.shape)}".encode())
    if arr.nbytes:
        h.update(arr.reshape(-1).view(np.uint8).data)
    return f"{algo}:{h.hexdigest()}"


class LazyWeights(Mapping[str, np.ndarray]):
    """Weights by name as numpy views over the caller's arrays, made on first use (a warm plan cache needs none)."""

    def __init__(self, params: Mapping[str, Any], names: Set[str], convert: Callable[[Any], np.ndarray] = view) -> None:
        self._params = params
        self._names = names
        self._convert = convert
        self._done: Dict[str, np.ndarray] = {}

    def __getitem__(self, k: str) -> np.ndarray:
        if k not in self._names:
            raise KeyError(k)
        if k not in self._done:
            self._done[k] = self._convert(self._params[k])
        return self._done[k]

    def __iter__(self) -> Any:
        return iter(sorted(self._names))

    def __len__(self) -> int:
        return len(self._names)

    def release(self) -> None:
        """Forget the arrays handed out so far (views cost nothing; copies are freed)."""
        self._done.clear()


def to_numpy(v: Any) -> np.ndarray:
    """A numpy array of an NDArray or array-like (a copy for NDArrays)."""
    return v.asnumpy() if hasattr(v, "asnumpy") else np.asarray(v)


def load_weights(exe: Any, buffer: Mapping[str, Any], strict_aux: bool = False) -> None:
    """Give a bound executor the values of ``buffer`` (``shared_buffer``): arguments and aux states.

    MXNet's ``simple_bind`` shares an argument's array with ``shared_buffer``
    only where shape, dtype and context allow, and never takes aux states from
    it. The accelerated bind (for its native nodes) and every native bind that
    mx_trt makes on the user's behalf call this, so that both compute with the
    same weights, BatchNorm statistics included. Arrays already sharing the
    buffer's memory are not copied; an argument whose shape differs is left to
    MXNet (it reallocated it).

    Raises:
        ShapeError: with ``strict_aux``, an aux state's value has another shape than the executor's.
    """
    import mxnet as mx

    for target, strict in ((exe.arg_dict, False), (exe.aux_dict, strict_aux)):
        for name, dst in target.items():
            src = buffer.get(name)
            if src is None:
                continue
            if tuple(src.shape) != tuple(dst.shape):
                if strict:
                    raise ShapeError(f"shared_buffer value of {name!r} has shape {tuple(src.shape)}, "
                                     f"the executor needs {tuple(dst.shape)}")
                continue
            if isinstance(src, mx.nd.NDArray):
                if src.context == dst.context and data_ptr(src) == data_ptr(dst):
                    continue
                src.copyto(dst)
            else:
                dst[:] = np.asarray(src)
