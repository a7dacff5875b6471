"""The TensorRT / TensorRT-RTX runner: its call sequence against fake TensorRT objects, and the GPU where there is one.

Without a GPU (CI): the runner's calls (profiles, shapes, addresses, syncs, the
RTX runtime cache) are checked against fake TensorRT objects around a real
TensorRT-RTX plan.

With a GPU (``-m gpu``): the CUDA wrapper, and correctness against MXNet on
``mx.gpu(0)``. fp32 tolerance there: ``rtol=1e-3, atol=1e-4`` (``GPU_RTOL``,
``GPU_ATOL``), because TensorRT may use TF32 for fp32 convolutions and matrix
products on Ampere and later.
"""
from __future__ import annotations

import mxnet as mx
import numpy as np
import pytest

import mx_trt
from mx_trt.builder.backends import Buffer, BuildOptions
from mx_trt.builder.backends.tensorrt import TensorRTBackend, TensorRTRTXBackend, TrtEngine, cuda
from mx_trt.errors import EngineRunError, ShapeError
from tests.harness.bindcheck import conv_relu
from tests.harness.mxcheck import random_inputs, random_params, run_native
from tests.builder.tensorrt_fixtures import GPU_ATOL, GPU_RTOL, SHAPES, FakeDims, build, export_all, rtx, tiny


# --------------------------------------------------------------------------- the runner against fake TensorRT objects


class FakeStream:
    def __init__(self, log, device_id=None):
        self.log, self.handle = log, 0xC0FFEE

    def synchronize(self):
        self.log.append(("stream_sync",))

    def close(self):
        self.log.append(("stream_close",))


class FakeContext:
    def __init__(self, log, out_dims):
        self.log, self.out_dims, self.shapes = log, out_dims, {}
        self.execute_ok = True

    def set_optimization_profile_async(self, k, stream):
        self.log.append(("profile", k, stream))
        return True

    def set_input_shape(self, name, shape):
        self.log.append(("shape", name, tuple(shape)))
        self.shapes[name] = tuple(shape)
        return True

    def get_tensor_shape(self, name):
        return self.out_dims(self.shapes, name)

    def set_tensor_address(self, name, ptr):
        self.log.append(("address", name, ptr))
        return True

    def execute_async_v3(self, stream):
        self.log.append(("execute", stream))
        return self.execute_ok


class FakeCache:
    def __init__(self, log):
        self.log = log

    def deserialize(self, data):
        self.log.append(("cache_load", bytes(data)))
        return True

    def serialize(self):
        return b"compiled-kernels"


class FakeRuntimeConfig:
    def __init__(self, log):
        self.log, self.dynamic_shapes_kernel_specialization_strategy = log, None

    def create_runtime_cache(self):
        return FakeCache(self.log)

    def set_runtime_cache(self, cache):
        self.log.append(("cache_set",))
        return True


class FakeCudaEngine:
    def __init__(self, ctx, log):
        self.ctx, self.log, self.config = ctx, log, None

    def create_runtime_config(self):
        self.config = FakeRuntimeConfig(self.log)
        return self.config

    def create_execution_context(self, *args):
        self.log.append(("context", args))
        return self.ctx


class NoRtx(TensorRTRTXBackend):
    """The TensorRT code path (plain contexts) on the RTX module's types."""

    rtx = False


def fake_engine(monkeypatch, backend, out_dims, **extra):
    (ex,) = export_all(mx.sym.FullyConnected(conv_relu(mx.sym.var("data"), "a"), num_hidden=5, name="fc"), SHAPES, "batch")
    real = build(ex, batch_ranges=[(1, 2, 4), (5, 6, 8)])
    eng = TrtEngine(backend, real.plan, real.meta(), BuildOptions(device_id=0, extra=extra))
    log = []
    ctx = FakeContext(log, out_dims)
    fake = FakeCudaEngine(ctx, log)
    monkeypatch.setattr(TrtEngine, "_deserialized", lambda self: fake)
    monkeypatch.setattr(cuda, "set_device", lambda i: None)
    monkeypatch.setattr(cuda, "device_synchronize", lambda: log.append(("device_sync",)))
    monkeypatch.setattr(cuda, "Stream", lambda device_id=None: FakeStream(log, device_id))
    return eng, ctx, fake, log


