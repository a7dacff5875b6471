"""Progress of engine builds: a one-line bar on a terminal, INFO log lines otherwise."""
from __future__ import annotations

import logging
import sys
import time
from typing import Optional, TextIO

logger = logging.getLogger(__name__)


def bar(done: int, total: int, width: int = 20) -> str:
    """``#####...............``: ``done`` of ``total`` (clamped) in ``width`` characters."""
    filled = max(0, min(width, int(width * done / total))) if total > 0 else 0
    return "#" * filled + "." * (width - filled)


class TerminalLine:
    """One status line redrawn in place on ``stream`` (stderr), only when it is a terminal and ``enabled``."""

    def __init__(self, stream: Optional[TextIO] = None, enabled: bool = True, width: int = 100) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = enabled and bool(getattr(self.stream, "isatty", lambda: False)())
        self.width = width
        self.drawn = False

    def draw(self, text: str) -> None:
        if not self.tty:
            return
        self.stream.write("\r" + text[:160].ljust(self.width))
        self.stream.flush()
        self.drawn = True

    def clear(self) -> None:
        if self.drawn:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.drawn = False


class BuildProgress:
    """Shows ``engine k/n  name (ops)  elapsed  [phase]`` while engines build.

    Draws on ``stream`` (stderr) only when it is a terminal; otherwise the build
    phases reported by a backend are logged at INFO (the bind logs each engine).
    """

    def __init__(self, total: int, stream: Optional[TextIO] = None) -> None:
        self.total = total
        self.line = TerminalLine(stream)
        self.tty = self.line.tty
        self.t0 = time.perf_counter()
        self.k = 0
        self.name = ""
        self.ops = 0

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
        self.line.draw(f"[mx_trt] [{bar(self.k, self.total)}] engine {self.k + 1}/{self.total} {self.name} "
                       f"({self.ops} ops) {time.perf_counter() - self.t0:6.1f}s {extra}")

    def done(self) -> None:
        self.line.clear()
