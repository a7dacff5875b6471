"""Hand-written graphs with their expected partitions, by node name.

Conventions in the diagrams: ``X``, ``Y``, ``Z`` are unsupported (op
``Custom``), every other operator is supported, lowercase ``w*``/``data`` are
variables. Arrows point from producer to consumer.
"""
from __future__ import annotations

import os
import subprocess
import sys
from typing import List

import pytest

from mx_trt.passes.ir import Graph
from mx_trt.passes.partition import (
    DEFAULT_MIN_SUBGRAPH_SIZE,
    MIN_SUBGRAPH_SIZE_ENV,
    Subgraph,
    partition,
    partition_dag,
)
from mx_trt.passes.validate import PartitionError, check_acyclic, check_acyclic_dag, maximality_violations
from tests.passes.graphs import by_name, make, native_names, run, unsupported_of

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def plain(graph: Graph):
    """The operator-only plain form, and the op names in that order."""
    ops = graph.op_nodes()
    index = {v: i for i, v in enumerate(ops)}
    preds = [sorted({index[e.node] for e in graph.nodes[v].inputs if e.node in index}) for v in ops]
    unsupported = unsupported_of(graph)
    return preds, [v not in unsupported for v in ops], [graph.nodes[v].name for v in ops]


def named(groups: List[List[int]], names: List[str]):
    return [{names[i] for i in g} for g in groups]


def assert_sound(graph: Graph, result, min_size: int) -> None:
    """The partition is acyclic, maximal, and accounts for every operator once."""
    check_acyclic(graph, [s.nodes for s in result.subgraphs])
    unsupported = unsupported_of(graph)
    supported = [not n.is_variable and n.id not in unsupported for n in graph.nodes]
    assert maximality_violations(graph, supported, [s.nodes for s in result.subgraphs], min_size) == []
    in_sub = [v for s in result.subgraphs for v in s.nodes]
    assert sorted(in_sub + list(result.native)) == graph.op_nodes()


# ---------------------------------------------------------------------------


def test_chain_is_one_subgraph():
    #  data -> conv -> bn -> relu -> fc
    #          w1 -^         w2 ------^
    g = make([
        ("data", "null", []), ("w1", "null", []), ("w2", "null", []),
        ("conv", "Convolution", ["data", "w1"]), ("bn", "BatchNorm", ["conv"]),
        ("relu", "Activation", ["bn"]), ("fc", "FullyConnected", ["relu", "w2"]),
    ])
    r = run(g, min_size=2)
    assert by_name(g, r) == [{"conv", "bn", "relu", "fc"}]
    assert r.native == {}
    assert r.subgraphs[0] == Subgraph(id=0, name="trt_subgraph_0", nodes=(3, 4, 5, 6))
    assert r.node_to_subgraph() == {3: 0, 4: 0, 5: 0, 6: 0}
    assert_sound(g, r, 2)


def test_chain_cut_by_an_unsupported_op():
    #  data -> conv -> relu -> X -> fc -> softmax
    g = make([
        ("data", "null", []), ("conv", "Convolution", ["data"]), ("relu", "Activation", ["conv"]),
        ("X", "Custom", ["relu"]), ("fc", "FullyConnected", ["X"]), ("softmax", "softmax", ["fc"]),
    ])
    r = run(g, min_size=2)
    assert by_name(g, r) == [{"conv", "relu"}, {"fc", "softmax"}]
    assert native_names(g, r) == {"X"}
    assert r.native[3] == "Custom has no converter"
    assert_sound(g, r, 2)


def test_diamond_through_an_unsupported_op_separates_its_ends():
    #        +--> b --+
    #  a ----+        +--> d --> e
    #        +--> X --+
    # a and d cannot share a subgraph: the edge X -> d would leave it and come back.
    g = make([
        ("a", "relu", []), ("b", "relu", ["a"]), ("X", "Custom", ["a"]),
        ("d", "elemwise_add", ["b", "X"]), ("e", "relu", ["d"]),
    ])
    r = run(g, min_size=1)
    assert by_name(g, r) == [{"a", "b"}, {"d", "e"}]
    assert native_names(g, r) == {"X"}
    assert_sound(g, r, 1)


def test_unsupported_op_feeding_several_consumers():
    #  a --> X --+--> b --+
    #  |         +--> c --+--> e
    #  |         +--> d --+    ^
    #  +-----------------------+
    # b, c, d, e all sit below X; a sits above it, so a stays alone even though a -> e.
    g = make([
        ("a", "relu", []), ("X", "Custom", ["a"]),
        ("b", "relu", ["X"]), ("c", "tanh", ["X"]), ("d", "sigmoid", ["X"]),
        ("e", "add_n", ["b", "c", "d", "a"]),
    ])
    r = run(g, min_size=1)
    assert by_name(g, r) == [{"a"}, {"b", "c", "d", "e"}]
    r2 = run(g, min_size=2)
    assert by_name(g, r2) == [{"b", "c", "d", "e"}]
    assert r2.native[0] == f"in a compatible group of 1 op, below {MIN_SUBGRAPH_SIZE_ENV}=2"
    assert r2.native[1] == "Custom has no converter"
    assert_sound(g, r, 1)
    assert_sound(g, r2, 2)


