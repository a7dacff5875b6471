"""Which of two equivalent executors serves the next forward, decided from the caller's own forwards.

A bind decides engine or native by timing both (:mod:`mx_trt.pipeline.measure`),
but only in the conditions of that moment: runs back to back, the machine as it
was. Two things it cannot see change the answer afterwards:

- load that arrives later: an engine using every core loses to MXNet's single
  OpenMP thread once another process holds a core;
- spacing: an engine whose thread pool sleeps between spaced-out calls pays a
  wake-up on every call that back-to-back timing never shows.

An accelerated executor therefore keeps a *twin*, MXNet's own executor of the
symbol the user bound, and an :class:`Arbiter` per executor picks, for each
inference forward, which of the two serves it. The comparison uses the caller's
own forwards, in their own spacing and load: every forward is timed (the guarded
forward waits for its outputs anyway), and now and then the next forwards go to
the other side (a *probe*), until :data:`PROBE_CALLS` ``- 1`` of them are
compared. The other side takes over when the median of those is at most
:data:`KEEP_BELOW` of the median of the current side's *window*: its latest
compared forwards, :data:`WINDOW` at least (:data:`LONG_WINDOW` when they take
:data:`HOLD_BELOW_S` or more) and as many more as took :data:`WINDOW_S`, so
that a few forwards slowed by something passing cannot move a fast model's
median, and load met by a model of seconds a forward is seen after two. A switch is checked by the next probe after
:data:`MIN_CALLS` forwards of the new side, however short they are. The
executor's first :data:`WARMUP` forwards are not compared, and the first probe
waits until :data:`FIRST_AFTER` forwards after them are: an engine's first
forwards can be far slower than the next (ONNX Runtime's on MobileNetV2 at
batch 1: 6-9 ms for the first four, 3.3-3.9 ms after; Faster R-CNN's engine
likewise), and a window holding them makes the faster side lose. The first probe
then comes whatever the bind measured: each executor checks the bind's decision
in its own conditions (the bind's load, its spacing of forwards, may not be the
executor's). Only when the bind timed every engine against MXNet, and found the
engines well ahead (:data:`SEED_ABOVE`) or timed MXNet's first forward too, do
its timings stand for that first probe: the next waits for its budget, starting
MXNet taken to cost its first forward at the bind, and comes at once when the
engines' forwards become slower than MXNet's (or, at a tie, their own) were at
the bind. With operators left native (``BindTimes.partial``: the bind's times
are sums over the engines' subgraphs), the engines' forward is their first
compared forwards' median, and MXNet's that plus the bind's gap.

Only forwards a side serves once it is *running* are compared. A side starts a
*run* when it takes over from the other (a probe, the end of one) and when the
caller resumes after an idle gap of :data:`GAP_S`; its first forward (when
shorter than :data:`HOLD_BELOW_S`), and the forwards that end within
:data:`SETTLE_S` of forward time of the run's start, pay
for what ran before: MXNet's OpenMP threads still spinning in the process,
another process's that held the cores, the side's own thread pool waking.
Measured with OpenVINO on MobileNetV2 at batch 1 and two threads (1.6 ms a
forward), in a process taking turns with others: 3.1-4.2 ms for the four
forwards after MXNet's, and for the first three of a turn. Compared, those made
the engines look overtaken, and each probe of the engines, run right after
MXNet's forwards, made them look slower than MXNet, so a third to a half of the
forwards went to MXNet at 2.2 ms. Such forwards are held back: when the run goes
on past :data:`SETTLE_S` they are dropped; when a run that began after an idle
gap ends sooner (a caller whose forwards are spaced out, each its own run), they
are what that caller gets, and they are compared; a run begun by a switch of
sides drops them either way. A probe's first forward is never compared.

What probing costs is bounded: serving a forward with the slower side costs the
difference of the two, and starting it costs what its first forwards took beyond
its median (a thread pool waking; MXNet's twin bound again and its first
forward, in which MXNet sets up its oneDNN kernels and weight layouts: 282 ms
against 73 ms after for VGG-11 at batch 1). So the next probe waits until the forwards since the last
one have taken at least ``(start + n * gap) / BUDGET`` (``start``: what starting
that side cost at its last probe; ``n``: the forwards the last probe took;
``gap``: how much slower the other side was then), and for at least
:data:`MIN_CALLS` forwards and :data:`MIN_GAP_S` seconds. Probes therefore cost
at most about :data:`BUDGET` (2%) of the time spent in forwards, however the
caller spaces them out, and sides that are close, where a change of load is
likeliest to reverse the order, are compared often. When the serving side slows
down after a probe (its window's median against its median then), the other side
is taken to be that much closer: ``gap`` shrinks by the slowdown, so load that
hits the serving side is checked within a window's forwards instead of after the
wait that the old gap bought (Faster R-CNN: an engine 0.8 s ahead waited about
160 s of forwards, while a busy core made it 0.3 s behind). That estimate costs
more than the budget only when load slows both sides, and the probe then
measures the new gap. When the serving side has become slower than the other
side was at the last probe, by the switching margin, over a window most of which
came after that probe, the probe comes at once (:meth:`Arbiter.overtaken`),
without waiting for :data:`MIN_CALLS` forwards since the last one.

This module is pure (no MXNet): :class:`Arbiter` takes durations and a clock.
``runtime.forward.guard_forward`` runs it (:class:`RuntimeCheck`).
"""
from __future__ import annotations

