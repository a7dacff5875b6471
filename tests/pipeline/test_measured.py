"""The measured engine rule (mx_trt.pipeline.measure): engines timed against MXNet, decisions kept in the plan cache.

Stub timers make the decisions deterministic; one test times a real model.
Outputs are compared with MXNet's own at fp32 tolerance (tests.harness.mxcheck.OP_TOL)
whatever the rule decides: a subgraph kept native is MXNet's own result.
"""
from __future__ import annotations

import logging
import os

import mxnet as mx
import numpy as np
import pytest

import mx_trt
from mx_trt.builder import backends
from mx_trt.cache import EngineCache
from mx_trt.pipeline import measure
from tests.harness.bindcheck import ATOL, RTOL, bind, conv_relu
from tests.harness.mxcheck import random_inputs, random_params

SHAPES = {"data": (2, 3, 32, 32)}


def _net():
    # large enough for the cost estimate to let the measured rule time it (about 20M multiply-adds)
    x = conv_relu(mx.sym.var("data"), "a", 32)
    x = conv_relu(x, "b", 32)
    return mx.sym.FullyConnected(mx.sym.flatten(x, name="flat"), num_hidden=10, name="fc")


class StubTimer:
    """Runs each executor once (so both really run), then reports fixed medians (MXNet's and one per candidate)
    and, as per-round ratios, the ratios of those medians."""

    def __init__(self, native_ms, engine_ms):
        self.native_ms, self.engine_ms, self.calls = native_ms, list(engine_ms), 0

    def __call__(self, native, engines, seconds, budget_s):
        self.calls += 1
        native()
        for run in engines:
            run()
        assert len(engines) == len(self.engine_ms)
        return self.native_ms, list(self.engine_ms), [ms / self.native_ms for ms in self.engine_ms]


@pytest.fixture
def measured(monkeypatch):
    # One CPU candidate (ONNX Runtime), so that the stub timers' lists are per precision;
    # tests/builder/test_openvino_backend.py times OpenVINO beside it.
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
    with caplog.at_level(logging.INFO, logger="mx_trt.pipeline"):
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


def test_a_near_tie_goes_to_the_engine_of_a_whole_model_under_the_run_time_check(monkeypatch, measured):
    """The check (on by default for CPU binds under this rule) compares that engine with MXNet on the executor's
    forwards, so the bind's 5% margin is not needed; with the check off it is."""
    info = _run(monkeypatch, StubTimer(3.0, [2.94]))
    (decision,) = info.decisions.values()
    assert decision.engine == ("onnxruntime", "fp32") and len(info.engines) == 1
    assert "1.02x faster" in decision.text and "near tie" in decision.text
    info = _run(monkeypatch, StubTimer(3.0, [2.94]), MXNET_TENSORRT_RUNTIME_CHECK="0")
    (decision,) = info.decisions.values()
    assert decision.engine is None and not decision.stored  # its own decision, not the checked bind's
    assert "engine only 1.02x faster (below 1.05x)" in decision.text


@pytest.mark.parametrize("engine_ms, kept", [(3.2, True), (3.29, True), (3.31, False), (4.1, False)])
def test_a_whole_model_engine_up_to_10_percent_slower_is_kept_for_the_check(monkeypatch, measured, engine_ms, kept):
    """Three timed forwards a side at bind are a coin toss for a near tie on a noisy machine: the check, which
    probes at once an engine slower than MXNet was at the bind, settles it on the executor's own forwards."""
    info = _run(monkeypatch, StubTimer(3.0, [engine_ms]))
    (decision,) = info.decisions.values()
    assert (decision.engine is not None) == kept
    if kept:
        assert f"{engine_ms / 3.0:.2f}x slower, within 1.10x" in decision.text and "near tie" in decision.text
    else:
        assert "kept native: engine" in decision.text
    info = _run(monkeypatch, StubTimer(3.0, [engine_ms]), MXNET_TENSORRT_RUNTIME_CHECK="0")
    assert next(iter(info.decisions.values())).engine is None


