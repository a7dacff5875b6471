"""The measured engine rule: each engine is timed against MXNet running the same subgraph, and kept only when clearly faster.

For one subgraph of a bind (``MXNET_TENSORRT_ENGINE_RULE=measured``), among those
the cost estimate has not ruled out (:func:`mx_trt.pipeline.plan.analyze`):

1. Its decision is looked up in the plan cache, under a key over the plan-cache
   keys of every candidate engine (subgraph, bound shapes, weights, precision,
   backend and its version, device), the CPUs the process may use and the thread
   counts it was given (``OMP_NUM_THREADS``, ``MXNET_TENSORRT_ORT_THREADS``). A decision
   found there is applied without timing anything: MXNet, or the chosen engine
   (from the pool, the plan cache, or built).
2. Otherwise every candidate engine is built (each backend of
   :func:`~mx_trt.builder.backends.candidate_backends`, at the precision asked for
   and, for fp16, bf16 and int8, at fp32 as well; a backend without the reduced
   precision, fp32 alone) and bound as a fused node alone in an
   MXNet executor. The subgraph's own MXNet symbol is bound natively with the
   same weights, on the same input shapes (random inputs). After warm-up runs the
   executors run alternately, :data:`MIN_RUNS` to :data:`MAX_RUNS` times within
   :data:`SUBGRAPH_SECONDS` (fewer, one at least, where more would pass the
   bind's budget below; :data:`CLEAR_ROUNDS` when each round gave the same
   verdict by a wide margin, :func:`clear_verdict`); the median over rounds
   of each engine's time over MXNet's in the same round decides
   (:func:`mx_trt.passes.cost.choose_measured`).
3. The decision and every timing are stored as a small plan-cache entry. The
   candidates were built in memory: only the engine chosen is stored
   (:meth:`~mx_trt.builder.engines.EngineProvider.store`), and entries of
   candidates found on disk but not chosen are removed.

The timing is bounded: a bind spends at most :data:`BIND_SECONDS` running
subgraphs for it, or, when runs are longer than that allows, one warm-up and
one timed run of each executor of the subgraph under way (runs of
:data:`LONG_RUN_S` or more have no untimed runs in their turns). Subgraphs left
when that is spent, and those whose native
symbol MXNet cannot bind alone, are decided by the cost rule
(:func:`mx_trt.passes.cost.worth_an_engine`) and not stored, so a later bind
measures them. An engine holding the whole model that the executor's run-time
check will compare with MXNet (:mod:`mx_trt.runtime.arbiter`), and whose first
forward takes :data:`LONG_RUN_S` or more, is kept without timing MXNet at all:
the first candidate, when all are of one precision (:meth:`Measurer.decide`).
Its decision (``how`` ``"checked"``) is stored. The other candidates are not
built: the engine stage hands them to the check, which builds each when its
first probe is due (on a thread of its own, beside the forwards) and compares it too (:class:`~mx_trt.runtime.twin.RuntimeCheck`).
"""
from __future__ import annotations

import functools
import logging
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from mx_trt.builder.backends.base import Engine
from mx_trt.builder.cpus import engine_threads
from mx_trt.builder.engines import EngineProvider, SubgraphJob
from mx_trt.cache import make_key
from mx_trt.errors import CacheError, MxTrtError
from mx_trt.graph.importer import graph_to_json
from mx_trt.passes.cost import KEEP_BELOW, Timed, candidate_label, choose_measured, graph_macs, worth_an_engine
from mx_trt.passes.ir import Entry, Graph, Node
from mx_trt.passes.naming import entry_name
from mx_trt.passes.partition import Subgraph
from mx_trt.runtime.direct import DirectForward
from mx_trt.runtime.fused_op import OP_TYPE, FusedEngine, register_engine

logger = logging.getLogger(__name__)

