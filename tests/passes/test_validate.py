"""The independent validator must be able to fail: hand-made bad partitions."""
from __future__ import annotations

import pytest

from mx_trt.passes.validate import PartitionError, check_acyclic, check_acyclic_dag, maximality_violations
from tests.passes.graphs import make


def diamond():
    #        +--> b --+
    #  a ----+        +--> d
    #        +--> X --+
    return make([("data", "null", []), ("a", "relu", ["data"]), ("b", "relu", ["a"]), ("X", "Custom", ["a"]),
                 ("d", "elemwise_add", ["b", "X"])])


def test_accepts_a_valid_partition():
    g = diamond()
    check_acyclic(g, [[1, 2], [4]])
    check_acyclic(g, [])


def test_catches_a_cycle_through_an_outside_node():
    # {a, d} around b and X: a -> X -> d leaves the subgraph and comes back.
    g = diamond()
    with pytest.raises(PartitionError, match=r"cycle: subgraph 0 \['a' \(#1\), 'd' \(#4\)\] -> '(b|X)' \(#[23]\)"):
        check_acyclic(g, [[1, 4]])
    with pytest.raises(PartitionError, match=r"cycle: subgraph 0 .* -> subgraph 1 \['b' \(#2\)\] -> subgraph 0"):
        check_acyclic(g, [[1, 4], [2]])


def test_catches_a_cycle_between_two_subgraphs():
    #  u -> w -> v with u, v in S and w in T (plain form)
    preds = [[], [0], [1]]
    with pytest.raises(PartitionError, match="subgraph 0 .* -> subgraph 1 .* -> subgraph 0"):
        check_acyclic_dag(preds, [[0, 2], [1]])


def test_catches_a_long_cycle():
    #  0 -> 1 -> 2 -> 3 -> 4 -> 5 with groups {0, 5}, {1, 4}: 0 -> 1 .. 4 -> 5 goes out and back.
    preds = [[], [0], [1], [2], [3], [4]]
    with pytest.raises(PartitionError, match="cycle"):
        check_acyclic_dag(preds, [[0, 5], [1, 4]])
    check_acyclic_dag(preds, [[0, 1], [2, 3], [4, 5]])


def test_catches_overlaps_variables_and_bad_ids():
    g = diamond()
    with pytest.raises(PartitionError, match="two subgraphs"):
        check_acyclic(g, [[1, 2], [2]])
    with pytest.raises(PartitionError, match="variable 'data'"):
        check_acyclic(g, [[0, 1]])
    with pytest.raises(PartitionError, match="outside"):
        check_acyclic(g, [[1, 9]])
    with pytest.raises(PartitionError, match="empty"):
        check_acyclic(g, [[]])
    with pytest.raises(PartitionError, match="twice"):
        check_acyclic_dag([[], [0]], [[1, 1]])
    with pytest.raises(PartitionError, match="topological"):
        check_acyclic_dag([[], [1]], [])


def test_maximality_reports_missed_merges():
    #  a -> b -> c   all supported
    preds = [[], [0], [1]]
    sup = [True, True, True]
    assert maximality_violations(preds, sup, [[0, 1, 2]], 2) == []
    assert maximality_violations(preds, sup, [[0, 1], [2]], 1) == ["subgraphs 0 and 1 share an edge and can merge"]
    assert maximality_violations(preds, sup, [[0, 1]], 2) == ["compatible node 2 can join subgraph 0"]
    assert maximality_violations(preds, sup, [], 2) == [
        "compatible node 0 and node 1 can form a subgraph of 2",
        "compatible node 1 and node 2 can form a subgraph of 2",
    ]
    assert "outside every subgraph" in maximality_violations(preds, sup, [[0, 1]], 1)[0]


def test_maximality_accepts_blocked_merges_and_reports_invalid_groups():
    #  a -> X -> b, a -> b: a and b cannot merge
    preds = [[], [0], [0, 1]]
    sup = [True, False, True]
    assert maximality_violations(preds, sup, [[0], [2]], 1) == []
    assert maximality_violations(preds, sup, [[0, 1, 2]], 1) == ["subgraph 0 holds unsupported node 1"]
    assert maximality_violations(preds, sup, [[0], [2]], 2) == [
        "subgraph 0 has 1 nodes, below min_size=2",
        "subgraph 1 has 1 nodes, below min_size=2",
    ]
    assert maximality_violations(preds, sup, [[0, 2]], 1)[0].startswith("invalid partition: contracting")


def test_maximality_on_a_graph_ignores_variables():
    g = diamond()
    sup = [True, True, True, False, True]  # the variable's flag is ignored
    assert maximality_violations(g, sup, [[1, 2], [4]], 1) == []
    assert maximality_violations(g, sup, [[1, 2]], 2) == []  # d alone: min_size 2 forbids {d}
    assert maximality_violations(g, sup, [[1]], 1) == [
        "compatible 'b' is outside every subgraph although min_size=1",
        "compatible 'b' can join subgraph 0",
        "compatible 'd' is outside every subgraph although min_size=1",
    ]
