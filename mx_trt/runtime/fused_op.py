"""The fused node: an MXNet custom operator that runs one subgraph's engine.

The operator hands the engine the raw data pointers of the NDArrays MXNet gives
it (zero copy). ``req`` is honoured per output: ``write``/``inplace`` write in
place, ``add`` accumulates through a scratch buffer, ``null`` writes to scratch.

Engines are passed to MXNet by key: the symbol JSON holds
``{"op": "Custom", "op_type": "_mx_trt_fused", "mx_trt_engine": KEY}`` and the
process-wide :data:`_ENGINES` table maps KEY to the :class:`FusedEngine`. The
table holds weak references: the bound executor's
:class:`~mx_trt.pipeline.bind.BindInfo` owns the engines, and so do the
operator objects MXNet creates for the node (shared with executors made by
``executor.reshape``). Those drop their engines as soon as MXNet frees them
(:class:`_ReleasingTable`), so an engine goes with the last executor that uses
it, without waiting for a garbage collection.
"""
from __future__ import annotations

import atexit
import ctypes
import itertools
import json
import logging
import secrets
import threading
import weakref
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from mx_trt import patches
from mx_trt.builder.backends.base import Buffer, Engine
from mx_trt.errors import EngineRunError, MxTrtError, ShapeError

logger = logging.getLogger(__name__)

OP_TYPE = "_mx_trt_fused"
ENGINE_ATTR = "mx_trt_engine"

_ENGINES: "weakref.WeakValueDictionary[str, FusedEngine]" = weakref.WeakValueDictionary()
_counter = itertools.count()
_lock = threading.Lock()
_PROCESS = secrets.token_hex(4)


