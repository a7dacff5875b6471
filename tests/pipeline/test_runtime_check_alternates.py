"""A whole model kept untimed at the bind (a ``checked`` decision): the run-time check compares its engine, native
MXNet, and the other candidate backends' engines of the model, each built beside the forwards when its first
probe is due (the tests wait for that build after each forward, so that which side serves is deterministic).

The measured rule's first-forward threshold is set to 0 so that a small model takes that path. The check runs
on the virtual clock (``check_clock``): the engines' forwards cost what each test sets, MXNet's 1 ms. Outputs
are compared with native MXNet at fp32 (``rtol=1e-4``, ``atol=1e-5`` times the largest output's magnitude) on
every forward, whichever side served it.
"""
from __future__ import annotations

import itertools
import logging
import threading

import mxnet as mx
import numpy as np
import pytest

import mx_trt
from mx_trt.builder import backends, engines
from mx_trt.builder.backends.onnxruntime import OnnxRuntimeBackend
from mx_trt.errors import EngineRunError
from mx_trt.pipeline import bind as pipeline_bind, measure
from mx_trt.runtime.arbiter import ENGINES, NATIVE
from mx_trt.runtime.twin import served_shares
from mx_trt.tools.cli.bench import served_text
from tests.harness.bindcheck import ATOL, RTOL, conv_relu
from tests.harness.checkclock import slow_engines
from tests.harness.mxcheck import random_inputs, random_params

SHAPES = {"data": (2, 3, 32, 32)}  # large enough for the cost estimate to let the measured rule decide
ALT = "other_cpu fp32"


class OtherCpu(OnnxRuntimeBackend):
    """A second CPU backend (ONNX Runtime under another name), so that the model has two candidates."""

    name = "other_cpu"
    builds = 0

    def version(self):
        return "other-" + super().version()  # its engines are its own, in the pool and the plan cache

    def build(self, exported, options):
        OtherCpu.builds += 1
        return super().build(exported, options)


def _net():
    x = conv_relu(mx.sym.var("data"), "a", 32)
    x = conv_relu(x, "b", 32)
    return mx.sym.FullyConnected(mx.sym.flatten(x), num_hidden=5, name="fc")


@pytest.fixture
def two_candidates(monkeypatch):
    """The measured rule with ONNX Runtime and ``other_cpu``, every first forward long: ``checked`` decisions."""
    monkeypatch.setitem(backends.BACKENDS, "other_cpu", OtherCpu)
    monkeypatch.setitem(backends.PREFERENCE, "cpu", ["onnxruntime", "other_cpu"])
    monkeypatch.setenv("MXNET_TENSORRT_ENGINE_RULE", "measured")
    monkeypatch.setenv("MXNET_TENSORRT_RUNTIME_CHECK", "1")
    monkeypatch.setenv("MXNET_TENSORRT_MIN_SUBGRAPH_SIZE", "2")
    monkeypatch.setattr(measure, "LONG_RUN_S", 0.0)
    monkeypatch.setattr(OtherCpu, "builds", 0)
    engines.clear_pool()
    yield
    engines.clear_pool()


@pytest.fixture
def model():
    sym = _net()
    args, aux = random_params(sym, SHAPES, 0)
    return sym, args, aux


def _bind(sym, args, aux, monkeypatch, on=True):
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1" if on else "0")
    exe = sym.simple_bind(mx.cpu(), grad_req="null", shared_buffer={**args, **aux}, **SHAPES)
    if not on:
        exe.copy_params_from(args, aux)
    return exe


def _timed_alternates(monkeypatch, clock, seconds, fail_after=None):
    """The alternates' forwards take ``seconds`` on ``clock``; with ``fail_after``, each run after that many raises.
    Returns the list of the runs made (one per alternate built)."""
    made = []
    make = pipeline_bind.alternate_run

    def timed(fused, label, make_engine, exe):
        run = make(fused, label, make_engine, exe)
        calls = [0]

        def timed_run(me, kwargs):
            calls[0] += 1
            if fail_after is not None and calls[0] > fail_after:
                raise EngineRunError("the alternate's run failed")
            clock.now += seconds
            return run(me, kwargs)

        made.append(calls)
        return timed_run

    monkeypatch.setattr(pipeline_bind, "alternate_run", timed)
    return made


