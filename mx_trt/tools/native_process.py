"""MXNet in a process of its own, with its own OpenMP thread count, natively or accelerated, timed on request.

MXNet fixes its OpenMP thread count when it is imported (``OMP_NUM_THREADS``;
setting it later through ``MXSetNumOMPThreads`` did not change oneDNN's speed),
so native MXNet with another thread count than this process's needs another
process. :class:`NativeProcess` starts one, binds the model there, and runs
forwards when asked, so that a benchmark interleaves it with the executors of
its own process: while it runs, the caller waits on its answer and uses no CPU.

With ``accelerated=True`` the worker binds with the pass on
(``MXNET_USE_TENSORRT=1``, weights through ``shared_buffer``), so the operators
left native run on the worker's threads and the measured engine rule compares
its engines with MXNet at that thread count: the accelerated side of an
equal-threads comparison, as a user who sets ``OMP_NUM_THREADS`` would run it.

The worker exits when asked, when its standard input closes (the caller died),
or after :data:`IDLE_SECONDS` without a request.

Protocol (one line each way): the worker first writes ``ready`` and a JSON
object (``engines``: the accelerated bind's engine count, ``backends``: their
backends); then the caller writes ``RUNS WARMUP SETTLE_MS``, the worker answers a JSON list
of ``RUNS`` latencies in ms (after ``WARMUP`` untimed forwards, and more until they took
``SETTLE_MS``: :func:`~mx_trt.tools.cli.timing.measure`); ``stats`` asks for a JSON object (``served``: each
side's share of the accelerated executor's forwards, as its run-time check chose them,
:func:`mx_trt.runtime.twin.served_shares`; ``null`` without one); ``warm LIMIT_S`` runs untimed forwards until the
accelerated executor's run-time check has probed every side once (at most ``LIMIT_S`` seconds) and answers
``{"forwards": N, "seconds": S}``; ``quit`` ends it.
"""
from __future__ import annotations

import json
import logging
import os
import select
import subprocess
import sys
import tempfile
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from mx_trt.builder.cpus import engine_threads
from mx_trt.frontends.contrib import bind_info
from mx_trt.runtime.twin import served_shares
from mx_trt.tools.cli.timing import CHECK_WARMUP_S, forward_fn, measure, warm_check
from mx_trt.settings import child_environment

logger = logging.getLogger(__name__)

#: The worker ends after this long without a request (a caller that died closes its standard input first). A
#: caller may bind other executors of a heavy model between two requests: FCN ResNet-50 at batch 8 and 480x480
#: took over ten minutes for the benchmark's, and a worker that had ended at 600 s failed its run.
IDLE_SECONDS = 3 * 3600.0


