"""The pass proper: from a :class:`BindRequest` to an executor whose fused nodes run engines.

A bind is the list :data:`STAGES`, run in order by :func:`run_stages`: each stage
is a function that takes the :class:`BindState` so far and returns it with its
own result added, so the list reads top to bottom as the bind runs::

    plan_cache    open the plan cache; the measured engine rule falls back to the cost rule
                  when it cannot run (no cache, no native bind)
    import        MXNet symbol -> IR, identities dropped (pipeline.plan.import_graph)
    partition     support per operator, maximal subgraphs, the engine rule's pruning, the
                  independent check (pipeline.plan.partition_graph): the Plan
    int8          the calibration table checked against the graph (pipeline.int8)
    weights       digests of the weights engines absorb; the batch profiles (builder.profiles)
    export_build  per subgraph: reuse an engine from this process, load it from the plan cache,
                  or export to ONNX and build; under the measured rule, time the candidates
                  (pipeline.engines); a failure leaves that subgraph native with a warning
    fuse          each subgraph becomes one fused node (mx_trt.passes.fuse), an MXNet
                  ``Custom`` node naming its engine (runtime.fused_op): the optimized symbol
    info          the BindInfo: engines, absorbed weights' digests, native failures, counts

:func:`optimize` runs them; :func:`bind` then binds the optimized symbol with
MXNet's own ``simple_bind`` (``request.native_bind``, :func:`bind_optimized`).
Each stage's duration is logged at DEBUG (``stage <name> took <ms> ms``) and kept
in :attr:`BindInfo.timings`. A stage's error propagates unchanged: the front-ends
decide whether to fall back to MXNet's own bind.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple, TypeVar

from mx_trt.builder.profiles import batch_ranges
from mx_trt.cache import EngineCache
from mx_trt.errors import CacheError, MxTrtError, ParamMismatchError
from mx_trt.graph.importer import graph_to_json
from mx_trt.passes.fuse import FuseResult, fuse
from mx_trt.passes.ir import Entry, Graph
from mx_trt.passes.partition import Subgraph
from mx_trt.pipeline.engines import BindWeights, Engines, build_engines
from mx_trt.pipeline.int8 import Int8Setup, int8_setup
from mx_trt.pipeline.measure import Decision
from mx_trt.pipeline.plan import Imported, Plan, import_graph, partition_graph
from mx_trt.pipeline.request import BindRequest
from mx_trt.pipeline.weights import LazyWeights, digest as digest_of, load_weights
from mx_trt.runtime.arbiter import BindTimes
from mx_trt.runtime.direct import DirectForward
from mx_trt.runtime.forward import guard_forward
from mx_trt.runtime.fused_op import ENGINE_ATTR, OP_TYPE, FusedEngine
from mx_trt.runtime.twin import Alternate, AlternateRun, RuntimeCheck
from mx_trt.settings import Settings

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass
class BindInfo:
    """What mx_trt keeps on an accelerated executor (``executor._mx_trt``).

    Attributes:
        symbol: The optimized symbol (fused nodes + native nodes).
        original: The symbol the user bound.
        plan: The analysis.
        engines: The fused engines this executor owns.
        absorbed: Weight name -> digest (:func:`mx_trt.pipeline.weights.digest`) of the value baked
            into the engines, for the weights no longer among the symbol's arguments and for those
            that are also graph outputs (those stay executor arguments: they are outputs too).
        native_failures: Subgraph name -> why its engine was not built.
        backend: Backend name.
        timings: Seconds spent per stage of :data:`STAGES` (by its name), ``measure`` (the
            measured rule's timing, inside ``export_build``) and ``bind`` (MXNet's own bind).
        builds / loads / reuses: Engines built, loaded from the plan cache, and
            reused from this process's earlier binds.
        decisions: Subgraph name -> what the measured engine rule decided and measured
            (:class:`~mx_trt.pipeline.measure.Decision`); empty under the other rules.
            Subgraphs it keeps native are also in ``native_failures``, with the decision's text.
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
    decisions: Dict[str, Decision] = field(default_factory=dict)

    def kept_engines(self) -> List[str]:
        """``"backend precision"`` of each engine kept, sorted: the measured rule's choices, else the bind's backend."""
        chosen = [d.label for d in self.decisions.values() if d.label is not None]
        return sorted(chosen) if chosen else [self.backend] * len(self.engines)

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
                if digest_of(value) != digest:
                    raise ParamMismatchError(
                        f"weight {name!r} was baked into a TensorRT engine at bind time and the new value differs; "
                        "bind again (simple_bind with the new weights in shared_buffer) to use it"
                    )
            out.append(kept)
        return out[0], out[1]


