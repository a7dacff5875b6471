"""The probe budget's backoff (mx_trt.runtime.arbiter.MAX_BACKOFF): a side that keeps losing its probes is
probed less often while the serving side holds its speed, and at once as often again when it does not.

Simulated forwards on a fake clock, as in test_arbiter.py.
"""
from __future__ import annotations

import random
from typing import Callable, List

import pytest

from mx_trt.runtime import arbiter as arb
from mx_trt.runtime.arbiter import ENGINES, NATIVE, Arbiter

from .test_arbiter import Clock, simulate


def probe_starts(sides: List[str], serving: str) -> List[int]:
    """Indices of the forwards at which a probe of another side began."""
    return [i for i, s in enumerate(sides) if s != serving and (i == 0 or sides[i - 1] == serving)]


def with_start_cost(means: dict, start: float, seed: int = 0, noise: float = 0.01) -> Callable[[int, str], float]:
    """Forwards of ``means[side]`` seconds with lognormal noise; the first after a change of side also pays
    ``start`` seconds (a pool waking, MXNet's OpenMP threads, caches)."""
    rnd, last = random.Random(seed), [None]

    def lat(i: int, side: str) -> float:
        extra = start if last[0] is not None and side != last[0] else 0.0
        last[0] = side
        return means[side] * rnd.lognormvariate(0.0, noise) + extra

    return lat


@pytest.mark.parametrize("alternate", [False, True], ids=["two sides", "an alternate 30% slower"])
def test_a_tie_costs_a_fraction_of_the_budget(alternate, monkeypatch):
    """Engines and MXNet at 10 ms each, every change of side paying 5 ms: each probe is a start paid for
    nothing. Without the backoff the probes cost the whole budget (2%); with it, half of it at most."""
    means = {ENGINES: 0.010, NATIVE: 0.010, "alt": 0.013}
    overhead = {}
    for backoff in (0, arb.MAX_BACKOFF):
        monkeypatch.setattr(arb, "MAX_BACKOFF", backoff)
        clock = Clock()
        a = Arbiter(ENGINES, clock=clock, alternates=("alt",) if alternate else ())
        calls = 20000
        simulate(a, clock, with_start_cost(means, 0.005), calls)
        overhead[backoff] = clock.t / (calls * 0.010) - 1.0
    assert overhead[0] > 0.75 * arb.BUDGET  # the control: the whole budget spent at a tie
    assert overhead[arb.MAX_BACKOFF] < 0.5 * arb.BUDGET
    assert overhead[arb.MAX_BACKOFF] < 0.6 * overhead[0]


def test_probes_of_a_side_that_keeps_losing_space_out_up_to_max_backoff():
    """MXNet 30% slower than the engines, every probe lost: the forward time between probes doubles after
    the second loss and again after the third, and stays there."""
    clock = Clock()
    a = Arbiter(ENGINES, clock=clock)
    sides = simulate(a, clock, lambda i, s: 0.010 if s == ENGINES else 0.013, 40000)
    starts = probe_starts(sides, ENGINES)
    assert len(starts) >= 6 and a.current == ENGINES
    # Forwards from one probe's start to the next's (a probe's own five included): the first loss waits its
    # share, the second twice that, the third and every later one 2 ** MAX_BACKOFF times.
    gaps = [b - a_ for a_, b in zip(starts, starts[1:])]
    base = gaps[0]
    assert gaps[1] == pytest.approx(2 * base, rel=0.15)
    for g in gaps[2:]:
        assert g == pytest.approx(2 ** arb.MAX_BACKOFF * base, rel=0.15)


@pytest.mark.parametrize("steady_within", [arb.STEADY_WITHIN, 1.0], ids=["reset", "control: never reset"])
def test_the_serving_side_slowing_down_restores_the_full_share(steady_within, monkeypatch):
    """Backed off, then, right after a probe, the engines slow by 7% (not enough for MXNet, 30% slower, to
    overtake them): the next probe comes after the full share's wait, not four times that."""
    monkeypatch.setattr(arb, "STEADY_WITHIN", steady_within)
    clock = Clock()
    a = Arbiter(ENGINES, clock=clock)
    slow = [False]

    def lat(i: int, side: str) -> float:
        if side == NATIVE:
            return 0.013
        return 0.0107 if slow[0] else 0.010

    simulate(a, clock, lat, 5000)
    assert a._backoff(NATIVE) == 2 ** arb.MAX_BACKOFF
    probes = a.probes
    while a.probes == probes:  # to the end of the next probe
        simulate(a, clock, lat, 1)
    slow[0] = True
    sides = simulate(a, clock, lat, 2000)
    waited = probe_starts(sides, ENGINES)[0]
    # Its share's wait: the probe's five forwards at the gap left (2.3 ms) over the budget (one other side) of
    # 10.7 ms forwards.
    full = 5 * 0.0023 / arb.BUDGET / 0.0107
    if steady_within < 1.0:
        assert waited < 1.5 * full
    else:
        assert waited > 3 * full
    assert a.current == ENGINES


def test_a_switch_gives_every_side_its_full_share_again():
    """An alternate 50% slower, backed off while the engines serve; MXNet then takes over (the engines slowed
    by half): the alternate's share is whole again against the new side."""
    clock = Clock()
    a = Arbiter(ENGINES, clock=clock, alternates=("alt",))
    slow_from = 20000

    def lat(i: int, side: str) -> float:
        if side == ENGINES:
            return 0.015 if i >= slow_from else 0.010
        return {NATIVE: 0.012, "alt": 0.018}[side]

    simulate(a, clock, lat, slow_from)
    assert a._backoff("alt") == 2 ** arb.MAX_BACKOFF and a._backoff(NATIVE) == 2 ** arb.MAX_BACKOFF
    simulate(a, clock, lat, 200, start=slow_from)
    assert a.current == NATIVE
    assert a._backoff("alt") == 1.0