#: Untimed runs of each executor first.
WARMUP = 1
#: Untimed runs of each executor at the start of its turn in every round. MXNet's OpenMP
#: threads keep spinning for a while after its forward, and an engine's own idle threads
#: take a while to wake: the first run of a turn pays for whatever ran before it (measured
#: at two threads, MobileNetV2 batch 1 on OpenVINO: 2.9 ms right after MXNet against 2.2 ms
#: back to back), a cost that a model run as one engine does not have.
SETTLE = 1
#: ... and more of them, until the turn's untimed runs have taken this long (at most :data:`MAX_SETTLE` runs).
#: An engine's threads that slept while another executor ran take several runs to be back at full speed on a
#: virtual machine (ONNX Runtime's on MobileNetV2 at batch 1: 4.7-5.0 ms over the first runs of a turn, about
#: 3.3 ms from the fourth; OpenVINO's 3.0-3.3 against 2.0-2.3 ms): turns of one untimed run measured every
#: engine in that state, and the decisions chose between engines by it.
SETTLE_S = 0.02
#: Untimed runs of one turn at most (tiny subgraphs).
MAX_SETTLE = 16
#: Runs at least this long (s) have no untimed runs at the start of their turn: what ran before slows a run by
#: some 20 ms (:data:`SETTLE_S`), 2% of such a run at most, while an untimed run would double the turn.
LONG_RUN_S = 1.0
#: Timed runs of each executor: at least, and at most.
MIN_RUNS, MAX_RUNS = 3, 15
#: Seconds of timed runs per subgraph, once :data:`MIN_RUNS` are done.
SUBGRAPH_SECONDS = 0.2
#: Rounds after which the timing of a subgraph stops, whatever :data:`MIN_RUNS` and :data:`SUBGRAPH_SECONDS`
#: ask, when every round so far gave the same verdict by a wide margin (:func:`clear_verdict`). A model of
#: 35-75 ms a forward on each of three sides spends about 0.3 s in a round (ResNet-50 at batch 1, one MXNet
#: thread: 75 ms, OpenVINO 35, ONNX Runtime 43, each turn an untimed run and a timed one), a quarter of its
#: cold bind; its rounds differ by a few percent.
CLEAR_ROUNDS = 2
#: A verdict is clear when the fastest engine takes at most this fraction of MXNet's time in every round
#: (or every engine at least its inverse), which is past both margins a decision applies
#: (:data:`~mx_trt.passes.cost.KEEP_BELOW` and :data:`CHECKED_KEEP_BELOW`)...
CLEAR_RATIO = 0.8
#: ... and, among several engines, the fastest one is faster than each other by this factor in every round.
CLEAR_GAP = 1.1
#: Seconds of a bind spent measuring (the executors' binds and runs), after which the cost rule decides. Within
#: a subgraph, a round of runs that would end past it is not started, the first excepted: each executor runs
#: once untimed and once timed at least (FCN ResNet-50 at 480x480 took 78 s to bind cold when 3 rounds were
#: always made, MXNet's forward alone 4.6 s a run at one thread).
BIND_SECONDS = 10.0
#: The margin by which an engine must beat MXNet when it holds the whole model and the executor's run-time
#: check (:mod:`mx_trt.runtime.arbiter`) will compare the two on its own forwards: none, and an engine up to
#: 10% slower is kept too. A near tie at bind then goes to the engine, and the check moves the forwards to
#: MXNet as soon as the engine is no faster on the executor's own forwards: an engine slower than MXNet was at
#: the bind calls its first probe at once. The bind times a model of half a second three times a side, on
#: a virtual machine whose forwards spread by 30%: ResNet-50 at batch 8 and two threads (2-core EPYC, AVX2),
#: three cold binds timed MXNet at 583-800 ms and OpenVINO at 494-699 ms, and one bind of the benchmark kept
#: MXNet for it, so both sides of the comparison were MXNet. At
#: equal threads an OpenVINO engine tied with MXNet on a quiet machine held up far better once another
#: process took a core (SqueezeNet at batch 1: 1.03x quiet, 1.59x with a core busy; MobileNetV2: 1.20x and
#: 1.57x), where MXNet kept for a tie read 0.88-1.02x. Under several engines the check compares all of
#: them with all of MXNet, so each subgraph keeps :data:`~mx_trt.passes.cost.KEEP_BELOW`.
CHECKED_KEEP_BELOW = 1.1
#: Version of the stored decisions.
DECISION_FORMAT = 5  # 2: settled turns and the 5% margin of passes.cost.KEEP_BELOW; 3: turns settled by time;
#                       4: a whole model's engine timed on its direct forward; 5: whole-model engines kept up to 1.1x

#: ``(backend name, precision)`` of one candidate engine.
Candidate = Tuple[str, str]


