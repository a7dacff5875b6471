"""A small typed graph IR for the passes.

The IR mirrors the shape of an MXNet/NNVM graph without importing MXNet:
nodes are stored in topological order (every input refers to a node with a
smaller id), variables are nodes whose ``op`` is ``"null"``, and a tensor is
named by an :class:`Entry` ``(node id, output index)``.

Everything here is pure Python so the passes can be unit tested on tiny
hand-written graphs in milliseconds.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

Shape = Tuple[int, ...]
#: One batch profile: (min, opt, max) of dimension 0, the batch (what an export and an engine are made for).
BatchRange = Tuple[int, int, int]

VARIABLE_OP = "null"


class GraphError(ValueError):
    """The graph violates an IR invariant (not topologically ordered, bad entry...)."""


@dataclass(frozen=True, order=True)
class Entry:
    """One output of one node: ``(node, index)``."""

    node: int
    index: int = 0


@dataclass
class Node:
    """A node of the graph.

    Attributes:
        id: Position in :attr:`Graph.nodes`.
        name: MXNet's node name. Names need not be unique (MXNet binds graphs
            where a block called twice repeats them): passes key nodes by ``id``.
        op: Operator name, ``"null"`` for a variable.
        attrs: Operator attributes as MXNet spells them (strings).
        inputs: The entries this node consumes, in order.
        num_outputs: Number of outputs this node produces.
    """

    id: int
    name: str
    op: str
    attrs: Mapping[str, str] = field(default_factory=dict)
    inputs: Tuple[Entry, ...] = ()
    num_outputs: int = 1

    @property
    def is_variable(self) -> bool:
        return self.op == VARIABLE_OP


@dataclass
class Graph:
    """A DAG of :class:`Node` in topological order with its output entries.

    Attributes:
        nodes: All nodes; ``nodes[i].id == i``.
        heads: The graph outputs.
        shapes: Optional inferred shape per entry.
        dtypes: Optional inferred dtype name (numpy spelling) per entry.
    """

    nodes: List[Node]
    heads: List[Entry]
    shapes: Dict[Entry, Shape] = field(default_factory=dict)
    dtypes: Dict[Entry, str] = field(default_factory=dict)

    def validate(self) -> None:
        """Check the invariants. O(V + E).

        Raises:
            GraphError: ids out of place, an input from a later node, or an output
                index out of range. Duplicate names are allowed (nodes are keyed by id).
        """
        for i, node in enumerate(self.nodes):
            if node.id != i:
                raise GraphError(f"node {node.name!r} has id {node.id}, expected {i}")
            for e in node.inputs:
                self._check_entry(e, f"input of {node.name!r}")
                if e.node >= i:
                    raise GraphError(f"node {node.name!r} consumes {e} from a later node: not topologically ordered")
        for e in self.heads:
            self._check_entry(e, "graph output")

    def _check_entry(self, e: Entry, what: str) -> None:
        if not 0 <= e.node < len(self.nodes):
            raise GraphError(f"{what} refers to missing node {e.node}")
        if not 0 <= e.index < self.nodes[e.node].num_outputs:
            raise GraphError(
                f"{what} refers to output {e.index} of {self.nodes[e.node].name!r}, "
                f"which has {self.nodes[e.node].num_outputs}"
            )

    def predecessors(self) -> List[List[int]]:
        """Distinct producer node ids of every node, sorted. O(V + E)."""
        return [sorted({e.node for e in n.inputs}) for n in self.nodes]

    def successors(self) -> List[List[int]]:
        """Distinct consumer node ids of every node, sorted. O(V + E)."""
        succ: List[set] = [set() for _ in self.nodes]
        for n in self.nodes:
            for e in n.inputs:
                succ[e.node].add(n.id)
        return [sorted(s) for s in succ]

    def consumers(self) -> Dict[Entry, List[int]]:
        """Map each consumed entry to the ids of the nodes that consume it. O(V + E)."""
        out: Dict[Entry, List[int]] = {}
        for n in self.nodes:
            for e in n.inputs:
                lst = out.setdefault(e, [])
                if not lst or lst[-1] != n.id:
                    lst.append(n.id)
        return out

    def by_name(self, name: str) -> Node:
        """The node called ``name``. O(V).

        Raises:
            KeyError: no node has that name.
            GraphError: several nodes have it (look them up by id instead).
        """
        found = [n for n in self.nodes if n.name == name]
        if not found:
            raise KeyError(name)
        if len(found) > 1:
            raise GraphError(f"{len(found)} nodes are named {name!r} (ids {[n.id for n in found]}): look up by id")
        return found[0]

    def op_nodes(self) -> List[int]:
        return [n.id for n in self.nodes if not n.is_variable]


def build_graph(
    spec: Sequence[Tuple[str, str, Sequence[object]]],
    heads: Optional[Iterable[object]] = None,
) -> Graph:
    """Build a graph from a compact spec, for tests and benchmarks.

    Args:
        spec: ``(name, op, inputs)`` triples in topological order; an input is a
            node name (output 0) or ``(name, index)``.
        heads: Output names (or ``(name, index)``); defaults to every node that
            nobody consumes.

    Returns:
        The graph, validated. Output counts are the largest index used plus one.
    """
    ids: Dict[str, int] = {}
    nouts: Dict[str, int] = {}
    parsed: List[Tuple[str, str, List[Tuple[str, int]]]] = []

    def ref(x: object) -> Tuple[str, int]:
        if isinstance(x, tuple):
            return str(x[0]), int(x[1])
        return str(x), 0

    for name, op, inputs in spec:
        refs = [ref(x) for x in inputs]
        for r, k in refs:
            nouts[r] = max(nouts.get(r, 1), k + 1)
        parsed.append((name, op, refs))
        ids[name] = len(ids)
    head_refs = [ref(h) for h in heads] if heads is not None else None
    if head_refs:
        for r, k in head_refs:
            nouts[r] = max(nouts.get(r, 1), k + 1)
    nodes: List[Node] = []
    for name, op, refs in parsed:
        nodes.append(
            Node(
                id=ids[name],
                name=name,
                op=op,
                inputs=tuple(Entry(ids[r], k) for r, k in refs),
                num_outputs=nouts.get(name, 1),
            )
        )
    if head_refs is None:
        used = {e.node for n in nodes for e in n.inputs}
        head_list = [Entry(n.id, 0) for n in nodes if n.id not in used and not n.is_variable]
    else:
        head_list = [Entry(ids[r], k) for r, k in head_refs]
    g = Graph(nodes=nodes, heads=head_list)
    g.validate()
    return g
