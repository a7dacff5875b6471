"""Which of equivalent executors serves the next forward, decided from the caller's own forwards.

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
:data:`KEEP_BELOW` (an engine) or :data:`TO_NATIVE_BELOW` (native MXNet: as
soon as the engine is no faster) of the median of the current side's *window*: its latest
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
``gap``: how much slower the other side was then; ``start`` also holds what
the serving side's first forwards after that probe took beyond its median,
held back when it took over again: it pays for the probed side too, MXNet's
OpenMP threads still spinning after its forwards), and for at least
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

At a tie every probe is a start paid for nothing, and a side far behind keeps
losing: spent in full, the budget costs a tie all of it (simulated: 1.8% of the
forward time, MXNet and the engines at 10 ms and a change of side costing
5 ms), as much as the ties measured at 0.99-0.995 of MXNet missed. So a side's
wait doubles with each probe in a row it loses after its first, up to :data:`MAX_BACKOFF` doublings (a quarter of its
share), while the serving side keeps its speed (its median within
:data:`STEADY_WITHIN` of what it was at that side's last probe); a switch, or
the serving side's median moving by more, gives every side its full share
again. What this gives up: a side that becomes faster while the serving one
does not change (MXNet's single thread serving a busy machine; the load goes,
and the engines, slowed by it, are fast again) is found up to four times later.

The same holds with more than two sides (other engines of the same model, which
a bind kept its first candidate over without timing: :class:`Arbiter`'s
``alternates``): each probe compares one other side with the serving one. The
first goes to the first other side in ``sides``' order; after that, a side that
has overtaken the current one is probed at once, a switch is checked against the
side it left, and otherwise each other side waits for its own budget, a share
``BUDGET / (sides - 1)`` of the forward time since its last probe, so that all
probes together still cost about :data:`BUDGET`. A side never probed costs
nothing to probe: it comes after :data:`MIN_CALLS` forwards and :data:`MIN_GAP_S`.

An alternate engine may be made off the forward path (built on a thread of its
own when its first probe is due: :meth:`Arbiter.wait_for`). Until it is ready
(:meth:`Arbiter.ready`) no probe starts, and the current side's forwards are
served but not compared: the making takes a core and the interpreter from them,
so they stand for neither side. A probe of it under way is put off; the budget
it had earned is kept, so its probe comes at the first forward after. What the
making took counts in what that probe costs, as a build inside its first forward
did, so that an alternate released and made again at each probe is not made
more often than the budget allows; the current side's first forwards after the
making are held back and dropped, and charged to no probe.

This module is pure (no MXNet): :class:`Arbiter` takes durations and a clock.
``runtime.forward.guard_forward`` runs it (:class:`RuntimeCheck`).
"""
from __future__ import annotations

