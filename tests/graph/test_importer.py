"""graph.importer: MXNet symbol -> IR once, shapes at another batch into the same IR, IR -> JSON.

Everything is compared with MXNet's own inference on the same symbol.
"""
from __future__ import annotations

import json

import mxnet as mx
import pytest

from mx_trt.errors import ShapeError
from mx_trt.graph.importer import graph_to_json, infer_shapes, inference_identity, symbol_to_graph
from mx_trt.passes.ir import Entry
from mx_trt.passes.simplify import remove_identities


def _net():
    x = mx.sym.var("data")
    c = mx.sym.Convolution(x, num_filter=4, kernel=(3, 3), pad=(1, 1), name="conv")
    d = mx.sym.Dropout(mx.sym.relu(c, name="relu"), p=0.5, name="drop")
    return mx.sym.FullyConnected(mx.sym.flatten(d, name="flat"), num_hidden=5, name="fc")


def test_shapes_and_dtypes_are_mxnets():
    sym = _net()
    g = symbol_to_graph(sym, {"data": (2, 3, 8, 8)})
    _, out_shapes, _ = sym.infer_shape(data=(2, 3, 8, 8))
    internals = sym.get_internals()
    _, int_shapes, _ = internals.infer_shape(data=(2, 3, 8, 8))
    by_name = dict(zip(internals.list_outputs(), int_shapes))
    for n in g.nodes:
        if n.is_variable:
            assert g.shapes[Entry(n.id, 0)] == by_name[n.name]
        else:
            assert g.shapes[Entry(n.id, 0)] == by_name[n.name + "_output"], n.name
        assert g.dtypes[Entry(n.id, 0)] == "float32"
    assert [g.shapes[e] for e in g.heads] == [tuple(s) for s in out_shapes]


def test_type_dict_decides_dtypes_as_simple_bind_does():
    x = mx.sym.var("x")
    sym = mx.sym.Cast(x * 2, dtype="int32", name="cast")
    g = symbol_to_graph(sym, {"x": (3,)}, {"x": "float16"})
    x_node = next(n for n in g.nodes if n.name == "x")
    assert g.dtypes[Entry(x_node.id, 0)] == "float16"
    assert g.dtypes[g.heads[0]] == "int32"


def test_repeated_and_empty_names_get_unique_ones():
    js = json.loads(_net().tojson())
    for n in js["nodes"]:
        if n["op"] == "relu":
            n["name"] = "conv"  # the same name as the convolution
        if n["op"] == "Flatten":
            n["name"] = ""
    sym = mx.sym.load_json(json.dumps(js))
    g = symbol_to_graph(sym, {"data": (1, 3, 8, 8)})
    names = [n.name for n in g.nodes]
    assert len(names) == len(set(names)) and all(names)
    # The graph still matches MXNet's shapes after renaming.
    assert g.shapes[g.heads[0]] == (1, 5)


def _mxnet_shapes(sym, **shapes):
    internals = sym.get_internals()
    arg_shapes, out_shapes, aux_shapes = internals.infer_shape(**shapes)
    by_name = dict(zip(internals.list_outputs(), out_shapes))
    by_name.update(zip(internals.list_arguments(), arg_shapes))
    return by_name


def test_infer_shapes_at_another_batch_reuses_the_simplified_ir():
    sym = _net()
    g = symbol_to_graph(sym, {"data": (2, 3, 8, 8)})
    simplified = remove_identities(g, inference_identity)
    assert simplified.removed == ["drop"]
    h = simplified.graph
    shapes4 = infer_shapes(sym, h, {"data": (4, 3, 8, 8)})
    want = _mxnet_shapes(sym, data=(4, 3, 8, 8))
    assert set(shapes4) == set(h.shapes)
    for e in h.shapes:
        n = h.nodes[e.node]
        assert shapes4[e] == tuple(want[n.name if n.is_variable else n.name + "_output"]), n.name
    assert shapes4[h.heads[0]] == (4, 5)


def test_contradictory_shapes_are_a_shape_error():
    with pytest.raises(ShapeError):
        symbol_to_graph(_net(), {"data": (2, 3, 8, 8), "fc_weight": (7, 1)})


def test_graph_to_json_round_trips_through_mxnet():
    sym = _net()
    g = symbol_to_graph(sym, {"data": (2, 3, 8, 8)})
    back = mx.sym.load_json(graph_to_json(g))
    assert back.list_arguments() == sym.list_arguments()
    assert back.infer_shape(data=(2, 3, 8, 8))[1] == sym.infer_shape(data=(2, 3, 8, 8))[1]
