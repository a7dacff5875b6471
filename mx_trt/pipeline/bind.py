"""The pass proper: from a :class:`BindRequest` to an executor whose fused nodes run engines.

Stages, in order (each names its module)::

    analyze              import, simplify, support, partition (pipeline.plan)
    weights              digests of the weights engines absorb (pipeline.weights)
    batch_ranges         the batch profiles asked for (build.profiles)
    engines              per subgraph: reuse one from this process, load it from the
                         plan cache, or export to ONNX (export.subgraph, export.dynamic,
                         export.precision) and build (build.engines, build.backends);
                         a failure leaves that subgraph native with a warning
    fuse                 each subgraph becomes one fused node (mx_trt.passes.fuse), an MXNet
                         ``Custom`` node naming its engine (runtime.fused_op)
    native bind          MXNet's own simple_bind on the optimized symbol (request.native_bind)
"""
from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from mx_trt.builder.backends import candidate_backends
from mx_trt.builder.engines import EngineProvider, SubgraphJob
from mx_trt.builder.profiles import batch_ranges
from mx_trt.builder.progress import BuildProgress
from mx_trt.cache import EngineCache
from mx_trt.errors import CacheError, ConversionError, MxTrtError, ParamMismatchError, ShapeError
from mx_trt.export.dynamic import SubgraphExporter
from mx_trt.export.subgraph import entry_name, op_spec
from mx_trt.graph.importer import graph_to_json
from mx_trt.passes.fuse import FuseResult, boundary, fuse
from mx_trt.passes.ir import Entry, Graph
from mx_trt.passes.partition import Subgraph
from mx_trt.pipeline.int8 import Int8Setup, int8_setup
from mx_trt.pipeline.measure import Decision, Measurer
from mx_trt.pipeline.plan import Plan, analyze
from mx_trt.pipeline.request import BindRequest
from mx_trt.pipeline.weights import LazyWeights, digest as digest_of, load_weights
from mx_trt.runtime.fused_op import ENGINE_ATTR, OP_TYPE, FusedEngine, guard_forward, register_engine
from mx_trt.settings import Settings