def batch_out(shapes, name):
    return (shapes["data"][0], 5)


def bufs(batch, x=100, y=200, dtype="float32"):
    return [Buffer(x, (batch, 3, 8, 8), dtype, 0)], [Buffer(y, (batch, 5), dtype, 0)]


def test_runner_call_sequence(rtx, monkeypatch):
    eng, ctx, fake, log = fake_engine(monkeypatch, NoRtx, batch_out)
    runner = eng.create_runner()
    runner.run(*bufs(2))
    assert log == [
        ("context", ()),
        ("profile", 0, 0xC0FFEE),
        ("shape", "data", (2, 3, 8, 8)),
        ("address", "data", 100), ("address", "fc_output", 200),
        ("device_sync",),  # MXNet's kernels are done before the engine reads its inputs
        ("execute", 0xC0FFEE),
        ("stream_sync",),  # and the engine's before MXNet reads the outputs
    ]
    del log[:]
    runner.run(*bufs(2))  # same shapes and buffers: nothing to set again
    assert log == [("device_sync",), ("execute", 0xC0FFEE), ("stream_sync",)]
    del log[:]
    runner.run(*bufs(7, x=300, y=400))  # batch 7 lives in profile 1
    assert log[:4] == [("profile", 1, 0xC0FFEE), ("shape", "data", (7, 3, 8, 8)), ("address", "data", 300), ("address", "fc_output", 400)]
    assert runner.run_count == 3
    # One context per runner, the engine shared.
    other = eng.create_runner()
    other.run(*bufs(3))
    assert [e for e in log if e[0] == "context"] == [("context", ())]


def test_runner_checks(rtx, monkeypatch):
    eng, ctx, fake, log = fake_engine(monkeypatch, NoRtx, batch_out)
    runner = eng.create_runner()
    with pytest.raises(ShapeError, match=r"output 'fc_output' has shape \(2, 5\).*\(2, 6\)"):
        runner.run([Buffer(1, (2, 3, 8, 8), "float32", 0)], [Buffer(2, (2, 6), "float32", 0)])
    with pytest.raises(ShapeError, match="float16"):
        runner.run(*bufs(2, dtype="float16"))
    with pytest.raises(ShapeError, match="got 1 / 2"):
        runner.run(bufs(2)[0], bufs(2)[1] * 2)
    with pytest.raises(EngineRunError, match="host memory"):
        runner.run([Buffer(1, (2, 3, 8, 8), "float32", -1)], bufs(2)[1])
    ctx.execute_ok = False
    with pytest.raises(EngineRunError, match="execute_async_v3 failed"):
        runner.run(*bufs(2))


def test_runner_refuses_outputs_it_cannot_shape(rtx, monkeypatch):
    eng, ctx, fake, log = fake_engine(monkeypatch, NoRtx, lambda shapes, name: FakeDims())
    with pytest.raises(ShapeError, match="nbDims == -1"):
        eng.create_runner().run(*bufs(2))
    assert ("execute", 0xC0FFEE) not in log


def test_rtx_runner_uses_runtime_config_and_cache(rtx, monkeypatch, tmp_path):
    cache = tmp_path / "runtime.cache"
    cache.write_bytes(b"old-kernels")
    eng, ctx, fake, log = fake_engine(monkeypatch, TensorRTRTXBackend, batch_out, rtx_specialization="eager",
                                      runtime_cache_path=str(cache))
    runner = eng.create_runner()
    runner.run(*bufs(2))
    assert fake.config.dynamic_shapes_kernel_specialization_strategy == rtx.DynamicShapesKernelSpecializationStrategy.EAGER
    assert ("cache_load", b"old-kernels") in log and ("cache_set",) in log
    assert log[log.index(("cache_set",)) + 1] == ("context", (fake.config,))
    assert cache.read_bytes() == b"compiled-kernels"  # saved after kernels were compiled for new shapes
    cache.unlink()
    runner.close()
    assert cache.read_bytes() == b"compiled-kernels" and ("stream_close",) in log