@dataclass
class Decision:
    """What the rule decided for one subgraph.

    Attributes:
        subgraph: Its name.
        engine: ``(backend, precision)`` of the engine kept, or ``None``: MXNet runs it.
        native_ms: Median latency of MXNet running the subgraph alone (``None`` unless measured).
        engine_ms: Median latency per candidate (``"backend precision"`` -> ms).
        how: ``measured``, or ``cost`` (the estimate decided: budget spent, or not measurable).
        text: The decision in words, as logged.
        stored: Read from the plan cache (nothing timed at this bind).
        seconds: Time spent measuring it at this bind (binding its executors and running them; builds excluded).
        native_first_ms: MXNet's first forward of the subgraph (its kernels and weight layouts set up, in a
            process that may not have run them before), or ``None``.
    """

    subgraph: str
    engine: Optional[Candidate]
    native_ms: Optional[float] = None
    engine_ms: Dict[str, float] = field(default_factory=dict)
    how: str = "measured"
    text: str = ""
    stored: bool = False
    seconds: float = 0.0
    native_first_ms: Optional[float] = None

    @property
    def label(self) -> Optional[str]:
        """``"backend precision"`` of the engine kept (its key in ``engine_ms``), or ``None``: MXNet runs it."""
        return candidate_label(self.engine) if self.engine is not None else None

    def to_json(self) -> Dict[str, Any]:
        return {"format": DECISION_FORMAT, "engine": list(self.engine) if self.engine else None,
                "native_ms": self.native_ms, "engine_ms": dict(self.engine_ms), "how": self.how, "text": self.text,
                "native_first_ms": self.native_first_ms}

    @classmethod
    def from_json(cls, name: str, doc: Mapping[str, Any]) -> Optional["Decision"]:
        """The stored decision, or ``None`` when it is of another format or malformed."""
        try:
            if int(doc.get("format", -1)) != DECISION_FORMAT:
                return None
            eng = doc.get("engine")
            engine = (str(eng[0]), str(eng[1])) if eng else None
            native, first = doc.get("native_ms"), doc.get("native_first_ms")
            return cls(name, engine, float(native) if native is not None else None,
                       {str(k): float(v) for k, v in dict(doc.get("engine_ms") or {}).items()},
                       str(doc.get("how", "measured")), str(doc.get("text", "")), stored=True,
                       native_first_ms=float(first) if first is not None else None)
        except (TypeError, ValueError, IndexError, AttributeError):
            return None


def _store_decision(cache: Any, key: str, decision: Decision, replace: bool = False) -> None:
    """``decision`` as a small plan-cache entry under ``key`` (nothing when the cache is off or read-only);
    ``replace``: in place of the entry stored there (else a valid one there is kept, as ``put`` keeps it)."""
    if cache is None or cache.read_only:
        return
    try:
        if replace:
            cache.discard(key)
        cache.put(key, {"decision": decision.to_json(), "decision_for": decision.subgraph}, {})
    except CacheError:
        pass  # put() logged why; the next bind measures again


def _keep_checked(cache: Any, key: str, name: str, cand: Candidate, medians_ms: Mapping[str, float]) -> None:
    """Store the ``checked`` decision keeping ``cand`` for subgraph ``name`` (:meth:`Measurer.keeper`)."""
    label = candidate_label(cand)
    rest = ", ".join(f"{side} {ms:.1f} ms" for side, ms in sorted(medians_ms.items()) if side != label)
    mine = medians_ms.get(label)
    decision = Decision(name, cand, medians_ms.get("native"),
                        {k: v for k, v in medians_ms.items() if k != "native"}, "checked",
                        f"{label} engine kept by the run-time check"
                        + (f": {mine:.1f} ms a forward against {rest}" if mine is not None else ""))
    _store_decision(cache, key, decision, replace=True)
    logger.info("%s: %s (stored for the next bind)", name, decision.text)


def subgraph_graph(graph: Graph, nodes: Sequence[int], ins: Sequence[Entry], outs: Sequence[Entry]) -> Graph:
    """The subgraph as a graph of its own: its boundary inputs and the weights it reads become variables.

    Boundary inputs are named as the fused node names them
    (:func:`~mx_trt.passes.naming.entry_name`), weights keep their names, so
    one feed dictionary serves both executors. O(len(nodes) + their inputs).
    """
    new: List[Node] = []
    remap: Dict[Entry, Entry] = {}

    def variable(name: str) -> Entry:
        new.append(Node(id=len(new), name=name, op="null"))
        return Entry(len(new) - 1, 0)

    for e in ins:
        remap[e] = variable(entry_name(graph, e))
    shapes: Dict[Entry, Tuple[int, ...]] = {}
    dtypes: Dict[Entry, str] = {}
    for nid in sorted(nodes):
        node = graph.nodes[nid]
        inputs = []
        for e in node.inputs:
            if e not in remap:  # a weight baked into the engine (absorbed variable)
                remap[e] = variable(graph.nodes[e.node].name)
            inputs.append(remap[e])
        new.append(Node(id=len(new), name=node.name, op=node.op, attrs=dict(node.attrs), inputs=tuple(inputs),
                        num_outputs=node.num_outputs))
        for k in range(node.num_outputs):
            remap[Entry(nid, k)] = Entry(len(new) - 1, k)
    for old, e in remap.items():
        if old in graph.shapes:
            shapes[e] = graph.shapes[old]
        if old in graph.dtypes:
            dtypes[e] = graph.dtypes[old]
    return Graph(nodes=new, heads=[remap[e] for e in outs], shapes=shapes, dtypes=dtypes)


