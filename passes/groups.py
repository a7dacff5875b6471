"""Incompatibility groups: the design's bitsets and the growth of subgraphs.

The design runs one BFS and one reverse BFS per incompatible node ``x``: a
subgraph holding an ancestor of ``x`` must not hold a descendant of ``x``.
Here the K incompatible nodes are numbered and each node ``v`` gets two Python
integers used as bitsets, ``A[v]`` (incompatible nodes ``v`` reaches) and
``D[v]`` (incompatible nodes reaching ``v``), filled by one backward and one
forward sweep (:func:`reach_bitsets`). :func:`grow` then grows subgraphs one at
a time from the smallest unused compatible node, in DFS order over inputs then
outputs; a candidate ``w`` passes the design's test iff
``A[w] & OR(D over the subgraph) == 0`` and ``D[w] & OR(A over the subgraph) == 0``,
and, given a :class:`~mx_trt.passes.contraction.ContractedDag`, the exact check too.

Graphs here are plain DAGs: ``preds[i]`` lists the predecessors of node ``i``,
all smaller than ``i``.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from .contraction import ContractedDag
from .validate import PartitionError

__all__ = ["grow", "normalise", "push_neighbours", "reach_bitsets", "successors"]


def normalise(preds: Sequence[Sequence[int]], supported: Sequence[bool]) -> List[List[int]]:
    """Deduplicate and sort predecessor lists; check topological order. O(V + E log E)."""
    if len(preds) != len(supported):
        raise PartitionError(f"preds has {len(preds)} nodes but supported has {len(supported)}")
    out: List[List[int]] = []
    for v, ps in enumerate(preds):
        clean = sorted(set(ps))
        if clean and (clean[0] < 0 or clean[-1] >= v):
            raise PartitionError(f"node {v} has predecessors {clean}: not in topological order")
        out.append(clean)
    return out


def successors(preds: Sequence[Sequence[int]]) -> List[List[int]]:
    """Sorted successor lists of a DAG given sorted predecessor lists. O(V + E)."""
    succs: List[List[int]] = [[] for _ in preds]
    for v, ps in enumerate(preds):
        for p in ps:
            succs[p].append(v)  # v increases, so each list comes out sorted
    return succs


def reach_bitsets(
    preds: Sequence[Sequence[int]], succs: Sequence[Sequence[int]], supported: Sequence[bool]
) -> Tuple[List[int], List[int]]:
    """Compute ``A`` (returned first) and ``D`` for every node.

    Bit ``i`` stands for the ``i``-th incompatible node in topological order.
    ``A[v]`` has it set iff ``v`` reaches that node, ``D[v]`` iff that node
    reaches ``v``. For an incompatible node the sets also hold the node itself
    (what it passes on along the sweep); no test reads those.

    Complexity: O((V + E) * K / w) time, O(V * K / w) memory (w = bits per digit).
    """
    n = len(preds)
    bit = [0] * n
    k = 0
    for v in range(n):
        if not supported[v]:
            bit[v] = 1 << k
            k += 1
    down = [0] * n
    for v in range(n):
        d = bit[v]
        for p in preds[v]:
            d |= down[p]
        down[v] = d
    up = [0] * n
    for v in range(n - 1, -1, -1):
        a = bit[v]
        for s in succs[v]:
            a |= up[s]
        up[v] = a
    return up, down


def push_neighbours(stack: List[int], v: int, preds: Sequence[Sequence[int]], succs: Sequence[Sequence[int]],
                     supported: Sequence[bool], used: Sequence[bool]) -> None:
    """Queue ``v``'s unused compatible neighbours for the growth's DFS.

    Inputs are pushed last so that they are popped first (the design's priority to
    inputs); an input is pushed as ``~p`` so the caller knows the edge direction.
    """
    for s in reversed(succs[v]):
        if supported[s] and not used[s]:
            stack.append(s)
    for p in reversed(preds[v]):
        if supported[p] and not used[p]:
            stack.append(~p)


def grow(
    preds: Sequence[Sequence[int]],
    succs: Sequence[Sequence[int]],
    supported: Sequence[bool],
    up: Sequence[int],
    down: Sequence[int],
    dag: Optional[ContractedDag],
) -> List[List[int]]:
    """Grow subgraphs one at a time, the design's way; ``dag`` adds the exact check.

    Seeds are the unused compatible nodes in id order; candidates are popped
    from a DFS stack where a joining node pushes its outputs, then its inputs
    (so inputs are visited first, smallest id first). A candidate rejected now
    may be pushed again by a later member. Every compatible node ends in
    exactly one group (a seed that cannot grow is a group of one).

    Complexity: O(E) candidate tests of O(K / w) each, plus the exact checks.
    """
    n = len(preds)
    used = [False] * n
    groups: List[List[int]] = []
    stack: List[int] = []  # v for an output of the subgraph, ~v for an input

    def push(v: int) -> None:
        push_neighbours(stack, v, preds, succs, supported, used)

    for seed in range(n):
        if used[seed] or not supported[seed]:
            continue
        used[seed] = True
        members = [seed]
        s_up, s_down = up[seed], down[seed]
        root = seed
        push(seed)
        while stack:
            item = stack.pop()
            w = item if item >= 0 else ~item
            if used[w]:
                continue
            if up[w] & s_down or down[w] & s_up:
                continue  # the design's test: w is on the other side of an incompatible node
            if dag is not None:
                r = dag.try_contract(w, root) if item < 0 else dag.try_contract(root, w)
                if r < 0:
                    continue
                root = r
            used[w] = True
            members.append(w)
            s_up |= up[w]
            s_down |= down[w]
            push(w)
        members.sort()
        groups.append(members)
    return groups
