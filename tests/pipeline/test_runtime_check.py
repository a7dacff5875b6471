"""The run-time check: an accelerated executor's forwards served by its engines or its native twin.

Outputs are compared with native MXNet at fp32 (``rtol=1e-4, atol=1e-5``) on every
forward, whichever side served it. The check runs on a virtual clock (``check_clock``, tests/harness/checkclock.py)
that only the forwards advance, each side by what the test sets it to cost: the engines
made slower than native MXNet, or MXNet's twin slower to bind. What a probe counts then
does not depend on how loaded the machine running the tests is.
"""
from __future__ import annotations

import itertools
import logging

import mxnet as mx
import numpy as np
import pytest

import mx_trt
from mx_trt.errors import MxTrtError
from mx_trt.runtime import arbiter as arb
from mx_trt.runtime.arbiter import ENGINES, NATIVE, BindTimes
from mx_trt.settings import Settings
from tests.harness.bindcheck import ATOL, RTOL, conv_relu
from tests.harness.checkclock import slow_engines
from tests.harness.mxcheck import random_inputs, random_params

SHAPES = {"data": (2, 3, 8, 8)}


def _net():
    x = conv_relu(mx.sym.var("data"), "a")
    x = conv_relu(x, "b")
    return mx.sym.FullyConnected(mx.sym.flatten(x), num_hidden=5, name="fc")


@pytest.fixture
def model():
    sym = _net()
    args, aux = random_params(sym, SHAPES, 0)
    return sym, args, aux


def _bind(sym, args, aux, monkeypatch, on=True, shapes=SHAPES):
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1" if on else "0")
    exe = sym.simple_bind(mx.cpu(), grad_req="null", shared_buffer={**args, **aux}, **shapes)
    if not on:
        exe.copy_params_from(args, aux)
    return exe


def _slow_engines(exe, monkeypatch, clock, seconds=0.01):
    slow_engines(mx_trt.bind_info(exe).engines, monkeypatch, clock, seconds)


def _check_forwards(exe, native, n, seed=1, by_kwargs=False):
    """``n`` forwards of new inputs on both, every output compared; the sides that served them.

    MXNet's outputs come first, so that only the comparisons lie between two forwards of ``exe`` (on the real
    clock, an idle gap of :data:`~mx_trt.runtime.arbiter.GAP_S`, 5 ms, starts a new run).
    """
    served = []
    check = exe._mx_trt_check
    first = [o for o in exe.outputs]
    cases = []
    for i in range(n):
        inputs = random_inputs({k: v.shape for k, v in exe.arg_dict.items() if k == "data"}, seed + i)
        for k, v in inputs.items():
            native.arg_dict[k][:] = v
        native.forward(is_train=False)
        cases.append((inputs, [o.asnumpy() for o in native.outputs]))
    for inputs, refs in cases:
        before = dict(check.arbiter.served)
        if by_kwargs:
            outs = exe.forward(is_train=False, **{k: mx.nd.array(v) for k, v in inputs.items()})
        else:
            for k, v in inputs.items():
                exe.arg_dict[k][:] = v
            outs = exe.forward(is_train=False)
        served.append(next(s for s in (ENGINES, NATIVE) if check.arbiter.served[s] > before[s]))
        for got, ref, held in zip(outs, refs, first):
            np.testing.assert_allclose(got.asnumpy(), ref, rtol=RTOL, atol=ATOL)
            # Arrays taken from executor.outputs earlier hold this forward too.
            np.testing.assert_allclose(held.asnumpy(), ref, rtol=RTOL, atol=ATOL)
    return served


def _runs(served):
    """``served`` as (side, forwards in a row)."""
    return [(side, len(list(group))) for side, group in itertools.groupby(served)]