def test_several_graph_outputs():
    #  data -> a --> b                  (head 0)
    #          +--> c --> X --> g       (head 1)
    #               +--> d              (head 2)
    g = make(
        [
            ("data", "null", []), ("a", "relu", ["data"]), ("b", "relu", ["a"]), ("c", "relu", ["a"]),
            ("X", "Custom", ["c"]), ("g", "relu", ["X"]), ("d", "relu", ["c"]),
        ],
        heads=["b", "g", "d"],
    )
    r = run(g, min_size=1)
    assert by_name(g, r) == [{"a", "b", "c", "d"}, {"g"}]
    assert_sound(g, r, 1)
    r2 = run(g, min_size=2)
    assert by_name(g, r2) == [{"a", "b", "c", "d"}]
    assert native_names(g, r2) == {"X", "g"}


def test_subgraph_output_that_is_also_a_graph_output():
    #  data -> a -> b -> c      heads: b and c
    g = make([("data", "null", []), ("a", "relu", ["data"]), ("b", "relu", ["a"]), ("c", "relu", ["b"])],
             heads=["b", "c"])
    r = run(g, min_size=2)
    assert by_name(g, r) == [{"a", "b", "c"}]
    assert_sound(g, r, 2)


# The design's method taken literally leaves a cycle between subgraphs here
# (subgraph S holds u and v, subgraph T holds w, u -> w -> v).
#
#   a ------------> Y ---+
#   a ---+               |
#        v               v
#   b -> w ------------> v
#   u ---^               ^
#   u -------------------+
#   b -> c <- X <- u
#
# Seeds go in id order: T grows from a and takes w, then b (w's smallest
# input, inputs first), then c; u is refused (u -> X -> c), v is refused
# (a -> Y -> v). The next seed, u, takes v. With u, v in S and w in T,
# u -> w -> v is a cycle S -> T -> S once both are fused.
CROSS_CYCLE = [
    ("a", "relu", []), ("b", "relu", []), ("u", "relu", []),
    ("X", "Custom", ["u"]), ("Y", "Custom", ["a"]),
    ("w", "add_n", ["a", "b", "u"]), ("c", "elemwise_add", ["b", "X"]),
    ("v", "add_n", ["u", "w", "Y"]),
]


def test_literal_method_leaves_the_cross_subgraph_cycle():
    g = make(CROSS_CYCLE)
    preds, supported, names = plain(g)
    literal = partition_dag(preds, supported, 1, exact=False)
    assert named(literal, names) == [{"a", "b", "w", "c"}, {"u", "v"}]
    with pytest.raises(PartitionError, match="cycle"):
        check_acyclic_dag(preds, literal)


def test_exact_check_repairs_the_cross_subgraph_cycle():
    g = make(CROSS_CYCLE)
    r = run(g, min_size=1)
    assert by_name(g, r) == [{"a", "b", "w", "c"}, {"u"}, {"v"}]
    assert_sound(g, r, 1)
    r2 = run(g, min_size=2)
    assert by_name(g, r2) == [{"a", "b", "w", "c"}]
    assert native_names(g, r2) == {"u", "v", "X", "Y"}
    assert_sound(g, r2, 2)


def test_path_entering_and_leaving_a_subgraph_at_different_nodes():
    #   a -> b -> Y -> e
    #        b ------> e
    #   c -----------> e
    #   a -----------> d
    #   c -> X ------> d
    #   c -----------> d
    # Literally: S = {a, b, d}, T = {c, e}. S -> T (b -> e) and T -> S (c -> d)
    # make a cycle although no path leads from e to c: the path enters T at e
    # and leaves it at c. Ids: a=0 b=1 c=2 X=3 Y=4 d=5 e=6.
    preds = [[], [0], [], [2], [1], [0, 2, 3], [1, 2, 4]]
    supported = [True, True, True, False, False, True, True]
    literal = partition_dag(preds, supported, 1, exact=False)
    assert literal == [[0, 1, 5], [2, 6]]
    with pytest.raises(PartitionError):
        check_acyclic_dag(preds, literal)
    exact = partition_dag(preds, supported, 1)
    assert exact == [[0, 1, 5], [2], [6]]
    check_acyclic_dag(preds, exact)
    assert maximality_violations(preds, supported, exact, 1) == []


