"""The partition report: what goes to engines, what stays native and why.

Pure functions over a :class:`mx_trt.bind.Plan` (no MXNet, ONNX or engine
calls), used by ``mxtrt partition``:

* :func:`estimate_macs` / :func:`graph_macs` - multiply-adds per operator from its shapes;
* :func:`build_report` - the :class:`PartitionReport` (subgraphs, boundaries, shares, native nodes);
* :func:`render_table`, :func:`report_to_json`, :func:`render_svg`, :func:`render_html` - its views.

The SVG is plain text with a layered layout by topological depth. Graphs of
:data:`COLLAPSE_THRESHOLD` operators or more are drawn with every subgraph
contracted into one box that lists its operator counts, so large models stay
readable.
"""
from __future__ import annotations

import colorsys
import html
import logging
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from passes.cost import estimate_macs, graph_macs
from passes.ir import Entry, Graph

logger = logging.getLogger(__name__)

__all__ = [
    "COLLAPSE_THRESHOLD",
    "NativeNode",
    "PartitionReport",
    "SubgraphRow",
    "TensorRef",
    "build_report",
    "estimate_macs",
    "format_count",
    "graph_macs",
    "render_html",
    "render_svg",
    "render_table",
    "report_to_json",
    "subgraph_colors",
]

Shape = Tuple[int, ...]

#: Operator count from which :func:`render_svg` contracts each subgraph into one box.
COLLAPSE_THRESHOLD = 1000


