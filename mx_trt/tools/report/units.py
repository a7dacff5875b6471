"""What the drawing shows: boxes (operators, collapsed subgraphs, inputs, outputs) and the edges between them."""
from __future__ import annotations

import heapq
import logging
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Set, Tuple

from mx_trt.passes.ir import Entry, Graph

from mx_trt.tools.report.model import PartitionReport, entry_label
from mx_trt.tools.report.text import clip, format_count, shape_text

logger = logging.getLogger(__name__)


#: Graphs with more outputs than this are drawn without output boxes.
MAX_OUTPUT_BOXES = 16


@dataclass
class Unit:
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



def wrap(text: str, width: int, max_lines: int) -> List[str]:
    """``text`` in lines of at most ``width`` characters, at most ``max_lines`` of them (``...`` when cut)."""
    words = text.split()
    lines: List[str] = []
    cur = ""
    for w in words:
        if len(w) > width:
            w = clip(w, width)
        if cur and len(cur) + 1 + len(w) > width:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}" if cur else w
    if cur:
        lines.append(cur)
    if len(lines) > max_lines:
        lines = lines[:max_lines]
        lines[-1] = clip(lines[-1] + " ...", width) if len(lines[-1]) + 4 > width else lines[-1] + " ..."
    return lines


def build_units(
    report: PartitionReport, plan: Any, collapse: bool
) -> Tuple[List[Unit], List[Tuple[int, int]]]:
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
    units: List[Unit] = []
    unit_of: Dict[int, int] = {}  # graph node id -> unit index
    collapsed_unit: Dict[int, int] = {}  # subgraph id -> unit index

    def add(u: Unit) -> int:
        units.append(u)
        return len(units) - 1

    for n in graph.nodes:
        if n.is_variable:
            if n.name in weights:
                continue
            shape = graph.shapes.get(Entry(n.id, 0))
            unit_of[n.id] = add(Unit(n.id, "input", [n.name, shape_text(shape)], f"input {n.name} {shape_text(shape)}"))
            continue
        sid = sg_of.get(n.id)
        if sid is None:
            reason = reasons.get(n.name, "native")
            unit_of[n.id] = add(Unit(n.id, "native", [clip(n.name, 34), f"{n.op} (native)"] + wrap(reason, 38, 2),
                                      f"{n.name} ({n.op}) stays native: {reason}", reason=reason))
        elif collapse:
            if sid not in collapsed_unit:
                row = report.subgraphs[sid]
                top = sorted(row.op_counts.items(), key=lambda kv: (-kv[1], kv[0]))
                counts = [f"{k} {v}" for k, v in top]
                body = wrap(", ".join(counts), 44, 2)
                collapsed_unit[sid] = add(Unit(
                    n.id, "subgraph",
                    [f"{row.name}: {row.ops} ops, {format_count(row.macs)} MACs"] + body,
                    f"{row.name}: {row.ops} ops ({', '.join(counts)}), {len(row.inputs)} inputs, "
                    f"{len(row.outputs)} outputs, {format_count(row.macs)} multiply-adds",
                    subgraph=sid))
            unit_of[n.id] = collapsed_unit[sid]
        else:
            unit_of[n.id] = add(Unit(n.id, "op", [clip(n.name, 34), n.op],
                                      f"{n.name} ({n.op}) in {report.subgraphs[sid].name}", subgraph=sid))
    heads = list(graph.heads) if len(graph.heads) <= MAX_OUTPUT_BOXES else []
    for k, e in enumerate(heads):
        shape = graph.shapes.get(e)
        label = entry_label(graph, e)
        unit_of[-1 - k] = add(Unit(-1 - k, "output", [f"output {k}: {clip(label, 30)}", shape_text(shape)],
                                    f"output {k}: {label} {shape_text(shape)}"))

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
    return topo_sorted(units, sorted(edges))


def topo_sorted(units: List[Unit], edges: List[Tuple[int, int]]) -> Tuple[List[Unit], List[Tuple[int, int]]]:
    """Kahn's order (ties by creation order), units and edges re-indexed. O(U + E)."""
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
