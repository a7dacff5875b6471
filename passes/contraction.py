"""The exact check and the maximality sweep: groups contracted into one DAG.

The design's bitset test (see :mod:`mx_trt.passes.groups`) can leave a cycle *between*
subgraphs, because a path may enter a formed subgraph at one node and leave
it at another. :class:`ContractedDag` keeps the graph where every group is
contracted to one node, with union-find, adjacency sets and a topological
order held by an :class:`~mx_trt.passes.order_list.OrderList`; contracting the edge
``a -> b`` is legal iff ``b`` is not reachable from ``a`` by another path, a
bidirectional search pruned by the order (Pearce-Kelly style).
:func:`merge_adjacent` contracts every legal edge between groups until none
is left (the maximality sweep) and :func:`groups_of` reads the groups back.
"""
from __future__ import annotations

import heapq
from typing import Dict, List, Optional, Sequence, Set, Tuple

from .order_list import OrderList
from .validate import PartitionError

__all__ = ["ContractedDag", "groups_of", "merge_adjacent"]


class ContractedDag:
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
            self.order = OrderList(range(n), n)
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
        self.order = OrderList(self._topological(roots), n)

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


def merge_adjacent(
    dag: ContractedDag,
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


def groups_of(dag: ContractedDag, supported: Sequence[bool]) -> List[List[int]]:
    """Members of every compatible group, sorted, groups by smallest member. O(V α(V))."""
    members: Dict[int, List[int]] = {}
    for v in range(len(supported)):
        if supported[v]:
            members.setdefault(dag.find(v), []).append(v)
    return sorted(members.values(), key=lambda g: g[0])
