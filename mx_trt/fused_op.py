"""The fused node: an MXNet custom operator that runs one subgraph's engine.

The operator hands the engine the raw data pointers of the NDArrays MXNet gives
it (zero copy). ``req`` is honoured per output: ``write``/``inplace`` write in
place, ``add`` accumulates through a scratch buffer, ``null`` writes to scratch.

Engines are passed to MXNet by key: the symbol JSON holds
``{"op": "Custom", "op_type": "_mx_trt_fused", "mx_trt_engine": KEY}`` and the
process-wide :data:`_ENGINES` table maps KEY to the :class:`FusedEngine`. The
table holds weak references: the bound executor's
:class:`~mx_trt.bind.BindInfo` owns the engines.
"""
from __future__ import annotations

import ctypes
import itertools
import logging
import threading
import weakref
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .backends.base import Buffer, Engine
from .errors import MxTrtError, ShapeError

logger = logging.getLogger(__name__)

OP_TYPE = "_mx_trt_fused"
ENGINE_ATTR = "mx_trt_engine"

_ENGINES: "weakref.WeakValueDictionary[str, FusedEngine]" = weakref.WeakValueDictionary()
_counter = itertools.count()
_lock = threading.Lock()


class FusedEngine:
    """An engine plus what MXNet needs to know about the fused node.

    Attributes:
        key: Registry key, unique in the process.
        name: Subgraph name.
        engine: The backend engine.
        input_names / output_names: Argument and output names of the node.
        run_count: Forward calls so far (observable in tests).
    """

    def __init__(self, name: str, engine: Engine, input_names: Sequence[str], output_names: Sequence[str]) -> None:
        self.name = name
        self.engine = engine
        self.input_names = list(input_names)
        self.output_names = list(output_names)
        self.run_count = 0
        self.lock = threading.Lock()
        with _lock:
            self.key = f"{name}:{next(_counter)}"
            _ENGINES[self.key] = self


def lookup_engine(key: str) -> FusedEngine:
    try:
        return _ENGINES[key]
    except KeyError:
        raise MxTrtError(
            f"fused engine {key!r} is gone: the executor that owned it was freed; "
            "an optimized symbol can only be re-bound while its executor lives (bind the original symbol again)"
        ) from None


_get_data = None


def data_ptr(arr: Any) -> int:
    """The address of an NDArray's first element (MXNDArrayGetData)."""
    global _get_data
    if _get_data is None:
        from mxnet.base import _LIB

        _get_data = _LIB.MXNDArrayGetData
    p = ctypes.c_void_p()
    _get_data(arr.handle, ctypes.byref(p))
    return int(p.value or 0)


def _host_view(ptr: int, shape: Tuple[int, ...], dtype: str) -> np.ndarray:
    dt = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    raw = (ctypes.c_byte * n).from_address(ptr)
    return np.frombuffer(raw, dtype=dt).reshape(shape)


def _dtype_name(arr: Any) -> str:
    return np.dtype(arr.dtype).name


_FusedOp: Any = None


def _register() -> None:
    global _FusedOp
    import mxnet as mx

    class FusedOp(mx.operator.CustomOp):  # type: ignore[misc]
        def __init__(self, fused: FusedEngine) -> None:
            super().__init__()
            self.fused = fused
            self.scratch: Dict[int, np.ndarray] = {}

        def forward(self, is_train: bool, req: List[str], in_data: List[Any], out_data: List[Any], aux: List[Any]) -> None:
            fused = self.fused
            dev = -1
            ins = []
            for a in in_data:
                ins.append(Buffer(data_ptr(a), tuple(a.shape), _dtype_name(a), dev))
            in_ptrs = {b.ptr for b in ins}
            outs: List[Buffer] = []
            post: List[Tuple[int, str]] = []
            for i, (a, r) in enumerate(zip(out_data, req)):
                shape = tuple(a.shape)
                dt = _dtype_name(a)
                ptr = data_ptr(a)
                if r in ("write", "inplace") and ptr not in in_ptrs:
                    outs.append(Buffer(ptr, shape, dt, dev))
                    continue
                # add / null / aliasing an input: run into scratch first.
                buf = self.scratch.get(i)
                if buf is None or buf.shape != shape or buf.dtype != np.dtype(dt):
                    buf = np.empty(shape, dtype=dt)
                    self.scratch[i] = buf
                outs.append(Buffer(buf.ctypes.data, shape, dt, dev))
                post.append((i, r))
            with fused.lock:
                fused.engine.run(ins, outs)
                fused.run_count += 1
            for i, r in post:
                if r == "null":
                    continue
                dst = _host_view(data_ptr(out_data[i]), tuple(out_data[i].shape), _dtype_name(out_data[i]))
                if r == "add":
                    dst += self.scratch[i]
                else:
                    dst[...] = self.scratch[i]

        def backward(self, req: Any, out_grad: Any, in_data: Any, out_data: Any, in_grad: Any, aux: Any) -> None:
            raise MxTrtError("mx_trt fused nodes are inference-only; bind with grad_req='null'")

    _FusedOp = FusedOp

    @mx.operator.register(OP_TYPE)
    class FusedProp(mx.operator.CustomOpProp):  # type: ignore[misc]
        def __init__(self, mx_trt_engine: str) -> None:
            super().__init__(need_top_grad=False)
            self.fused = lookup_engine(mx_trt_engine)

        def list_arguments(self) -> List[str]:
            return list(self.fused.input_names)

        def list_outputs(self) -> List[str]:
            return list(self.fused.output_names)

        def infer_shape(self, in_shape: List[Any]) -> Tuple[List[Any], List[Any], List[Any]]:
            shapes = [tuple(int(d) for d in s) for s in in_shape]
            try:
                outs = self.fused.engine.output_shapes(shapes)
            except ShapeError as exc:
                logger.error("%s: %s", self.fused.name, exc)
                raise
            return [list(s) for s in shapes], [list(s) for s in outs], []

        def infer_type(self, in_type: List[Any]) -> Tuple[List[Any], List[Any], List[Any]]:
            want = [np.dtype(t.dtype).type for t in self.fused.engine.inputs]
            return want, [np.dtype(t.dtype).type for t in self.fused.engine.outputs], []

        def declare_backward_dependency(self, out_grad: Any, in_data: Any, out_data: Any) -> List[Any]:
            return []

        def create_operator(self, ctx: Any, shapes: Any, dtypes: Any) -> Any:
            if ctx.device_type != "cpu":
                return _gpu_operator(self.fused, ctx)
            return FusedOp(self.fused)


def _gpu_operator(fused: FusedEngine, ctx: Any) -> Any:
    raise MxTrtError(f"{fused.name}: no GPU engine runtime is available in this build")


_registered = False


def ensure_registered() -> None:
    """Register the custom operator with MXNet once."""
    global _registered
    with _lock:
        if not _registered:
            _register()
            _registered = True


def register_engine(name: str, engine: Engine, input_names: Sequence[str], output_names: Sequence[str]) -> FusedEngine:
    ensure_registered()
    return FusedEngine(name, engine, input_names, output_names)


def make_operator(fused: FusedEngine) -> Any:
    """A fused operator instance (what MXNet creates per executor), for direct calls."""
    ensure_registered()
    return _FusedOp(fused)


def find(key: str) -> Optional[FusedEngine]:
    return _ENGINES.get(key)
