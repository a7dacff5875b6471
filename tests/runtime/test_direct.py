"""The direct forward of a whole model in one engine: when it applies, and that it computes what MXNet's path does.

Executors bind a symbol of one fused node over :class:`tests.runtime.fake_engine.AffineEngine`
(an engine in numpy) natively, with the guarded forward installed; outputs are
compared with the same computation in MXNet's own operators (fp32,
``OP_TOL["float32"]``). The engine records the thread of each run: the direct
forward runs on the caller's thread, MXNet's path on its custom-operator worker.
"""
from __future__ import annotations

import threading

import mxnet as mx
import numpy as np
import pytest

import mx_trt
from mx_trt.errors import EngineRunError
from mx_trt.runtime.direct import DirectForward
from mx_trt.runtime.forward import guard_forward
from tests.harness.mxcheck import OP_TOL, random_inputs, run_native
from tests.runtime.fake_engine import AffineEngine
from tests.runtime.test_fused_op import SHAPE, bound_conv_fc, fused_symbol, native, register

RTOL, ATOL = OP_TOL["float32"]


class ThreadEngine(AffineEngine):
    """An :class:`AffineEngine` that records the thread of each run."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.threads = []

    def run(self, inputs, outputs) -> None:
        self.threads.append(threading.get_ident())
        super().run(inputs, outputs)


def guarded(sym, fused, shapes=None):
    exe = sym.simple_bind(mx.cpu(), grad_req="null", **(shapes or {"data": SHAPE}))
    guard_forward(exe, [fused])
    return exe


def check(outs, inputs):
    for g, r in zip(outs, native(inputs)):
        np.testing.assert_allclose(g.asnumpy(), r, rtol=RTOL, atol=ATOL)


def test_one_fused_node_runs_on_the_callers_thread_and_matches_mxnet():
    engine = ThreadEngine(SHAPE)
    fused = register(engine)
    exe = guarded(fused_symbol(fused), fused)
    assert DirectForward.plan(exe, [fused]) is not None
    for seed, kind in enumerate(["nd", "np", "preset", "nd"]):
        inputs = random_inputs({"data": SHAPE}, seed=seed)
        if kind == "preset":
            exe.arg_dict["data"][:] = inputs["data"]
            outs = exe.forward(is_train=False)
        else:
            value = mx.nd.array(inputs["data"]) if kind == "nd" else inputs["data"]
            outs = exe.forward(is_train=False, data=value)
        assert outs is exe.outputs
        check(outs, inputs)
    assert engine.threads == [threading.get_ident()] * 4 and fused.run_count == 4


def slow_zero():
    """A zero that MXNet computes for tens of milliseconds (queued, not yet done when returned)."""
    big = mx.nd.ones((1500, 1500))
    return mx.nd.dot(big, big).sum() * 0


def test_an_input_still_being_computed_is_waited_for():
    """The input's value is queued behind tens of milliseconds of MXNet work. (MXNet's one CPU worker runs its
    queue in order, so the wait on the outputs would cover this too: the case fails only without both.)"""
    fused = register(AffineEngine(SHAPE))
    exe = guarded(fused_symbol(fused), fused)
    for seed in range(3):
        inputs = random_inputs({"data": SHAPE}, seed=seed)
        exe.arg_dict["data"][:] = mx.nd.array(inputs["data"]) + slow_zero()
        check(exe.forward(is_train=False), inputs)


def test_an_output_still_being_read_is_not_overwritten_before_the_read():
    fused = register(AffineEngine(SHAPE))
    exe = guarded(fused_symbol(fused), fused)
    for seed in range(3):
        inputs = random_inputs({"data": SHAPE}, seed=seed)
        before = exe.forward(is_train=False, data=inputs["data"])[0].asnumpy()
        kept = slow_zero() + exe.outputs[0]  # a read of the output, queued behind the slow zero
        exe.forward(is_train=False, data=inputs["data"] + 1)
        np.testing.assert_array_equal(kept.asnumpy(), before)


def test_outputs_in_another_order_map_to_the_executors():
    fused = register(AffineEngine(SHAPE))
    node = fused_symbol(fused)
    exe = guarded(mx.sym.Group([node[1], node[0]]), fused)
    assert DirectForward.plan(exe, [fused]) is not None
    inputs = random_inputs({"data": SHAPE})
    outs = exe.forward(is_train=False, data=inputs["data"])
    ref = native(inputs)
    np.testing.assert_allclose(outs[0].asnumpy(), ref[1], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(outs[1].asnumpy(), ref[0], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("case", ["native op beside", "an output twice", "one output unused", "two engines"])
def test_other_graphs_keep_mxnets_path(case):
    engine = ThreadEngine(SHAPE)
    fused = register(engine)
    node = fused_symbol(fused)
    engines = [fused]
    sym = {"native op beside": lambda: mx.sym.Group([mx.sym.relu(node[0]), node[1]]),
           "an output twice": lambda: mx.sym.Group([node[0], node[1], node[0]]),
           "one output unused": lambda: node[0]}.get(case, lambda: node)()
    if case == "two engines":
        engines = [fused, register(AffineEngine(SHAPE), name="other")]
    exe = sym.simple_bind(mx.cpu(), grad_req="null", data=SHAPE)
    assert DirectForward.plan(exe, engines) is None
    guard_forward(exe, engines)
    inputs = random_inputs({"data": SHAPE})
    outs = exe.forward(is_train=False, data=inputs["data"])
    np.testing.assert_allclose(outs[-1].asnumpy(), native(inputs)[0 if case in ("an output twice", "one output unused") else -1],
                               rtol=RTOL, atol=ATOL)
    assert engine.threads and threading.get_ident() not in engine.threads


def test_training_forwards_and_monitored_executors_keep_mxnets_path():
    engine = ThreadEngine(SHAPE)
    fused = register(engine)
    exe = guarded(fused_symbol(fused), fused)
    inputs = random_inputs({"data": SHAPE})
    check(exe.forward(is_train=True, data=inputs["data"]), inputs)
    seen = []
    exe.set_monitor_callback(lambda name, arr: seen.append(name))
    check(exe.forward(is_train=False, data=inputs["data"]), inputs)
    assert threading.get_ident() not in engine.threads and len(engine.threads) == 2 and seen


def test_a_failed_run_raises_the_typed_error_and_the_executor_recovers():
    engine = AffineEngine(SHAPE)
    fused = register(engine)
    exe = guarded(fused_symbol(fused), fused)
    engine.fail = RuntimeError("device lost")
    with pytest.raises(EngineRunError, match="fused: RuntimeError: device lost"):
        exe.forward(is_train=False, data=np.ones(SHAPE, np.float32))
    assert fused.last_error is None
    engine.fail = None
    inputs = random_inputs({"data": SHAPE})
    check(exe.forward(is_train=False, data=inputs["data"]), inputs)


def test_bad_keyword_inputs_raise_mxnets_errors():
    fused = register(AffineEngine(SHAPE))
    exe = guarded(fused_symbol(fused), fused)
    with pytest.raises(ValueError, match="Shape not match"):
        exe.forward(is_train=False, data=np.ones((2, 3, 5), np.float32))
    with pytest.raises(TypeError, match="Unknown argument label"):
        exe.forward(is_train=False, label=np.ones(SHAPE, np.float32))
    with pytest.raises(ValueError, match="only accept"):
        exe.forward(is_train=False, data=[1.0])
    inputs = random_inputs({"data": SHAPE})
    check(exe.forward(is_train=False, data=mx.nd.array(inputs["data"], dtype="float64")), inputs)  # cast on the way


def test_a_reshaped_executor_runs_directly_on_its_own_engine():
    engine = ThreadEngine((8, 3, 5), batch_ranges=[(1, 4, 8)])
    fused = register(engine)
    exe = guarded(fused_symbol(fused), fused, {"data": (8, 3, 5)})
    for batch in (3, 8):
        small = exe.reshape(allow_up_sizing=True, data=(batch, 3, 5))
        inputs = random_inputs({"data": (batch, 3, 5)}, seed=batch)
        check(small.forward(is_train=False, data=inputs["data"]), inputs)
    assert [r[0][0] for r in engine.runs] == [3, 8] and set(engine.threads) == {threading.get_ident()}


def test_a_whole_model_bound_by_the_pass_runs_directly(monkeypatch):
    """The pass's own engine (ONNX Runtime) holding a whole model: the direct path, compared with MXNet."""
    monkeypatch.setenv("MXNET_TENSORRT_RUNTIME_CHECK", "0")
    shapes = {"data": (2, 3, 8, 8)}
    s, args, aux, exe = bound_conv_fc(monkeypatch, shapes)
    info = mx_trt.bind_info(exe)
    assert len(info.engines) == 1 and DirectForward.plan(exe, info.engines) is not None
    before = info.engines[0].run_count
    for seed in range(2):
        inputs = random_inputs(shapes, seed=seed + 5)
        got = exe.forward(is_train=False, **inputs)[0].asnumpy()
        np.testing.assert_allclose(got, run_native(s, shapes, args, aux, inputs)[0], rtol=1e-4, atol=1e-5)
    assert info.engines[0].run_count == before + 2


