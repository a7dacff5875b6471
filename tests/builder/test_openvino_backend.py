"""OpenVINO engines (``backend='openvino'``) against native MXNet: binds, batch ranges, the plan cache, precisions.

Tolerances against MXNet's own output: fp32 ``rtol=1e-4``, ``atol=1e-5`` times the
output's largest magnitude (the ONNX Runtime backend's, tests.harness.mxcheck.OP_TOL: sums of a few
hundred to a few thousand products, computed in float32 by other kernels); a whole zoo model
``1e-4 + 1e-4 * max|native|`` as in tests/models/test_model_zoo.py; fp16 engines
tests.harness.mxcheck.OP_TOL["float16"]; int8 the cosine and top-1 bounds of tests.harness.int8check; the GluonCV and
GluonNLP engines tests/models/compare.py's (``1e-4 + 1e-3 * max|ref|`` per tensor, integers exactly).
"""
from __future__ import annotations

import collections
import json
import logging
import os
import shutil
import sys

import mxnet as mx
import numpy as np
import pytest

import mx_trt
from mx_trt.builder import engines
from mx_trt.builder.backends import BACKENDS, select_backend
from mx_trt.builder.backends import openvino as ov_backend
from mx_trt.builder.backends.base import BuildOptions
from mx_trt.builder.backends.onnxruntime import OnnxRuntimeBackend
from mx_trt.builder.cpus import engine_threads
from mx_trt.errors import BackendUnavailableError, EngineBuildError
from mx_trt.frontends.hook import disabled
from tests.harness.int8check import COSINE_MIN, TOP1_MIN, cosine, prototype_cnn
from tests.harness.mxcheck import OP_TOL, random_params

pytestmark = pytest.mark.skipif(ov_backend.OpenVinoBackend.unavailable_reason() is not None and
                                os.environ.get("USE_OPENVINO", "1") == "0",
                                reason="built with USE_OPENVINO=0")

RTOL, ATOL = OP_TOL["float32"]


def close(got, ref, rtol=RTOL, atol=ATOL):
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol * max(1.0, float(np.abs(ref).max())))


def mlp():
    x = mx.sym.var("data")
    h = mx.sym.Activation(mx.sym.FullyConnected(x, num_hidden=256, name="fc1"), act_type="relu", name="r")
    return mx.sym.FullyConnected(h, num_hidden=64, name="fc2")


def conv_bn():
    x = mx.sym.var("data")
    c = mx.sym.Convolution(x, num_filter=16, kernel=(3, 3), pad=(1, 1), name="conv")
    b = mx.sym.BatchNorm(c, fix_gamma=False, name="bn")
    return mx.sym.FullyConnected(mx.sym.relu(b, name="relu"), num_hidden=10, name="fc")


def two_outputs():
    # Two outputs of one engine, a concat and a softmax: outputs written in place, in their order.
    x = mx.sym.var("data")
    a = mx.sym.Convolution(x, num_filter=8, kernel=(1, 1), name="ca")
    b = mx.sym.Convolution(x, num_filter=8, kernel=(3, 3), pad=(1, 1), name="cb")
    cat = mx.sym.concat(mx.sym.relu(a, name="ra"), mx.sym.sigmoid(b, name="sb"), dim=1, name="cat")
    p = mx.sym.Pooling(cat, kernel=(2, 2), stride=(2, 2), pool_type="avg", name="pool")
    s = mx.sym.softmax(mx.sym.FullyConnected(p, num_hidden=5, name="fc"), name="sm")
    return mx.sym.Group([s, mx.sym.tanh(p, name="t")])


def _env(monkeypatch, cache_dir="", **extra):
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1")
    monkeypatch.setenv("MXNET_TENSORRT_BACKEND", "openvino")
    monkeypatch.setenv("MXNET_TENSORRT_CACHE_DIR", str(cache_dir))
    for k, v in extra.items():
        monkeypatch.setenv(k, v)


def _bind(sym, shapes, args, aux, x):
    exe = sym.simple_bind(mx.cpu(), grad_req="null", shared_buffer={**args, **aux}, **shapes)
    exe.arg_dict["data"][:] = x
    exe.forward(is_train=False)
    return exe, [o.asnumpy() for o in exe.outputs]


def _native(sym, shapes, args, aux, x):
    with disabled():
        exe = sym.simple_bind(mx.cpu(), grad_req="null", **shapes)
    exe.copy_params_from(args, aux)
    exe.arg_dict["data"][:] = x
    exe.forward(is_train=False)
    return [o.asnumpy() for o in exe.outputs]


def _entry(cache_dir):
    (meta,) = [os.path.join(r, f) for r, _, fs in os.walk(cache_dir) for f in fs if f == "meta.json"]
    with open(meta, encoding="utf-8") as f:
        return os.path.dirname(meta), json.load(f)["meta"]["engine"]


def _data(shape, seed=1):
    return np.random.RandomState(seed).uniform(-1, 1, shape).astype("float32")


# --------------------------------------------------------------------------- registry and availability


