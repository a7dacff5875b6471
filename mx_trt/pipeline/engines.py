"""The engine stage of a bind: one engine per subgraph of the plan, or a reason it stays native.

Per subgraph, in order (:func:`build_engines`): an engine from this process's pool,
else from the plan cache, else exported to ONNX (:class:`~mx_trt.export.dynamic.SubgraphExporter`)
and built (:class:`~mx_trt.builder.engines.EngineProvider`); under the measured rule,
every candidate backend and precision is timed against MXNet first
(:class:`~mx_trt.pipeline.measure.Measurer`). Each engine becomes a fused engine
(:func:`~mx_trt.runtime.fused_op.register_engine`) that can rebuild itself for
another batch (``_Rebuilder``). A subgraph whose engine fails stays native with
one warning; under strict, a :class:`~mx_trt.errors.ConversionError` is raised.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from mx_trt.builder.backends import Backend, candidate_backends
from mx_trt.builder.engines import EngineProvider, SubgraphJob
from mx_trt.builder.progress import BuildProgress
from mx_trt.errors import ConversionError, MxTrtError, ParamMismatchError, ShapeError
from mx_trt.export.dynamic import SubgraphExporter
from mx_trt.export.spec import op_spec
from mx_trt.passes.cost import candidate_label
from mx_trt.passes.fuse import boundary
from mx_trt.passes.ir import BatchRange, Entry, Graph
from mx_trt.passes.naming import entry_name
from mx_trt.passes.partition import Subgraph
from mx_trt.pipeline.int8 import Int8Setup
from mx_trt.pipeline.measure import Decision, Measurer
from mx_trt.pipeline.plan import Plan
from mx_trt.pipeline.request import BindRequest
from mx_trt.pipeline.weights import LazyWeights, digest as digest_of
from mx_trt.runtime.arbiter import ENGINES
from mx_trt.runtime.fused_op import FusedEngine, register_engine
from mx_trt.settings import Settings

logger = logging.getLogger(__name__)

#: A timed decision's other candidates within this factor of the kept engine's bind timing stay in the
#: run-time check's comparison (:meth:`_MeasuredRule._alternatives`): a few rounds at the bind spread by more.
ALTERNATE_WITHIN = 1.1


@dataclass(frozen=True)
class BindWeights:
    """The weights engines absorb, read once before any engine is looked up.

    Attributes:
        arrays: Name -> numpy view over the caller's array, made on first use (the export reads them).
        digests: Name -> :func:`~mx_trt.pipeline.weights.digest`, for every absorbed weight an engine reads.
        ranges: The batch profiles asked for (:func:`~mx_trt.builder.profiles.batch_ranges`); empty: static engines.
    """

    arrays: LazyWeights
    digests: Mapping[str, str]
    ranges: Sequence[BatchRange]


@dataclass(frozen=True)
class Engines:
    """What the engine stage made of the plan's subgraphs.

    Attributes:
        built: Each subgraph that got an engine, with its fused engine, in the plan's order.
        failures: Subgraph name -> why it stays native.
        decisions: Subgraph name -> the measured rule's decision (empty under the other rules).
        builds / loads / reuses: Engines built, loaded from the plan cache, reused from this process.
        measured: Whether the measured rule decided.
        measure_s / timed: Seconds the measured rule spent timing, and how many subgraphs it timed.
        backend: The backend that built the engines under the other rules, when not the bind's own
            (:func:`_precision_here`: one that builds the precision asked for); empty otherwise.
    """

    built: Sequence[Tuple[Subgraph, FusedEngine]]
    failures: Mapping[str, str]
    decisions: Mapping[str, Decision] = field(default_factory=dict)
    builds: int = 0
    loads: int = 0
    reuses: int = 0
    measured: bool = False
    measure_s: float = 0.0
    timed: int = 0
    backend: str = ""


def build_engines(request: BindRequest, plan: Plan, int8: Optional[Int8Setup], weights: BindWeights,
                  cache: Any) -> Engines:
    """An engine per subgraph of ``plan`` (pool, plan cache, or export and build), or why it stays native.

    Args:
        request: The bind; ``request.backend`` is set.
        plan: The analysis.
        int8: The int8 setup, or ``None``.
        weights: The absorbed weights, their digests and the batch profiles.
        cache: The plan cache, or ``None``.

    Raises:
        ConversionError: under strict, a converter broke (other engine failures leave the subgraph native).
        MxTrtError: no backend in the request.
    """
    backend, settings, graph = request.backend, request.settings, plan.graph
    own = backend
    if backend is None:
        raise MxTrtError("a bind request needs a backend")
    absorbed_ids = plan.absorbed_ids()
    ranges, digests_all = weights.ranges, weights.digests
    subgraphs = plan.partition.subgraphs
    progress = BuildProgress(len(subgraphs))
    if settings.engine_rule != "measured":
        backend, settings = _precision_here(backend, settings, request, plan)
    provider = EngineProvider(backend, request.device_id, cache, progress.phase, settings.engine_options(),
                              reuse=request.reuse_engines)
    exporter = SubgraphExporter(request.symbol, request.shapes, request.params, graph, weights.arrays, settings.fp16,
                                ranges, int8.export if int8 is not None else None)
    rule = _MeasuredRule(request, plan, provider, exporter, int8, weights.arrays, ranges, cache,
                         progress.phase) if settings.engine_rule == "measured" else None
    built: List[Tuple[Subgraph, FusedEngine]] = []
    failures: Dict[str, str] = {}
    decisions: Dict[str, Decision] = {}
    for k, sg in enumerate(subgraphs):
        ins, outs = boundary(graph, sg.nodes, absorbed_ids)
        progress.start(k, sg.name, len(sg.nodes))
        logger.info("engine %d/%d: %s (%d ops, %d inputs, %d outputs) with %s",
                    k + 1, len(subgraphs), sg.name, len(sg.nodes), len(ins), len(outs),
                    backend.name if rule is None else "the measured rule's candidates")
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
        if rule is not None:
            fused.alternates = rule.alternates.pop(sg.name, [])
            fused.keep_choice = rule.keepers.pop(sg.name, None)
        built.append((sg, fused))
    progress.done()
    weights.arrays.release()  # engines hold what they need; a later rebuild makes new views
    if rule is None:
        return Engines(built, failures, decisions, provider.builds, provider.loads, provider.reuses,
                       backend=backend.name if backend is not own else "")
    builds, loads, reuses = rule.counts()
    return Engines(built, failures, decisions, builds, loads, reuses, measured=True,
                   measure_s=rule.measurer.spent_s, timed=rule.measurer.timed)


class _MeasuredRule:
    """The measured rule's side of the engine loop: candidate jobs per subgraph, their providers and exporters."""

    def __init__(self, request: BindRequest, plan: Plan, provider: EngineProvider, exporter: SubgraphExporter,
                 int8: Optional[Int8Setup], weights_np: Any, ranges: Sequence[Any], cache: Any, progress: Any) -> None:
        settings = request.settings
        self.request, self.plan, self.ranges, self.int8 = request, plan, ranges, int8
        self.settings32 = dataclasses.replace(settings, fp16=False, int8=False, bf16=False)
        self.providers: Dict[str, EngineProvider] = {provider.backend.name: provider}
        device = request.ctx.device_type if request.ctx is not None else "cpu"
        try:
            others = candidate_backends(device, settings.backend)
        except MxTrtError:
            others = []
        for b in others:
            if b.name not in self.providers:
                self.providers[b.name] = EngineProvider(b, request.device_id, cache, progress, settings.engine_options(),
                                                        reuse=request.reuse_engines)
        self.exporter = exporter
        #: Backend name -> why it cannot build the bind's precision here (its candidates are then fp32 alone).
        reasons = {n: p.backend.precision_reason(settings.precision) for n, p in self.providers.items()}
        self.cannot: Dict[str, str] = {n: why for n, why in reasons.items() if why is not None}
        if self.cannot:
            level = logging.WARNING if len(self.cannot) == len(self.providers) else logging.INFO
            logger.log(level, "%s engines were asked for, but %s: %s", settings.precision, "; ".join(self.cannot.values()),
                       "the engines are fp32" if level == logging.WARNING
                       else f"{', '.join(self.cannot)} candidates are fp32 alone")
        # A bf16 engine is the float32 export computed in bfloat16 (BuildOptions.bf16).
        self.exporter32 = exporter if settings.precision in ("fp32", "bf16") else SubgraphExporter(
            request.symbol, request.shapes, request.params, plan.graph, weights_np, False, ranges, None)
        self.measurer = Measurer(plan.graph, request.params, request.ctx, request.native_bind, cache, self.providers,
                                 threads=settings.thread_counts())
        # An engine holding the whole model is what the run-time check compares with MXNet: a near tie goes
        # to it (CHECKED_KEEP_BELOW). With native operators or other engines beside it, the usual margin.
        inside, total = plan.op_counts()
        whole = len(plan.partition.subgraphs) == 1 and inside == total
        self.checked = whole and request.checked
        # The executor of a whole model in one engine runs it on the caller's thread (runtime.direct): time it so.
        self.direct = whole and device == "cpu"
        #: Subgraph name -> the other candidates of a ``checked`` decision, for the run-time check to compare.
        self.alternates: Dict[str, List[Tuple[str, Callable[[], Any]]]] = {}
        #: Subgraph name -> how the run-time check stores the engine it keeps (``FusedEngine.keep_choice``).
        self.keepers: Dict[str, Callable[[str, Mapping[str, float]], None]] = {}

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
            if self.cannot.get(name) is None:
                jobs[(name, settings.precision)] = job
            if settings.precision != "fp32":
                jobs[(name, "fp32")] = _job(sg, graph, ins, outs, digests, self.settings32, None, self.ranges,
                                            self.exporter32)
        decision, chosen = self.measurer.decide(sg, ins, outs, jobs, self.direct, self.checked)
        if chosen is None:
            return decision, None
        others = self._alternatives(decision, jobs)
        if others and decision.engine is not None:
            # The run-time check compares these candidates too, each built when its first probe is due, and the engine
            # it keeps becomes the decision a later bind starts with.
            self.alternates[sg.name] = [(candidate_label(c), functools.partial(_engine_of, self.providers[c[0]],
                                                                               jobs[c])) for c in others]
            self.keepers[sg.name] = functools.partial(_keep_choice, self.measurer.keeper(sg.name, jobs, self.direct),
                                                      {candidate_label(c): c for c in jobs}, decision.engine)
        engine, source, (backend, precision) = chosen
        fp32 = precision == "fp32" and settings.precision != "fp32"
        return decision, (engine, source, (self.providers[backend], self.exporter32 if fp32 else self.exporter,
                                           self.settings32 if fp32 else settings, None if fp32 else self.int8))

    def _alternatives(self, decision: Decision, jobs: Mapping[Tuple[str, str], SubgraphJob]) -> List[Tuple[str, str]]:
        """The other candidates the run-time check of a whole model in one engine compares on its forwards.

        A ``checked`` decision kept its engine untimed: every other candidate. A timed one (``measured``,
        stored or not): those whose bind timing came within :data:`ALTERNATE_WITHIN` of the kept engine's,
        a pick a few rounds at the bind cannot make surely (ResNet-18 at two threads: ONNX Runtime kept at
        17.9 ms a forward, where OpenVINO's engine ran 16.0 and MXNet 16.9). None otherwise. O(candidates).
        """
        if not (self.direct and self.checked) or decision.engine is None:
            return []
        others = [c for c in jobs if c != decision.engine]
        if decision.how == "checked":
            return others
        kept = decision.engine_ms.get(candidate_label(decision.engine))
        if decision.how != "measured" or kept is None:
            return []
        return [c for c in others if decision.engine_ms.get(candidate_label(c), math.inf) <= ALTERNATE_WITHIN * kept]

    def counts(self) -> Tuple[int, int, int]:
        """Engines built, loaded and reused over every candidate backend."""
        ps = list(self.providers.values())
        return sum(p.builds for p in ps), sum(p.loads for p in ps), sum(p.reuses for p in ps)


