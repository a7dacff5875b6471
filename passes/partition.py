"""Split a graph into maximal TensorRT-compatible subgraphs.

The method is the one of the integration's design ("Subgraph partitioning"),
made exact and efficient:

1. **Incompatibility groups with bitsets** (:mod:`mx_trt.passes.groups`). The design runs one BFS and one
   reverse BFS per incompatible node ``x``: a subgraph holding an ancestor of
   ``x`` must not hold a descendant of ``x``. Here the K incompatible nodes are
   numbered and each node ``v`` gets two Python integers used as bitsets:
   ``A[v]`` (incompatible nodes ``v`` reaches) and ``D[v]`` (incompatible nodes
   reaching ``v``), filled by one backward and one forward sweep in
   O((V + E) * K / w) instead of K graph traversals.
2. **Growth** (:func:`mx_trt.passes.groups.grow`). Subgraphs are grown one at a time from the smallest unused
   compatible node, in DFS order over inputs then outputs. A candidate ``w``
   passes the design's test iff ``A[w] & OR(D over the subgraph) == 0`` and
   ``D[w] & OR(A over the subgraph) == 0``.
3. **Exact check** (:mod:`mx_trt.passes.contraction`). Taken literally, that test can leave a cycle *between*
   subgraphs (subgraph S holds ``u`` and ``v``, subgraph T holds ``w``, and
   ``u -> w -> v``), because a path may enter a formed subgraph at one node and
   leave it at another. So every join must also pass an exact test in the
   graph where every formed subgraph is contracted to one node:
   contracting the edge ``a -> b`` is legal iff ``b`` is not reachable from
   ``a`` by another path. :class:`~mx_trt.passes.contraction.ContractedDag` maintains
   that contracted DAG with union-find, adjacency sets and a topological order
   kept by an order-maintenance list (:mod:`mx_trt.passes.order_list`), so the test is a bidirectional search pruned by the
   order (Pearce-Kelly style), stopped as soon as either side is exhausted.
4. **Maximality** (:func:`mx_trt.passes.contraction.merge_adjacent`, driven here). Adjacent groups are merged while legal, groups below the
   minimum size are dropped, and their nodes may then join adjacent surviving
   subgraphs (to a fixpoint). The result satisfies: no compatible node outside
   all subgraphs can join a subgraph it shares an edge with, and no two
   subgraphs sharing an edge can merge, without a cycle or a size violation.

Everything is deterministic: nodes are visited in id order, ties are broken
by ids, and no decision depends on the iteration order of a hash container.
Variables (``op == "null"``) are sources, so no path passes through them; they
are dropped before the core runs and never belong to a subgraph.

This module holds the public entry points (:func:`partition` on the IR,
:func:`partition_dag` on a plain DAG), their result types, the phases' order
(``_partition_core``) and a literal reference of the design's method for tests
and benchmarks.
"""
from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Set, Tuple

from .contraction import ContractedDag, groups_of, merge_adjacent
from .groups import grow, normalise, push_neighbours, reach_bitsets, successors
from .ir import Graph
from .validate import PartitionError, gc_paused

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_MIN_SUBGRAPH_SIZE",
    "MIN_SUBGRAPH_SIZE_ENV",
    "PartitionResult",
    "Subgraph",
    "partition",
    "partition_dag",
]

DEFAULT_MIN_SUBGRAPH_SIZE: int = 2
"""Smallest number of operators worth a fused TensorRT node.

Every fused node costs a fixed hop (about 100 us per call for a Python
custom operator on CPU, more than many single MXNet operators take), while a
single operator gives TensorRT nothing to fuse. Two operators (convolution +
activation, say) is the smallest subgraph where layer fusion can win back
the hop. Override with ``MXNET_TENSORRT_MIN_SUBGRAPH_SIZE``.
"""

MIN_SUBGRAPH_SIZE_ENV = "MXNET_TENSORRT_MIN_SUBGRAPH_SIZE"

#: Above V * K bits per bitset array (V nodes, K incompatible, 2 arrays), the
#: bitsets are skipped: they grow quadratically with the graph for a fixed
#: unsupported fraction (100,000 ops at 5% is 5e8 bits, 60 MB per array),
#: and the exact check alone gives the same partition.
_BITSET_BUDGET_BITS = 1 << 31


@dataclass(frozen=True)
class Subgraph:
    """One group of operators that will run as a single fused TensorRT node.

    Attributes:
        id: 0..n-1, ordered by the smallest node id each subgraph contains.
        name: Deterministic name, ``trt_subgraph_{id}``.
        nodes: Sorted operator node ids (never variables).
    """

    id: int
    name: str
    nodes: Tuple[int, ...]


@dataclass
class PartitionResult:
    """The outcome of :func:`partition`.

    Attributes:
        subgraphs: The subgraphs, by increasing smallest node id.
        native: Every operator node left to MXNet, by id, with the reason.
    """

    subgraphs: List[Subgraph]
    native: Dict[int, str]

    def node_to_subgraph(self) -> Dict[int, int]:
        """Map each node in a subgraph to the subgraph's id. O(nodes in subgraphs)."""
        return {v: s.id for s in self.subgraphs for v in s.nodes}