def test_a_near_tie_stays_native_beside_native_operators(monkeypatch, measured):
    """With MXNet operators beside the engine the check compares more than this engine: the usual margin."""
    info = _run(monkeypatch, StubTimer(3.0, [2.94]), MXNET_TENSORRT_EXCLUDE_OPS="FullyConnected")
    (decision,) = info.decisions.values()
    inside, total = info.plan.op_counts()
    assert inside < total
    assert decision.engine is None and "below 1.05x" in decision.text


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
    from mx_trt.builder import engines

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
    from mx_trt.builder import engines

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

    with caplog.at_level(logging.INFO, logger="mx_trt.pipeline"):
        info = _run(monkeypatch, no_timing, MXNET_TENSORRT_CACHE_DIR="")
    assert info.decisions == {}
    assert "the cost rule decides instead" in caplog.text


def test_measured_is_the_default(monkeypatch, shipped_defaults):
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


def test_real_timing_on_a_small_model(monkeypatch, shipped_defaults):
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
        assert d.native_first_ms is not None and d.native_first_ms > 0  # MXNet's first forward, timed too
        assert (d.engine is None) == (d.subgraph in info.native_failures)
    assert info.timings["measure"] > 0

    from mx_trt.builder import engines

    engines.clear_pool()

    def no_timing(*a):
        raise AssertionError("a warm bind must not time anything")

    monkeypatch.setattr(measure, "default_timer", no_timing)
    exe2, got2 = bind(sym, SHAPES, args, aux, inputs, True, monkeypatch)
    np.testing.assert_allclose(got2[0], ref[0], rtol=RTOL, atol=ATOL)
    warm = mx_trt.bind_info(exe2)
    assert all(d.stored for d in warm.decisions.values())
    assert {k: d.native_first_ms for k, d in warm.decisions.items()} == {
        k: pytest.approx(d.native_first_ms) for k, d in info.decisions.items()}
    assert warm.timings["measure"] == 0


def test_subgraph_graph_cuts_the_subgraph_out():
    from mx_trt.passes.ir import Entry, Graph, Node

    #   data -> conv(w) -> relu -> fc(w2) -> out ; only conv and relu form the subgraph
    g = Graph(nodes=[Node(0, "data", "null"), Node(1, "w", "null"), Node(2, "conv", "Convolution", {"kernel": "(1, 1)"},
                                                                     (Entry(0), Entry(1))),
                     Node(3, "relu", "relu", {}, (Entry(2),)), Node(4, "w2", "null"),
                     Node(5, "fc", "FullyConnected", {}, (Entry(3), Entry(4)))],
              heads=[Entry(5)], shapes={Entry(0): (1, 3), Entry(1): (4, 3), Entry(2): (1, 4), Entry(3): (1, 4)},
              dtypes={Entry(0): "float32"})
    sub = measure.subgraph_graph(g, [2, 3], [Entry(0)], [Entry(3)])
    assert [(n.name, n.op) for n in sub.nodes] == [("data", "null"), ("w", "null"), ("conv", "Convolution"),
                                                  ("relu", "relu")]
    assert sub.nodes[2].inputs == (Entry(0), Entry(1)) and sub.nodes[3].inputs == (Entry(2),)
    assert sub.heads == [Entry(3)]
    assert sub.shapes[Entry(1)] == (4, 3) and sub.shapes[Entry(3)] == (1, 4)
    sub.validate()


def test_timing_inputs_are_weights_or_values_every_index_accepts():
    # Inputs the model may read as token ids or lengths get values in [0, 1) (0 as an index), never negative:
    # standard normal ones made MXNet's own BERT forward write outside its buffers and end the process.
    from mx_trt.passes.ir import Entry, Graph, Node

    table = mx.nd.array(np.arange(12, dtype="float32").reshape(4, 3))
    g = Graph(nodes=[Node(0, "tokens", "null"), Node(1, "table", "null"), Node(2, "lengths", "null"),
                     Node(3, "emb", "Embedding", {"input_dim": "4", "output_dim": "3"}, (Entry(0), Entry(1)))],
              heads=[Entry(3)], shapes={Entry(0): (64, 32), Entry(1): (4, 3), Entry(2): (64,)},
              dtypes={Entry(0): "float32", Entry(2): "int32"})
    feeds = measure._feeds(g, {"table": table})
    assert feeds["table"] is table
    tokens = feeds["tokens"]
    assert tokens.dtype == np.float32 and tokens.min() >= 0.0 and tokens.max() < 1.0 and tokens.std() > 0.1
    assert feeds["lengths"].dtype == np.int32 and not feeds["lengths"].any()
    out = mx.nd.Embedding(mx.nd.array(tokens), table, input_dim=4, output_dim=3).asnumpy()
    np.testing.assert_array_equal(out, np.broadcast_to(table.asnumpy()[0], out.shape))