def _precision_here(backend: Backend, settings: Settings, request: BindRequest,
                    plan: Plan) -> Tuple[Backend, Settings]:
    """The backend and settings that build the precision asked for, when the bind's backend cannot (bf16 on
    ONNX Runtime): another backend of the context that can and takes every subgraph, unless one was forced;
    else ``settings`` in fp32, with a warning. O(subgraph nodes) for the other backend's check."""
    why = backend.precision_reason(settings.precision)
    if why is None:
        return backend, settings
    device = request.ctx.device_type if request.ctx is not None else "cpu"
    try:
        others = [] if settings.backend else candidate_backends(device)
    except MxTrtError:
        others = []
    for other in others:
        if other.name != backend.name and other.precision_reason(settings.precision) is None and all(
                _holds(other, plan.graph, sg.nodes, plan.weights) for sg in plan.partition.subgraphs):
            logger.info("%s engines: %s, so they are %s's", settings.precision, why, other.name)
            return other, settings
    logger.warning("%s engines were asked for, but %s: the engines are fp32", settings.precision, why)
    return backend, dataclasses.replace(settings, fp16=False, int8=False, bf16=False)


def _job(sg: Subgraph, graph: Graph, ins: Sequence[Entry], outs: Sequence[Entry], digests: Mapping[str, str],
         settings: Settings, int8: Optional[Int8Setup], ranges: Sequence[Any], exporter: SubgraphExporter) -> SubgraphJob:
    """The :class:`SubgraphJob` of ``sg``: what keys its engine, and how to export it on a cache miss."""
    used = {graph.nodes[e.node].name for n in sg.nodes for e in graph.nodes[n].inputs if graph.nodes[e.node].is_variable}
    return SubgraphJob(name=sg.name, graph=graph, nodes=sg.nodes, inputs=ins, outputs=outs,
                       weight_digests={k: v for k, v in digests.items() if k in used}, fp16=settings.fp16,
                       precision=settings.precision, calibration=int8.key if int8 is not None else "", batch_ranges=ranges,
                       export=lambda: exporter.export(sg.name, sg.nodes, ins, outs, graph, ranges),
                       initializers=lambda: exporter.initializers(sg.name, sg.nodes, ins, outs, graph),
                       weight_views=exporter.weight_views)


def _keep_choice(keep: Callable[[Tuple[str, str], Mapping[str, float]], None], by_label: Mapping[str, Tuple[str, str]],
                 own: Tuple[str, str], side: str, medians_ms: Mapping[str, float]) -> None:
    """``keep`` the candidate of the run-time check's ``side`` (:data:`~mx_trt.runtime.arbiter.ENGINES`: ``own``,
    the fused node's engine; else an alternate's label), the check's medians keyed by candidate label."""
    mine = candidate_label(own)
    keep(own if side == ENGINES else by_label[side],
         {(mine if name == ENGINES else name): ms for name, ms in medians_ms.items()})


def _engine_of(provider: EngineProvider, job: SubgraphJob) -> Any:
    """``job``'s engine from ``provider`` (this process's pool, the plan cache, or built in memory, not stored)."""
    return provider.get(job, store=False)[0]


def _holds(backend: Any, graph: Graph, nodes: Sequence[int], weights: Any) -> bool:
    """Whether ``backend`` takes every node of ``nodes``: its tensor types and its own limits."""
    for n in nodes:
        spec = op_spec(graph, n, weights, backend.name)
        if backend.dtype_reason(spec) is not None or backend.supports(spec) is not None:
            return False
    return True


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