def _forwards(exe, native, n, seed=1, wait=True):
    """``n`` forwards of new inputs, every output compared with MXNet's; the side that served each. ``wait``:
    after each, until an alternate being made is ready."""
    check, served = exe._mx_trt_check, []
    for i in range(n):
        inputs = random_inputs(SHAPES, seed + i)
        native.forward(is_train=False, data=mx.nd.array(inputs["data"]))
        ref = native.outputs[0].asnumpy()
        before = dict(check.arbiter.served)
        out = exe.forward(is_train=False, data=mx.nd.array(inputs["data"]))
        served.append(next(s for s in before if check.arbiter.served[s] > before[s]))
        assert not wait or check.wait_made(60)  # an alternate being made: the next forward may probe it
        # Outputs reach some 2,000 here: an element near zero is a cancellation, whose error is the scale's.
        np.testing.assert_allclose(out[0].asnumpy(), ref, rtol=RTOL, atol=ATOL * max(1.0, float(np.abs(ref).max())))
    return served


def _checked(model, monkeypatch, clock, alternate_s, native_s=0.012, engines_s=0.010, fail_after=None):
    """MXNet's executor of the model and an accelerated one whose forwards take ``engines_s`` (its engine),
    ``alternate_s`` (the alternate) and ``native_s`` (its twin) on ``clock``."""
    sym, args, aux = model
    native = _bind(sym, args, aux, monkeypatch, on=False)
    _timed_alternates(monkeypatch, clock, alternate_s, fail_after)
    exe = _bind(sym, args, aux, monkeypatch)
    slow_engines(mx_trt.bind_info(exe).engines, monkeypatch, clock, engines_s)
    clock.native_s = native_s
    return native, exe


def _runs(served):
    """``served`` as (side, forwards in a row)."""
    return [(side, len(list(group))) for side, group in itertools.groupby(served)]


def test_a_faster_alternate_engine_serves_once_its_probe_finds_it_faster(model, monkeypatch, two_candidates,
                                                                         check_clock, quick_probes, caplog):
    sym, args, aux = model
    native = _bind(sym, args, aux, monkeypatch, on=False)
    made = _timed_alternates(monkeypatch, check_clock, 0.004)
    exe = _bind(sym, args, aux, monkeypatch)
    info = mx_trt.bind_info(exe)
    (decision,) = info.decisions.values()
    assert decision.how == "checked" and decision.engine == ("onnxruntime", "fp32")
    assert OtherCpu.builds == 0  # not at the bind
    assert [label for label, _ in info.engines[0].alternates] == [ALT]
    slow_engines(info.engines, monkeypatch, check_clock, 0.010)
    check_clock.native_s = 0.012
    with caplog.at_level(logging.INFO, logger="mx_trt"):
        served = _forwards(exe, native, 80)
    stats = mx_trt.runtime_stats(exe)
    assert stats["serving"] == ALT and stats["dropped"] == {} and stats["off"] is None
    assert served.index(NATIVE) < served.index(ALT)  # MXNet is probed first, then the alternate
    took = served.index(ALT) + 4  # the alternate's probe, then it serves but for the probes that check it
    assert all(n <= 4 for side, n in _runs(served[took:]) if side != ALT) and served[-1] == ALT
    assert OtherCpu.builds == 1 and len(made) == 1  # built once, for its first probe
    assert stats["median_ms"][ALT] == pytest.approx(4.0) and stats["median_ms"][ENGINES] == pytest.approx(10.0)
    assert f"the {ALT} engine made for the run-time check" in caplog.text
    assert f"the {ALT} engine now serves its forwards" in caplog.text
    shares = served_shares(exe)  # what the benchmarks report: every side's share, the alternate's included
    assert shares == pytest.approx({side: served.count(side) / 80 for side in set(served)})
    assert shares.get(NATIVE, 0.0) == pytest.approx(served.count(NATIVE) / 80)
    assert ALT in served_text(shares) and "engines" not in served_text(shares)


def test_the_forward_at_which_an_alternate_is_due_does_not_wait_for_its_build(model, monkeypatch, two_candidates,
                                                                           check_clock, quick_probes, caplog):
    """Its build runs on a thread of its own, held here until the test lets it finish: the engines serve that
    forward and the next ones meanwhile, each output still MXNet's, and the alternate's probe comes at the first
    forward after it is ready."""
    native, exe = _checked(model, monkeypatch, check_clock, 0.004)
    check = exe._mx_trt_check
    entered, gate, threads = threading.Event(), threading.Event(), []
    build = OtherCpu.build

    def held(self, exported, options):
        threads.append(threading.current_thread())
        entered.set()
        assert gate.wait(60)
        return build(self, exported, options)

    monkeypatch.setattr(OtherCpu, "build", held)
    served = []
    with caplog.at_level(logging.INFO, logger="mx_trt"):
        for i in range(80):
            served += _forwards(exe, native, 1, seed=i, wait=False)
            if check.stats()["making"]:
                break
        assert check.stats()["making"] == [ALT] and served[-1] == ENGINES and NATIVE in served
        served += _forwards(exe, native, 10, seed=100, wait=False)  # the build is still held: the engines serve
        assert served[-10:] == [ENGINES] * 10 and check.stats()["making"] == [ALT]
        assert entered.wait(60) and check.stats()["making"] == [ALT]  # exported, and held in its build
        assert len(threads) == 1 and threads[0] is not threading.main_thread()
        gate.set()
        assert check.wait_made(60)
        served += _forwards(exe, native, 1, seed=200)
    assert served[-1] == ALT and OtherCpu.builds == 1
    assert f"making the {ALT} engine for the run-time check beside the forwards" in caplog.text
    assert f"the {ALT} engine made for the run-time check in" in caplog.text


