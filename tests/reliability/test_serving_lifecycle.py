"""``mxtrt serve``'s life: it dies with nothing left serving, restarts on its ports, names a port in use,
listens only where it is told, and stops gracefully on SIGTERM within its grace period.

Before: SIGKILL of ``mxtrt serve`` left tritonserver and its stub serving on
the ports with the model folder left behind, and a restart on those ports
reported "serving" (its readiness probe reached the orphan) and exited 1;
a port in use was not named; HTTP, gRPC and metrics listened on 0.0.0.0
while the banner said localhost; and SIGTERM with an idle keep-alive client
connected waited Triton's whole 30 s exit timeout, then exited 1.

Two servers for the module: the first is killed, the second starts on the
same ports and is then stopped with SIGTERM.
"""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from tests.serving.cli import CliServer, alive, children, free_ports, http
from tests.serving.conftest import SERVER_ENV, assert_close, native_outputs, needs_server, small_cnn, triton_client

thttp = triton_client("tritonclient.http")
tgrpc = triton_client("tritonclient.grpc")

GRACE_S = 8


def _args(prefix, *extra):
    return [prefix, "--epoch", "0", "--shape", "data=1,3,16,16", "--max-batch", "8", *extra]


def _repository(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        args = f.read().decode().split("\0")
    repo = [a.split("=", 1)[1] for a in args if a.startswith("--model-repository=")][0]
    return os.path.dirname(repo)


def _connects(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(2)
        return s.connect_ex((host, port)) == 0


def _wait(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


@pytest.fixture(scope="module")
def restarted(tmp_path_factory):
    """A server killed with SIGKILL, then a second one started on the same ports (yielded, with what was seen)."""
    needs_server()
    root = tmp_path_factory.mktemp("serving_lifecycle")
    prefix = str(root / "tiny")
    small_cnn(prefix)
    ports = free_ports(3)
    first = CliServer(_args(prefix), str(root / "first"), str(root / "cache"), ports)
    second = None
    try:
        first.wait_ready()
        below = children(first.proc.pid)
        folder = _repository(below[0])
        os.kill(first.proc.pid, signal.SIGKILL)
        first.proc.wait()
        gone = _wait(lambda: not any(alive(p) for p in below), 30)
        free = _wait(lambda: not any(_connects("127.0.0.1", p) for p in ports), 10)
        # A long queue delay keeps a request in flight while SIGTERM comes (the last test).
        second = CliServer(_args(prefix, "--grace-period", str(GRACE_S), "--max-queue-delay-us", "1500000"),
                           str(root / "second"), str(root / "cache"), ports)
        second.wait_ready()
        yield {"server": second, "prefix": prefix, "below": below, "gone": gone, "free": free, "folder": folder}
    finally:
        first.stop()
        if second is not None:
            second.stop()


def test_sigkill_leaves_nothing_serving_and_a_restart_on_the_same_ports_serves(restarted):
    assert restarted["gone"], f"still running after the parent's SIGKILL: {[p for p in restarted['below'] if alive(p)]}"
    assert restarted["free"], "a port still answered after the parent's SIGKILL"
    srv = restarted["server"]
    assert not os.path.exists(restarted["folder"]), "the killed server's folder was not swept at the restart"
    client = thttp.InferenceServerClient(srv.base[len("http://"):])
    x = np.random.RandomState(3).uniform(-1, 1, (1, 3, 16, 16)).astype("float32")
    t = thttp.InferInput("data", list(x.shape), "FP32")
    t.set_data_from_numpy(x)
    assert_close(client.infer("tiny", [t]).as_numpy("fc_output"), native_outputs(restarted["prefix"], {"data": x})[0])
    client.close()
    assert children(srv.proc.pid), "the restarted server's tritonserver is not its child"


def test_it_listens_only_on_the_host_and_the_banner_says_where(restarted):
    srv = restarted["server"]
    banner = srv.output()[0]
    http_port, grpc_port, metrics_port = srv.ports
    assert f"HTTP 127.0.0.1:{http_port}, gRPC 127.0.0.1:{grpc_port}, metrics http://127.0.0.1:{metrics_port}/" \
        in banner, banner
    for port in srv.ports:
        assert _connects("127.0.0.1", port)
        # 127.0.0.2 is this machine too, but not the address it was told: a 0.0.0.0 listener would answer.
        assert not _connects("127.0.0.2", port), f"port {port} answers on 127.0.0.2"


@pytest.mark.parametrize("which", [0, 1, 2], ids=["http", "grpc", "metrics"])
def test_a_port_in_use_is_named_in_the_error(tmp_path, which):
    needs_server()
    ports = free_ports(3)
    names = ["http", "grpc", "metrics"]
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("0.0.0.0", ports[which]))
        busy.listen(1)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env.update(SERVER_ENV, MXNET_TENSORRT_CACHE_DIR=str(tmp_path / "cache"))
        prefix = str(tmp_path / "tiny")
        small_cnn(prefix)
        r = subprocess.run([sys.executable, "-m", "mx_trt.tools.cli", "serve", *_args(prefix), "--http-port",
                            str(ports[0]), "--grpc-port", str(ports[1]), "--metrics-port", str(ports[2])],
                           env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr[-2000:]
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("mxtrt: error")]
    assert len(lines) == 1 and f"{names[which]} port {ports[which]}" in lines[0] and "in use" in lines[0], r.stderr
    assert "serving" not in r.stdout


def test_sigterm_with_idle_clients_finishes_in_flight_requests_and_exits_0_within_the_grace_period(restarted):
    srv = restarted["server"]
    # Idle keep-alive clients on HTTP and gRPC, each after one request.
    idle_http = thttp.InferenceServerClient(srv.base[len("http://"):])
    idle_grpc = tgrpc.InferenceServerClient(srv.grpc)
    x = np.random.RandomState(5).uniform(-1, 1, (1, 3, 16, 16)).astype("float32")
    for mod, client in ((thttp, idle_http), (tgrpc, idle_grpc)):
        t = mod.InferInput("data", list(x.shape), "FP32")
        t.set_data_from_numpy(x)
        client.infer("tiny", [t])
    # One request in flight (it waits for its batch: 1.5 s queue delay) when SIGTERM comes.
    busy = thttp.InferenceServerClient(srv.base[len("http://"):], network_timeout=60)
    t = thttp.InferInput("data", list(x.shape), "FP32")
    t.set_data_from_numpy(x)
    pending = busy.async_infer("tiny", [t])
    time.sleep(0.3)
    readiness = []
    stop = threading.Event()

    def probe():
        while not stop.is_set():
            readiness.append((time.monotonic(), http(srv.base + "/v2/health/ready", timeout_s=1)[0]))
            time.sleep(0.02)

    start = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    prober = threading.Thread(target=probe)
    prober.start()
    got = pending.get_result().as_numpy("fc_output")
    code = srv.proc.wait(timeout=60)
    elapsed = time.monotonic() - start
    stop.set()
    prober.join()
    assert code == 0, srv.output()[1][-3000:]
    assert elapsed < GRACE_S, f"{elapsed:.1f} s from SIGTERM to exit"
    assert_close(got, native_outputs(restarted["prefix"], {"data": x})[0])
    # Readiness false at once: a probe sent while the signal is being delivered may still pass, none later.
    late = [(round(t - start, 3), status) for t, status in readiness if t - start > 0.1]
    assert late and all(status != 200 for _, status in late), late[:5]
    assert min(t for t, status in readiness if status != 200) - start < 0.5
    err = srv.output()[1]
    assert not re.search(r"Exit timeout expired|Non-graceful", err), err[-2000:]
    idle_http.close()
    idle_grpc.close()
    busy.close()