def test_an_executor_without_engines_keeps_mxnets_own_forward():
    """Nothing to guard: MXNet's forward, asynchronous as natively; a reshape still carries the bind's info."""
    x = mx.sym.var("data")
    sym = mx.sym.FullyConnected(mx.sym.flatten(x), num_hidden=4, name="fc")
    exe = sym.simple_bind(mx.cpu(), grad_req="null", data=SHAPE)
    exe.copy_params_from({k: mx.nd.ones(v.shape) for k, v in exe.arg_dict.items() if k != "data"})
    exe._mx_trt = "info"
    guard_forward(exe, [])
    assert "forward" not in vars(exe) and exe._mx_trt_check is None
    inputs = random_inputs({"data": SHAPE}, seed=0)
    outs = exe.forward(is_train=False, data=mx.nd.array(inputs["data"]))
    flat = inputs["data"].reshape(SHAPE[0], -1)
    want = flat @ np.ones((flat.shape[1], 4), "float32") + 1.0  # weights and bias all ones
    np.testing.assert_allclose(outs[0].asnumpy(), want, rtol=RTOL, atol=ATOL)
    new = exe.reshape(data=(1,) + SHAPE[1:])
    assert new._mx_trt == "info" and "forward" not in vars(new)


def test_another_engine_of_the_node_runs_the_same_forward_on_its_own_fused_engine():
    """An alternate engine (the run-time check's): same arrays, its own run count; one of other shapes is refused."""
    from mx_trt.errors import ShapeError

    engine, other = ThreadEngine(SHAPE), ThreadEngine(SHAPE)
    fused = register(engine)
    exe = guarded(fused_symbol(fused), fused)
    direct = DirectForward.plan(exe, [fused])
    alt = direct.with_engine(other, "alt")
    inputs = random_inputs({"data": SHAPE}, seed=3)
    outs = alt.forward(exe, {"data": mx.nd.array(inputs["data"])})
    check(outs, inputs)
    assert len(other.runs) == 1 and engine.runs == [] and alt.fused.run_count == 1 and fused.run_count == 0
    assert outs[0] is exe.outputs[0]
    wrong = (SHAPE[0] + 1,) + tuple(SHAPE[1:])
    with pytest.raises(ShapeError, match="alt2: the engine does not take"):
        direct.with_engine(ThreadEngine(wrong), "alt2")
    with pytest.raises(ShapeError):
        direct.with_engine(ThreadEngine(SHAPE, dtype="float16"), "alt3")