def _feeds(graph: Graph, params: Mapping[str, Any], seed: int = 0) -> Dict[str, Any]:
    """A value for every variable of ``graph``: the caller's weight, else random floats in [0, 1) (zeros for
    integers).

    Not negative: inputs the model reads as indices or lengths (token ids, BERT's valid lengths) stay in
    range as 0. With standard normal valid lengths, MXNet's own forward of GluonNLP's BERT at 8 x 128 tokens
    wrote outside its buffers (a failed oneDNN primitive, then ``free(): invalid pointer`` or a segfault in a
    later operator), which ended the process binding it; negative token ids alone did not.
    """
    rng = np.random.RandomState(seed)
    out: Dict[str, Any] = {}
    for n in graph.nodes:
        if not n.is_variable:
            continue
        if n.name in params:
            out[n.name] = params[n.name]
            continue
        shape = graph.shapes[Entry(n.id, 0)]
        dt = np.dtype(graph.dtypes.get(Entry(n.id, 0), "float32"))
        out[n.name] = rng.uniform(0.0, 1.0, shape).astype(dt) if dt.kind == "f" else np.zeros(shape, dt)
    return out


def _bind(native_bind: Callable[..., Any], sym: Any, ctx: Any, feeds: Mapping[str, Any]) -> Callable[[], None]:
    """MXNet's own bind of ``sym`` with ``feeds`` copied in; returns one waited-for inference forward."""
    import mxnet as mx

    args, aux = set(sym.list_arguments()), set(sym.list_auxiliary_states())
    shapes = {k: tuple(v.shape) for k, v in feeds.items() if k in args}
    types = {k: np.dtype(v.dtype).type for k, v in feeds.items() if k in args}
    exe = native_bind(sym, ctx, grad_req="null", type_dict=types, **shapes)
    for name, value in feeds.items():
        dst = exe.arg_dict.get(name) if name in args else exe.aux_dict.get(name) if name in aux else None
        if dst is not None:
            dst[:] = value if isinstance(value, mx.nd.NDArray) else np.asarray(value)

    first: List[float] = []

    def run() -> None:
        t = time.perf_counter()
        exe.forward(is_train=False)
        for o in exe.outputs:
            o.wait_to_read()
        if not first:
            first.append((time.perf_counter() - t) * 1e3)

    run.executor = exe  # type: ignore[attr-defined]  # keeps the executor alive with the closure
    run.first_ms = first  # type: ignore[attr-defined]  # its first forward's ms, once it ran
    return run


def _direct(run: Callable[[], None], fused: FusedEngine) -> Callable[[], None]:
    """``run`` (one fused node's executor, from :func:`_bind`) as the executor of a whole model runs it: directly.

    ``run`` itself where :class:`~mx_trt.runtime.direct.DirectForward` does not apply.
    """
    exe = run.executor  # type: ignore[attr-defined]
    plan = DirectForward.plan(exe, [fused])
    if plan is None:
        return run

    def direct_run() -> None:
        plan.forward(exe, {})

    direct_run.executor = exe  # type: ignore[attr-defined]
    direct_run.fused = fused  # type: ignore[attr-defined]
    return direct_run


def settle_turn(fn: Callable[[], None], runs: int, seconds: float, clock: Callable[[], float] = time.perf_counter) -> int:
    """Untimed calls of ``fn`` at the start of a turn: ``runs`` at least, and more until they have taken
    ``seconds`` (at most :data:`MAX_SETTLE` in all); none when ``runs`` is 0. Returns how many."""
    t, n = clock(), 0
    while n < runs or (0 < n < MAX_SETTLE and clock() - t < seconds):
        fn()
        n += 1
    return n


