"""Fusing subgraphs into single nodes: boundaries, absorbed weights, heads, order."""
from __future__ import annotations

import pytest

from mx_trt.passes.fuse import boundary, fuse
from mx_trt.passes.ir import Entry
from mx_trt.passes.partition import Subgraph
from mx_trt.passes.validate import PartitionError
from tests.passes.graphs import make, run


def sub(i, nodes):
    return Subgraph(id=i, name=f"trt_subgraph_{i}", nodes=tuple(sorted(nodes)))


def net():
    #  data   w1               w2
    #    \    |                |
    #    conv1 ---> relu1 ---> fc ----------------> head 0
    #               |  |  \
    #               |  |   +--> X --> Y ----------> head 1
    #               |  +----------------------------> head 2
    #               +--> Z <-- w3, w1 --------------> head 3
    # Subgraph {conv1, relu1, fc}; weights w1, w2, w3 absorbed. w1 is also read
    # by the native Z, so it stays; w2 is read only inside, so it goes; w3 is
    # read only by Z, so it stays.
    g = make(
        [
            ("data", "null", []), ("w1", "null", []), ("w2", "null", []), ("w3", "null", []),
            ("conv1", "Convolution", ["data", "w1"]), ("relu1", "Activation", ["conv1"]),
            ("fc", "FullyConnected", ["relu1", "w2"]),
            ("X", "Custom", ["relu1"]), ("Y", "Custom", ["X"]), ("Z", "Custom", ["relu1", "w3", "w1"]),
        ],
        heads=["fc", "Y", "relu1", "Z"],
    )
    return g


def test_fuse_replaces_the_subgraph_and_remaps_everything():
    g = net()
    g.shapes[Entry(5)] = (1, 8)
    g.dtypes[Entry(6)] = "float32"
    r = fuse(g, [sub(0, [4, 5, 6])], absorbed={1, 2, 3})
    new = r.graph
    assert [n.name for n in new.nodes] == ["data", "w1", "w3", "trt_subgraph_0", "X", "Y", "Z"]
    f = new.nodes[3]
    assert (f.op, dict(f.attrs), f.inputs, f.num_outputs) == ("_mx_trt_fused", {"subgraph": "trt_subgraph_0"},
                                                               (Entry(0),), 2)
    assert r.fused[0].node_id == 3
    assert r.fused[0].inputs == [Entry(0)]
    assert r.fused[0].outputs == [Entry(5), Entry(6)]
    assert new.nodes[4].inputs == (Entry(3, 0),)
    assert new.nodes[6].inputs == (Entry(3, 0), Entry(2), Entry(1))
    assert new.heads == [Entry(3, 1), Entry(5), Entry(3, 0), Entry(6)]
    assert r.entry_map == {
        Entry(0): Entry(0), Entry(1): Entry(1), Entry(3): Entry(2), Entry(5): Entry(3, 0), Entry(6): Entry(3, 1),
        Entry(7): Entry(4), Entry(8): Entry(5), Entry(9): Entry(6),
    }
    assert new.shapes == {Entry(3, 0): (1, 8)}
    assert new.dtypes == {Entry(3, 1): "float32"}
    new.validate()


def test_boundary_orders_inputs_by_first_use_and_outputs_sorted():
    #  b, a, c, w are variables; split has two outputs.
    #  p = op(b, a, split:1)      q = op(p, a, c, split:0, w)      r = op(q, p) (native)
    g = make(
        [
            ("a", "null", []), ("b", "null", []), ("c", "null", []), ("w", "null", []),
            ("split", "SliceChannel", ["a"]),
            ("p", "op", ["b", "a", ("split", 1)]), ("q", "op", ["p", "a", "c", ("split", 0), "w"]),
            ("r", "op", ["q", "p"]),
        ],
        heads=["r", "q"],
    )
    inputs, outputs = boundary(g, [5, 6], absorbed={3})
    assert inputs == [Entry(1), Entry(0), Entry(4, 1), Entry(2), Entry(4, 0)]
    assert outputs == [Entry(5), Entry(6)]
    with pytest.raises(PartitionError, match="only variables"):
        boundary(g, [5, 6], absorbed={4})


