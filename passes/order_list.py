"""Order maintenance: a linked list of node ids whose integer labels increase along it.

The partitioner keeps the contracted DAG's topological order in an
:class:`OrderList` (see :mod:`mx_trt.passes.contraction`): comparing two nodes is
comparing two labels, and moving a node is an unlink plus an insertion.
Pure Python, no imports from the rest of the project.
"""
from __future__ import annotations

import math
from typing import Sequence

__all__ = ["OrderList"]


class OrderList:
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