class FusedEngine:
    """An engine plus what MXNet needs to know about the fused node.

    One fused node may run several engines over its life: ``executor.reshape``
    to a batch that the bound engine does not take (outside its batch profiles,
    or another batch for a static engine) gets an engine built for it by
    :attr:`rebuild`, while executors already bound keep theirs. Each operator
    instance MXNet creates (one per executor) holds the engine chosen for its
    shapes; this object holds the latest one strongly and the others weakly, so
    an engine goes with the last executor that runs it.

    Attributes:
        key: Registry key, unique in the process.
        name: Subgraph name.
        engine: The latest engine chosen (at bind, the bound one).
        input_names / output_names: Argument and output names of the node.
        run_count: Forward calls so far (observable in tests).
        build_count: Engines built for this node (0 when the bound one came from a cache).
        rebuilds: Engines asked of :attr:`rebuild` (built, or found in a pool or plan cache).
        rebuild: ``batch -> (engine, source)`` for another batch; ``None``: the node takes only its engines' shapes.
        rebuild_hint: Appended to the log line of a rebuild (how to avoid it), or empty.
        alternates: ``(label, make)`` of other engines of the same subgraph (``"openvino fp32"``,
            ``make()`` returning the engine, built or loaded), which the executor's run-time check may
            compare with this one (:class:`~mx_trt.runtime.twin.RuntimeCheck`); empty: none.
        keep_choice: ``keep_choice(side, medians_ms)`` stores the engine that check kept (``side``, one of
            :attr:`alternates`' labels, or ``engines``: this one) as the subgraph's decision, so that a later
            bind starts with it (``medians_ms``: the check's latest median per side); ``None``: nothing to store.
    """

    def __init__(self, name: str, engine: Engine, input_names: Sequence[str], output_names: Sequence[str]) -> None:
        self.name = name
        self.engine = engine
        self.input_names = list(input_names)
        self.output_names = list(output_names)
        self.run_count = 0
        self.build_count = 0
        self.rebuilds = 0
        self.source = ""
        self.rebuild: Optional[Callable[[int], Tuple[Engine, str]]] = None
        self.rebuild_hint = ""
        self.alternates: List[Tuple[str, Callable[[], Engine]]] = []
        self.keep_choice: Optional[Callable[[str, Mapping[str, float]], None]] = None
        self.lock = threading.Lock()
        #: The typed error of this node's last failed run, until :func:`guard_forward` reports it.
        self.last_error: Optional[MxTrtError] = None
        self._build_lock = threading.Lock()
        self._others: "weakref.WeakSet[Engine]" = weakref.WeakSet()
        with _lock:
            # The process's token keeps a symbol saved elsewhere from naming one of this process's engines.
            self.key = f"{name}:{_PROCESS}:{next(_counter)}"
            _ENGINES[self.key] = self

    def _fitting(self, shapes: Sequence[Tuple[int, ...]]) -> Optional[Engine]:
        for eng in [self.engine, *list(self._others)]:
            try:
                eng.output_shapes(shapes)
            except ShapeError:
                continue
            return eng
        return None

    def _choose(self, eng: Engine) -> Engine:
        if eng is not self.engine:
            self._others.add(self.engine)
            self.engine = eng
        return eng

    def engine_for(self, shapes: Sequence[Tuple[int, ...]]) -> Engine:
        """An engine that runs ``shapes``: one this node has, else a new one from :attr:`rebuild` (one log line).

        Raises:
            ShapeError: the shapes do not fit and no engine can be built for them
                (no rebuilder, or they differ from the bound ones beyond the batch).
        """
        shapes = [tuple(int(d) for d in s) for s in shapes]
        with self._build_lock:
            eng = self._fitting(shapes)
            if eng is not None:
                return self._choose(eng)
            bound = self.engine
            batch = shapes[0][0] if shapes and shapes[0] else None
            if (self.rebuild is None or batch is None or len(shapes) != len(bound.inputs)
                    or any(len(s) != len(t.shape) or s[1:] != t.shape[1:] or s[0] != batch
                           for s, t in zip(shapes, bound.inputs))):
                try:
                    bound.output_shapes(shapes)
                except ShapeError as exc:
                    logger.error("%s: %s", self.name, exc)
                    self.last_error = exc  # MXNet's shape inference loses the message: guard_forward raises it
                    raise
                return bound
            where = f"outside the engine's profiles {bound.batch_ranges}" if bound.batch_ranges else \
                f"not the static engine's batch {bound.inputs[0].shape[0]}"
            try:
                eng, source = self.rebuild(int(batch))
                eng.output_shapes(shapes)  # the new engine must take them
            except MxTrtError as exc:
                logger.error("%s: batch %d is %s, and no engine can be made for it: %s", self.name, batch, where, exc)
                self.last_error = type(exc)(f"{self.name}: batch {batch} is {where}, and no engine can be made "
                                            f"for it: {exc}")
                raise
            self.rebuilds += 1
            self.build_count += int(source == "built")
            how = {"built": "built", "disk": "loaded from the plan cache"}.get(source, "reused from this process")
            logger.warning("%s: batch %d is %s: a new engine was %s for it%s", self.name, batch, where, how,
                           f" ({self.rebuild_hint})" if self.rebuild_hint else "")
            return self._choose(eng)

    def output_shapes(self, shapes: Sequence[Tuple[int, ...]]) -> List[Tuple[int, ...]]:
        """Output shapes for ``shapes`` (:meth:`engine_for` picks or builds the engine).

        Raises:
            ShapeError: the shapes do not fit and no new engine can be built.
        """
        return self.engine_for(shapes).output_shapes(shapes)