def test_slow_engines_give_their_forwards_to_native_mxnet(model, monkeypatch, caplog, check_clock):
    monkeypatch.setenv("MXNET_TENSORRT_RUNTIME_CHECK", "1")
    sym, args, aux = model
    native = _bind(sym, args, aux, monkeypatch, on=False)
    exe = _bind(sym, args, aux, monkeypatch)
    assert mx_trt.bind_info(exe).engines
    _slow_engines(exe, monkeypatch, check_clock)
    with caplog.at_level(logging.INFO, logger="mx_trt.runtime.arbiter"):
        # MXNet's probe lasts 20 ms of its forwards (1 ms each here), after the engines' 10 ms ones:
        # forwards until the probe that checks the switch is over (3000 at most).
        served = []
        while len(served) < 3000 and len(_runs(served)) < 4:
            served += _check_forwards(exe, native, 50, seed=1 + len(served))
        served += _check_forwards(exe, native, 10, seed=10**4, by_kwargs=True)
    runs = _runs(served)
    # The engines served the first forwards; then MXNet: the first probe (its first 20 ms of forwards pay for
    # the engines' before it, however many that is), and after it every forward but the probe that checked
    # the switch.
    assert runs[0] == (ENGINES, arb.WARMUP + arb.FIRST_AFTER)
    assert [side for side, _ in runs] == [ENGINES, NATIVE, ENGINES, NATIVE]
    assert runs[1][1] >= arb.PROBE_CALLS + arb.MIN_CALLS
    assert runs[2][1] == arb.PROBE_CALLS  # 10 ms forwards: the probe's own
    stats = mx_trt.runtime_stats(exe)
    assert stats["serving"] == NATIVE and stats["switches"] == 1 and stats["off"] is None
    assert stats["median_ms"][ENGINES] > 10 > stats["median_ms"][NATIVE]
    assert "native MXNet now serves its forwards" in caplog.text


def test_fast_engines_keep_serving(model, monkeypatch, quick_probes, check_clock):
    monkeypatch.setenv("MXNET_TENSORRT_RUNTIME_CHECK", "1")
    sym, args, aux = model
    native = _bind(sym, args, aux, monkeypatch, on=False)
    exe = _bind(sym, args, aux, monkeypatch)
    _slow_engines(exe, monkeypatch, check_clock, 0.001)
    check_clock.bind_s, check_clock.native_s = 0.05, 0.011  # binding the twin: part of what the probe costs
    served = _check_forwards(exe, native, 30)
    check = exe._mx_trt_check
    assert check.arbiter.current == ENGINES
    assert served.count(NATIVE) == check_clock.twin_forwards == 4  # one probe, then the budget holds the next back
    # Native MXNet was far slower: its twin, and the memory it holds, is dropped until the next probe.
    assert check.twin is None
    # The next probe waits for what this one cost, binding the twin included.
    assert check.arbiter.probe_cost() >= 0.05 + 3 * 0.01
    check.arbiter._last -= 3600  # the next probe is due: the twin is bound again for it
    check.arbiter._busy[NATIVE] += 3600
    served = _check_forwards(exe, native, 10, seed=40)
    assert served.count(NATIVE) == 4 and check_clock.twin_forwards == 8
    assert check.twin is None and check.arbiter.probes == 2


def test_auto_is_on_for_cpu_binds_under_the_measured_rule(model, monkeypatch, shipped_defaults):
    sym, args, aux = model
    settings = Settings.from_env()
    assert settings.engine_rule == "measured" and settings.runtime_check is None
    monkeypatch.setenv("MXNET_TENSORRT_ENGINE_RULE", "always")
    exe = _bind(sym, args, aux, monkeypatch)
    assert exe._mx_trt_check is None and mx_trt.runtime_stats(exe) is None
    monkeypatch.setenv("MXNET_TENSORRT_RUNTIME_CHECK", "1")
    assert _bind(sym, args, aux, monkeypatch)._mx_trt_check is not None
    monkeypatch.setenv("MXNET_TENSORRT_ENGINE_RULE", "measured")
    monkeypatch.setenv("MXNET_TENSORRT_RUNTIME_CHECK", "0")
    assert _bind(sym, args, aux, monkeypatch)._mx_trt_check is None
    monkeypatch.setenv("MXNET_TENSORRT_RUNTIME_CHECK", "auto")
    exe = _bind(sym, args, aux, monkeypatch)
    if mx_trt.bind_info(exe).engines:  # the measured rule kept an engine for this tiny graph on this machine
        assert exe._mx_trt_check is not None
    else:
        assert exe._mx_trt_check is None