def test_alternate_runs_in_rounds_within_the_budget():
    calls = []
    now = [0.0]

    def clock():
        return now[0]

    def fn(name, ms):
        def run():
            calls.append(name)
            now[0] += ms / 1e3
        return run

    med = measure.alternate([fn("a", 10), fn("b", 30)], seconds=0.2, min_runs=3, max_runs=50, warmup=1, clock=clock,
                            settle=0)
    assert med == pytest.approx([10.0, 30.0])
    # one warm-up each, then a and b alternate, in turn first, until 0.2 s have passed (5 rounds of 40 ms)
    assert calls[:2] == ["a", "b"] and calls[2:] == ["a", "b", "b", "a", "a", "b", "b", "a", "a", "b"]
    calls.clear()
    measure.alternate([fn("a", 500)], seconds=0.1, min_runs=3, warmup=0, clock=clock, settle=0)
    assert calls == ["a"] * 3  # at least min_runs, whatever the budget


def _fake_runs():
    """``(make, clock, calls, now)``: ``make(name, s)`` is a run that takes ``s`` seconds of ``clock``, a clock
    that moves only by runs, and logs ``name`` in ``calls``; ``now[0]`` is the clock's time."""
    calls, now = [], [0.0]

    def make(name, s):
        def run():
            calls.append(name)
            now[0] += s
        return run

    return make, (lambda: now[0]), calls, now


def test_the_bind_budget_bounds_rounds_of_long_runs():
    """Runs of seconds: no untimed runs in their turns, and no round that would end past the budget but the first."""
    fn, clock, calls, now = _fake_runs()

    # MXNet 4.6 s a run, two engines 2.5 s: warm-up 9.6 s, then one round (no untimed runs) of 9.6 s
    times = measure.alternate_runs([fn("native", 4.6), fn("a", 2.5), fn("b", 2.5)], seconds=0.2,
                                   clock=clock, budget_s=10.0)
    assert [len(t) for t in times] == [1, 1, 1] and times[0] == [pytest.approx(4600.0)]
    assert calls == ["native", "a", "b", "native", "a", "b"]
    assert now[0] == pytest.approx(19.2)
    # a budget of 30 s: warm-up and two rounds end at 28.8 s; a third would end at 38.4
    calls.clear()
    now[0] = 0.0
    times = measure.alternate_runs([fn("native", 4.6), fn("a", 2.5), fn("b", 2.5)], seconds=0.2,
                                   clock=clock, budget_s=30.0)
    assert [len(t) for t in times] == [2, 2, 2] and now[0] == pytest.approx(28.8)
    # without a budget, MIN_RUNS rounds whatever they cost
    now[0] = 0.0
    times = measure.alternate_runs([fn("native", 4.6), fn("a", 2.5)], seconds=0.2, clock=clock)
    assert [len(t) for t in times] == [measure.MIN_RUNS] * 2


def test_the_budget_leaves_short_runs_their_rounds_and_untimed_runs():
    fn, clock, calls, now = _fake_runs()

    times = measure.alternate_runs([fn("native", 0.05), fn("engine", 0.04)], seconds=0.2, clock=clock,
                                   budget_s=10.0)
    assert len(times[0]) == measure.MIN_RUNS  # 0.2 s passed after the third round
    # a warm-up each, then per round and function one untimed run (20 ms passed) and one timed
    assert len(calls) == 2 * (measure.WARMUP + measure.MIN_RUNS * (measure.SETTLE + 1))
    # a budget that one more round would pass stops them, after one round at least
    calls.clear()
    now[0] = 0.0
    times = measure.alternate_runs([fn("native", 0.05), fn("engine", 0.04)], seconds=0.2, clock=clock,
                                   budget_s=0.3)
    assert [len(t) for t in times] == [1, 1]  # warm-up 0.09 s, a round 0.18 s: a second would end at 0.45 s


