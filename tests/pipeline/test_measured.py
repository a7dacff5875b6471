"""The measured engine rule (mx_trt.pipeline.measure): engines timed against MXNet, decisions kept in the plan cache.

Stub timers make the decisions deterministic; one test times a real model.
Outputs are compared with MXNet's own at fp32 tolerance (tests.mxcheck.OP_TOL)
whatever the rule decides: a subgraph kept native is MXNet's own result.
"""
from __future__ import annotations

import logging

import mxnet as mx
import numpy as np
import pytest

import mx_trt
from mx_trt.build import backends
from mx_trt.pipeline import measure
from tests.bindcheck import ATOL, RTOL, bind, conv_relu
from tests.mxcheck import random_inputs, random_params

SHAPES = {"data": (2, 3, 16, 16)}


def _net():
    x = conv_relu(mx.sym.var("data"), "a", 8)
    x = conv_relu(x, "b", 8)
    return mx.sym.FullyConnected(mx.sym.flatten(x, name="flat"), num_hidden=10, name="fc")


class StubTimer:
    """Runs each executor once (so both really run), then reports fixed medians: MXNet's and one per candidate."""

    def __init__(self, native_ms, engine_ms):
        self.native_ms, self.engine_ms, self.calls = native_ms, list(engine_ms), 0

    def __call__(self, native, engines, seconds):
        self.calls += 1
        native()
        for run in engines:
            run()
        assert len(engines) == len(self.engine_ms)
        return self.native_ms, list(self.engine_ms)


@pytest.fixture
def measured(monkeypatch):
    # One CPU candidate (ONNX Runtime), so that the stub timers' lists are per precision;
    # tests/build/test_openvino_backend.py times OpenVINO beside it.
    monkeypatch.setitem(backends.PREFERENCE, "cpu", ["onnxruntime"])
    monkeypatch.setenv("MXNET_TENSORRT_ENGINE_RULE", "measured")
    monkeypatch.setenv("MXNET_TENSORRT_MIN_SUBGRAPH_SIZE", "2")


def _run(monkeypatch, timer, **env):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(measure, "default_timer", timer)
    sym = _net()
    args, aux = random_params(sym, SHAPES)
    inputs = random_inputs(SHAPES)
    _, ref = bind(sym, SHAPES, args, aux, inputs, False, monkeypatch)
    exe, got = bind(sym, SHAPES, args, aux, inputs, True, monkeypatch)
    np.testing.assert_allclose(got[0], ref[0], rtol=RTOL, atol=ATOL)
    return mx_trt.bind_info(exe)


def test_slower_engine_stays_native(monkeypatch, measured, caplog):
    timer = StubTimer(3.2, [4.1])
    with caplog.at_level(logging.INFO, logger="mx_trt.pipeline.bind"):
        info = _run(monkeypatch, timer)
    assert timer.calls == 1
    (decision,) = info.decisions.values()
    assert decision.engine is None and decision.how == "measured"
    assert decision.native_ms == 3.2 and decision.engine_ms == {"onnxruntime fp32": 4.1}
    assert info.engines == []
    assert "kept native: engine 1.28x slower, measured 4.10 vs 3.20 ms" in caplog.text
    assert info.native_failures[decision.subgraph] == decision.text


def test_faster_engine_is_kept(monkeypatch, measured):
    info = _run(monkeypatch, StubTimer(3.0, [1.0]))
    (decision,) = info.decisions.values()
    assert decision.engine == ("onnxruntime", "fp32")
    assert len(info.engines) == 1 and not info.native_failures
    assert "3.00x faster" in decision.text


def test_fp16_slower_than_fp32_falls_back_to_fp32(monkeypatch, measured, tmp_path):
    # Candidates in order: the precision asked for, then fp32.
    info = _run(monkeypatch, StubTimer(10.0, [6.0, 5.0]), MXNET_TENSORRT_PRECISION="fp16")
    (decision,) = info.decisions.values()
    assert decision.engine == ("onnxruntime", "fp32")
    assert decision.engine_ms == {"onnxruntime fp16": 6.0, "onnxruntime fp32": 5.0}
    assert "fp16 1.20x slower than fp32" in decision.text
    # The fp32 engine runs: the outputs matched MXNet's at fp32 tolerance in _run.
    assert len(info.engines) == 1
    assert all(t.dtype == "float32" for t in info.engines[0].engine.inputs)


