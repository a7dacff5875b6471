"""Independent checks of a partition: acyclicity after contraction, and maximality.

This module deliberately shares no code or data structure with
:mod:`mx_trt.passes.partition`: it recomputes everything from the plain graph with
textbook algorithms (Kahn's topological sort, transitive closure), so a bug in
the partitioner's incremental machinery cannot hide itself here.

Two input forms are accepted:

* a :class:`mx_trt.passes.ir.Graph` with subgraphs given as operator node ids;
* the plain form used by :func:`mx_trt.passes.partition.partition_dag`: ``preds[i]``
  lists the predecessors of node ``i`` (all smaller than ``i``) and groups are
  lists of node indices.
"""
from __future__ import annotations

import contextlib
import gc
import logging
from typing import Callable, Dict, Iterator, List, Sequence, Tuple, Union

from .ir import Graph

logger = logging.getLogger(__name__)

__all__ = ["PartitionError", "check_acyclic", "check_acyclic_dag", "gc_paused", "maximality_violations"]


class PartitionError(ValueError):
    """A partition is invalid: overlapping groups, a variable or bad id in a group, or a cycle."""


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector inside the block (restoring its previous state).

    The passes allocate a few containers per node and create no reference
    cycles, so reference counting frees everything; on large graphs the
    collector's repeated full scans would otherwise cost about twice the work
    itself (measured: 2.0 s -> 0.7 s on 100,000 nodes). The pause is
    process-wide, for the duration of one pass.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _default_name(v: int) -> str:
    return f"node {v}"


def _group_of(
    num_nodes: int,
    groups: Sequence[Sequence[int]],
    name: Callable[[int], str],
) -> List[int]:
    """Map every node to its group index, or -1. O(V + sum of group sizes).

    Raises:
        PartitionError: an id out of range, an empty group, or a node in two groups.
    """
    group = [-1] * num_nodes
    for gi, members in enumerate(groups):
        if len(members) == 0:
            raise PartitionError(f"subgraph {gi} is empty")
        for v in members:
            if not 0 <= v < num_nodes:
                raise PartitionError(f"subgraph {gi} holds node id {v}, outside 0..{num_nodes - 1}")
            if group[v] == gi:
                raise PartitionError(f"subgraph {gi} lists {name(v)} twice")
            if group[v] != -1:
                raise PartitionError(f"{name(v)} is in two subgraphs ({group[v]} and {gi})")
            group[v] = gi
    return group


def _contracted(
    preds: Sequence[Sequence[int]], group: Sequence[int], num_groups: int
) -> Tuple[int, List[List[int]], List[List[int]]]:
    """Build the contracted graph: unit ``g`` for group ``g``, unit ``k + v`` for a lone node ``v``.

    Multi-edges are kept (Kahn counts them consistently); edges inside one
    group disappear. O(V + E).

    Returns:
        ``(number of units, successor lists, predecessor lists)``.
    """
    k = num_groups
    n = len(preds)
    num_units = k + n
    succ: List[List[int]] = [[] for _ in range(num_units)]
    pred: List[List[int]] = [[] for _ in range(num_units)]
    for v in range(n):
        gv = group[v]
        uv = gv if gv >= 0 else k + v
        for p in preds[v]:
            gp = group[p]
            up = gp if gp >= 0 else k + p
            if up != uv:
                succ[up].append(uv)
                pred[uv].append(up)
    return num_units, succ, pred


def _kahn(num_units: int, succ: Sequence[Sequence[int]], pred: Sequence[Sequence[int]]) -> List[int]:
    """A topological order of the units not on or behind a cycle (LIFO Kahn). O(units + edges)."""
    indeg = [len(p) for p in pred]
    ready = [u for u in range(num_units - 1, -1, -1) if indeg[u] == 0]
    order: List[int] = []
    while ready:
        u = ready.pop()
        order.append(u)
        for s in succ[u]:
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    return order