def test_settings_and_options(monkeypatch):
    for raw, want in (("auto", None), ("", None), ("1", True), ("on", True), ("0", False), ("false", False)):
        monkeypatch.setenv("MXNET_TENSORRT_RUNTIME_CHECK", raw)
        assert Settings.from_env().runtime_check is want
    monkeypatch.setenv("MXNET_TENSORRT_RUNTIME_CHECK", "sometimes")
    with pytest.raises(MxTrtError, match="MXNET_TENSORRT_RUNTIME_CHECK='sometimes': expected auto, 1 or 0"):
        Settings.from_env()
    monkeypatch.delenv("MXNET_TENSORRT_RUNTIME_CHECK")
    base = Settings.from_env()
    assert base.with_options({"runtime_check": False}).runtime_check is False
    assert base.with_options({"runtime_check": "auto"}).runtime_check is None
    with pytest.raises(MxTrtError, match="runtime_check='maybe': expected True, False or 'auto'"):
        base.with_options({"runtime_check": "maybe"})


def test_training_forwards_always_run_the_engines(model, monkeypatch):
    monkeypatch.setenv("MXNET_TENSORRT_RUNTIME_CHECK", "1")
    sym, args, aux = model
    exe = _bind(sym, args, aux, monkeypatch)
    for _ in range(20):
        exe.forward(is_train=True)
    assert exe._mx_trt_check.arbiter.served == {ENGINES: 0, NATIVE: 0}


def test_a_twin_that_cannot_bind_turns_the_check_off(model, monkeypatch, caplog, quick_probes):
    monkeypatch.setenv("MXNET_TENSORRT_RUNTIME_CHECK", "1")
    sym, args, aux = model
    native = _bind(sym, args, aux, monkeypatch, on=False)
    exe = _bind(sym, args, aux, monkeypatch)

    def refuse(request, e):
        raise mx.base.MXNetError("no native bind today")

    monkeypatch.setattr(mx_trt.pipeline.bind, "native_twin", refuse)
    with caplog.at_level(logging.WARNING):
        served = _check_forwards(exe, native, 12)
    assert served == [ENGINES] * 12
    assert "binding the symbol natively failed: MXNetError: no native bind today" in exe._mx_trt_check.off
    assert sum("the engines serve every forward from now on" in r.message for r in caplog.records) == 1


def test_a_twin_failing_mid_run_turns_the_check_off(model, monkeypatch, caplog, quick_probes, check_clock):
    monkeypatch.setenv("MXNET_TENSORRT_RUNTIME_CHECK", "1")
    sym, args, aux = model
    native = _bind(sym, args, aux, monkeypatch, on=False)
    exe = _bind(sym, args, aux, monkeypatch)
    _slow_engines(exe, monkeypatch, check_clock)
    _check_forwards(exe, native, 12)
    assert exe._mx_trt_check.arbiter.current == NATIVE

    def broken(*a, **k):
        raise mx.base.MXNetError("the twin broke")

    monkeypatch.setattr(exe._mx_trt_check.twin, "forward", broken)
    with caplog.at_level(logging.WARNING):
        served = _check_forwards(exe, native, 3, seed=50)
    assert served == [ENGINES] * 3
    assert "native MXNet failed: MXNetError: the twin broke" in exe._mx_trt_check.off


def test_bad_inputs_raise_mxnets_own_errors_on_either_side(model, monkeypatch, quick_probes, check_clock):
    monkeypatch.setenv("MXNET_TENSORRT_RUNTIME_CHECK", "1")
    sym, args, aux = model
    native = _bind(sym, args, aux, monkeypatch, on=False)
    exe = _bind(sym, args, aux, monkeypatch)
    _slow_engines(exe, monkeypatch, check_clock)
    for n in (0, 12):  # the engines serving, then native MXNet
        _check_forwards(exe, native, n)
        with pytest.raises(ValueError, match="Shape not match"):
            exe.forward(is_train=False, data=mx.nd.zeros((1, 3, 8, 8)))
        with pytest.raises(TypeError, match="Unknown argument"):
            exe.forward(is_train=False, nothing=mx.nd.zeros((1,)))
    assert exe._mx_trt_check.arbiter.current == NATIVE and exe._mx_trt_check.off is None


