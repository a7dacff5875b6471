"""Dynamic batch through optimization profiles, and fp16 engines, on the CPU backend.

Tolerances: fp32 ``rtol=1e-4, atol=1e-5`` (tests.harness.mxcheck.OP_TOL); fp16
``max|err| <= 2e-2 * max|native|`` (half precision keeps ~3 decimal digits and
rounding accumulates over a few layers).
"""
from __future__ import annotations

import logging

import mxnet as mx
import numpy as np
import pytest

import mx_trt
from mx_trt.frontends.hook import disabled
from mx_trt.errors import ShapeError
from mx_trt.builder.profiles import batch_ranges
from mx_trt.settings import Settings
from tests.harness.mxcheck import OP_TOL, random_params

RTOL, ATOL = OP_TOL["float32"]


def cnn():
    x = mx.sym.var("data")
    c = mx.sym.Convolution(x, num_filter=4, kernel=(3, 3), pad=(1, 1), name="conv")
    r = mx.sym.Activation(c, act_type="relu", name="relu")
    p = mx.sym.Pooling(r, kernel=(2, 2), stride=(2, 2), pool_type="max", name="pool")
    return mx.sym.FullyConnected(p, num_hidden=5, name="fc")


def native(sym, args, aux, x):
    with disabled():
        exe = sym.simple_bind(mx.cpu(), grad_req="null", data=x.shape)
    exe.copy_params_from(args, aux)
    exe.arg_dict["data"][:] = x
    exe.forward(is_train=False)
    return exe.outputs[0].asnumpy()


def data(batch, seed=0):
    return np.random.RandomState(seed + batch).uniform(-1, 1, (batch, 3, 8, 8)).astype("float32")


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("MXNET_TENSORRT_CACHE_DIR", "")
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1")
    yield
    mx_trt.set_optimization_profiles(None)


def test_batch_ranges_from_settings():
    shapes = {"data": (2, 3, 8, 8)}
    assert batch_ranges(Settings(), shapes) == []
    assert batch_ranges(Settings(max_batch_size=8), shapes) == [(1, 2, 8)]
    with pytest.raises(ShapeError, match="below the bound batch"):
        batch_ranges(Settings(max_batch_size=1), shapes)
    prof = [{"data": ((1, 3, 8, 8), (2, 3, 8, 8), (4, 3, 8, 8))}, {"data": ((5, 3, 8, 8), (8, 3, 8, 8), (16, 3, 8, 8))}]
    assert batch_ranges(Settings(profiles=prof), shapes) == [(1, 2, 4), (5, 8, 16)]
    with pytest.raises(ShapeError, match="only the batch dimension"):
        batch_ranges(Settings(profiles=[{"data": ((1, 3, 8, 8), (2, 3, 8, 8), (4, 3, 9, 8))}]), shapes)
    with pytest.raises(ShapeError, match="in none of the profiles"):
        batch_ranges(Settings(profiles=[{"data": ((3, 3, 8, 8), (3, 3, 8, 8), (4, 3, 8, 8))}]), shapes)
    with pytest.raises(ShapeError, match="not a data input"):
        batch_ranges(Settings(profiles=[{"x": ((1, 3, 8, 8), (2, 3, 8, 8), (4, 3, 8, 8))}]), shapes)


def test_profiles_from_environment(monkeypatch):
    monkeypatch.setenv("MXNET_TENSORRT_PROFILES", '[{"data": [[1,3,8,8],[2,3,8,8],[4,3,8,8]]}]')
    assert Settings.from_env().profiles == [{"data": ((1, 3, 8, 8), (2, 3, 8, 8), (4, 3, 8, 8))}]
    monkeypatch.setenv("MXNET_TENSORRT_PROFILES", "[{")
    with pytest.raises(mx_trt.MxTrtError, match="not valid JSON"):
        Settings.from_env()