def _partition_core(
    preds: Sequence[Sequence[int]],
    supported: Sequence[bool],
    min_size: int,
    exact: bool = True,
    bitsets: Optional[bool] = None,
) -> Tuple[List[List[int]], Dict[int, int]]:
    """Partition a plain DAG; also report the nodes dropped for size.

    Args:
        bitsets: Compute the ``A``/``D`` bitsets (``None``: unless they would
            exceed :data:`_BITSET_BUDGET_BITS`). With the exact check they are
            only a pre-test: every join they refuse, the exact check refuses
            too (an incompatible ``x`` on ``u -> x -> w`` is another path), so
            the partition is the same without them. The literal method needs them.

    Returns:
        ``(groups, dropped)``: the subgraphs (sorted members, ordered by
        smallest member) and, for every compatible node left out, the size of
        the group it was dropped from.
    """
    if min_size < 1:
        raise PartitionError(f"min_size must be >= 1, got {min_size}")
    preds = normalise(preds, supported)
    succs = successors(preds)
    n = len(preds)
    if bitsets is None:
        k = n - sum(1 for s in supported if s)
        bitsets = not exact or n * k <= _BITSET_BUDGET_BITS
        if not bitsets:
            logger.info("%d nodes x %d incompatible: skipping the bitset pre-test (memory), exact check only", n, k)
    if bitsets or not exact:
        up, down = reach_bitsets(preds, succs, supported)
    else:
        up = down = [0] * n
    if not exact:
        grown = grow(preds, succs, supported, up, down, None)
        kept = [g for g in grown if len(g) >= min_size]
        dropped = {v: len(g) for g in grown if len(g) < min_size for v in g}
        return kept, dropped

    dag = ContractedDag(preds, up, down)
    grow(preds, succs, supported, up, down, dag)
    edges = [(p, v) for v in range(len(preds)) if supported[v] for p in preds[v] if supported[p]]
    merges = merge_adjacent(dag, edges, None)
    groups = groups_of(dag, supported)
    small = [g for g in groups if len(g) < min_size]
    logger.debug("growth and merge sweep: %d groups (%d merges in the sweep), %d below min_size",
                 len(groups), merges, len(small))
    if not small:
        return groups, {}

    dropped = {v: len(g) for g in small for v in g}
    kept = [g for g in groups if len(g) >= min_size]
    # Rebuild with the small groups split back into single nodes: splitting can
    # remove paths, so merges refused before may now be legal.
    root_of = list(range(n))
    is_subgraph = [False] * n
    for g in kept:
        for v in g:
            root_of[v] = g[0]
        is_subgraph[g[0]] = True
    dag = ContractedDag(preds, up, down, root_of)
    absorbed = merge_adjacent(dag, edges, is_subgraph)
    final = [g for g in groups_of(dag, supported) if is_subgraph[dag.find(g[0])]]
    left = {v: s for v, s in dropped.items() if not is_subgraph[dag.find(v)]}
    logger.debug("re-absorption: %d merges, %d nodes stay native", absorbed, len(left))
    return final, left


def partition_dag(
    preds: Sequence[Sequence[int]],
    supported: Sequence[bool],
    min_size: int,
    exact: bool = True,
) -> List[List[int]]:
    """Partition a plain DAG into maximal acyclic groups of supported nodes.

    Args:
        preds: ``preds[i]`` lists the predecessors of node ``i``, all ``< i``.
        supported: ``supported[i]`` is true when node ``i`` may join a group.
        min_size: Groups smaller than this are dropped (after trying to merge).
        exact: Internal switch. ``False`` runs the design's method literally
            (bitset test only, no merge sweep, no re-absorption), which can
            leave a cycle between groups; kept to demonstrate that.

    Returns:
        The groups: sorted node lists, ordered by their smallest node.
        Contracting every group leaves a DAG, and the partition is maximal
        (see the module docstring).

    Raises:
        PartitionError: ``min_size < 1``, mismatched lengths, or a predecessor
            that is not smaller than its node.

    Complexity: O((V + E) * K / w) for the bitsets (K incompatible nodes,
    w = 30-bit digits), O(V + E) for growth bookkeeping, plus the exact
    checks. Each check costs twice the smaller of the two order-pruned
    regions between the ends of the contracted edge; the worst case is
    O(V + E) per check and O(E * (V + E)) overall, while layered networks
    stay close to linear (see ``benchmarks/bench_partition.py``).
    Memory: O(V * K / w + E); past :data:`_BITSET_BUDGET_BITS` the bitset
    pre-test is skipped (same result, O(V + E) memory).
    """
    with gc_paused():
        groups, _ = _partition_core(preds, supported, min_size, exact)
    return groups