def _find_cycle(num_units: int, pred: Sequence[Sequence[int]], done: Sequence[bool]) -> List[int]:
    """Return one cycle among the units Kahn could not order, in edge order. O(units + edges).

    Every unordered unit has an unordered predecessor (else Kahn would have
    freed it), so walking backwards through unordered predecessors must
    revisit a unit.
    """
    start = next(u for u in range(num_units) if not done[u])
    seen_at: Dict[int, int] = {}
    walk: List[int] = []
    u = start
    while u not in seen_at:
        seen_at[u] = len(walk)
        walk.append(u)
        u = next(p for p in pred[u] if not done[p])
    cycle = walk[seen_at[u]:]
    cycle.reverse()  # the walk followed edges backwards
    first = cycle.index(min(cycle))  # start at the first subgraph, for stable messages
    return cycle[first:] + cycle[:first]


def _check(
    preds: Sequence[Sequence[int]],
    groups: Sequence[Sequence[int]],
    name: Callable[[int], str],
    log: bool = True,
) -> None:
    n = len(preds)
    for v in range(n):
        for p in preds[v]:
            if not 0 <= p < v:
                raise PartitionError(f"{name(v)} has predecessor {p}: the graph is not in topological order")
    group = _group_of(n, groups, name)
    k = len(groups)
    num_units, succ, pred = _contracted(preds, group, k)
    order = _kahn(num_units, succ, pred)
    if len(order) == num_units:
        return
    done = [False] * num_units
    for u in order:
        done[u] = True
    cycle = _find_cycle(num_units, pred, done)

    def unit_name(u: int) -> str:
        if u < k:
            members = sorted(groups[u])
            shown = ", ".join(name(v) for v in members[:4])
            more = f", ... ({len(members)} nodes)" if len(members) > 4 else ""
            return f"subgraph {u} [{shown}{more}]"
        return name(u - k)

    path = " -> ".join(unit_name(u) for u in cycle + cycle[:1])
    if log:
        logger.error("contracting the subgraphs makes a cycle: %s", path)
    raise PartitionError(f"contracting the subgraphs makes a cycle: {path}")


def check_acyclic_dag(preds: Sequence[Sequence[int]], groups: Sequence[Sequence[int]]) -> None:
    """Check that contracting every group to one node leaves a DAG.

    Args:
        preds: ``preds[i]`` are the predecessors of node ``i``; all must be ``< i``.
        groups: Disjoint, non-empty lists of node indices.

    Raises:
        PartitionError: a bad id, an empty group, a node in two groups, an
            input not in topological order, or a cycle (the message names the
            groups and nodes on one cycle).

    Complexity: O(V + E) time and memory (Kahn's algorithm on the contracted graph).
    """
    with gc_paused():
        _check(preds, groups, _default_name)


def check_acyclic(graph: Graph, subgraphs: Sequence[Sequence[int]]) -> None:
    """Check a partition of ``graph``: disjoint subgraphs of operator nodes, acyclic contraction.

    Run at every bind, so it is linear.

    Args:
        graph: The graph (topologically ordered, as :meth:`Graph.validate` demands).
        subgraphs: Node ids of every subgraph.

    Raises:
        PartitionError: a subgraph holds a variable, is empty, has a bad id, or
            shares a node with another; or the contraction has a cycle.

    Complexity: O(V + E).
    """
    nodes = graph.nodes

    def name(v: int) -> str:
        return f"{nodes[v].name!r} (#{v})" if 0 <= v < len(nodes) else f"node {v}"

    for gi, members in enumerate(subgraphs):
        for v in members:
            if 0 <= v < len(nodes) and nodes[v].is_variable:
                raise PartitionError(f"subgraph {gi} holds variable {name(v)}")
    with gc_paused():
        preds = [[e.node for e in n.inputs] for n in nodes]
        _check(preds, subgraphs, name)