def test_reshape_within_range_reuses_the_engine_and_outside_rebuilds(monkeypatch, caplog):
    monkeypatch.setenv("MXNET_TENSORRT_MAX_BATCH_SIZE", "8")
    sym = cnn()
    args, aux = random_params(sym, {"data": (2, 3, 8, 8)})
    exe = sym.simple_bind(mx.cpu(), grad_req="null", data=(2, 3, 8, 8), shared_buffer={**args, **aux})
    info = mx_trt.bind_info(exe)
    fused = info.engines[0]
    assert fused.engine.batch_ranges == [(1, 2, 8)] and fused.build_count == 1 and info.builds == 1
    for b in (2, 5, 8, 1):
        e = exe.reshape(allow_up_sizing=True, data=(b, 3, 8, 8))
        x = data(b)
        e.arg_dict["data"][:] = x
        e.forward(is_train=False)
        np.testing.assert_allclose(e.outputs[0].asnumpy(), native(sym, args, aux, x), rtol=RTOL, atol=ATOL)
    assert fused.build_count == 1
    with caplog.at_level(logging.WARNING, logger="mx_trt"):
        e = exe.reshape(allow_up_sizing=True, data=(12, 3, 8, 8))
    assert fused.build_count == 2
    assert any("outside the engine's profiles" in r.getMessage() for r in caplog.records)
    assert fused.engine.batch_ranges == [(1, 12, 12)]
    x = data(12)
    e.arg_dict["data"][:] = x
    e.forward(is_train=False)
    np.testing.assert_allclose(e.outputs[0].asnumpy(), native(sym, args, aux, x), rtol=RTOL, atol=ATOL)


def test_new_bind_within_range_reuses_the_engine(monkeypatch):
    monkeypatch.setenv("MXNET_TENSORRT_MAX_BATCH_SIZE", "8")
    sym = cnn()
    args, aux = random_params(sym, {"data": (2, 3, 8, 8)})
    first = sym.simple_bind(mx.cpu(), grad_req="null", data=(2, 3, 8, 8), shared_buffer={**args, **aux})
    second = sym.simple_bind(mx.cpu(), grad_req="null", data=(6, 3, 8, 8), shared_buffer={**args, **aux})
    i1, i2 = mx_trt.bind_info(first), mx_trt.bind_info(second)
    assert (i1.builds, i2.builds, i2.reuses) == (1, 0, 1)
    assert i2.engines[0].engine is i1.engines[0].engine
    x = data(6)
    second.arg_dict["data"][:] = x
    second.forward(is_train=False)
    np.testing.assert_allclose(second.outputs[0].asnumpy(), native(sym, args, aux, x), rtol=RTOL, atol=ATOL)
    # Different weights: a different engine.
    args2 = dict(args, fc_weight=args["fc_weight"] * 2)
    third = sym.simple_bind(mx.cpu(), grad_req="null", data=(2, 3, 8, 8), shared_buffer={**args2, **aux})
    assert mx_trt.bind_info(third).builds == 1


def test_batch_dependent_export_falls_back_to_a_static_engine(monkeypatch, caplog):
    # reshape with a literal batch: the export at B+1 differs, so no dynamic batch.
    monkeypatch.setenv("MXNET_TENSORRT_MAX_BATCH_SIZE", "8")
    x = mx.sym.var("data")
    s = mx.sym.Activation(mx.sym.reshape(mx.sym.Activation(x, act_type="relu", name="r0"), shape=(2, -1), name="rs"),
                          act_type="tanh", name="t")
    with caplog.at_level(logging.INFO, logger="mx_trt"):
        exe = s.simple_bind(mx.cpu(), grad_req="null", data=(2, 3, 4), shared_buffer={"unused": mx.nd.zeros(1)})
    fused = mx_trt.bind_info(exe).engines[0]
    assert fused.engine.batch_ranges == []
    assert any("static engine" in r.getMessage() for r in caplog.records)
    # Another batch: the static engine cannot take it, so executor.reshape gets one built for it, as natively.
    e = exe.reshape(allow_up_sizing=True, data=(3, 3, 4))
    x = np.random.RandomState(0).uniform(-1, 1, (3, 3, 4)).astype("float32")
    e.arg_dict["data"][:] = x
    e.forward(is_train=False)
    with disabled():
        n = s.simple_bind(mx.cpu(), grad_req="null", data=(3, 3, 4))
    n.arg_dict["data"][:] = x
    n.forward(is_train=False)
    np.testing.assert_allclose(e.outputs[0].asnumpy(), n.outputs[0].asnumpy(), rtol=RTOL, atol=ATOL)
    assert fused.rebuilds == 1 and e.outputs[0].shape == (2, 18)


