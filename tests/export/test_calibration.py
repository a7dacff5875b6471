"""The calibration table: graph digest, JSON form, refusal of damaged tables and of another graph's."""
from __future__ import annotations

import json

import mxnet as mx
import pytest

from mx_trt.errors import CalibrationError
from mx_trt.export.calibration import (
    CalibrationTable,
    TensorRange,
    activation_inputs,
    graph_digest,
    int8_exclusions,
    load_table,
    output_layers,
)
from mx_trt.graph.importer import symbol_to_graph
from mx_trt.passes.ir import Entry


def _graph(prefix="", batch=2, act="relu", ch=4):
    x = mx.sym.Convolution(mx.sym.var("data"), num_filter=ch, kernel=(3, 3), pad=(1, 1), name=f"{prefix}conv")
    x = mx.sym.Activation(x, act_type=act, name=f"{prefix}act")
    x = mx.sym.FullyConnected(x, num_hidden=3, name=f"{prefix}fc")
    sym = mx.sym.softmax(x, name=f"{prefix}prob")
    return symbol_to_graph(sym, {"data": (batch, 3, 5, 5)}, {})


def _table(graph, **ranges):
    tensors = {}
    for name, r in ranges.items():
        node = next(n for n in graph.nodes if n.name == name or f"{n.name}_output" == name)
        tensors[(node.id, 0)] = r
    return CalibrationTable(graph_digest=graph_digest(graph), method="minmax", tensors=tensors)


def test_digest_is_the_structure_not_names_batch_or_weights():
    base = graph_digest(_graph())
    assert graph_digest(_graph(prefix="other_")) == base  # renamed nodes
    assert graph_digest(_graph(batch=7)) == base  # another batch size
    assert graph_digest(_graph(act="tanh")) != base  # another attribute
    assert graph_digest(_graph(ch=8)) != base
    g = _graph()
    g.heads = [Entry(g.heads[0].node - 1, 0)]  # another output
    assert graph_digest(g) != base


def test_round_trip_and_ranges_by_tensor_name(tmp_path):
    g = _graph()
    t = _table(g, data=TensorRange(-1.0, 2.0, 2.0), act_output=TensorRange(0.0, 5.0, 4.5))
    t.names = {k: "whatever" for k in t.tensors}
    path = t.save(tmp_path / "t.json")
    back = load_table(path)
    assert back.tensors == t.tensors and back.graph_digest == t.graph_digest and back.digest == t.digest
    assert back.ranges(_graph(prefix="p_")) == {"data": TensorRange(-1.0, 2.0, 2.0), "p_act_output": TensorRange(0.0, 5.0, 4.5)}


def test_another_graphs_table_is_refused():
    t = _table(_graph(), data=TensorRange(0, 1, 1))
    with pytest.raises(CalibrationError, match="another graph"):
        t.ranges(_graph(act="tanh"))


@pytest.mark.parametrize("text,match", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "not a calibration table"),
    ('{"format": "mx_trt.calibration/0"}', "not a calibration table"),
    ('{"format": "mx_trt.calibration/1", "graph_digest": "abc", "method": "minmax", "tensors": []}', "sha256"),
    ('{"format": "mx_trt.calibration/1", "graph_digest": "%s", "method": "kl", "tensors": []}' % ("0" * 64), "method"),
    ('{"format": "mx_trt.calibration/1", "graph_digest": "%s", "method": "minmax", "tensors": [{"node": 1}]}' % ("0" * 64),
     "needs integer node"),
    ('{"format": "mx_trt.calibration/1", "graph_digest": "%s", "method": "minmax", "tensors": '
     '[{"node": 1, "output": 0, "min": 2, "max": 1, "amax": 2}]}' % ("0" * 64), "bad range"),
    ('{"format": "mx_trt.calibration/1", "graph_digest": "%s", "method": "minmax", "tensors": '
     '[{"node": 1, "output": 0, "min": 0, "max": NaN, "amax": 2}]}' % ("0" * 64), "bad range"),
], ids=["json", "list", "format", "digest", "method", "fields", "min>max", "nan"])
def test_damaged_tables_are_refused_with_the_file_named(tmp_path, text, match):
    path = tmp_path / "t.json"
    path.write_text(text)
    with pytest.raises(CalibrationError, match=match) as info:
        load_table(path)
    assert str(path) in str(info.value)


def test_missing_table_file(tmp_path):
    with pytest.raises(CalibrationError, match="does not exist"):
        load_table(tmp_path / "nope.json")


def test_entry_outside_the_graph_is_refused():
    g = _graph()
    t = CalibrationTable(graph_digest=graph_digest(g), method="minmax", tensors={(999, 0): TensorRange(0, 1, 1)})
    with pytest.raises(CalibrationError, match="lacks"):
        t.ranges(g)


def test_activation_inputs_skip_weights_and_need_two_activations_for_an_add():
    data = mx.sym.var("data")
    c = mx.sym.Convolution(data, num_filter=3, kernel=(1, 1), name="c")
    s = mx.sym.elemwise_add(c, data, name="res") + mx.sym.var("bias_const")  # _Plus with a weight
    g = symbol_to_graph(s, {"data": (1, 3, 4, 4), "bias_const": (1, 3, 4, 4)}, {})
    acts = activation_inputs(g, g.op_nodes(), weights={"c_weight", "c_bias", "bias_const"})
    by_name = {g.nodes[k].name: [g.nodes[e.node].name for e in v] for k, v in acts.items()}
    assert by_name == {"c": ["data"], "res": ["c", "data"]}


def test_output_layer_and_exclusions():
    g = _graph()
    ids = {n.name: n.id for n in g.nodes}
    assert output_layers(g) == {ids["fc"]}  # softmax after it is not quantizable
    excl = int8_exclusions(g, g.op_nodes(), ["Convolution"], [], True)
    assert excl == {ids["conv"]: "Convolution is listed in int8_exclude_ops",
                    ids["fc"]: "the output layer is kept in float (int8_keep_output_layer)"}
    assert int8_exclusions(g, g.op_nodes(), [], ["fc"], False) == {ids["fc"]: "listed in int8_exclude_nodes"}


def test_json_is_small_and_readable(tmp_path):
    g = _graph()
    t = _table(g, data=TensorRange(-1.0, 2.0, 2.0))
    doc = json.loads(t.to_json())
    assert doc["format"] == "mx_trt.calibration/1" and doc["tensors"][0]["node"] == 0 and doc["tensors"][0]["amax"] == 2.0