import logging
import statistics
import time
from collections import deque
from typing import Any, Callable, Deque, Dict, Iterable, List, NamedTuple, Optional

logger = logging.getLogger(__name__)

ENGINES = "engines"
NATIVE = "native"

#: Forwards of the other side per probe, when the first :data:`SETTLE_S` of them take no more than one:
#: the first only wakes it, the others are compared.
PROBE_CALLS = 4
#: The current side's latest compared forwards that a probe is compared with: this many at least, and as
#: many more as took :data:`WINDOW_S` (up to :data:`MAX_WINDOW`), so that a few forwards slowed by
#: something passing (3 of OpenVINO's on MobileNetV2 at batch 1, 2.6-5.4 ms against 1.7 ms, in a process
#: that takes turns with others) cannot move the median of a fast model's window.
WINDOW = 5
#: The window's forwards at least while they take :data:`HOLD_BELOW_S` or more each: what passes in tens of
#: milliseconds cannot slow a forward of seconds, so two slow forwards in three show load (Faster R-CNN with a
#: core taken: a window of five cost a third slow forward of 2.9 s before each probe).
LONG_WINDOW = 3
#: Forward time the window spans, when more than :data:`WINDOW` forwards fit in it (s).
WINDOW_S = 0.05
#: Forwards in the window at most.
MAX_WINDOW = 64
#: Timed forwards of the current side between two probes at least.
MIN_CALLS = 8
#: Compared forwards of the first side before the first probe (after the warm-up).
FIRST_AFTER = WINDOW
#: Idle seconds between two forwards after which the next starts a new run (its first forwards held back).
GAP_S = 0.005
#: A run's first forward is held back only when shorter than this (s): what ran before slows a forward by
#: some 20 ms (36 ms at twice the time at most, measured), 2% of a forward of a second at most, and a model
#: of seconds a forward (Faster R-CNN) would otherwise have half its forwards uncompared in turns of two.
HOLD_BELOW_S = 1.0
#: The executor's first forwards, not compared: allocations, first-run kernel choices, thread pools
#: starting (Faster R-CNN's engine, ONNX Runtime's on MobileNetV2: the first few far slower than the next).
WARMUP = 3
#: Seconds between probes at least.
MIN_GAP_S = 0.5
#: The share of forward time probes may cost (the slower side's extra time over the forwards' time between probes).
BUDGET = 0.02
#: The other side takes over when its probe's median is at most this fraction of the current side's.
KEEP_BELOW = 0.95
#: A bind that measured the whole executor (one engine holding every operator) and found native MXNet at least
#: this many times slower, or measured MXNet's first forward too, lets the first probe wait for its budget like
#: the others, instead of coming after :data:`FIRST_AFTER` forwards: a twin's first forward (VGG-11 at batch 1:
#: 282 ms against 40 ms for the engines; SqueezeNet 1.1: 21 ms, its bind included, against 1.5 ms for the engines)
#: is then not paid in the caller's first forwards, and load arriving later still calls a probe at once
#: (:meth:`Arbiter.overtaken`, against the bind's timings).
SEED_ABOVE = 1.25
#: Forward time at the start of each run of a side whose forwards are held back: they pay for what ran
#: before (OpenVINO on MobileNetV2 at batch 1 and two threads, after MXNet's forwards in the process or a
#: pause: 3.1-4.7 ms for the first 3-4 forwards, 1.6-2.5 ms after). Forwards of seconds lose nothing to it.
SETTLE_S = 0.02


