"""mx_trt.passes.simplify: inference-time identities leave the graph before partitioning."""
from __future__ import annotations

from mx_trt.passes.ir import Entry
from mx_trt.passes.simplify import remove_identities
from tests.passes.graphs import by_name, make, run

IDENTITY = {"Dropout", "identity"}


def is_identity(node) -> bool:
    return node.op in IDENTITY


def test_identities_between_supported_ops_do_not_split():
    # x -> a -> [drop] -> b -> [id] -> c      (a, b, c compatible)
    g = make([("x", "null", []), ("a", "relu", ["x"]), ("drop", "Dropout", ["a"]), ("b", "relu", ["drop"]),
              ("id", "identity", ["b"]), ("c", "relu", ["id"])])
    r = remove_identities(g, is_identity)
    assert r.removed == ["drop", "id"]
    assert [n.name for n in r.graph.nodes] == ["x", "a", "b", "c"]
    assert r.graph.nodes[2].inputs == (Entry(1, 0),) and r.graph.nodes[3].inputs == (Entry(2, 0),)
    assert by_name(r.graph, run(r.graph)) == [{"a", "b", "c"}]


def test_a_lone_identity_between_native_ops_costs_nothing():
    # x -> [u1] -> drop -> [u2]: without removal, drop is a 1-op subgraph
    g = make([("x", "null", []), ("u1", "Custom", ["x"]), ("drop", "Dropout", ["u1"]), ("u2", "Custom", ["drop"])])
    assert by_name(g, run(g)) == [{"drop"}]
    r = remove_identities(g, is_identity)
    assert by_name(r.graph, run(r.graph)) == []
    assert r.graph.nodes[2].inputs == (Entry(1, 0),)


def test_chains_collapse_and_shapes_follow():
    g = make([("x", "null", []), ("d1", "Dropout", ["x"]), ("d2", "identity", ["d1"]), ("a", "relu", ["d2"])])
    g.shapes = {Entry(0, 0): (2, 3), Entry(3, 0): (2, 3)}
    g.dtypes = {Entry(0, 0): "float32", Entry(3, 0): "float32"}
    r = remove_identities(g, is_identity)
    assert [n.name for n in r.graph.nodes] == ["x", "a"]
    assert r.graph.nodes[1].inputs == (Entry(0, 0),)
    assert r.graph.shapes == {Entry(0, 0): (2, 3), Entry(1, 0): (2, 3)}
    assert r.node_map == {0: 0, 3: 1}


def test_heads_and_read_side_outputs_keep_their_node():
    # drop is a graph output; drop2's mask (output 1) is read: both stay
    g = make([("x", "null", []), ("drop", "Dropout", ["x"]), ("drop2", "Dropout", ["x"]),
              ("m", "relu", [("drop2", 1)])], heads=["drop", "m"])
    r = remove_identities(g, is_identity)
    assert r.removed == []
    assert r.graph is g


def test_nothing_to_remove_returns_the_same_graph():
    g = make([("x", "null", []), ("a", "relu", ["x"])])
    assert remove_identities(g, is_identity).graph is g