def test_each_turn_settles_before_its_timed_run():
    """The first run of a turn pays for what ran before (MXNet's spinning threads): it is not timed."""
    calls = []
    now = [0.0]
    last = [None]

    def fn(name, ms, penalty_ms):
        def run():
            calls.append(name)
            # slower when the run before was another function's
            now[0] += (ms + (penalty_ms if last[0] not in (None, name) else 0.0)) / 1e3
            last[0] = name
        return run

    med = measure.alternate([fn("native", 10, 0.0), fn("engine", 5, 4.0)], seconds=0.0, min_runs=4, warmup=0,
                            clock=lambda: now[0], settle_s=0.0)
    assert med == pytest.approx([10.0, 5.0])  # without settling, 7 ms (below)
    assert calls[:4] == ["native", "native", "engine", "engine"] and len(calls) == 4 * 2 * (1 + measure.SETTLE)
    calls.clear()
    last[0] = None
    unsettled = measure.alternate([fn("native", 10, 0.0), fn("engine", 5, 4.0)], seconds=0.0, min_runs=4,
                                  warmup=0, clock=lambda: now[0], settle=0)
    assert unsettled[1] == pytest.approx(7.0)  # half its timed runs follow MXNet: median of 9, 5, 9, 5


def test_turns_settle_for_a_time_not_only_a_run():
    """An engine back at full speed only after a few runs of its turn (its threads slept while MXNet ran)."""
    now = [0.0]
    state = {"last": None, "run": 0}

    def fn(name, ms, penalties_ms):
        def run():
            state["run"] = state["run"] + 1 if state["last"] == name else 0
            state["last"] = name
            k = state["run"]
            now[0] += (ms + (penalties_ms[k] if k < len(penalties_ms) else 0.0)) / 1e3
        return run

    def timed(**kw):
        state.update(last=None, run=0)
        return measure.alternate([fn("native", 4.5, []), fn("engine", 3.3, [1.7, 1.5, 1.0])], seconds=0.0,
                                 min_runs=4, warmup=0, clock=lambda: now[0], **kw)

    assert timed(settle=1, settle_s=0.0)[1] > 4.0  # one untimed run: still slow in most turns
    assert timed()[1] == pytest.approx(3.3)  # SETTLE_S of untimed runs: at full speed
    assert measure.SETTLE_S / 3.3e-3 < measure.MAX_SETTLE


def test_settling_is_bounded_for_tiny_subgraphs():
    calls = []
    measure.alternate([lambda: calls.append(1)], seconds=0.0, min_runs=2, warmup=0, clock=lambda: 0.0)
    assert len(calls) == 2 * (measure.MAX_SETTLE + 1)  # a clock that never moves: MAX_SETTLE untimed runs a turn


def test_default_timer_decides_by_ratios_of_runs_side_by_side(monkeypatch):
    """Bursts of load slow both runs of a round: the medians of each side cross, the per-round ratios do not."""
    # rounds 2, 4 and 5 ran under load; the engine is 0.8x MXNet in every round
    native = [4.0, 40.0, 4.0, 40.0, 40.0]
    engine = [3.2, 32.0, 3.2, 32.0, 32.0]
    monkeypatch.setattr(measure, "alternate_runs", lambda fns, seconds, budget_s, **kw: [native, engine])
    native_ms, engine_ms, ratios = measure.default_timer(lambda: None, [lambda: None], 1.0)
    assert native_ms == 40.0 and engine_ms == [32.0] and ratios == [pytest.approx(0.8)]
    # medians of other rounds would say "slower" (native 4.0 from round 1 against the engine's 32.0); ratios do not
    from mx_trt.passes.cost import Timed, choose_measured

    best, why = choose_measured(4.0, [Timed("onnxruntime", "fp32", 32.0, 0.8)])
    assert best is not None and "1.25x faster" in why


def test_subgraphs_the_estimate_rules_out_are_not_timed(monkeypatch, measured):
    def no_timing(*a):
        raise AssertionError("the estimate ruled this subgraph out: nothing to time")

    monkeypatch.setattr(measure, "default_timer", no_timing)
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1")
    x = mx.sym.var("data")
    sym = mx.sym.tanh(mx.sym.relu(x * 0.5 + 0.1, name="r"), name="t")  # four cheap ops on 1x8
    exe = sym.simple_bind(mx.cpu(), grad_req="null", shared_buffer={}, data=(1, 8))
    info = mx_trt.bind_info(exe)
    assert info.decisions == {} and info.engines == []
    assert all("less than the 50 us" in why for why in info.plan.partition.native.values())


