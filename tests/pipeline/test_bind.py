"""The pass end to end on small graphs: partitions, weights, engines, native fallbacks per subgraph.

Each test compares with MXNet's own output (fp32: ``rtol=1e-4, atol=1e-5``).
"""
from __future__ import annotations

import logging

import mxnet as mx
import numpy as np
import pytest

import mx_trt
from mx_trt.runtime import fused_op
from mx_trt.errors import BackendUnavailableError, ParamMismatchError, ShapeError
from tests.harness import userops
from tests.harness.bindcheck import ATOL, RTOL, SHAPES, bind, compare, conv_relu, subgraph_names
from tests.harness.mxcheck import random_inputs, random_params


def test_unsupported_in_the_middle(monkeypatch):
    # data -> a_conv -> a_relu -> [sq] -> b_conv -> b_relu
    x = mx.sym.var("data")
    s = conv_relu(userops.square(conv_relu(x, "a"), "sq"), "b")
    exe = compare(s, SHAPES, monkeypatch)
    assert subgraph_names(exe) == [["a_conv", "a_relu"], ["b_conv", "b_relu"]]
    info = mx_trt.bind_info(exe)
    g = info.plan.graph
    assert {g.nodes[n].name: r for n, r in info.plan.partition.native.items()} == {"sq": "no converter for custom operator user_square (add one with mx_trt.register_converter('Custom:user_square'))"}


def test_unsupported_at_inputs_and_outputs(monkeypatch):
    # data -> [sq_in] -> a_conv -> a_relu -> [sq_out]
    x = mx.sym.var("data")
    s = userops.square(conv_relu(userops.square(x, "sq_in"), "a"), "sq_out")
    exe = compare(s, SHAPES, monkeypatch)
    assert subgraph_names(exe) == [["a_conv", "a_relu"]]


def test_output_used_by_several_native_nodes_and_as_graph_output(monkeypatch):
    #            +-> [sq1] --+
    # data -> a -+-> [sq2] --+-> outputs (sq1, sq2, a_relu, b_relu)
    #            +-> b ------+
    x = mx.sym.var("data")
    a = conv_relu(x, "a")
    s = mx.sym.Group([userops.square(a, "sq1"), userops.square(a, "sq2"), a, conv_relu(a, "b")])
    exe = compare(s, SHAPES, monkeypatch)
    assert subgraph_names(exe) == [["a_conv", "a_relu", "b_conv", "b_relu"]]
    fused = mx_trt.bind_info(exe).engines[0]
    assert len(fused.output_names) == 2 and fused.run_count == 1


def test_several_inputs_and_outputs(monkeypatch):
    x, y = mx.sym.var("data"), mx.sym.var("data2")
    a = conv_relu(x, "a")
    b = conv_relu(y, "b")
    s = mx.sym.Group([a + b, userops.square(a - b, "sq")])
    compare(s, {"data": (2, 3, 8, 8), "data2": (2, 3, 8, 8)}, monkeypatch)


def test_memory_only_for_native_nodes(monkeypatch):
    # Weights inside engines are not allocated by the executor; native ones are.
    x = mx.sym.var("data")
    bn = mx.sym.BatchNorm(userops.square(conv_relu(x, "a"), "sq"), name="bn")
    s = mx.sym.Activation(mx.sym.FullyConnected(bn, num_hidden=3, name="fc"), act_type="tanh", name="fc_tanh")
    monkeypatch.setenv("MXNET_TENSORRT_EXCLUDE_OPS", "BatchNorm")
    monkeypatch.setenv("MXNET_TENSORRT_MIN_SUBGRAPH_SIZE", "2")
    exe = compare(s, SHAPES, monkeypatch)
    assert sorted(exe.arg_dict) == ["bn_beta", "bn_gamma", "data"]
    assert sorted(exe.aux_dict) == ["bn_moving_mean", "bn_moving_var"]


def test_aux_states_of_native_nodes_come_from_shared_buffer(monkeypatch):
    # MXNet's own simple_bind does not fill aux states from shared_buffer: the pass does.
    x = mx.sym.var("data")
    s = mx.sym.BatchNorm(userops.square(x, "sq"), name="bn")
    args, aux = random_params(s, SHAPES)
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1")
    exe = s.simple_bind(mx.cpu(), grad_req="null", shared_buffer={**args, **aux}, **SHAPES)
    for k, v in aux.items():
        np.testing.assert_array_equal(exe.aux_dict[k].asnumpy(), v.asnumpy())
    for k, v in args.items():
        np.testing.assert_array_equal(exe.arg_dict[k].asnumpy(), v.asnumpy())