def test_an_alternate_that_will_not_build_leaves_the_comparison(model, monkeypatch, two_candidates, check_clock,
                                                                quick_probes, caplog):
    sym, args, aux = model
    native = _bind(sym, args, aux, monkeypatch, on=False)
    exe = _bind(sym, args, aux, monkeypatch)
    info = mx_trt.bind_info(exe)

    def refuse(exported, options):
        raise RuntimeError("no such device")

    monkeypatch.setattr(OtherCpu, "build", lambda self, exported, options: refuse(exported, options))
    slow_engines(info.engines, monkeypatch, check_clock, 0.010)
    check_clock.native_s = 0.012
    with caplog.at_level(logging.WARNING, logger="mx_trt"):
        served = _forwards(exe, native, 80)  # probes at least MIN_GAP_S apart: 50 of the engines' forwards
    stats = mx_trt.runtime_stats(exe)
    assert ALT not in served and list(stats["dropped"]) == [ALT] and "building it failed" in stats["dropped"][ALT]
    assert stats["off"] is None and stats["serving"] == ENGINES and NATIVE in served  # MXNet still compared
    assert sum(f"the {ALT} engine left out of the run-time check" in r.message for r in caplog.records) == 1


def test_an_alternate_whose_run_fails_hands_that_forward_to_the_engines(model, monkeypatch, two_candidates,
                                                                        check_clock, quick_probes):
    native, exe = _checked(model, monkeypatch, check_clock, 0.004, fail_after=10)
    served = _forwards(exe, native, 80)  # every output compared, the failed run's forward included
    stats = mx_trt.runtime_stats(exe)
    assert served.count(ALT) == 10 and "its forward failed" in stats["dropped"][ALT]
    assert stats["serving"] in (ENGINES, NATIVE) and ALT not in served[served.index(ALT) + 10:]


def test_a_warm_bind_of_a_checked_decision_has_the_alternates_too(model, monkeypatch, two_candidates):
    sym, args, aux = model
    _bind(sym, args, aux, monkeypatch)
    engines.clear_pool()
    exe = _bind(sym, args, aux, monkeypatch)
    info = mx_trt.bind_info(exe)
    (decision,) = info.decisions.values()
    assert decision.stored and decision.how == "checked"
    assert [label for label, _ in info.engines[0].alternates] == [ALT]
    assert OtherCpu.builds == 0


class _Timings:
    """The measured rule's timer with fixed medians: MXNet ``native_ms``, the candidates ``engine_ms`` in order
    (ONNX Runtime, then other_cpu); each executor still runs once."""

    def __init__(self, native_ms, engine_ms):
        self.native_ms, self.engine_ms = native_ms, list(engine_ms)

    def __call__(self, native, engines, seconds, budget_s, **kw):
        native()
        for run in engines:
            run()
        return self.native_ms, list(self.engine_ms), [ms / self.native_ms for ms in self.engine_ms]


def _timed_bind(model, monkeypatch, engine_ms):
    """An accelerated executor whose bind timed the candidates at ``engine_ms`` (MXNet at 20 ms): the executor,
    its BindInfo and its one decision."""
    monkeypatch.setattr(measure, "LONG_RUN_S", 3600.0)
    monkeypatch.setattr(measure, "default_timer", _Timings(20.0, engine_ms))
    exe = _bind(*model, monkeypatch)
    info = mx_trt.bind_info(exe)
    (decision,) = info.decisions.values()
    return exe, info, decision