def test_subgraph_output_read_by_several_native_nodes_and_a_head():
    #  data -> a -> b ---> X1 -> head 1
    #               |----> X2 -> head 2
    #               +-----------> head 0
    g = make(
        [("data", "null", []), ("a", "relu", ["data"]), ("b", "relu", ["a"]),
         ("X1", "Custom", ["b"]), ("X2", "Custom", ["b"])],
        heads=["b", "X1", "X2"],
    )
    r = fuse(g, [sub(0, [1, 2])], absorbed=set())
    assert r.fused[0].outputs == [Entry(2)]
    assert r.graph.heads == [Entry(1, 0), Entry(2), Entry(3)]
    assert [n.inputs for n in r.graph.nodes[2:]] == [(Entry(1, 0),), (Entry(1, 0),)]


def test_two_subgraphs_in_a_row_and_topological_order():
    #  data -> a -> b -> X -> c -> d
    #               +---------^        (b -> c)
    g = make([("data", "null", []), ("a", "relu", ["data"]), ("b", "relu", ["a"]), ("X", "Custom", ["b"]),
              ("c", "add", ["X", "b"]), ("d", "relu", ["c"])])
    result = run(g, min_size=2)
    r = fuse(g, result.subgraphs, absorbed=set())
    names = [n.name for n in r.graph.nodes]
    assert names == ["data", "trt_subgraph_0", "X", "trt_subgraph_1"]
    assert r.graph.nodes[3].inputs == (Entry(2), Entry(1, 0))
    for n in r.graph.nodes:
        assert all(e.node < n.id for e in n.inputs)


def test_fused_name_clash_is_resolved_deterministically():
    g = make([("data", "null", []), ("a", "relu", ["data"]), ("b", "relu", ["a"]),
              ("trt_subgraph_0", "Custom", ["b"]), ("trt_subgraph_0_1", "Custom", ["trt_subgraph_0"])])
    r = fuse(g, [sub(0, [1, 2])], absorbed=set())
    assert [n.name for n in r.graph.nodes] == ["data", "trt_subgraph_0_2", "trt_subgraph_0", "trt_subgraph_0_1"]
    assert r.graph.nodes[1].attrs == {"subgraph": "trt_subgraph_0"}


def test_unused_data_variable_stays_and_absorbed_variable_read_outside_stays():
    #  data -> a -> b   (subgraph);  w absorbed, read by a and by the native X
    g = make([("data", "null", []), ("w", "null", []), ("a", "fc", ["data", "w"]), ("b", "relu", ["a"]),
              ("X", "Custom", ["b", "w"])])
    r = fuse(g, [sub(0, [2, 3])], absorbed={1})
    assert [n.name for n in r.graph.nodes] == ["data", "w", "trt_subgraph_0", "X"]
    assert r.fused[0].inputs == [Entry(0)]
    assert r.graph.nodes[3].inputs == (Entry(2, 0), Entry(1))


def test_fuse_rejects_cyclic_and_invalid_partitions():
    #        +--> b --+
    #  a ----+        +--> d
    #        +--> X --+
    g = make([("data", "null", []), ("a", "relu", ["data"]), ("b", "relu", ["a"]), ("X", "Custom", ["a"]),
              ("d", "add", ["b", "X"])])
    with pytest.raises(PartitionError, match="cycle"):
        fuse(g, [sub(0, [1, 4])], absorbed=set())
    with pytest.raises(PartitionError, match="variable"):
        fuse(g, [sub(0, [0, 1])], absorbed=set())
    with pytest.raises(PartitionError, match="two subgraphs"):
        fuse(g, [sub(0, [1, 2]), sub(1, [2, 4])], absorbed=set())
    with pytest.raises(PartitionError, match="only variables"):
        fuse(g, [sub(0, [1, 2])], absorbed={3})


def test_no_subgraphs_keeps_the_graph():
    g = net()
    r = fuse(g, [], absorbed={1, 2, 3})
    assert [n.name for n in r.graph.nodes] == [n.name for n in g.nodes]
    assert r.graph.heads == g.heads
