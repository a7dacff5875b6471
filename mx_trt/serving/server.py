"""Serving a checkpoint with Triton Inference Server: :func:`serve` (blocking) and :func:`running` (a context).

Both write a model repository into a temporary folder
(:func:`~mx_trt.serving.repository.write_python_model`), lay out the bundled
server (:func:`~mx_trt.serving.runtime.prepare`) and start ``tritonserver`` on
it as a child process tied to this one (:mod:`mx_trt.serving.process`).
Triton provides the gRPC inference protocol and the Prometheus metrics;
HTTP reaches it through :class:`~mx_trt.serving.front.HttpFront`, which
checks every inference request before Triton allocates anything for it and
owns readiness. Every instance of the model binds the checkpoint with the pass
in its own stub process; :class:`~mx_trt.serving.supervisor.Supervisor`
restarts an instance that died.

Before starting, the ports are checked free on the host (:func:`~mx_trt.serving.lifecycle.check_ports_free`)
and folders left by servers that died are removed (:func:`~mx_trt.serving.lifecycle.sweep_orphans`).
SIGTERM and SIGINT drain: readiness false at once, idle HTTP connections
closed, requests in flight finished, and the server stopped within the grace
period; :func:`serve` then returns the server's status (0 after a clean drain).
"""
from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import signal
import socket
import tempfile
from dataclasses import dataclass
from typing import Any, Callable, Iterator, List, Mapping, Optional, Sequence

from mx_trt.errors import ServeError
from mx_trt.serving.admission import InputRule
from mx_trt.serving.executors import TensorSpec
from mx_trt.serving.front import HttpFront
from mx_trt.serving.lifecycle import (WORKDIR_PREFIX, check_ports_free, claim_workdir, port_error, resolve_host,
                                      sweep_orphans)
from mx_trt.serving.process import TritonProcess
from mx_trt.serving.repository import write_python_model
from mx_trt.serving.supervisor import Supervisor, describe_status

logger = logging.getLogger(__name__)