# --------------------------------------------------------------------------- on a GPU


def gpu_missing():
    """Why the GPU tests cannot run here, or None."""
    reason = cuda.unavailable_reason()
    if reason is not None:
        return f"needs a CUDA device: {reason}"
    reasons = {cls.name: cls.unavailable_reason() for cls in (TensorRTBackend, TensorRTRTXBackend)}
    if all(reasons.values()):
        return "needs TensorRT or TensorRT-RTX able to run here (" + "; ".join(f"{k}: {v}" for k, v in reasons.items()) + ")"
    try:
        n = mx.context.num_gpus()
    except Exception as exc:  # a CPU build of MXNet
        return f"needs a CUDA build of MXNet ({exc})"
    if n == 0:
        return "needs a CUDA build of MXNet (mx.context.num_gpus() == 0)"
    return None


def require_gpu():
    reason = gpu_missing()
    if reason is not None:
        pytest.skip(reason)


def small_cnn():
    x = mx.sym.var("data")
    c1 = mx.sym.Convolution(x, num_filter=8, kernel=(3, 3), pad=(1, 1), name="c1")
    b1 = mx.sym.BatchNorm(c1, fix_gamma=False, name="bn1")
    r1 = mx.sym.Activation(b1, act_type="relu", name="r1")
    p1 = mx.sym.Pooling(r1, kernel=(2, 2), stride=(2, 2), pool_type="max", name="p1")
    c2 = mx.sym.Convolution(p1, num_filter=16, kernel=(3, 3), pad=(1, 1), name="c2")
    r2 = mx.sym.Activation(c2, act_type="relu", name="r2")
    fc = mx.sym.FullyConnected(mx.sym.flatten(r2, name="flat"), num_hidden=10, name="fc")
    return mx.sym.softmax(fc, name="prob")


def bind_gpu(sym, shapes, args, aux, monkeypatch):
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1")
    exe = sym.simple_bind(mx.gpu(0), grad_req="null", shared_buffer={**args, **aux}, **shapes)
    info = mx_trt.bind_info(exe)
    assert info is not None and info.backend in ("tensorrt", "tensorrt_rtx") and info.engines, info and info.native_failures
    return exe, info


def forward(exe, inputs):
    for k, v in inputs.items():
        exe.arg_dict[k][:] = v
    exe.forward(is_train=False)
    return [o.asnumpy() for o in exe.outputs]


@pytest.mark.gpu
def test_gpu_cuda_wrapper():
    require_gpu()
    major, minor = cuda.compute_capability(0)
    assert major >= 5 and minor >= 0
    cuda.set_device(0)
    src = np.arange(64, dtype=np.float32)
    dst = np.zeros_like(src)
    dev = cuda.malloc(src.nbytes)
    try:
        cuda.memcpy(dev, src.ctypes.data, src.nbytes, cuda.HOST_TO_DEVICE)
        s = cuda.Stream(0)
        s.synchronize()
        s.close()
        cuda.device_synchronize()
        cuda.memcpy(dst.ctypes.data, dev, src.nbytes, cuda.DEVICE_TO_HOST)
    finally:
        cuda.free(dev)
    np.testing.assert_array_equal(dst, src)