def maximality_violations(
    graph_or_preds: Union[Graph, Sequence[Sequence[int]]],
    supported: Sequence[bool],
    groups: Sequence[Sequence[int]],
    min_size: int,
) -> List[str]:
    """List every way the partition could still grow; empty means maximal. For tests.

    A partition is maximal when (all merges tested in the graph where every
    group is contracted to one node, and "legal" means the result is still a
    DAG):

    * no compatible operator left outside all groups can join a group it shares an edge with;
    * no two groups that share an edge can merge;
    * if ``min_size <= 1``, no compatible operator is left outside;
      if ``min_size == 2``, no two such leftover operators sharing an edge can form a group.

    Validity problems are reported too: a group below ``min_size``, holding an
    unsupported node or a variable, or a cyclic contraction.

    Args:
        graph_or_preds: A :class:`Graph` (variables are never candidates) or
            plain predecessor lists.
        supported: ``supported[i]`` is true when node ``i`` may go to TensorRT.
        groups: The subgraphs (node ids / indices).
        min_size: The minimum group size the partition had to respect.

    Returns:
        Human-readable violations, in a deterministic order.

    Complexity: O(U * (U + E) / w) with U = number of contracted units and
    w the machine word size (transitive closure with integer bitsets): slow
    but exact, meant for tests.
    """
    is_var: List[bool]
    if isinstance(graph_or_preds, Graph):
        preds: Sequence[Sequence[int]] = graph_or_preds.predecessors()
        is_var = [node.is_variable for node in graph_or_preds.nodes]
        names = [node.name for node in graph_or_preds.nodes]

        def name(v: int) -> str:
            return f"{names[v]!r}"
    else:
        preds = graph_or_preds
        is_var = [False] * len(preds)
        name = _default_name
    n = len(preds)
    if len(supported) != n:
        return [f"supported has {len(supported)} entries for {n} nodes"]
    violations: List[str] = []
    try:
        _check(preds, groups, name, log=False)
    except PartitionError as e:
        return [f"invalid partition: {e}"]
    for gi, members in enumerate(groups):
        if len(members) < min_size:
            violations.append(f"subgraph {gi} has {len(members)} nodes, below min_size={min_size}")
        for v in sorted(members):
            if is_var[v]:
                violations.append(f"subgraph {gi} holds variable {name(v)}")
            elif not supported[v]:
                violations.append(f"subgraph {gi} holds unsupported {name(v)}")

    group = _group_of(n, groups, name)
    k = len(groups)
    num_units, succ, pred = _contracted(preds, group, k)
    order = _kahn(num_units, succ, pred)
    # reach[u]: units reachable from u by a path of >= 1 edge; far[u]: by >= 2 edges.
    reach = [0] * num_units
    far = [0] * num_units
    for u in reversed(order):
        r = 0
        f = 0
        for s in set(succ[u]):
            r |= reach[s] | (1 << s)
            f |= reach[s]
        reach[u] = r
        far[u] = f

    def unit(v: int) -> int:
        return group[v] if group[v] >= 0 else k + v

    def mergeable(x: int, y: int) -> bool:
        """x -> y is an edge of the contracted DAG: merging is legal iff no longer path exists."""
        return not (far[x] >> y) & 1

    def free(v: int) -> bool:
        return group[v] < 0 and supported[v] and not is_var[v]

    seen_pairs = set()
    for v in range(n):
        if min_size <= 1 and free(v):
            violations.append(f"compatible {name(v)} is outside every subgraph although min_size={min_size}")
        for p in sorted(set(preds[v])):
            up, uv = unit(p), unit(v)
            if up == uv or (up, uv) in seen_pairs:
                continue
            seen_pairs.add((up, uv))
            if not mergeable(up, uv):
                continue
            if group[p] >= 0 and group[v] >= 0:
                violations.append(f"subgraphs {group[p]} and {group[v]} share an edge and can merge")
            elif group[p] >= 0 and free(v):
                violations.append(f"compatible {name(v)} can join subgraph {group[p]}")
            elif group[v] >= 0 and free(p):
                violations.append(f"compatible {name(p)} can join subgraph {group[v]}")
            elif min_size == 2 and free(p) and free(v):
                violations.append(f"compatible {name(p)} and {name(v)} can form a subgraph of 2")
    return violations