class BindTimes(NamedTuple):
    """What a bind measured of the whole executor (seconds): a forward of its engines, one of MXNet, and
    MXNet's first forward (``None``: not measured). ``partial``: the sums over the engines' subgraphs only;
    the operators left native run on both sides, so the gap holds and the engines' own forward is taken
    from their first compared forwards."""

    engines: float
    native: float
    native_first: Optional[float] = None
    partial: bool = False


class _Run:
    """One side's forwards since it started running, its first ones held back; O(held) per forward.

    Args:
        resumed: The run starts after an idle gap of the caller's (else: when its side took over).
    """

    __slots__ = ("time", "count", "held", "resumed")

    def __init__(self, resumed: bool = True) -> None:
        self.time, self.count, self.resumed = 0.0, 0, resumed
        self.held: List[float] = []

    def add(self, seconds: float, resumed: bool) -> List[float]:
        """The forwards to compare once this one (``seconds``; ``resumed``: after an idle gap) is added.

        A run going on past :data:`SETTLE_S` drops its held forwards. A run that
        ended sooner hands them over when it had started after an idle gap: they
        were what the caller gets, each run of its own paying the same start. A
        run that started when its side took over drops them: they paid for the
        other side.
        """
        out: List[float] = []
        if resumed and self.count:
            out = self.held if self.resumed else []
            self.time, self.count, self.held, self.resumed = 0.0, 0, [], True
        self.time += seconds
        self.count += 1
        if (self.count == 1 and seconds < HOLD_BELOW_S) or self.time < SETTLE_S:
            self.held.append(seconds)
        else:
            self.held = []
            out.append(seconds)
        return out


class _Window:
    """The latest compared forwards of a side (:data:`WINDOW`, :data:`LONG_WINDOW`, :data:`WINDOW_S`,
    :data:`MAX_WINDOW`);
    O(1) amortised per forward, its median O(n log n) once per change."""

    __slots__ = ("times", "total", "_median")

    def __init__(self, times: Iterable[float] = ()) -> None:
        self.times: Deque[float] = deque()
        self.total = 0.0
        self._median: Optional[float] = None
        for t in times:
            self.append(t)

    def append(self, seconds: float) -> None:
        self.times.append(seconds)
        self.total += seconds
        least = LONG_WINDOW if seconds >= HOLD_BELOW_S else WINDOW
        while len(self.times) > least and (len(self.times) > MAX_WINDOW
                                           or self.total - self.times[0] >= WINDOW_S):
            self.total -= self.times.popleft()
        self._median = None

    def median(self) -> float:
        if self._median is None:
            self._median = statistics.median(self.times)
        return self._median

    def __len__(self) -> int:
        return len(self.times)


