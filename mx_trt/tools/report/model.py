"""The partition report's model: what goes to engines, what stays native and why.

:func:`build_report` summarises a :class:`mx_trt.pipeline.plan.Plan` as a
:class:`PartitionReport` (subgraphs with their boundaries, op counts and
estimated multiply-adds; every native operator with its reason). Pure
functions over the plan's IR: no MXNet, ONNX or engine calls.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from mx_trt.passes.cost import graph_macs
from mx_trt.passes.ir import Entry, Graph

Shape = Tuple[int, ...]

@dataclass
class TensorRef:
    """A tensor crossing a subgraph's boundary.

    Attributes:
        name: The producing node's name, with ``[k]`` for output ``k`` of a multi-output node.
        shape: Its shape, if known.
    """

    name: str
    shape: Optional[Shape]


@dataclass
class SubgraphRow:
    """One subgraph of the report.

    Attributes:
        id: Subgraph id.
        name: Subgraph name (``trt_subgraph_{id}``).
        nodes: Names of its operators, in graph order.
        op_counts: Operator type -> count.
        inputs: Boundary inputs (weights baked into the engine excluded).
        outputs: Boundary outputs.
        macs: Estimated multiply-adds.
        failure: Why its engine was not built (it then runs natively), or ``None``.
        precision: The engine's precision as the report shows it (``fp32``, ``fp16``,
            ``int8 (12 op(s) quantized)``); empty when not known.
        kept_float: For int8: quantizable operators kept in float, with the reason.
    """

    id: int
    name: str
    nodes: List[str]
    op_counts: Dict[str, int]
    inputs: List[TensorRef]
    outputs: List[TensorRef]
    macs: int
    failure: Optional[str] = None
    precision: str = ""
    kept_float: Dict[str, str] = field(default_factory=dict)

    @property
    def ops(self) -> int:
        return len(self.nodes)


@dataclass
class NativeNode:
    """An operator left to MXNet.

    Attributes:
        name: Node name.
        op: Operator type.
        reason: Why it is not in an engine.
    """

    name: str
    op: str
    reason: str


@dataclass
class PartitionReport:
    """Everything ``mxtrt partition`` shows.

    Attributes:
        model: What was analysed (a checkpoint prefix, say).
        backend: Engine backend name, or ``""``.
        inputs: Data input name -> shape.
        total_ops: Operator nodes in the graph.
        total_macs: Estimated multiply-adds of the whole graph.
        subgraphs: The subgraphs, by id.
        native: Every operator outside an engine, in graph order (including the
            operators of subgraphs whose engine failed to build).
    """

    model: str
    backend: str
    inputs: Dict[str, Shape]
    total_ops: int
    total_macs: int
    subgraphs: List[SubgraphRow]
    native: List[NativeNode] = field(default_factory=list)

    @property
    def engine_subgraphs(self) -> List[SubgraphRow]:
        """The subgraphs that run as engines (build failures excluded)."""
        return [s for s in self.subgraphs if s.failure is None]

    @property
    def ops_in_engines(self) -> int:
        return sum(s.ops for s in self.engine_subgraphs)

    @property
    def macs_in_engines(self) -> int:
        return sum(s.macs for s in self.engine_subgraphs)

    def native_by_op(self) -> Dict[str, Dict[str, List[str]]]:
        """Operator type -> reason -> node names, sorted by type and reason."""
        out: Dict[str, Dict[str, List[str]]] = {}
        for n in self.native:
            out.setdefault(n.op, {}).setdefault(n.reason, []).append(n.name)
        return {op: dict(sorted(r.items())) for op, r in sorted(out.items())}


def entry_label(graph: Graph, e: Entry) -> str:
    """The producing node's name, with ``[k]`` for output ``k`` of a multi-output node."""
    node = graph.nodes[e.node]
    return node.name if node.num_outputs == 1 else f"{node.name}[{e.index}]"