def fused_engine_keys(symbol: Any) -> List[str]:
    """The engine keys named by the fused nodes of ``symbol`` (a Symbol or its JSON text).

    A Symbol is read through its node attributes, not ``tojson()``: MXNet keeps
    the nodes of a symbol with custom operators alive once it is serialized
    (measured with MXNet 1.9.1), which would keep their engines alive too.

    Raises:
        MxTrtError: the JSON text cannot be read.
    """
    if not isinstance(symbol, str):
        return [str(a[ENGINE_ATTR]) for a in symbol.attr_dict().values()
                if a.get("op_type") == OP_TYPE and ENGINE_ATTR in a]
    if OP_TYPE not in symbol:
        return []
    try:
        nodes = json.loads(symbol).get("nodes", [])
    except (ValueError, AttributeError) as exc:
        raise MxTrtError(f"not a symbol's JSON: {exc}") from None
    keys: List[str] = []
    for node in nodes:
        attrs = node.get("attrs") or node.get("attr") or node.get("param") or {}
        if node.get("op") == "Custom" and attrs.get("op_type") == OP_TYPE and ENGINE_ATTR in attrs:
            keys.append(str(attrs[ENGINE_ATTR]))
    return keys


def holds_fused_nodes(symbol: Any) -> bool:
    """True when ``symbol`` was already optimized (it holds fused nodes): the pass does not run on it again."""
    return bool(fused_engine_keys(symbol))


#: Engines kept alive by a symbol rather than an executor (``Symbol.optimize_for``): key -> engine.
_PINNED: Dict[str, FusedEngine] = {}


def pin(engines: Sequence[FusedEngine]) -> None:
    """Keep engines alive without an owner (a symbol returned by ``optimize_for`` holds only their keys)."""
    with _lock:
        for e in engines:
            _PINNED[e.key] = e


def unpin(keys: Sequence[str]) -> int:
    """Stop keeping the engines of ``keys`` alive; returns how many were pinned. They go once no executor uses them."""
    with _lock:
        return sum(_PINNED.pop(k, None) is not None for k in keys)


def pinned_keys() -> List[str]:
    """Keys of the engines kept alive by :func:`pin`."""
    with _lock:
        return sorted(_PINNED)


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
    raw = memoryview((ctypes.c_byte * n).from_address(ptr)).cast("B")
    return np.frombuffer(raw, dtype=dt).reshape(shape)


def _dtype_name(arr: Any) -> str:
    return np.dtype(arr.dtype).name


_FusedOp: Any = None


Layout = Tuple[List[Tuple[Tuple[int, ...], str]], List[Tuple[Tuple[int, ...], str]]]


def _plan_buffers(in_data: List[Any], out_data: List[Any], req: List[str], dev: int, scratch: Dict[int, Any],
                  alloc: Callable[[Tuple[int, ...], str], Tuple[Any, int]],
                  layout: Optional[Layout] = None) -> Tuple[List[Buffer], List[Buffer], List[Tuple[int, str]]]:
    """The engine's buffers for one forward, honouring ``req``.

    ``write``/``inplace`` outputs are MXNet's own memory (zero copy). ``add``,
    ``null`` and an output aliasing an input go to a scratch array from
    ``scratch`` (made by ``alloc(shape, dtype) -> (array, address)`` when missing
    or of another shape); those come back in the third list as ``(index, req)``
    for the caller to add or copy after the run. ``layout`` gives the
    ``(shape, dtype)`` of every input and output when the operator knows them
    (fixed per executor), saving two MXNet calls per array on the hot path.
    """
    if layout is None:
        layout = ([(tuple(a.shape), _dtype_name(a)) for a in in_data], [(tuple(a.shape), _dtype_name(a)) for a in out_data])
    ins = [Buffer(data_ptr(a), s, dt, dev) for a, (s, dt) in zip(in_data, layout[0])]
    in_ptrs = {b.ptr for b in ins}
    outs: List[Buffer] = []
    post: List[Tuple[int, str]] = []
    for i, (a, r, (shape, dt)) in enumerate(zip(out_data, req, layout[1])):
        ptr = data_ptr(a)
        if r in ("write", "inplace") and ptr not in in_ptrs:
            outs.append(Buffer(ptr, shape, dt, dev))
            continue
        have = scratch.get(i)
        if have is None or tuple(have[0].shape) != shape or _dtype_name(have[0]) != dt:
            have = scratch[i] = alloc(shape, dt)
        outs.append(Buffer(have[1], shape, dt, dev))
        post.append((i, r))
    return ins, outs, post