class Arbiter:
    """The side (:data:`ENGINES` or :data:`NATIVE`) that serves each forward; per forward, O(1) but for one
    median of the window (:data:`MAX_WINDOW` forwards at most) when it changed.

    Call :meth:`next_side` before a forward and :meth:`record` with its duration
    after it. Not thread-safe: one executor's forwards are serial, as MXNet's are.

    Args:
        first: The side that serves first (the bind's decision: the engines).
        clock: Seconds, monotonic (tests pass their own).
        name: Used in log lines.
        expect: What the bind measured of the whole executor, or ``None``. With the engines serving first,
            and native MXNet at least :data:`SEED_ABOVE` times slower or its first forward measured, it
            stands for a first probe; MXNet's first forward is what starting it is taken to cost.
    """

    def __init__(self, first: str = ENGINES, clock: Callable[[], float] = time.monotonic,
                 name: str = "executor", expect: Optional[BindTimes] = None) -> None:
        if first not in (ENGINES, NATIVE):
            raise ValueError(f"unknown side {first!r}")
        self.current = first
        self.name = name
        self._clock = clock
        self._window = _Window()
        self._gap = 0.0  # how much slower the other side was at the last probe (s)
        self._ref: Optional[float] = None  # the current side's median at the last probe (s)
        self._recheck = False  # the last probe switched sides: the next one checks that soon
        self._probing = False
        self._probe: List[float] = []  # the probe's compared forwards
        self._probe_run = _Run(resumed=False)
        self._probe_calls = PROBE_CALLS  # forwards the last settled probe took
        self._probe_n = 0  # forwards the probe under way has taken
        self._probe_time = 0.0  # their time, the first forward's included (s)
        # Per side: what its last settled probe cost beyond its forwards at its median (s).
        self._overhead: Dict[str, float] = {ENGINES: 0.0, NATIVE: 0.0}
        self._run = _Run()  # the current side's
        self._end = clock()  # when the last forward ended
        self._since = 0
        self._clean = 0  # the current side's forwards compared since the last probe
        self._busy = 0.0
        self._warmup = WARMUP
        self._last = clock()
        self.probes = 0
        self.switches = 0
        self.served: Dict[str, int] = {ENGINES: 0, NATIVE: 0}
        self.medians: Dict[str, Optional[float]] = {ENGINES: None, NATIVE: None}
        self.seeded = False  # the bind's timings stand for a first probe
        self._rebase = False  # the seed's engines time is a part of the forward: take the window's median
        if expect is not None and first == ENGINES and expect.engines > 0.0:
            start = None if expect.native_first is None else max(0.0, expect.native_first - expect.native)
            if start is not None or expect.native >= SEED_ABOVE * expect.engines:
                self._ref, self._gap, self.seeded = expect.engines, expect.native - expect.engines, True
                self._overhead[NATIVE] = start or 0.0
                self._rebase = expect.partial

    @property
    def other(self) -> str:
        return NATIVE if self.current == ENGINES else ENGINES

    def next_side(self) -> str:
        """The side that serves the next forward (a probe starts here when one is due)."""
        if not self._probing and self._due():
            self._probing, self._probe, self._probe_run = True, [], _Run(resumed=False)
            self._probe_n, self._probe_time = 0, 0.0
        return self.other if self._probing else self.current

    def _due(self) -> bool:
        if self.probes == 0:
            if self._clean < FIRST_AFTER:
                return False
            if not self.seeded:
                return True
        if not self._recheck and self.overtaken():
            return True
        if self._since < MIN_CALLS:
            return False
        if self._recheck:
            return True
        if self._busy < self.probe_cost() / BUDGET:
            return False
        return self._clock() - self._last >= MIN_GAP_S

    def overtaken(self) -> bool:
        """The serving side's median, over forwards most of which came after the last probe, and its latest
        compared forward are slower than the other side was then by the switching margin: a probe is due now,
        however recent the last one.

        Without this, load arriving just after a probe would wait :data:`MIN_CALLS`
        forwards for the next, which on a model of seconds a forward is most of a
        minute served by the slower side.
        """
        if self._ref is None or self._rebase or self._clean <= len(self._window) // 2:
            return False
        other = self._ref + max(0.0, self._gap)
        # The latest forward too: a slow spell that is already over calls for no probe.
        return other <= KEEP_BELOW * self._window.median() and other <= KEEP_BELOW * self._window.times[-1]

    def probe_cost(self) -> float:
        """What the next probe is expected to cost over the current side serving its forwards (s): its forwards
        at :meth:`expected_gap` each, and what waking the other side cost at its last probe."""
        return self._overhead[self.other] + self._probe_calls * self.expected_gap()

    def expected_gap(self) -> float:
        """How much slower the other side is expected to be now (s, at least 0): the last probe's gap,
        less how much the current side has slowed down since (the other side assumed unchanged)."""
        if self._gap <= 0.0 or self._ref is None or not self._window:
            return max(0.0, self._gap)
        slowed = self._window.median() - self._ref
        return max(0.0, self._gap - max(0.0, slowed))

    def record(self, side: str, seconds: float) -> None:
        """Record that ``side`` served a forward in ``seconds``; the probe's last compared forward settles it."""
        self.served[side] = self.served.get(side, 0) + 1
        now = self._clock()
        resumed = now - seconds - self._end >= GAP_S
        self._end = now
        if side == self.current:
            compared = self._run.add(seconds, resumed)
            if self._warmup:
                self._warmup -= 1
                return
            self._since += 1
            self._busy += seconds
            for t in compared:
                self._window.append(t)
            self._clean += len(compared)
            if self._rebase and self._clean >= FIRST_AFTER:
                # The bind timed the engines' subgraphs only: the forward is what they take, with the operators
                # left native, and MXNet's the same gap slower.
                self._ref, self._rebase = self._window.median(), False
            return
        if not self._probing:  # a forward of the other side outside a probe: not ours to compare
            return
        self._probe_n += 1
        self._probe_time += seconds
        compared = self._probe_run.add(seconds, resumed)
        if self._probe_n > 1:  # the probe's first forward only woke the side: never compared
            self._probe.extend(compared)
        if len(self._probe) >= PROBE_CALLS - 1:
            self._settle()

    def abandon_probe(self) -> None:
        """Forget a probe under way (its side failed); the current side keeps serving."""
        self._probing, self._probe = False, []
        self._since, self._clean, self._busy, self._last = 0, 0, 0.0, self._clock()

    def _settle(self) -> None:
        probe, current = statistics.median(self._probe), self._window.median()
        self.probes += 1
        self._probe_calls = max(PROBE_CALLS, self._probe_n)
        # Its first forwards beyond the side's median: a thread pool waking, a twin bound again and its first
        # forward (MXNet's oneDNN kernels and weight layouts: 282 ms against 73 ms after, VGG-11 at batch 1).
        self._overhead[self.other] = max(0.0, self._probe_time - self._probe_n * probe)
        self.medians[self.other], self.medians[self.current] = probe, current
        if probe <= KEEP_BELOW * current:
            logger.info("mx_trt: %s: %s its forwards (%.2f ms against %.2f ms for %s, medians of its latest "
                        "forwards)", self.name,
                        "the engines now serve" if self.other == ENGINES else "native MXNet now serves",
                        probe * 1e3, current * 1e3, "the engines" if self.current == ENGINES else "native MXNet")
            self.current = self.other
            self.switches += 1
            self._window = _Window(self._probe)
            # One probe decided: the next one, soon, checks the switch (a wrong one costs a few forwards).
            self._gap, self._ref, self._recheck = 0.0, probe, True
            self._run = self._probe_run  # the new side served the probe: it is running
        else:
            self._gap, self._ref, self._recheck = max(0.0, probe - current), current, False
            self._run = _Run(resumed=False)  # the current side takes over again: a new run
        self._probing, self._probe = False, []
        self._since, self._clean, self._busy, self._last = 0, 0, 0.0, self._clock()

    def stats(self) -> Dict[str, Any]:
        """The side serving now, forwards served per side, probes, switches, and the latest medians (ms)."""
        return {"serving": self.current, "served": dict(self.served), "probes": self.probes,
                "switches": self.switches, "seeded": self.seeded,
                "median_ms": {k: (v * 1e3 if v is not None else None) for k, v in self.medians.items()}}
