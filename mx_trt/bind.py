"""The bind-time pass: partition, export, build engines, substitute fused nodes, bind.

Pipeline (one explicit list, run at every bind with the pass on)::

    symbol_to_graph      MXNet symbol -> IR with MXNet's inferred shapes/dtypes
    remove_identities    inference-time identities (Dropout, BlockGrad, ...) go (passes.simplify)
    support              per op: converter validator, exclude list, backend -> reason
    partition            maximal cycle-free subgraphs (passes.partition)
    keep_worthwhile      subgraphs too small to pay for an engine stay native (passes.cost)
    check_acyclic        independent validator (passes.validate)
    engines              per subgraph: reuse one from this process, load it from the
                         plan cache, or export to ONNX and build; failures stay native
    fuse                 each subgraph becomes one fused node (passes.fuse)
    bind                 MXNet's own simple_bind on the optimized symbol
"""
from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

import numpy as np

from passes.cost import keep_worthwhile
from passes.fuse import FuseResult, boundary, fuse
from passes.ir import Entry, Graph
from passes.partition import PartitionResult, Subgraph, partition
from passes.simplify import remove_identities
from passes.validate import check_acyclic

from . import hook
from .backends import Backend, select_backend
from .converters import check as check_op
from .cache import EngineCache
from .errors import BackendUnavailableError, CacheError, MxTrtError, ParamMismatchError, ShapeError
from .fused_op import ENGINE_ATTR, OP_TYPE, FusedEngine, data_ptr, register_engine
from .graph_import import graph_to_json, inference_identity, symbol_to_graph
from .engines import EngineProvider, SubgraphJob
from .onnx_export import entry_name, op_spec
from .profiles import SubgraphExporter, batch_ranges
from .progress import BuildProgress
from .settings import Settings

logger = logging.getLogger(__name__)

#: Tensor types some backend's engines hold (each backend narrows it: ``Backend.tensor_dtypes``).
ENGINE_DTYPES = ("float32", "float16", "int32", "int64", "bool")


@dataclass
class Plan:
    """The analysis of one graph: what converts, how it is partitioned.

    Attributes:
        graph: The IR with shapes and dtypes.
        weights: Names of variables whose values are known (``shared_buffer``).
        reasons: Operator node id -> why it stays native (only unsupported ones).
        partition: The partition.
    """

    graph: Graph
    weights: Set[str]
    reasons: Dict[int, str]
    partition: PartitionResult

    def absorbed_ids(self) -> Set[int]:
        return {n.id for n in self.graph.nodes if n.is_variable and n.name in self.weights}

    def op_counts(self) -> Tuple[int, int]:
        """(operators inside subgraphs, all operators)."""
        total = len(self.graph.op_nodes())
        inside = sum(len(s.nodes) for s in self.partition.subgraphs)
        return inside, total


def support(graph: Graph, weights: Mapping[str, Any], settings: Settings, backend: Optional[Backend]) -> Dict[int, str]:
    """Why each unsupported operator node cannot go to an engine. O(V) validator calls."""
    reasons: Dict[int, str] = {}
    for n in graph.nodes:
        if n.is_variable:
            continue
        if n.op in settings.exclude_ops:
            reasons[n.id] = f"{n.op} is listed in MXNET_TENSORRT_EXCLUDE_OPS"
            continue
        spec = op_spec(graph, n.id, weights, backend.name if backend is not None else "")
        # The backend bounds which tensor types an engine may hold at all; within
        # that, each converter's validator decides the types it converts exactly.
        reason = backend.dtype_reason(spec) if backend is not None else _default_dtype_reason(spec)
        if reason is None:
            reason = check_op(spec)
        if reason is None and backend is not None:
            reason = backend.supports(spec)
        if reason:
            reasons[n.id] = reason
    return reasons


def _default_dtype_reason(spec: Any) -> Optional[str]:
    """Without a backend (analysis only): the types that TensorRT engines hold (float64, int8, uint8 do not)."""
    for what, dts in (("input", spec.in_dtypes), ("output", spec.out_dtypes)):
        for i, dt in enumerate(dts):
            if dt not in ENGINE_DTYPES:
                return f"{what} {i} is {dt}, which engines do not hold"
    return None