@dataclass(frozen=True)
class BindState:
    """The value the stages hand on: the request, then what each stage has added (``None``: not yet run).

    Attributes:
        request: The bind (``plan_cache`` may switch its engine rule from measured to cost).
        cache: The plan cache, or ``None`` (disabled or unusable).
        imported: The imported graph and the names of the known weights.
        plan: The analysis.
        int8: The int8 setup, or ``None`` (not int8).
        weights: The absorbed weights' views and digests, and the batch profiles.
        engines: The engines built, loaded or reused, and the subgraphs left native.
        symbol: The optimized MXNet symbol.
        info: What the executor will carry.
    """

    request: BindRequest
    cache: Any = None
    imported: Optional[Imported] = None
    plan: Optional[Plan] = None
    int8: Optional[Int8Setup] = None
    weights: Optional[BindWeights] = None
    engines: Optional[Engines] = None
    symbol: Any = None
    info: Optional[BindInfo] = None


def _need(value: Optional[T], what: str) -> T:
    """``value``, which an earlier stage must have set.

    Raises:
        MxTrtError: a stage ran before the one that makes ``what``.
    """
    if value is None:
        raise MxTrtError(f"a bind stage needs {what}, which an earlier stage of STAGES makes")
    return value


# -- The stages, in the order of STAGES ----------------------------------------------------------------


def open_plan_cache(state: BindState) -> BindState:
    """The plan cache of this bind; the cost rule instead of the measured one when that cannot run."""
    cache = _engine_cache(state.request.settings)
    return dataclasses.replace(state, cache=cache, request=_resolve_rule(state.request, cache))


def import_symbol(state: BindState) -> BindState:
    """MXNet symbol -> IR (:func:`~mx_trt.pipeline.plan.import_graph`). Raises ShapeError."""
    return dataclasses.replace(state, imported=import_graph(state.request))


def partition_subgraphs(state: BindState) -> BindState:
    """Support, partition, pruning, check (:func:`~mx_trt.pipeline.plan.partition_graph`): the plan."""
    return dataclasses.replace(state, plan=partition_graph(state.request, _need(state.imported, "the graph")))


def check_int8(state: BindState) -> BindState:
    """The int8 setup (:func:`~mx_trt.pipeline.int8.int8_setup`). Raises CalibrationError: no usable table."""
    request = state.request
    if request.backend is None:
        raise MxTrtError("a bind request needs a backend")
    return dataclasses.replace(state, int8=int8_setup(_need(state.plan, "the plan"), request.settings, request.backend))


def read_weights(state: BindState) -> BindState:
    """Views and digests of the weights that engines absorb, read once; the batch profiles asked for."""
    import mxnet as mx

    plan, request = _need(state.plan, "the plan"), state.request
    graph, absorbed_ids = plan.graph, plan.absorbed_ids()
    needed: Set[str] = set()
    inside = {nid for s in plan.partition.subgraphs for nid in s.nodes}
    for nid in inside:
        for e in graph.nodes[nid].inputs:
            src = graph.nodes[e.node]
            if src.is_variable and e.node in absorbed_ids:
                needed.add(src.name)
    # Native operators still running may rewrite a weight in place (MXNet's oneDNN convolution reorders its
    # weight into a blocked layout during an inference forward): the weights are read only once nothing runs.
    mx.nd.waitall()
    arrays = LazyWeights(request.params, needed)
    digests = {k: digest_of(arrays[k]) for k in sorted(needed)}  # the views are kept for the export
    ranges = batch_ranges(request.settings, request.shapes)
    return dataclasses.replace(state, weights=BindWeights(arrays=arrays, digests=digests, ranges=ranges))


def get_engines(state: BindState) -> BindState:
    """An engine per subgraph, or why it stays native (:func:`~mx_trt.pipeline.engines.build_engines`)."""
    engines = build_engines(state.request, _need(state.plan, "the plan"), state.int8,
                            _need(state.weights, "the weights"), state.cache)
    return dataclasses.replace(state, engines=engines)