def test_measured_rule_needs_a_cache_and_a_native_bind(caplog):
    from mx_trt.pipeline.bind import _resolve_rule
    from mx_trt.pipeline.request import BindRequest
    from mx_trt.settings import Settings

    def req(**kw):
        return BindRequest(symbol=None, shapes={}, params={}, settings=Settings(engine_rule="measured"), backend=None,
                           **kw)

    with caplog.at_level(logging.INFO, logger="mx_trt.pipeline.bind"):
        assert _resolve_rule(req(native_bind=lambda *a, **k: None), cache=object()).settings.engine_rule == "measured"
        assert _resolve_rule(req(native_bind=lambda *a, **k: None), cache=None).settings.engine_rule == "cost"
        assert _resolve_rule(req(), cache=object()).settings.engine_rule == "cost"
    assert "does not hand it over" in caplog.text and "it is disabled" in caplog.text
    always = BindRequest(symbol=None, shapes={}, params={}, settings=Settings(engine_rule="always"), backend=None)
    assert _resolve_rule(always, cache=None) is always


def test_the_fastest_of_several_cpu_backends_is_kept(monkeypatch, measured):
    """A second CPU backend (here ONNX Runtime again under another name) is a candidate beside the default."""
    from mx_trt.builder import backends
    from mx_trt.builder.backends.onnxruntime import OnnxRuntimeBackend

    class Other(OnnxRuntimeBackend):
        name = "other_cpu"

        def version(self) -> str:
            return "other-" + super().version()

    monkeypatch.setitem(backends.BACKENDS, "other_cpu", Other)
    monkeypatch.setitem(backends.PREFERENCE, "cpu", ["onnxruntime", "other_cpu"])
    assert [b.name for b in backends.candidate_backends("cpu")] == ["onnxruntime", "other_cpu"]
    assert [b.name for b in backends.candidate_backends("cpu", "onnxruntime")] == ["onnxruntime"]
    info = _run(monkeypatch, StubTimer(3.0, [2.0, 1.0]))  # candidates in order of preference
    (decision,) = info.decisions.values()
    assert decision.engine == ("other_cpu", "fp32")
    assert decision.engine_ms == {"onnxruntime fp32": 2.0, "other_cpu fp32": 1.0}
    assert info.kept_engines() == ["other_cpu fp32"]
    # Both candidates built in memory; the winner, an ONNX Runtime engine that stores only what it
    # wrote while building, once more to store it. The loser was never stored.
    assert info.builds == 3
    cache = EngineCache(os.environ["MXNET_TENSORRT_CACHE_DIR"], max_bytes=0)
    engines_stored = [e for e in cache.entries() if "engine" in e.meta]
    assert len(engines_stored) == 1 and engines_stored[0].meta["engine"]["format"] == "onnx-fed"
    # executor.reshape rebuilds with the backend that won
    assert info.engines[0].rebuild.provider.backend.name == "other_cpu"


def test_only_the_chosen_candidate_is_stored_from_memory(monkeypatch, measured):
    """A backend whose engine saves itself from memory is stored without a second build."""
    from mx_trt.builder import backends
    from mx_trt.builder.backends.onnxruntime import OnnxRuntimeBackend

    saved = []

    class SavesFromMemory(OnnxRuntimeBackend):
        name = "saves_cpu"

        def version(self) -> str:
            return "saves-" + super().version()

        def build(self, exported, options):
            eng = super().build(exported, options)
            kept_in_memory = not options.extra.get("keep_artifacts")

            def save(directory):
                saved.append(kept_in_memory)
                with open(os.path.join(directory, "blob"), "wb") as f:
                    f.write(b"engine")
                return {"format": "test-blob", "file": "blob"}

            eng.save = save
            return eng

    monkeypatch.setitem(backends.BACKENDS, "saves_cpu", SavesFromMemory)
    monkeypatch.setitem(backends.PREFERENCE, "cpu", ["onnxruntime", "saves_cpu"])
    info = _run(monkeypatch, StubTimer(3.0, [2.0, 1.0]))
    (decision,) = info.decisions.values()
    assert decision.engine == ("saves_cpu", "fp32")
    assert info.builds == 2 and saved == [True]  # saved once, from the engine built in memory
    cache = EngineCache(os.environ["MXNET_TENSORRT_CACHE_DIR"], max_bytes=0)
    formats = [e.meta["engine"]["format"] for e in cache.entries() if "engine" in e.meta]
    assert formats == ["test-blob"]  # the ONNX Runtime candidate, not chosen, was never stored