def test_registered_selectable_by_name_and_not_the_default():
    assert BACKENDS["openvino"] is ov_backend.OpenVinoBackend
    assert ov_backend.OpenVinoBackend.unavailable_reason() is None
    assert isinstance(select_backend("cpu", "openvino"), ov_backend.OpenVinoBackend)
    assert isinstance(select_backend("cpu"), OnnxRuntimeBackend)


def test_missing_openvino_forced_by_name_is_an_error_naming_the_switch(monkeypatch):
    monkeypatch.setitem(sys.modules, "openvino", None)  # import raises ImportError
    reason = ov_backend.OpenVinoBackend.unavailable_reason()
    assert reason is not None and "USE_OPENVINO=1" in reason
    with pytest.raises(BackendUnavailableError, match="MXNET_TENSORRT_BACKEND='openvino' cannot be used"):
        select_backend("cpu", "openvino")
    assert isinstance(select_backend("cpu"), OnnxRuntimeBackend)  # the default does not need it
    # A bind that forces it raises, strict or not: what was asked for by name is never replaced.
    _env(monkeypatch)
    sym, shapes = mlp(), {"data": (2, 512)}
    args, aux = random_params(sym, shapes, 0)
    with pytest.raises(BackendUnavailableError, match="openvino is not installed"):
        sym.simple_bind(mx.cpu(), grad_req="null", shared_buffer={**args, **aux}, **shapes)


def test_version_and_device_signature_can_name_folders():
    b = ov_backend.OpenVinoBackend()
    assert b.version().startswith("openvino-2024.6.0") and "/" not in b.version()
    sig = b.device_signature(-1)
    with open("/proc/cpuinfo") as f:
        flags = f.read()
    # the signature names the CPU's instruction sets: a CPU with AVX2 says so
    assert ("avx2" in sig) == ("avx2" in flags.split())


# --------------------------------------------------------------------------- against native MXNet


@pytest.mark.parametrize("model, shapes", [
    (mlp, {"data": (2, 512)}),
    (conv_bn, {"data": (1, 3, 16, 16)}),
    (two_outputs, {"data": (2, 3, 12, 12)}),
])
def test_bind_matches_native(model, shapes, monkeypatch):
    _env(monkeypatch)
    sym = model()
    args, aux = random_params(sym, shapes, 0)
    x = _data(shapes["data"])
    ref = _native(sym, shapes, args, aux, x)
    exe, got = _bind(sym, shapes, args, aux, x)
    info = mx_trt.bind_info(exe)
    assert info.backend == "openvino" and info.builds == len(info.engines) == 1
    assert isinstance(info.engines[0].engine, ov_backend.OpenVinoEngine)
    for g, r in zip(got, ref):
        close(g, r)
    # A second forward on new data reads the NDArrays again (the tensors are views, not copies).
    x2 = _data(shapes["data"], seed=2)
    exe.arg_dict["data"][:] = x2
    exe.forward(is_train=False)
    for g, r in zip(exe.outputs, _native(sym, shapes, args, aux, x2)):
        close(g.asnumpy(), r)
    assert info.engines[0].run_count == 2


def test_engine_is_compiled_for_float32_latency_on_the_usable_cpus(monkeypatch):
    _env(monkeypatch)
    sym, shapes = conv_bn(), {"data": (1, 3, 16, 16)}
    args, aux = random_params(sym, shapes, 0)
    exe, _ = _bind(sym, shapes, args, aux, _data(shapes["data"]))
    compiled = mx_trt.bind_info(exe).engines[0].engine.compiled
    assert str(compiled.get_property("INFERENCE_PRECISION_HINT")) == "<Type: 'float32'>"
    assert str(compiled.get_property("PERFORMANCE_HINT")).endswith("LATENCY")
    assert compiled.get_property("INFERENCE_NUM_THREADS") == engine_threads()


def test_gluon_takes_the_backend_option(monkeypatch):
    # The ``backend`` option (MXNet 2.0's backend_opts spelling), the environment variable unset.
    from mxnet import gluon

    from mx_trt.frontends.gluon import bind_infos

    monkeypatch.delenv("MXNET_TENSORRT_BACKEND", raising=False)
    monkeypatch.setenv("MXNET_TENSORRT_CACHE_DIR", "")
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(256, activation="relu", in_units=512), gluon.nn.Dense(64, in_units=256))
    net.initialize(mx.init.Xavier())
    x = mx.nd.array(_data((2, 512)))
    ref = net(x).asnumpy()
    net.hybridize(backend="TensorRT", backend_opts={"backend": "openvino", "strict": True})
    got = net(x).asnumpy()
    (info,) = bind_infos(net)
    assert info.backend == "openvino" and info.engines[0].run_count == 1
    close(got, ref)


def test_zoo_model_matches_native(monkeypatch):
    from tests.models.test_model_zoo import zoo_model

    _env(monkeypatch)
    sym, args, aux, _ = zoo_model("mobilenetv2_0.25")
    shapes = {"data": (2, 3, 64, 64)}
    x = _data(shapes["data"])
    ref = _native(sym, shapes, args, aux, x)[0]
    exe, got = _bind(sym, shapes, args, aux, x)
    info = mx_trt.bind_info(exe)
    assert info.backend == "openvino" and info.engines and not info.native_failures
    np.testing.assert_allclose(got[0], ref, rtol=0, atol=1e-4 + 1e-4 * float(np.abs(ref).max()))


