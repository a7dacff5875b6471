"""Failures at run time are typed errors naming the subgraph, the node, the operator and the converter.

Before, a converter whose output broke an ONNX Runtime kernel surfaced as a raw
``MXNetError`` (MXNet's failed check, ONNX Runtime's message printed apart), and
``executor.reshape`` after ``unregister_converter`` as a raw traceback. Graph::

    data -> relu -> r -> [Custom rel_runtime] -> add(., r)      (one engine)
"""
from __future__ import annotations

import mxnet as mx
import numpy as np
import pytest

import mx_trt
from mx_trt.errors import EngineRunError, UnsupportedOpError
from tests.harness.bindcheck import ATOL, RTOL, bind
from tests.harness.mxcheck import random_inputs
from tests.harness.userops import register_doubling_op

SHAPES = {"data": (2, 8, 4, 4)}


register_doubling_op("rel_runtime")


def breaks_the_kernel(ctx):
    """Reshapes to a shape known only at run time (ONNX shape inference cannot see it): (N, C, 1, 1)."""
    shape = ctx.emit("Shape", [ctx.emit("GlobalAveragePool", [ctx.inputs[0]])[0]])[0]
    ctx.emit("Reshape", [ctx.inputs[0], shape], ctx.outputs)


def doubles(ctx):
    ctx.emit("Mul", [ctx.inputs[0], ctx.const(np.float32(2.0), "two")], ctx.outputs)


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    monkeypatch.setenv("MXNET_TENSORRT_ENGINE_RULE", "always")
    monkeypatch.setenv("MXNET_TENSORRT_CACHE_DIR", "")
    yield
    for fn in (breaks_the_kernel, doubles):
        mx_trt.unregister_converter("Custom:rel_runtime", fn)


def graph():
    r = mx.sym.relu(mx.sym.var("data"), name="r")
    return mx.sym.elemwise_add(mx.sym.Custom(r, op_type="rel_runtime", name="dbl"), r, name="add")


def test_a_kernel_failure_is_an_engine_run_error_naming_node_op_and_converter(monkeypatch):
    mx_trt.register_converter("Custom:rel_runtime")(breaks_the_kernel)
    inputs = random_inputs(SHAPES, 1)
    with pytest.raises(EngineRunError) as info:
        bind(graph(), SHAPES, {}, {}, inputs, True, monkeypatch)
    text = str(info.value)
    assert text.startswith("trt_subgraph_0: ONNX Runtime failed in node 'dbl' (Custom, user converter "
                           f"{__name__}.breaks_the_kernel)"), text
    assert "cannot be reshaped to the requested shape" in text


def test_reshape_after_unregister_converter_is_a_typed_error_and_the_executor_keeps_working(monkeypatch):
    mx_trt.register_converter("Custom:rel_runtime")(doubles)
    inputs = random_inputs(SHAPES, 1)
    _, ref = bind(graph(), SHAPES, {}, {}, inputs, False, monkeypatch)
    exe, got = bind(graph(), SHAPES, {}, {}, inputs, True, monkeypatch)
    assert len(mx_trt.bind_info(exe).engines) == 1
    np.testing.assert_allclose(got[0], ref[0], rtol=RTOL, atol=ATOL)
    mx_trt.unregister_converter("Custom:rel_runtime", doubles)
    with pytest.raises(UnsupportedOpError, match=r"^trt_subgraph_0: batch 3 is not the static engine's batch 2, "
                                                 r"and no engine can be made for it: subgraph trt_subgraph_0: no "
                                                 r"converter for Custom \(node 'dbl'\)$"):
        exe.reshape(data=(3, 8, 4, 4))
    exe.forward(is_train=False)  # the bound executor still runs its engine
    np.testing.assert_allclose(exe.outputs[0].asnumpy(), ref[0], rtol=RTOL, atol=ATOL)
