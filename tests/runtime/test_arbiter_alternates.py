"""The arbiter with more than two sides: the engines, native MXNet, and other engines of the same model.

Simulated forwards on a fake clock (tests/runtime/test_arbiter.py's), as for two sides.
"""
from __future__ import annotations

import pytest

from mx_trt.runtime import arbiter as arb
from mx_trt.runtime.arbiter import ENGINES, NATIVE, Arbiter
from tests.runtime.test_arbiter import Clock, first_probe, simulate

ALT = "openvino fp32"


def _three(clock: Clock) -> Arbiter:
    return Arbiter(ENGINES, clock=clock, alternates=[ALT])


def test_a_faster_alternate_takes_over_after_native_mxnet_is_probed():
    """Model of seconds a forward: the engines 3.0 s, MXNet 2.5 s, the alternate 2.2 s."""
    clock = Clock()
    a = _three(clock)
    lat = {ENGINES: 3.0, NATIVE: 2.5, ALT: 2.2}
    sides = simulate(a, clock, lambda i, s: lat[s], 60)
    first = first_probe(lat[ENGINES])
    assert sides[:first] == [ENGINES] * first
    assert sides[first] == NATIVE  # the first probe goes to MXNet, the first other side
    assert ALT in sides and sides.index(ALT) > sides.index(NATIVE)
    assert a.current == ALT
    # After the alternate took over, every forward but the probes that check it is the alternate's.
    assert sides[-10:].count(ALT) >= 10 - arb.PROBE_CALLS
    assert a.stats()["median_ms"][ALT] == pytest.approx(2200.0)
    assert a.served[ALT] == sides.count(ALT)


def test_a_slower_alternate_never_serves_beyond_its_probes():
    clock = Clock()
    a = _three(clock)
    lat = {ENGINES: 0.010, NATIVE: 0.012, ALT: 0.020}
    sides = simulate(a, clock, lambda i, s: lat[s], 5000)
    assert a.current == ENGINES and a.switches == 0
    assert a.medians[ALT] == pytest.approx(0.020) and a.medians[NATIVE] == pytest.approx(0.012)
    # Runs of the alternate are its probes alone.
    runs, prev = [], None
    for s in sides:
        if s != prev:
            runs.append([s, 0])
            prev = s
        runs[-1][1] += 1
    assert all(n <= arb.PROBE_CALLS + 2 for s, n in runs if s == ALT)


@pytest.mark.parametrize("pause", [0.0, 1.0], ids=["back to back", "one a second"])
def test_probes_of_every_other_side_together_stay_within_the_budget(pause):
    """Each other side's probes wait for a share of the budget: together they cost about BUDGET of the forwards'
    time (the first probe of each, which no measurement prices, excepted)."""
    clock = Clock()
    a = _three(clock)
    lat = {ENGINES: 0.001, NATIVE: 0.010, ALT: 0.004}
    sides = simulate(a, clock, lambda i, s: lat[s], 40000, pause=pause)
    assert a.current == ENGINES and a.switches == 0
    assert a.medians[NATIVE] is not None and a.medians[ALT] is not None
    extra = sum(lat[s] - lat[ENGINES] for s in sides)
    forward_time = sum(lat[s] for s in sides)
    firsts = sum(arb.PROBE_CALLS * (lat[s] - lat[ENGINES]) for s in (NATIVE, ALT))
    assert extra - firsts <= arb.BUDGET * forward_time * 1.05
    # Both keep being probed.
    assert sides[20000:].count(NATIVE) >= arb.PROBE_CALLS and sides[20000:].count(ALT) >= arb.PROBE_CALLS


def test_load_that_slows_the_serving_engine_moves_the_forwards_to_the_side_that_held_up():
    """The alternate serves; a core taken slows it below the engines, whose last probe said how fast they were."""
    clock = Clock()
    a = _three(clock)

    def lat(i, side):
        loaded = i >= 600
        return {ENGINES: 0.012 if loaded else 0.010, NATIVE: 0.015, ALT: 0.020 if loaded else 0.006}[side]

    sides = simulate(a, clock, lat, 600)
    assert a.current == ALT
    # The engines' last word: slower. Their probe after the load began, through overtaken() or the budget.
    sides = simulate(a, clock, lat, 3000, start=600)
    assert a.current == ENGINES
    moved = sides.index(ENGINES)
    assert moved < 400