# --------------------------------------------------------------------------- batch ranges


def test_batch_dynamic_engine_runs_any_batch_in_its_range(monkeypatch):
    _env(monkeypatch, MXNET_TENSORRT_MAX_BATCH_SIZE="8")
    sym = conv_bn()
    shapes = {"data": (4, 3, 16, 16)}
    args, aux = random_params(sym, shapes, 0)
    exe, got = _bind(sym, shapes, args, aux, _data(shapes["data"]))
    close(got[0], _native(sym, shapes, args, aux, _data(shapes["data"]))[0])
    info = mx_trt.bind_info(exe)
    (fused,) = info.engines
    assert fused.engine.batch_ranges and fused.engine.covers(1) and fused.engine.covers(8)
    assert not fused.engine.covers(9)
    for batch in (1, 8, 3):
        shp = {"data": (batch, 3, 16, 16)}
        x = _data(shp["data"], seed=batch)
        small = exe.reshape(allow_up_sizing=True, **shp)
        small.arg_dict["data"][:] = x
        small.forward(is_train=False)
        close(small.outputs[0].asnumpy(), _native(sym, shp, args, aux, x)[0])
    assert fused.rebuilds == 0 and info.builds == 1


# --------------------------------------------------------------------------- the plan cache


def test_compiled_model_round_trips_through_the_plan_cache(monkeypatch, tmp_path):
    _env(monkeypatch, tmp_path, MXNET_TENSORRT_MAX_BATCH_SIZE="4")
    sym, shapes = conv_bn(), {"data": (2, 3, 16, 16)}
    args, aux = random_params(sym, shapes, 0)
    x = _data(shapes["data"])
    ref = _native(sym, shapes, args, aux, x)[0]
    exe, cold = _bind(sym, shapes, args, aux, x)
    assert (mx_trt.bind_info(exe).builds, mx_trt.bind_info(exe).loads) == (1, 0)
    close(cold[0], ref)
    folder, meta = _entry(tmp_path)
    assert meta["format"] == ov_backend.FORMAT and os.path.getsize(os.path.join(folder, meta["file"])) > 0
    assert meta["batch_ranges"] and meta["config"]["INFERENCE_PRECISION_HINT"] == "f32"
    del exe
    engines.clear_pool()
    exe, warm = _bind(sym, shapes, args, aux, x)
    info = mx_trt.bind_info(exe)
    assert (info.builds, info.loads) == (0, 1) and info.engines[0].source == "disk"
    assert info.engines[0].engine.batch_ranges == [tuple(r) for r in meta["batch_ranges"]]
    close(warm[0], ref)
    np.testing.assert_array_equal(warm[0], cold[0])  # the same compiled kernels