logger = logging.getLogger(__name__)


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
        timings: Seconds spent per pipeline stage.
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
    """Analyze, get an engine per subgraph, and fuse: the optimized symbol, not yet bound.

    ``info.symbol`` holds the fused nodes (MXNet ``Custom`` nodes naming their
    engines, which live as long as ``info``) and the native nodes; weights
    baked into engines are no longer among its arguments (``info.absorbed``).

    Raises:
        MxTrtError: the request cannot be served.
    """
    import mxnet as mx

    backend = request.backend
    if backend is None:
        raise MxTrtError("a bind request needs a backend")
    t0 = time.perf_counter()
    cache = _engine_cache(request.settings)
    request = _resolve_rule(request, cache)
    sym, settings = request.symbol, request.settings
    params, shapes = request.params, request.shapes
    timings: Dict[str, float] = {}
    plan = analyze(request)
    graph = plan.graph
    timings["analyze"] = time.perf_counter() - t0
    int8 = int8_setup(plan, settings, backend)  # CalibrationError: no usable table for this graph
    absorbed_ids = plan.absorbed_ids()

    # Weights of nodes inside engines, as numpy and digested, once.
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
    weights_np = LazyWeights(params, needed)
    digests_all = {k: digest_of(weights_np[k]) for k in sorted(needed)}  # the views are kept for the export
    ranges = batch_ranges(settings, shapes)
    timings["weights"] = time.perf_counter() - t0 - timings["analyze"]

    t1 = time.perf_counter()
    subgraphs = plan.partition.subgraphs
    progress = BuildProgress(len(subgraphs))
    provider = EngineProvider(backend, request.device_id, cache, progress.phase, settings.engine_options())
    exporter = SubgraphExporter(sym, shapes, params, graph, weights_np, settings.fp16, ranges,
                                int8.export if int8 is not None else None)
    rule = _MeasuredRule(request, plan, provider, exporter, int8, weights_np, ranges, cache,
                         progress.phase) if settings.engine_rule == "measured" else None
    built: List[Tuple[Subgraph, FusedEngine]] = []
    failures: Dict[str, str] = {}
    decisions: Dict[str, Decision] = {}
    for k, sg in enumerate(subgraphs):
        ins, outs = boundary(graph, sg.nodes, absorbed_ids)
        progress.start(k, sg.name, len(sg.nodes))
        logger.info("engine %d/%d: %s (%d ops, %d inputs, %d outputs) with %s",
                    k + 1, len(subgraphs), sg.name, len(sg.nodes), len(ins), len(outs), backend.name)
        job = _job(sg, graph, ins, outs, digests_all, settings, int8, ranges, exporter)
        sg_provider, sg_exporter, sg_settings, sg_int8 = provider, exporter, settings, int8
        try:
            if rule is None:
                engine, source = provider.get(job)
            else:
                decision, chosen = rule.decide(sg, ins, outs, job, digests_all)
                decisions[sg.name] = decision
                logger.info("%s: %s%s", sg.name, decision.text, " (stored decision)" if decision.stored else "")
                if chosen is None:
                    failures[sg.name] = decision.text
                    continue
                engine, source, (sg_provider, sg_exporter, sg_settings, sg_int8) = chosen
        except MxTrtError as exc:
            if settings.strict and isinstance(exc, ConversionError):
                raise  # a converter broke (a user converter's output shape among others): strict wants to know
            failures[sg.name] = str(exc)
            logger.warning("subgraph %s (%d ops: %s) stays native: %s", sg.name, len(sg.nodes),
                           _op_summary(graph, sg.nodes), exc)
            continue
        out_names = ["output"] if len(outs) == 1 else [f"output{i}" for i in range(len(outs))]
        fused = register_engine(sg.name, engine, [entry_name(graph, e) for e in ins], out_names)
        fused.source = source
        fused.build_count = int(source == "built")
        # executor.reshape to a batch this engine does not take builds one for it (static, or
        # over a widened profile when profiles were asked for).
        fused.rebuild = _Rebuilder(sg_exporter, sg_provider, sg, absorbed_ids, sg_settings,
                                   ranges if engine.batch_ranges else [], digests_all, sg_int8)
        if not ranges:
            fused.rebuild_hint = "MXNET_TENSORRT_MAX_BATCH_SIZE gives engines that take a range of batches"
        built.append((sg, fused))
    progress.done()
    weights_np.release()  # engines hold what they need; a later rebuild makes new views
    timings["export_build"] = time.perf_counter() - t1

    t2 = time.perf_counter()
    kept = [sg for sg, _ in built]
    fres = fuse(graph, kept, absorbed_ids, fused_op=OP_TYPE)
    new_graph, extra = _custom_nodes(fres, built, graph)
    new_sym = mx.sym.load_json(graph_to_json(new_graph, extra))
    timings["fuse"] = time.perf_counter() - t2

    new_args = set(new_sym.list_arguments())
    new_aux = set(new_sym.list_auxiliary_states())
    absorbed_names = {n.name for n in graph.nodes if n.is_variable and n.id in absorbed_ids} - new_args - new_aux
    # A weight that is also a graph output stays an executor argument (it is an output
    # too), yet the engines hold their own copy of it: copy_params_from must check it as well.
    absorbed_names |= _baked_heads(graph, absorbed_ids) & set(digests_all)
    digests = {name: digests_all[name] for name in sorted(absorbed_names) if name in digests_all}
    info = BindInfo(symbol=new_sym, original=sym, plan=plan, engines=[f for _, f in built], absorbed=digests,
                    native_failures=failures, backend=backend.name, timings=timings,
                    builds=provider.builds, loads=provider.loads, reuses=provider.reuses, decisions=decisions)
    if rule is not None:
        info.builds, info.loads, info.reuses = rule.counts()
        timings["measure"] = rule.measurer.spent_s
    inside_ops, total_ops = sum(len(s.nodes) for s in kept), len(graph.op_nodes())
    measured = ""
    if rule is not None:
        native = sum(1 for d in decisions.values() if d.engine is None)
        measured = (f"; measured rule: {native} of {len(decisions)} subgraph(s) kept native, "
                    f"{rule.measurer.timed} timed in {rule.measurer.spent_s:.2f} s")
    logger.info("mx_trt: %d engine(s) hold %d of %d operators (%s); optimized in %.2f s%s",
                len(kept), inside_ops, total_ops, backend.name, time.perf_counter() - t0, measured)
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
    guard_forward(exe, info.engines)
    return exe


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


