"""A helper process that keeps one CPU core busy, for timings on a busy machine.

The helper spins in pure Python (one thread, so one core's worth of work) and
stops by itself: at its deadline, or as soon as the process that started it is
gone (its parent id changes), so a runner that dies leaves nothing behind.
"""
from __future__ import annotations

import logging
import os
import subprocess
import sys
from typing import Any, Optional

logger = logging.getLogger("benchmarks.busy")

#: The helper's code: spin until the deadline, checking every ~50 ms that its parent still lives.
_SPIN = """
import os, sys, time
parent, end = int(sys.argv[1]), time.monotonic() + float(sys.argv[2])
while time.monotonic() < end and os.getppid() == parent:
    t = time.monotonic() + 0.05
    while time.monotonic() < t:
        pass
"""


def deadline_for(quiet_s: float, floor_s: float = 120.0) -> float:
    """A helper's deadline for timings that took ``quiet_s`` seconds on the quiet machine: a busy core slows
    them (2.4x the most seen: MXNet at two threads on MobileNetV2), so four times that and a minute,
    ``floor_s`` at least."""
    return max(floor_s, 4.0 * quiet_s + 60.0)


class BusyCore:
    """A bounded process spinning on one core; a context manager.

    Args:
        seconds: It stops by itself after this long, whatever happens to its starter.
        cpu: Pin it to this CPU (``None``: the scheduler places it, as another tenant's process).
    """

    def __init__(self, seconds: float = 300.0, cpu: Optional[int] = None) -> None:
        self.seconds = seconds
        self.cpu = cpu
        self.proc: Optional[subprocess.Popen] = None  # type: ignore[type-arg]

    def start(self) -> "BusyCore":
        if self.proc is None:
            self.proc = subprocess.Popen([sys.executable, "-c", _SPIN, str(os.getpid()), str(self.seconds)],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
            if self.cpu is not None and hasattr(os, "sched_setaffinity"):
                os.sched_setaffinity(self.proc.pid, {self.cpu})
        return self

    def stop(self, timed: str = "") -> bool:
        """Stop the helper; whether it was still spinning (``False``: it had reached its deadline, or was never
        started, so whatever was timed before this call did not all run beside a busy core; with ``timed``,
        what was timed, that is logged as a warning)."""
        alive = self.proc is not None and self.proc.poll() is None
        if timed and not alive:
            logger.warning("%s: the busy helper ended before the timings did: the 'one core busy' figures are "
                           "not all busy", timed)
        if self.proc is None:
            return False
        if alive:
            self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        return alive

    def __enter__(self) -> "BusyCore":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
