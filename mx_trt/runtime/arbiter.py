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
forward waits for its outputs anyway), and now and then the next
:data:`PROBE_CALLS` forwards go to the other side (a *probe*; its first call only
wakes that side and is not compared). The other side takes over when the median
of its probe is at most :data:`KEEP_BELOW` of the median of the current side's
last :data:`WINDOW` forwards, and a switch is checked by the next probe after
:data:`MIN_CALLS` forwards of the new side, however short they are. The
executor's first :data:`WARMUP` forwards are not compared, and the first probe
waits until the current side has a full window after them: an engine's first
forwards can be far slower than the next (ONNX Runtime's on MobileNetV2 at
batch 1: 6-9 ms for the first four, 3.3-3.9 ms after; Faster R-CNN's engine
likewise), and a window holding them makes the faster side lose.

What probing costs is bounded: serving a forward with the slower side costs the
difference of the two, so the next probe waits until the forwards since the last
one have taken at least ``PROBE_CALLS * gap / BUDGET`` (``gap``: how much slower
the other side was last seen), and for at least
:data:`MIN_CALLS` forwards and :data:`MIN_GAP_S` seconds. Probes therefore cost
at most about :data:`BUDGET` (2%) of the time spent in forwards, however the
caller spaces them out, and sides that are close, where a change of load is
likeliest to reverse the order, are compared often. When the serving side slows
down after a probe (its median over the window against its median then), the
other side is taken to be that much closer: ``gap`` shrinks by the slowdown, so
load that hits the serving side is checked within a window's forwards instead of
after the wait that the old gap bought (Faster R-CNN: an engine 0.8 s ahead
waited about 160 s of forwards, while a busy core made it 0.3 s behind). When
the serving side has become slower than the other side was at the last probe,
by the switching margin, the probe comes at once (:meth:`Arbiter.overtaken`),
without waiting for :data:`MIN_CALLS` forwards since the last one. The current
side's forwards that end within :data:`SETTLE_S` of a probe are not compared:
in one process, the side that resumes after the other is slowed for a few
milliseconds by it, and comparing those forwards would make every probe call
for the next. That
estimate costs more than the budget only when load slows both sides, and the
probe then measures the new gap. The first probe comes after
:data:`FIRST_AFTER` forwards, whatever the bind measured: each executor checks the
bind's decision in its own conditions (the bind's load, its spacing of forwards,
may not be the executor's).