import logging
import statistics
import time
from collections import deque
from typing import Any, Callable, Deque, Dict, Iterable, List, NamedTuple, Optional, Sequence, Set

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
#: A side's share of :data:`BUDGET` halves with each probe in a row that it lost after its first, down to this
#: many halvings, while the serving side keeps its speed (within :data:`STEADY_WITHIN` of its median at that
#: side's last probe): at a tie every probe is a start paid for nothing (module docstring).
MAX_BACKOFF = 2
#: How far the serving side's median may move from its median at a side's last probe for that side's share of
#: the budget to stay halved (:data:`MAX_BACKOFF`).
STEADY_WITHIN = 0.05
#: An engine (the bind's, or an alternate) takes over when its probe's median is at most this fraction of the
#: serving side's: clearly faster, as the bind keeps an engine (``passes.cost.KEEP_BELOW``).
KEEP_BELOW = 0.95
#: Native MXNet takes over when its probe's median is at most this fraction of the serving engine's: as soon
#: as the engine is no longer faster. Between this and :data:`KEEP_BELOW` whichever side serves keeps serving,
#: so noise at a tie cannot make the sides alternate, and a tie settles on MXNet: an executor whose engines
#: are 1-5% slower than MXNet (Faster R-CNN FPN at equal threads, 4% in run Y9; Inception v3 with a core busy,
#: 1%) no longer keeps them for want of a 5% lead.
TO_NATIVE_BELOW = 1.0
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
    """The side that serves each forward: :data:`ENGINES`, :data:`NATIVE`, or another engine of the same
    model (an *alternate*, named by the caller). Per forward, O(sides) but for one median of the window
    (:data:`MAX_WINDOW` forwards at most) when it changed.

    Call :meth:`next_side` before a forward and :meth:`record` with its duration
    after it. Not thread-safe: one executor's forwards are serial, as MXNet's are.
    More than two sides, and sides made off the forward path: see the module docstring.

    Args:
        first: The side that serves first (the bind's decision: the engines).
        clock: Seconds, monotonic (tests pass their own).
        name: Used in log lines.
        expect: What the bind measured of the whole executor, or ``None``. With the engines serving first,
            and native MXNet at least :data:`SEED_ABOVE` times slower or its first forward measured, it
            stands for a first probe; MXNet's first forward is what starting it is taken to cost.
        alternates: Names of further sides, probed after native MXNet (in this order).
    """

    def __init__(self, first: str = ENGINES, clock: Callable[[], float] = time.monotonic,
                 name: str = "executor", expect: Optional[BindTimes] = None,
                 alternates: Sequence[str] = ()) -> None:
        self.sides: List[str] = [ENGINES, NATIVE, *alternates]
        if len(set(self.sides)) < len(self.sides) or first not in self.sides:
            raise ValueError(f"a side given twice in {self.sides}, or an unknown side {first!r} first")
        self.current = first
        self.name = name
        self._clock = clock
        self._window = _Window()
        self._gap: Dict[str, float] = {s: 0.0 for s in self.sides}  # per other side: how much slower at its last probe
        self._ref: Dict[str, Optional[float]] = {s: None for s in self.sides}  # the current side's median then (s)
        self._busy: Dict[str, float] = {s: 0.0 for s in self.sides}  # the current side's forward time since then
        self._probe_calls: Dict[str, int] = {s: PROBE_CALLS for s in self.sides}  # forwards its last probe took
        self._lost = {s: 0 for s in self.sides}  # its probes in a row that it lost
        # What its last settled probe cost beyond its forwards at its median (s), and what the current side's
        # forwards held back when it took over again cost beyond its median.
        self._overhead: Dict[str, float] = {s: 0.0 for s in self.sides}
        self._returning: Optional[str] = None  # the current side resumed after this side's probe: its start unpaid
        self._back: Optional[str] = None  # the last probe switched from this side: the next one checks it soon
        self._target: Optional[str] = None  # the side of the probe under way
        self._waiting: Set[str] = set()  # sides being made off the forward path (:meth:`wait_for`)
        self._made: Dict[str, float] = {}  # what making a side cost (s), counted in its next probe's cost
        self._probe: List[float] = []  # the probe's compared forwards
        self._probe_run = _Run(resumed=False)
        self._probe_n = 0  # forwards the probe under way has taken
        self._probe_time = 0.0  # their time, the first forward's included (s)
        self._run = _Run()  # the current side's
        self._end = clock()  # when the last forward ended
        self._since = 0
        self._clean = 0  # the current side's forwards compared since the last probe
        self._warmup = WARMUP
        self._last = clock()
        self.probes = 0
        self.switches = 0
        #: The side of the last settled probe (``None``: none yet).
        self.last_probed: Optional[str] = None
        #: The sides a settled probe has compared (as its target or as the side serving then; native MXNet also
        #: when the bind's timings stand for its first probe).
        self.probed: Set[str] = set()
        self.served: Dict[str, int] = {s: 0 for s in self.sides}
        self.medians: Dict[str, Optional[float]] = {s: None for s in self.sides}
        start = _seed_start(expect) if first == ENGINES else None
        self.seeded = start is not None  # the bind's timings stand for a first probe
        self._rebase = False  # the seed's engines time is a part of the forward: take the window's median
        if expect is not None and start is not None:
            self._ref[NATIVE], self._gap[NATIVE] = expect.engines, expect.native - expect.engines
            self.probed.add(NATIVE)
            self._overhead[NATIVE], self._rebase = start, expect.partial

    @property
    def other(self) -> str:
        """The side of the probe under way, else the first side other than the current one."""
        if self._target is not None:
            return self._target
        return next(s for s in self.sides if s != self.current)

    @property
    def probing(self) -> Optional[str]:
        """The side of the probe under way, or ``None``."""
        return self._target

    @property
    def _others(self) -> List[str]:
        return [s for s in self.sides if s != self.current]

    def next_side(self) -> str:
        """The side that serves the next forward (a probe starts here when one is due)."""
        if self._target is None:
            target = self._due()
            if target is not None:
                self._target, self._probe, self._probe_run = target, [], _Run(resumed=False)
                self._probe_n, self._probe_time = 0, 0.0
        return self._target if self._target is not None else self.current

    def _due(self) -> Optional[str]:
        """The side a probe is due for now, or ``None``."""
        others = self._others
        if not others or self._waiting:
            return None
        if self.probes == 0:
            if self._clean < FIRST_AFTER:
                return None
            if not self.seeded:
                return others[0]
        recheck = self._back if self._back in others else None
        if recheck is None:
            ahead = self._overtaking()
            if ahead is not None:
                return ahead
        if self._since < MIN_CALLS:
            return None
        if recheck is not None:
            return recheck
        if self._clock() - self._last < MIN_GAP_S:
            return None
        share = BUDGET / len(others)
        return next((s for s in others if self._busy[s] >= self.probe_cost(s) / share * self._backoff(s)), None)

    def _backoff(self, side: str) -> float:
        return _backoff(self._lost[side], self._ref[side], self._window)

    def _overtaking(self) -> Optional[str]:
        """The first other side that the current one has fallen behind (:meth:`overtaken`), or ``None``."""
        if self._rebase or self._clean <= len(self._window) // 2:
            return None
        median, latest = self._window.median(), self._window.times[-1]
        for s in self._others:
            ref = self._ref[s]
            if ref is None:
                continue
            other = ref + max(0.0, self._gap[s])
            # The latest forward too: a slow spell that is already over calls for no probe.
            if other <= KEEP_BELOW * median and other <= KEEP_BELOW * latest:
                return s
        return None

    def overtaken(self) -> bool:
        """The serving side's median (over forwards mostly after the last probe) and latest compared forward are
        slower than another side was at its last probe by the switching margin: a probe of it is due now, not
        after :data:`MIN_CALLS` forwards (on a model of seconds a forward, most of a minute)."""
        return self._overtaking() is not None

    def probe_cost(self, side: Optional[str] = None) -> float:
        """What the next probe of ``side`` (``None``: :attr:`other`) is expected to cost over the current side
        serving (s): its forwards at :meth:`expected_gap` each, and what starting it cost at its last probe."""
        side = self.other if side is None else side
        return self._overhead[side] + self._probe_calls[side] * self.expected_gap(side)

    def expected_gap(self, side: Optional[str] = None) -> float:
        """How much slower ``side`` (``None``: :attr:`other`) is expected to be now (s, at least 0): its last
        probe's gap, less how much the current side has slowed down since (``side`` assumed unchanged)."""
        side = self.other if side is None else side
        gap, ref = self._gap[side], self._ref[side]
        if gap <= 0.0 or ref is None or not self._window:
            return max(0.0, gap)
        slowed = self._window.median() - ref
        return max(0.0, gap - max(0.0, slowed))

    def record(self, side: str, seconds: float) -> None:
        """Record that ``side`` served a forward in ``seconds``; the probe's last compared forward settles it."""
        self.served[side] = self.served.get(side, 0) + 1
        now = self._clock()
        resumed = now - seconds - self._end >= GAP_S
        self._end = now
        if side == self.current:
            if self._waiting:  # another side is being made beside this forward: what it took is not the side's
                return
            held = list(self._run.held) if self._returning is not None else None
            compared = self._run.add(seconds, resumed)
            if held is not None and (compared or resumed):
                self._charge_return(held if not resumed else [])
            if self._warmup:
                self._warmup -= 1
                return
            self._since += 1
            for s in self._busy:
                self._busy[s] += seconds
            for t in compared:
                self._window.append(t)
            self._clean += len(compared)
            if self._rebase and self._clean >= FIRST_AFTER:
                # The bind timed the engines' subgraphs only: the forward is what they take, with the operators
                # left native, and MXNet's the same gap slower.
                self._ref[NATIVE], self._rebase = self._window.median(), False
            return
        if self._target is None or side != self._target:  # another side outside a probe: not ours to compare
            return
        self._probe_n += 1
        self._probe_time += seconds
        compared = self._probe_run.add(seconds, resumed)
        if self._probe_n > 1:  # the probe's first forward only woke the side: never compared
            self._probe.extend(compared)
        if len(self._probe) >= PROBE_CALLS - 1:
            self._settle()

    def _charge_return(self, dropped: Sequence[float]) -> None:
        """Add to the last probe's cost what the current side's first forwards after it (``dropped``, held back)
        took beyond its median: starting again pays for the probed side (MXNet's OpenMP threads still spin:
        OpenVINO's first four forwards after MXNet's 3.1-4.2 ms against 1.6 ms). O(held)."""
        side, self._returning = self._returning, None
        if side is None or not dropped or not self._window:
            return
        self._overhead[side] += max(0.0, sum(dropped) - len(dropped) * self._window.median())

    def wait_for(self, side: str) -> None:
        """``side`` is being made off the forward path until :meth:`ready` or :meth:`drop` (module docstring). O(1)."""
        if side not in self.sides or side == self.current:
            return
        if self._target == side:
            self._target, self._probe = None, []
        self._waiting.add(side)

    def ready(self, side: str, cost: float = 0.0) -> None:
        """``side``, waited for (:meth:`wait_for`), can serve now; making it took ``cost`` seconds. O(1)."""
        if side in self._waiting:
            self._made[side] = self._made.get(side, 0.0) + cost
            self._waiting.discard(side)
            if not self._waiting:
                self._run, self._returning = _Run(resumed=False), None

    def abandon_probe(self) -> None:
        """Forget a probe under way (its side failed); the current side keeps serving."""
        if self._target is not None:
            self._busy[self._target] = 0.0
        self._target, self._probe = None, []
        self._since, self._clean, self._last = 0, 0, self._clock()

    def drop(self, side: str) -> None:
        """Take ``side`` out of the comparison (it failed); a probe of it under way is forgotten, and when it
        was serving, the first remaining side (the engines before native MXNet) takes over."""
        if side not in self.sides or len(self.sides) == 1:
            return
        if self._target == side:
            self.abandon_probe()
        self.ready(side)
        self._made.pop(side, None)
        self.sides.remove(side)
        if self._back == side:
            self._back = None
        if self._returning == side:
            self._returning = None
        if self.current == side:
            self.current = self.sides[0]
            self._window, self._run = _Window(), _Run(resumed=False)
            self._warmup, self._clean, self._since = WARMUP, 0, 0
            for s in self.sides:
                self._gap[s], self._ref[s], self._busy[s] = 0.0, None, 0.0

    def _settle(self) -> None:
        target = self._target
        assert target is not None
        probe, current = statistics.median(self._probe), self._window.median()
        self.probes += 1
        self.last_probed = target
        self.probed.update((target, self.current))  # both were compared, whichever serves next
        self._probe_calls[target] = max(PROBE_CALLS, self._probe_n)
        # Its first forwards beyond its median (a pool waking; a twin bound again and its first forward, MXNet's
        # oneDNN set-up: 282 ms against 73 ms after, VGG-11 at batch 1), and what making it took (:meth:`ready`).
        self._overhead[target] = max(0.0, self._probe_time - self._probe_n * probe) + self._made.pop(target, 0.0)
        self.medians[target], self.medians[self.current] = probe, current
        if probe <= switch_margin(target) * current:
            logger.info("mx_trt: %s: %s its forwards (%.2f ms against %.2f ms for %s, medians of its latest "
                        "forwards)", self.name, "the engines now serve" if target == ENGINES else
                        f"{side_words(target)} now serves", probe * 1e3, current * 1e3, side_words(self.current))
            old = self.current
            for s in self.sides:
                # Each other side's last estimate, now against the new side's median.
                ref = self._ref[s]
                if s not in (old, target) and ref is not None:
                    self._gap[s], self._ref[s] = ref + max(0.0, self._gap[s]) - probe, probe
                self._busy[s], self._lost[s] = 0.0, 0
            self.current = target
            self.switches += 1
            self._window = _Window(self._probe)
            # One probe decided: the next one, soon, checks the switch (a wrong one costs a few forwards).
            self._gap[old], self._ref[old], self._back = 0.0, probe, old
            self._returning = None
            self._run = self._probe_run  # the new side served the probe: it is running
        else:
            self._gap[target], self._ref[target] = max(0.0, probe - current), current
            self._busy[target] = 0.0
            self._lost[target] += 1
            self._returning = target
            if self._back == target:
                self._back = None
            self._run = _Run(resumed=False)  # the current side takes over again: a new run
        self._target, self._probe = None, []
        self._since, self._clean, self._last = 0, 0, self._clock()

    def stats(self) -> Dict[str, Any]:
        """The serving side, forwards served per side, probes, switches, latest medians (ms); ``probing``: the
        probe's side (or ``None``); ``unprobed``: other sides no probe has compared yet; ``making``: sides being
        made off the forward path."""
        return {"serving": self.current, "served": dict(self.served), "probes": self.probes,
                "switches": self.switches, "seeded": self.seeded, "probing": self._target,
                "making": sorted(self._waiting),
                "unprobed": [s for s in self.sides if s != self.current and s not in self.probed],
                "median_ms": {k: (v * 1e3 if v is not None else None) for k, v in self.medians.items()}}