def fuse_engines(state: BindState) -> BindState:
    """Each subgraph with an engine becomes one MXNet ``Custom`` node naming it: the optimized symbol."""
    import mxnet as mx

    plan, engines = _need(state.plan, "the plan"), _need(state.engines, "the engines")
    kept = [sg for sg, _ in engines.built]
    fres = fuse(plan.graph, kept, plan.absorbed_ids(), fused_op=OP_TYPE)
    new_graph, extra = _custom_nodes(fres, engines.built, plan.graph)
    return dataclasses.replace(state, symbol=mx.sym.load_json(graph_to_json(new_graph, extra)))


def make_info(state: BindState) -> BindState:
    """The :class:`BindInfo`: the optimized symbol, its engines, and the digests of the weights they hold."""
    plan, engines = _need(state.plan, "the plan"), _need(state.engines, "the engines")
    weights = _need(state.weights, "the weights")
    new_sym: Any = _need(state.symbol, "the optimized symbol")
    graph, absorbed_ids = plan.graph, plan.absorbed_ids()
    new_args = set(new_sym.list_arguments())
    new_aux = set(new_sym.list_auxiliary_states())
    absorbed_names = {n.name for n in graph.nodes if n.is_variable and n.id in absorbed_ids} - new_args - new_aux
    # A weight that is also a graph output stays an executor argument (it is an output
    # too), yet the engines hold their own copy of it: copy_params_from must check it as well.
    absorbed_names |= _baked_heads(graph, absorbed_ids) & set(weights.digests)
    digests = {name: weights.digests[name] for name in sorted(absorbed_names) if name in weights.digests}
    backend = state.request.backend
    info = BindInfo(symbol=new_sym, original=state.request.symbol, plan=plan, engines=[f for _, f in engines.built],
                    absorbed=digests, native_failures=dict(engines.failures),
                    backend=engines.backend or (backend.name if backend is not None else ""), builds=engines.builds,
                    loads=engines.loads, reuses=engines.reuses, decisions=dict(engines.decisions))
    return dataclasses.replace(state, info=info)


@dataclass(frozen=True)
class Stage:
    """One named step of a bind: ``run`` takes the state so far and returns it with its result added."""

    name: str
    run: Callable[[BindState], BindState]


#: The stages of a bind, in the order they run (:func:`run_stages`).
STAGES: Tuple[Stage, ...] = (
    Stage("plan_cache", open_plan_cache),
    Stage("import", import_symbol),
    Stage("partition", partition_subgraphs),
    Stage("int8", check_int8),
    Stage("weights", read_weights),
    Stage("export_build", get_engines),
    Stage("fuse", fuse_engines),
    Stage("info", make_info),
)


def run_stages(state: BindState, stages: Optional[Sequence[Stage]] = None) -> Tuple[BindState, Dict[str, float]]:
    """Run ``stages`` (default :data:`STAGES`) in order on ``state``; each one's duration is logged at DEBUG.

    Returns:
        The final state, and seconds per stage name.

    Raises:
        Whatever a stage raises, unchanged (logged at DEBUG with the stage's name).
    """
    timings: Dict[str, float] = {}
    for stage in STAGES if stages is None else stages:
        t0 = time.perf_counter()
        try:
            state = stage.run(state)
        except BaseException as exc:
            logger.debug("stage %s failed after %.1f ms: %s", stage.name, (time.perf_counter() - t0) * 1e3,
                         type(exc).__name__)
            raise
        timings[stage.name] = time.perf_counter() - t0
        logger.debug("stage %s took %.1f ms", stage.name, timings[stage.name] * 1e3)
    return state, timings


def bind(request: BindRequest) -> Tuple[Any, BindInfo]:
    """The pass proper: :func:`optimize`, then MXNet's own bind of the optimized symbol (:func:`bind_optimized`).

    Args:
        request: The bind; ``request.ctx``, ``request.backend`` and ``request.native_bind`` are required.

    Returns:
        The bound executor (with ``executor._mx_trt`` set) and its :class:`BindInfo`.

    Raises:
        MxTrtError: the request cannot be served (the front-end decides whether to fall back).
    """
    info = optimize(request)
    t0 = time.perf_counter()
    exe = bind_optimized(request, info)
    info.timings["bind"] = time.perf_counter() - t0
    return exe, info