def test_copy_params_from_full_dicts(monkeypatch):
    x = mx.sym.var("data")
    s = mx.sym.FullyConnected(userops.square(conv_relu(x, "a"), "sq"), num_hidden=3, name="fc")
    args, aux = random_params(s, SHAPES)
    monkeypatch.setenv("MXNET_TENSORRT_MIN_SUBGRAPH_SIZE", "2")
    exe, _ = bind(s, SHAPES, args, aux, random_inputs(SHAPES), True, monkeypatch)
    assert "a_conv_weight" not in exe.arg_dict
    exe.copy_params_from(args, aux)  # same values: accepted
    changed = dict(args)
    changed["a_conv_weight"] = args["a_conv_weight"] + 1
    with pytest.raises(ParamMismatchError, match="bind again"):
        exe.copy_params_from(changed, aux)


def test_failed_engine_build_leaves_subgraph_native(monkeypatch, caplog):
    from mx_trt.builder.backends.onnxruntime import OnnxRuntimeBackend
    from mx_trt.errors import EngineBuildError

    def boom(self, exported, options):
        raise EngineBuildError(f"{options.name}: simulated failure")

    monkeypatch.setattr(OnnxRuntimeBackend, "build", boom)
    with caplog.at_level(logging.WARNING, logger="mx_trt"):
        exe = compare(conv_relu(mx.sym.var("data"), "a"), SHAPES, monkeypatch)
    info = mx_trt.bind_info(exe)
    assert info.engines == [] and "trt_subgraph_0" in info.native_failures
    assert any("trt_subgraph_0" in r.getMessage() and "simulated failure" in r.getMessage() for r in caplog.records)


def test_exclude_ops(monkeypatch):
    monkeypatch.setenv("MXNET_TENSORRT_EXCLUDE_OPS", "Activation")
    exe = compare(conv_relu(conv_relu(mx.sym.var("data"), "a"), "b"), SHAPES, monkeypatch)
    info = mx_trt.bind_info(exe)
    reasons = set(info.plan.partition.native.values())
    assert "Activation is listed in MXNET_TENSORRT_EXCLUDE_OPS" in reasons


def test_detection_style_graph_is_one_engine(monkeypatch):
    # ROI pooling and NMS both convert (converters/vision.py, converters/detection.py): one engine, nothing native.
    x = mx.sym.var("data")
    rois = mx.sym.var("rois")
    feat = conv_relu(x, "a")
    pooled = mx.sym.ROIPooling(feat, rois, pooled_size=(2, 2), spatial_scale=1.0, name="roipool")
    head = mx.sym.FullyConnected(pooled, num_hidden=6, name="head")
    nms = mx.sym.contrib.box_nms(mx.sym.reshape(head, shape=(1, -1, 6), name="rs"), overlap_thresh=0.5, name="nms")
    shapes = {"data": (1, 3, 8, 8), "rois": (3, 5)}
    args, aux = random_params(nms, shapes)
    rng = np.random.RandomState(0)
    inputs = {"data": rng.uniform(-1, 1, shapes["data"]).astype("float32"),
              "rois": np.array([[0, 0, 0, 4, 4], [0, 2, 2, 7, 7], [0, 1, 0, 5, 6]], dtype="float32")}
    _, ref = bind(nms, shapes, args, aux, inputs, False, monkeypatch)
    exe, got = bind(nms, shapes, args, aux, inputs, True, monkeypatch)
    np.testing.assert_allclose(got[0], ref[0], rtol=RTOL, atol=ATOL)
    info = mx_trt.bind_info(exe)
    assert not info.plan.partition.native
    assert len(info.engines) == 1


def test_weight_missing_from_shared_buffer_is_a_logged_runtime_input(monkeypatch, caplog):
    s = mx.sym.FullyConnected(conv_relu(mx.sym.var("data"), "a"), num_hidden=3, name="fc")
    args, aux = random_params(s, SHAPES)
    partial = {k: v for k, v in args.items() if k != "fc_weight"}
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1")
    with caplog.at_level(logging.WARNING, logger="mx_trt"):
        exe = s.simple_bind(mx.cpu(), grad_req="null", shared_buffer={**partial, **aux}, **SHAPES)
    assert any("fc_weight has no value in shared_buffer" in r.getMessage() for r in caplog.records)
    assert sorted(exe.arg_dict) == ["data", "fc_weight"]
    # Set later, it is read by the engine at run time: results match MXNet.
    x = random_inputs(SHAPES)["data"]
    exe.arg_dict["fc_weight"][:] = args["fc_weight"]
    exe.arg_dict["data"][:] = x
    exe.forward(is_train=False)
    _, ref = bind(s, SHAPES, args, aux, {"data": x}, False, monkeypatch)
    np.testing.assert_allclose(exe.outputs[0].asnumpy(), ref[0], rtol=RTOL, atol=ATOL)
