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
