"""Serving a checkpoint with Triton Inference Server: :func:`serve` (blocking) and :func:`running` (a context).

Both write a model repository into a temporary folder
(:func:`~mx_trt.serving.repository.write_python_model`), lay out the bundled
server (:func:`~mx_trt.serving.runtime.prepare`) and start ``tritonserver`` on
it as a child process. Triton provides the HTTP and gRPC inference protocols,
``/v2/health/live``, ``/v2/health/ready`` and the Prometheus metrics; every
instance of the model binds the checkpoint with the pass in its own stub
process.

SIGTERM and SIGINT are handed to the server, which stops taking requests,
finishes those in flight (up to ``exit_timeout_s``), and exits; :func:`serve`
then returns the server's status (0 after a clean drain).
"""
from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Dict, Iterator, Mapping, Optional, Sequence

from mx_trt.errors import ServeError
from mx_trt.serving.executors import TensorSpec
from mx_trt.serving.repository import write_python_model
from mx_trt.serving.runtime import prepare

logger = logging.getLogger(__name__)

#: Seconds to wait for the model to load (engines built, or loaded from the plan cache).
READY_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Endpoints:
    """Where a running server answers.

    Attributes:
        model: The model name.
        http: ``host:port`` of the HTTP/REST endpoint (``tritonclient.http``).
        grpc: ``host:port`` of the gRPC endpoint (``tritonclient.grpc``).
        metrics: URL of the Prometheus metrics.
        pid: The server's process id.
        repository: The model repository it serves.
    """

    model: str
    http: str
    grpc: str
    metrics: str
    pid: int
    repository: str


@dataclass
class ServeOptions:
    """How to serve: batching, instances, ports (0: a free one), and the model's name."""

    max_batch: int = 32
    max_queue_delay_us: int = 2000
    instances: int = 1
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    model_name: Optional[str] = None
    accelerate: bool = True
    allow_nonfinite: bool = False
    exit_timeout_s: int = 30
    #: Modules (``.py`` files or module names) that register the model's custom operators.
    imports: Sequence[str] = ()