class _MeasuredRule:
    """The measured rule's side of the engine loop: candidate jobs per subgraph, their providers and exporters."""

    def __init__(self, request: BindRequest, plan: Plan, provider: EngineProvider, exporter: SubgraphExporter,
                 int8: Optional[Int8Setup], weights_np: Any, ranges: Sequence[Any], cache: Any, progress: Any) -> None:
        settings = request.settings
        self.request, self.plan, self.ranges, self.int8 = request, plan, ranges, int8
        self.settings32 = dataclasses.replace(settings, fp16=False, int8=False)
        self.providers: Dict[str, EngineProvider] = {provider.backend.name: provider}
        device = request.ctx.device_type if request.ctx is not None else "cpu"
        try:
            others = candidate_backends(device, settings.backend)
        except MxTrtError:
            others = []
        for b in others:
            if b.name not in self.providers:
                self.providers[b.name] = EngineProvider(b, request.device_id, cache, progress, settings.engine_options())
        self.exporter = exporter
        self.exporter32 = exporter if settings.precision == "fp32" else SubgraphExporter(
            request.symbol, request.shapes, request.params, plan.graph, weights_np, False, ranges, None)
        self.measurer = Measurer(plan.graph, request.params, request.ctx, request.native_bind, cache, self.providers,
                                 threads=settings.thread_counts())

    def decide(self, sg: Subgraph, ins: Sequence[Entry], outs: Sequence[Entry], job: SubgraphJob,
               digests: Mapping[str, str]) -> Tuple[Decision, Optional[Tuple[Any, str, Tuple[Any, ...]]]]:
        """The decision for ``sg``; unless native, (engine, source, (provider, exporter, settings, int8 setup))."""
        settings = self.request.settings
        graph = self.plan.graph
        jobs: Dict[Tuple[str, str], SubgraphJob] = {}
        first = next(iter(self.providers))  # the bind's own backend, which the analysis asked
        for name, provider in self.providers.items():
            if name != first and not _holds(provider.backend, graph, sg.nodes, self.plan.weights):
                continue  # the analysis asked the bind's backend only: another may refuse some operator
            jobs[(name, settings.precision)] = job
            if settings.precision != "fp32":
                jobs[(name, "fp32")] = _job(sg, graph, ins, outs, digests, self.settings32, None, self.ranges,
                                            self.exporter32)
        decision, chosen = self.measurer.decide(sg, ins, outs, jobs)
        if chosen is None:
            return decision, None
        engine, source, (backend, precision) = chosen
        fp32 = precision == "fp32" and settings.precision != "fp32"
        return decision, (engine, source, (self.providers[backend], self.exporter32 if fp32 else self.exporter,
                                           self.settings32 if fp32 else settings, None if fp32 else self.int8))

    def counts(self) -> Tuple[int, int, int]:
        """Engines built, loaded and reused over every candidate backend."""
        ps = list(self.providers.values())
        return sum(p.builds for p in ps), sum(p.loads for p in ps), sum(p.reuses for p in ps)


