"""The fused operator inside MXNet executors: shape and type inference, forward, batches, ``req``, errors.

Most cases bind a symbol holding one fused node (``Custom``, ``op_type``
``_mx_trt_fused``) over :class:`tests.runtime.fake_engine.AffineEngine`, an
engine in numpy, natively (the pass is off), and compare its outputs with the
same computation written in MXNet's own operators. Tolerances: fp32
``OP_TOL["float32"]``, fp16 ``OP_TOL["float16"]`` (tests.harness.mxcheck). One
case runs a real engine of the pass (ONNX Runtime) at batches below its maximum.
"""
from __future__ import annotations

import logging

import mxnet as mx
import numpy as np
import pytest

import mx_trt
from mx_trt.errors import EngineBuildError, EngineRunError, MxTrtError, ShapeError
from mx_trt.runtime import fused_op
from mx_trt.runtime.forward import guard_forward, take_error
from tests.harness.bindcheck import ATOL, RTOL, SHAPES, bind, conv_relu
from tests.harness.mxcheck import OP_TOL, random_inputs, random_params, run_native
from tests.runtime.fake_engine import AffineEngine, native_symbol

SHAPE = (4, 3, 5)


def fused_symbol(fused, names=("data",), name="fused"):
    """One fused node over variables ``names``."""
    return mx.sym.Custom(*[mx.sym.var(n) for n in names], op_type=fused_op.OP_TYPE, mx_trt_engine=fused.key,
                         name=name)


def register(engine, n_inputs=1, name="fused"):
    return fused_op.register_engine(name, engine, ["data", "w"][:n_inputs], ["double", "rowsum"])


def run(exe, inputs):
    for k, v in inputs.items():
        exe.arg_dict[k][:] = v
    return [o.asnumpy() for o in exe.forward(is_train=False)]


def native(inputs, dtype="float32"):
    shapes = {k: v.shape for k, v in inputs.items()}
    type_dict = {k: dtype for k in inputs}
    return run_native(native_symbol(len(inputs)), shapes, {}, {}, inputs, type_dict=type_dict)


def bound_conv_fc(monkeypatch, shapes):
    """A small conv-relu-FC model bound by the pass (its own engine: ONNX Runtime): symbol, args, aux, executor."""
    s = mx.sym.FullyConnected(conv_relu(mx.sym.var("data"), "a"), num_hidden=5, name="fc")
    args, aux = random_params(s, shapes)
    exe, _ = bind(s, shapes, args, aux, random_inputs(shapes), True, monkeypatch)
    return s, args, aux, exe


def test_shape_and_type_inference_follow_the_engine():
    fused = register(AffineEngine(SHAPE, dtype="float16"))
    sym = fused_symbol(fused)
    assert sym.list_arguments() == ["data"]
    assert sym.list_outputs() == ["fused_double", "fused_rowsum"]
    _, outs, _ = sym.infer_shape(data=SHAPE)
    assert outs == [SHAPE, (4,)]
    args, outs, _ = sym.infer_type(data=np.float16)
    assert args == [np.float16] and outs == [np.float16, np.float16]


def test_an_input_mxnet_cannot_infer_takes_the_engines_bound_shape():
    """A weight left out of shared_buffer has no shape for MXNet: the node gives it the engine's."""
    fused = register(AffineEngine(SHAPE, n_inputs=2), n_inputs=2)
    args, outs, _ = fused_symbol(fused, ("data", "w")).infer_shape(data=SHAPE)
    assert args == [SHAPE, SHAPE] and outs == [SHAPE, (4,)]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_forward_matches_native_mxnet(dtype):
    engine = AffineEngine(SHAPE, n_inputs=2, dtype=dtype)
    fused = register(engine, n_inputs=2)
    exe = fused_symbol(fused, ("data", "w")).simple_bind(mx.cpu(), grad_req="null", data=SHAPE, w=SHAPE,
                                                         type_dict={"data": dtype, "w": dtype})
    inputs = random_inputs({"data": SHAPE, "w": SHAPE}, dtype=dtype)
    got = run(exe, inputs)
    ref = native(inputs, dtype)
    rtol, atol = OP_TOL[dtype]
    for g, r in zip(got, ref):
        assert g.dtype == np.dtype(dtype)
        np.testing.assert_allclose(g, r, rtol=rtol, atol=atol)
    assert fused.run_count == 1 and engine.runs == [(SHAPE, SHAPE)]
    got2 = run(exe, {k: v * 2 for k, v in inputs.items()})  # the same buffers, new values
    np.testing.assert_allclose(got2[0], native({k: v * 2 for k, v in inputs.items()}, dtype)[0], rtol=rtol, atol=atol)


