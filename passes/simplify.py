"""Graph simplification before partitioning: remove inference-time identities.

At inference ``Dropout``, ``BlockGrad``/``stop_gradient``, ``identity`` and
``_copy`` return their input unchanged. Left in the graph they cost a native
node each, or worse, split two subgraphs apart when the operators around them
stay native (a lone ``Dropout`` between two attention blocks becomes a
one-node subgraph, too small for an engine). Removing them before the
partitioner runs means they neither split a subgraph nor cost a hop.

Which nodes are identities is the caller's decision (a predicate over the
node: ``Dropout`` with ``mode='always'`` is not one); this module only
rewires the graph.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List

from .ir import Entry, Graph, Node

__all__ = ["SimplifyResult", "remove_identities"]


@dataclass
class SimplifyResult:
    """The simplified graph and how it relates to the old one.

    Attributes:
        graph: The new graph (ids renumbered, topological, validated).
        removed: Names of the removed nodes, in old id order.
        node_map: Old node id -> new node id for every node kept.
    """

    graph: Graph
    removed: List[str]
    node_map: Dict[int, int]


def remove_identities(graph: Graph, is_identity: Callable[[Node], bool]) -> SimplifyResult:
    """Drop every operator node that ``is_identity`` accepts, rewiring its readers to its input.

    A node is removed only when it has at least one input, none of its outputs
    is a graph output (a head keeps its node, so the outputs keep their names)
    and no one reads its other outputs; its readers then read its first input
    instead. Chains of
    identities collapse. Shapes and dtypes of surviving entries are kept.

    Args:
        graph: The graph.
        is_identity: Whether an operator node returns its first input unchanged.

    Returns:
        The :class:`SimplifyResult`. With nothing to remove, ``graph`` itself.

    Complexity: O(V + E).
    """
    heads = {e.node for e in graph.heads}
    # A node whose other outputs (Dropout's mask) are read is kept.
    reads_other = {e.node for n in graph.nodes for e in n.inputs if e.index > 0}
    # Where each removed node's output really comes from (resolved through chains).
    forward: Dict[int, Entry] = {}
    for n in graph.nodes:
        if n.is_variable or not n.inputs or n.id in heads or n.id in reads_other or not is_identity(n):
            continue
        src = n.inputs[0]
        forward[n.id] = forward.get(src.node, src) if src.index == 0 else src
    if not forward:
        return SimplifyResult(graph, [], {n.id: n.id for n in graph.nodes})

    def resolve(e: Entry) -> Entry:
        return forward[e.node] if e.node in forward and e.index == 0 else e

    node_map: Dict[int, int] = {}
    nodes: List[Node] = []
    for n in graph.nodes:
        if n.id in forward:
            continue
        new_id = len(nodes)
        node_map[n.id] = new_id
        inputs = tuple(Entry(node_map[r.node], r.index) for r in (resolve(e) for e in n.inputs))
        nodes.append(Node(id=new_id, name=n.name, op=n.op, attrs=n.attrs, inputs=inputs, num_outputs=n.num_outputs))
    new = Graph(nodes=nodes, heads=[Entry(node_map[e.node], e.index) for e in graph.heads])
    for e, shape in graph.shapes.items():
        if e.node in node_map:
            new.shapes[Entry(node_map[e.node], e.index)] = shape
    for e, dtype in graph.dtypes.items():
        if e.node in node_map:
            new.dtypes[Entry(node_map[e.node], e.index)] = dtype
    new.validate()
    removed = [graph.nodes[i].name for i in sorted(forward)]
    return SimplifyResult(new, removed, node_map)