def test_fp16_faster_than_fp32_is_kept(monkeypatch, measured):
    monkeypatch.setattr(measure, "default_timer", StubTimer(10.0, [4.0, 5.0]))
    monkeypatch.setenv("MXNET_TENSORRT_PRECISION", "fp16")
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1")
    sym = _net()
    args, aux = random_params(sym, SHAPES)
    exe = sym.simple_bind(mx.cpu(), grad_req="null", shared_buffer={**args, **aux}, **SHAPES)
    (decision,) = mx_trt.bind_info(exe).decisions.values()
    assert decision.engine == ("onnxruntime", "fp16")


def test_warm_bind_reuses_decisions_without_timing(monkeypatch, measured):
    from mx_trt.build import engines

    first = StubTimer(3.0, [1.0])
    info = _run(monkeypatch, first)
    assert first.calls == 1 and not next(iter(info.decisions.values())).stored

    def no_timing(*a):
        raise AssertionError("a warm bind must not time anything")

    engines.clear_pool()  # the engine comes from the plan cache, the decision too
    again = _run(monkeypatch, no_timing)
    (decision,) = again.decisions.values()
    assert decision.stored and decision.engine == ("onnxruntime", "fp32") and decision.native_ms == 3.0
    assert again.loads == 1 and again.builds == 0


def test_stored_native_decision_builds_nothing(monkeypatch, measured):
    _run(monkeypatch, StubTimer(1.0, [2.0]))
    from mx_trt.build import engines

    engines.clear_pool()

    def no_timing(*a):
        raise AssertionError("a warm bind must not time anything")

    info = _run(monkeypatch, no_timing)
    (decision,) = info.decisions.values()
    assert decision.stored and decision.engine is None
    assert info.builds == 0 and info.loads == 0 and info.engines == []


def test_no_plan_cache_falls_back_to_the_cost_rule(monkeypatch, measured, caplog):
    def no_timing(*a):
        raise AssertionError("without a plan cache nothing is timed")

    with caplog.at_level(logging.INFO, logger="mx_trt.pipeline.bind"):
        info = _run(monkeypatch, no_timing, MXNET_TENSORRT_CACHE_DIR="")
    assert info.decisions == {}
    assert "the cost rule decides instead" in caplog.text


def test_measured_is_the_default(monkeypatch, default_engine_rule):
    from mx_trt.settings import Settings

    assert Settings.from_env().engine_rule == "measured"
    monkeypatch.setenv("MXNET_TENSORRT_ENGINE_RULE", "cost")
    assert Settings.from_env().engine_rule == "cost"


def test_budget_spent_leaves_the_cost_rule_to_decide(monkeypatch, measured):
    monkeypatch.setattr(measure, "BIND_SECONDS", 0.0)

    def no_timing(*a):
        raise AssertionError("no budget: nothing is timed")

    info = _run(monkeypatch, no_timing)
    (decision,) = info.decisions.values()
    assert decision.how == "cost" and "budget" in decision.text and not decision.stored


def test_real_timing_on_a_small_model(monkeypatch, default_engine_rule):
    """The shipped defaults on a small CNN: a decision with both timings, stored; the warm bind times nothing."""
    sym = _net()
    args, aux = random_params(sym, SHAPES)
    inputs = random_inputs(SHAPES)
    _, ref = bind(sym, SHAPES, args, aux, inputs, False, monkeypatch)
    exe, got = bind(sym, SHAPES, args, aux, inputs, True, monkeypatch)
    np.testing.assert_allclose(got[0], ref[0], rtol=RTOL, atol=ATOL)
    info = mx_trt.bind_info(exe)
    assert info.decisions, "the measured rule decided every subgraph"
    for d in info.decisions.values():
        assert d.how == "measured" and d.native_ms > 0 and all(v > 0 for v in d.engine_ms.values())
        assert (d.engine is None) == (d.subgraph in info.native_failures)
    assert info.timings["measure"] > 0

    from mx_trt.build import engines

    engines.clear_pool()

    def no_timing(*a):
        raise AssertionError("a warm bind must not time anything")

    monkeypatch.setattr(measure, "default_timer", no_timing)
    exe2, got2 = bind(sym, SHAPES, args, aux, inputs, True, monkeypatch)
    np.testing.assert_allclose(got2[0], ref[0], rtol=RTOL, atol=ATOL)
    warm = mx_trt.bind_info(exe2)
    assert all(d.stored for d in warm.decisions.values())
    assert warm.timings["measure"] == 0
