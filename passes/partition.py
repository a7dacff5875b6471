"""Split a graph into maximal TensorRT-compatible subgraphs.

The method is the one of the integration's design ("Subgraph partitioning"),
made exact and efficient:

1. **Incompatibility groups with bitsets.** The design runs one BFS and one
   reverse BFS per incompatible node ``x``: a subgraph holding an ancestor of
   ``x`` must not hold a descendant of ``x``. Here the K incompatible nodes are
   numbered and each node ``v`` gets two Python integers used as bitsets:
   ``A[v]`` (incompatible nodes ``v`` reaches) and ``D[v]`` (incompatible nodes
   reaching ``v``), filled by one backward and one forward sweep in
   O((V + E) * K / w) instead of K graph traversals.
2. **Growth.** Subgraphs are grown one at a time from the smallest unused
   compatible node, in DFS order over inputs then outputs. A candidate ``w``
   passes the design's test iff ``A[w] & OR(D over the subgraph) == 0`` and
   ``D[w] & OR(A over the subgraph) == 0``.
3. **Exact check.** Taken literally, that test can leave a cycle *between*
   subgraphs (subgraph S holds ``u`` and ``v``, subgraph T holds ``w``, and
   ``u -> w -> v``), because a path may enter a formed subgraph at one node and
   leave it at another. So every join must also pass an exact test in the
   graph where every formed subgraph is contracted to one node:
   contracting the edge ``a -> b`` is legal iff ``b`` is not reachable from
   ``a`` by another path. :class:`_ContractedDag` maintains that contracted
   DAG with union-find, adjacency sets and a topological order kept by an
   order-maintenance list, so the test is a bidirectional search pruned by the
   order (Pearce-Kelly style), stopped as soon as either side is exhausted.
4. **Maximality.** Adjacent groups are merged while legal, groups below the
   minimum size are dropped, and their nodes may then join adjacent surviving
   subgraphs (to a fixpoint). The result satisfies: no compatible node outside
   all subgraphs can join a subgraph it shares an edge with, and no two
   subgraphs sharing an edge can merge, without a cycle or a size violation.

Everything is deterministic: nodes are visited in id order, ties are broken
by ids, and no decision depends on the iteration order of a hash container.
Variables (``op == "null"``) are sources, so no path passes through them; they
are dropped before the core runs and never belong to a subgraph.
"""
from __future__ import annotations

import heapq
import logging
import math
from collections import deque
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Set, Tuple

from passes.ir import Graph
from passes.validate import PartitionError, gc_paused

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


# ---------------------------------------------------------------------------
# Input normalisation and the incompatibility bitsets
# ---------------------------------------------------------------------------


def _normalise(preds: Sequence[Sequence[int]], supported: Sequence[bool]) -> List[List[int]]:
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


def _successors(preds: Sequence[Sequence[int]]) -> List[List[int]]:
    """Sorted successor lists of a DAG given sorted predecessor lists. O(V + E)."""
    succs: List[List[int]] = [[] for _ in preds]
    for v, ps in enumerate(preds):
        for p in ps:
            succs[p].append(v)  # v increases, so each list comes out sorted
    return succs