#: Seconds to wait for the model to load (engines built, or loaded from the plan cache).
READY_TIMEOUT_S = 600.0
#: The default grace period of a shutdown, in seconds.
GRACE_PERIOD_S = 10.0


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
    """How to serve: batching, instances, where to listen (ports 0: a free one), the model's name, the grace period.

    ``host`` is the address HTTP, gRPC and metrics listen on (default the
    loopback; ``0.0.0.0``: every interface). ``grace_period_s`` bounds a
    shutdown: requests in flight get that long to finish.
    """

    max_batch: int = 32
    max_queue_delay_us: int = 2000
    instances: int = 1
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    host: str = "127.0.0.1"
    model_name: Optional[str] = None
    accelerate: bool = True
    allow_nonfinite: bool = False
    grace_period_s: float = GRACE_PERIOD_S
    #: Modules (``.py`` files or module names) that register the model's custom operators.
    imports: Sequence[str] = ()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now (the kernel's choice)."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _pick(port: int, host: str, taken: List[int]) -> int:
    while port == 0 or port in taken:
        port = free_port(host)
    taken.append(port)
    return port


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
    Enter it from a thread that outlives the block (the server is tied to it).

    Args:
        prefix / epoch: The checkpoint (``PREFIX-symbol.json``, ``PREFIX-EPOCH.params``).
        shapes: Data input shapes; dimension 0 (the batch) is ignored.
        dtypes: Input dtypes by name (default float32), e.g. ``{"token_ids": "int32"}``.
        options: See :class:`ServeOptions` (default: ports chosen free).

    Raises:
        ServeError: the model cannot be written, a port is in use, the server cannot start, or the model does
            not load.
    """
    opts = options or ServeOptions(http_port=0, grpc_port=0, metrics_port=0)
    workdir = _workdir()
    try:
        sup = _start(prefix, epoch, shapes, dtypes, opts, workdir, os.path.join(workdir, "server.log"),
                     ready_timeout_s)
        try:
            sup.wait_ready(ready_timeout_s)
            yield _endpoints(sup, opts)
        finally:
            sup.shutdown()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _workdir() -> str:
    sweep_orphans()
    workdir = tempfile.mkdtemp(prefix=WORKDIR_PREFIX)
    try:
        claim_workdir(workdir)
    except OSError as exc:
        shutil.rmtree(workdir, ignore_errors=True)
        raise ServeError(f"cannot write into the temporary folder {workdir}: {exc}") from None
    return workdir


def _endpoints(sup: Supervisor, opts: ServeOptions) -> Endpoints:
    host = sup.host
    return Endpoints(sup.triton.model, f"{host}:{sup.front.port}", f"{host}:{sup.ports['grpc']}",
                     f"http://{host}:{sup.ports['metrics']}/metrics", sup.triton.pid, sup.repository)


def _start(prefix: str, epoch: Optional[int], shapes: Mapping[str, Sequence[int]],
           dtypes: Optional[Mapping[str, str]], opts: ServeOptions, workdir: str,
           log_path: Optional[str], ready_timeout_s: float) -> Supervisor:
    host = resolve_host(opts.host)
    taken: List[int] = []
    ports = {"http": _pick(opts.http_port, host, taken), "grpc": _pick(opts.grpc_port, host, taken),
             "metrics": _pick(opts.metrics_port, host, taken)}
    check_ports_free(host, {"grpc": ports["grpc"], "metrics": ports["metrics"]})
    symbol, arg_params, aux_params = _checkpoint(prefix, epoch)
    name = opts.model_name or os.path.basename(os.path.abspath(prefix))
    repo = os.path.join(workdir, "models")
    specs = input_specs(shapes, dtypes)
    write_python_model(repo, name, symbol, arg_params, aux_params, specs, opts.max_batch,
                       opts.max_queue_delay_us, opts.instances, accelerate=opts.accelerate,
                       allow_nonfinite=opts.allow_nonfinite, params_file=f"{prefix}-{epoch:04d}.params",
                       imports=list(opts.imports))
    private = {"http": _pick(0, "127.0.0.1", taken), "grpc": ports["grpc"], "metrics": ports["metrics"]}
    try:
        front = HttpFront(host, ports["http"], ("127.0.0.1", private["http"]), name,
                          [InputRule.of(t.name, t.dtype, t.dims) for t in specs], opts.max_batch)
    except OSError as exc:
        raise ServeError(port_error("http", host, ports["http"], exc)) from None
    try:
        triton = TritonProcess(repo, name, host, private, max(1, math.ceil(opts.grace_period_s)), workdir, log_path)
        claim_workdir(workdir, triton.pid)
    except (ServeError, OSError):
        front.close()
        raise
    front.start()
    return Supervisor(triton, front, opts.grace_period_s, ready_timeout_s, host, ports, repo)


def serve(prefix: str, epoch: Optional[int], shapes: Mapping[str, Sequence[int]],
          dtypes: Optional[Mapping[str, str]] = None, options: Optional[ServeOptions] = None,
          banner: Optional[Callable[[Endpoints], None]] = None) -> int:
    """Serve a checkpoint until SIGTERM or SIGINT; returns the server's exit status (0 after a clean drain).

    On the signal, readiness turns false at once, idle HTTP connections are
    closed, the requests in flight finish, and the server exits within the
    grace period (killed a little after it otherwise). See :func:`running` for
    the arguments; ``banner(endpoints)`` is called once the model is ready.

    Raises:
        ServeError: the model cannot be written, a port is in use, or the server cannot start or load it.
    """
    opts = options or ServeOptions()
    stopping: List[int] = []

    def note(signum: int, _frame: Any) -> None:
        # Readiness turns false here, with no lock taken; the waits below see ``stopping`` within 0.1 s and
        # drain from the main flow.
        stopping.append(signum)
        if sup is not None:
            sup.front.refuse_now()

    sup: Optional[Supervisor] = None
    old = {s: signal.signal(s, note) for s in (signal.SIGTERM, signal.SIGINT)}
    workdir = _workdir()
    try:
        sup = _start(prefix, epoch, shapes, dtypes, opts, workdir, None, READY_TIMEOUT_S)
        try:
            sup.wait_ready(READY_TIMEOUT_S, stopping=lambda: bool(stopping))
        except ServeError:
            if not stopping:  # a signal during the load: the server is stopping, not failing
                raise
        if not stopping and banner is not None:
            banner(_endpoints(sup, opts))
        while not stopping and sup.triton.proc.poll() is None:
            sup.triton.wait(0.1)
        if not stopping:  # the server ended on its own: a failure, whatever its status
            logger.error("tritonserver stopped serving on its own (status %s)",
                         describe_status(int(sup.triton.proc.returncode)))
            sup.shutdown()
            return 1
        logger.info("signal %d: draining (grace period %.0f s)", stopping[0], opts.grace_period_s)
        return sup.shutdown()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if sup is not None:
            sup.shutdown()
        shutil.rmtree(workdir, ignore_errors=True)