def alternate_runs(fns: Sequence[Callable[[], None]], seconds: float, min_runs: int = MIN_RUNS,
                   max_runs: int = MAX_RUNS, warmup: int = WARMUP,
                   clock: Callable[[], float] = time.perf_counter, settle: int = SETTLE,
                   settle_s: float = SETTLE_S, budget_s: Optional[float] = None,
                   decided: Optional[Callable[[Sequence[Sequence[float]]], bool]] = None) -> List[List[float]]:
    """Milliseconds of each run of each of ``fns``, by round, run alternately after ``warmup`` untimed runs each.

    Rounds continue until ``max_runs``, or until ``seconds`` have passed once
    ``min_runs`` are done, or until ``decided(times so far)`` holds after a
    round, from the :data:`CLEAR_ROUNDS`-th on. Each round gives every function a turn of untimed
    runs and one timed run, in an order that rotates, so drift (another process)
    hits every function alike. The untimed runs of a turn (what ran before
    disturbs the first runs of a turn) are at least ``settle``, and more until
    they have taken ``settle_s`` seconds (at most :data:`MAX_SETTLE`); ``settle``
    0, or a function whose last run took :data:`LONG_RUN_S` or more: none.
    With ``budget_s``, a round after the first is not started when, at the
    functions' last run times, it would end more than ``budget_s`` seconds after
    the warm-up began: one round is made whatever the budget.
    Cost: ``len(fns) * (warmup + rounds * (settle + 1))`` runs, plus
    ``settle_s`` per turn at most.
    """
    began = clock()
    last: List[float] = []  # each function's latest run (s): its warm-up's, then its timed runs'
    for fn in fns:
        t = clock()
        for _ in range(warmup):
            fn()
        last.append((clock() - t) / warmup if warmup else 0.0)
    times: List[List[float]] = [[] for _ in fns]
    start = clock()
    idx = list(range(len(fns)))
    for r in range(max_runs):
        if r >= min_runs and clock() - start >= seconds:
            break
        if r and budget_s is not None and clock() - began + _round_s(last, settle, settle_s) > budget_s:
            logger.debug("measuring stopped after %d round(s): the next would pass the budget of %.1f s", r, budget_s)
            break
        for i in idx[r % len(idx):] + idx[:r % len(idx)]:
            if last[i] < LONG_RUN_S:
                settle_turn(fns[i], settle, settle_s, clock)
            t = clock()
            fns[i]()
            last[i] = clock() - t
            times[i].append(last[i] * 1e3)
        if decided is not None and r + 1 >= CLEAR_ROUNDS and decided(times):
            logger.debug("measuring stopped after %d round(s): the verdict is clear", r + 1)
            break
    return times


def _round_s(last: Sequence[float], settle: int, settle_s: float) -> float:
    """Seconds one round of :func:`alternate_runs` is expected to take, each function at its ``last`` run time: a
    timed run, after untimed ones (:func:`settle_turn`: ``settle`` runs, and more until ``settle_s``) when short."""
    return sum(t if t >= LONG_RUN_S or not settle else t + max(settle * t, settle_s) for t in last)


def alternate(fns: Sequence[Callable[[], None]], seconds: float, min_runs: int = MIN_RUNS,
              max_runs: int = MAX_RUNS, warmup: int = WARMUP,
              clock: Callable[[], float] = time.perf_counter, settle: int = SETTLE,
              settle_s: float = SETTLE_S, budget_s: Optional[float] = None) -> List[float]:
    """Median milliseconds of each of ``fns`` (:func:`alternate_runs`)."""
    return [statistics.median(t)
            for t in alternate_runs(fns, seconds, min_runs, max_runs, warmup, clock, settle, settle_s, budget_s)]


#: ``(native forward, [engine forward per candidate], seconds, budget seconds) -> (native ms, [ms per
#: candidate], [engine/native ratio per candidate])``: how a subgraph is timed (tests replace it with a
#: deterministic timer); ``seconds`` and the budget as :func:`alternate_runs` reads them. Latencies are
#: medians; each ratio is the median over rounds of the engine's time over MXNet's in the same round.
Timer = Callable[[Callable[[], None], Sequence[Callable[[], None]], float, Optional[float]],
                 Tuple[float, List[float], List[float]]]


def clear_verdict(times: Sequence[Sequence[float]]) -> bool:
    """Whether rounds of MXNet's runs (``times[0]``) and the engines' (``times[1:]``, ms by round) already decide.

    True when in every round the fastest engine (by its median ratio to MXNet's
    run of the same round) took at most :data:`CLEAR_RATIO` of MXNet's time and
    each other engine at least :data:`CLEAR_GAP` times the fastest one's; or
    when every engine took at least ``1 / CLEAR_RATIO`` of MXNet's time in every
    round. A near tie anywhere, or rounds of unequal counts, is never clear.
    Pure; O(engines x rounds).
    """
    native, engines = list(times[0]), [list(t) for t in times[1:]]
    if not engines or not native or any(len(t) != len(native) for t in engines) or min(native) <= 0:
        return False
    ratios = [[e / n for e, n in zip(eng, native)] for eng in engines]
    if all(r >= 1.0 / CLEAR_RATIO for rs in ratios for r in rs):
        return True
    best = min(range(len(engines)), key=lambda i: statistics.median(ratios[i]))
    if any(r > CLEAR_RATIO for r in ratios[best]):
        return False
    return all(other >= CLEAR_GAP * fastest for j, eng in enumerate(engines) if j != best
               for other, fastest in zip(eng, engines[best]))