def _reach_bitsets(
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


# ---------------------------------------------------------------------------
# Order maintenance: a linked list whose integer labels increase along it
# ---------------------------------------------------------------------------


class _OrderList:
    """A doubly linked list of node ids with labels that increase along the list.

    It keeps the contracted DAG's topological order: comparing two nodes is
    comparing two integers, and moving a node is an unlink plus an insertion.
    Insertion after any node is amortised O(log n): when no label is free, the
    smallest aligned range of ``2**i`` labels around the insertion point whose
    density is at most ``(2/3)**i`` is relabelled evenly (the list-labelling
    scheme of Bender et al., 2002, with T = 1.5). Labels are Python integers
    and the universe, about ``n**2.4``, is sized to the list.
    """

    def __init__(self, order: Sequence[int], capacity: int) -> None:
        self.head = capacity
        self.tail = capacity + 1
        size = capacity + 2
        self.prev = [-1] * size
        self.next = [-1] * size
        self.label = [0] * size
        # Density threshold (4/3)**i at i = bits must exceed the list length.
        self.bits = max(16, int(math.ceil(math.log(capacity + 2) / math.log(4.0 / 3.0))) + 2)
        self.limit = [int((4.0 / 3.0) ** i) for i in range(self.bits + 1)]
        self.label[self.head] = -1
        self.label[self.tail] = 1 << self.bits
        step = (1 << self.bits) // (len(order) + 1)
        last = self.head
        for i, v in enumerate(order):
            self.label[v] = step * (i + 1)
            self.next[last] = v
            self.prev[v] = last
            last = v
        self.next[last] = self.tail
        self.prev[self.tail] = last

    def unlink(self, v: int) -> None:
        p, q = self.prev[v], self.next[v]
        self.next[p] = q
        self.prev[q] = p

    def replace(self, old: int, new: int) -> None:
        """Put the unlinked ``new`` where ``old`` is, with its label; unlink ``old``."""
        p, q = self.prev[old], self.next[old]
        self.next[p] = new
        self.prev[new] = p
        self.next[new] = q
        self.prev[q] = new
        self.label[new] = self.label[old]

    def insert_after(self, x: int, y: int) -> None:
        """Link the unlinked ``y`` right after ``x`` and give it a label."""
        label = self.label
        q = self.next[x]
        self.next[x] = y
        self.prev[y] = x
        self.next[y] = q
        self.prev[q] = y
        lo, hi = label[x], label[q]
        if hi - lo >= 2:
            label[y] = (lo + hi) // 2
            return
        self._relabel_around(y, lo if x != self.head else hi)

    def _relabel_around(self, y: int, ref: int) -> None:
        label, prev, nxt = self.label, self.prev, self.next
        head, tail = self.head, self.tail
        left = right = y
        count = 1
        for i in range(1, self.bits + 1):
            base = (ref >> i) << i
            end = base + (1 << i)
            while prev[left] != head and label[prev[left]] >= base:
                left = prev[left]
                count += 1
            while nxt[right] != tail and label[nxt[right]] < end:
                right = nxt[right]
                count += 1
            if count <= self.limit[i]:
                gap = (1 << i) // count
                v = left
                lab = base
                while True:
                    label[v] = lab
                    if v == right:
                        return
                    lab += gap
                    v = nxt[v]
        raise AssertionError("order list universe exhausted")  # unreachable: limit[bits] > capacity


# ---------------------------------------------------------------------------
# The contracted DAG
# ---------------------------------------------------------------------------


class _ContractedDag:
    """The DAG obtained by contracting groups of nodes, with legal edge contraction.

    Groups are union-find classes identified by their root. ``out``/``inn``
    hold the adjacency sets of roots (always canonical: merging rewrites the
    neighbours of the absorbed root, small into large). ``order`` keeps a
    topological order of the roots. ``gA``/``gD`` are the ORs of the
    incompatibility bitsets over each group (a free necessary test).
    """

    def __init__(
        self,
        preds: Sequence[Sequence[int]],
        up: Sequence[int],
        down: Sequence[int],
        root_of: Optional[Sequence[int]] = None,
    ) -> None:
        """Build from the node DAG and an optional grouping. O(V + E log V).

        Args:
            preds: Sorted predecessor lists of the node DAG.
            up, down: The ``A``/``D`` bitsets of every node.
            root_of: ``root_of[v]`` is the representative of ``v``'s group (a
                member; groups must contract to a DAG). Identity if omitted.
        """
        n = len(preds)
        self.size = [1] * n
        self.version = [0] * n
        if root_of is None:
            self.parent = list(range(n))
            self.inn: List[Set[int]] = [set(ps) for ps in preds]
            self.out: List[Set[int]] = [set() for _ in range(n)]
            for v, ps in enumerate(preds):
                for p in ps:
                    self.out[p].add(v)
            self.gA = list(up)
            self.gD = list(down)
            self.order = _OrderList(range(n), n)
            return
        self.parent = list(root_of)
        self.inn = [set() for _ in range(n)]
        self.out = [set() for _ in range(n)]
        self.gA = [0] * n
        self.gD = [0] * n
        for v in range(n):
            r = root_of[v]
            if r != v:
                self.size[r] += 1
                self.size[v] = 0
            self.gA[r] |= up[v]
            self.gD[r] |= down[v]
            for p in preds[v]:
                rp = root_of[p]
                if rp != r:
                    self.out[rp].add(r)
                    self.inn[r].add(rp)
        roots = [v for v in range(n) if root_of[v] == v]
        self.order = _OrderList(self._topological(roots), n)

    def _topological(self, roots: List[int]) -> List[int]:
        """Kahn's order of the roots, smallest id first among the ready ones. O((V + E) log V)."""
        indeg = {r: len(self.inn[r]) for r in roots}
        ready = [r for r in roots if indeg[r] == 0]
        heapq.heapify(ready)
        order: List[int] = []
        while ready:
            r = heapq.heappop(ready)
            order.append(r)
            for s in self.out[r]:
                indeg[s] -= 1
                if indeg[s] == 0:
                    heapq.heappush(ready, s)
        if len(order) != len(roots):
            raise PartitionError("internal error: the grouping handed to the contracted DAG has a cycle")
        return order

    def find(self, v: int) -> int:
        parent = self.parent
        r = v
        while parent[r] != r:
            r = parent[r]
        while parent[v] != r:
            parent[v], v = r, parent[v]
        return r

    def try_contract(self, a: int, b: int) -> int:
        """Contract the edge ``a -> b`` between two roots if that keeps the graph acyclic.

        Legal iff no other path leads from ``a`` to ``b``. The search runs
        forward from ``a`` (labels below ``b``'s) and backward from ``b``
        (labels above ``a``'s) one edge at a time, alternately, and stops when
        the two meet (illegal) or either side is exhausted (legal). The
        exhausted side (F or B) is then exactly the region to move in the
        order: B goes right before the merged node, which takes ``a``'s
        place, or F right after it, which takes ``b``'s place.

        Returns:
            The root of the merged group, or -1 when the contraction would make a cycle.

        Complexity: O(min(|F|, |B|) + their edges) for the search, then
        O(sum of the two degrees, small into large) for the merge and
        O(moved * log V) amortised for the order.
        """
        if self.gA[a] & self.gD[b]:
            return -1  # an incompatible node lies on a path a -> x -> b
        label = self.order.label
        out, inn = self.out, self.inn
        la, lb = label[a], label[b]
        fseen = {a}
        bseen = {b}
        fstack = [(a, iter(out[a]))]
        bstack = [(b, iter(inn[b]))]
        forward_done = False
        while True:
            u, it = fstack[-1]
            v = next(it, -1)
            if v < 0:
                fstack.pop()
                if not fstack:
                    forward_done = True
                    break
            elif v in bseen:
                if u != a or v != b:
                    return -1
            elif v not in fseen and label[v] < lb:
                fseen.add(v)
                fstack.append((v, iter(out[v])))
            u, it = bstack[-1]
            p = next(it, -1)
            if p < 0:
                bstack.pop()
                if not bstack:
                    break
            elif p in fseen:
                if u != b or p != a:
                    return -1
            elif p not in bseen and label[p] > la:
                bseen.add(p)
                bstack.append((p, iter(inn[p])))
        if forward_done:
            fseen.discard(a)
            moved = sorted(fseen, key=label.__getitem__)
            slot = b
        else:
            bseen.discard(b)
            moved = sorted(bseen, key=label.__getitem__)
            slot = a
        r = self._merge(a, b)
        order = self.order
        if r == slot:
            order.unlink(b if slot == a else a)
        else:
            order.unlink(r)
            order.replace(slot, r)
        for v in moved:
            order.unlink(v)
        anchor = order.prev[r] if slot == a else r
        for v in moved:
            order.insert_after(anchor, v)
            anchor = v
        return r

    def _merge(self, a: int, b: int) -> int:
        """Union the groups of the edge ``a -> b``; rewrite adjacency small into large."""
        out, inn = self.out, self.inn
        out[a].discard(b)
        inn[b].discard(a)
        if len(out[a]) + len(inn[a]) >= len(out[b]) + len(inn[b]):
            r, o = a, b
        else:
            r, o = b, a
        o_out, o_in = out[o], inn[o]
        for s in o_out:
            ins = inn[s]
            ins.discard(o)
            ins.add(r)
        for p in o_in:
            outs = out[p]
            outs.discard(o)
            outs.add(r)
        out[r] |= o_out
        inn[r] |= o_in
        out[o] = set()
        inn[o] = set()
        self.parent[o] = r
        self.size[r] += self.size[o]
        self.size[o] = 0
        self.gA[r] |= self.gA[o]
        self.gD[r] |= self.gD[o]
        self.gA[o] = self.gD[o] = 0
        self.version[r] += 1
        return r


# ---------------------------------------------------------------------------
# The phases
# ---------------------------------------------------------------------------


def _push_neighbours(stack: List[int], v: int, preds: Sequence[Sequence[int]], succs: Sequence[Sequence[int]],
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


def _grow(
    preds: Sequence[Sequence[int]],
    succs: Sequence[Sequence[int]],
    supported: Sequence[bool],
    up: Sequence[int],
    down: Sequence[int],
    dag: Optional[_ContractedDag],
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
        _push_neighbours(stack, v, preds, succs, supported, used)

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


def _merge_adjacent(
    dag: _ContractedDag,
    edges: Sequence[Tuple[int, int]],
    is_subgraph: Optional[List[bool]],
) -> int:
    """Contract every legal edge between two groups until none is left.

    With ``is_subgraph`` given, only edges touching a subgraph are tried and
    the merged group becomes a subgraph (re-absorption of dropped nodes).
    A rejected pair is retried only after one of its groups changed: a merge
    involving neither group keeps the other path that made it illegal (its
    inner groups stay distinct from both ends), so it stays illegal.

    Returns:
        The number of merges.

    Complexity: O(E) finds per pass plus the exact checks; passes repeat
    while merges happen (in practice one or two).
    """
    find = dag.find
    version = dag.version
    rejected: Dict[Tuple[int, int], Tuple[int, int]] = {}
    merges = 0
    changed = True
    while changed:
        changed = False
        for u, v in edges:
            p, q = find(u), find(v)
            if p == q:
                continue
            if is_subgraph is not None and not (is_subgraph[p] or is_subgraph[q]):
                continue
            stamp = (version[p], version[q])
            if rejected.get((p, q)) == stamp:
                continue
            r = dag.try_contract(p, q)
            if r < 0:
                rejected[(p, q)] = stamp
                continue
            merges += 1
            changed = True
            if is_subgraph is not None:
                is_subgraph[r] = True
    return merges


def _groups_of(dag: _ContractedDag, supported: Sequence[bool]) -> List[List[int]]:
    """Members of every compatible group, sorted, groups by smallest member. O(V α(V))."""
    members: Dict[int, List[int]] = {}
    for v in range(len(supported)):
        if supported[v]:
            members.setdefault(dag.find(v), []).append(v)
    return sorted(members.values(), key=lambda g: g[0])


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
    preds = _normalise(preds, supported)
    succs = _successors(preds)
    n = len(preds)
    if bitsets is None:
        k = n - sum(1 for s in supported if s)
        bitsets = not exact or n * k <= _BITSET_BUDGET_BITS
        if not bitsets:
            logger.info("%d nodes x %d incompatible: skipping the bitset pre-test (memory), exact check only", n, k)
    if bitsets or not exact:
        up, down = _reach_bitsets(preds, succs, supported)
    else:
        up = down = [0] * n
    if not exact:
        grown = _grow(preds, succs, supported, up, down, None)
        kept = [g for g in grown if len(g) >= min_size]
        dropped = {v: len(g) for g in grown if len(g) < min_size for v in g}
        return kept, dropped

    dag = _ContractedDag(preds, up, down)
    _grow(preds, succs, supported, up, down, dag)
    edges = [(p, v) for v in range(len(preds)) if supported[v] for p in preds[v] if supported[p]]
    merges = _merge_adjacent(dag, edges, None)
    groups = _groups_of(dag, supported)
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
    dag = _ContractedDag(preds, up, down, root_of)
    absorbed = _merge_adjacent(dag, edges, is_subgraph)
    final = [g for g in _groups_of(dag, supported) if is_subgraph[dag.find(g[0])]]
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
    preds = _normalise(preds, supported)
    succs = _successors(preds)
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
            _push_neighbours(stack, v, preds, succs, supported, used)

        add(seed)
        while stack:
            item = stack.pop()
            w = item if item >= 0 else ~item
            if not used[w] and w not in excluded:
                add(w)
        groups.append(sorted(members))
    return [g for g in groups if len(g) >= min_size]
