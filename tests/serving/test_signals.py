"""``mxtrt serve`` in a subprocess: SIGTERM while requests wait in the batcher's queue drains them, and exits 0."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request

import numpy as np

from mx_trt.serving.server import free_port
from tests.serving.conftest import SERVER_ENV, assert_close, native_outputs, needs_server, triton_client

thttp = triton_client("tritonclient.http")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _wait_ready(proc, url, timeout_s=180.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"mxtrt serve exited with {proc.returncode}: {proc.stderr.read()[-3000:]}"
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{url} not ready after {timeout_s} s")


def test_sigterm_drains_requests_in_flight_and_exits_0(tiny_cnn, tmp_path):
    needs_server()
    http, grpc, metrics = free_port(), free_port(), free_port()
    while len({http, grpc, metrics}) < 3:
        grpc, metrics = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(SERVER_ENV, MXNET_TENSORRT_CACHE_DIR=str(tmp_path / "cache"))
    # A long queue delay: the requests are still waiting for their batch when SIGTERM comes.
    proc = subprocess.Popen([sys.executable, "-m", "mx_trt.tools.cli", "serve", tiny_cnn, "--epoch", "0",
                             "--shape", "data=1,3,16,16", "--max-batch", "8", "--max-queue-delay-us", "1500000",
                             "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics)],
                            cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_ready(proc, f"http://localhost:{http}/v2/models/tiny/ready")
        xs = [np.random.RandomState(i).uniform(-1, 1, (1, 3, 16, 16)).astype("float32") for i in range(4)]
        client = thttp.InferenceServerClient(f"localhost:{http}", concurrency=4, network_timeout=120)
        pending = []
        for x in xs:
            t = thttp.InferInput("data", list(x.shape), "FP32")
            t.set_data_from_numpy(x)
            pending.append(client.async_infer("tiny", [t]))
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        got = [p.get_result().as_numpy("fc_output") for p in pending]
        client.close()  # Triton's shutdown waits for open HTTP connections, idle ones included
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-3000:]
    for x, g in zip(xs, got):
        assert_close(g, native_outputs(tiny_cnn, {"data": x})[0])
    assert "serving tiny: HTTP" in out
