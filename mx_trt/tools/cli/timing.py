"""Timing forwards: latencies, their statistics, and a progress bar for long measurements."""
from __future__ import annotations

import logging
import math
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, TextIO, Tuple

import numpy as np

from mx_trt.pipeline.measure import SETTLE_S as MEASURED_SETTLE_S, settle_turn
from mx_trt.runtime.twin import check_warm

logger = logging.getLogger(__name__)


class Progress:
    """A progress bar on stderr when it is a terminal; otherwise one log line per phase."""

    def __init__(self, total: int, stream: Optional[TextIO] = None, width: int = 28) -> None:
        self.total = max(1, total)
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.width = width
        self.label = ""
        self.started = time.perf_counter()
        self._drawn = 0.0

    def phase(self, label: str) -> None:
        """Start a named phase (logged when not on a terminal)."""
        self.label = label
        if self.tty:
            self._draw()
        else:
            logger.info("%s", label)

    def advance(self, n: int = 1) -> None:
        self.done = min(self.total, self.done + n)
        now = time.perf_counter()
        if self.tty and now - self._drawn >= 0.1:  # redraws cost time between timed runs
            self._draw()

    def _draw(self) -> None:
        frac = self.done / self.total
        filled = int(round(frac * self.width))
        elapsed = time.perf_counter() - self.started
        bar = "#" * filled + "-" * (self.width - filled)
        self.stream.write(f"\r[{bar}] {100 * frac:5.1f}% {elapsed:6.1f}s  {self.label[:48]:<48}")
        self.stream.flush()
        self._drawn = time.perf_counter()

    def close(self) -> None:
        if self.tty:
            self.done = self.total
            self._draw()
            self.stream.write("\n")
            self.stream.flush()


#: Seconds of untimed runs a variant's turn starts with in the benchmarks' alternating rounds (the measured
#: rule's own, :data:`mx_trt.pipeline.measure.SETTLE_S`). After a forward, MXNet's OpenMP threads spin for
#: several milliseconds (libgomp's default wait policy), in its own process and beside any other: an engine
#: timed right after MXNet at two threads ran its first two forwards at 3.5-4.7 ms and the next at 2.0-2.5 ms
#: (MobileNetV2, batch 1, OpenVINO). With one untimed run, a variant that always follows MXNet's worker in the
#: rounds paid for MXNet's spinning in its median.
SETTLE_S = MEASURED_SETTLE_S


def measure(fn: Callable[[], None], runs: int, warmup: int, tick: Optional[Callable[[], None]] = None,
            settle_s: float = 0.0) -> List[float]:
    """Latencies (ms) of ``runs`` calls of ``fn`` after ``warmup`` untimed calls, and more untimed calls
    until they have taken ``settle_s`` seconds (:func:`~mx_trt.pipeline.measure.settle_turn`)."""
    settle_turn(fn, warmup, settle_s)
    if tick:
        for _ in range(warmup):  # the progress bar counts the warm-up asked for
            tick()
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1e3)
        if tick:
            tick()
    return out


#: Seconds of untimed forwards at most that :func:`warm_check` gives an accelerated executor: its run-time
#: check's first probe comes after its first eight forwards and takes four more (Faster R-CNN, about two
#: seconds a forward: 24 s); an alternate engine's first probe waits half a second after the one before.
CHECK_WARMUP_S = 60.0
#: ... or this many of its forwards (at their median so far), when that is longer: the first probes take twenty
#: to thirty forwards of the engines' time (eight of the engines, four of MXNet's, which may be twice as slow at
#: its one default thread, four of each alternate, MIN_CALLS between probes), and a model of ten seconds a
#: forward (DeepLab and FCN at 8x3x480x480) did not get through them in 60 s: its timed runs then held MXNet's
#: first probe (DeepLab at batch 8 and MXNet's default threads read 1.32 where its engines alone ran 1.96x).
CHECK_WARMUP_FORWARDS = 40


def warm_check(fn: Callable[[], None], exe: Any, limit_s: float = CHECK_WARMUP_S,
               forwards: int = CHECK_WARMUP_FORWARDS) -> Tuple[int, float]:
    """Untimed calls of ``fn`` (one waited-for forward of ``exe``) until ``exe``'s run-time check has paid its
    one-time costs (:func:`~mx_trt.runtime.twin.check_warm`), for ``limit_s`` seconds at most, or ``forwards``
    forwards at the median of those so far when that is longer (a warning then).

    Returns (forwards, seconds): what the check's first probes cost the caller beyond its steady state is
    part of it. An executor without a check, or one whose bind's timings stood for the first probe, takes none.
    """
    t0 = time.perf_counter()
    took: List[float] = []
    while not check_warm(exe):
        spent = time.perf_counter() - t0
        if spent >= max(limit_s, forwards * statistics.median(took) if took else 0.0):
            logger.warning("the run-time check had not probed every side after %d untimed forwards (%.1f s); "
                           "timing from here", len(took), spent)
            break
        t = time.perf_counter()
        fn()
        took.append(time.perf_counter() - t)
    return len(took), time.perf_counter() - t0


def forward_fn(exe: Any) -> Callable[[], None]:
    """One waited-for inference forward of ``exe``."""

    def run() -> None:
        exe.forward(is_train=False)
        for o in exe.outputs:
            o.wait_to_read()

    return run


def latency_stats(ms: Sequence[float], batch: int) -> Dict[str, float]:
    """Median, p90, mean, min (ms) and throughput (samples/s at the median)."""
    med = statistics.median(ms)
    return {
        "median_ms": med,
        "min_ms": min(ms),
        "p90_ms": float(np.percentile(ms, 90)),
        "mean_ms": statistics.fmean(ms),
        "throughput": batch * 1e3 / med if med > 0 else math.inf,
        "runs": len(ms),
    }
