"""Replace every subgraph by one fused node.

After partitioning, each subgraph becomes a single node whose inputs are the
subgraph's boundary inputs and whose outputs are the entries the rest of the
graph (or the graph's heads) reads from it. Weights baked into an engine
("absorbed" variables) are not inputs, and disappear from the graph once no
native node needs them.
"""
from __future__ import annotations

import heapq
import logging
from dataclasses import dataclass
from typing import AbstractSet, Dict, List, Sequence, Set, Tuple

from .ir import Entry, Graph, Node
from .partition import Subgraph
from .validate import PartitionError, check_acyclic, gc_paused

logger = logging.getLogger(__name__)

__all__ = ["FuseResult", "FusedSubgraph", "boundary", "fuse"]

DEFAULT_FUSED_OP = "_mx_trt_fused"


@dataclass
class FusedSubgraph:
    """How one subgraph was fused.

    Attributes:
        subgraph: The subgraph.
        node_id: Id of the fused node in the new graph.
        inputs: Boundary inputs in the old graph: entries produced outside
            (operator outputs, or variables not absorbed) and consumed inside,
            in order of first use (node order, then input order), without duplicates.
            Input ``k`` of the fused node is ``inputs[k]`` remapped.
        outputs: Entries produced inside and consumed outside or listed in the
            graph's heads, sorted, without duplicates. Output ``k`` of the fused
            node is ``outputs[k]``.
    """

    subgraph: Subgraph
    node_id: int
    inputs: List[Entry]
    outputs: List[Entry]


@dataclass
class FuseResult:
    """The fused graph and the correspondence with the old one.

    Attributes:
        graph: The new graph (topologically ordered, validated).
        fused: One record per subgraph, in the order the subgraphs were given.
        entry_map: Old entry -> new entry for every entry that survives:
            outputs of native nodes, variables kept, and subgraph outputs
            (mapped to the fused node's outputs).
    """

    graph: Graph
    fused: List[FusedSubgraph]
    entry_map: Dict[Entry, Entry]


def _check_absorbed(graph: Graph, absorbed: AbstractSet[int]) -> None:
    for v in sorted(absorbed):
        if not 0 <= v < len(graph.nodes):
            raise PartitionError(f"absorbed names node id {v}, outside 0..{len(graph.nodes) - 1}")
        if not graph.nodes[v].is_variable:
            raise PartitionError(f"absorbed names operator {graph.nodes[v].name!r} (#{v}); only variables can be")


def _boundary(
    graph: Graph,
    nodes: Sequence[int],
    absorbed: AbstractSet[int],
    consumers: Dict[Entry, List[int]],
    heads: AbstractSet[Entry],
) -> Tuple[List[Entry], List[Entry]]:
    """:func:`boundary` with the consumer map and head set computed once by the caller."""
    inside = set(nodes)
    inputs: List[Entry] = []
    seen: Set[Entry] = set()
    outputs: Set[Entry] = set()
    for v in sorted(inside):
        node = graph.nodes[v]
        for e in node.inputs:
            if e.node not in inside and e.node not in absorbed and e not in seen:
                seen.add(e)
                inputs.append(e)
        for k in range(node.num_outputs):
            e = Entry(v, k)
            if e in heads or any(c not in inside for c in consumers.get(e, ())):
                outputs.add(e)
    return inputs, sorted(outputs)


def boundary(graph: Graph, nodes: Sequence[int], absorbed: AbstractSet[int]) -> Tuple[List[Entry], List[Entry]]:
    """The boundary inputs and outputs of a set of operator nodes.

    Args:
        graph: The graph.
        nodes: The subgraph's node ids.
        absorbed: Variable ids whose values are baked into the engine; never inputs.

    Returns:
        ``(inputs, outputs)`` as documented on :class:`FusedSubgraph`.

    Raises:
        PartitionError: ``absorbed`` names something other than a variable.

    Complexity: O(V + E) (it builds the consumer map; :func:`fuse` builds it
    once for all subgraphs).
    """
    _check_absorbed(graph, absorbed)
    return _boundary(graph, nodes, absorbed, graph.consumers(), set(graph.heads))


def _unique_name(base: str, taken: Set[str]) -> str:
    if base not in taken:
        return base
    k = 1
    while f"{base}_{k}" in taken:
        k += 1
    return f"{base}_{k}"


def fuse(
    graph: Graph,
    subgraphs: Sequence[Subgraph],
    absorbed: AbstractSet[int],
    fused_op: str = DEFAULT_FUSED_OP,
) -> FuseResult:
    """Build the graph where every subgraph is one ``fused_op`` node.

    The fused node is named after the subgraph (made unique with ``_1``,
    ``_2``, ... if a kept node already has that name), has attributes
    ``{"subgraph": subgraph.name}``, the remapped boundary inputs, and one
    output per boundary output. Native nodes keep their names and attributes.
    Absorbed variables consumed only inside subgraphs (and not graph outputs)
    are removed; every other variable stays, including data variables that
    only a subgraph reads (they become inputs of its fused node). Heads,
    shapes and dtypes are remapped.

    The new node order is Kahn's order of the contracted graph, taking among
    the ready nodes the one with the smallest original id (a fused node
    counts as its smallest member), so native nodes keep their relative
    order wherever the fusion allows.

    Args:
        graph: The graph.
        subgraphs: Disjoint subgraphs of operator nodes.
        absorbed: Ids of variables whose values are baked into the engines.
        fused_op: Operator name of the fused nodes.

    Returns:
        The new graph, one :class:`FusedSubgraph` per subgraph, and the entry map.

    Raises:
        PartitionError: overlapping subgraphs, a variable in a subgraph, a
            cycle after contraction, or a non-variable in ``absorbed``.

    Complexity: O((V + E) log V).
    """
    with gc_paused():
        return _fuse(graph, subgraphs, absorbed, fused_op)