def test_a_switch_is_checked_against_the_side_it_left():
    clock = Clock()
    a = _three(clock)
    lat = {ENGINES: 0.010, NATIVE: 0.006, ALT: 0.030}
    sides = simulate(a, clock, lambda i, s: lat[s], 200)
    assert a.current == NATIVE and a.switches == 1
    after = sides[sides.index(NATIVE):]
    # The next probe after the switch is the engines' (the side it left), after MIN_CALLS of MXNet's forwards.
    nxt = next(s for s in after[arb.PROBE_CALLS:] if s != NATIVE)
    assert nxt == ENGINES


def test_a_dropped_side_is_not_probed_again():
    clock = Clock()
    a = _three(clock)
    lat = {ENGINES: 0.010, NATIVE: 0.012, ALT: 0.005}
    sides = simulate(a, clock, lambda i, s: lat[s], first_probe(0.010) + arb.PROBE_CALLS + arb.MIN_CALLS)
    assert NATIVE in sides
    while a.next_side() != ALT:  # the alternate's first probe starts
        clock.t += 0.010
        a.record(ENGINES, 0.010)
    a.drop(ALT)  # it failed to build
    assert a.probing is None and ALT not in a.sides
    sides = simulate(a, clock, lambda i, s: lat[s], 2000)
    assert ALT not in sides and a.current == ENGINES


def test_the_serving_side_dropped_hands_the_forwards_to_the_engines():
    clock = Clock()
    a = _three(clock)
    lat = {ENGINES: 0.010, NATIVE: 0.012, ALT: 0.005}
    simulate(a, clock, lambda i, s: lat[s], 400)
    assert a.current == ALT
    a.drop(ALT)  # its run failed
    assert a.current == ENGINES and a.sides == [ENGINES, NATIVE]
    sides = simulate(a, clock, lambda i, s: lat[s], 100)
    # A new start: warm-up and the first compared forwards before any probe.
    assert sides[:arb.WARMUP + arb.FIRST_AFTER] == [ENGINES] * (arb.WARMUP + arb.FIRST_AFTER)


def test_two_sides_cannot_be_dropped_to_none():
    a = Arbiter(ENGINES, clock=Clock())
    a.drop(NATIVE)
    a.drop(ENGINES)
    assert a.sides == [ENGINES] and a.next_side() == ENGINES


def test_a_side_named_twice_is_refused():
    with pytest.raises(ValueError):
        Arbiter(ENGINES, clock=Clock(), alternates=[NATIVE])


def test_an_alternate_stays_unprobed_until_its_own_first_probe():
    clock = Clock()
    a = _three(clock)
    lat = {ENGINES: 0.010, NATIVE: 0.012, ALT: 0.011}
    sides = simulate(a, clock, lambda i, s: lat[s], 200)
    assert NATIVE in sides and a.stats()["unprobed"] == ([ALT] if ALT not in sides else [])
    while a.stats()["unprobed"] or a.stats()["probing"]:
        simulate(a, clock, lambda i, s: lat[s], 1)
        assert clock.t < 60.0, "the alternate was never probed"
    assert ALT in a.probed and a.served[ALT] >= arb.PROBE_CALLS - 1


def _serve(a: Arbiter, clock: Clock, lat, made: set, calls: int):
    """``calls`` forwards as the run-time check serves them: an alternate not in ``made`` whose probe is due is
    waited for (:meth:`Arbiter.wait_for`) and the serving side serves instead. Returns the sides served."""
    sides = []
    for _ in range(calls):
        side = a.next_side()
        if side == ALT and ALT not in made:
            a.wait_for(ALT)
            side = a.next_side()
        dt = lat(side)
        clock.t += dt
        a.record(side, dt)
        sides.append(side)
    return sides


