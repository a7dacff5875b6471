"""One served model's processes kept healthy, and stopped gracefully: :class:`Supervisor`.

It holds the ``tritonserver`` child (:class:`~mx_trt.serving.process.TritonProcess`)
and the HTTP front (:class:`~mx_trt.serving.front.HttpFront`), and runs a
monitor thread once the model is ready:

- An instance whose stub process died (a native crash or abort in user code,
  the OOM killer) leaves Triton answering ``Stub process ... is not healthy``
  to every request it routes there while its readiness stays 200. The monitor
  sees the dead stub in ``/proc`` within :data:`POLL_S`, turns readiness false
  (HTTP 503), loads the model again (new instances replace the old), and turns
  readiness true when they are ready.
- :meth:`Supervisor.shutdown` drains: readiness false and idle HTTP
  connections closed at once, SIGTERM to Triton (which finishes the requests in
  flight, HTTP and gRPC), and SIGKILL if it has not exited a little after the
  grace period (its ``--exit-timeout-secs``).
"""
from __future__ import annotations

import logging
import signal
import threading
import time
from typing import Callable, Dict, Optional, Set

from mx_trt.errors import ServeError
from mx_trt.serving.front import HttpFront
from mx_trt.serving.lifecycle import stub_processes
from mx_trt.serving.process import TritonProcess

logger = logging.getLogger(__name__)

#: Seconds between two looks at the stubs.
POLL_S = 0.5
#: Seconds between two attempts to reload a model whose reload failed.
RETRY_S = 5.0
#: Seconds past the grace period before a server that has not exited is killed.
KILL_MARGIN_S = 2.0


def describe_status(status: int) -> str:
    """An exit status as a reader wants it: ``1``, or ``-6 (killed by SIGABRT)``."""
    if status < 0:
        try:
            return f"{status} (killed by {signal.Signals(-status).name})"
        except ValueError:
            return f"{status} (killed by signal {-status})"
    return str(status)


class Supervisor:
    """A running served model: Triton, its HTTP front, and the monitor (see the module's docstring).

    Args:
        triton: The started server.
        front: The started HTTP front.
        grace_s: The grace period of a shutdown, in seconds.
        ready_timeout_s: How long a (re)load may take.
        host / ports / repository: Where it listens (``{"http", "grpc", "metrics"}``) and what it serves.
    """

    def __init__(self, triton: TritonProcess, front: HttpFront, grace_s: float, ready_timeout_s: float,
                 host: str, ports: Dict[str, int], repository: str) -> None:
        self.triton = triton
        self.front = front
        self.host = host
        self.ports = dict(ports, http=front.port)
        self.repository = repository
        self.grace_s = float(grace_s)
        self.ready_timeout_s = ready_timeout_s
        self.restarts = 0
        self._ignored: Set[int] = set()
        self._stop = threading.Event()
        self._monitor: Optional[threading.Thread] = None
        self._stopping_since: Optional[float] = None
        self._status: Optional[int] = None

    def wait_ready(self, timeout_s: float, stopping: Callable[[], bool] = lambda: False) -> None:
        """Wait for the model, then open readiness and start the monitor.

        Raises:
            ServeError: the server exited or the model did not load in time.
        """
        self.triton.wait_ready(timeout_s, stopping)
        if stopping():
            return
        self.front.set_ready(True)
        self._monitor = threading.Thread(target=self._watch, name="mx_trt-serve-monitor", daemon=True)
        self._monitor.start()

    def _watch(self) -> None:
        pending_since: Optional[float] = None
        while not self._stop.wait(POLL_S):
            if self.triton.proc.poll() is not None:
                self.front.set_ready(False, f"the inference server exited with status {self.triton.proc.returncode}")
                return
            stubs = stub_processes(self.triton.pid)
            dead = sorted(p for p, alive in stubs.items() if not alive and p not in self._ignored)
            if dead and pending_since is None:
                logger.error("model instance process(es) %s died; the model is not ready until it is loaded again",
                             ", ".join(map(str, dead)))
                self.front.set_ready(False, "a model instance died and is being restarted")
                pending_since = 0.0
            if pending_since is not None and time.monotonic() - pending_since >= RETRY_S:
                self._ignored |= set(stubs)
                try:
                    self.triton.reload(self.ready_timeout_s)
                except ServeError as exc:
                    logger.error("%s; retrying in %.0f s", exc, RETRY_S)
                    pending_since = time.monotonic()
                    continue
                self.restarts += 1
                pending_since = None
                if not self._stop.is_set():
                    self.front.set_ready(True)
                logger.warning("model %s loaded again after an instance died (restart %d)", self.triton.model,
                               self.restarts)

    def begin_shutdown(self) -> None:
        """Readiness false and idle connections closed now; SIGTERM to Triton. Returns at once; idempotent."""
        if self._stopping_since is not None or self.triton.proc.poll() is not None:
            self._stop.set()
            self.front.refuse_now()
            return
        self._stopping_since = time.monotonic()
        self._stop.set()
        self.front.drain()
        # Triton counts open HTTP connections when it stops, and looks again only a second later: the idle ones
        # (and their connections to Triton) are closed first.
        self.front.wait_closed(0.5)
        self.triton.terminate()

    def wait_exit(self) -> int:
        """Wait for Triton to exit (killed a little after the grace period once a shutdown began); its status."""
        if self._status is not None:
            return self._status
        while True:
            status = self.triton.wait(0.1)
            if status is not None:
                self.triton.kill_group()  # stubs of a server that died must not outlive it
                break
            if self._stopping_since is not None and \
                    time.monotonic() - self._stopping_since > self.grace_s + KILL_MARGIN_S:
                logger.error("tritonserver (pid %d) had not exited %.0f s after SIGTERM: killed", self.triton.pid,
                             self.grace_s + KILL_MARGIN_S)
                self.triton.kill()
                status = 1
                break
        if status != 0 and self._stopping_since is not None:
            logger.error("tritonserver exited with status %s%s", describe_status(status),
                         f" ({self.restarts} instance restart(s) before)" if self.restarts else "")
        self._status = status
        return status

    def shutdown(self) -> int:
        """Drain and stop (see :meth:`begin_shutdown`), close the front; the server's exit status."""
        self.begin_shutdown()
        try:
            return self.wait_exit()
        finally:
            self.front.close()