def test_a_reshaped_executor_gets_its_own_check_and_twin(model, monkeypatch, check_clock):
    monkeypatch.setenv("MXNET_TENSORRT_RUNTIME_CHECK", "1")
    monkeypatch.setenv("MXNET_TENSORRT_MAX_BATCH_SIZE", "4")
    sym, args, aux = model
    exe = _bind(sym, args, aux, monkeypatch)
    _slow_engines(exe, monkeypatch, check_clock)
    native = _bind(sym, args, aux, monkeypatch, on=False)
    _check_forwards(exe, native, 12)
    assert exe._mx_trt_check.twin is not None
    small = exe.reshape(data=(1, 3, 8, 8))
    native_small = native.reshape(data=(1, 3, 8, 8))
    assert small._mx_trt_check is not exe._mx_trt_check
    served = _check_forwards(small, native_small, 12)
    assert served[-3:] == [NATIVE] * 3
    assert small._mx_trt_check.twin.arg_dict["data"].shape == (1, 3, 8, 8)
    # The parent keeps serving at its own shape.
    assert _check_forwards(exe, native, 3, seed=70) == [NATIVE] * 3


def test_the_binds_timings_of_the_whole_executor_reach_its_check(model, monkeypatch):
    """Engines timed by the measured rule: their timings and MXNet's (seconds, summed) go to the check,
    ``partial`` unless one engine holds every operator; an engine the measured rule did not time against
    MXNet (the cost rule, a decision without MXNet's time) gives none."""
    from types import SimpleNamespace

    from mx_trt.pipeline import bind as pipeline_bind
    from mx_trt.pipeline.measure import Decision

    measured_engines = pipeline_bind.measured_engines

    def info_of(inside, total, engines, decisions):
        plan = SimpleNamespace(op_counts=lambda: (inside, total))
        return SimpleNamespace(plan=plan, engines=[SimpleNamespace(name=f"sg{i}") for i in range(engines)],
                               decisions=decisions)

    timed = Decision("sg0", ("onnxruntime", "fp32"), 7.5, {"onnxruntime fp32": 3.0, "openvino fp32": 2.5},
                     native_first_ms=300.0)
    assert measured_engines(info_of(9, 9, 1, {"sg0": timed})) == BindTimes(0.003, 0.0075, 0.3)
    # A decision stored before MXNet's first forward was timed.
    stored = Decision.from_json("sg0", {k: v for k, v in timed.to_json().items() if k != "native_first_ms"})
    assert measured_engines(info_of(9, 9, 1, {"sg0": stored})) == BindTimes(0.003, 0.0075, None)
    assert Decision.from_json("sg0", timed.to_json()).native_first_ms == 300.0
    # An operator left native; two engines (a third subgraph kept native is not summed).
    assert measured_engines(info_of(8, 9, 1, {"sg0": timed})) == BindTimes(0.003, 0.0075, 0.3, partial=True)
    other = Decision("sg1", ("openvino", "fp32"), 2.0, {"openvino fp32": 1.0}, native_first_ms=50.0)
    kept_native = Decision("sg2", None, 1.0, {"onnxruntime fp32": 2.0}, native_first_ms=5.0)
    got = measured_engines(info_of(9, 9, 2, {"sg0": timed, "sg1": other, "sg2": kept_native}))
    assert got == pytest.approx(BindTimes(0.004, 0.0095, 0.35, partial=True))
    assert measured_engines(info_of(9, 9, 2, {"sg0": timed, "sg1": stored})) == BindTimes(0.006, 0.015, None, True)
    assert measured_engines(info_of(9, 9, 2, {"sg0": timed})) is None  # sg1 not timed
    assert measured_engines(info_of(0, 9, 0, {})) is None
    assert measured_engines(info_of(9, 9, 1, {"sg0": Decision("sg0", ("onnxruntime", "fp32"), how="cost")})) is None
    assert measured_engines(info_of(9, 9, 1, {"sg0": Decision("sg0", None, 7.5, {"onnxruntime fp32": 9.0})})) is None
    # An engine of long forwards kept without timing MXNet: the check's first probe makes the comparison.
    checked = Decision("sg0", ("onnxruntime", "fp32"), None, {"onnxruntime fp32": 2900.0}, how="checked")
    assert measured_engines(info_of(9, 9, 1, {"sg0": checked})) is None

    # The bind hands them to the executor's check.
    sym, args, aux = model
    monkeypatch.setenv("MXNET_TENSORRT_RUNTIME_CHECK", "1")
    for expect, seeded in ((BindTimes(0.001, 0.002), True), (BindTimes(0.001, 0.0011), False),
                           (BindTimes(0.001, 0.0011, 0.2), True), (None, False)):
        monkeypatch.setattr(pipeline_bind, "measured_engines", lambda info, e=expect: e)
        exe = _bind(sym, args, aux, monkeypatch)
        assert exe._mx_trt_check.arbiter.seeded is seeded
