"""Reduced-precision graphs (mx_trt/export/precision.py): ``to_bf16``, the bfloat16 rounding, and ``to_fp16`` beside it.

The graph under test, written with ``onnx.helper`` (W, B and K float32; W in
external data, as the exporter keeps large weights)::

    x (float32) -> Conv(W, B) -> Relu -> Mul(K: Constant) -> y (float32)
    x -> Shape -> Cast(to=FLOAT) -> n (float32)

Both conversions give the same graph but for the type and the names of the
casts they insert. bfloat16 values are checked bit for bit against the rule
(round to nearest, ties to even; NaN quiet, inf kept, saturation at the
largest finite bfloat16) and decoded back within half a bfloat16 step.
"""
from __future__ import annotations

import types
from typing import Dict

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from mx_trt.export import precision
from mx_trt.export.precision import BFLOAT16_MAX, to_bf16, to_bfloat16_bits, to_fp16
from mx_trt.export.subgraph import ExportedSubgraph, initializer_protos, save_model

BF16, F16, F32 = TensorProto.BFLOAT16, TensorProto.FLOAT16, TensorProto.FLOAT


def f32(*bits: int) -> np.ndarray:
    """float32 values from their bit patterns."""
    return np.array(bits, np.uint32).view(np.float32)


def decode(bits: np.ndarray) -> np.ndarray:
    """float32 values of bfloat16 bit patterns (exact)."""
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def bf16_bits(t) -> np.ndarray:
    """The uint16 bit patterns of an inline BFLOAT16 initializer."""
    assert t.data_type == BF16 and t.raw_data
    return np.frombuffer(t.raw_data, "<u2").reshape(tuple(t.dims))


#: Constant K: specials past every rounding rule, then ordinary values.
SPECIALS = np.concatenate([f32(0x7FC00000, 0xFFC00001, 0x7F800001), np.float32([np.inf, -np.inf, 3.4e38, -3.4e38, 1.5, -0.0])])