def test_min_size_drop_then_reabsorption():
    #   s0 -> s1 -> s2 -> X -> d1
    #               s2 ------> d1 <- d2
    #               s2 ------> y  <- d2
    #                          y  <- Z <- d2
    # D = {d2, d1} forms first (d2 has the smallest id). The subgraph S of s0,
    # s1, s2 may not take y then: S -> d1 (in D) and d2 (in D) -> y is a path
    # around the edge s2 -> y. With min_size=3 both D and {y} are dropped; once
    # D is split back into d2 and d1 that path is gone and y joins S.
    g = make([
        ("d2", "relu", []), ("s0", "relu", []), ("s1", "relu", ["s0"]), ("s2", "relu", ["s1"]),
        ("X", "Custom", ["s2"]), ("d1", "add_n", ["d2", "s2", "X"]), ("Z", "Custom", ["d2"]),
        ("y", "add_n", ["d2", "s2", "Z"]),
    ])
    r2 = run(g, min_size=2)
    assert by_name(g, r2) == [{"d2", "d1"}, {"s0", "s1", "s2"}]
    assert native_names(g, r2) == {"X", "Z", "y"}
    r3 = run(g, min_size=3)
    assert by_name(g, r3) == [{"s0", "s1", "s2", "y"}]
    reasons = {g.nodes[v].name: why for v, why in r3.native.items()}
    assert reasons["d2"] == f"in a compatible group of 2 ops, below {MIN_SUBGRAPH_SIZE_ENV}=3"
    assert reasons["d1"] == reasons["d2"]
    assert reasons["X"] == "Custom has no converter"
    assert_sound(g, r2, 2)
    assert_sound(g, r3, 3)


def test_default_min_size_drops_single_ops():
    #  a -> X -> b -> Y -> c -> d
    g = make([("a", "relu", []), ("X", "Custom", ["a"]), ("b", "relu", ["X"]), ("Y", "Custom", ["b"]),
              ("c", "relu", ["Y"]), ("d", "relu", ["c"])])
    r = partition(g, unsupported_of(g))
    assert DEFAULT_MIN_SUBGRAPH_SIZE == 2
    assert by_name(g, r) == [{"c", "d"}]
    assert native_names(g, r) == {"a", "X", "b", "Y"}


def test_all_unsupported_and_empty_graphs():
    g = make([("data", "null", []), ("X", "Custom", ["data"]), ("Y", "Custom", ["X"])])
    r = run(g)
    assert r.subgraphs == [] and set(r.native) == {1, 2}
    empty = make([("data", "null", [])], heads=["data"])
    r = run(empty)
    assert r.subgraphs == [] and r.native == {}
    assert partition_dag([], [], 1) == []


def test_variables_never_join_and_impose_no_constraint():
    #   data -> a -> X -> b -> c
    #   w ------^         ^    ^
    #   w ----------------+    |
    #   w ---------------------+
    # a and b sit on both sides of X and never share a subgraph; the weight w
    # feeds both, but a variable is a source: no path goes through it.
    g = make([("data", "null", []), ("w", "null", []), ("a", "FullyConnected", ["data", "w"]),
              ("X", "Custom", ["a"]), ("b", "FullyConnected", ["X", "w"]), ("c", "relu", ["b", "w"])])
    r = run(g, min_size=1)
    assert by_name(g, r) == [{"a"}, {"b", "c"}]
    assert all(not g.nodes[v].is_variable for s in r.subgraphs for v in s.nodes)


def test_bad_arguments():
    g = make([("data", "null", []), ("a", "relu", ["data"])])
    with pytest.raises(PartitionError, match="variable"):
        partition(g, {0: "no"})
    with pytest.raises(PartitionError, match="outside"):
        partition(g, {7: "no"})
    with pytest.raises(PartitionError, match="min_size"):
        partition(g, {}, min_size=0)
    with pytest.raises(PartitionError, match="topological"):
        partition_dag([[], [1]], [True, True], 1)
    with pytest.raises(PartitionError, match="supported"):
        partition_dag([[]], [True, False], 1)


def test_deterministic_across_runs_and_hash_seeds():
    g = make(CROSS_CYCLE)
    first = run(g)
    assert run(g) == first
    code = (
        "from tests.passes.test_partition import CROSS_CYCLE\n"
        "from tests.passes.graphs import make, run\n"
        "from tests.passes.graphs import random_dag\n"
        "from mx_trt.passes.partition import partition_dag\n"
        "import random\n"
        "r = run(make(CROSS_CYCLE))\n"
        "print([(s.name, s.nodes) for s in r.subgraphs], sorted(r.native.items()))\n"
        "p, s = random_dag(random.Random(5), 300, 3, 20, 0.1)\n"
        "print(partition_dag(p, s, 2))\n"
    )
    outputs = set()
    for hash_seed in ("0", "1", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=hash_seed)
        out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                             check=True)
        outputs.add(out.stdout)
    assert len(outputs) == 1