# ---------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------


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
    """

    id: int
    name: str
    nodes: List[str]
    op_counts: Dict[str, int]
    inputs: List[TensorRef]
    outputs: List[TensorRef]
    macs: int
    failure: Optional[str] = None

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


def _entry_label(graph: Graph, e: Entry) -> str:
    node = graph.nodes[e.node]
    return node.name if node.num_outputs == 1 else f"{node.name}[{e.index}]"


def _boundaries(
    graph: Graph, groups: Sequence[Sequence[int]], absorbed: Set[int]
) -> List[Tuple[List[Entry], List[Entry]]]:
    """Boundary inputs and outputs of every group in one pass. O(V + E).

    Same sets and order as :func:`passes.fuse.boundary` (inputs by first use,
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
) -> PartitionReport:
    """Summarise a plan.

    Args:
        plan: A :class:`mx_trt.bind.Plan` (``graph``, ``weights``, ``partition``).
        model: Label of the model.
        backend: Backend name.
        failures: Subgraph name -> why its engine was not built
            (:attr:`mx_trt.bind.BindInfo.native_failures`); such subgraphs count as native.

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
    bounds = _boundaries(graph, [s.nodes for s in subgraphs], absorbed)
    for sg, (ins, outs) in zip(subgraphs, bounds):
        rows.append(
            SubgraphRow(
                id=sg.id,
                name=sg.name,
                nodes=[graph.nodes[v].name for v in sg.nodes],
                op_counts=dict(sorted(Counter(graph.nodes[v].op for v in sg.nodes).items())),
                inputs=[TensorRef(_entry_label(graph, e), graph.shapes.get(e)) for e in ins],
                outputs=[TensorRef(_entry_label(graph, e), graph.shapes.get(e)) for e in outs],
                macs=sum(macs[v] for v in sg.nodes),
                failure=failures.get(sg.name),
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


def format_count(x: float) -> str:
    """``1234567`` -> ``"1.23 M"``; small numbers as integers."""
    x = float(x)
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x:.0f}"


def _share(part: float, whole: float) -> float:
    return part / whole if whole else 0.0


def _shape_text(shape: Optional[Sequence[int]]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ")" if shape else "(?)"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(1, width - 3)] + "..."


def _names(refs: Sequence[TensorRef], width: int) -> str:
    return _clip(", ".join(r.name for r in refs) or "-", width)


def render_table(report: PartitionReport, max_names: int = 6) -> str:
    """The human-readable report: summary, subgraph table, native operators by type.

    Args:
        report: The report.
        max_names: Node names listed per (op type, reason) before ``+N more``.
    """
    lines: List[str] = []
    ins = ", ".join(f"{k} {_shape_text(v)}" for k, v in report.inputs.items())
    head = f"model: {report.model}" if report.model else "model"
    lines.append(f"{head}  inputs: {ins or '-'}" + (f"  backend: {report.backend}" if report.backend else ""))
    n_eng = len(report.engine_subgraphs)
    lines.append(
        f"operators: {report.ops_in_engines} of {report.total_ops} in {n_eng} engine{'s' if n_eng != 1 else ''} "
        f"({100 * _share(report.ops_in_engines, report.total_ops):.1f}%); "
        f"multiply-adds (estimated): {format_count(report.macs_in_engines)} of {format_count(report.total_macs)} "
        f"in engines ({100 * _share(report.macs_in_engines, report.total_macs):.1f}%)"
    )
    lines.append("")
    if report.subgraphs:
        table = [("id", "subgraph", "ops", "in", "inputs", "out", "outputs", "MACs", "op types")]
        for s in report.subgraphs:
            types = ", ".join(f"{k} {v}" for k, v in sorted(s.op_counts.items(), key=lambda kv: (-kv[1], kv[0])))
            name = s.name if s.failure is None else f"{s.name} (NATIVE: build failed)"
            table.append((str(s.id), name, str(s.ops), str(len(s.inputs)), _names(s.inputs, 36),
                          str(len(s.outputs)), _names(s.outputs, 36), format_count(s.macs), _clip(types, 60)))
        widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
        right = {0, 2, 3, 5, 7}
        for k, r in enumerate(table):
            cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))]
            lines.append("  ".join(cells).rstrip())
            if k == 0:
                lines.append("  ".join("-" * w for w in widths))
        for s in report.subgraphs:
            if s.failure is not None:
                lines.append(f"{s.name} failed to build and runs natively: {s.failure}")
    else:
        lines.append("no subgraph: every operator stays native")
    lines.append("")
    by_op = report.native_by_op()
    if not by_op:
        lines.append("native operators: none")
    else:
        lines.append(f"native operators ({len(report.native)}), by op type:")
        for op, reasons in by_op.items():
            count = sum(len(v) for v in reasons.values())
            lines.append(f"  {op} ({count})")
            for reason, names in reasons.items():
                shown = ", ".join(names[:max_names]) + (f" +{len(names) - max_names} more" if len(names) > max_names else "")
                lines.append(f"    {reason}: {shown}")
    return "\n".join(lines) + "\n"


def report_to_json(report: PartitionReport) -> Dict[str, Any]:
    """The report as plain JSON-serialisable data (``mxtrt partition --json``)."""

    def refs(rs: Sequence[TensorRef]) -> List[Dict[str, Any]]:
        return [{"name": r.name, "shape": list(r.shape) if r.shape else None} for r in rs]

    return {
        "model": report.model,
        "backend": report.backend,
        "inputs": {k: list(v) for k, v in report.inputs.items()},
        "ops": {"total": report.total_ops, "in_engines": report.ops_in_engines,
                "share": _share(report.ops_in_engines, report.total_ops)},
        "macs": {"total": report.total_macs, "in_engines": report.macs_in_engines,
                 "share": _share(report.macs_in_engines, report.total_macs)},
        "subgraphs": [
            {"id": s.id, "name": s.name, "ops": s.ops, "op_counts": s.op_counts, "nodes": s.nodes,
             "inputs": refs(s.inputs), "outputs": refs(s.outputs), "macs": s.macs,
             "engine": s.failure is None, "failure": s.failure}
            for s in report.subgraphs
        ],
        "native": {
            op: [{"node": name, "reason": reason} for reason, names in reasons.items() for name in names]
            for op, reasons in report.native_by_op().items()
        },
    }


# ---------------------------------------------------------------------------
# SVG
# ---------------------------------------------------------------------------

_NATIVE_FILL = "#f3f3f3"
_NATIVE_STROKE = "#c62828"
_IO_FILL = "#ffffff"
_EDGE = "#8a8a8a"
_FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"


def subgraph_colors(n: int) -> List[str]:
    """``n`` distinct light fill colours (hex), hues spread by the golden angle.

    Light enough for black text; the lightness cycles too so that colours stay
    distinct past a few dozen subgraphs.
    """
    out: List[str] = []
    seen: Set[str] = set()
    for i in range(n):
        hue = (i * 0.618033988749895) % 1.0
        light = (0.80, 0.70, 0.88, 0.75)[(i // 7) % 4]
        sat = (0.70, 0.55, 0.85)[(i // 28) % 3]
        k = 0
        while True:
            r, g, b = colorsys.hls_to_rgb((hue + k * 0.0031) % 1.0, light, sat)
            c = f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"
            if c not in seen:
                break
            k += 1
        seen.add(c)
        out.append(c)
    return out


#: Graphs with more outputs than this are drawn without output boxes.
_MAX_OUTPUT_BOXES = 16


@dataclass
class _Unit:
    """One box of the drawing: an operator, a collapsed subgraph, a graph input or output."""

    key: int
    kind: str  # "op", "subgraph", "native", "input", "output"
    lines: List[str]
    title: str
    subgraph: Optional[int] = None
    reason: Optional[str] = None
    width: float = 0.0
    height: float = 0.0
    x: float = 0.0
    y: float = 0.0
    layer: int = 0


def _esc(text: str) -> str:
    return html.escape(text, quote=True)


def _wrap(text: str, width: int, max_lines: int) -> List[str]:
    words = text.split()
    lines: List[str] = []
    cur = ""
    for w in words:
        if len(w) > width:
            w = _clip(w, width)
        if cur and len(cur) + 1 + len(w) > width:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}" if cur else w
    if cur:
        lines.append(cur)
    if len(lines) > max_lines:
        lines = lines[:max_lines]
        lines[-1] = _clip(lines[-1] + " ...", width) if len(lines[-1]) + 4 > width else lines[-1] + " ..."
    return lines


def _build_units(
    report: PartitionReport, plan: Any, collapse: bool
) -> Tuple[List[_Unit], List[Tuple[int, int]]]:
    """Units in a topological order and the edges between them (by index)."""
    graph: Graph = plan.graph
    weights = set(plan.weights)
    by_name = {s.name: s for s in report.subgraphs}
    sg_of: Dict[int, int] = {}
    for sg in plan.partition.subgraphs:
        row = by_name[sg.name]
        if row.failure is None:
            for v in sg.nodes:
                sg_of[v] = sg.id
    reasons = {n.name: n.reason for n in report.native}
    units: List[_Unit] = []
    unit_of: Dict[int, int] = {}  # graph node id -> unit index
    collapsed_unit: Dict[int, int] = {}  # subgraph id -> unit index

    def add(u: _Unit) -> int:
        units.append(u)
        return len(units) - 1

    for n in graph.nodes:
        if n.is_variable:
            if n.name in weights:
                continue
            shape = graph.shapes.get(Entry(n.id, 0))
            unit_of[n.id] = add(_Unit(n.id, "input", [n.name, _shape_text(shape)], f"input {n.name} {_shape_text(shape)}"))
            continue
        sid = sg_of.get(n.id)
        if sid is None:
            reason = reasons.get(n.name, "native")
            unit_of[n.id] = add(_Unit(n.id, "native", [_clip(n.name, 34), f"{n.op} (native)"] + _wrap(reason, 38, 2),
                                      f"{n.name} ({n.op}) stays native: {reason}", reason=reason))
        elif collapse:
            if sid not in collapsed_unit:
                row = report.subgraphs[sid]
                top = sorted(row.op_counts.items(), key=lambda kv: (-kv[1], kv[0]))
                counts = [f"{k} {v}" for k, v in top]
                body = _wrap(", ".join(counts), 44, 2)
                collapsed_unit[sid] = add(_Unit(
                    n.id, "subgraph",
                    [f"{row.name}: {row.ops} ops, {format_count(row.macs)} MACs"] + body,
                    f"{row.name}: {row.ops} ops ({', '.join(counts)}), {len(row.inputs)} inputs, "
                    f"{len(row.outputs)} outputs, {format_count(row.macs)} multiply-adds",
                    subgraph=sid))
            unit_of[n.id] = collapsed_unit[sid]
        else:
            unit_of[n.id] = add(_Unit(n.id, "op", [_clip(n.name, 34), n.op],
                                      f"{n.name} ({n.op}) in {report.subgraphs[sid].name}", subgraph=sid))
    heads = list(graph.heads) if len(graph.heads) <= _MAX_OUTPUT_BOXES else []
    for k, e in enumerate(heads):
        shape = graph.shapes.get(e)
        label = _entry_label(graph, e)
        unit_of[-1 - k] = add(_Unit(-1 - k, "output", [f"output {k}: {_clip(label, 30)}", _shape_text(shape)],
                                    f"output {k}: {label} {_shape_text(shape)}"))

    edges: Set[Tuple[int, int]] = set()
    for n in graph.nodes:
        dst = unit_of.get(n.id)
        if dst is None:
            continue
        for e in n.inputs:
            src = unit_of.get(e.node)
            if src is not None and src != dst:
                edges.add((src, dst))
    for k, e in enumerate(heads):
        src = unit_of.get(e.node)
        if src is not None:
            edges.add((src, unit_of[-1 - k]))
    return _topo_sorted(units, sorted(edges))


def _topo_sorted(units: List[_Unit], edges: List[Tuple[int, int]]) -> Tuple[List[_Unit], List[Tuple[int, int]]]:
    """Kahn's order (ties by creation order), units and edges re-indexed. O(U + E)."""
    import heapq

    n = len(units)
    indeg = [0] * n
    succ: List[List[int]] = [[] for _ in range(n)]
    for a, b in edges:
        succ[a].append(b)
        indeg[b] += 1
    heap = [i for i in range(n) if indeg[i] == 0]
    heapq.heapify(heap)
    order: List[int] = []
    while heap:
        i = heapq.heappop(heap)
        order.append(i)
        for j in succ[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                heapq.heappush(heap, j)
    if len(order) != n:  # cannot happen for a validated partition; draw anyway
        logger.warning("the contracted graph has a cycle; drawing in creation order")
        order = list(range(n))
    pos = {old: new for new, old in enumerate(order)}
    return [units[i] for i in order], sorted((pos[a], pos[b]) for a, b in edges)


_CHAR_W = 6.4  # average glyph width at 11 px (sans-serif)
_LINE_H = 14.0
_PAD_X = 10.0
_PAD_Y = 7.0
_GAP_X = 22.0
_GAP_Y = 34.0
_DUMMY_W = 6.0
#: Most bend points routed for long edges; past it the longest edges are drawn straight.
_MAX_DUMMIES = 50_000


def _text_width(text: str, bold: bool = False) -> float:
    """Approximate rendered width of ``text`` at 11 px in a sans-serif font."""
    w = 0.0
    for ch in text:
        if ch in "il.,:;|!'()[] ":
            w += 3.4
        elif ch.isupper() or ch in "mwMW_%@":
            w += 8.0
        else:
            w += _CHAR_W
    return w * (1.08 if bold else 1.0)


@dataclass
class _Layout:
    """Box positions plus the route of every edge.

    Attributes:
        width / height: Extent of the drawing.
        routes: Per edge ``(a, b)``, the points it passes through
            (``x, y_top, y_bottom`` of each bend), in order.
    """

    width: float
    height: float
    routes: Dict[Tuple[int, int], List[Tuple[float, float, float]]]


def _layout(units: List[_Unit], edges: List[Tuple[int, int]]) -> _Layout:
    """A layered (Sugiyama-style) layout.

    1. Layer = longest path from a source (units come in topological order).
    2. Edges spanning several layers get one small bend point per crossed
       layer, so they run in their own lane instead of behind boxes.
    3. Order within layers: barycentre sweeps, down, up, down.
    4. Coordinates: each box goes under the mean of its parents, overlaps
       resolved by a left and a right packing pass, averaged.

    Complexity: O((U + B) log U) per sweep, B = bend points (capped by
    :data:`_MAX_DUMMIES`).
    """
    n_units = len(units)
    preds0: List[List[int]] = [[] for _ in units]
    for a, b in edges:
        preds0[b].append(a)
    for i, u in enumerate(units):
        u.layer = 1 + max((units[p].layer for p in preds0[i]), default=-1)
        u.width = max(90.0, max(_text_width(t, k == 0) for k, t in enumerate(u.lines)) + 2 * _PAD_X)
        u.height = len(u.lines) * _LINE_H + 2 * _PAD_Y

    # Augmented graph: units, then bend points.
    layer_of = [u.layer for u in units]
    width_of = [u.width for u in units]
    preds: List[List[int]] = [[] for _ in units]
    succs: List[List[int]] = [[] for _ in units]
    chains: Dict[Tuple[int, int], List[int]] = {}
    budget = _MAX_DUMMIES
    for a, b in sorted(edges, key=lambda e: (layer_of[e[1]] - layer_of[e[0]], e)):
        span = layer_of[b] - layer_of[a]
        chain = [a]
        if 1 < span <= budget + 1:
            budget -= span - 1
            for lvl in range(layer_of[a] + 1, layer_of[b]):
                d = len(layer_of)
                layer_of.append(lvl)
                width_of.append(_DUMMY_W)
                preds.append([])
                succs.append([])
                chain.append(d)
        chain.append(b)
        for src, dst in zip(chain, chain[1:]):
            preds[dst].append(src)
            succs[src].append(dst)
        chains[(a, b)] = chain
    total = len(layer_of)
    n_layers = max(layer_of, default=-1) + 1
    layers: List[List[int]] = [[] for _ in range(n_layers)]
    for i in range(total):
        layers[layer_of[i]].append(i)

    pos = [0.0] * total
    for layer in layers:
        for k, i in enumerate(layer):
            pos[i] = float(k)

    def sweep(order: Sequence[int], nbrs: List[List[int]]) -> None:
        for li in order:
            layer = layers[li]
            keyed = []
            for i in layer:
                ps = nbrs[i]
                keyed.append((sum(pos[p] for p in ps) / len(ps) if ps else pos[i], pos[i], i))
            keyed.sort()
            layer[:] = [i for _, _, i in keyed]
            for k, i in enumerate(layer):
                pos[i] = float(k)

    down = range(n_layers)
    up = range(n_layers - 1, -1, -1)
    sweep(down, preds)
    sweep(up, succs)
    sweep(down, preds)

    # Coordinates (box centres).
    xc = [0.0] * total

    def place(layer: List[int], desired: List[float]) -> None:
        left: List[float] = []
        for k, i in enumerate(layer):
            lo = desired[k] - width_of[i] / 2
            if k:
                prev = layer[k - 1]
                lo = max(lo, left[-1] + width_of[prev] + _GAP_X)
            left.append(lo)
        right = [0.0] * len(layer)
        for k in range(len(layer) - 1, -1, -1):
            i = layer[k]
            hi = desired[k] - width_of[i] / 2
            if k < len(layer) - 1:
                hi = min(hi, right[k + 1] - _GAP_X - width_of[i])
            right[k] = hi
        for k, i in enumerate(layer):
            xc[i] = (left[k] + right[k]) / 2 + width_of[i] / 2

    def packed(layer: List[int]) -> List[float]:
        w = sum(width_of[i] for i in layer) + _GAP_X * max(0, len(layer) - 1)
        x = -w / 2
        out = []
        for i in layer:
            out.append(x + width_of[i] / 2)
            x += width_of[i] + _GAP_X
        return out

    for li, layer in enumerate(layers):
        base = packed(layer)
        desired = []
        for k, i in enumerate(layer):
            ps = preds[i]
            desired.append(sum(xc[p] for p in ps) / len(ps) if ps and li else base[k])
        place(layer, desired)
    # Sources (graph inputs) sit above the mean of what they feed.
    for li in range(n_layers - 1, -1, -1):
        layer = layers[li]
        if any(not preds[i] and succs[i] for i in layer):
            desired = [sum(xc[s] for s in succs[i]) / len(succs[i]) if not preds[i] and succs[i] else xc[i]
                       for i in layer]
            place(layer, desired)

    min_x = min((xc[i] - width_of[i] / 2 for i in range(total)), default=0.0)
    max_x = max((xc[i] + width_of[i] / 2 for i in range(total)), default=0.0)
    heights = [max((units[i].height for i in layer if i < n_units), default=0.0) for layer in layers]
    tops = []
    y = 0.0
    for h in heights:
        tops.append(y)
        y += h + _GAP_Y
    for i, u in enumerate(units):
        h = heights[u.layer]
        u.x = xc[i] - u.width / 2 - min_x
        u.y = tops[u.layer] + (h - u.height) / 2
    routes: Dict[Tuple[int, int], List[Tuple[float, float, float]]] = {}
    for key, chain in chains.items():
        routes[key] = [(xc[d] - min_x, tops[layer_of[d]], tops[layer_of[d]] + heights[layer_of[d]])
                       for d in chain[1:-1]]
    return _Layout(max_x - min_x, max(0.0, y - _GAP_Y), routes)


def render_svg(report: PartitionReport, plan: Any, collapse: Optional[bool] = None, title: Optional[str] = None) -> str:
    """Draw the graph: each subgraph in its own colour, native nodes labelled with their reason.

    Args:
        report: :func:`build_report` of ``plan``.
        plan: The plan (its graph gives the edges).
        collapse: Draw each subgraph as one box with its op counts; default:
            when the graph has :data:`COLLAPSE_THRESHOLD` operators or more.
        title: Heading; defaults to the model label.

    Returns:
        A standalone SVG document. Elements carry ``class`` (``op``,
        ``subgraph``, ``native``, ``input``, ``output``, ``edge``) and
        ``data-subgraph`` / ``data-reason`` attributes.
    """
    if collapse is None:
        collapse = report.total_ops >= COLLAPSE_THRESHOLD
    units, edges = _build_units(report, plan, collapse)
    colors = subgraph_colors(len(report.subgraphs))
    lay = _layout(units, edges)
    graph_w, graph_h = lay.width, lay.height

    # Header: title, summary, legend.
    head: List[str] = []
    margin = 16.0
    heading = title or (f"{report.model}" if report.model else "partition")
    summary = (f"{report.ops_in_engines}/{report.total_ops} ops and "
               f"{100 * _share(report.macs_in_engines, report.total_macs):.1f}% of multiply-adds in "
               f"{len(report.engine_subgraphs)} engine(s); {len(report.native)} native"
               + ("; subgraphs collapsed" if collapse else "")
               + (f"; {len(plan.graph.heads)} graph outputs not drawn" if len(plan.graph.heads) > _MAX_OUTPUT_BOXES else ""))
    legend_items: List[Tuple[str, str, str]] = [
        (colors[s.id], f"{s.name} ({s.ops} ops)", f"subgraph-{s.id}") for s in report.engine_subgraphs
    ]
    max_legend = 40
    more = len(legend_items) - max_legend
    legend_items = legend_items[:max_legend]
    legend_items.append((_NATIVE_FILL, "native (MXNet)", "native"))
    item_w = 190.0
    width = max(graph_w + 2 * margin, 560.0)
    per_row = max(1, int((width - 2 * margin) // item_w))
    legend_rows = math.ceil(len(legend_items) / per_row) + (1 if more > 0 else 0)
    top = margin + 22 + 18 + legend_rows * 18 + 14
    height = top + graph_h + margin
    off_x = margin + (width - 2 * margin - graph_w) / 2

    out: List[str] = []
    out.append('<?xml version="1.0" encoding="UTF-8"?>')
    out.append(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
               f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="{_FONT}" font-size="11">')
    out.append("<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"7\" "
               f"markerHeight=\"7\" orient=\"auto-start-reverse\"><path d=\"M0,0 L10,5 L0,10 z\" fill=\"{_EDGE}\"/>"
               "</marker></defs>")
    out.append(f'<rect x="0" y="0" width="{width:.0f}" height="{height:.0f}" fill="#ffffff"/>')
    out.append(f'<text x="{margin}" y="{margin + 14}" font-size="16" font-weight="bold">{_esc(heading)}</text>')
    out.append(f'<text x="{margin}" y="{margin + 34}" font-size="12" fill="#333333">{_esc(summary)}</text>')
    head.append("")
    ly = margin + 44
    for k, (color, label, cls) in enumerate(legend_items):
        lx = margin + (k % per_row) * item_w
        yy = ly + (k // per_row) * 18
        stroke = _NATIVE_STROKE if cls == "native" else "#555555"
        dash = ' stroke-dasharray="3,2"' if cls == "native" else ""
        out.append(f'<g class="legend" data-key="{cls}"><rect x="{lx:.1f}" y="{yy:.1f}" width="14" height="12" '
                   f'fill="{color}" stroke="{stroke}"{dash}/><text x="{lx + 20:.1f}" y="{yy + 10:.1f}">'
                   f'{_esc(_clip(label, 28))}</text></g>')
    if more > 0:
        yy = ly + math.ceil(len(legend_items) / per_row) * 18
        out.append(f'<text x="{margin}" y="{yy + 10:.1f}" fill="#555555">... and {more} more subgraphs</text>')

    def cx(u: _Unit) -> float:
        return off_x + u.x + u.width / 2

    out.append('<g class="edges" fill="none">')
    for a, b in edges:
        ua, ub = units[a], units[b]
        x, y = cx(ua), top + ua.y + ua.height
        d = [f"M{x:.1f},{y:.1f}"]
        stops = [(off_x + bx, top + by0, top + by1) for bx, by0, by1 in lay.routes.get((a, b), [])]
        stops.append((cx(ub), top + ub.y - 1, top + ub.y - 1))
        for sx, sy0, sy1 in stops:
            mid = (y + sy0) / 2
            d.append(f"C{x:.1f},{mid:.1f} {sx:.1f},{mid:.1f} {sx:.1f},{sy0:.1f}")
            if sy1 > sy0:
                d.append(f"L{sx:.1f},{sy1:.1f}")
            x, y = sx, sy1
        out.append(f'<path class="edge" d="{" ".join(d)}" stroke="{_EDGE}" stroke-width="1" '
                   'marker-end="url(#arrow)"/>')
    out.append("</g>")

    for u in units:
        x, y = off_x + u.x, top + u.y
        attrs = f'class="{u.kind}"'
        if u.subgraph is not None:
            attrs += f' data-subgraph="{_esc(report.subgraphs[u.subgraph].name)}"'
        if u.reason is not None:
            attrs += f' data-reason="{_esc(u.reason)}"'
        out.append(f"<g {attrs}><title>{_esc(u.title)}</title>")
        if u.kind in ("op", "subgraph"):
            fill = colors[u.subgraph] if u.subgraph is not None else _NATIVE_FILL
            sw = "1.6" if u.kind == "subgraph" else "1"
            out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{u.width:.1f}" height="{u.height:.1f}" rx="5" '
                       f'fill="{fill}" stroke="#444444" stroke-width="{sw}"/>')
        elif u.kind == "native":
            out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{u.width:.1f}" height="{u.height:.1f}" rx="2" '
                       f'fill="{_NATIVE_FILL}" stroke="{_NATIVE_STROKE}" stroke-width="1.4" stroke-dasharray="4,2"/>')
        else:
            out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{u.width:.1f}" height="{u.height:.1f}" '
                       f'rx="{u.height / 2:.1f}" fill="{_IO_FILL}" stroke="#444444"/>')
        for k, line in enumerate(u.lines):
            ty = y + _PAD_Y + (k + 1) * _LINE_H - 3
            style = ""
            if k == 0:
                style = ' font-weight="bold"'
            elif u.kind == "native" and k >= 2:
                style = f' fill="{_NATIVE_STROKE}"'
            elif u.kind in ("op", "input", "output") or (u.kind == "native" and k == 1):
                style = ' fill="#333333"'
            out.append(f'<text x="{x + u.width / 2:.1f}" y="{ty:.1f}" text-anchor="middle"{style}>{_esc(line)}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


def render_html(report: PartitionReport, plan: Any, collapse: Optional[bool] = None) -> str:
    """A standalone HTML page: the summary, the tables and the SVG drawing."""
    data = report_to_json(report)
    rows = []
    for s in report.subgraphs:
        color = subgraph_colors(len(report.subgraphs))[s.id] if report.subgraphs else _NATIVE_FILL
        types = ", ".join(f"{k} {v}" for k, v in s.op_counts.items())
        state = "engine" if s.failure is None else f"native: {s.failure}"
        rows.append(
            f"<tr><td><span class=sw style=\"background:{color}\"></span>{s.id}</td><td>{_esc(s.name)}</td>"
            f"<td class=n>{s.ops}</td><td>{_esc(', '.join(r.name for r in s.inputs))}</td>"
            f"<td>{_esc(', '.join(r.name for r in s.outputs))}</td><td class=n>{_esc(format_count(s.macs))}</td>"
            f"<td>{_esc(types)}</td><td>{_esc(state)}</td></tr>"
        )
    native_rows = []
    for op, reasons in report.native_by_op().items():
        for reason, names in reasons.items():
            native_rows.append(f"<tr><td>{_esc(op)}</td><td>{_esc(reason)}</td><td class=n>{len(names)}</td>"
                               f"<td>{_esc(', '.join(names))}</td></tr>")
    svg = render_svg(report, plan, collapse=collapse).split("\n", 1)[1]  # drop the XML declaration
    ops, macs = data["ops"], data["macs"]
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>mx_trt partition: {_esc(report.model)}</title>
<style>
body {{ font-family: {_FONT}; margin: 1.5em; color: #222; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 13px; }}
th, td {{ border: 1px solid #ccc; padding: 3px 7px; text-align: left; vertical-align: top; }}
td.n {{ text-align: right; }}
.sw {{ display: inline-block; width: 12px; height: 12px; margin-right: 5px; border: 1px solid #555; }}
.drawing {{ overflow: auto; border: 1px solid #ddd; }}
</style></head><body>
<h1>Partition of {_esc(report.model or "the model")}</h1>
<p>Backend: {_esc(report.backend or "-")}. Operators in engines: {ops["in_engines"]} of {ops["total"]}
({100 * ops["share"]:.1f}%). Estimated multiply-adds in engines: {_esc(format_count(macs["in_engines"]))}
of {_esc(format_count(macs["total"]))} ({100 * macs["share"]:.1f}%).</p>
<h2>Subgraphs</h2>
<table><tr><th>id</th><th>name</th><th>ops</th><th>inputs</th><th>outputs</th><th>MACs</th><th>op types</th><th>runs as</th></tr>
{chr(10).join(rows) or "<tr><td colspan=8>none</td></tr>"}
</table>
<h2>Native operators</h2>
<table><tr><th>op type</th><th>reason</th><th>count</th><th>nodes</th></tr>
{chr(10).join(native_rows) or "<tr><td colspan=4>none</td></tr>"}
</table>
<h2>Graph</h2>
<div class="drawing">
{svg}</div>
</body></html>
"""