def exported_graph() -> ExportedSubgraph:
    rng = np.random.RandomState(0)
    arrays = {"W": rng.randn(16, 3, 3, 3).astype(np.float32), "B": rng.randn(16).astype(np.float32)}
    protos, external = initializer_protos(arrays, "g.weights")
    assert list(external) == ["W"]  # 1728 bytes: external data; B inline
    k = np.resize(SPECIALS, 16).reshape(1, 16, 1, 1)  # channels 0-8: SPECIALS
    nodes = [
        helper.make_node("Conv", ["x", "W", "B"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Constant", [], ["K"], name="k", value=numpy_helper.from_array(np.ascontiguousarray(k), "K")),
        helper.make_node("Mul", ["r", "K"], ["y"], name="mul"),
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Cast", ["s"], ["n"], name="cast", to=F32),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F32, [1, 3, 4, 4])],
                              [helper.make_tensor_value_info("y", F32, [1, 16, 4, 4]),
                               helper.make_tensor_value_info("n", F32, [4])], initializer=protos)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return ExportedSubgraph(model=model, input_names=["x"], output_names=["y", "n"], origin={"conv": "c0"},
                            weight_bytes=sum(a.nbytes for a in arrays.values()), external=external,
                            external_location="g.weights")


def by_name(ex: ExportedSubgraph) -> Dict[str, object]:
    return {n.name: n for n in ex.model.graph.node}


def cast_to(node) -> int:
    return next(a.i for a in node.attribute if a.name == "to")


# --------------------------------------------------------------------------- bfloat16 rounding


def test_round_to_nearest_even():
    x = f32(0x3F808000, 0x3F818000, 0x3F808001, 0x3F807FFF, 0xBF808000, 0xBF818000, 0x00000001, 0x00018000, 0x80000000)
    assert to_bfloat16_bits(x).tolist() == [0x3F80, 0x3F82, 0x3F81, 0x3F80, 0xBF80, 0xBF82, 0x0000, 0x0002, 0x8000]


def test_nan_inf_and_saturation():
    x = np.concatenate([f32(0x7FC00000, 0xFFC00001, 0x7F800001, 0x7FFFFFFF, 0x7F7FFFFF, 0x7F7F8000, 0xFF7F8000),
                        np.float32([np.inf, -np.inf, 3.4e38, -np.finfo(np.float32).max])])
    bits = to_bfloat16_bits(x)
    # NaNs stay NaNs of their sign with the quiet bit, a signalling one (0x7F800001) included, never inf.
    assert bits[:4].tolist() == [0x7FC0, 0xFFC0, 0x7FC0, 0x7FFF]
    assert np.isnan(decode(bits[:4])).all()
    # Finite values past the largest bfloat16 saturate, even those whose rounding would reach inf.
    assert bits[4:7].tolist() == [0x7F7F, 0x7F7F, 0xFF7F]
    assert bits[7:].tolist() == [0x7F80, 0xFF80, 0x7F7F, 0xFF7F]
    assert decode(np.array([0x7F7F]))[0] == np.float32(BFLOAT16_MAX)


def test_random_values_decode_within_half_a_step():
    rng = np.random.RandomState(1)
    x = np.concatenate([rng.randn(4096), rng.uniform(-1e30, 1e30, 1024), rng.uniform(-1e-30, 1e-30, 1024)]).astype(np.float32)
    bits = to_bfloat16_bits(x.reshape(2, -1))
    assert bits.dtype == np.uint16 and bits.shape == (2, 3072)
    back = decode(bits).reshape(-1)
    assert np.all(np.abs(back - x) <= np.abs(x) * 2.0 ** -8)  # 8 significant bits: half a step
    # Nearest: neither neighbour of the result is closer to the value.
    err = np.abs(back.astype(np.float64) - x)
    for neighbour in (bits.reshape(-1) - 1, bits.reshape(-1) + 1):
        assert np.all(np.abs(decode(neighbour).astype(np.float64) - x) >= err)
    assert to_bfloat16_bits(np.float32(1.0)).shape == () and int(to_bfloat16_bits(np.float32(1.0))) == 0x3F80


# --------------------------------------------------------------------------- to_bf16


def test_bf16_types_and_edges():
    ex = exported_graph()
    low = to_bf16(ex)
    g = low.model.graph
    assert {t.name: t.data_type for t in g.initializer} == {"W": BF16, "B": BF16}
    nodes = by_name(low)
    k = next(a.t for a in nodes["k"].attribute if a.name == "value")
    assert k.data_type == BF16
    assert cast_to(nodes["cast"]) == BF16
    # float32 interface: one cast down at the input, one cast up per output.
    assert [(v.name, v.type.tensor_type.elem_type) for v in (*g.input, *g.output)] == [("x", F32), ("y", F32), ("n", F32)]
    head = g.node[0]
    assert (head.name, list(head.input), list(head.output), cast_to(head)) == ("x/to_bf16", ["x"], ["x__bf16"], BF16)
    assert list(nodes["conv"].input) == ["x__bf16", "W", "B"] and list(nodes["shape"].input) == ["x__bf16"]
    tail = {n.name: (list(n.input), list(n.output), cast_to(n)) for n in g.node[-2:]}
    assert tail == {"y/to_fp32": (["y__bf16"], ["y"], F32), "n/to_fp32": (["n__bf16"], ["n"], F32)}
    assert list(nodes["mul"].output) == ["y__bf16"] and list(nodes["cast"].output) == ["n__bf16"]
    assert low.origin == ex.origin and low.input_names == ["x"] and low.output_names == ["y", "n"]
    # The export itself is untouched.
    assert {t.data_type for t in ex.model.graph.initializer} == {F32} and ex.external["W"].dtype == np.float32
    assert [n.name for n in ex.model.graph.node][0] == "conv"


def test_bf16_values():
    ex = exported_graph()
    low = to_bf16(ex)
    inits = {t.name: t for t in low.model.graph.initializer}
    b = numpy_helper.to_array(next(t for t in ex.model.graph.initializer if t.name == "B"))
    assert np.array_equal(bf16_bits(inits["B"]), to_bfloat16_bits(b))
    assert np.all(np.abs(decode(bf16_bits(inits["B"])) - b) <= np.abs(b) * 2.0 ** -8)
    k = next(a.t for a in by_name(low)["k"].attribute if a.name == "value")
    got = bf16_bits(k)[0, :9, 0, 0]
    assert got.tolist() == [0x7FC0, 0xFFC0, 0x7FC0, 0x7F80, 0xFF80, 0x7F7F, 0xFF7F, 0x3FC0, 0x8000]
    assert low.weight_bytes == ex.weight_bytes // 2


def test_bf16_external_weights(tmp_path):
    import onnx

    ex = exported_graph()
    low = to_bf16(ex)
    w = next(t for t in low.model.graph.initializer if t.name == "W")
    arr = low.external["W"]
    assert arr.dtype == np.uint16 and arr.shape == (16, 3, 3, 3)
    assert np.array_equal(arr, to_bfloat16_bits(ex.external["W"]))
    data = {kv.key: kv.value for kv in w.external_data}
    assert data == {"location": "g.weights", "offset": "0", "length": str(arr.nbytes)} and arr.nbytes == 864
    assert w.data_location == TensorProto.EXTERNAL and list(w.dims) == [16, 3, 3, 3]
    # What the TensorRT parser reads: the model and its weights file, decoded by ONNX itself.
    loaded = onnx.load(save_model(low, str(tmp_path / "g.onnx")))
    back = numpy_helper.to_array(next(t for t in loaded.graph.initializer if t.name == "W"))
    assert back.dtype == np.float32 and np.array_equal(back, decode(arr))
    assert np.all(np.abs(back - ex.external["W"]) <= np.abs(ex.external["W"]) * 2.0 ** -8)


def test_resize_scales_stay_float32():
    scales = numpy_helper.from_array(np.float32([1, 1, 2, 2]), "scales")
    nodes = [helper.make_node("Resize", ["x", "", "scales"], ["y"], name="resize", mode="nearest")]
    graph = helper.make_graph(nodes, "r", [helper.make_tensor_value_info("x", F32, [1, 1, 2, 2])],
                              [helper.make_tensor_value_info("y", F32, [1, 1, 4, 4])], initializer=[scales])
    ex = ExportedSubgraph(model=helper.make_model(graph), input_names=["x"], output_names=["y"])
    low = to_bf16(ex)
    assert [t.data_type for t in low.model.graph.initializer] == [F32]
    assert list(by_name(low)["resize"].input) == ["x__bf16", "", "scales"]


@pytest.mark.parametrize("convert, elem, tag", [(to_bf16, BF16, "bf16"), (to_fp16, F16, "fp16")])
def test_roi_align_and_plugins_compute_in_float32(convert, elem, tag, monkeypatch):
    declared = types.SimpleNamespace(in_dtypes=("float32", "int64"), out_dtypes=("float32",))
    monkeypatch.setattr(precision, "plugin_for_node", lambda domain, op: declared if domain == "it.ops" else None)
    nodes = [
        helper.make_node("RoiAlign", ["x", "rois", "idx"], ["ra"], name="ra", output_height=1, output_width=1),
        helper.make_node("Sparsemax", ["ra", "idx"], ["p"], name="plug", domain="it.ops"),
    ]
    graph = helper.make_graph(nodes, "p", [helper.make_tensor_value_info("x", F32, [1, 2, 4, 4]),
                                           helper.make_tensor_value_info("rois", F32, [3, 4]),
                                           helper.make_tensor_value_info("idx", TensorProto.INT64, [3])],
                              [helper.make_tensor_value_info("p", F32, [3, 2, 1, 1])])
    ex = ExportedSubgraph(model=helper.make_model(graph), input_names=["x", "rois", "idx"], output_names=["p"])
    g = convert(ex).model.graph
    producers = {o: n for n in g.node for o in n.output}
    nodes_ = {n.name: n for n in g.node}
    for node, floats in (("ra", ["x__to_fp32_ra", "rois__to_fp32_ra"]), ("plug", ["ra__to_fp32_plug"])):
        ins = list(nodes_[node].input)
        assert ins[:len(floats)] == floats
        assert all(cast_to(producers[x]) == F32 for x in floats), node
        # Its float output comes back in the graph's type, cast named by it.
        wide = nodes_[node].output[0]
        back = next(n for n in g.node if list(n.input) == [wide])
        assert wide.endswith("__fp32") and cast_to(back) == elem and back.name.endswith(f"/to_{tag}")
    assert list(nodes_["plug"].input)[1] == "idx"  # int64 untouched
    assert {n.name for n in g.node} >= {f"x/to_{tag}", f"rois/to_{tag}", "p/to_fp32"}


# --------------------------------------------------------------------------- to_fp16 beside it


def test_fp16_is_the_same_graph_in_float16():
    ex = exported_graph()
    half, low = to_fp16(ex), to_bf16(ex)
    assert [(n.op_type, n.name.replace("fp16", "bf16"), [x.replace("fp16", "bf16") for x in n.input])
            for n in half.model.graph.node] == [(n.op_type, n.name, list(n.input)) for n in low.model.graph.node]
    g = half.model.graph
    assert {t.name: t.data_type for t in g.initializer} == {"W": F16, "B": F16}
    assert cast_to(by_name(half)["cast"]) == F16 and cast_to(g.node[0]) == F16 and g.node[0].name == "x/to_fp16"
    # float16 values: numpy's rounding, finite values past 65504 saturated, inf and NaN kept.
    assert half.external["W"].dtype == np.float16 and np.array_equal(half.external["W"], ex.external["W"].astype(np.float16))
    b = next(t for t in g.initializer if t.name == "B")
    assert b.data_type == F16 and numpy_helper.to_array(b).dtype == np.float16
    k = numpy_helper.to_array(next(a.t for a in by_name(half)["k"].attribute if a.name == "value"))[0, :9, 0, 0]
    assert k.dtype == np.float16
    assert np.isnan(k[:3]).all() and k[3:].tolist() == [np.inf, -np.inf, 65504.0, -65504.0, 1.5, 0.0]
    assert np.signbit(k[8])
    assert half.weight_bytes == ex.weight_bytes // 2
    length = next(kv.value for t in g.initializer if t.name == "W" for kv in t.external_data if kv.key == "length")
    assert length == str(half.external["W"].nbytes)