def test_a_side_being_made_is_probed_once_ready_and_the_forwards_meanwhile_are_not_compared():
    """While the alternate is built beside the forwards, the engines serve, no probe starts, and their forwards,
    slowed by the build (30 ms against 10), stand for nothing: the probe that comes once it is ready compares it
    with the engines' 10 ms, and the alternate (4 ms) takes over."""
    clock = Clock()
    a = _three(clock)
    making = {"on": False}
    lat = {ENGINES: 0.010, NATIVE: 0.012, ALT: 0.004}

    def latency(side):
        return 0.030 if making["on"] and side == ENGINES else lat[side]

    made: set = set()
    sides = _serve(a, clock, latency, made, 400)
    assert a.stats()["making"] == [ALT] and ALT not in sides and a.current == ENGINES
    probes = a.probes
    making["on"] = True
    during = _serve(a, clock, latency, made, 300)
    assert during == [ENGINES] * 300 and a.probes == probes  # no probe of any side while it is made
    making["on"] = False
    made.add(ALT)
    a.ready(ALT)
    after = _serve(a, clock, latency, made, 40)
    assert a.stats()["making"] == []
    # Its budget was earned before the making: the probe comes at the first forward after it is ready.
    assert after[0] == ALT
    assert a.current == ALT and a.medians[ENGINES] == pytest.approx(0.010)  # not the 30 ms served meanwhile


def test_a_side_dropped_while_it_is_made_lets_the_others_be_probed_again():
    clock = Clock()
    a = _three(clock)
    lat = {ENGINES: 0.010, NATIVE: 0.012, ALT: 0.004}
    sides = _serve(a, clock, lambda s: lat[s], set(), 400)
    assert a.stats()["making"] == [ALT] and a.probing is None
    probes = a.probes
    a.drop(ALT)  # its build failed
    assert a.stats()["making"] == [] and a.sides == [ENGINES, NATIVE]
    sides = simulate(a, clock, lambda i, s: lat[s], 3000)
    assert a.probes > probes and NATIVE in sides and a.current == ENGINES


def test_waiting_for_the_serving_side_or_an_unknown_one_changes_nothing():
    clock = Clock()
    a = _three(clock)
    a.wait_for(ENGINES)
    a.wait_for("tensorrt fp16")
    assert a.stats()["making"] == []
    a.ready(ALT)  # never waited for
    assert a.stats()["making"] == []


@pytest.mark.parametrize("cost", [0.0, 2.0])
def test_what_making_a_side_cost_spaces_its_next_probe(cost):
    """Making the alternate took ``cost`` seconds beside the forwards: its next probe waits until the forwards
    since its first have taken that much more over the budget, as when the build ran inside the probe's first
    forward. Without it, an alternate released and made again at each probe would be made far more often."""
    clock = Clock()
    a = _three(clock)
    lat = {ENGINES: 0.010, NATIVE: 0.012, ALT: 0.011}  # the alternate a little slower: it never takes over
    sides = _serve(a, clock, lambda s: lat[s], set(), 400)
    assert a.stats()["making"] == [ALT]
    a.ready(ALT, cost)
    made = {ALT}
    sides = _serve(a, clock, lambda s: lat[s], made, 40)
    first = sides.index(ALT)
    sides = _serve(a, clock, lambda s: lat[s], made, 60000)[first:]
    assert a.current == ENGINES
    probes = [i for i, (s, t) in enumerate(zip(sides, sides[1:])) if s != ALT and t == ALT]
    assert probes, "the alternate is probed again"
    # Forward time between its first probe and its second: the budget's share of the probe's cost, the making's
    # included (the probe's own forwards and MXNet's cost the rest).
    waited = sum(lat[s] for s in sides[arb.PROBE_CALLS + 2:probes[0] + 1])
    share = arb.BUDGET / 2
    assert waited >= (cost + arb.PROBE_CALLS * 0.001) / share * 0.9
    if cost:
        assert waited < (cost + 20 * 0.001 + 1.0) / share  # not much more: the making and the gap, MXNet's probes
