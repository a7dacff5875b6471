"""The ``tritonserver`` child process: started tied to its parent, probed for readiness, reloaded, stopped.

Triton runs with ``--model-control-mode=explicit`` and the one model loaded
at start, so that a model whose instance died can be loaded again
(:meth:`TritonProcess.reload`). The model-repository API that allows it is
restricted on HTTP and gRPC to a header whose value is a random key that only
this process knows. Triton's own HTTP listens on a private loopback port (the
user's HTTP port belongs to :class:`~mx_trt.serving.front.HttpFront`); gRPC
and metrics listen on the user's host.
"""
from __future__ import annotations

import logging
import os
import secrets
import signal
import subprocess
import time
import urllib.error
import urllib.request
from typing import Any, Callable, Dict, Optional

from mx_trt.errors import ServeError
from mx_trt.serving.lifecycle import die_with_parent
from mx_trt.serving.runtime import prepare

logger = logging.getLogger(__name__)

#: The header that opens Triton's model-repository API.
ADMIN_HEADER = "mx-trt-admin"


def log_tail(path: Optional[str], n: int = 25) -> str:
    """The last ``n`` lines of a log file ('' if none)."""
    if not path:
        return ""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


class TritonProcess:
    """A ``tritonserver`` child process serving one model of a repository.

    Args:
        repository: The model repository.
        model: The model to load and wait for.
        host: The IPv4 address gRPC and metrics bind.
        ports: ``{"http": private loopback port, "grpc": ..., "metrics": ...}``.
        exit_timeout_s: Triton's ``--exit-timeout-secs`` (the grace period).
        workdir: Where the backend folder is laid out.
        log_path: The server's output goes here (``None``: inherited).

    Raises:
        ServeError: the runtime cannot be laid out or the server cannot start.
    """

    def __init__(self, repository: str, model: str, host: str, ports: Dict[str, int], exit_timeout_s: int,
                 workdir: str, log_path: Optional[str] = None) -> None:
        runtime = prepare(workdir)
        self.model = model
        self.repository = repository
        self.log_path = log_path
        self.http = f"127.0.0.1:{ports['http']}"
        self._touched = 0.0
        self._key = secrets.token_hex(16)
        extra = ["--http-address=127.0.0.1", f"--grpc-address={host}", f"--metrics-address={host}",
                 "--model-control-mode=explicit", f"--load-model={model}",
                 f"--http-restricted-api=model-repository:{ADMIN_HEADER}={self._key}",
                 f"--grpc-restricted-protocol=model-repository:{ADMIN_HEADER}={self._key}"]
        cmd = runtime.command(repository, ports["http"], ports["grpc"], ports["metrics"], exit_timeout_s, extra)
        out: Any = open(log_path, "ab") if log_path else None
        try:
            # A session of its own: a terminal's Ctrl-C reaches only this process, which hands the server one
            # SIGTERM. PR_SET_PDEATHSIG: if this process dies, even by SIGKILL, the server gets SIGTERM.
            self.proc = subprocess.Popen(die_with_parent(cmd, os.getpid()), env=runtime.env, stdout=out,
                                         stderr=subprocess.STDOUT if out else None, start_new_session=True)
        except OSError as exc:
            raise ServeError(f"cannot start {runtime.server}: {exc}") from exc
        finally:
            if out is not None:
                out.close()
        self.pid = self.proc.pid
        logger.info("tritonserver (pid %d) starting: HTTP (private) %s, gRPC %s:%d, metrics %s:%d", self.pid,
                    self.http, host, ports["grpc"], host, ports["metrics"])

    def failure(self, what: str) -> ServeError:
        """A :class:`ServeError` for ``what``, with the server's last lines when they were logged to a file."""
        tail = log_tail(self.log_path)
        return ServeError(f"{what}" + (f"; the server's last lines:\n{tail}" if tail else ""))

    def _get(self, path: str, timeout_s: float) -> int:
        try:
            with urllib.request.urlopen(f"http://{self.http}{path}", timeout=timeout_s) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except (urllib.error.URLError, OSError):
            return 0

    def wait_ready(self, timeout_s: float, stopping: Callable[[], bool] = lambda: False) -> None:
        """Wait until the model answers ready on Triton's own HTTP port.

        Raises:
            ServeError: the server exited, or the model is not ready in time.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not stopping():
            if self.proc.poll() is not None:
                raise self.failure(f"tritonserver exited with status {self.proc.returncode} before the model "
                                   f"{self.model!r} was ready")
            if self._get(f"/v2/models/{self.model}/ready", 2.0) == 200:
                logger.info("model %s ready", self.model)
                return
            time.sleep(0.2)
        if not stopping():
            raise self.failure(f"the model {self.model!r} was not ready after {timeout_s:.0f} s")

    def reload(self, timeout_s: float) -> None:
        """Load the model again (new instances replace the old ones once ready).

        Triton replaces the instances only of a model whose files changed
        since it was loaded (for an unchanged ``config.pbtxt`` it keeps the
        instances it has, dead ones included): the version folder's
        ``model.py`` gets a newer modification time first (a second later than
        the last one, whatever the clock's resolution).

        Raises:
            ServeError: Triton refused or failed the load.
        """
        marker = os.path.join(self.repository, self.model, "1", "model.py")
        self._touched = max(time.time(), self._touched + 1.0)
        try:
            os.utime(marker, (self._touched, self._touched))
        except OSError as exc:
            raise ServeError(f"reloading {self.model!r}: cannot touch {marker}: {exc}") from None
        req = urllib.request.Request(f"http://{self.http}/v2/repository/models/{self.model}/load", data=b"{}",
                                     headers={ADMIN_HEADER: self._key, "Content-Type": "application/json"},
                                     method="POST")
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                if resp.status == 200:
                    return
                raise ServeError(f"reloading {self.model!r}: HTTP {resp.status}")
        except urllib.error.HTTPError as exc:
            raise ServeError(f"reloading {self.model!r}: HTTP {exc.code}: {exc.read()[:300]!r}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise ServeError(f"reloading {self.model!r}: {exc}") from None

    def terminate(self) -> None:
        """SIGTERM: Triton stops taking requests, finishes those in flight, unloads and exits."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def wait(self, timeout_s: float) -> Optional[int]:
        """The exit status, or ``None`` if the server still runs after ``timeout_s``."""
        try:
            return int(self.proc.wait(timeout=timeout_s))
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> int:
        """SIGKILL the server (and its process group: the stubs); returns its status."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                self.proc.kill()
        return int(self.proc.wait())

    def kill_group(self) -> None:
        """SIGKILL whatever is left of the server's process group (its stubs) once the server has exited."""
        if self.proc.poll() is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass  # nothing left

    def stop(self, timeout_s: float = 60.0) -> int:
        """SIGTERM, wait up to ``timeout_s``, then SIGKILL; the exit status."""
        self.terminate()
        status = self.wait(timeout_s)
        if status is None:
            logger.warning("tritonserver (pid %d) did not stop in %.0f s: killed", self.pid, timeout_s)
            return self.kill()
        return status