def test_explicit_profiles_select_by_batch(monkeypatch):
    mx_trt.set_optimization_profiles([
        {"data": ((1, 3, 8, 8), (2, 3, 8, 8), (4, 3, 8, 8))},
        {"data": ((5, 3, 8, 8), (8, 3, 8, 8), (16, 3, 8, 8))},
    ])
    sym = cnn()
    args, aux = random_params(sym, {"data": (2, 3, 8, 8)})
    exe = sym.simple_bind(mx.cpu(), grad_req="null", data=(2, 3, 8, 8), shared_buffer={**args, **aux})
    fused = mx_trt.bind_info(exe).engines[0]
    assert fused.engine.batch_ranges == [(1, 2, 4), (5, 8, 16)]
    e = exe.reshape(allow_up_sizing=True, data=(16, 3, 8, 8))
    assert fused.build_count == 1
    x = data(16)
    e.arg_dict["data"][:] = x
    e.forward(is_train=False)
    np.testing.assert_allclose(e.outputs[0].asnumpy(), native(sym, args, aux, x), rtol=RTOL, atol=ATOL)


def test_batch_is_one_named_dimension_in_the_export(monkeypatch):
    import onnx

    from mx_trt.graph.importer import symbol_to_graph
    from mx_trt.export.dynamic import SubgraphExporter
    from mx_trt.passes.fuse import boundary

    x, y = mx.sym.var("data"), mx.sym.var("data2")
    s = mx.sym.Group([mx.sym.relu(x) + mx.sym.relu(y), mx.sym.sigmoid(x)])
    shapes = {"data": (2, 3), "data2": (2, 3)}
    g = symbol_to_graph(s, shapes)
    ins, outs = boundary(g, g.op_nodes(), set())
    ex = SubgraphExporter(s, shapes, {}, g, {}, False, [(1, 2, 8)]).export("sg", g.op_nodes(), ins, outs)
    dims = [v.type.tensor_type.shape.dim[0].dim_param for v in list(ex.model.graph.input) + list(ex.model.graph.output)]
    assert dims == ["batch"] * 4
    onnx.checker.check_model(ex.model)


def test_fp16_engines(monkeypatch):
    from mx_trt.export.subgraph import export_subgraph
    from mx_trt.export.precision import to_fp16
    from mx_trt.graph.importer import symbol_to_graph
    from mx_trt.passes.fuse import boundary

    sym = cnn()
    shapes = {"data": (2, 3, 8, 8)}
    args, aux = random_params(sym, shapes)
    monkeypatch.setenv("MXNET_TENSORRT_USE_FP16", "1")
    exe = sym.simple_bind(mx.cpu(), grad_req="null", shared_buffer={**args, **aux}, **shapes)
    x = data(2)
    exe.arg_dict["data"][:] = x
    exe.forward(is_train=False)
    got = exe.outputs[0].asnumpy()
    assert got.dtype == np.float32
    ref = native(sym, args, aux, x)
    assert np.abs(got - ref).max() <= 2e-2 * np.abs(ref).max()
    # The graph carries the types: fp16 weights, float32 edges.
    g = symbol_to_graph(sym, {**shapes, **{k: v.shape for k, v in args.items()}})
    ins, outs = boundary(g, g.op_nodes(), {n.id for n in g.nodes if n.name in args})
    ex = to_fp16(export_subgraph(g, g.op_nodes(), ins, outs, {k: v.asnumpy() for k, v in args.items()}))
    import onnx

    onnx.shape_inference.infer_shapes(ex.model, check_type=True, strict_mode=True)
    assert {t.data_type for t in ex.model.graph.initializer} == {onnx.TensorProto.FLOAT16}
    assert [v.type.tensor_type.elem_type for v in ex.model.graph.input] == [onnx.TensorProto.FLOAT]
    assert [v.type.tensor_type.elem_type for v in ex.model.graph.output] == [onnx.TensorProto.FLOAT]
