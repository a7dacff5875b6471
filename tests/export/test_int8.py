"""The INT8 export pass: where Q/DQ pairs go, how weights are quantized, and the numbers ONNX Runtime gives.

Graphs are tiny MXNet symbols, analysed and exported as a bind does
(tests.harness.int8check.export_one); ranges are given by hand so that scales can be
checked exactly. Numerics against native MXNet use the INT8 tolerance of
tests.harness.int8check (cosine similarity).
"""
from __future__ import annotations

import collections

import mxnet as mx
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

import mx_trt

from mx_trt.builder.backends.onnxruntime import OnnxRuntimeBackend
from mx_trt.export.calibration import TensorRange
from mx_trt.export.int8 import TENSORRT_STYLE, Int8Style, quantize_int8, quantize_weight
from mx_trt.export.subgraph import embedded_model
from tests.harness.int8check import COSINE_MIN, conv_bn_relu, cosine, export_one, prototype_cnn
from tests.harness.mxcheck import random_params, run_native

ORT_STYLE = OnnxRuntimeBackend.int8_style


def _model(ex):
    m = embedded_model(ex)
    onnx.checker.check_model(m)
    return m


def _inits(m):
    return {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}


def _producers(m):
    return {o: n for n in m.graph.node for o in n.output}


def _dq_source(m, tensor):
    """The tensor a DequantizeLinear output was quantized from (through its QuantizeLinear), or None."""
    prod = _producers(m)
    dq = prod.get(tensor)
    if dq is None or dq.op_type != "DequantizeLinear":
        return None
    q = prod.get(dq.input[0])
    return q.input[0] if q is not None and q.op_type == "QuantizeLinear" else dq.input[0]


def _params(sym, shapes, seed=0):
    args, aux = random_params(sym, shapes, seed)
    return args, aux, {**args, **aux}


def _ranges(names, amax=4.0, lo=None):
    return {n: TensorRange(-amax if lo is None else lo, amax, amax) for n in names}


def test_conv_relu_conv_quantizes_both_convolution_inputs_and_weights():
    """data -> conv_a -> relu -> conv_b: Q/DQ on data and on relu's output, weight DQ per output channel."""
    x = mx.sym.Activation(mx.sym.Convolution(mx.sym.var("data"), num_filter=4, kernel=(3, 3), pad=(1, 1), name="a"),
                          act_type="relu", name="r")
    sym = mx.sym.Convolution(x, num_filter=5, kernel=(1, 1), name="b")
    shapes = {"data": (2, 3, 6, 6)}
    args, aux, params = _params(sym, shapes)
    _, ex = export_one(sym, shapes, params)
    q, report = quantize_int8(ex, {"data": TensorRange(-1, 1, 1.0), "r_output": TensorRange(0, 3, 2.54)}, TENSORRT_STYLE)
    m = _model(q)
    ops = collections.Counter(n.op_type for n in m.graph.node)
    assert ops == {"QuantizeLinear": 2, "DequantizeLinear": 4, "Conv": 2, "Relu": 1}, ops
    inits = _inits(m)
    convs = [n for n in m.graph.node if n.op_type == "Conv"]
    assert [_dq_source(m, c.input[0]) for c in convs] == ["data", "r_output"]
    for conv, wname in zip(convs, ("a_weight", "b_weight")):
        dq = _producers(m)[conv.input[1]]
        assert dq.op_type == "DequantizeLinear" and onnx.helper.get_attribute_value(dq.attribute[0]) == 0
        w = params[wname].asnumpy()
        values, scale = inits[dq.input[0]], inits[dq.input[1]]
        assert values.dtype == np.int8 and scale.shape == (w.shape[0],)
        np.testing.assert_allclose(scale, np.abs(w).reshape(w.shape[0], -1).max(axis=1) / 127, rtol=1e-6)
        np.testing.assert_array_equal(values, np.clip(np.rint(w / scale[:, None, None, None]), -127, 127))
        assert conv.input[2] in inits and inits[conv.input[2]].dtype == np.float32  # TensorRT: float bias
    # activation scales: symmetric int8 from amax
    scales = {_dq_source(m, c.input[0]): inits[_producers(m)[c.input[0]].input[1]] for c in convs}
    assert float(scales["data"]) == pytest.approx(1.0 / 127) and float(scales["r_output"]) == pytest.approx(2.54 / 127)
    assert sorted(report.quantized) == ["a", "b"] and not report.kept_float