def _job(sg: Subgraph, graph: Graph, ins: Sequence[Entry], outs: Sequence[Entry], digests: Mapping[str, str],
         settings: Settings, int8: Optional[Int8Setup], ranges: Sequence[Any], exporter: SubgraphExporter) -> SubgraphJob:
    used = {graph.nodes[e.node].name for n in sg.nodes for e in graph.nodes[n].inputs if graph.nodes[e.node].is_variable}
    return SubgraphJob(name=sg.name, graph=graph, nodes=sg.nodes, inputs=ins, outputs=outs,
                       weight_digests={k: v for k, v in digests.items() if k in used}, fp16=settings.fp16,
                       precision=settings.precision, calibration=int8.key if int8 is not None else "", batch_ranges=ranges,
                       export=lambda: exporter.export(sg.name, sg.nodes, ins, outs, graph, ranges),
                       initializers=lambda: exporter.initializers(sg.name, sg.nodes, ins, outs, graph),
                       weight_views=exporter.weight_views)


def _holds(backend: Any, graph: Graph, nodes: Sequence[int], weights: Any) -> bool:
    """Whether ``backend`` takes every node of ``nodes``: its tensor types and its own limits."""
    for n in nodes:
        spec = op_spec(graph, n, weights, backend.name)
        if backend.dtype_reason(spec) is not None or backend.supports(spec) is not None:
            return False
    return True


def _baked_heads(graph: Graph, absorbed: Set[int]) -> Set[str]:
    """Names of absorbed variables that are also graph outputs."""
    return {graph.nodes[e.node].name for e in graph.heads if e.node in absorbed}


class _Rebuilder:
    """Gets a fused node's engine for another batch (``executor.reshape``): ``batch -> (engine, source)``.

    With batch profiles (a batch-dynamic engine), the new engine's profile
    spans 1 to the largest batch seen; otherwise it is static at ``batch``.
    The engine comes from :class:`EngineProvider` as at bind: this process's
    pool, the plan cache, or a build.

    Raises:
        ParamMismatchError: a weight baked in at bind time has changed in the caller's arrays since.
        MxTrtError: the subgraph does not export or build at that batch.
    """

    def __init__(self, exporter: SubgraphExporter, provider: EngineProvider, sg: Subgraph, absorbed: Set[int],
                 settings: Settings, ranges: Sequence[Any], digests: Mapping[str, str],
                 int8: Optional[Int8Setup] = None) -> None:
        self.exporter, self.provider, self.sg, self.absorbed = exporter, provider, sg, absorbed
        self.settings, self.ranges, self.digests, self.int8 = settings, list(ranges), digests, int8

    def __call__(self, batch: int) -> Tuple[Any, str]:
        ranges = [(1, batch, max(max(r[2] for r in self.ranges), batch))] if self.ranges else []
        try:
            graph = self.exporter.graph_at(batch)
        except MxTrtError:
            raise
        except Exception as exc:  # MXNet refuses the batch (a shape fixed in the graph)
            raise ShapeError(f"{self.sg.name}: MXNet cannot infer the graph's shapes at batch {batch}: {exc}") from exc
        ins, outs = boundary(graph, self.sg.nodes, self.absorbed)
        job = _job(self.sg, graph, ins, outs, self.digests, self.settings, self.int8, ranges, self.exporter)
        for name, baked in sorted(job.weight_digests.items()):
            # The export reads the caller's arrays now: they must still hold what the bind baked in.
            if digest_of(self.exporter.params[name]) != baked:
                raise ParamMismatchError(f"{self.sg.name}: weight {name!r} changed since the bind, so an engine "
                                         f"for batch {batch} would not match the bound one; bind again")
        got = self.provider.get(job)
        if ranges:
            self.ranges = ranges
        return got


def _op_summary(graph: Graph, nodes: Sequence[int]) -> str:
    counts: Dict[str, int] = {}
    for nid in nodes:
        counts[graph.nodes[nid].op] = counts.get(graph.nodes[nid].op, 0) + 1
    return ", ".join(f"{k} x{v}" for k, v in sorted(counts.items()))