def _host_alloc(shape: Tuple[int, ...], dtype: str) -> Tuple[Any, int]:
    buf = np.empty(shape, dtype=dtype)
    return buf, int(buf.ctypes.data)


def run_on_host(fused: FusedEngine, engine: Engine, in_data: List[Any], out_data: List[Any], req: List[str],
                scratch: Dict[int, Any], layout: Optional[Layout] = None) -> None:
    """One run of ``engine`` (one of ``fused``'s) over host NDArrays, honouring ``req`` (see :func:`_plan_buffers`).

    A failure is kept as ``fused.last_error`` (typed) and raised: MXNet reports a
    failed custom operator as its own check failure without the message, so the
    executor's guarded forward raises the kept one instead.
    """
    ins, outs, post = _plan_buffers(in_data, out_data, req, -1, scratch, _host_alloc, layout)
    with fused.lock:
        try:
            engine.run(ins, outs)
        except Exception as exc:
            fused.last_error = _typed(fused.name, exc)
            raise
        fused.run_count += 1
    for i, r in post:
        if r == "null":
            continue
        dst = _host_view(data_ptr(out_data[i]), tuple(out_data[i].shape), _dtype_name(out_data[i]))
        if r == "add":
            dst += scratch[i][0]
        else:
            dst[...] = scratch[i][0]


def _register() -> None:
    global _FusedOp
    import mxnet as mx

    class FusedOp(mx.operator.CustomOp):  # type: ignore[misc]
        def __init__(self, fused: FusedEngine, layout: Optional[Layout] = None, engine: Optional[Engine] = None) -> None:
            super().__init__()
            self.fused: Any = fused
            # The engine for this executor's shapes (another executor of the node may run another one).
            self.engine: Any = engine if engine is not None else fused.engine
            self.layout = layout
            self.scratch: Dict[int, Tuple[np.ndarray, int]] = {}

        def _mx_trt_release(self) -> None:
            # MXNet freed this operator (see _release_on_delete): drop the engine now, not at the next
            # garbage collection of the reference cycle MXNet's callbacks form around this object.
            self.fused = self.engine = None
            self.scratch = {}

        def forward(self, is_train: bool, req: List[str], in_data: List[Any], out_data: List[Any], aux: List[Any]) -> None:
            run_on_host(self.fused, self.engine, in_data, out_data, req, self.scratch, self.layout)

        def backward(self, req: Any, out_grad: Any, in_data: Any, out_data: Any, in_grad: Any, aux: Any) -> None:
            raise MxTrtError("mx_trt fused nodes are inference-only; bind with grad_req='null'")

    _FusedOp = FusedOp

    @mx.operator.register(OP_TYPE)
    class FusedProp(mx.operator.CustomOpProp):  # type: ignore[misc]
        def __init__(self, mx_trt_engine: str) -> None:
            super().__init__(need_top_grad=False)
            self.fused: Any = lookup_engine(mx_trt_engine)

        def _mx_trt_release(self) -> None:
            self.fused = None  # MXNet freed this node's operator properties (see _release_on_delete)

        def list_arguments(self) -> List[str]:
            return list(self.fused.input_names)

        def list_outputs(self) -> List[str]:
            return list(self.fused.output_names)

        def infer_shape(self, in_shape: List[Any]) -> Tuple[List[Any], List[Any], List[Any]]:
            # An input MXNet could not infer (a weight left out of shared_buffer) takes the
            # engine's bound shape, so the executor can allocate it.
            shapes = [tuple(int(d) for d in s) if len(s) and all(int(d) > 0 for d in s) else t.shape
                      for s, t in zip(in_shape, self.fused.engine.inputs)]
            outs = self.fused.output_shapes(shapes)
            return [list(s) for s in shapes], [list(s) for s in outs], []

        def infer_type(self, in_type: List[Any]) -> Tuple[List[Any], List[Any], List[Any]]:
            want = [np.dtype(t.dtype).type for t in self.fused.engine.inputs]
            return want, [np.dtype(t.dtype).type for t in self.fused.engine.outputs], []

        def declare_backward_dependency(self, out_grad: Any, in_data: Any, out_data: Any) -> List[Any]:
            return []

        def create_operator(self, ctx: Any, shapes: Any, dtypes: Any) -> Any:
            # Shapes are fixed for the executor that creates this operator, and so is its engine.
            in_shapes = [tuple(int(d) for d in s) for s in shapes]
            engine = self.fused.engine_for(in_shapes)
            if ctx.device_type != "cpu":
                return _gpu_operator(self.fused, ctx, engine)
            # dtypes arrive as MXNet type codes; infer_type fixed them to the engine's.
            layout: Layout = ([(s, t.dtype) for s, t in zip(in_shapes, engine.inputs)],
                              [(tuple(s), t.dtype) for s, t in zip(engine.output_shapes(in_shapes), engine.outputs)])
            return FusedOp(self.fused, layout, engine)