def boundaries(
    graph: Graph, groups: Sequence[Sequence[int]], absorbed: Set[int]
) -> List[Tuple[List[Entry], List[Entry]]]:
    """Boundary inputs and outputs of every group in one pass. O(V + E).

    Same sets and order as :func:`mx_trt.passes.fuse.boundary` (inputs by first use,
    outputs sorted), computed for all groups at once so that graphs with
    thousands of subgraphs stay linear.
    """
    owner: Dict[int, int] = {v: k for k, g in enumerate(groups) for v in g}
    ins: List[Dict[Entry, None]] = [{} for _ in groups]
    outs: List[Set[Entry]] = [set() for _ in groups]
    for n in graph.nodes:
        mine = owner.get(n.id)
        for e in n.inputs:
            src = owner.get(e.node)
            if src == mine:
                continue
            if mine is not None and e.node not in absorbed:
                ins[mine].setdefault(e, None)
            if src is not None:
                outs[src].add(e)
    for e in graph.heads:
        src = owner.get(e.node)
        if src is not None:
            outs[src].add(e)
    return [(list(i), sorted(o)) for i, o in zip(ins, outs)]


def build_report(
    plan: Any,
    *,
    model: str = "",
    backend: str = "",
    failures: Optional[Mapping[str, str]] = None,
    precisions: Optional[Mapping[str, Any]] = None,
) -> PartitionReport:
    """Summarise a plan.

    Args:
        plan: A :class:`mx_trt.pipeline.plan.Plan` (``graph``, ``weights``, ``partition``).
        model: Label of the model.
        backend: Backend name.
        failures: Subgraph name -> why its engine was not built
            (:attr:`mx_trt.pipeline.bind.BindInfo.native_failures`); such subgraphs count as native.
        precisions: Subgraph name -> :class:`mx_trt.pipeline.int8.SubgraphPrecision`
            (``describe()`` and ``kept_float``), shown per subgraph.

    Returns:
        The report. Complexity: O(V + E).
    """
    graph: Graph = plan.graph
    failures = dict(failures or {})
    weights = set(plan.weights)
    absorbed = {n.id for n in graph.nodes if n.is_variable and n.name in weights}
    macs = graph_macs(graph)
    subgraphs = list(plan.partition.subgraphs)
    rows: List[SubgraphRow] = []
    bounds = boundaries(graph, [s.nodes for s in subgraphs], absorbed)
    for sg, (ins, outs) in zip(subgraphs, bounds):
        rows.append(
            SubgraphRow(
                id=sg.id,
                name=sg.name,
                nodes=[graph.nodes[v].name for v in sg.nodes],
                op_counts=dict(sorted(Counter(graph.nodes[v].op for v in sg.nodes).items())),
                inputs=[TensorRef(entry_label(graph, e), graph.shapes.get(e)) for e in ins],
                outputs=[TensorRef(entry_label(graph, e), graph.shapes.get(e)) for e in outs],
                macs=sum(macs[v] for v in sg.nodes),
                failure=failures.get(sg.name),
                precision=precisions[sg.name].describe() if precisions and sg.name in precisions else "",
                kept_float=dict(precisions[sg.name].kept_float) if precisions and sg.name in precisions else {},
            )
        )
    native_reason: Dict[int, str] = dict(plan.partition.native)
    for sg in subgraphs:
        if sg.name in failures:
            for v in sg.nodes:
                native_reason[v] = f"its subgraph {sg.name} failed to build: {failures[sg.name]}"
    native = [
        NativeNode(graph.nodes[v].name, graph.nodes[v].op, native_reason[v]) for v in sorted(native_reason)
    ]
    inputs = {
        n.name: graph.shapes.get(Entry(n.id, 0), ())
        for n in graph.nodes
        if n.is_variable and n.name not in weights
    }
    return PartitionReport(
        model=model,
        backend=backend,
        inputs=inputs,
        total_ops=len(macs),
        total_macs=sum(macs.values()),
        subgraphs=rows,
        native=native,
    )

