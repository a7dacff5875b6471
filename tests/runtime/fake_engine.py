"""A small engine in numpy, so the fused operator can be tested without building one.

:class:`AffineEngine` reads MXNet's buffers by address, as every real engine
does, and computes two outputs whose MXNet equivalent is easy to write
(:func:`native_symbol`):

* ``double`` = ``2 * in0 + 1`` plus every further input (same shape as ``in0``);
* ``rowsum`` = the sum of ``in0`` over every axis but the batch, shape ``(batch,)``.
"""
from __future__ import annotations

import ctypes
import threading
from typing import List, Optional, Sequence, Tuple

import numpy as np

from mx_trt.builder.backends.base import Buffer, Engine, TensorSpec

Shape = Tuple[int, ...]


def host_view(buf: Buffer) -> np.ndarray:
    """The numpy array over a host buffer's memory (no copy)."""
    dt = np.dtype(buf.dtype)
    n = int(np.prod(buf.shape, dtype=np.int64)) * dt.itemsize
    raw = (ctypes.c_byte * n).from_address(buf.ptr)
    return np.frombuffer(raw, dtype=dt).reshape(buf.shape)


class AffineEngine(Engine):
    """``double`` and ``rowsum`` of its inputs (see the module's docstring).

    Args:
        shape: The bound shape of every input.
        n_inputs: How many inputs (all of ``shape``).
        dtype: Numpy name of every input and output.
        batch_ranges: ``(min, opt, max)`` profiles; empty: a static engine.

    Attributes:
        runs: The input shapes of every run, in order.
        fail: Raised by the next runs while set.
    """

    def __init__(self, shape: Shape, n_inputs: int = 1, dtype: str = "float32",
                 batch_ranges: Sequence[Tuple[int, int, int]] = ()) -> None:
        self.inputs = [TensorSpec(f"in{i}", tuple(shape), dtype) for i in range(n_inputs)]
        self.outputs = [TensorSpec("double", tuple(shape), dtype), TensorSpec("rowsum", (shape[0],), dtype)]
        self.batch_ranges = list(batch_ranges)
        self.runs: List[Tuple[Shape, ...]] = []
        self.fail: Optional[BaseException] = None
        self._lock = threading.Lock()

    def run(self, inputs: Sequence[Buffer], outputs: Sequence[Buffer]) -> None:
        self.check_buffers("affine", inputs, outputs)
        if self.fail is not None:
            raise self.fail
        with self._lock:
            self.runs.append(tuple(tuple(b.shape) for b in inputs))
        xs = [host_view(b).astype(np.float32) for b in inputs]
        double = 2 * xs[0] + 1 + sum((x for x in xs[1:]), np.zeros_like(xs[0]))
        rowsum = xs[0].reshape(xs[0].shape[0], -1).sum(axis=1)
        host_view(outputs[0])[...] = double
        host_view(outputs[1])[...] = rowsum


def native_symbol(n_inputs: int = 1, names: Sequence[str] = ("data", "w")):
    """MXNet's own graph of :class:`AffineEngine`, over variables ``names``, for the reference outputs."""
    import mxnet as mx

    xs = [mx.sym.var(n) for n in names[:n_inputs]]
    double = 2 * xs[0] + 1
    for x in xs[1:]:
        double = double + x
    rowsum = mx.sym.sum(mx.sym.flatten(xs[0]), axis=1)
    return mx.sym.Group([double, rowsum])