_GpuFusedOp: Any = None


def _gpu_operator(fused: FusedEngine, ctx: Any, engine: Optional[Engine] = None) -> Any:
    """The fused operator for a GPU context: the engine reads and writes MXNet's device memory.

    Each operator instance (one per executor) owns a runner from
    ``engine.create_runner()``: its own execution context and CUDA stream.
    ``req`` is honoured as on the CPU: ``write``/``inplace`` write in place,
    ``add``/``null`` (and an output aliasing an input) go through a device
    scratch array, added or copied by MXNet afterwards.

    Raises:
        MxTrtError: the engine cannot run on a GPU (no ``create_runner``).
    """
    global _GpuFusedOp
    engine = engine if engine is not None else fused.engine
    if not callable(getattr(engine, "create_runner", None)):
        raise MxTrtError(f"{fused.name}: the {type(engine).__name__} engine cannot run on {ctx}; "
                         "bind on mx.cpu() or use a TensorRT backend")
    if _GpuFusedOp is None:
        import mxnet as mx

        class GpuFusedOp(mx.operator.CustomOp):  # type: ignore[misc]
            def __init__(self, fused: FusedEngine, ctx: Any, engine: Any) -> None:
                super().__init__()
                self.fused: Any = fused
                self.engine = engine  # the engine for this executor's shapes
                self.ctx = ctx
                self.runner: Any = None
                self.scratch: Dict[int, Tuple[Any, int]] = {}

            def _mx_trt_release(self) -> None:
                self.__del__()
                self.fused = self.engine = None
                self.scratch = {}

            def _device_alloc(self, shape: Tuple[int, ...], dtype: str) -> Tuple[Any, int]:
                buf = mx.nd.empty(shape, ctx=self.ctx, dtype=dtype)
                return buf, data_ptr(buf)

            def forward(self, is_train: bool, req: List[str], in_data: List[Any], out_data: List[Any], aux: List[Any]) -> None:
                fused = self.fused
                ins, outs, post = _plan_buffers(in_data, out_data, req, int(self.ctx.device_id), self.scratch,
                                                self._device_alloc)
                with fused.lock:
                    try:
                        if self.runner is None:
                            self.runner = self.engine.create_runner()
                        self.runner.run(ins, outs)
                    except Exception as exc:
                        fused.last_error = _typed(fused.name, exc)
                        raise
                    fused.run_count += 1
                # The runner synchronized its stream, so the scratch arrays hold the
                # results; MXNet's own ops (ordered by its engine) add or copy them.
                for i, r in post:
                    if r != "null":
                        self.assign(out_data[i], "add" if r == "add" else "write", self.scratch[i][0])

            def backward(self, req: Any, out_grad: Any, in_data: Any, out_data: Any, in_grad: Any, aux: Any) -> None:
                raise MxTrtError("mx_trt fused nodes are inference-only; bind with grad_req='null'")

            def __del__(self) -> None:
                runner, self.runner = self.runner, None
                if runner is not None:
                    try:
                        runner.close()
                    except Exception:  # interpreter shutdown
                        pass

        _GpuFusedOp = GpuFusedOp
    return _GpuFusedOp(fused, ctx, engine)