def analyze(
    sym: Any,
    shapes: Mapping[str, Tuple[int, ...]],
    params: Mapping[str, Any],
    settings: Settings,
    backend: Optional[Backend],
    type_dict: Optional[Mapping[str, Any]] = None,
) -> Plan:
    """Run the analysis half of the pass (no export, no engine).

    Args:
        sym: The MXNet symbol.
        shapes: Shapes of the data inputs.
        params: Known weights by name (NDArrays or numpy arrays).
        settings: The bind's settings.
        backend: The backend that will build engines (its restrictions apply).
        type_dict: Dtypes of inputs, as for ``simple_bind``.

    Raises:
        ShapeError: shapes are missing or contradictory.
    """
    all_shapes = {k: tuple(int(d) for d in v.shape) for k, v in params.items()}
    all_shapes.update({k: tuple(v) for k, v in shapes.items()})
    # Types as simple_bind infers them: type_dict, variables' own __dtype__, float32
    # for the rest. The weights' own dtypes do not count (MXNet ignores them too).
    dtypes = {k: np.dtype(v).name for k, v in (type_dict or {}).items()}
    args = set(sym.list_arguments()) | set(sym.list_auxiliary_states())
    unknown = sorted(set(shapes) - args)
    if unknown:
        raise ShapeError(f"shapes given for {unknown}, which are not inputs of the symbol (inputs: {sorted(args)})")
    graph = symbol_to_graph(sym, {k: v for k, v in all_shapes.items() if k in args}, {k: v for k, v in dtypes.items() if k in args})
    simplified = remove_identities(graph, inference_identity)
    if simplified.removed:
        logger.info("removed %d inference-time identity node(s) before partitioning (%s)", len(simplified.removed),
                    ", ".join(simplified.removed[:5]) + (", ..." if len(simplified.removed) > 5 else ""))
    graph = simplified.graph
    missing = [n.name for n in graph.nodes if n.is_variable and Entry(n.id, 0) not in graph.shapes]
    if missing:
        raise ShapeError(f"cannot infer the shapes of {missing}: give their shapes to simple_bind or their values in shared_buffer")
    weights = {n.name for n in graph.nodes if n.is_variable and n.name in params and n.name not in shapes}
    unset = sorted(n.name for n in graph.nodes if n.is_variable and n.name not in params and n.name not in shapes)
    if unset:
        # Not a weight and not a declared input: it can only be an input of whatever consumes it.
        logger.warning("%s %s no value in shared_buffer and no shape given to simple_bind: kept as executor "
                       "argument(s) that engines read at run time; set them through arg_dict or copy_params_from",
                       ", ".join(unset), "has" if len(unset) == 1 else "have")
    reasons = support(graph, {k: params[k] for k in weights}, settings, backend)
    part = partition(graph, reasons, settings.min_subgraph_size)
    if settings.engine_rule == "cost":
        part = keep_worthwhile(graph, part)
    check_acyclic(graph, [s.nodes for s in part.subgraphs])
    return Plan(graph=graph, weights=weights, reasons=reasons, partition=part)


def _digest(a: Any) -> str:
    """sha256 of an array's bytes; reads a CPU NDArray in place, without a copy."""
    import mxnet as mx

    if isinstance(a, mx.nd.NDArray) and a.context.device_type == "cpu" and a.stype == "default":
        a.wait_to_read()
        n = int(np.prod(a.shape, dtype=np.int64)) * np.dtype(a.dtype).itemsize
        if n == 0:
            return hashlib.sha256(b"").hexdigest()
        return hashlib.sha256((ctypes.c_char * n).from_address(data_ptr(a))).hexdigest()
    return hashlib.sha256(np.ascontiguousarray(_to_numpy(a)).tobytes()).hexdigest()


class _LazyWeights(Mapping[str, np.ndarray]):
    """Weights as numpy arrays, converted on first use (a warm plan cache needs none)."""

    def __init__(self, params: Mapping[str, Any], names: Set[str]) -> None:
        self._params = params
        self._names = names
        self._done: Dict[str, np.ndarray] = {}

    def __getitem__(self, k: str) -> np.ndarray:
        if k not in self._names:
            raise KeyError(k)
        if k not in self._done:
            self._done[k] = _to_numpy(self._params[k])
        return self._done[k]

    def __iter__(self) -> Any:
        return iter(sorted(self._names))

    def __len__(self) -> int:
        return len(self._names)

    def release(self) -> None:
        """Drop the numpy copies made so far."""
        self._done.clear()