def test_batchnorm_after_a_convolution_is_folded_before_quantizing():
    sym = conv_bn_relu(mx.sym.var("data"), "s", 4)
    shapes = {"data": (1, 3, 5, 5)}
    args, aux, params = _params(sym, shapes)
    _, ex = export_one(sym, shapes, params)
    assert {n.op_type for n in ex.model.graph.node} >= {"Mul", "Add"}  # BatchNorm exported as Mul + Add
    q, _ = quantize_int8(ex, _ranges(["data"], 1.0), TENSORRT_STYLE)
    m = _model(q)
    assert [n.op_type for n in m.graph.node if n.op_type not in ("QuantizeLinear", "DequantizeLinear")] == ["Conv", "Relu"]
    conv = next(n for n in m.graph.node if n.op_type == "Conv")
    inits = _inits(m)
    dq = _producers(m)[conv.input[1]]
    folded = inits[dq.input[0]].astype(np.float64) * inits[dq.input[1]][:, None, None, None]
    g, b = params["s_bn_gamma"].asnumpy(), params["s_bn_beta"].asnumpy()
    mean, var = params["s_bn_moving_mean"].asnumpy(), params["s_bn_moving_var"].asnumpy()
    k = g / np.sqrt(var + 1e-3)
    want = params["s_conv_weight"].asnumpy() * k[:, None, None, None]
    np.testing.assert_allclose(folded, want, atol=np.abs(want).max() / 127)
    np.testing.assert_allclose(inits[conv.input[2]], b - mean * k, rtol=1e-5, atol=1e-6)


def _residual():
    """x = relu(conv0(data)); y = bn(conv1(x)); out = relu(y + x)."""
    x = mx.sym.Activation(mx.sym.Convolution(mx.sym.var("data"), num_filter=4, kernel=(3, 3), pad=(1, 1), name="c0"),
                          act_type="relu", name="r0")
    y = mx.sym.BatchNorm(mx.sym.Convolution(x, num_filter=4, kernel=(3, 3), pad=(1, 1), name="c1"), name="bn1")
    return mx.sym.Activation(mx.sym.elemwise_add(y, x, name="add"), act_type="relu", name="out")


@pytest.mark.parametrize("style,quantized_inputs", [(TENSORRT_STYLE, ["r0_output"]),
                                                    (ORT_STYLE, ["bn1_output", "r0_output"])],
                         ids=["tensorrt", "onnxruntime"])
def test_residual_add_inputs(style, quantized_inputs):
    """TensorRT: only the shortcut (the input no convolution produces); ONNX Runtime: both inputs."""
    sym = _residual()
    shapes = {"data": (1, 3, 6, 6)}
    _, _, params = _params(sym, shapes)
    _, ex = export_one(sym, shapes, params)
    ranges = {"data": TensorRange(-1, 1, 1), "r0_output": TensorRange(0, 3, 3), "bn1_output": TensorRange(-2, 2, 2)}
    q, report = quantize_int8(ex, ranges, style)
    m = _model(q)
    add = next(n for n in m.graph.node if n.op_type == "Add")
    got = sorted(s for s in (_dq_source(m, t) for t in add.input) if s is not None)
    assert got == quantized_inputs
    plain = [t for t in add.input if _dq_source(m, t) is None]
    assert all(_producers(m)[t].op_type == "Conv" for t in plain)  # the fused convolution's own output
    assert "add" in report.quantized


def test_no_qdq_around_pooling_activation_or_concat():
    """conv -> relu -> maxpool -> concat(pool, pool2) -> conv: Q/DQ only right before the convolutions."""
    x = mx.sym.Activation(mx.sym.Convolution(mx.sym.var("data"), num_filter=4, kernel=(3, 3), pad=(1, 1), name="c0"),
                          act_type="relu", name="r0")
    p1 = mx.sym.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="max", name="p1")
    p2 = mx.sym.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="avg", name="p2")
    sym = mx.sym.Convolution(mx.sym.concat(p1, p2, dim=1, name="cat"), num_filter=3, kernel=(1, 1), name="c1")
    shapes = {"data": (1, 3, 8, 8)}
    _, _, params = _params(sym, shapes)
    _, ex = export_one(sym, shapes, params)
    q, _ = quantize_int8(ex, _ranges(["data", "r0_output", "p1_output", "p2_output", "cat_output"], 3.0), TENSORRT_STYLE)
    m = _model(q)
    consumers = collections.defaultdict(list)
    for n in m.graph.node:
        for t in n.input:
            consumers[t].append(n.op_type)
    for n in m.graph.node:
        if n.op_type == "DequantizeLinear":
            assert consumers[n.output[0]] == ["Conv"], (n.name, consumers[n.output[0]])
    assert sum(n.op_type == "QuantizeLinear" for n in m.graph.node) == 2  # data and cat_output


def test_fully_connected_behind_flatten_takes_the_range_of_its_input():
    """FullyConnected(flatten=True) on a 4-D tensor exports Flatten -> Gemm; the range is the pooled tensor's."""
    x = mx.sym.Pooling(mx.sym.var("data"), global_pool=True, kernel=(1, 1), pool_type="avg", name="gap")
    sym = mx.sym.FullyConnected(x, num_hidden=7, name="fc")
    shapes = {"data": (2, 5, 4, 4)}
    _, _, params = _params(sym, shapes)
    _, ex = export_one(sym, shapes, params)
    q, report = quantize_int8(ex, {"gap_output": TensorRange(0, 2, 2)}, TENSORRT_STYLE)
    m = _model(q)
    gemm = next(n for n in m.graph.node if n.op_type == "Gemm")
    assert _producers(m)[gemm.input[0]].op_type == "DequantizeLinear"
    wdq = _producers(m)[gemm.input[1]]
    assert wdq.op_type == "DequantizeLinear" and _inits(m)[wdq.input[1]].shape == (7,)  # per output unit (transB=1)
    assert report.quantized == ["fc"]


