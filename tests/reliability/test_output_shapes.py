"""A user converter's or plugin's output of the wrong shape is refused, never broadcast into a wrong answer.

Before, a converter giving ``(N, C, 1, 1)`` where MXNet infers ``(N, C, H, W)``
fed the next ``Add``, which broadcast it: the engine's result differed from
native MXNet with no error. Graph::

    data -> relu -> r -> [Custom rel_shape] -> add(., r)

The exporter runs ONNX shape inference and compares each user converter's
outputs with MXNet's shapes: the subgraph stays native with the reason (fp32
``rtol=1e-4, atol=1e-5`` against MXNet), or the bind raises under strict. The
run-time check of plugin results is in ``test_plugin_faults.py``.
"""
from __future__ import annotations

import mxnet as mx
import numpy as np
import pytest

import mx_trt
from mx_trt.errors import ConversionError, MxTrtError
from mx_trt.export.converters import check
from mx_trt.export.spec import OpSpec
from tests.harness.bindcheck import ATOL, RTOL, bind
from tests.harness.mxcheck import random_inputs
from tests.harness.userops import register_doubling_op

SHAPES = {"data": (2, 8, 16, 16)}


register_doubling_op("rel_shape")


def wrong(ctx):
    """Averages the map away: ``(N, C, 1, 1)``."""
    ctx.emit("GlobalAveragePool", [ctx.inputs[0]], ctx.outputs)


def right(ctx):
    ctx.emit("Mul", [ctx.inputs[0], ctx.const(np.float32(2.0), "two")], ctx.outputs)


@pytest.fixture(autouse=True)
def _clean():
    yield
    for fn in (wrong, right):
        mx_trt.unregister_converter("Custom:rel_shape", fn)


def graph():
    r = mx.sym.relu(mx.sym.var("data"), name="r")
    return mx.sym.elemwise_add(mx.sym.Custom(r, op_type="rel_shape", name="dbl"), r, name="add")


def _run(monkeypatch, on, **env):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return bind(graph(), SHAPES, {}, {}, random_inputs(SHAPES, 1), on, monkeypatch)


@pytest.mark.parametrize("max_batch", ["", "4"])  # a static and a batch-dynamic export
def test_a_converter_of_the_wrong_output_shape_leaves_the_subgraph_native_with_the_reason(monkeypatch, max_batch):
    mx_trt.register_converter("Custom:rel_shape", priority=1)(wrong)
    monkeypatch.setenv("MXNET_TENSORRT_ENGINE_RULE", "always")
    monkeypatch.setenv("MXNET_TENSORRT_MAX_BATCH_SIZE", max_batch)
    _, ref = _run(monkeypatch, False)
    exe, got = _run(monkeypatch, True)
    info = mx_trt.bind_info(exe)
    assert info is not None and info.engines == []
    (reason,) = info.native_failures.values()
    assert reason == (f"user converter {__name__}.wrong: output 0 of node 'dbl' has shape (2, 8, 1, 1), "
                      "MXNet infers (2, 8, 16, 16)")
    np.testing.assert_allclose(got[0], ref[0], rtol=RTOL, atol=ATOL)


def test_under_strict_the_wrong_shape_raises(monkeypatch):
    mx_trt.register_converter("Custom:rel_shape", priority=1)(wrong)
    monkeypatch.setenv("MXNET_TENSORRT_ENGINE_RULE", "always")
    monkeypatch.setenv("MXNET_TENSORRT_STRICT", "1")
    with pytest.raises(MxTrtError, match=r"output 0 of node 'dbl' has shape \(2, 8, 1, 1\), MXNet infers"):
        _run(monkeypatch, True)


def test_a_converter_of_the_right_shape_builds_its_engine(monkeypatch):
    mx_trt.register_converter("Custom:rel_shape", priority=1)(right)
    monkeypatch.setenv("MXNET_TENSORRT_ENGINE_RULE", "always")
    _, ref = _run(monkeypatch, False)
    exe, got = _run(monkeypatch, True)
    info = mx_trt.bind_info(exe)
    assert len(info.engines) == 1 and info.engines[0].run_count == 1 and not info.native_failures
    np.testing.assert_allclose(got[0], ref[0], rtol=RTOL, atol=ATOL)


def test_a_host_function_plugin_whose_outputs_cannot_take_input_0s_shape_stays_native():
    mx_trt.register_plugin("Custom:rel_shape", domain="rel.ops", op_type="Shape",
                           tensorrt=mx_trt.HostFunction(lambda x: x.sum(axis=(2, 3), keepdims=True)))
    try:
        spec = OpSpec("dbl", "Custom", {"op_type": "rel_shape"}, ((2, 8, 16, 16),), ("float32",), ((2, 8, 1, 1),),
                      ("float32",), backend="tensorrt")
        assert check(spec) == ("plugin rel.ops::Shape: output 0 has shape (2, 8, 16, 16) (a HostFunction's outputs "
                               "take input 0's shape), MXNet infers (2, 8, 1, 1) (plugin rel.ops::Shape)")
    finally:
        mx_trt.unregister_plugin("Custom:rel_shape")


def test_the_check_names_converter_node_and_both_shapes():
    from onnx import TensorProto, helper

    from mx_trt.export.shapes import check_user_shapes

    g = helper.make_graph([helper.make_node("GlobalAveragePool", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    check_user_shapes(model, [("user converter m.f", "n", ["y"], [(2, 8, 1, 1)])], "batch")  # agrees: no error
    with pytest.raises(ConversionError, match=r"^user converter m.f: output 0 of node 'n' has shape "
                                              r"\(2, 8, 1, 1\), MXNet infers \(2, 8, 16, 16\)$"):
        check_user_shapes(model, [("user converter m.f", "n", ["y"], [(2, 8, 16, 16)])], "batch")