def _typed(name: str, exc: BaseException) -> MxTrtError:
    """``exc`` as mx_trt's typed error of a run of fused node ``name``."""
    if isinstance(exc, MxTrtError):
        return exc
    err = EngineRunError(f"{name}: {type(exc).__name__}: {exc}")
    err.__cause__ = exc
    return err


_registered = False


def _drain_at_exit() -> None:
    """Finish MXNet's pending work while the interpreter is still whole.

    A fused node runs on MXNet's custom-operator threads, which call back into
    Python. A process that exits with forwards still queued (outputs never
    read) otherwise reaches MXNet's own exit handler, whose final wait runs
    those callbacks while Python is being torn down: it hangs or aborts
    (measured: 10 of 24 such exits hung and 5 aborted). ``atexit`` runs
    handlers last-registered first, and this one is registered after MXNet's,
    so the queue is empty when MXNet shuts down.
    """
    try:
        import mxnet as mx

        mx.nd.waitall()
    except Exception:  # noqa: BLE001 - an exit handler must never raise
        logger.debug("waiting for MXNet's queue at exit failed", exc_info=True)


class _ReleasingTable(dict):  # type: ignore[type-arg]
    """MXNet's table of live Python custom-operator objects, telling ours when MXNet frees them.

    MXNet (``mxnet.operator._registry.ref_holder``) holds every custom operator
    and operator-properties object until its C++ side frees it, and each such
    object also sits in a reference cycle with the ctypes callbacks MXNet made
    for it. Out of the table, it is freed only by a garbage collection, which
    may come many binds later (measured: up to 16 engines of freed executors
    alive at once in a bind loop). Ours hold engines, so on deletion an object
    that has ``_mx_trt_release`` drops its engine at once.
    """

    def __delitem__(self, key: Any) -> None:
        obj = self.get(key)
        super().__delitem__(key)
        release = getattr(obj, "_mx_trt_release", None)
        if release is not None:
            try:
                release()
            except Exception:  # noqa: BLE001 - called from MXNet's C++ side: must never raise
                logger.debug("releasing a freed fused operator failed", exc_info=True)


def _release_on_delete() -> None:
    """Put :class:`_ReleasingTable` in place of MXNet's table of live custom-operator objects (once)."""
    import mxnet as mx

    registry = mx.operator._registry
    old = registry.ref_holder
    if isinstance(old, _ReleasingTable):
        return
    before = set(old)
    table = _ReleasingTable(old)

    def restore() -> None:  # the objects MXNet registered meanwhile go back with the table
        old.clear()
        old.update(dict(table))
        registry.ref_holder = old

    patches.put(registry, "ref_holder", table, restore)
    # Whatever another thread changed in the old table while it was copied.
    table.update({k: v for k, v in list(old.items()) if k not in before})
    for k in before - set(old):
        dict.pop(table, k, None)


def ensure_registered() -> None:
    """Register the custom operator with MXNet once (and the exit handler that drains its queue)."""
    global _registered
    with _lock:
        if not _registered:
            _register()
            atexit.register(_drain_at_exit)
            _registered = True
        _release_on_delete()  # again after mx_trt.uninstall put MXNet's own table back


def registry_size() -> int:
    """How many fused nodes (:class:`FusedEngine`) are alive in this process: it falls back as executors go."""
    with _lock:
        return len(_ENGINES)


def register_engine(name: str, engine: Engine, input_names: Sequence[str], output_names: Sequence[str]) -> FusedEngine:
    ensure_registered()
    return FusedEngine(name, engine, input_names, output_names)


def make_operator(fused: FusedEngine) -> Any:
    """A fused operator instance (what MXNet creates per executor), for direct calls."""
    ensure_registered()
    return _FusedOp(fused)
