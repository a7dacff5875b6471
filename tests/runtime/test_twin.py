"""The run-time check's making of alternate engines beside the forwards (``mx_trt.runtime.twin``), without MXNet:
an alternate whose making fails, or ends without an engine, leaves the comparison with its reason."""
from __future__ import annotations

import threading

import pytest

from mx_trt.runtime.twin import RuntimeCheck

ALT = "openvino fp32"


def _check(make):
    def no_twin(exe):
        raise AssertionError("no native forward here")

    return RuntimeCheck(no_twin, "executor", clock=lambda: 0.0, alternates=[(ALT, make)])


def _raise(exe):
    raise RuntimeError("no such device")


@pytest.mark.parametrize("make, why", [(_raise, "building it failed: RuntimeError: no such device"),
                                       (lambda exe: None, "building it failed: its thread ended without an engine")],
                         ids=["raises", "no engine"])
def test_an_alternate_whose_making_fails_leaves_the_comparison(make, why):
    check = _check(make)
    check._start_making(ALT, object())
    assert check.stats()["making"] == [ALT]
    assert check.wait_made(30)
    stats = check.stats()
    assert stats["dropped"] == {ALT: why} and stats["making"] == [] and ALT not in check.arbiter.sides
    assert stats["off"] is None  # MXNet is still compared with the engines


def test_an_alternate_is_made_once_on_another_thread_and_then_ready():
    threads, runs = [], []

    def make(exe):
        threads.append(threading.current_thread())
        run = lambda exe, kwargs: []  # noqa: E731
        runs.append(run)
        return run

    check = _check(make)
    check._start_making(ALT, object())
    check._start_making(ALT, object())  # under way already: not made twice
    assert check.wait_made(30)
    assert len(threads) == 1 and threads[0] is not threading.current_thread()
    assert check._alt_runs[ALT] is runs[0] and check.stats()["making"] == [] and check.dropped == {}