def test_batches_below_the_engines_maximum_run_on_the_same_engine():
    engine = AffineEngine((8, 3, 5), batch_ranges=[(1, 4, 8)])
    fused = register(engine)
    exe = fused_symbol(fused).simple_bind(mx.cpu(), grad_req="null", data=(8, 3, 5))
    guard_forward(exe, [fused])
    for batch in (8, 3, 1, 5):
        small = exe.reshape(allow_up_sizing=True, data=(batch, 3, 5))
        inputs = random_inputs({"data": (batch, 3, 5)}, seed=batch)
        got = run(small, inputs)
        assert [g.shape for g in got] == [(batch, 3, 5), (batch,)]
        for g, r in zip(got, native(inputs)):
            np.testing.assert_allclose(g, r, rtol=RTOL, atol=ATOL)
    assert [r[0][0] for r in engine.runs] == [8, 3, 1, 5]
    assert fused.engine is engine and fused.rebuilds == 0


def test_a_real_engine_runs_smaller_batches_than_it_was_bound_at(monkeypatch):
    """The pass's own engine (ONNX Runtime) with batch profiles: reshape to smaller batches, compared with MXNet."""
    monkeypatch.setenv("MXNET_TENSORRT_MAX_BATCH_SIZE", "8")
    s, args, aux, exe = bound_conv_fc(monkeypatch, {"data": (8, 3, 8, 8)})
    fused = mx_trt.bind_info(exe).engines[0]
    for batch in (1, 3):
        small_shapes = {"data": (batch, 3, 8, 8)}
        inputs = random_inputs(small_shapes, seed=batch)
        got = run(exe.reshape(allow_up_sizing=True, **small_shapes), inputs)
        np.testing.assert_allclose(got[0], run_native(s, small_shapes, args, aux, inputs)[0], rtol=RTOL, atol=ATOL)
    assert fused.rebuilds == 0 and fused.build_count <= 1


def test_shapes_the_engine_cannot_take_are_a_shape_error():
    fused = register(AffineEngine(SHAPE, batch_ranges=[(1, 4, 8)]))
    exe = fused_symbol(fused).simple_bind(mx.cpu(), grad_req="null", data=SHAPE)
    guard_forward(exe, [fused])
    with pytest.raises(ShapeError, match=r"batch 9 is outside the engine's profiles \[\(1, 4, 8\)\]"):
        exe.reshape(allow_up_sizing=True, data=(9, 3, 5))
    with pytest.raises(ShapeError, match="variable batch"):
        exe.reshape(allow_up_sizing=True, data=(4, 3, 6))  # not the batch: no engine is built for it
    assert fused.last_error is None  # reported once, then cleared
    np.testing.assert_allclose(run(exe, {"data": np.ones(SHAPE, np.float32)})[0], np.full(SHAPE, 3.0))


def test_another_batch_gets_an_engine_from_the_rebuilder(caplog):
    bound = AffineEngine(SHAPE)
    fused = register(bound)
    made = []

    def rebuild(batch):
        made.append(AffineEngine((batch, 3, 5)))
        return made[-1], "built"

    fused.rebuild, fused.rebuild_hint = rebuild, "set MXNET_TENSORRT_MAX_BATCH_SIZE"
    exe = fused_symbol(fused).simple_bind(mx.cpu(), grad_req="null", data=SHAPE)
    guard_forward(exe, [fused])
    with caplog.at_level(logging.WARNING, logger=fused_op.__name__):
        big = exe.reshape(allow_up_sizing=True, data=(6, 3, 5))
    assert "batch 6 is not the static engine's batch 4: a new engine was built for it (set MXNET" in caplog.text
    inputs = random_inputs({"data": (6, 3, 5)})
    np.testing.assert_allclose(run(big, inputs)[0], native(inputs)[0], rtol=RTOL, atol=ATOL)
    assert fused.rebuilds == 1 and fused.build_count == 1 and fused.engine is made[0]
    assert made[0].runs == [((6, 3, 5),)]
    # The first executor keeps its engine; the bound shapes find it again without another rebuild.
    run(exe, random_inputs({"data": SHAPE}))
    assert bound.runs == [(SHAPE,)]
    assert fused.engine_for([SHAPE]) is bound and fused.rebuilds == 1