def _seed_start(expect: Optional[BindTimes]) -> Optional[float]:
    """What starting native MXNet is taken to cost (s) when the bind's timings ``expect`` stand for the first
    probe (MXNet's first forward measured, or MXNet at least :data:`SEED_ABOVE` times slower), else ``None``."""
    if expect is None or expect.engines <= 0.0:
        return None
    if expect.native_first is not None:
        return max(0.0, expect.native_first - expect.native)
    return 0.0 if expect.native >= SEED_ABOVE * expect.engines else None


def _backoff(lost: int, ref: Optional[float], window: _Window) -> float:
    """How many times longer than its share of the budget allows a side's next probe waits: 2 ** (``lost`` - 1),
    at most 2 ** :data:`MAX_BACKOFF`, while the serving side's ``window`` median is within :data:`STEADY_WITHIN`
    of ``ref`` (its median at that side's last probe), else 1. ``lost``: the side's probes lost in a row. O(1)
    but for one median of the window when it changed."""
    halvings = min(lost - 1, MAX_BACKOFF)
    if halvings <= 0 or ref is None or not window:
        return 1.0
    return 1.0 if abs(window.median() - ref) > STEADY_WITHIN * ref else float(2 ** halvings)


def switch_margin(target: str) -> float:
    """The fraction of the serving side's median that a probe of ``target`` must reach for ``target`` to take
    over: :data:`TO_NATIVE_BELOW` for native MXNet, :data:`KEEP_BELOW` for an engine."""
    return TO_NATIVE_BELOW if target == NATIVE else KEEP_BELOW


def side_words(side: str) -> str:
    """A side as log lines name it: ``the engines``, ``native MXNet``, ``the openvino fp32 engine``."""
    return {ENGINES: "the engines", NATIVE: "native MXNet"}.get(side, f"the {side} engine")