@pytest.mark.parametrize("beside_native", [False, True])
def test_engines_are_timed_as_the_executor_will_run_them(monkeypatch, measured, beside_native):
    """A whole model in one engine runs on the caller's thread (runtime.direct), so it is timed there; an engine
    beside MXNet operators runs as a custom operator on MXNet's worker, and is timed that way."""
    import threading

    from mx_trt.builder.backends.onnxruntime import OrtEngine

    threads = []
    real_run = OrtEngine.run

    def run(self, inputs, outputs):
        threads.append(threading.get_ident())
        return real_run(self, inputs, outputs)

    class Timer(StubTimer):
        def __call__(self, native, engines, seconds, budget_s):
            threads.clear()
            out = super().__call__(native, engines, seconds, budget_s)
            self.threads = list(threads)
            return out

    monkeypatch.setattr(OrtEngine, "run", run)
    timer = Timer(3.0, [1.0])
    env = {"MXNET_TENSORRT_EXCLUDE_OPS": "FullyConnected"} if beside_native else {}
    info = _run(monkeypatch, timer, **env)
    (decision,) = info.decisions.values()
    assert decision.engine == ("onnxruntime", "fp32") and timer.threads
    assert (threading.get_ident() in timer.threads) is not beside_native


def _no_timing(*a):
    raise AssertionError("MXNet must not be timed")


def test_a_whole_model_of_long_forwards_is_left_to_the_run_time_check(monkeypatch, measured, caplog):
    """Its engine (the first candidate; the second is never built) is kept on its first forward alone, the
    decision stored; the run-time check, unseeded, compares it with MXNet on the executor's forwards."""
    from mx_trt.builder import backends, engines
    from mx_trt.builder.backends.onnxruntime import OnnxRuntimeBackend
    from mx_trt.pipeline.bind import measured_engines

    class Other(OnnxRuntimeBackend):
        name = "other_cpu"

        def build(self, exported, options):
            raise AssertionError("the second candidate is not built")

    monkeypatch.setitem(backends.BACKENDS, "other_cpu", Other)
    monkeypatch.setitem(backends.PREFERENCE, "cpu", ["onnxruntime", "other_cpu"])
    monkeypatch.setattr(measure, "LONG_RUN_S", 0.0)  # every forward is long
    with caplog.at_level(logging.INFO, logger="mx_trt.pipeline"):
        info = _run(monkeypatch, _no_timing)
    (decision,) = info.decisions.values()
    assert decision.how == "checked" and decision.engine == ("onnxruntime", "fp32") and not decision.stored
    assert decision.native_ms is None and list(decision.engine_ms) == ["onnxruntime fp32"]
    assert decision.engine_ms["onnxruntime fp32"] > 0.0 and decision.seconds > 0.0
    assert "MXNet not timed at the bind" in caplog.text
    assert len(info.engines) == 1 and measured_engines(info) is None  # no timing stands for a first probe
    engines.clear_pool()
    again = _run(monkeypatch, _no_timing)
    (stored,) = again.decisions.values()
    assert stored.stored and stored.how == "checked" and stored.engine == ("onnxruntime", "fp32")
    assert again.loads == 1 and again.builds == 0


@pytest.mark.parametrize("env", [{"MXNET_TENSORRT_RUNTIME_CHECK": "0"},  # no check to compare it later
                                 {"MXNET_TENSORRT_EXCLUDE_OPS": "FullyConnected"},  # not the whole model
                                 {"MXNET_TENSORRT_PRECISION": "fp16"}])  # fp16 must beat fp32: timed