def save_model(folder: str, symbol: Any, params: Mapping[str, Any], shapes: Mapping[str, Sequence[int]],
               inputs: Mapping[str, np.ndarray], type_dict: Optional[Mapping[str, Any]] = None,
               accelerated: bool = False) -> str:
    """Write what the worker binds into ``folder``; returns the path of its spec file."""
    import mxnet as mx

    symbol.save(os.path.join(folder, "model-symbol.json"))
    aux = set(symbol.list_auxiliary_states())
    nd = {(f"aux:{k}" if k in aux else f"arg:{k}"): (v if isinstance(v, mx.nd.NDArray) else mx.nd.array(v))
          for k, v in params.items()}
    mx.nd.save(os.path.join(folder, "model.params"), nd)
    np.savez(os.path.join(folder, "inputs.npz"), **{k: np.asarray(v) for k, v in inputs.items()})
    spec = {"shapes": {k: list(v) for k, v in shapes.items()},
            "type_dict": {k: np.dtype(v).name for k, v in (type_dict or {}).items()}, "accelerated": accelerated}
    path = os.path.join(folder, "spec.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(spec, f)
    return path


class NativeProcess:
    """A worker process running MXNet with ``threads`` OpenMP threads; a context manager.

    Args:
        symbol / params / shapes / inputs / type_dict: The model, its weights (args and aux
            by name), its input shapes, the input values and the type dict of the bind.
        threads: ``OMP_NUM_THREADS`` of the worker; ``None``: the CPUs this process may use.
        accelerated: Bind with the pass on (else natively). The worker inherits this
            process's environment otherwise (plan cache, engine rule, backend).
        cache_dir: The worker's plan cache folder (``None``: as in this process's environment).
        env: More of the worker's environment (``None`` removes a variable): the settings of a bind that
            were given other than by the environment (``mxtrt bench --precision``), for instance.

    Attributes:
        engines / backends: The accelerated bind's engine count and their backends (0 and
            ``[]`` natively, or when every subgraph stayed native).

    Raises:
        RuntimeError: the worker could not bind the model (its error output is quoted).
    """

    def __init__(self, symbol: Any, params: Mapping[str, Any], shapes: Mapping[str, Sequence[int]],
                 inputs: Mapping[str, np.ndarray], type_dict: Optional[Mapping[str, Any]] = None,
                 threads: Optional[int] = None, accelerated: bool = False, cache_dir: Optional[str] = None,
                 env: Optional[Mapping[str, Optional[str]]] = None) -> None:
        self.threads = threads if threads is not None else engine_threads()
        self.accelerated = accelerated
        self.engines: int = 0
        self.backends: List[str] = []
        # Named as make_work_dir names its folders (the pid first): swept once this process is gone.
        self._dir = tempfile.TemporaryDirectory(prefix=f"mx_trt_native_{os.getpid()}_")
        spec = save_model(self._dir.name, symbol, params, shapes, inputs, type_dict, accelerated)
        overrides: Dict[str, Optional[str]] = {**(env or {}), "OMP_NUM_THREADS": str(self.threads),
                                               "MKL_NUM_THREADS": str(self.threads),
                                               "MXNET_USE_TENSORRT": "1" if accelerated else "0", "MX_TRT_AUTOLOAD": "0"}
        if cache_dir is not None:
            overrides["MXNET_TENSORRT_CACHE_DIR"] = cache_dir
        child = child_environment(overrides)
        # The worker imports this very copy of mx_trt (a checkout or the installed one).
        here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        child["PYTHONPATH"] = os.pathsep.join([here] + [p for p in [child.get("PYTHONPATH", "")] if p])
        self._err = open(os.path.join(self._dir.name, "stderr.txt"), "w+", encoding="utf-8", errors="replace")
        self.proc = subprocess.Popen([sys.executable, "-m", "mx_trt.tools.native_process", spec], env=child,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err, text=True)
        line = self._read()
        while line and not line.startswith("ready"):  # anything a library printed first
            line = self._read()
        if not line.startswith("ready"):
            errors = self._errors()
            self.close()
            kind = "accelerated" if accelerated else "native"
            raise RuntimeError(f"{kind} MXNet with {self.threads} threads could not bind the model: {errors}")
        about = json.loads(line[len("ready"):] or "{}")
        self.engines, self.backends = int(about.get("engines", 0)), list(about.get("backends", []))

    def _errors(self) -> str:
        self._err.flush()
        self._err.seek(0)
        lines = [ln for ln in self._err.read().splitlines() if ln.strip() and "Subgraph backend" not in ln]
        return " / ".join(lines[-3:]) or "no error output"

    def _read(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline()

    def run(self, runs: int, warmup: int = 0, settle_s: float = 0.0) -> List[float]:
        """Latencies (ms) of ``runs`` forwards in the worker, after ``warmup`` untimed ones
        (and more, until they took ``settle_s``: :func:`~mx_trt.tools.cli.timing.measure`).

        Raises:
            RuntimeError: the worker died.
        """
        return [float(x) for x in self._ask(f"{runs} {warmup} {settle_s * 1e3:.3f}")]

    def served_shares(self) -> Optional[Dict[str, float]]:
        """Each side's share of the worker's forwards (its executor's run-time check:
        :func:`~mx_trt.runtime.twin.served_shares`), or ``None``: no check.

        Raises:
            RuntimeError: the worker died.
        """
        shares = self._ask("stats").get("served")
        return None if shares is None else {str(k): float(v) for k, v in shares.items()}

    def warm_check(self, limit_s: float = CHECK_WARMUP_S) -> Tuple[int, float]:
        """Untimed forwards in the worker until its executor's run-time check is warm
        (:func:`~mx_trt.tools.cli.timing.warm_check`): (forwards, seconds); none natively.

        Raises:
            RuntimeError: the worker died.
        """
        got = self._ask(f"warm {limit_s:.3f}")
        return int(got["forwards"]), float(got["seconds"])

    def _ask(self, request: str) -> Any:
        """The worker's JSON answer to one request line.

        Raises:
            RuntimeError: the worker died, or answered something that is not JSON.
        """
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(request + "\n")
            self.proc.stdin.flush()
            return json.loads(self._read())
        except (OSError, ValueError) as exc:
            raise RuntimeError(f"the native MXNet worker failed ({exc}): {self._errors()}") from None

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
                self.proc.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self._err.close()
        self._dir.cleanup()

    def __enter__(self) -> "NativeProcess":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


#: The two sides of an equal-threads comparison: native MXNet, and MXNet with the pass.
SIDES = (("native", False), ("accelerated", True))
#: The side of an A/A control: native MXNet bound a second time, in a process of its own.
CONTROL = ("native control", False)


def equal_thread_workers(symbol: Any, params: Mapping[str, Any], shapes: Mapping[str, Sequence[int]],
                         inputs: Mapping[str, np.ndarray], type_dict: Optional[Mapping[str, Any]] = None,
                         threads: int = 0, cache_dir: Optional[str] = None, control: bool = False,
                         env: Optional[Mapping[str, Optional[str]]] = None
                         ) -> Tuple[Dict[str, NativeProcess], Dict[str, str]]:
    """Both sides (:data:`SIDES`) in worker processes with ``threads`` OpenMP threads (0: the usable CPUs),
    and with ``control`` a third, :data:`CONTROL`: native MXNet again, whose ratio to the first is what the
    measurement reads between two identical executors.

    ``env``: more of the workers' environment (:class:`NativeProcess`). Returns the workers that bound
    the model by side, and why the others did not
    (each logged as a warning: a model with custom operators of this process, say).
    """
    workers: Dict[str, NativeProcess] = {}
    failed: Dict[str, str] = {}
    for side, accelerated in (*SIDES, CONTROL) if control else SIDES:
        try:
            workers[side] = NativeProcess(symbol, params, shapes, inputs, type_dict, threads=threads or None,
                                          accelerated=accelerated, cache_dir=cache_dir, env=env)
        except (RuntimeError, OSError) as exc:
            failed[side] = str(exc)
            logger.warning("%s MXNet at equal threads not measured: %s", side, exc)
    return workers, failed


def _serve(spec_path: str) -> int:
    """The worker: bind natively, answer ``RUNS WARMUP`` requests on stdin until ``quit`` or EOF."""
    import mxnet as mx

    folder = os.path.dirname(spec_path)
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    sym = mx.sym.load(os.path.join(folder, "model-symbol.json"))
    saved = mx.nd.load(os.path.join(folder, "model.params"))
    args = {k[4:]: v for k, v in saved.items() if k.startswith("arg:")}
    aux = {k[4:]: v for k, v in saved.items() if k.startswith("aux:")}
    shapes: Dict[str, Tuple[int, ...]] = {k: tuple(v) for k, v in spec["shapes"].items()}
    about: Dict[str, Any] = {"engines": 0, "backends": []}
    if spec.get("accelerated"):
        # ``python -m mx_trt.tools.native_process`` imported the package, which installed the
        # bind hook; MXNET_USE_TENSORRT=1 is set.
        exe = sym.simple_bind(mx.cpu(), grad_req="null", type_dict=spec["type_dict"] or None,
                              shared_buffer={**args, **aux}, **shapes)
        info = bind_info(exe)
        if info is not None:
            about = {"engines": len(info.engines), "backends": sorted(set(info.kept_engines()))}
    else:
        exe = sym.simple_bind(mx.cpu(), grad_req="null", type_dict=spec["type_dict"] or None, **shapes)
        exe.copy_params_from(args, aux, allow_extra_params=True)
    with np.load(os.path.join(folder, "inputs.npz")) as data:
        for k in data.files:
            exe.arg_dict[k][:] = data[k]

    forward = forward_fn(exe)
    forward()
    print("ready " + json.dumps(about), flush=True)
    while True:
        ready, _, _ = select.select([sys.stdin], [], [], IDLE_SECONDS)
        line = sys.stdin.readline() if ready else ""
        if not line or line.strip() == "quit":
            return 0
        if line.strip() == "stats":
            print(json.dumps({"served": served_shares(exe)}), flush=True)
            continue
        if line.startswith("warm "):
            n, seconds = warm_check(forward, exe, float(line.split()[1]))
            print(json.dumps({"forwards": n, "seconds": seconds}), flush=True)
            continue
        runs, warmup, settle_ms = line.split()
        print(json.dumps(measure(forward, int(runs), int(warmup), settle_s=float(settle_ms) / 1e3)), flush=True)


if __name__ == "__main__":
    sys.exit(_serve(sys.argv[1]))
