"""The figures behind README's serving guarantees, measured against a real ``mxtrt serve`` (the installed mx_trt).

    .venv/bin/python -m tests.serving.measure_guards [--runs 3]

Prints, for a small CNN (3x16x16, max batch 8):

- the time to the 400 for 100 requests of about 5 KB declaring each huge shape,
  and the resident memory of tritonserver, ``mxtrt serve`` and the stub before
  and after them;
- the HTTP front's cost: batch-1 binary requests and batch-8 JSON requests,
  to the front and to Triton's private port, interleaved;
- SIGTERM to exit, with an idle HTTP and an idle gRPC keep-alive client
  connected: seconds, exit status and what readiness answered meanwhile
  (one new server per run).

Not a test: numbers depend on the machine and its load.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import tempfile
import time

import numpy as np
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp

from tests.serving.cli import CliServer, children, http, rss_mb
from tests.serving.conftest import small_cnn

HUGE = ([1, 3, 16, 10**12], [1, 3, 16, 10**8], [10**9, 3, 16, 16])


def _comm(pid: int) -> str:
    with open(f"/proc/{pid}/comm") as f:
        return f.read().strip()


def _private_port(triton: int) -> int:
    with open(f"/proc/{triton}/cmdline", "rb") as f:
        args = f.read().decode().split("\0")
    return int([a for a in args if a.startswith("--http-port=")][0].split("=")[1])


def huge_shapes(srv: CliServer) -> None:
    triton = [p for p in children(srv.proc.pid) if _comm(p) == "tritonserver"][0]
    stub = [p for p in children(triton) if _comm(p).startswith("triton_python")][0]
    before = (rss_mb(triton), rss_mb(srv.proc.pid), rss_mb(stub))
    for shape in HUGE:
        body = json.dumps({"inputs": [{"name": "data", "shape": shape, "datatype": "FP32",
                                       "data": [1.0] * 1000}]}).encode()
        times, codes = [], set()
        for _ in range(100):
            t = time.perf_counter()
            codes.add(http(srv.base + "/v2/models/tiny/infer", body)[0])
            times.append(time.perf_counter() - t)
        times.sort()
        print(f"shape {shape} ({len(body)} bytes): status {sorted(codes)}, answered in {1e3 * times[50]:.2f} ms "
              f"(median), {1e3 * times[-1]:.2f} ms (max)")
    after = (rss_mb(triton), rss_mb(srv.proc.pid), rss_mb(stub))
    print("RSS MB (tritonserver, mxtrt serve, stub): before %.0f, %.0f, %.0f; after 300 huge requests %.0f, %.0f, %.0f"
          % (before + after))


def front_cost(srv: CliServer) -> None:
    triton = [p for p in children(srv.proc.pid) if _comm(p) == "tritonserver"][0]
    targets = {"front": srv.base[len("http://"):], "direct": f"127.0.0.1:{_private_port(triton)}"}
    clients = {k: thttp.InferenceServerClient(v) for k, v in targets.items()}
    x = thttp.InferInput("data", [1, 3, 16, 16], "FP32")
    x.set_data_from_numpy(np.random.RandomState(0).uniform(-1, 1, (1, 3, 16, 16)).astype("float32"))
    lat = {k: [] for k in clients}
    for i in range(401):
        for k in (("front", "direct") if i % 2 else ("direct", "front")):
            t = time.perf_counter()
            clients[k].infer("tiny", [x])
            if i:
                lat[k].append(time.perf_counter() - t)
    f, d = statistics.median(lat["front"]), statistics.median(lat["direct"])
    print(f"batch-1 binary request, medians of 400: front {1e3 * f:.2f} ms, Triton's own port {1e3 * d:.2f} ms "
          f"(+{1e3 * (f - d):.2f} ms, ratio {f / d:.2f})")
    body = json.dumps({"inputs": [{"name": "data", "shape": [8, 3, 16, 16], "datatype": "FP32",
                                   "data": np.random.RandomState(1).uniform(-1, 1, 8 * 768).tolist()}]}).encode()
    lat = {k: [] for k in clients}
    for i in range(100):
        for k in (("front", "direct") if i % 2 else ("direct", "front")):
            t = time.perf_counter()
            assert http(f"http://{targets[k]}/v2/models/tiny/infer", body)[0] == 200
            lat[k].append(time.perf_counter() - t)
    f, d = statistics.median(lat["front"]), statistics.median(lat["direct"])
    print(f"batch-8 JSON request ({len(body) // 1024} KB), medians of 100: front {1e3 * f:.2f} ms, Triton's own port "
          f"{1e3 * d:.2f} ms (+{1e3 * (f - d):.2f} ms)")


def sigterm(srv: CliServer) -> None:
    x = np.ones((1, 3, 16, 16), "float32")
    idle_http = thttp.InferenceServerClient(srv.base[len("http://"):])
    idle_grpc = tgrpc.InferenceServerClient(srv.grpc)
    for mod, client in ((thttp, idle_http), (tgrpc, idle_grpc)):
        t = mod.InferInput("data", [1, 3, 16, 16], "FP32")
        t.set_data_from_numpy(x)
        client.infer("tiny", [t])
    start = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    seen = set()
    while srv.proc.poll() is None:
        seen.add(http(srv.base + "/v2/health/ready", timeout_s=1)[0])
        time.sleep(0.05)
    print(f"SIGTERM to exit with idle HTTP and gRPC clients: {time.monotonic() - start:.2f} s, status "
          f"{srv.proc.returncode}, readiness meanwhile {sorted(seen)} (0: refused)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="SIGTERM runs, one server each (default 3)")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="measure_guards_")
    prefix = os.path.join(root, "tiny")
    small_cnn(prefix)
    cmd = [prefix, "--epoch", "0", "--shape", "data=1,3,16,16", "--max-batch", "8"]
    try:
        srv = CliServer(cmd, os.path.join(root, "run"), os.path.join(root, "cache"))
        try:
            srv.wait_ready()
            huge_shapes(srv)
            front_cost(srv)
        finally:
            srv.stop()
        for i in range(args.runs):
            srv = CliServer(cmd, os.path.join(root, f"run{i}"), os.path.join(root, "cache"))
            try:
                srv.wait_ready()
                sigterm(srv)
            finally:
                srv.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