def partition(
    graph: Graph,
    unsupported: Mapping[int, str],
    min_size: int = DEFAULT_MIN_SUBGRAPH_SIZE,
) -> PartitionResult:
    """Partition ``graph``'s operators into maximal TensorRT subgraphs.

    Args:
        graph: A valid graph (topologically ordered).
        unsupported: Operator node id -> why it cannot go to TensorRT. Every
            other operator node is compatible.
        min_size: Subgraphs with fewer operators stay native.

    Returns:
        The subgraphs, named ``trt_subgraph_{id}`` in order of their smallest
        node id, and the reason every other operator node stays native.

    Raises:
        PartitionError: ``unsupported`` names a variable or a missing node,
            or ``min_size < 1``.

    Complexity: that of :func:`partition_dag` on the operator nodes.
    """
    nodes = graph.nodes
    for v in unsupported:
        if not 0 <= v < len(nodes):
            raise PartitionError(f"unsupported names node id {v}, outside 0..{len(nodes) - 1}")
        if nodes[v].is_variable:
            raise PartitionError(f"unsupported names variable {nodes[v].name!r} (#{v})")
    ops = graph.op_nodes()
    with gc_paused():
        index = {v: i for i, v in enumerate(ops)}
        preds = [[index[e.node] for e in nodes[v].inputs if e.node in index] for v in ops]
        supported = [v not in unsupported for v in ops]
        groups, dropped = _partition_core(preds, supported, min_size)
        del preds, index

    subgraphs = [
        Subgraph(id=i, name=f"trt_subgraph_{i}", nodes=tuple(ops[j] for j in g)) for i, g in enumerate(groups)
    ]
    in_subgraph = {v for s in subgraphs for v in s.nodes}
    native: Dict[int, str] = {}
    for i, v in enumerate(ops):
        if v in in_subgraph:
            continue
        if v in unsupported:
            native[v] = unsupported[v]
        else:
            k = dropped[i]
            native[v] = (
                f"in a compatible group of {k} op{'s' if k != 1 else ''}, "
                f"below {MIN_SUBGRAPH_SIZE_ENV}={min_size}"
            )
    logger.info(
        "partitioned %d operators: %d in %d TensorRT subgraphs, %d native (%d unsupported, %d below min size %d)",
        len(ops), len(in_subgraph), len(subgraphs), len(native), len(unsupported), len(native) - len(unsupported),
        min_size,
    )
    return PartitionResult(subgraphs=subgraphs, native=native)


# ---------------------------------------------------------------------------
# A straightforward reference of the design's method, for tests and benchmarks
# ---------------------------------------------------------------------------


def _literal_partition_reference(
    preds: Sequence[Sequence[int]], supported: Sequence[bool], min_size: int
) -> List[List[int]]:
    """The design's method written plainly: one BFS and one reverse BFS per incompatible node.

    Same seed and visiting order as ``partition_dag(..., exact=False)`` so the
    two must agree exactly; it has no exact check and can leave cycles between
    groups. Complexity: O(K * (V + E)) for the groups, and set unions per join.
    """
    preds = normalise(preds, supported)
    succs = successors(preds)
    n = len(preds)

    def bfs(start: int, adj: Sequence[Sequence[int]]) -> Set[int]:
        seen: Set[int] = set()
        queue = deque(adj[start])
        while queue:
            v = queue.popleft()
            if v not in seen:
                seen.add(v)
                queue.extend(adj[v])
        return seen

    incompatible = [x for x in range(n) if not supported[x]]
    below = {x: bfs(x, succs) for x in incompatible}  # descendants
    above = {x: bfs(x, preds) for x in incompatible}  # ancestors
    # For each node, the incompatible nodes it is above / below.
    is_above: List[List[int]] = [[] for _ in range(n)]
    is_below: List[List[int]] = [[] for _ in range(n)]
    for x in incompatible:
        for v in above[x]:
            is_above[v].append(x)
        for v in below[x]:
            is_below[v].append(x)

    used = [False] * n
    groups: List[List[int]] = []
    for seed in range(n):
        if used[seed] or not supported[seed]:
            continue
        excluded: Set[int] = set()
        counted_above: Set[int] = set()  # incompatible x whose descendants are already excluded
        counted_below: Set[int] = set()
        members: List[int] = []
        stack: List[int] = []

        def add(v: int) -> None:
            used[v] = True
            members.append(v)
            for x in is_above[v]:
                if x not in counted_above:
                    counted_above.add(x)
                    excluded.update(below[x])
            for x in is_below[v]:
                if x not in counted_below:
                    counted_below.add(x)
                    excluded.update(above[x])
            push_neighbours(stack, v, preds, succs, supported, used)

        add(seed)
        while stack:
            item = stack.pop()
            w = item if item >= 0 else ~item
            if not used[w] and w not in excluded:
                add(w)
        groups.append(sorted(members))
    return [g for g in groups if len(g) >= min_size]
