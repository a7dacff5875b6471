"""The weights of one bind: digests over the caller's memory, numpy copies made only when an export needs them."""
from __future__ import annotations

import ctypes
import hashlib
from typing import Any, Dict, Mapping, Set

import numpy as np

from mx_trt.runtime.fused_op import data_ptr


def digest(a: Any) -> str:
    """sha256 of an array's bytes; reads a CPU NDArray in place, without a copy."""
    import mxnet as mx

    if isinstance(a, mx.nd.NDArray) and a.context.device_type == "cpu" and a.stype == "default":
        a.wait_to_read()
        n = int(np.prod(a.shape, dtype=np.int64)) * np.dtype(a.dtype).itemsize
        if n == 0:
            return hashlib.sha256(b"").hexdigest()
        return hashlib.sha256((ctypes.c_char * n).from_address(data_ptr(a))).hexdigest()
    return hashlib.sha256(np.ascontiguousarray(to_numpy(a)).tobytes()).hexdigest()


class LazyWeights(Mapping[str, np.ndarray]):
    """Weights as numpy arrays, converted on first use (a warm plan cache needs none)."""

    def __init__(self, params: Mapping[str, Any], names: Set[str]) -> None:
        self._params = params
        self._names = names
        self._done: Dict[str, np.ndarray] = {}

    def __getitem__(self, k: str) -> np.ndarray:
        if k not in self._names:
            raise KeyError(k)
        if k not in self._done:
            self._done[k] = to_numpy(self._params[k])
        return self._done[k]

    def __iter__(self) -> Any:
        return iter(sorted(self._names))

    def __len__(self) -> int:
        return len(self._names)

    def release(self) -> None:
        """Drop the numpy copies made so far."""
        self._done.clear()



def to_numpy(v: Any) -> np.ndarray:
    """A numpy array of an NDArray or array-like (a copy for NDArrays)."""
    return v.asnumpy() if hasattr(v, "asnumpy") else np.asarray(v)

