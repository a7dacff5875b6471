"""Timing of the benchmarks' turns (mx_trt.tools.cli.timing.measure): untimed runs settle a turn for a time."""
from __future__ import annotations

import time

from mx_trt.pipeline import measure
from mx_trt.tools.cli import timing


def _counter(seconds):
    calls = []

    def fn():
        calls.append(1)
        if seconds:
            time.sleep(seconds)

    return fn, calls


def test_a_turn_settles_for_a_time_before_its_timed_runs():
    fn, calls = _counter(0.005)
    ticks = []
    out = timing.measure(fn, 2, 1, lambda: ticks.append(1), settle_s=0.03)
    assert len(out) == 2 and all(t >= 5.0 for t in out)
    untimed = len(calls) - 2
    assert 4 <= untimed <= 8  # 30 ms of 5 ms runs (and the sleeps' slack)
    assert len(ticks) == 1 + 2  # the progress bar counts the asked warm-up and the timed runs only


def test_settling_is_bounded_and_needs_a_warm_up():
    fn, calls = _counter(0.0)
    timing.measure(fn, 1, 1, settle_s=60.0)
    assert len(calls) == measure.MAX_SETTLE + 1  # a minute of settling asked: MAX_SETTLE untimed runs at most
    fn, calls = _counter(0.0)
    timing.measure(fn, 3, 0, settle_s=60.0)
    assert len(calls) == 3  # no warm-up asked: no settling either


class _Check:
    """An executor's run-time check as ``runtime_stats`` reads it: native MXNet unprobed until ``after`` forwards,
    then probed over the next ``probe`` forwards."""

    def __init__(self, after, probe=4, off=None):
        self.calls, self.after, self.probe, self.off = 0, after, probe, off

    def stats(self):
        probing = "native" if self.after <= self.calls < self.after + self.probe else None
        done = self.calls >= self.after + self.probe
        return {"off": self.off, "probing": probing, "unprobed": [] if done else ["native"]}


class _Exe:
    def __init__(self, check):
        if check is not None:
            self._mx_trt_check = check


def _forwards(exe, seconds=0.0):
    def fn():
        exe._mx_trt_check.calls += 1
        if seconds:
            time.sleep(seconds)

    return fn


def test_warm_check_runs_until_every_side_was_probed_once():
    exe = _Exe(_Check(after=8, probe=4))
    n, secs = timing.warm_check(_forwards(exe, 0.002), exe)
    assert n == 12  # eight forwards of the engines, then the probe's four of MXNet
    assert 12 * 0.002 <= secs < 1.0  # their time, the untimed forwards' included
    assert timing.warm_check(_forwards(exe), exe)[0] == 0  # warm already: nothing more


def test_warm_check_takes_nothing_without_a_running_check():
    calls = []
    assert timing.warm_check(lambda: calls.append(1), _Exe(None))[0] == 0
    assert timing.warm_check(lambda: calls.append(1), _Exe(_Check(after=8, off="the twin failed")))[0] == 0
    assert calls == []


def test_warm_check_is_bounded_and_says_so(caplog):
    exe = _Exe(_Check(after=10 ** 9))
    with caplog.at_level("WARNING", logger="mx_trt.tools.cli.timing"):
        n, secs = timing.warm_check(_forwards(exe, 0.01), exe, limit_s=0.05, forwards=2)
    assert 1 <= n <= 6 and 0.05 <= secs < 1.0
    assert "had not probed every side" in caplog.text


def test_warm_check_gives_slow_forwards_a_number_of_forwards_rather_than_seconds():
    """Forwards of 20 ms against a limit of 50 ms: the bound is 15 of them (0.3 s), as a model of ten seconds
    a forward gets the forwards its check's first probes take, not the seconds a fast model needs."""
    exe = _Exe(_Check(after=10 ** 9))
    n, secs = timing.warm_check(_forwards(exe, 0.02), exe, limit_s=0.05, forwards=15)
    assert 14 <= n <= 16 and 0.28 <= secs < 2.0
    exe = _Exe(_Check(after=8))  # warm after twelve: the engines' eight, then the probe's four
    assert timing.warm_check(_forwards(exe, 0.02), exe, limit_s=0.05, forwards=15)[0] == 12