def _fuse(graph: Graph, subgraphs: Sequence[Subgraph], absorbed: AbstractSet[int], fused_op: str) -> FuseResult:
    _check_absorbed(graph, absorbed)
    check_acyclic(graph, [s.nodes for s in subgraphs])
    nodes = graph.nodes
    n = len(nodes)
    consumers = graph.consumers()
    heads = set(graph.heads)

    owner = [-1] * n  # subgraph index of each node, -1 when native
    for si, s in enumerate(subgraphs):
        for v in s.nodes:
            owner[v] = si
    # A variable goes when it is absorbed and every reader sits in a subgraph.
    removed = [False] * n
    for v in absorbed:
        readers = consumers.get(Entry(v, 0), [])
        if readers and all(owner[c] >= 0 for c in readers) and Entry(v, 0) not in heads:
            removed[v] = True

    boundaries = [_boundary(graph, s.nodes, absorbed, consumers, heads) for s in subgraphs]

    # Units: native node v is unit v; subgraph si is unit n + si.
    def unit(v: int) -> int:
        return n + owner[v] if owner[v] >= 0 else v

    key: Dict[int, int] = {}
    for v in range(n):
        if owner[v] < 0 and not removed[v]:
            key[v] = v
    for si, s in enumerate(subgraphs):
        key[n + si] = min(s.nodes)
    succ: Dict[int, List[int]] = {u: [] for u in key}
    indeg: Dict[int, int] = {u: 0 for u in key}
    for v in range(n):
        if owner[v] < 0 and not removed[v]:
            for e in nodes[v].inputs:
                up = unit(e.node)
                succ[up].append(v)
                indeg[v] += 1
    for si in range(len(subgraphs)):
        for e in boundaries[si][0]:
            up = unit(e.node)
            succ[up].append(n + si)
            indeg[n + si] += 1
    ready = [(key[u], u) for u in key if indeg[u] == 0]
    heapq.heapify(ready)
    order: List[int] = []
    while ready:
        _, u = heapq.heappop(ready)
        order.append(u)
        for s2 in succ[u]:
            indeg[s2] -= 1
            if indeg[s2] == 0:
                heapq.heappush(ready, (key[s2], s2))
    if len(order) != len(key):
        raise PartitionError("internal error: the fused graph has a cycle although check_acyclic passed")

    taken = {nodes[u].name for u in order if u < n}
    entry_map: Dict[Entry, Entry] = {}
    new_nodes: List[Node] = []
    fused_by_index: Dict[int, FusedSubgraph] = {}
    for u in order:
        new_id = len(new_nodes)
        if u < n:
            old = nodes[u]
            new_nodes.append(
                Node(
                    id=new_id,
                    name=old.name,
                    op=old.op,
                    attrs=dict(old.attrs),
                    inputs=tuple(entry_map[e] for e in old.inputs),
                    num_outputs=old.num_outputs,
                )
            )
            for k in range(old.num_outputs):
                entry_map[Entry(u, k)] = Entry(new_id, k)
            continue
        si = u - n
        s = subgraphs[si]
        inputs, outputs = boundaries[si]
        name = _unique_name(s.name, taken)
        taken.add(name)
        if name != s.name:
            logger.warning("fused node name %r is taken; using %r", s.name, name)
        if not outputs:
            logger.warning("subgraph %r has no output anybody reads; its fused node has no outputs", s.name)
        new_nodes.append(
            Node(
                id=new_id,
                name=name,
                op=fused_op,
                attrs={"subgraph": s.name},
                inputs=tuple(entry_map[e] for e in inputs),
                num_outputs=len(outputs),
            )
        )
        for k, e in enumerate(outputs):
            entry_map[e] = Entry(new_id, k)
        fused_by_index[si] = FusedSubgraph(subgraph=s, node_id=new_id, inputs=inputs, outputs=outputs)

    new_graph = Graph(
        nodes=new_nodes,
        heads=[entry_map[e] for e in graph.heads],
        shapes={entry_map[e]: shape for e, shape in graph.shapes.items() if e in entry_map},
        dtypes={entry_map[e]: dt for e, dt in graph.dtypes.items() if e in entry_map},
    )
    new_graph.validate()
    logger.info(
        "fused %d subgraphs: %d nodes -> %d (%d absorbed variables removed)",
        len(subgraphs), n, len(new_nodes), sum(removed),
    )
    fused = [fused_by_index[si] for si in range(len(subgraphs))]
    return FuseResult(graph=new_graph, fused=fused, entry_map=entry_map)