def test_missing_range_and_exclusions_keep_operators_in_float_and_are_reported():
    x = mx.sym.Activation(mx.sym.Convolution(mx.sym.var("data"), num_filter=4, kernel=(3, 3), pad=(1, 1), name="a"),
                          act_type="relu", name="r")
    sym = mx.sym.FullyConnected(mx.sym.Convolution(x, num_filter=4, kernel=(1, 1), name="b"), num_hidden=3, name="fc")
    shapes = {"data": (1, 3, 4, 4)}
    _, _, params = _params(sym, shapes)
    _, ex = export_one(sym, shapes, params)
    q, report = quantize_int8(ex, _ranges(["data", "b_output"]), TENSORRT_STYLE, exclude={"fc": "listed in int8_exclude_nodes"})
    assert report.quantized == ["a"]
    assert report.kept_float == {"b": "no calibrated range for r_output", "fc": "listed in int8_exclude_nodes"}
    m = _model(q)
    b = next(n for n in m.graph.node if n.doc_string == "b" and n.op_type == "Conv")
    assert all(_producers(m).get(t) is None or _producers(m)[t].op_type != "DequantizeLinear" for t in b.input)


def test_quantize_weight_is_symmetric_per_channel():
    w = np.array([[1.0, -0.5, 0.25], [0.0, 0.0, 0.0], [-3.0, 1.5, 3.0]], np.float32)
    q, s = quantize_weight(w, 0)
    np.testing.assert_allclose(s, [1 / 127, 1.0, 3 / 127], rtol=1e-6)
    np.testing.assert_array_equal(q, [[127, -64, 32], [0, 0, 0], [-127, 64, 127]])  # rint(63.5) = 64 (half to even)
    q7, s7 = quantize_weight(w, 1, reduce_range=True)
    assert s7.shape == (3,) and np.abs(q7).max() == 63


def test_uint8_activations_span_the_range_seen_with_zero_point_0_for_nonnegative_tensors():
    sym = _residual()
    shapes = {"data": (1, 3, 6, 6)}
    _, _, params = _params(sym, shapes)
    _, ex = export_one(sym, shapes, params)
    ranges = {"data": TensorRange(-1, 3, 3), "r0_output": TensorRange(0, 3, 3), "bn1_output": TensorRange(-4, 2, 3)}
    m = _model(quantize_int8(ex, ranges, Int8Style(activation="uint8", residual="both"))[0])
    inits = _inits(m)
    qp = {n.input[0]: (float(inits[n.input[1]]), inits[n.input[2]]) for n in m.graph.node if n.op_type == "QuantizeLinear"}
    assert qp["r0_output"][0] == pytest.approx(3 / 255) and qp["r0_output"][1].dtype == np.uint8 and qp["r0_output"][1] == 0
    assert qp["bn1_output"][0] == pytest.approx(5 / 255) and qp["bn1_output"][1] == 153  # [-3, 2]: -4 clipped at amax
    assert qp["data"][0] == pytest.approx(4 / 255) and qp["data"][1] == 64


@pytest.mark.parametrize("style", [TENSORRT_STYLE, ORT_STYLE], ids=["tensorrt", "onnxruntime"])
def test_int8_cnn_on_onnxruntime_matches_native_mxnet(style, tmp_path):
    """The prototype CNN in int8 on ONNX Runtime against native fp32: cosine > COSINE_MIN, same classes.

    With the ONNX Runtime style, every convolution runs as QLinearConv and the residual add as
    QLinearAdd after ONNX Runtime's own fusion (its optimized model says so).
    """
    net = prototype_cnn()
    sym, params = net["sym"], {**net["args"], **net["aux"]}
    x, labels = net["sample"](8)
    shapes = {"data": x.shape}
    plan, ex = export_one(sym, shapes, params)
    table = mx_trt.calibrate(sym, params, [x], method="minmax", progress=False)
    q, report = quantize_int8(ex, table.ranges(plan.graph), style)
    assert sorted(report.quantized) == ["b1_add", "b1a_conv", "b1b_conv", "b2_conv", "fc", "stem_conv"], report.summary()
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    sess = ort.InferenceSession(_model(q).SerializeToString(), so, providers=["CPUExecutionProvider"])
    got = sess.run(None, {ex.input_names[0]: x})[0]
    ref = run_native(sym, shapes, net["args"], net["aux"], {"data": x})[0]
    assert cosine(got, ref) > COSINE_MIN
    np.testing.assert_array_equal(got.argmax(1), ref.argmax(1))
    np.testing.assert_array_equal(ref.argmax(1), labels)  # the classifier itself is right
    if style is ORT_STYLE:
        ops = collections.Counter(n.op_type for n in onnx.load(str(tmp_path / "opt.onnx")).graph.node)
        assert ops["QLinearConv"] == 4 and ops["QLinearAdd"] == 1 and ops["Conv"] == 0 and ops["FusedConv"] == 0, ops
        assert ops["QGemm"] == 1 and ops["Gemm"] == 0, ops