This module is pure (no MXNet): :class:`Arbiter` takes durations and a clock.
``runtime.forward.guard_forward`` runs it (:class:`RuntimeCheck`).
"""
from __future__ import annotations

import logging
import statistics
import time
from collections import deque
from typing import Any, Callable, Deque, Dict, List, Optional

logger = logging.getLogger(__name__)

ENGINES = "engines"
NATIVE = "native"

#: Forwards the other side serves per probe; the first of them only wakes it (not compared).
PROBE_CALLS = 4
#: The current side's latest timed forwards that a probe is compared with.
WINDOW = 5
#: Timed forwards of the current side between two probes at least.
MIN_CALLS = 8
#: Timed forwards of the first side before the first probe: a full window after the warm-up.
FIRST_AFTER = WINDOW
#: The executor's first forwards, not compared: allocations, first-run kernel choices, thread pools
#: starting (Faster R-CNN's engine, ONNX Runtime's on MobileNetV2: the first few far slower than the next).
WARMUP = 3
#: Seconds between probes at least.
MIN_GAP_S = 0.5
#: The share of forward time probes may cost (the slower side's extra time over the forwards' time between probes).
BUDGET = 0.02
#: The other side takes over when its probe's median is at most this fraction of the current side's.
KEEP_BELOW = 0.95
#: After a probe that did not switch, the current side's forwards that end within this many seconds are not
#: compared: they pay for the probe (MXNet's OpenMP threads still spinning in the process, the engine's
#: threads waking; OpenVINO on MobileNetV2 at batch 1 and two threads: 3.5-4.7 ms for the first two forwards
#: after MXNet's, 2.0-2.5 ms after). Forwards of seconds lose nothing to it.
SETTLE_S = 0.02


class Arbiter:
    """The side (:data:`ENGINES` or :data:`NATIVE`) that serves each forward; O(1) per forward.

    Call :meth:`next_side` before a forward and :meth:`record` with its duration
    after it. Not thread-safe: one executor's forwards are serial, as MXNet's are.

    Args:
        first: The side that serves first (the bind's decision: the engines).
        clock: Seconds, monotonic (tests pass their own).
        name: Used in log lines.
    """

    def __init__(self, first: str = ENGINES, clock: Callable[[], float] = time.monotonic,
                 name: str = "executor") -> None:
        if first not in (ENGINES, NATIVE):
            raise ValueError(f"unknown side {first!r}")
        self.current = first
        self.name = name
        self._clock = clock
        self._window: Deque[float] = deque(maxlen=WINDOW)
        self._gap = 0.0  # how much slower the other side was at the last probe (s)
        self._ref: Optional[float] = None  # the current side's median at the last probe (s)
        self._recheck = False  # the last probe switched sides: the next one checks that soon
        self._probe_left = 0
        self._probe: List[float] = []
        self._since = 0
        self._settle_left = 0.0  # seconds of the current side's forwards after a probe still not compared
        self._clean = 0  # the current side's forwards compared since the last probe
        self._busy = 0.0
        self._warmup = WARMUP
        self._last = clock()
        self.probes = 0
        self.switches = 0
        self.served: Dict[str, int] = {ENGINES: 0, NATIVE: 0}
        self.medians: Dict[str, Optional[float]] = {ENGINES: None, NATIVE: None}

    @property
    def other(self) -> str:
        return NATIVE if self.current == ENGINES else ENGINES

    def next_side(self) -> str:
        """The side that serves the next forward (a probe starts here when one is due)."""
        if self._probe_left == 0 and self._due():
            self._probe_left, self._probe = PROBE_CALLS, []
        return self.other if self._probe_left else self.current

    def _due(self) -> bool:
        if self.probes == 0:
            return self._since >= FIRST_AFTER
        if not self._recheck and self.overtaken():
            return True
        if self._since < MIN_CALLS:
            return False
        if self._recheck:
            return True
        if self._busy < PROBE_CALLS * self.expected_gap() / BUDGET:
            return False
        return self._clock() - self._last >= MIN_GAP_S

    def overtaken(self) -> bool:
        """The serving side's median, over forwards most of which came after the last probe, is slower than
        the other side was then by the switching margin: a probe is due now, however recent the last one.

        Without this, load arriving just after a probe would wait :data:`MIN_CALLS`
        forwards for the next, which on a model of seconds a forward is most of a
        minute served by the slower side.
        """
        if self._ref is None or self._clean <= WINDOW // 2 or not self._window:
            return False
        return self._ref + max(0.0, self._gap) <= KEEP_BELOW * statistics.median(self._window)

    def expected_gap(self) -> float:
        """How much slower the other side is expected to be now (s, at least 0): the last probe's gap,
        less how much the current side has slowed down since (the other side assumed unchanged)."""
        if self._gap <= 0.0 or self._ref is None or not self._window:
            return max(0.0, self._gap)
        slowed = statistics.median(self._window) - self._ref
        return max(0.0, self._gap - max(0.0, slowed))

    def record(self, side: str, seconds: float) -> None:
        """Record that ``side`` served a forward in ``seconds``; a probe's last forward settles it."""
        self.served[side] = self.served.get(side, 0) + 1
        if side == self.current and self._warmup:
            self._warmup -= 1
            return
        if side == self.current:
            self._since += 1
            self._busy += seconds
            if self._settle_left > 0.0:
                self._settle_left -= seconds
                if self._settle_left >= 0.0:
                    return  # it ended within SETTLE_S of the probe: it paid for the probe
            self._window.append(seconds)
            self._clean += 1
            return
        if not self._probe_left:  # a forward of the other side outside a probe: not ours to compare
            return
        if self._probe_left < PROBE_CALLS:  # the probe's first forward only woke the side
            self._probe.append(seconds)
        self._probe_left -= 1
        if self._probe_left == 0:
            self._settle()

    def abandon_probe(self) -> None:
        """Forget a probe under way (its side failed); the current side keeps serving."""
        self._probe_left, self._probe = 0, []
        self._since, self._clean, self._busy, self._last = 0, 0, 0.0, self._clock()

    def _settle(self) -> None:
        probe, current = statistics.median(self._probe), statistics.median(self._window)
        self.probes += 1
        self.medians[self.other], self.medians[self.current] = probe, current
        if probe <= KEEP_BELOW * current:
            logger.info("mx_trt: %s: %s its forwards (%.2f ms against %.2f ms for %s, medians of its latest "
                        "forwards)", self.name,
                        "the engines now serve" if self.other == ENGINES else "native MXNet now serves",
                        probe * 1e3, current * 1e3, "the engines" if self.current == ENGINES else "native MXNet")
            self.current = self.other
            self.switches += 1
            self._window = deque(self._probe, maxlen=WINDOW)
            # One probe decided: the next one, soon, checks the switch (a wrong one costs a few forwards).
            self._gap, self._ref, self._recheck = 0.0, probe, True
            self._settle_left = 0.0  # the new side served the probe: nothing to settle
        else:
            self._gap, self._ref, self._recheck = max(0.0, probe - current), current, False
            self._settle_left = SETTLE_S
        self._probe = []
        self._since, self._clean, self._busy, self._last = 0, 0, 0.0, self._clock()

    def stats(self) -> Dict[str, Any]:
        """The side serving now, forwards served per side, probes, switches, and the latest medians (ms)."""
        return {"serving": self.current, "served": dict(self.served), "probes": self.probes,
                "switches": self.switches,
                "median_ms": {k: (v * 1e3 if v is not None else None) for k, v in self.medians.items()}}