def test_corrupt_cached_blob_is_rebuilt_with_a_warning(monkeypatch, tmp_path, caplog):
    _env(monkeypatch, tmp_path)
    sym, shapes = mlp(), {"data": (2, 512)}
    args, aux = random_params(sym, shapes, 0)
    x = _data(shapes["data"])
    ref = _native(sym, shapes, args, aux, x)[0]
    exe, _ = _bind(sym, shapes, args, aux, x)
    del exe
    engines.clear_pool()
    folder, meta = _entry(tmp_path)
    blob = os.path.join(folder, meta["file"])
    size = os.path.getsize(blob)
    with open(blob, "r+b") as f:
        f.seek(size // 2)
        f.write(b"\xff" * 64)
    with caplog.at_level(logging.WARNING):
        exe, got = _bind(sym, shapes, args, aux, x)
    info = mx_trt.bind_info(exe)
    assert (info.builds, info.loads) == (1, 0)
    assert any(r.levelno == logging.WARNING and "rebuil" in r.getMessage() for r in caplog.records), caplog.text
    close(got[0], ref)


def test_loading_a_corrupt_blob_is_a_build_error(monkeypatch, tmp_path):
    # What the backend itself says when OpenVINO cannot import the bytes (the cache's digest aside).
    _env(monkeypatch, tmp_path / "cache")
    sym, shapes = mlp(), {"data": (2, 512)}
    args, aux = random_params(sym, shapes, 0)
    _bind(sym, shapes, args, aux, _data(shapes["data"]))
    folder, meta = _entry(tmp_path / "cache")
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    (copy / meta["file"]).write_bytes(b"not a compiled model" * 10)
    backend = ov_backend.OpenVinoBackend()
    with pytest.raises(EngineBuildError, match="sg: OpenVINO could not import the stored engine"):
        backend.load(meta, str(copy), BuildOptions(name="sg"))
    with pytest.raises(EngineBuildError, match="is not this version's"):
        backend.load(dict(meta, format="onnx-fed"), str(copy), BuildOptions(name="sg"))
    engine = backend.load(meta, folder, BuildOptions(name="sg"))  # the intact one loads
    assert [t.name for t in engine.inputs] and engine.outputs[0].shape == (2, 64)


# --------------------------------------------------------------------------- precisions


def test_fp16_engine_matches_native_within_fp16_tolerance(monkeypatch):
    _env(monkeypatch, MXNET_TENSORRT_PRECISION="fp16")
    sym, shapes = conv_bn(), {"data": (2, 3, 16, 16)}
    args, aux = random_params(sym, shapes, 0)
    x = _data(shapes["data"])
    exe, got = _bind(sym, shapes, args, aux, x)
    info = mx_trt.bind_info(exe)
    assert info.builds == 1
    rtol, atol = OP_TOL["float16"]
    close(got[0], _native(sym, shapes, args, aux, x)[0], rtol, atol)


_NO_BF16 = ov_backend.OpenVinoBackend.unavailable_reason() or ov_backend.OpenVinoBackend().precision_reason("bf16")


def _runtime_precisions(compiled):
    """OpenVINO's own account of what a compiled model runs: (layer type, runtime precision) -> count."""
    kinds = collections.Counter()
    for op in compiled.get_runtime_model().get_ordered_ops():
        rt = op.get_rt_info()
        kinds[(rt["layerType"].astype(str), rt["runtimePrecision"].astype(str))] += 1
    return kinds


@pytest.mark.skipif(bool(_NO_BF16), reason=f"no bf16 here: {_NO_BF16}")
def test_bf16_engine_computes_in_bfloat16_within_its_tolerance(monkeypatch, tmp_path):
    _env(monkeypatch, tmp_path, MXNET_TENSORRT_PRECISION="bf16", MXNET_TENSORRT_ENGINE_RULE="always")
    sym, shapes = conv_bn(), {"data": (2, 3, 16, 16)}
    args, aux = random_params(sym, shapes, 0)
    x = _data(shapes["data"])
    exe, got = _bind(sym, shapes, args, aux, x)
    (fused,) = mx_trt.bind_info(exe).engines
    compiled = fused.engine.compiled
    assert str(compiled.get_property("INFERENCE_PRECISION_HINT")) == "<Type: 'bfloat16'>"
    kinds = _runtime_precisions(compiled)
    assert kinds[("Convolution", "bf16")] >= 1, kinds
    ref = _native(sym, shapes, args, aux, x)[0]
    close(got[0], ref, *OP_TOL["bfloat16"])
    rel = np.abs(got[0] - ref).max() / np.abs(ref).max()
    assert rel > 1e-5, "a bfloat16 engine gives bfloat16 numbers, not float32 ones"
    # The stored engine keeps its precision: a warm bind loads it in bf16, builds nothing.
    engines.clear_pool()
    exe2, got2 = _bind(sym, shapes, args, aux, x)
    info2 = mx_trt.bind_info(exe2)
    assert (info2.builds, info2.loads) == (0, 1)
    assert str(info2.engines[0].engine.compiled.get_property("INFERENCE_PRECISION_HINT")) == "<Type: 'bfloat16'>"
    np.testing.assert_array_equal(got2[0], got[0])


def test_bf16_on_a_cpu_without_it_builds_fp32_engines_with_a_warning(monkeypatch, caplog):
    monkeypatch.setattr(ov_backend, "_cpu_capabilities", lambda: ["FP32", "INT8", "EXPORT_IMPORT"])
    assert "no bfloat16 arithmetic" in ov_backend.OpenVinoBackend().precision_reason("bf16")
    assert ov_backend.OpenVinoBackend().precision_reason("fp16") is None
    _env(monkeypatch, MXNET_TENSORRT_PRECISION="bf16", MXNET_TENSORRT_ENGINE_RULE="always")
    sym, shapes = conv_bn(), {"data": (2, 3, 16, 16)}
    args, aux = random_params(sym, shapes, 0)
    x = _data(shapes["data"])
    with caplog.at_level(logging.WARNING, logger="mx_trt"):
        exe, got = _bind(sym, shapes, args, aux, x)
    assert any("bf16 engines were asked for, but this CPU has no bfloat16" in r.getMessage() and
               "the engines are fp32" in r.getMessage() for r in caplog.records), caplog.text
    compiled = mx_trt.bind_info(exe).engines[0].engine.compiled
    assert str(compiled.get_property("INFERENCE_PRECISION_HINT")) == "<Type: 'float32'>"
    close(got[0], _native(sym, shapes, args, aux, x)[0])


@pytest.mark.skipif(bool(_NO_BF16), reason=f"no bf16 here: {_NO_BF16}")
def test_bf16_under_the_cost_rule_goes_to_the_backend_that_has_it(monkeypatch, caplog):
    # optimize_for and binds without a plan cache use the cost rule: ONNX Runtime, the default, has no bf16,
    # so OpenVINO (which takes every subgraph) builds the engines, with a log line.
    monkeypatch.delenv("MXNET_TENSORRT_BACKEND", raising=False)
    _env(monkeypatch, MXNET_TENSORRT_PRECISION="bf16", MXNET_TENSORRT_ENGINE_RULE="always")
    monkeypatch.delenv("MXNET_TENSORRT_BACKEND", raising=False)
    sym, shapes = conv_bn(), {"data": (2, 3, 16, 16)}
    args, aux = random_params(sym, shapes, 0)
    x = _data(shapes["data"])
    with caplog.at_level(logging.INFO, logger="mx_trt"):
        exe, got = _bind(sym, shapes, args, aux, x)
    info = mx_trt.bind_info(exe)
    assert "bf16 engines: onnxruntime engines have no bfloat16 precision, so they are openvino's" in caplog.text
    assert info.backend == "openvino" and info.kept_engines() == ["openvino"]
    compiled = info.engines[0].engine.compiled
    assert str(compiled.get_property("INFERENCE_PRECISION_HINT")) == "<Type: 'bfloat16'>"
    close(got[0], _native(sym, shapes, args, aux, x)[0], *OP_TOL["bfloat16"])


def test_compile_config_asks_bf16_only_for_a_bf16_engine(monkeypatch):
    monkeypatch.setattr(ov_backend, "_cpu_capabilities", lambda: ["FP32", "BF16", "FP16"])
    assert ov_backend.compile_config(False, 2)["INFERENCE_PRECISION_HINT"] == "f32"
    assert ov_backend.compile_config(False, 2, bf16=True)["INFERENCE_PRECISION_HINT"] == "bf16"
    assert ov_backend.compile_config(True, 2)["INFERENCE_PRECISION_HINT"] == "f16"
    monkeypatch.setattr(ov_backend, "_cpu_capabilities", lambda: ["FP32", "BF16"])
    assert ov_backend.compile_config(True, 2)["INFERENCE_PRECISION_HINT"] == "f32"  # fp16 graph, float32 arithmetic
    assert OnnxRuntimeBackend().precision_reason("bf16") == "onnxruntime engines have no bfloat16 precision"
    assert OnnxRuntimeBackend().precision_reason("int8") is None


def test_int8_engine_runs_integer_kernels(monkeypatch, tmp_path):
    n = prototype_cnn()
    cal, _ = n["sample"](32, seed=7)
    table = tmp_path / "table.json"
    mx_trt.calibrate(n["sym"], (n["args"], n["aux"]), [cal[i:i + 8] for i in range(0, 32, 8)], out=table,
                     progress=False)
    x, labels = n["sample"](64, seed=11)
    shapes = {"data": x.shape}
    ref = _native(n["sym"], shapes, n["args"], n["aux"], x)[0]
    _env(monkeypatch, MXNET_TENSORRT_PRECISION="int8", MXNET_TENSORRT_CALIBRATION=str(table),
         MXNET_TENSORRT_STRICT="1")
    exe, (got,) = _bind(n["sym"], shapes, n["args"], n["aux"], x)
    info = mx_trt.bind_info(exe)
    assert len(info.engines) == 1
    assert COSINE_MIN < cosine(got, ref) < 1 - 1e-7  # int8 numbers, not fp32 ones
    assert (got.argmax(1) == ref.argmax(1)).mean() >= TOP1_MIN
    # OpenVINO's own account of what it runs: the convolutions in 8-bit integers.
    runtime = info.engines[0].engine.compiled.get_runtime_model()
    kinds = collections.Counter()
    for op in runtime.get_ordered_ops():
        rt = op.get_rt_info()
        kinds[(rt["layerType"].astype(str), rt["runtimePrecision"].astype(str))] += 1
    assert kinds[("Convolution", "u8")] + kinds[("Convolution", "i8")] >= 4, kinds


def test_tensors_of_types_openvino_narrows_stay_native():
    from mx_trt.export.spec import OpSpec

    b = ov_backend.OpenVinoBackend()
    for dt in ("float64", "int64"):
        spec = OpSpec(name="c", op="Cast", attrs={}, in_shapes=((2,),), in_dtypes=("float32",), out_shapes=((2,),),
                      out_dtypes=(dt,))
        assert "openvino engines do not hold" in b.dtype_reason(spec)


# --------------------------------------------------------------------------- the measured rule


class StubTimer:
    """Runs MXNet and each candidate once (so each really runs), then reports fixed medians."""

    def __init__(self, native_ms, engine_ms):
        self.native_ms, self.engine_ms, self.counts = native_ms, list(engine_ms), []

    def __call__(self, native, engines, seconds, budget_s):
        self.counts.append(len(engines))
        native()
        for run in engines:
            run()
        ms = self.engine_ms[:len(engines)]
        return self.native_ms, ms, [m / self.native_ms for m in ms]  # medians, and per-round ratios


def _measured_bind(monkeypatch, tmp_path, timer, sym=None, shapes=None):
    from mx_trt.pipeline import measure

    monkeypatch.delenv("MXNET_TENSORRT_BACKEND", raising=False)
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1")
    monkeypatch.setenv("MXNET_TENSORRT_ENGINE_RULE", "measured")
    monkeypatch.setenv("MXNET_TENSORRT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(measure, "default_timer", timer)
    if sym is None:  # large enough for the estimate to leave it to the timing
        sym, shapes = conv_bn(), {"data": (2, 3, 64, 64)}
    args, aux = random_params(sym, shapes, 0)
    x = _data(shapes["data"])
    exe, got = _bind(sym, shapes, args, aux, x)
    close(got[0], _native(sym, shapes, args, aux, x)[0])
    return mx_trt.bind_info(exe)


def test_measured_rule_times_openvino_after_onnxruntime_and_keeps_the_faster(monkeypatch, tmp_path):
    timer = StubTimer(10.0, [5.0, 3.0])  # MXNet, then onnxruntime, then openvino
    info = _measured_bind(monkeypatch, tmp_path, timer)
    assert timer.counts == [2]
    (decision,) = info.decisions.values()
    assert decision.engine_ms == {"onnxruntime fp32": 5.0, "openvino fp32": 3.0}
    assert decision.engine == ("openvino", "fp32")
    (fused,) = info.engines
    assert isinstance(fused.engine, ov_backend.OpenVinoEngine) and fused.run_count >= 1

    # A warm bind applies the stored decision and loads the compiled model: nothing timed, nothing built.
    def no_timing(*a):
        raise AssertionError("a warm bind must not time anything")

    engines.clear_pool()
    again = _measured_bind(monkeypatch, tmp_path, no_timing)
    (decision,) = again.decisions.values()
    assert decision.stored and decision.engine == ("openvino", "fp32")
    assert again.builds == 0 and again.loads == 1
    assert isinstance(again.engines[0].engine, ov_backend.OpenVinoEngine)


def test_measured_rule_keeps_onnxruntime_where_it_is_faster(monkeypatch, tmp_path):
    info = _measured_bind(monkeypatch, tmp_path, StubTimer(10.0, [3.0, 5.0]))
    (decision,) = info.decisions.values()
    assert decision.engine == ("onnxruntime", "fp32")
    assert not isinstance(info.engines[0].engine, ov_backend.OpenVinoEngine)


def _measured_bf16(monkeypatch, tmp_path, timer, caplog):
    monkeypatch.setenv("MXNET_TENSORRT_PRECISION", "bf16")
    monkeypatch.setattr(ov_backend, "_cpu_capabilities", lambda: ["FP32", "BF16"])  # the choice, whatever the CPU
    from mx_trt.pipeline import measure

    monkeypatch.delenv("MXNET_TENSORRT_BACKEND", raising=False)
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1")
    monkeypatch.setenv("MXNET_TENSORRT_ENGINE_RULE", "measured")
    monkeypatch.setenv("MXNET_TENSORRT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(measure, "default_timer", timer)
    sym, shapes = conv_bn(), {"data": (2, 3, 64, 64)}
    args, aux = random_params(sym, shapes, 0)
    x = _data(shapes["data"])
    with caplog.at_level(logging.INFO, logger="mx_trt"):
        exe, got = _bind(sym, shapes, args, aux, x)
    return mx_trt.bind_info(exe), got[0], _native(sym, shapes, args, aux, x)[0]


@pytest.mark.skipif(bool(_NO_BF16), reason=f"no bf16 here: {_NO_BF16}")
def test_measured_bf16_times_openvino_bf16_beside_every_fp32_candidate(monkeypatch, tmp_path, caplog):
    # ONNX Runtime has no bf16: its candidate is fp32 alone, with a log line; OpenVINO's bf16 is timed beside
    # its fp32 engine, and kept when fastest.
    timer = StubTimer(10.0, [6.0, 2.0, 4.0])  # MXNet; onnxruntime fp32, openvino bf16, openvino fp32
    info, got, ref = _measured_bf16(monkeypatch, tmp_path, timer, caplog)
    (decision,) = info.decisions.values()
    assert list(decision.engine_ms) == ["onnxruntime fp32", "openvino bf16", "openvino fp32"]
    assert decision.engine == ("openvino", "bf16")
    assert "onnxruntime engines have no bfloat16 precision: onnxruntime candidates are fp32 alone" in caplog.text
    compiled = info.engines[0].engine.compiled
    assert str(compiled.get_property("INFERENCE_PRECISION_HINT")) == "<Type: 'bfloat16'>"
    close(got, ref, *OP_TOL["bfloat16"])


@pytest.mark.skipif(bool(_NO_BF16), reason=f"no bf16 here: {_NO_BF16}")
def test_measured_bf16_slower_than_fp32_falls_back_to_fp32(monkeypatch, tmp_path, caplog):
    timer = StubTimer(10.0, [6.0, 5.0, 4.0])  # openvino bf16 5 ms, slower than its fp32 engine's 4
    info, got, ref = _measured_bf16(monkeypatch, tmp_path, timer, caplog)
    (decision,) = info.decisions.values()
    assert decision.engine == ("openvino", "fp32")
    assert str(info.engines[0].engine.compiled.get_property("INFERENCE_PRECISION_HINT")) == "<Type: 'float32'>"
    close(got, ref)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_an_export_whose_measured_rule_kept_openvino_loads_it(monkeypatch, tmp_path, precision):
    # The manifest's backend is the bind's (onnxruntime); each engine record names the backend and precision
    # that built it, and load uses them (an export of OpenVINO's engine could not be loaded before).
    from mx_trt.pipeline import measure
    from mx_trt.settings import Settings

    if precision == "bf16" and _NO_BF16:
        pytest.skip(f"no bf16 here: {_NO_BF16}")
    monkeypatch.delenv("MXNET_TENSORRT_BACKEND", raising=False)
    monkeypatch.setenv("MXNET_TENSORRT_ENGINE_RULE", "measured")
    monkeypatch.setattr(measure, "default_timer", StubTimer(10.0, [5.0, 3.0, 4.0]))  # openvino's first candidate
    sym, shapes = conv_bn(), {"data": (2, 3, 64, 64)}
    args, aux = random_params(sym, shapes, 0)
    manifest = mx_trt.export_model(sym, mx.cpu(), {**args, **aux}, shapes, str(tmp_path / "out"),
                                   settings=Settings.from_env().with_options({"precision": precision}))
    (rec,) = manifest["engines"]
    assert manifest["backend"] == "onnxruntime" and (rec["backend"], rec["precision"]) == ("openvino", precision)
    engines.clear_pool()
    exe = mx_trt.load(str(tmp_path / "out"))
    x = _data(shapes["data"])
    exe.forward(is_train=False, data=mx.nd.array(x))
    assert isinstance(exe._mx_trt_loaded.engines[0].engine, ov_backend.OpenVinoEngine)
    close(exe.outputs[0].asnumpy(), _native(sym, shapes, args, aux, x)[0],
          *OP_TOL["float32" if precision == "fp32" else "bfloat16"])


def test_without_the_measured_rule_onnxruntime_stays_the_default(monkeypatch):
    monkeypatch.delenv("MXNET_TENSORRT_BACKEND", raising=False)
    _env(monkeypatch)
    monkeypatch.delenv("MXNET_TENSORRT_BACKEND")
    sym, shapes = mlp(), {"data": (2, 512)}
    args, aux = random_params(sym, shapes, 0)
    exe, _ = _bind(sym, shapes, args, aux, _data(shapes["data"]))
    info = mx_trt.bind_info(exe)
    assert info.backend == "onnxruntime" and not isinstance(info.engines[0].engine, ov_backend.OpenVinoEngine)


def test_measured_rule_leaves_out_openvino_for_int64_tensors(monkeypatch, tmp_path):
    # ONNX Runtime holds int64; OpenVINO's CPU plugin would compute it in int32: not a candidate.
    x = mx.sym.var("data")
    h = mx.sym.FullyConnected(x, num_hidden=256, name="fc1")  # large enough for the estimate to leave it to timing
    r = mx.sym.Cast(mx.sym.Cast(h, dtype="int64", name="to_i64") + 1, dtype="float32", name="to_f32")
    sym = mx.sym.FullyConnected(r, num_hidden=256, name="fc2")
    timer = StubTimer(10.0, [5.0, 3.0])
    info = _measured_bind(monkeypatch, tmp_path, timer, sym, {"data": (64, 256)})
    decisions = list(info.decisions.values())
    assert decisions and all(set(d.engine_ms) <= {"onnxruntime fp32"} for d in decisions), decisions
    assert not any(isinstance(e.engine, ov_backend.OpenVinoEngine) for e in info.engines)


def test_measured_rule_runs_the_int8_graph_of_the_binds_backend_in_openvino(monkeypatch, tmp_path):
    # The int8 export is made once, in ONNX Runtime's form (int32 biases); OpenVINO runs it as well.
    n = prototype_cnn()
    cal, _ = n["sample"](32, seed=7)
    table = tmp_path / "table.json"
    mx_trt.calibrate(n["sym"], (n["args"], n["aux"]), [cal[i:i + 8] for i in range(0, 32, 8)], out=table,
                     progress=False)
    x, _ = n["sample"](16, seed=11)
    shapes = {"data": x.shape}
    ref = _native(n["sym"], shapes, n["args"], n["aux"], x)[0]
    monkeypatch.setenv("MXNET_TENSORRT_PRECISION", "int8")
    monkeypatch.setenv("MXNET_TENSORRT_CALIBRATION", str(table))
    # Candidates: onnxruntime int8, onnxruntime fp32, openvino int8, openvino fp32.
    timer = StubTimer(10.0, [4.0, 5.0, 2.0, 3.0])
    from mx_trt.pipeline import measure

    monkeypatch.delenv("MXNET_TENSORRT_BACKEND", raising=False)
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1")
    monkeypatch.setenv("MXNET_TENSORRT_ENGINE_RULE", "measured")
    monkeypatch.setenv("MXNET_TENSORRT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(measure, "default_timer", timer)
    exe, (got,) = _bind(n["sym"], shapes, n["args"], n["aux"], x)
    info = mx_trt.bind_info(exe)
    (decision,) = info.decisions.values()
    assert timer.counts == [4] and decision.engine == ("openvino", "int8"), decision
    assert COSINE_MIN < cosine(got, ref) < 1 - 1e-7


def _identity_chain_model(w):
    """y = x + Identity(Identity(w)), ``w`` an external initializer (as an exported ``_arange`` reads)."""
    from onnx import TensorProto, helper

    t = TensorProto()
    t.name, t.data_type = "w", TensorProto.FLOAT
    t.dims.extend(w.shape)
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "w.data"), ("offset", "0"), ("length", str(w.nbytes))):
        kv = t.external_data.add()
        kv.key, kv.value = k, v
    g = helper.make_graph([helper.make_node("Identity", ["w"], ["w1"]), helper.make_node("Identity", ["w1"], ["w2"]),
                           helper.make_node("Add", ["x", "w2"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(w.shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [t])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _add_result(ov_model, w):
    compiled = ov_backend._ov_core().compile_model(ov_model, "CPU", ov_backend.compile_config(False, 1))
    x = np.ones(w.shape, np.float32)
    np.testing.assert_array_equal(compiled(x)[0], x + w)


def test_a_weight_behind_identity_nodes_is_shared():
    # The reader folds the Identity chain into the parameter and renames it; it is found by its tensor name.
    w = np.arange(1000, dtype=np.float32)
    ov_model, missing = ov_backend._read(_identity_chain_model(w), {"w": w}, {})
    assert missing == [] and len(ov_model.get_parameters()) == 1
    consts = [op for op in ov_model.get_ordered_ops() if op.get_type_name() == "Constant" and op.get_output_size()
              and tuple(op.get_output_partial_shape(0).to_shape()) == w.shape]
    assert consts and np.shares_memory(consts[0].get_data(), w)
    _add_result(ov_model, w)


def test_weights_the_reader_leaves_no_parameter_for_are_embedded(monkeypatch):
    # Should the reader make no parameter of a weight (or refuse one as a parameter), it is read embedded.
    w = np.arange(1000, dtype=np.float32)
    real, calls = ov_backend._read, []

    def first_loses_it(model, fed, embedded):
        calls.append((sorted(fed), sorted(embedded)))
        ov_model, missing = real(model, fed, embedded)
        return (ov_model, ["w"]) if len(calls) == 1 else (ov_model, missing)

    monkeypatch.setattr(ov_backend, "_read", first_loses_it)
    _add_result(ov_backend.read_model(_identity_chain_model(w), {"w": w}), w)
    assert calls == [(["w"], []), ([], ["w"])]

    def refuses(model, fed, embedded):
        calls.append((sorted(fed), sorted(embedded)))
        if fed:
            raise RuntimeError("a value is needed at conversion")
        return real(model, fed, embedded)

    calls.clear()
    monkeypatch.setattr(ov_backend, "_read", refuses)
    _add_result(ov_backend.read_model(_identity_chain_model(w), {"w": w}), w)
    assert calls == [(["w"], []), ([], ["w"])]


def _ties():
    # Rows with repeated maxima: the index of a tie decides the result.
    x = mx.sym.var("data")
    h = mx.sym.relu(mx.sym.FullyConnected(x, num_hidden=32, name="fc"), name="r")
    return mx.sym.Group([mx.sym.argmax(mx.sym.round(h, name="rnd"), axis=1, name="am"),
                         mx.sym.topk(h, k=3, axis=1, ret_typ="value", name="tv"), mx.sym.sigmoid(h, name="s")])


def test_operators_whose_indices_depend_on_tie_order_stay_native(monkeypatch):
    _env(monkeypatch)
    sym, shapes = _ties(), {"data": (16, 8)}
    args, aux = random_params(sym, shapes, 0)
    x = np.round(_data(shapes["data"]) * 2)
    exe, got = _bind(sym, shapes, args, aux, x)
    info = mx_trt.bind_info(exe)
    reasons = {info.plan.graph.nodes[n].name: r for n, r in info.plan.partition.native.items()}
    assert "orders tied values otherwise" in reasons["am"]
    assert "tv" not in reasons and info.engines  # values of topk do not depend on it
    for g, r in zip(got, _native(sym, shapes, args, aux, x)):
        close(g, r)


def test_measured_rule_leaves_out_openvino_where_it_refuses_an_operator(monkeypatch, tmp_path):
    timer = StubTimer(10.0, [5.0, 3.0])
    x = mx.sym.var("data")
    h = mx.sym.relu(mx.sym.FullyConnected(x, num_hidden=256, name="fc"), name="r")
    sym = mx.sym.FullyConnected(mx.sym.one_hot(mx.sym.argmax(h, axis=1, name="am"), depth=256, name="oh") + h,
                                num_hidden=256, name="fc2")
    info = _measured_bind(monkeypatch, tmp_path, timer, sym, {"data": (64, 256)})
    decisions = list(info.decisions.values())
    assert decisions and all(set(d.engine_ms) <= {"onnxruntime fp32"} for d in decisions), decisions


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ssd_mobilenet", "yolo3_mobilenet", "faster_rcnn", "bert", "simple_pose"])
def test_thirdparty_model_engines_match_native(name, monkeypatch):
    # GluonCV/GluonNLP graphs (tests/models/thirdparty.py): each OpenVINO engine, fed native MXNet's values
    # of its inputs, gives native's outputs within tests/models/compare.py's tolerance.
    from tests.models.compare import check_engines
    from tests.models.thirdparty import MODELS

    _env(monkeypatch)
    model = MODELS[name]()
    exe = model.sym.simple_bind(mx.cpu(), grad_req="null", type_dict=model.dtypes, shared_buffer=model.params,
                                **model.shapes)
    info = mx_trt.bind_info(exe)
    assert info.backend == "openvino" and info.engines and not info.native_failures, info.native_failures
    assert all(isinstance(f.engine, ov_backend.OpenVinoEngine) for f in info.engines)
    bad = check_engines(model, exe)
    assert not bad, "\n".join(bad)