def free_port() -> int:
    """A TCP port free on localhost now (the kernel's choice)."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ports(opts: ServeOptions) -> Dict[str, int]:
    ports = {"http": opts.http_port, "grpc": opts.grpc_port, "metrics": opts.metrics_port}
    taken = set()
    for k, p in ports.items():
        while p == 0 or p in taken:
            p = free_port()
        ports[k] = p
        taken.add(p)
    return ports


def _log_tail(path: str, n: int = 25) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


class TritonProcess:
    """A ``tritonserver`` child process serving one model repository.

    Args:
        repository: The model repository.
        model: The model to wait for.
        options: Ports and exit timeout.
        workdir: Where the backend folder is laid out.
        log_path: The server's output goes here (``None``: inherited).
    """

    def __init__(self, repository: str, model: str, options: ServeOptions, workdir: str,
                 log_path: Optional[str] = None) -> None:
        runtime = prepare(workdir)
        ports = _ports(options)
        self.model = model
        self.log_path = log_path
        cmd = runtime.command(repository, ports["http"], ports["grpc"], ports["metrics"], options.exit_timeout_s)
        out: Any = open(log_path, "ab") if log_path else None
        try:
            # A session of its own: a terminal's Ctrl-C reaches only this process, which hands the server one SIGTERM.
            self.proc = subprocess.Popen(cmd, env=runtime.env, stdout=out, stderr=subprocess.STDOUT if out else None,
                                         start_new_session=True)
        except OSError as exc:
            raise ServeError(f"cannot start {runtime.server}: {exc}") from exc
        finally:
            if out is not None:
                out.close()
        self.endpoints = Endpoints(model, f"localhost:{ports['http']}", f"localhost:{ports['grpc']}",
                                   f"http://localhost:{ports['metrics']}/metrics", self.proc.pid, repository)
        logger.info("tritonserver (pid %d) starting: HTTP %s, gRPC %s, metrics %s", self.proc.pid,
                    self.endpoints.http, self.endpoints.grpc, self.endpoints.metrics)

    def _failure(self, what: str) -> ServeError:
        tail = _log_tail(self.log_path) if self.log_path else ""
        return ServeError(f"{what}" + (f"; the server's last lines:\n{tail}" if tail else ""))

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Wait until ``/v2/models/MODEL/ready`` answers 200.

        Raises:
            ServeError: the server exited, or the model is not ready in time.
        """
        url = f"http://{self.endpoints.http}/v2/models/{self.model}/ready"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise self._failure(f"tritonserver exited with status {self.proc.returncode} before the model "
                                    f"{self.model!r} was ready")
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if resp.status == 200:
                        logger.info("model %s ready at %s", self.model, self.endpoints.http)
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        raise self._failure(f"the model {self.model!r} was not ready after {timeout_s:.0f} s")

    def stop(self, timeout_s: float = 60.0) -> int:
        """SIGTERM (the server drains in-flight requests), then wait; SIGKILL after ``timeout_s``. Returns its status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                logger.warning("tritonserver (pid %d) did not stop in %.0f s: killed", self.proc.pid, timeout_s)
                self.proc.kill()
                self.proc.wait()
        return int(self.proc.returncode)


def _checkpoint(prefix: str, epoch: Optional[int]) -> Any:
    import mxnet as mx

    if epoch is None:
        raise ServeError("serving a checkpoint needs its epoch")
    try:
        return mx.model.load_checkpoint(prefix, epoch)
    except Exception as exc:  # MXNet's errors for a missing or damaged file
        raise ServeError(f"cannot load the checkpoint {prefix} epoch {epoch}: {' '.join(str(exc).split())[:300]}") \
            from None


def input_specs(shapes: Mapping[str, Sequence[int]], dtypes: Optional[Mapping[str, str]] = None) -> list:
    """:class:`TensorSpec` per input from ``--shape`` style shapes (dimension 0, the batch, dropped) and dtypes."""
    import numpy as np

    dtypes = dtypes or {}
    return [TensorSpec(k, np.dtype(dtypes.get(k, "float32")).name, tuple(int(d) for d in v[1:]))
            for k, v in shapes.items()]


@contextlib.contextmanager
def running(prefix: str, epoch: Optional[int], shapes: Mapping[str, Sequence[int]],
            dtypes: Optional[Mapping[str, str]] = None, options: Optional[ServeOptions] = None,
            ready_timeout_s: float = READY_TIMEOUT_S) -> Iterator[Endpoints]:
    """Serve a checkpoint while the block runs; yields the :class:`Endpoints` once the model is ready.

    Ports left at 0 get free ones. The server's output goes to ``server.log``
    in a temporary folder (its last lines are in any :class:`ServeError`); the
    folder goes when the block ends, after the server has drained and stopped.

    Args:
        prefix / epoch: The checkpoint (``PREFIX-symbol.json``, ``PREFIX-EPOCH.params``).
        shapes: Data input shapes; dimension 0 (the batch) is ignored.
        dtypes: Input dtypes by name (default float32), e.g. ``{"token_ids": "int32"}``.
        options: See :class:`ServeOptions` (default: ports chosen free).

    Raises:
        ServeError: the model cannot be written, the server cannot start, or the model does not load.
    """
    opts = options or ServeOptions(http_port=0, grpc_port=0, metrics_port=0)
    workdir = tempfile.mkdtemp(prefix="mx_trt_serve_")
    try:
        server = _start(prefix, epoch, shapes, dtypes, opts, workdir, os.path.join(workdir, "server.log"))
        try:
            server.wait_ready(ready_timeout_s)
            yield server.endpoints
        finally:
            server.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _start(prefix: str, epoch: Optional[int], shapes: Mapping[str, Sequence[int]],
           dtypes: Optional[Mapping[str, str]], opts: ServeOptions, workdir: str,
           log_path: Optional[str]) -> TritonProcess:
    symbol, arg_params, aux_params = _checkpoint(prefix, epoch)
    name = opts.model_name or os.path.basename(os.path.abspath(prefix))
    repo = os.path.join(workdir, "models")
    write_python_model(repo, name, symbol, arg_params, aux_params, input_specs(shapes, dtypes), opts.max_batch,
                       opts.max_queue_delay_us, opts.instances, accelerate=opts.accelerate,
                       allow_nonfinite=opts.allow_nonfinite, params_file=f"{prefix}-{epoch:04d}.params",
                       imports=list(opts.imports))
    return TritonProcess(repo, name, opts, workdir, log_path)


def serve(prefix: str, epoch: Optional[int], shapes: Mapping[str, Sequence[int]],
          dtypes: Optional[Mapping[str, str]] = None, options: Optional[ServeOptions] = None) -> int:
    """Serve a checkpoint until SIGTERM or SIGINT; returns the server's exit status (0 after a clean drain).

    The signal is handed to the server, which finishes the requests in flight
    and exits. See :func:`running` for the arguments.

    Raises:
        ServeError: the model cannot be written, or the server cannot start or load it.
    """
    opts = options or ServeOptions()
    workdir = tempfile.mkdtemp(prefix="mx_trt_serve_")
    stopping = []

    def hand_over(signum: int, _frame: Any) -> None:
        stopping.append(signum)
        logger.info("signal %d: draining the requests in flight, then stopping", signum)
        if server is not None and server.proc.poll() is None:
            server.proc.send_signal(signal.SIGTERM)

    server: Optional[TritonProcess] = None
    old = {s: signal.signal(s, hand_over) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        server = _start(prefix, epoch, shapes, dtypes, opts, workdir, None)
        if not stopping:
            try:
                server.wait_ready()
            except ServeError:
                if not stopping:  # a signal during the load: the server is stopping, not failing
                    raise
            else:
                e = server.endpoints
                print(f"serving {e.model}: HTTP {e.http}, gRPC {e.grpc}, metrics {e.metrics} "
                      "(SIGTERM or Ctrl-C stops)", flush=True)
        if stopping and server.proc.poll() is None:
            server.proc.send_signal(signal.SIGTERM)
        return int(server.proc.wait())
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if server is not None and server.proc.poll() is None:
            server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
