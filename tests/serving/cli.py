"""``mxtrt serve`` as a subprocess for tests: the installed mx_trt (PYTHONPATH removed), free ports, its output in files.

Reinstall the worktree into the virtual environment before running tests that use it.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Dict, List, Optional, Sequence, Tuple

from mx_trt.serving.server import free_port
from tests.serving.conftest import SERVER_ENV


def free_ports(n: int = 3) -> List[int]:
    """``n`` distinct ports free on the loopback now."""
    ports: List[int] = []
    while len(ports) < n:
        p = free_port()
        if p not in ports:
            ports.append(p)
    return ports


def http(url: str, body: Optional[bytes] = None, headers: Optional[Dict[str, str]] = None,
         timeout_s: float = 30.0) -> Tuple[int, bytes]:
    """``(status, body)`` of a GET (or a POST with ``body``); status 0 when nothing answers."""
    req = urllib.request.Request(url, data=body, headers=headers or {}, method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()
    except OSError:
        return 0, b""


def infer_json(data: Sequence[float], shape: Sequence[int], name: str = "data") -> bytes:
    """A JSON inference request body with one FP32 input."""
    return json.dumps({"inputs": [{"name": name, "shape": list(shape), "datatype": "FP32",
                                   "data": [float(v) for v in data]}]}).encode()


class CliServer:
    """``mxtrt serve ARGS`` on free ports (or ``ports``), run from ``workdir`` with the test server environment.

    Args:
        args: The arguments after ``serve`` (checkpoint, ``--shape``, ...), without the ports.
        workdir: Where it runs; ``stdout.txt`` and ``stderr.txt`` go there.
        cache_dir: The plan cache of its instances.
        ports: ``(http, grpc, metrics)``; default three free ones.
    """

    def __init__(self, args: Sequence[str], workdir: str, cache_dir: str,
                 ports: Optional[Sequence[int]] = None) -> None:
        self.ports = list(ports or free_ports(3))
        self.workdir = workdir
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env.update(SERVER_ENV, MXNET_TENSORRT_CACHE_DIR=cache_dir)
        os.makedirs(workdir, exist_ok=True)
        self._out = open(os.path.join(workdir, "stdout.txt"), "w")
        self._err = open(os.path.join(workdir, "stderr.txt"), "w")
        cmd = [sys.executable, "-m", "mx_trt.tools.cli", "serve", *args, "--http-port", str(self.ports[0]),
               "--grpc-port", str(self.ports[1]), "--metrics-port", str(self.ports[2])]
        self.proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=self._out, stderr=self._err)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.ports[0]}"

    @property
    def grpc(self) -> str:
        return f"127.0.0.1:{self.ports[1]}"

    def output(self) -> Tuple[str, str]:
        """What it printed so far: ``(stdout, stderr)``."""
        self._out.flush()
        self._err.flush()
        with open(os.path.join(self.workdir, "stdout.txt")) as o, open(os.path.join(self.workdir, "stderr.txt")) as e:
            return o.read(), e.read()

    def wait_ready(self, timeout_s: float = 240.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"mxtrt serve exited with {self.proc.returncode}: " \
                                             f"{self.output()[1][-3000:]}"
            if http(self.base + "/v2/health/ready", timeout_s=2)[0] == 200:
                return
            time.sleep(0.2)
        raise AssertionError(f"not ready after {timeout_s} s: {self.output()[1][-3000:]}")

    def stop(self, timeout_s: float = 60.0) -> int:
        """SIGTERM and wait (SIGKILL after ``timeout_s``); the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._out.close()
        self._err.close()
        return int(self.proc.returncode)


def children(pid: int) -> List[int]:
    """Every process below ``pid`` (from ``/proc``), nearest first."""
    parents: Dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    out: List[int] = []
    frontier = [pid]
    while frontier:
        kids = [p for p, pp in parents.items() if pp in frontier]
        out.extend(kids)
        frontier = kids
    return out


def alive(pid: int) -> bool:
    """``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` in MB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0