def optimize(request: BindRequest) -> BindInfo:
    """Run :data:`STAGES`: the optimized symbol, not yet bound.

    ``info.symbol`` holds the fused nodes (MXNet ``Custom`` nodes naming their
    engines, which live as long as ``info``) and the native nodes; weights
    baked into engines are no longer among its arguments (``info.absorbed``).

    Raises:
        MxTrtError: the request cannot be served.
    """
    if request.backend is None:
        raise MxTrtError("a bind request needs a backend")
    t0 = time.perf_counter()
    state, timings = run_stages(BindState(request=request))
    info, engines = _need(state.info, "the bind info"), _need(state.engines, "the engines")
    info.timings.update(timings)
    measured = ""
    if engines.measured:
        info.timings["measure"] = engines.measure_s
        native = sum(1 for d in engines.decisions.values() if d.engine is None)
        measured = (f"; measured rule: {native} of {len(engines.decisions)} subgraph(s) kept native, "
                    f"{engines.timed} timed in {engines.measure_s:.2f} s")
    inside_ops, total_ops = sum(len(sg.nodes) for sg, _ in engines.built), len(info.plan.graph.op_nodes())
    logger.info("mx_trt: %d engine(s) hold %d of %d operators (%s); optimized in %.2f s%s",
                len(engines.built), inside_ops, total_ops, ", ".join(sorted(set(info.kept_engines()))) or info.backend,
                time.perf_counter() - t0, measured)
    return info


def bind_optimized(request: BindRequest, info: BindInfo) -> Any:
    """MXNet's own ``simple_bind`` (``request.native_bind``) of ``info.symbol``, native weights from ``request.params``.

    Arguments that stayed native take their arrays from the request's weights
    (shared where ctx, shape and dtype match, else copied); aux states are copied.

    Returns:
        The executor, with ``executor._mx_trt = info``.
    """
    import mxnet as mx

    if request.ctx is None or request.native_bind is None:
        raise MxTrtError("binding needs the request's ctx and native_bind")
    new_sym, graph, params, shapes = info.symbol, info.plan.graph, request.params, request.shapes
    new_args = set(new_sym.list_arguments())
    new_aux = set(new_sym.list_auxiliary_states())
    # Every argument gets its shape from the analysis: MXNet reads none from shared_buffer, and
    # once the operators that consumed a weight are inside an engine, nothing may be left to
    # infer it from (a weight that is also a graph output, or missing from shared_buffer).
    inferred = {n.name: graph.shapes[Entry(n.id, 0)] for n in graph.nodes if n.is_variable and Entry(n.id, 0) in graph.shapes}
    bind_shapes = {k: shapes.get(k, inferred.get(k)) for k in new_args if k in shapes or k in inferred}
    # A weight that was also given a shape stays an executor argument (MXNet lets
    # the caller overwrite it); its value still comes from shared_buffer, as natively.
    native_buf = {k: v for k, v in params.items() if k in new_args and isinstance(v, mx.nd.NDArray)
                  and (k not in shapes or tuple(v.shape) == tuple(shapes[k]))}
    tdict = {k: v for k, v in (request.type_dict or {}).items() if k in new_args}
    exe = request.native_bind(new_sym, request.ctx, grad_req="null", type_dict=tdict or None,
                              shared_arg_names=request.shared_arg_names, shared_exec=request.shared_exec,
                              shared_buffer=native_buf, **bind_shapes)
    # Native weights: shared_buffer arrays were reused where ctx/shape/dtype match;
    # copy the others, and aux states, which simple_bind never takes from shared_buffer.
    load_weights(exe, params, strict_aux=True)
    exe._mx_trt = info
    guard_forward(exe, info.engines, runtime_check(request, info))
    return exe


def runtime_check(request: BindRequest, info: BindInfo) -> Optional[RuntimeCheck]:
    """The run-time comparison of the executor's engines with native MXNet (:mod:`mx_trt.runtime.arbiter`), or ``None``.

    ``settings.runtime_check``: ``True`` on, ``False`` off, ``None`` (auto) on for
    CPU binds under the measured engine rule. Never without an engine or without
    MXNet's own bind to make the native twin.
    """
    if not request.checked or not info.engines:
        return None
    outputs = request.symbol.list_outputs()
    name = "executor of " + ", ".join(outputs[:2]) + (", ..." if len(outputs) > 2 else "")
    alternates: List[Alternate] = []
    on_keep: Optional[Callable[[str, Mapping[str, float]], None]] = None
    if len(info.engines) == 1:
        fused = info.engines[0]
        alternates = [(label, functools.partial(alternate_run, fused, label, make)) for label, make in fused.alternates]
        on_keep = fused.keep_choice
    return RuntimeCheck(lambda exe: native_twin(request, exe), name, measured_engines(info), alternates=alternates,
                        on_keep=on_keep)


