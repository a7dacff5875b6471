"""Helpers shared by the partitioning tests: tiny graphs by name and random DAGs."""
from __future__ import annotations

import random
from typing import Dict, List, Optional, Sequence, Set, Tuple

from mx_trt.passes.ir import Graph, build_graph
from mx_trt.passes.partition import PartitionResult, partition

#: The op name that marks a node as unsupported in the hand-written graphs.
UNSUPPORTED_OP = "Custom"


def make(spec: Sequence[Tuple[str, str, Sequence[object]]], heads: Optional[Sequence[object]] = None) -> Graph:
    """``build_graph`` with ``"null"`` variables and ``Custom`` (unsupported) ops allowed in the spec."""
    return build_graph(spec, heads)


def unsupported_of(graph: Graph) -> Dict[int, str]:
    return {n.id: f"{n.op} has no converter" for n in graph.nodes if n.op == UNSUPPORTED_OP}


def run(graph: Graph, min_size: int = 1) -> PartitionResult:
    return partition(graph, unsupported_of(graph), min_size)


def by_name(graph: Graph, result: PartitionResult) -> List[Set[str]]:
    """The subgraphs as sets of node names, in subgraph id order."""
    return [{graph.nodes[v].name for v in s.nodes} for s in result.subgraphs]


def native_names(graph: Graph, result: PartitionResult) -> Set[str]:
    return {graph.nodes[v].name for v in result.native}


def random_dag(
    rng: random.Random,
    n: int,
    max_fan_in: int,
    window: Optional[int],
    p_unsupported: float,
) -> Tuple[List[List[int]], List[bool]]:
    """A random DAG in topological order and a random support mask.

    Each node draws 0..max_fan_in predecessors, from the ``window`` previous
    nodes (local, layered-like structure) or from all previous nodes when
    ``window`` is None (long edges, high fan-out).
    """
    preds: List[List[int]] = []
    for i in range(n):
        k = rng.randint(0, min(i, max_fan_in))
        lo = 0 if window is None else max(0, i - window)
        pool = range(lo, i)
        preds.append(sorted(rng.sample(pool, min(k, len(pool)))))
    supported = [rng.random() >= p_unsupported for _ in range(n)]
    return preds, supported
