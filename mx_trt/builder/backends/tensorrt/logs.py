"""TensorRT's log, forwarded to :mod:`logging` and captured for error messages.

TensorRT keeps the first ``ILogger`` it is given for the whole process, so
there is one per Python module (``tensorrt``, ``tensorrt_rtx_bindings``),
made by :func:`logger_for`. While a :meth:`capture` block is active its lines
of WARNING or worse are collected, and the builder and runtime quote them
when a call fails.
"""
from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any, Dict, Iterator, List

logger = logging.getLogger(__name__)


class LogCapture:
    """TensorRT's log lines of WARNING or worse, collected while active.

    A ``quiet`` capture also logs them at DEBUG only: the caller reports the
    outcome itself (an expected failure, such as a stale cache file).

    Attributes:
        lines: ``"[E] message"``, ``"[W] message"``... in arrival order.
        quiet: Whether the captured lines are logged at DEBUG only.
    """

    def __init__(self, quiet: bool = False) -> None:
        self.lines: List[str] = []
        self.quiet = quiet

    def errors(self) -> List[str]:
        """The captured lines that are not warnings."""
        return [line for line in self.lines if not line.startswith("[W]")]


_loggers: Dict[str, Any] = {}
_loggers_lock = threading.Lock()


def logger_for(mod: Any) -> Any:
    """One ``ILogger`` per module for the whole process (TensorRT keeps the first logger it is given).

    It forwards to :mod:`logging` (``mx_trt.builder.backends.tensorrt.logs``; TensorRT's
    INFO and VERBOSE at DEBUG) and feeds the active ``capture(quiet=False)``
    blocks, whose lines go into error messages. Thread-safe.
    """
    key = mod.__name__
    with _loggers_lock:
        existing = _loggers.get(key)
        if existing is not None:
            return existing
        sev = mod.ILogger.Severity
        levels = {
            int(sev.INTERNAL_ERROR): (logging.ERROR, "[F]"),
            int(sev.ERROR): (logging.ERROR, "[E]"),
            int(sev.WARNING): (logging.WARNING, "[W]"),
            int(sev.INFO): (logging.DEBUG, "[I]"),
            int(sev.VERBOSE): (logging.DEBUG, "[V]"),
        }

        class _Forwarding(mod.ILogger):
            def __init__(self) -> None:
                mod.ILogger.__init__(self)
                self._captures: List[LogCapture] = []
                self._lock = threading.Lock()

            def log(self, severity: Any, msg: str) -> None:
                level, tag = levels.get(int(severity), (logging.INFO, "[?]"))
                with self._lock:
                    captures = list(self._captures)
                if level >= logging.WARNING:
                    for c in captures:
                        c.lines.append(f"{tag} {msg}")
                quiet = any(c.quiet for c in captures)
                logger.log(logging.DEBUG if quiet else level, "%s %s", mod.__name__, msg)

            @contextlib.contextmanager
            def capture(self, quiet: bool = False) -> Iterator[LogCapture]:
                c = LogCapture(quiet)
                with self._lock:
                    self._captures.append(c)
                try:
                    yield c
                finally:
                    with self._lock:
                        self._captures.remove(c)

        inst = _Forwarding()
        _loggers[key] = inst
        return inst