def alternate_run(fused: FusedEngine, label: str, make: Callable[[], Any], exe: Any) -> AlternateRun:
    """``exe``'s inference forward by the ``label`` engine of ``fused``'s subgraph (``make()`` gives it), run on
    the caller's thread as ``exe``'s own engine is (:class:`~mx_trt.runtime.direct.DirectForward`).

    Raises:
        MxTrtError: ``exe`` does not run its engine directly, or the engine does not build.
        ShapeError: the engine takes other shapes or gives other outputs than ``fused``'s.
    """
    direct = DirectForward.plan(exe, [fused])
    if direct is None:
        raise MxTrtError(f"{fused.name}: the executor does not run its engine on the caller's thread")
    return direct.with_engine(make(), f"{fused.name}[{label}]").forward


def measured_engines(info: BindInfo) -> Optional[BindTimes]:
    """What the measured rule timed of the executor's engines, at this bind or the one that stored the
    decisions (seconds, summed over the engines), or ``None``: no engine, or one not timed against MXNet.

    ``partial`` unless one engine holds every operator: the operators left native (and the subgraphs
    kept native) run on both sides, outside the sums.
    """
    if not info.engines:
        return None
    engines = native = first = 0.0
    firsts = True
    for fused in info.engines:
        d = info.decisions.get(fused.name)
        engine_ms = d.engine_ms.get(d.label) if d is not None and d.label is not None else None
        if d is None or d.how != "measured" or not d.native_ms or not engine_ms:
            return None
        engines, native = engines + engine_ms, native + d.native_ms
        firsts = firsts and d.native_first_ms is not None
        first += d.native_first_ms or 0.0
    inside, total = info.plan.op_counts()
    return BindTimes(engines / 1e3, native / 1e3, first / 1e3 if firsts else None,
                     partial=len(info.engines) != 1 or inside != total)


def native_twin(request: BindRequest, exe: Any) -> Any:
    """MXNet's own executor of ``request.symbol`` (the symbol the user bound) at ``exe``'s input shapes.

    It reads ``exe``'s arguments (inputs, weights left native) and the request's
    weights in place where MXNet can share them (``shared_buffer``); the rest,
    and the aux states, are copied (:func:`~mx_trt.pipeline.weights.load_weights`).

    Raises:
        MXNetError, ShapeError: MXNet cannot bind the symbol so.
    """
    import mxnet as mx

    if request.ctx is None or request.native_bind is None:
        raise MxTrtError("a native twin needs the request's ctx and native_bind")
    args, params = exe.arg_dict, request.params
    buf: Dict[str, Any] = {}
    for name in request.symbol.list_arguments():
        arr = args.get(name)
        if arr is None:
            arr = params.get(name)
        if isinstance(arr, mx.nd.NDArray):
            buf[name] = arr
    shapes = {k: tuple(v.shape) for k, v in buf.items()}
    types = {k: v.dtype for k, v in buf.items()}
    twin = request.native_bind(request.symbol, request.ctx, grad_req="null", type_dict=types, shared_buffer=buf,
                               **shapes)
    load_weights(twin, params, strict_aux=True)
    return twin


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


def _engine_cache(settings: Settings) -> Any:
    """The plan cache of this bind (``settings.cache_dir`` and ``cache_max_mb``), or ``None``.

    ``None`` when disabled, or unusable (with a warning): a bind never fails for its cache.
    """
    try:
        return EngineCache.from_settings(settings)
    except (CacheError, OSError) as exc:
        logger.warning("plan cache disabled: %s", exc)
        return None


def _resolve_rule(request: BindRequest, cache: Any) -> BindRequest:
    """``request`` with the cost rule instead of the measured one when that cannot run.

    The measured rule needs the plan cache (to keep its decisions) and MXNet's
    own bind (to time the subgraphs natively: ``request.native_bind``).
    """
    if request.settings.engine_rule != "measured":
        return request
    if cache is None:
        why = "the plan cache to keep its decisions, and it is disabled"
    elif request.native_bind is None:
        why = "MXNet's own bind to time subgraphs natively, and this front-end does not hand it over"
    else:
        return request
    logger.info("engine rule: measured needs %s: the cost rule decides instead", why)
    return dataclasses.replace(request, settings=dataclasses.replace(request.settings, engine_rule="cost"))


def _baked_heads(graph: Graph, absorbed: Set[int]) -> Set[str]:
    """Names of absorbed variables that are also graph outputs."""
    return {graph.nodes[e.node].name for e in graph.heads if e.node in absorbed}