def test_long_forwards_are_timed_where_the_check_cannot_settle_it(monkeypatch, measured, env):
    monkeypatch.setattr(measure, "LONG_RUN_S", 0.0)
    engine_ms = [2.0, 1.0] if "MXNET_TENSORRT_PRECISION" in env else [1.0]  # fp32 kept: fp32 tolerance
    timer = StubTimer(3.0, engine_ms)
    info = _run(monkeypatch, timer, **env)
    (decision,) = info.decisions.values()
    assert timer.calls == 1 and decision.how == "measured" and decision.native_ms == 3.0


def test_short_forwards_of_a_whole_model_are_timed_against_mxnet(monkeypatch, measured, tmp_path):
    """The first forward that found them short cost no second build of the engine it ran."""
    from mx_trt.builder import engines

    timer = StubTimer(3.0, [1.0])
    info = _run(monkeypatch, timer)
    (decision,) = info.decisions.values()
    assert timer.calls == 1 and decision.how == "measured"
    engines.clear_pool()
    unchecked = _run(monkeypatch, StubTimer(3.0, [1.0]), MXNET_TENSORRT_RUNTIME_CHECK="0",
                     MXNET_TENSORRT_CACHE_DIR=str(tmp_path / "fresh"))
    assert info.builds == unchecked.builds


@pytest.mark.parametrize("times, clear", [
    ([[75, 78], [43, 41], [35, 34]], True),  # an engine at under half MXNet's time, the other 1.2x slower
    ([[75, 78], [36, 41], [35, 34]], False),  # the two engines within 10% in a round: which one is not settled
    ([[75, 78], [62, 41], [61, 34]], False),  # one round at 0.81x: not past the margin in every round
    ([[40, 41], [52, 53], [60, 55]], True),  # every engine at least 1.25x MXNet's time in every round
    ([[40, 41], [52, 49], [60, 55]], False),  # 1.20x in one round: a loss, but not by the margin
    ([[40, 41], [30, 52]], False),  # the rounds disagree
    ([[40], [20]], True),  # clear_verdict itself counts no rounds; alternate_runs asks from CLEAR_ROUNDS on
    ([[40, 41], [20]], False),  # rounds of unequal counts
    ([[40, 41]], False),  # no engine
])
def test_clear_verdict(times, clear):
    assert measure.clear_verdict(times) is clear


def test_rounds_stop_early_on_a_clear_verdict():
    """Runs of 35-75 ms: two rounds when they agree by far, MIN_RUNS when they do not."""
    fn, clock, calls, now = _fake_runs()
    fns = [fn("native", 0.075), fn("onnxruntime", 0.043), fn("openvino", 0.035)]
    times = measure.alternate_runs(fns, seconds=0.2, clock=clock, decided=measure.clear_verdict)
    assert [len(t) for t in times] == [measure.CLEAR_ROUNDS] * 3
    assert len(calls) == 3 * (measure.WARMUP + measure.CLEAR_ROUNDS * (measure.SETTLE + 1))
    # engines within 10% of each other: no verdict on which, so MIN_RUNS rounds
    fns = [fn("native", 0.075), fn("onnxruntime", 0.037), fn("openvino", 0.035)]
    times = measure.alternate_runs(fns, seconds=0.2, clock=clock, decided=measure.clear_verdict)
    assert [len(t) for t in times] == [measure.MIN_RUNS] * 3
    # short runs that would go on for SUBGRAPH_SECONDS stop too
    fns = [fn("native", 0.004), fn("engine", 0.002)]
    times = measure.alternate_runs(fns, seconds=0.2, clock=clock, decided=measure.clear_verdict)
    assert [len(t) for t in times] == [measure.CLEAR_ROUNDS] * 2
    assert len(measure.alternate_runs(fns, seconds=0.2, clock=clock)[0]) > measure.MIN_RUNS


def test_the_default_timer_stops_on_a_clear_verdict(monkeypatch):
    seen = {}

    def runs(fns, seconds, budget_s=None, decided=None):
        seen["decided"] = decided
        return [[10.0, 10.0], [4.0, 4.0]]

    monkeypatch.setattr(measure, "alternate_runs", runs)
    assert measure.default_timer(lambda: None, [lambda: None], 0.2)[2] == [pytest.approx(0.4)]
    assert seen["decided"] is measure.clear_verdict
