"""ONNX Runtime engines hold the weights once: built over the caller's memory, stored without them.

Outputs are compared with MXNet's own (fp32: ``rtol=1e-4``, ``atol=1e-5`` times the output's
largest magnitude: dot products of a few hundred terms with outputs near 100).
"""
from __future__ import annotations

import json
import os

import mxnet as mx
import numpy as np
import pytest

import mx_trt
from mx_trt.builder import engines
from mx_trt.builder.backends import onnxruntime as ort_backend
from mx_trt.builder.backends.base import BuildOptions
from mx_trt.errors import EngineBuildError
from mx_trt.frontends.hook import disabled
from tests.harness.mxcheck import OP_TOL, random_params

RTOL, ATOL = OP_TOL["float32"]


def close(got, ref):
    np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL * max(1.0, float(np.abs(ref).max())))


def mlp():
    x = mx.sym.var("data")
    h = mx.sym.Activation(mx.sym.FullyConnected(x, num_hidden=256, name="fc1"), act_type="relu", name="r")
    return mx.sym.FullyConnected(h, num_hidden=64, name="fc2")


def conv_bn():
    x = mx.sym.var("data")
    c = mx.sym.Convolution(x, num_filter=16, kernel=(3, 3), pad=(1, 1), name="conv")
    b = mx.sym.BatchNorm(c, fix_gamma=False, name="bn")
    return mx.sym.FullyConnected(mx.sym.relu(b, name="relu"), num_hidden=10, name="fc")


def _bind(sym, shapes, args, aux, x):
    exe = sym.simple_bind(mx.cpu(), grad_req="null", shared_buffer={**args, **aux}, **shapes)
    exe.arg_dict["data"][:] = x
    exe.forward(is_train=False)
    return exe, exe.outputs[0].asnumpy()


def _native(sym, shapes, args, aux, x):
    with disabled():
        exe = sym.simple_bind(mx.cpu(), grad_req="null", **shapes)
    exe.copy_params_from(args, aux)
    exe.arg_dict["data"][:] = x
    exe.forward(is_train=False)
    return exe.outputs[0].asnumpy()


def _entry(cache_dir):
    (meta,) = [os.path.join(r, f) for r, _, fs in os.walk(cache_dir) for f in fs if f == "meta.json"]
    with open(meta, encoding="utf-8") as f:
        return os.path.dirname(meta), json.load(f)["meta"]["engine"]


@pytest.mark.parametrize("model, shapes, weights_fed", [
    (mlp, {"data": (2, 512)}, {"fc1_weight", "fc2_weight"}),
    (conv_bn, {"data": (1, 3, 16, 16)}, {"fc_weight"}),
])
def test_stored_engine_holds_no_weight_used_as_is(model, shapes, weights_fed, monkeypatch, tmp_path):
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1")
    monkeypatch.setenv("MXNET_TENSORRT_CACHE_DIR", str(tmp_path))
    sym = model()
    args, aux = random_params(sym, shapes, 0)
    x = np.random.RandomState(1).uniform(-1, 1, shapes["data"]).astype("float32")
    ref = _native(sym, shapes, args, aux, x)
    exe, cold = _bind(sym, shapes, args, aux, x)
    assert mx_trt.bind_info(exe).builds == 1
    close(cold, ref)
    folder, meta = _entry(tmp_path)
    assert meta["format"] == "onnx-fed" and weights_fed <= set(meta["fed"])
    weight_bytes = sum(v.size * 4 for k, v in args.items() if k in meta["fed"])
    stored = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
    assert stored < weight_bytes / 4, f"{stored} bytes stored for {weight_bytes} bytes of weights fed at load"
    del exe
    engines.clear_pool()
    exe, warm = _bind(sym, shapes, args, aux, x)
    info = mx_trt.bind_info(exe)
    assert (info.builds, info.loads) == (0, 1) and info.engines[0].run_count == 1
    close(warm, ref)


def test_values_derived_by_the_optimizers_are_stored(monkeypatch, tmp_path):
    # BatchNorm folded into the convolution: a value that depends on the weights, kept in model.data.
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1")
    monkeypatch.setenv("MXNET_TENSORRT_CACHE_DIR", str(tmp_path))
    shapes = {"data": (1, 3, 16, 16)}
    sym = conv_bn()
    args, aux = random_params(sym, shapes, 0)
    _bind(sym, shapes, args, aux, np.zeros(shapes["data"], "float32"))
    folder, meta = _entry(tmp_path)
    assert meta["stored_bytes"] > 0 and os.path.getsize(os.path.join(folder, "model.data")) >= meta["stored_bytes"]
    assert "conv_weight" not in meta["fed"]


def test_stored_engine_without_its_weights_is_a_build_error(monkeypatch, tmp_path):
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1")
    monkeypatch.setenv("MXNET_TENSORRT_CACHE_DIR", str(tmp_path))
    shapes = {"data": (2, 512)}
    sym = mlp()
    args, aux = random_params(sym, shapes, 0)
    _bind(sym, shapes, args, aux, np.zeros(shapes["data"], "float32"))
    folder, meta = _entry(tmp_path)
    backend = ort_backend.OnnxRuntimeBackend()
    with pytest.raises(EngineBuildError, match="needs its weights fed"):
        backend.load(meta, folder, BuildOptions(name="sg"))
    with pytest.raises(EngineBuildError, match="fc1_weight"):
        backend.load(meta, folder, BuildOptions(name="sg", extra={"weights": lambda: {}}))


def test_unpacked_engine_reads_the_callers_memory(monkeypatch, tmp_path):
    # Past PREPACK_MAX_BYTES ONNX Runtime keeps no copy at all: it reads the NDArray itself.
    monkeypatch.setattr(ort_backend, "PREPACK_MAX_BYTES", 0)
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1")
    monkeypatch.setenv("MXNET_TENSORRT_CACHE_DIR", "")
    shapes = {"data": (2, 512)}
    sym = mlp()
    args, aux = random_params(sym, shapes, 0)
    x = np.random.RandomState(1).uniform(-1, 1, shapes["data"]).astype("float32")
    exe, before = _bind(sym, shapes, args, aux, x)
    args["fc2_weight"][:] = args["fc2_weight"] * 2  # in place: the engine's weight is this memory
    exe.forward(is_train=False)
    after = exe.outputs[0].asnumpy()
    bias = args["fc2_bias"].asnumpy()
    np.testing.assert_allclose(after - bias, 2 * (before - bias), rtol=1e-4, atol=1e-4)
