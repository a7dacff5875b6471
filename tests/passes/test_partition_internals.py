"""The partitioner's machinery on its own: order maintenance and legal contraction."""
from __future__ import annotations

import random
from typing import List, Set

import pytest

from mx_trt.passes.contraction import ContractedDag as _ContractedDag
from mx_trt.passes.groups import reach_bitsets as _reach_bitsets, successors as _successors
from mx_trt.passes.order_list import OrderList as _OrderList
from tests.passes.graphs import random_dag


def labels_increase(order: _OrderList) -> List[int]:
    """Walk the list; assert labels strictly increase; return the ids in order."""
    ids = []
    v = order.next[order.head]
    last = order.label[order.head]
    while v != order.tail:
        assert order.label[v] > last
        last = order.label[v]
        ids.append(v)
        v = order.next[v]
    assert last < order.label[order.tail]
    return ids


@pytest.mark.parametrize("where", ["same spot", "front", "random"])
def test_order_list_keeps_labels_increasing_under_dense_insertions(where: str) -> None:
    n = 2000
    order = _OrderList(list(range(0, n, 2)), n)  # half the ids in the list, the rest inserted
    expected = list(range(0, n, 2))
    rng = random.Random(0)
    anchor = 0
    for v in range(1, n, 2):
        if where == "same spot":
            x = anchor  # always right after node 0: the worst case for a naive midpoint scheme
        elif where == "front":
            x = order.head
        else:
            x = rng.choice(expected)
        order.insert_after(x, v)
        pos = 0 if x == order.head else expected.index(x) + 1
        expected.insert(pos, v)
    assert labels_increase(order) == expected
    # move nodes around: unlink and reinsert
    for v in rng.sample(range(n), 300):
        order.unlink(v)
        expected.remove(v)
        x = rng.choice(expected)
        order.insert_after(x, v)
        expected.insert(expected.index(x) + 1, v)
    assert labels_increase(order) == expected


def reachable(out: List[Set[int]], a: int, b: int, skip_direct: bool) -> bool:
    stack = [s for s in out[a] if not (skip_direct and s == b)]
    seen = set(stack)
    while stack:
        u = stack.pop()
        if u == b:
            return True
        for s in out[u]:
            if s not in seen:
                seen.add(s)
                stack.append(s)
    return False


@pytest.mark.parametrize("seed", range(40))
def test_contraction_is_exact_and_keeps_a_topological_order(seed: int) -> None:
    rng = random.Random(seed)
    preds, supported = random_dag(rng, rng.randint(5, 80), rng.randint(1, 4), rng.choice([None, 5]), 0.2)
    up, down = _reach_bitsets(preds, _successors(preds), supported)
    dag = _ContractedDag(preds, up, down)
    for _ in range(200):
        ordered = sorted({dag.find(v) for v in range(len(preds))})
        # Only compatible groups are ever contracted (an unsupported node's own
        # bit would make the bitset pre-test refuse), as in the partitioner.
        edges = sorted((a, b) for a in ordered for b in dag.out[a] if supported[a] and supported[b])
        if not edges:
            break
        a, b = rng.choice(edges)
        expected_legal = not reachable(dag.out, a, b, skip_direct=True)
        r = dag.try_contract(a, b)
        assert (r >= 0) == expected_legal
        # invariants: adjacency between current roots only, labels follow every edge
        roots = {dag.find(v) for v in range(len(preds))}
        for u in roots:
            assert dag.out[u] <= roots and dag.inn[u] <= roots
            for s in dag.out[u]:
                assert u in dag.inn[s]
                assert dag.order.label[u] < dag.order.label[s]
        assert sum(dag.size[u] for u in roots) == len(preds)
        # the contracted adjacency is the quotient of the original edges
        quotient = {(dag.find(p), dag.find(v)) for v in range(len(preds)) for p in preds[v]}
        assert {(u, s) for u in roots for s in dag.out[u]} == {(x, y) for x, y in quotient if x != y}