def default_timer(native: Callable[[], None], engines: Sequence[Callable[[], None]],
                  seconds: float, budget_s: Optional[float] = None) -> Tuple[float, List[float], List[float]]:
    """:func:`alternate_runs` over MXNet and the engines: medians, and the medians of the per-round ratios.

    A ratio of two runs made side by side in one round is what transient load on
    the machine disturbs least: it decides, the medians are reported. Rounds stop
    early on a :func:`clear_verdict`.
    """
    runs = alternate_runs([native, *engines], seconds, budget_s=budget_s, decided=clear_verdict)
    ratios = [statistics.median(e / n for e, n in zip(eng, runs[0]) if n > 0) for eng in runs[1:]]
    return statistics.median(runs[0]), [statistics.median(t) for t in runs[1:]], ratios


class Measurer:
    """Applies the measured rule to the subgraphs of one bind.

    Args:
        graph: The bind's graph (bound shapes).
        params: The caller's weights by name (NDArrays or arrays).
        ctx: The bind's context.
        native_bind: MXNet's own ``simple_bind`` (the request's).
        cache: The plan cache (decisions are stored there), or ``None``.
        providers: Backend name -> its :class:`EngineProvider`, in order of preference.
        timer: How a subgraph is timed (``None``: this module's :func:`default_timer`).
        budget_s: Seconds this bind may spend measuring (``None``: :data:`BIND_SECONDS`).
        threads: The bind's thread counts (:meth:`~mx_trt.settings.Settings.thread_counts`):
            a stored decision holds for them only.
    """

    def __init__(self, graph: Graph, params: Mapping[str, Any], ctx: Any, native_bind: Optional[Callable[..., Any]],
                 cache: Any, providers: Mapping[str, EngineProvider], timer: Optional[Timer] = None,
                 budget_s: Optional[float] = None, threads: Optional[Mapping[str, str]] = None) -> None:
        self.graph, self.params, self.ctx, self.native_bind = graph, params, ctx, native_bind
        self.threads = dict(threads or {})
        self.cache, self.providers = cache, dict(providers)
        self.timer: Timer = default_timer
        if timer is not None:
            self.timer = timer
        self.budget_s = BIND_SECONDS if budget_s is None else budget_s
        self.spent_s = 0.0
        self.timed = 0
        self._macs: Optional[Dict[int, int]] = None

    def _decision_key(self, jobs: Mapping[Candidate, SubgraphJob], keep_below: float = KEEP_BELOW,
                      direct: bool = False) -> str:
        keys = sorted(f"{b}/{p}/{self.providers[b].cache_key(job)}" for (b, p), job in jobs.items())
        # MXNet's and the engines' thread counts change what is faster: a decision holds for them only.
        return make_key({"kind": "measured-decision", "format": DECISION_FORMAT, "engines": keys,
                         "cpus": engine_threads(), "threads": self.threads, "keep_below": keep_below,
                         "direct": direct})

    def _stored(self, key: str, name: str) -> Optional[Decision]:
        if self.cache is None:
            return None
        entry = self.cache.get(key)
        if entry is None:
            return None
        doc = entry.meta.get("decision")
        decision = Decision.from_json(name, doc) if isinstance(doc, Mapping) else None
        if decision is None:
            logger.info("%s: stored decision %s is of another format; measuring again", name, key[:12])
        return decision

    def _store(self, key: str, decision: Decision) -> None:
        _store_decision(self.cache, key, decision)

    def keeper(self, name: str, jobs: Mapping[Candidate, SubgraphJob],
               direct: bool) -> Callable[[Candidate, Mapping[str, float]], None]:
        """``keep(candidate, medians_ms)``: stores ``candidate`` as the ``checked`` decision of subgraph ``name``
        (the whole model, its candidates ``jobs``), the engine the run-time check kept over the others, with
        the check's latest medians (side label, or ``"native"``, -> ms). A later bind then starts with it.
        Holds the plan cache and the decision's key only."""
        return functools.partial(_keep_checked, self.cache, self._decision_key(jobs, CHECKED_KEEP_BELOW, direct), name)

    def _cost_rule(self, sg: Subgraph, why: str, first: Candidate) -> Decision:
        """The cost rule's verdict (``first`` is the engine it keeps); not stored."""
        if self._macs is None:
            self._macs = graph_macs(self.graph)
        reason = worth_an_engine(self.graph, sg.nodes, self._macs)
        return Decision(sg.name, None if reason else first, how="cost",
                        text=f"{why}: the cost estimate decides: " + (f"kept native, {reason}" if reason
                                                                        else "engine kept"))

    def decide(self, sg: Subgraph, ins: Sequence[Entry], outs: Sequence[Entry],
               jobs: Mapping[Candidate, SubgraphJob], direct: bool = False,
               checked: bool = False) -> Tuple[Decision, Optional[Tuple[Engine, str, Candidate]]]:
        """The decision for ``sg`` and, unless MXNet keeps it, its engine, the engine's source and its candidate.

        Args:
            jobs: One job per candidate ``(backend, precision)``, in order of preference.
            direct: The subgraph is the whole model, whose executor runs its engine on the
                caller's thread (:class:`~mx_trt.runtime.direct.DirectForward`): the engines are
                timed that way too. Part of the key.
            checked: The subgraph is the whole model and the executor's run-time check will compare
                its engine with MXNet on the executor's own forwards. An engine is then kept up to
                :data:`CHECKED_KEEP_BELOW` of MXNet's time, else below
                :data:`~mx_trt.passes.cost.KEEP_BELOW` (:func:`~mx_trt.passes.cost.choose_measured`;
                part of the stored decision's key). When every candidate is of one
                precision and the first one's first forward takes :data:`LONG_RUN_S` or more, that
                engine is kept without timing MXNet (``how`` ``"checked"``): timing a model of
                seconds a forward at the bind would cost several of its forwards on each side,
                which the check's probes spread over the executor's forwards instead. Among
                precisions the bind always times: a reduced precision must beat fp32.

        Raises:
            MxTrtError: every candidate engine failed to build (the subgraph then stays native).
        """
        keep_below = CHECKED_KEEP_BELOW if checked else KEEP_BELOW
        key = self._decision_key(jobs, keep_below, direct)
        stored = self._stored(key, sg.name)
        if stored is not None:
            if stored.engine is None:
                return stored, None
            job = jobs.get(stored.engine)
            if job is not None:
                eng, source = self.providers[stored.engine[0]].get(job)
                return stored, (eng, source, stored.engine)
        built: List[Tuple[Candidate, Engine, str]] = []
        errors: List[str] = []
        pending = list(jobs.items())
        if checked and len({p for _, p in jobs}) == 1 and self.spent_s < self.budget_s:
            cand, job = pending.pop(0)
            got = self._build(sg, cand, job, errors)
            if got is not None:
                built.append(got)
                long = self._long_first_run(sg, ins, outs, got, direct)
                if long is not None:
                    self._store(key, long)
                    return long, self._keep(built, jobs, long.engine)
        for cand, job in pending:
            got = self._build(sg, cand, job, errors)
            if got is not None:
                built.append(got)
        if not built:
            raise MxTrtError("; ".join(errors))
        t0 = time.perf_counter()  # what the rule adds: the builds above happen under every rule
        if self.spent_s >= self.budget_s:
            decision = self._cost_rule(sg, f"measuring budget of {self.budget_s:.0f} s spent", built[0][0])
        else:
            decision = self._measure(sg, ins, outs, built, key, keep_below, direct)
        decision.seconds = time.perf_counter() - t0
        self.spent_s += decision.seconds
        return decision, self._keep(built, jobs, decision.engine)

    def _build(self, sg: Subgraph, cand: Candidate, job: SubgraphJob,
               errors: List[str]) -> Optional[Tuple[Candidate, Engine, str]]:
        """One candidate's engine, built in memory (only the engine chosen is stored, by :meth:`_keep`: an
        ONNX Runtime engine stored as it is built cost ResNet-50 2.6 s more), or ``None`` with the reason
        appended to ``errors``."""
        try:
            eng, source = self.providers[cand[0]].get(job, store=False)
        except MxTrtError as exc:
            errors.append(f"{cand[0]} {cand[1]}: {exc}")
            logger.info("%s: the %s %s engine failed to build: %s", sg.name, cand[0], cand[1], exc)
            return None
        return cand, eng, source

    def _keep(self, built: Sequence[Tuple[Candidate, Engine, str]], jobs: Mapping[Candidate, SubgraphJob],
              engine: Optional[Candidate]) -> Optional[Tuple[Engine, str, Candidate]]:
        """The engine of candidate ``engine``, stored in the plan cache when it was built here, with its source;
        the others' stored entries removed. ``None`` when MXNet keeps the subgraph."""
        chosen = next(((e, s, c) for c, e, s in built if c == engine), None)
        if chosen is not None and chosen[1] == "built":
            eng, source, cand = chosen
            chosen = (self.providers[cand[0]].store(jobs[cand], eng), source, cand)
        self._drop_unchosen(built, jobs, engine)
        return chosen

    def _long_first_run(self, sg: Subgraph, ins: Sequence[Entry], outs: Sequence[Entry],
                        got: Tuple[Candidate, Engine, str], direct: bool) -> Optional[Decision]:
        """The ``"checked"`` decision keeping ``got``'s engine when its first forward took :data:`LONG_RUN_S` or
        more, else ``None`` (the candidates are then timed against MXNet). The run counts against the budget."""
        cand, eng, _ = got
        t0 = time.perf_counter()
        try:
            feeds = _feeds(subgraph_graph(self.graph, sg.nodes, ins, outs), self.params)
            run = self._engine_run(sg, eng, ins, outs, feeds, direct)
            t = time.perf_counter()
            run()
            ms = (time.perf_counter() - t) * 1e3
        except Exception as exc:  # the engine alone will not run here: the usual path decides
            logger.info("%s: first run of the %s %s engine failed (%s: %s)", sg.name, cand[0], cand[1],
                        type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
            return None
        finally:
            self.spent_s += time.perf_counter() - t0
        if ms < LONG_RUN_S * 1e3:
            return None
        label = candidate_label(cand)
        return Decision(sg.name, cand, None, {label: ms}, "checked",
                        f"{label} engine kept, its first forward {ms / 1e3:.1f} s: MXNet not timed at the bind, "
                        "the run-time check compares the two on the executor's forwards",
                        seconds=time.perf_counter() - t0)

    def _engine_run(self, sg: Subgraph, eng: Engine, ins: Sequence[Entry], outs: Sequence[Entry],
                    feeds: Mapping[str, Any], direct: bool) -> Callable[[], None]:
        """One waited-for forward of ``eng`` as a fused node alone in an MXNet executor (run as the executor of
        a whole model runs it when ``direct``), its inputs from ``feeds``."""
        import mxnet as mx

        in_names = [entry_name(self.graph, e) for e in ins]
        out_names = ["output"] if len(outs) == 1 else [f"output{i}" for i in range(len(outs))]
        if self.native_bind is None:
            raise MxTrtError("the request has no native bind")
        fused = register_engine(f"{sg.name}_timed", eng, in_names, out_names)
        node = mx.sym.Custom(*[mx.sym.var(n) for n in in_names], op_type=OP_TYPE, mx_trt_engine=fused.key,
                             name=f"{sg.name}_timed")
        run = _bind(self.native_bind, node, self.ctx, {n: feeds[n] for n in in_names})
        run.fused = fused  # type: ignore[attr-defined]  # the registry holds it weakly
        return _direct(run, fused) if direct else run

    def _measure(self, sg: Subgraph, ins: Sequence[Entry], outs: Sequence[Entry],
                 built: Sequence[Tuple[Candidate, Engine, str]], key: str, keep_below: float = KEEP_BELOW,
                 direct: bool = False) -> Decision:
        import mxnet as mx

        sub = subgraph_graph(self.graph, sg.nodes, ins, outs)
        feeds = _feeds(sub, self.params)
        try:
            if self.native_bind is None:
                raise MxTrtError("the request has no native bind")
            native = _bind(self.native_bind, mx.sym.load_json(graph_to_json(sub)), self.ctx, feeds)
            runs = [self._engine_run(sg, eng, ins, outs, feeds, direct) for _, eng, _ in built]
            left = max(0.0, self.budget_s - self.spent_s)
            native_ms, engine_ms, ratios = self.timer(native, runs, min(SUBGRAPH_SECONDS, left), left)
        except Exception as exc:  # MXNet cannot bind or run the subgraph alone: estimate instead
            logger.info("%s: not measured (%s: %s)", sg.name, type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
            return self._cost_rule(sg, "not measurable alone", built[0][0])
        self.timed += 1
        timed = [Timed(c[0], c[1], ms, ratio) for (c, _, _), ms, ratio in zip(built, engine_ms, ratios)]
        best, text = choose_measured(native_ms, timed, keep_below)
        if best is not None and best.over(native_ms) >= KEEP_BELOW:
            text += "; a near tie, which the run-time check settles on the executor's own forwards"
        first_ms = native.first_ms  # type: ignore[attr-defined]
        decision = Decision(sg.name, (best.backend, best.precision) if best else None, native_ms,
                            {t.label: t.ms for t in timed}, "measured", text,
                            native_first_ms=first_ms[0] if first_ms else None)
        self._store(key, decision)
        return decision

    def _drop_unchosen(self, built: Sequence[Tuple[Candidate, Engine, str]], jobs: Mapping[Candidate, SubgraphJob],
                       chosen: Optional[Candidate]) -> None:
        """Remove the stored engines that were not chosen (found on disk: those built here were never
        stored): a later bind never loads them."""
        if self.cache is None or self.cache.read_only:
            return
        for cand, _, _ in built:
            if cand != chosen:
                try:
                    self.cache.discard(self.providers[cand[0]].cache_key(jobs[cand]))
                except CacheError:
                    pass