def test_a_failed_rebuild_is_a_typed_error_naming_the_batch():
    fused = register(AffineEngine(SHAPE, batch_ranges=[(1, 4, 4)]))

    def rebuild(batch):
        raise EngineBuildError("the builder ran out of memory")

    fused.rebuild = rebuild
    exe = fused_symbol(fused).simple_bind(mx.cpu(), grad_req="null", data=SHAPE)
    guard_forward(exe, [fused])
    with pytest.raises(EngineBuildError, match=r"fused: batch 6 is outside the engine's profiles \[\(1, 4, 4\)\], "
                                               r"and no engine can be made for it: the builder ran out of memory"):
        exe.reshape(allow_up_sizing=True, data=(6, 3, 5))
    # A rebuilt engine that still does not take the shapes is refused too.
    fused.rebuild = lambda batch: (AffineEngine((batch + 1, 3, 5)), "built")
    with pytest.raises(ShapeError, match=r"batch 6 .* no engine can be made for it: engine was built for .*\(7, 3, 5\)"):
        exe.reshape(allow_up_sizing=True, data=(6, 3, 5))
    assert fused.rebuilds == 0 and fused.last_error is None


def test_one_rebuild_for_threads_that_need_the_same_batch():
    import threading
    import time

    fused = register(AffineEngine(SHAPE))
    calls = []

    def rebuild(batch):
        calls.append(batch)
        time.sleep(0.05)  # the other threads arrive while this one builds
        return AffineEngine((batch, 3, 5)), "built"

    fused.rebuild = rebuild
    got = []
    threads = [threading.Thread(target=lambda: got.append(fused.engine_for([(6, 3, 5)]))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == [6] and len({id(e) for e in got}) == 1 and fused.rebuilds == 1


def test_an_engine_failure_is_raised_as_a_typed_error_and_the_executor_recovers():
    engine = AffineEngine(SHAPE)
    fused = register(engine, name="sg0")
    exe = fused_symbol(fused).simple_bind(mx.cpu(), grad_req="null", data=SHAPE)
    guard_forward(exe, [fused])
    engine.fail = RuntimeError("device lost")
    with pytest.raises(EngineRunError, match="sg0: RuntimeError: device lost") as info:
        run(exe, {"data": np.ones(SHAPE, np.float32)})
    assert fused.last_error is None
    engine.fail = ShapeError("a typed error passes as it is")
    with pytest.raises(ShapeError, match="passes as it is"):
        run(exe, {"data": np.ones(SHAPE, np.float32)})
    engine.fail = None
    np.testing.assert_allclose(run(exe, {"data": np.ones(SHAPE, np.float32)})[0], np.full(SHAPE, 3.0))
    assert fused.run_count == 1  # failed runs are not counted


def test_without_the_guard_mxnet_loses_the_message():
    """Why guard_forward exists: MXNet reports a failed custom operator as its own error, the typed one kept aside."""
    engine = AffineEngine(SHAPE)
    fused = register(engine)
    exe = fused_symbol(fused).simple_bind(mx.cpu(), grad_req="null", data=SHAPE)
    engine.fail = RuntimeError("device lost")
    with pytest.raises(mx.base.MXNetError):
        run(exe, {"data": np.ones(SHAPE, np.float32)})
    err = take_error([fused])
    assert isinstance(err, EngineRunError) and "device lost" in str(err)
    assert isinstance(err.__cause__, RuntimeError) and fused.last_error is None


def test_the_guard_passes_its_bind_info_and_itself_on_to_reshaped_executors():
    engine = AffineEngine(SHAPE, batch_ranges=[(1, 4, 8)])
    fused = register(engine)
    exe = fused_symbol(fused).simple_bind(mx.cpu(), grad_req="null", data=SHAPE)
    exe._mx_trt = "info"
    guard_forward(exe, [fused])
    small = exe.reshape(allow_up_sizing=True, data=(2, 3, 5))
    assert small._mx_trt == "info"
    engine.fail = RuntimeError("late failure")
    with pytest.raises(EngineRunError, match="late failure"):
        run(small, {"data": np.ones((2, 3, 5), np.float32)})


@pytest.mark.parametrize("req", ["write", "inplace", "add", "null"])
def test_fused_operator_honours_req(req, monkeypatch):
    s = conv_relu(mx.sym.var("data"), "a")
    args, aux = random_params(s, SHAPES)
    exe, got = bind(s, SHAPES, args, aux, random_inputs(SHAPES), True, monkeypatch)
    fused = mx_trt.bind_info(exe).engines[0]
    op = fused_op.make_operator(fused)
    x = exe.arg_dict["data"].copy()
    out = mx.nd.ones(got[0].shape)
    mx.nd.waitall()
    op.forward(False, [req], [x], [out], [])
    expect = {"write": got[0], "inplace": got[0], "add": got[0] + 1, "null": np.ones_like(got[0])}[req]
    np.testing.assert_allclose(out.asnumpy(), expect, rtol=RTOL, atol=ATOL)


def test_an_output_aliasing_an_input_goes_through_scratch():
    fused = register(AffineEngine((2, 3)))
    op = fused_op.make_operator(fused)
    x = mx.nd.array(np.arange(6, dtype=np.float32).reshape(2, 3))
    rowsum = mx.nd.zeros((2,))
    mx.nd.waitall()
    op.forward(False, ["write", "write"], [x], [x, rowsum], [])  # "double" written over its own input
    np.testing.assert_allclose(x.asnumpy(), 2 * np.arange(6).reshape(2, 3) + 1)
    np.testing.assert_allclose(rowsum.asnumpy(), [3, 12])
    scratch = op.scratch[0][0]
    op.forward(False, ["write", "write"], [x], [x, rowsum], [])
    assert op.scratch[0][0] is scratch  # kept for the next forward of the same shapes


def test_the_plan_of_buffers_reuses_scratch_of_the_same_shape_only():
    x, y = mx.nd.zeros((2, 3)), mx.nd.zeros((2, 3))
    mx.nd.waitall()
    made = []

    def alloc(shape, dtype):
        made.append((shape, dtype))
        buf = np.empty(shape, dtype)
        return buf, int(buf.ctypes.data)

    scratch = {}
    ins, outs, post = fused_op._plan_buffers([x], [y], ["write"], -1, scratch, alloc)
    assert outs[0].ptr == fused_op.data_ptr(y) and post == [] and made == []
    ins, outs, post = fused_op._plan_buffers([x], [y], ["add"], -1, scratch, alloc)
    assert post == [(0, "add")] and outs[0].ptr == scratch[0][1] and made == [((2, 3), "float32")]
    fused_op._plan_buffers([x], [y], ["null"], -1, scratch, alloc)
    assert len(made) == 1
    z = mx.nd.zeros((4, 3))
    mx.nd.waitall()  # MXNet allocates an array's memory when its first operation runs
    ins, outs, post = fused_op._plan_buffers([z], [z], ["write"], -1, scratch, alloc)
    assert post == [(0, "write")] and outs[0].ptr != ins[0].ptr  # an output over its own input: scratch
    assert made[-1] == ((4, 3), "float32")


def test_data_ptr_addresses_the_ndarrays_memory():
    a = mx.nd.array(np.arange(12, dtype=np.float32).reshape(3, 4))
    mx.nd.waitall()
    view = fused_op._host_view(fused_op.data_ptr(a), (3, 4), "float32")
    np.testing.assert_array_equal(view, a.asnumpy())


def test_backward_and_gpus_without_a_runner_are_refused():
    fused = register(AffineEngine(SHAPE))
    with pytest.raises(MxTrtError, match="inference-only"):
        fused_op.make_operator(fused).backward(["write"], [], [], [], [], [])
    with pytest.raises(MxTrtError, match="the AffineEngine engine cannot run on gpu"):
        fused_op._gpu_operator(fused, mx.gpu(0))