@dataclass
class BindInfo:
    """What mx_trt keeps on an accelerated executor (``executor._mx_trt``).

    Attributes:
        symbol: The optimized symbol (fused nodes + native nodes).
        original: The symbol the user bound.
        plan: The analysis.
        engines: The fused engines this executor owns.
        absorbed: Weight name -> sha256 of the value baked into the engines.
        native_failures: Subgraph name -> why its engine was not built.
        backend: Backend name.
        timings: Seconds spent per pipeline stage.
        builds / loads / reuses: Engines built, loaded from the plan cache, and
            reused from this process's earlier binds.
    """

    symbol: Any
    original: Any
    plan: Plan
    engines: List[FusedEngine]
    absorbed: Dict[str, str]
    native_failures: Dict[str, str] = field(default_factory=dict)
    backend: str = ""
    timings: Dict[str, float] = field(default_factory=dict)
    builds: int = 0
    loads: int = 0
    reuses: int = 0

    def check_absorbed(self, arg_params: Optional[Mapping[str, Any]], aux_params: Optional[Mapping[str, Any]]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        """Drop weights baked into engines from ``copy_params_from``'s dicts after checking them.

        A value equal to the engine's copy is accepted silently (the user copies
        the same checkpoint); a different value cannot reach the engine, so it
        raises rather than being ignored.

        Raises:
            ParamMismatchError: a baked-in weight differs from the given value.
        """
        out: List[Dict[str, Any]] = []
        for params in (arg_params or {}, aux_params or {}):
            kept = {}
            for name, value in params.items():
                digest = self.absorbed.get(name)
                if digest is None:
                    kept[name] = value
                    continue
                if _digest(value) != digest:
                    raise ParamMismatchError(
                        f"weight {name!r} was baked into a TensorRT engine at bind time and the new value differs; "
                        "bind again (simple_bind with the new weights in shared_buffer) to use it"
                    )
            out.append(kept)
        return out[0], out[1]


def _why_native(grad_req: Any, shared_buffer: Any, group2ctx: Any, stype_dict: Any) -> Optional[str]:
    reqs = list(grad_req.values()) if isinstance(grad_req, dict) else list(grad_req) if isinstance(grad_req, (list, tuple)) else [grad_req]
    if any(r != "null" for r in reqs):
        return f"grad_req={grad_req!r} asks for gradients and engines are inference-only (use grad_req='null')"
    if shared_buffer is None:
        return "no weights were given: pass the merged arg_params and aux_params as shared_buffer"
    if group2ctx:
        return "group2ctx (model parallelism) is not supported by the pass"
    if stype_dict and any(v != "default" for v in stype_dict.values()):
        return "sparse storage types are not supported by the pass"
    return None


def shape_keywords(sym: Any, kwargs: Mapping[str, Any]) -> Dict[str, Tuple[int, ...]]:
    """The input shapes among ``simple_bind``'s keyword arguments, read as MXNet 1.9.1 reads them.

    MXNet takes a keyword as a shape only when its value is a tuple, and ignores
    the others (the design's example passes ``force_rebind=True``). It also
    ignores shapes of names that are neither arguments nor aux states.
    """
    names = set(sym.list_arguments()) | set(sym.list_auxiliary_states())
    shapes: Dict[str, Tuple[int, ...]] = {}
    for k, v in kwargs.items():
        if not isinstance(v, tuple):
            logger.debug("simple_bind keyword %s=%r is not a shape (MXNet ignores it)", k, v)
        elif k not in names:
            logger.info("simple_bind was given a shape for %r, which is not an input of the symbol; ignored as MXNet does", k)
        else:
            shapes[k] = v
    return shapes


def accelerated_simple_bind(
    sym: Any,
    ctx: Any,
    grad_req: Any = "write",
    type_dict: Any = None,
    stype_dict: Any = None,
    group2ctx: Any = None,
    shared_arg_names: Any = None,
    shared_exec: Any = None,
    shared_buffer: Any = None,
    **kwargs: Any,
) -> Any:
    """``Symbol.simple_bind`` with the TensorRT pass (same arguments, same result type).

    Falls back to MXNet's own bind, with one warning saying why, when gradients
    are requested, the weights are missing, no backend serves ``ctx``, or the
    pass fails on this graph for any reason: a graph MXNet binds never fails to
    bind because of the pass. ``MXNET_TENSORRT_STRICT=1`` raises instead.

    Raises:
        BackendUnavailableError: the backend forced by ``MXNET_TENSORRT_BACKEND`` is missing.
        MxTrtError: only with ``MXNET_TENSORRT_STRICT=1``, whatever stopped the pass.
    """
    original = hook.original_simple_bind()

    def native() -> Any:
        return original(sym, ctx, grad_req=grad_req, type_dict=type_dict, stype_dict=stype_dict, group2ctx=group2ctx,
                        shared_arg_names=shared_arg_names, shared_exec=shared_exec, shared_buffer=shared_buffer, **kwargs)

    why = _why_native(grad_req, shared_buffer, group2ctx, stype_dict)
    if why:
        logger.warning("MXNET_USE_TENSORRT=1 but %s: binding natively", why)
        return native()
    try:
        settings = Settings.from_env()
    except MxTrtError as exc:  # a bad environment value: one line naming it
        if os.environ.get("MXNET_TENSORRT_STRICT", "").strip().lower() in ("1", "true", "yes", "on"):
            raise
        logger.warning("MXNET_USE_TENSORRT=1 but %s: binding natively", exc)
        return native()
    try:
        backend = select_backend(ctx.device_type, settings.backend)
    except BackendUnavailableError as exc:
        if settings.backend:
            raise
        logger.warning("MXNET_USE_TENSORRT=1 but %s: binding natively", exc)
        return native()
    try:
        shapes = shape_keywords(sym, kwargs)
        exe, _ = bind_with_backend(sym, ctx, backend, settings, dict(shared_buffer), shapes, type_dict,
                                   shared_arg_names, shared_exec)
    except Exception as exc:  # noqa: BLE001 - any failure of the pass means a native bind, never a crash
        if settings.strict:
            raise
        logger.warning("MXNET_USE_TENSORRT=1 but the pass failed on this graph (%s: %s): binding natively",
                       type(exc).__name__, _one_line(exc))
        logger.debug("the pass failed", exc_info=True)
        return native()
    return exe


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 400 else text[:400] + "..."


def bind_with_backend(
    sym: Any,
    ctx: Any,
    backend: Backend,
    settings: Settings,
    params: Dict[str, Any],
    shapes: Mapping[str, Any],
    type_dict: Any = None,
    shared_arg_names: Any = None,
    shared_exec: Any = None,
) -> Tuple[Any, BindInfo]:
    """The pass proper. Returns the bound executor and its :class:`BindInfo`."""
    import mxnet as mx

    t0 = time.perf_counter()
    timings: Dict[str, float] = {}
    shapes = {k: tuple(int(d) for d in v) for k, v in shapes.items()}
    plan = analyze(sym, shapes, params, settings, backend, type_dict)
    graph = plan.graph
    timings["analyze"] = time.perf_counter() - t0
    absorbed_ids = plan.absorbed_ids()

    # Weights of nodes inside engines, as numpy and digested, once.
    needed: Set[str] = set()
    inside = {nid for s in plan.partition.subgraphs for nid in s.nodes}
    for nid in inside:
        for e in graph.nodes[nid].inputs:
            src = graph.nodes[e.node]
            if src.is_variable and e.node in absorbed_ids:
                needed.add(src.name)
    weights_np = _LazyWeights(params, needed)
    digests_all = {k: _digest(params[k]) for k in sorted(needed)}
    ranges = batch_ranges(settings, shapes)
    timings["weights"] = time.perf_counter() - t0 - timings["analyze"]

    t1 = time.perf_counter()
    cache = _engine_cache()
    subgraphs = plan.partition.subgraphs
    progress = BuildProgress(len(subgraphs))
    provider = EngineProvider(backend, _device_id(ctx), cache, progress.phase)
    exporter = SubgraphExporter(sym, shapes, params, type_dict, graph, weights_np, settings.fp16, ranges)
    built: List[Tuple[Subgraph, FusedEngine]] = []
    failures: Dict[str, str] = {}
    for k, sg in enumerate(subgraphs):
        ins, outs = boundary(graph, sg.nodes, absorbed_ids)
        progress.start(k, sg.name, len(sg.nodes))
        logger.info("engine %d/%d: %s (%d ops, %d inputs, %d outputs) with %s",
                    k + 1, len(subgraphs), sg.name, len(sg.nodes), len(ins), len(outs), backend.name)
        job = _job(sg, graph, ins, outs, digests_all, settings.fp16, ranges, exporter)
        try:
            engine, source = provider.get(job)
        except MxTrtError as exc:
            failures[sg.name] = str(exc)
            logger.warning("subgraph %s (%d ops: %s) stays native: %s", sg.name, len(sg.nodes),
                           _op_summary(graph, sg.nodes), exc)
            continue
        out_names = ["output"] if len(outs) == 1 else [f"output{i}" for i in range(len(outs))]
        fused = register_engine(sg.name, engine, [entry_name(graph, e) for e in ins], out_names)
        fused.source = source
        fused.build_count = int(source == "built")
        if ranges and engine.batch_ranges:
            fused.rebuild = _Rebuilder(exporter, provider, sg, absorbed_ids, settings, ranges, digests_all)
        built.append((sg, fused))
    progress.done()
    weights_np.release()  # engines hold their own copies; a later rebuild converts again
    timings["export_build"] = time.perf_counter() - t1

    t2 = time.perf_counter()
    kept = [sg for sg, _ in built]
    fres = fuse(graph, kept, absorbed_ids, fused_op=OP_TYPE)
    new_graph, extra = _custom_nodes(fres, built, graph)
    new_sym = mx.sym.load_json(graph_to_json(new_graph, extra))
    timings["fuse"] = time.perf_counter() - t2

    t3 = time.perf_counter()
    new_args = set(new_sym.list_arguments())
    new_aux = set(new_sym.list_auxiliary_states())
    # Arguments nobody gave a shape for (weights missing from shared_buffer) keep the inferred one.
    inferred = {n.name: graph.shapes[Entry(n.id, 0)] for n in graph.nodes if n.is_variable and Entry(n.id, 0) in graph.shapes}
    bind_shapes = {k: shapes.get(k, inferred.get(k)) for k in new_args if k in shapes or (k not in params and k in inferred)}
    # A weight that was also given a shape stays an executor argument (MXNet lets
    # the caller overwrite it); its value still comes from shared_buffer, as natively.
    native_buf = {k: v for k, v in params.items() if k in new_args and isinstance(v, mx.nd.NDArray)
                  and (k not in shapes or tuple(v.shape) == tuple(shapes[k]))}
    tdict = {k: v for k, v in (type_dict or {}).items() if k in new_args}
    exe = hook.original_simple_bind()(new_sym, ctx, grad_req="null", type_dict=tdict or None,
                                      shared_arg_names=shared_arg_names, shared_exec=shared_exec,
                                      shared_buffer=native_buf, **bind_shapes)
    # Native weights: shared_buffer arrays were reused where ctx/shape/dtype match;
    # copy the others, and aux states, which simple_bind never takes from shared_buffer.
    for name in sorted(new_args):
        if name in params and (name not in shapes or tuple(params[name].shape) == tuple(shapes[name])):
            _copy_into(exe.arg_dict[name], params[name])
    for name in sorted(new_aux):
        if name in params:
            _copy_into(exe.aux_dict[name], params[name])
    timings["bind"] = time.perf_counter() - t3

    absorbed_names = {n.name for n in graph.nodes if n.is_variable and n.id in absorbed_ids} - new_args - new_aux
    digests = {name: digests_all[name] for name in sorted(absorbed_names) if name in digests_all}
    info = BindInfo(symbol=new_sym, original=sym, plan=plan, engines=[f for _, f in built], absorbed=digests,
                    native_failures=failures, backend=backend.name, timings=timings,
                    builds=provider.builds, loads=provider.loads, reuses=provider.reuses)
    exe._mx_trt = info
    inside_ops, total_ops = sum(len(s.nodes) for s in kept), len(graph.op_nodes())
    logger.info("mx_trt: %d engine(s) hold %d of %d operators (%s); bind took %.2f s",
                len(kept), inside_ops, total_ops, backend.name, time.perf_counter() - t0)
    return exe, info


def _custom_nodes(fres: FuseResult, built: Sequence[Tuple[Subgraph, FusedEngine]], old: Graph) -> Tuple[Graph, Dict[int, Dict[str, str]]]:
    """Turn fused IR nodes into MXNet ``Custom`` nodes naming their engines.

    A fused node with a single output that is a graph output takes the name of the
    node that produced it, so ``executor.output_dict`` keeps its keys.
    """
    by_name = {sg.name: f for sg, f in built}
    g = fres.graph
    extra: Dict[int, Dict[str, str]] = {}
    heads = set(g.heads)
    taken = {n.name for n in g.nodes}
    for fs in fres.fused:
        node = g.nodes[fs.node_id]
        fused = by_name[fs.subgraph.name]
        node.op = "Custom"
        node.attrs = {}
        extra[node.id] = {"op_type": OP_TYPE, ENGINE_ATTR: fused.key}
        if len(fs.outputs) == 1 and Entry(node.id, 0) in heads:
            src = old.nodes[fs.outputs[0].node]
            if src.num_outputs == 1 and src.name not in taken:
                taken.discard(node.name)
                node.name = src.name
                taken.add(src.name)
    return g, extra


def _engine_cache() -> Any:
    """The plan cache from the environment, or ``None`` (disabled or unusable, with a warning)."""
    try:
        return EngineCache.from_env()
    except (CacheError, OSError) as exc:
        logger.warning("plan cache disabled: %s", exc)
        return None


def _job(sg: Subgraph, graph: Graph, ins: Sequence[Entry], outs: Sequence[Entry], digests: Mapping[str, str],
         fp16: bool, ranges: Sequence[Any], exporter: SubgraphExporter) -> SubgraphJob:
    used = {graph.nodes[e.node].name for n in sg.nodes for e in graph.nodes[n].inputs if graph.nodes[e.node].is_variable}
    return SubgraphJob(name=sg.name, graph=graph, nodes=sg.nodes, inputs=ins, outputs=outs,
                       weight_digests={k: v for k, v in digests.items() if k in used}, fp16=fp16, batch_ranges=ranges,
                       export=lambda: exporter.export(sg.name, sg.nodes, ins, outs, graph, ranges))


class _Rebuilder:
    """Builds a fused node's engine again for a batch outside its profiles (``executor.reshape``)."""

    def __init__(self, exporter: SubgraphExporter, provider: EngineProvider, sg: Subgraph, absorbed: Set[int],
                 settings: Settings, ranges: Sequence[Any], digests: Mapping[str, str]) -> None:
        self.exporter, self.provider, self.sg, self.absorbed = exporter, provider, sg, absorbed
        self.settings, self.ranges, self.digests = settings, list(ranges), digests

    def __call__(self, batch: int) -> Any:
        ranges = [(1, batch, max(max(r[2] for r in self.ranges), batch))]
        graph = self.exporter.graph_at(batch)
        ins, outs = boundary(graph, self.sg.nodes, self.absorbed)
        engine, _ = self.provider.get(_job(self.sg, graph, ins, outs, self.digests, self.settings.fp16, ranges, self.exporter))
        self.ranges = ranges
        return engine


def _to_numpy(v: Any) -> np.ndarray:
    return v.asnumpy() if hasattr(v, "asnumpy") else np.asarray(v)


def _copy_into(dst: Any, src: Any) -> None:
    import mxnet as mx

    if isinstance(src, mx.nd.NDArray):
        if src.handle.value == dst.handle.value:
            return
        if tuple(src.shape) != tuple(dst.shape):
            raise ShapeError(f"shared_buffer value has shape {src.shape}, the executor needs {dst.shape}")
        src.copyto(dst)
    else:
        dst[:] = np.asarray(src)


def _device_id(ctx: Any) -> int:
    return -1 if ctx.device_type == "cpu" else int(ctx.device_id)


def _op_summary(graph: Graph, nodes: Sequence[int]) -> str:
    counts: Dict[str, int] = {}
    for nid in nodes:
        counts[graph.nodes[nid].op] = counts.get(graph.nodes[nid].op, 0) + 1
    return ", ".join(f"{k} x{v}" for k, v in sorted(counts.items()))