def test_a_timed_decision_has_no_alternates_when_the_others_were_clearly_slower(model, monkeypatch, two_candidates):
    """The bind timed every candidate against MXNet and the runner-up was 1.5x slower: nothing left to compare."""
    exe, info, decision = _timed_bind(model, monkeypatch, [10.0, 15.0])
    assert decision.how == "measured" and decision.engine == ("onnxruntime", "fp32")
    assert info.engines[0].alternates == []
    assert exe._mx_trt_check.arbiter.sides == [ENGINES, NATIVE]


def test_a_timed_decision_keeps_a_near_runner_up_as_an_alternate(model, monkeypatch, two_candidates):
    """The runner-up came within ALTERNATE_WITHIN at the bind: a near pick, which the check compares on the
    executor's own forwards; so does a later bind that reads the stored decision."""
    exe, info, decision = _timed_bind(model, monkeypatch, [10.5, 10.0])
    assert decision.how == "measured" and decision.engine == ("other_cpu", "fp32") and not decision.stored
    assert [label for label, _ in info.engines[0].alternates] == ["onnxruntime fp32"]
    assert exe._mx_trt_check.arbiter.sides == [ENGINES, NATIVE, "onnxruntime fp32"]
    engines.clear_pool()
    again = mx_trt.bind_info(_bind(*model, monkeypatch))
    (stored,) = again.decisions.values()
    assert stored.stored and stored.how == "measured"
    assert [label for label, _ in again.engines[0].alternates] == ["onnxruntime fp32"]


def test_a_reshaped_executor_compares_its_engines_with_mxnet_alone(model, monkeypatch, two_candidates):
    sym, args, aux = model
    exe = _bind(sym, args, aux, monkeypatch)
    assert exe._mx_trt_check.arbiter.sides == [ENGINES, NATIVE, ALT]
    new = exe.reshape(data=(1, 3, 32, 32))
    assert new._mx_trt_check.arbiter.sides == [ENGINES, NATIVE]


def test_the_engine_the_check_keeps_is_the_one_a_later_bind_starts_with(model, monkeypatch, two_candidates,
                                                                       check_clock, quick_probes):
    """The alternate took over and held through the probe that checked it: it is stored as the model's decision,
    and the next bind builds it and compares the first candidate as its alternate."""
    sym, args, aux = model
    native, exe = _checked(model, monkeypatch, check_clock, 0.004)
    served = _forwards(exe, native, 150)
    took = served.index(ALT) + 4
    assert mx_trt.runtime_stats(exe)["serving"] == ALT and ENGINES in served[took:]  # the probe that checked it
    engines.clear_pool()
    again = _bind(sym, args, aux, monkeypatch)
    info = mx_trt.bind_info(again)
    (decision,) = info.decisions.values()
    assert decision.stored and decision.how == "checked" and decision.engine == ("other_cpu", "fp32")
    assert decision.text.startswith(f"{ALT} engine kept by the run-time check: 4.0 ms a forward against")
    assert decision.engine_ms == {ALT: pytest.approx(4.0), "onnxruntime fp32": pytest.approx(10.0)}
    assert decision.native_ms == pytest.approx(12.0)
    assert [label for label, _ in info.engines[0].alternates] == ["onnxruntime fp32"]
    assert OtherCpu.builds == 2  # the check's, then this bind's
    _forwards(again, native, 5, seed=500)  # its outputs, against MXNet's


def test_a_check_that_moves_to_mxnet_stores_nothing(model, monkeypatch, two_candidates, check_clock, quick_probes):
    sym, args, aux = model
    native, exe = _checked(model, monkeypatch, check_clock, 0.020, native_s=0.005)
    served = _forwards(exe, native, 150)
    stats = mx_trt.runtime_stats(exe)
    assert stats["serving"] == NATIVE and ALT in served and stats["probes"] >= 3
    engines.clear_pool()
    (decision,) = mx_trt.bind_info(_bind(sym, args, aux, monkeypatch)).decisions.values()
    assert decision.stored and decision.engine == ("onnxruntime", "fp32")
    assert "MXNet not timed at the bind" in decision.text


def test_a_failure_to_store_the_kept_engine_is_logged_and_the_forwards_go_on(model, monkeypatch, two_candidates,
                                                                          check_clock, quick_probes, caplog):
    native, exe = _checked(model, monkeypatch, check_clock, 0.004)

    def broken(label, medians):
        raise OSError("disk full")

    exe._mx_trt_check._on_keep = lambda side, medians: broken(side, medians)
    with caplog.at_level(logging.WARNING, logger="mx_trt"):
        _forwards(exe, native, 150)
    assert mx_trt.runtime_stats(exe)["serving"] == ALT
    assert sum("storing the engine the run-time check kept failed: OSError: disk full" in r.message
               for r in caplog.records) == 1