@pytest.mark.gpu
def test_gpu_small_cnn_matches_mxnet(monkeypatch):
    require_gpu()
    sym = small_cnn()
    shapes = {"data": (2, 3, 16, 16)}
    args, aux = random_params(sym, shapes)
    inputs = random_inputs(shapes)
    ref = run_native(sym, shapes, args, aux, inputs, ctx=mx.gpu(0))
    exe, info = bind_gpu(sym, shapes, args, aux, monkeypatch)
    got = forward(exe, inputs)
    np.testing.assert_allclose(got[0], ref[0], rtol=GPU_RTOL, atol=GPU_ATOL)
    got2 = forward(exe, inputs)  # the context and its bindings are reused
    np.testing.assert_allclose(got2[0], got[0], rtol=0, atol=0)
    assert info.engines[0].run_count == 2


@pytest.mark.gpu
def test_gpu_engine_reused_across_reshape_within_the_profile(monkeypatch):
    require_gpu()
    monkeypatch.setenv("MXNET_TENSORRT_MAX_BATCH_SIZE", "8")
    sym = small_cnn()
    shapes = {"data": (2, 3, 16, 16)}
    args, aux = random_params(sym, shapes)
    exe, info = bind_gpu(sym, shapes, args, aux, monkeypatch)
    fused = info.engines[0]
    engine = fused.engine
    assert engine.batch_ranges == [(1, 2, 8)]
    for batch in (5, 1, 8):
        new_shapes = {"data": (batch, 3, 16, 16)}
        inputs = random_inputs(new_shapes, seed=batch)
        ref = run_native(sym, new_shapes, args, aux, inputs, ctx=mx.gpu(0))
        exe2 = exe.reshape(allow_up_sizing=True, **new_shapes)
        got = forward(exe2, inputs)
        np.testing.assert_allclose(got[0], ref[0], rtol=GPU_RTOL, atol=GPU_ATOL)
        assert fused.engine is engine and fused.build_count == 1  # no rebuild inside the profile
    assert engine._cuda_engine is not None  # deserialized once, shared by the executors' contexts


@pytest.mark.gpu
@pytest.mark.parametrize("req", ["write", "inplace", "add", "null"])
def test_gpu_fused_operator_honours_req(req, monkeypatch):
    require_gpu()
    from mx_trt.runtime import fused_op

    s = conv_relu(mx.sym.var("data"), "a")
    args, aux = random_params(s, SHAPES)
    inputs = random_inputs(SHAPES)
    exe, info = bind_gpu(s, SHAPES, args, aux, monkeypatch)
    want = forward(exe, inputs)[0]
    op = fused_op._gpu_operator(info.engines[0], mx.gpu(0))
    x = mx.nd.array(inputs["data"], ctx=mx.gpu(0))
    out = mx.nd.ones(want.shape, ctx=mx.gpu(0))
    mx.nd.waitall()
    op.forward(False, [req], [x], [out], [])
    expect = {"write": want, "inplace": want, "add": want + 1, "null": np.ones_like(want)}[req]
    np.testing.assert_allclose(out.asnumpy(), expect, rtol=GPU_RTOL, atol=GPU_ATOL)


@pytest.mark.gpu
def test_gpu_engine_built_here_runs_through_a_runner():
    require_gpu()
    backend = next(cls() for cls in (TensorRTBackend, TensorRTRTXBackend) if cls.unavailable_reason() is None)
    ex = tiny()
    eng = backend.build(ex, BuildOptions(device_id=0, name="tiny"))
    from mx_trt.runtime.fused_op import data_ptr

    import onnxruntime as ort

    xs = np.random.RandomState(0).uniform(-1, 1, (2, 3, 8, 8)).astype("float32")
    ref = ort.InferenceSession(ex.model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"data": xs})[0]
    x = mx.nd.array(xs, ctx=mx.gpu(0))
    y = mx.nd.zeros((2, 5), ctx=mx.gpu(0))
    mx.nd.waitall()
    runner = eng.create_runner()
    runner.run([Buffer(data_ptr(x), (2, 3, 8, 8), "float32", 0)], [Buffer(data_ptr(y), (2, 5), "float32", 0)])
    np.testing.assert_allclose(y.asnumpy(), ref, rtol=GPU_RTOL, atol=GPU_ATOL)
    runner.close()
