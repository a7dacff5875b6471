"""Progress of engine builds: a one-line bar on a terminal, INFO log lines otherwise."""
from __future__ import annotations

import logging
import sys
import time
from typing import Optional, TextIO

logger = logging.getLogger(__name__)


class BuildProgress:
    """Shows ``engine k/n  name (ops)  elapsed  [phase]`` while engines build.

    Draws on ``stream`` (stderr) only when it is a terminal; otherwise the build
    phases reported by a backend are logged at INFO (the bind logs each engine).
    """

    def __init__(self, total: int, stream: Optional[TextIO] = None) -> None:
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.t0 = time.perf_counter()
        self.k = 0
        self.name = ""
        self.ops = 0
        self._drawn = False

    def start(self, k: int, name: str, ops: int) -> None:
        self.k, self.name, self.ops = k, name, ops
        self._draw("")

    def phase(self, phase: str, step: int, total: int) -> None:
        """Callback for backends: a build phase advanced to ``step`` of ``total``."""
        if self.tty:
            self._draw(f"{phase} {step}/{total}" if total > 0 else phase)
        else:
            logger.info("%s: %s %d/%d", self.name, phase, step, total)

    def _draw(self, extra: str) -> None:
        if not self.tty or self.total == 0:
            return
        done = int(20 * self.k / self.total)
        bar = "#" * done + "." * (20 - done)
        line = (f"\r[mx_trt] [{bar}] engine {self.k + 1}/{self.total} {self.name} ({self.ops} ops) "
                f"{time.perf_counter() - self.t0:6.1f}s {extra}")
        self.stream.write(line[:160].ljust(100))
        self.stream.flush()
        self._drawn = True

    def done(self) -> None:
        if self._drawn:
            self.stream.write("\r" + " " * 100 + "\r")
            self.stream.flush()
