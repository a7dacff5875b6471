"""Serving under load: the model behind Triton, driven by ``tritonclient``, beside the same model in process.

Two measurements of one checkpoint, both bound with the pass, with one plan
cache (the server's instance loads the engines the in-process bind built):

* in process: :class:`mx_trt.serving.executors.ServedModel` (the very class
  the server's instances run), batch-1 latency and the throughput at each
  batch from 1 to ``max_batch`` (powers of 2), of which the best is kept;
* the server: :func:`mx_trt.serving.running` (Triton, one instance, dynamic
  batching up to ``max_batch``), driven over gRPC by ``c`` client threads,
  each sending one request of batch 1 at a time, until ``requests`` requests
  have been answered, for ``c`` in 1, 4 and 16: throughput, p50, p99 and
  failed requests. The first response is checked against the in-process
  output (fp32, ``rtol=1e-4, atol=1e-5``).

Other processes on the machine shift both sides alike only if they are
measured at the same time: at c=1 the server's requests and the in-process
runs alternate in rounds of 10 (the batch-1 latency is the median of those
in-process runs), and the best in-process batch throughput is measured just
before and just after the c=16 load (the mean of the two is the reference).

Ratios and targets (ResNet-50, CPU): p50 at c=1 over in-process batch-1
latency <= 1.15; throughput at c=16 over the best in-process batch
throughput >= 0.9; 0 failed.

The full run serves ResNet-50 v1 (model zoo, seeded random weights, 224x224)
with 2,000 requests per concurrency; ``--quick`` a small CNN (3x32x32) with 60.
"""
from __future__ import annotations

import os
import statistics
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CONCURRENCY = (1, 4, 16)
TARGET_P50_RATIO = 1.15
TARGET_THROUGHPUT_RATIO = 0.9
RTOL, ATOL = 1e-4, 1e-5


def _checkpoint(quick: bool, folder: str) -> Tuple[str, Tuple[int, ...], str]:
    """Write the benchmark's checkpoint into ``folder``: (prefix, sample shape, model label)."""
    import mxnet as mx

    if quick:
        sys.path.insert(0, ROOT)
        from tests.serving.conftest import small_cnn

        prefix = os.path.join(folder, "small_cnn")
        small_cnn(prefix, 32)
        return prefix, (3, 32, 32), "small CNN 3x32x32"
    from tests.models.test_model_zoo import imagenet_size, zoo_model

    sym, args, aux, size = zoo_model("resnet50_v1", size=imagenet_size("resnet50_v1"))
    prefix = os.path.join(folder, "resnet50_v1")
    mx.model.save_checkpoint(prefix, 0, sym, args, aux)
    return prefix, (3, size, size), f"ResNet-50 v1 3x{size}x{size}"


def _in_process_model(prefix: str, sample: Tuple[int, ...], max_batch: int) -> Any:
    import mxnet as mx

    from mx_trt.serving.executors import ServedModel, TensorSpec

    sym, args, aux = mx.model.load_checkpoint(prefix, 0)
    return ServedModel(sym, args, aux, [TensorSpec("data", "float32", sample)], max_batch, mx.cpu())


def _batch_throughput(model: Any, sample: Tuple[int, ...], max_batch: int, runs: int) -> Dict[int, float]:
    """Samples per second at batch 1, 2, 4, ... ``max_batch``, each over about ``runs`` samples."""
    rng = np.random.RandomState(1)
    out: Dict[int, float] = {}
    batch = 1
    while batch <= max_batch:
        xb = rng.uniform(-1, 1, (batch,) + sample).astype("float32")
        model.run({"data": xb})
        n = max(2, runs // batch)
        t = time.perf_counter()
        for _ in range(n):
            model.run({"data": xb})
        out[batch] = batch * n / (time.perf_counter() - t)
        batch *= 2
    return out


def _alternating_c1(model: Any, grpc_url: str, name: str, x: np.ndarray, requests: int,
                    rounds_of: int = 10) -> Tuple[Dict[str, Any], List[float]]:
    """Concurrency 1: rounds of ``rounds_of`` server requests, each round followed by as many in-process runs."""
    import tritonclient.grpc as tgrpc

    client = tgrpc.InferenceServerClient(grpc_url)
    inp = tgrpc.InferInput("data", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    served: List[float] = []
    local: List[float] = []
    failed: List[str] = []
    served_s = 0.0
    while len(served) + len(failed) < requests:
        for _ in range(min(rounds_of, requests - len(served) - len(failed))):
            t = time.perf_counter()
            try:
                client.infer(name, [inp])
                served.append(time.perf_counter() - t)
            except Exception as exc:  # counted, first message kept
                failed.append(str(exc)[:200])
            served_s += time.perf_counter() - t
        for _ in range(rounds_of):
            t = time.perf_counter()
            model.run({"data": x})
            local.append(time.perf_counter() - t)
    client.close()
    return _row(1, requests, served, failed, served_s), local


def _row(concurrency: int, requests: int, latencies: List[float], failed: List[str], wall: float) -> Dict[str, Any]:
    lat = sorted(latencies)

    def pct(q: float) -> float:
        return 1000 * lat[min(len(lat) - 1, int(q * len(lat)))] if lat else float("nan")

    return {"concurrency": concurrency, "requests": requests, "ok": len(lat), "failed": len(failed),
            "first_failure": failed[0] if failed else None, "seconds": wall,
            "throughput": len(lat) / wall if wall else 0.0, "p50_ms": pct(0.50), "p99_ms": pct(0.99)}


def _load(grpc_url: str, model: str, x: np.ndarray, concurrency: int, requests: int) -> Dict[str, Any]:
    import tritonclient.grpc as tgrpc

    latencies: List[float] = []
    failed: List[str] = []
    lock = threading.Lock()
    left = [requests]

    def client_loop() -> None:
        client = tgrpc.InferenceServerClient(grpc_url)
        inp = tgrpc.InferInput("data", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        while True:
            with lock:
                if left[0] <= 0:
                    break
                left[0] -= 1
            t = time.perf_counter()
            try:
                client.infer(model, [inp])
                dt = time.perf_counter() - t
                with lock:
                    latencies.append(dt)
            except Exception as exc:  # every failure is counted and its first message kept
                with lock:
                    failed.append(str(exc)[:200])
        client.close()

    threads = [threading.Thread(target=client_loop) for _ in range(concurrency)]
    t0 = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return _row(concurrency, requests, latencies, failed, time.perf_counter() - t0)


def bench_serve(quick: bool, requests: int = 0, runs: int = 0, max_batch: int = 16,
                concurrency: Sequence[int] = CONCURRENCY) -> Dict[str, Any]:
    """Both measurements and their ratios (see the module docstring)."""
    import tritonclient.grpc as tgrpc

    from mx_trt.serving import ServeOptions, running, serve_problem

    problem = serve_problem()
    if problem is not None:
        raise RuntimeError(f"the serve section cannot run here: {problem}")
    requests = requests or (60 if quick else 2000)
    runs = runs or (10 if quick else 30)
    with tempfile.TemporaryDirectory(prefix="mx_trt_bench_serve_") as folder:
        prefix, sample, label = _checkpoint(quick, folder)
        os.environ["MXNET_TENSORRT_CACHE_DIR"] = os.path.join(folder, "plan_cache")
        if quick:
            # The small CNN exercises the serving path; the measured rule may rightly find MXNet
            # faster on it and leave it without engines, which would measure no engine at all.
            os.environ["MXNET_TENSORRT_ENGINE_RULE"] = "always"
        model = _in_process_model(prefix, sample, max_batch)
        x1 = np.random.RandomState(0).uniform(-1, 1, (1,) + sample).astype("float32")
        reference = model.run({"data": x1})[0]
        engines = len(model.info.engines) if model.info is not None else 0
        rows = []
        opts = ServeOptions(max_batch=max_batch, max_queue_delay_us=2000, instances=1, http_port=0, grpc_port=0,
                            metrics_port=0)
        with running(prefix, 0, {"data": (1,) + sample}, options=opts) as ep:
            client = tgrpc.InferenceServerClient(ep.grpc)
            inp = tgrpc.InferInput("data", list(x1.shape), "FP32")
            inp.set_data_from_numpy(x1)
            got = client.infer(ep.model, [inp]).as_numpy(client.get_model_metadata(ep.model).outputs[0].name)
            np.testing.assert_allclose(got, reference, rtol=RTOL, atol=ATOL)
            for _ in range(min(10, requests)):  # warm-up: the first runs of a session are slower
                client.infer(ep.model, [inp])
            client.close()
            local_c1: List[float] = []
            throughput: List[Dict[int, float]] = []
            for c in concurrency:
                if c == 1:
                    row, local_c1 = _alternating_c1(model, ep.grpc, ep.model, x1, requests)
                    rows.append(row)
                    continue
                if c == max(concurrency):
                    throughput.append(_batch_throughput(model, sample, max_batch, runs))
                rows.append(_load(ep.grpc, ep.model, x1, c, requests))
                if c == max(concurrency):
                    throughput.append(_batch_throughput(model, sample, max_batch, runs))
        if not throughput:
            throughput.append(_batch_throughput(model, sample, max_batch, runs))
        if not local_c1:
            local_c1 = [1.0 / throughput[0][1]]
    per_batch = {b: statistics.mean(t[b] for t in throughput) for b in throughput[0]}
    best = max(per_batch, key=lambda b: per_batch[b])
    local = {"batch1_ms": 1000 * statistics.median(local_c1), "throughput_by_batch": per_batch, "best_batch": best,
             "best_throughput": per_batch[best], "engines": engines}
    by_c = {r["concurrency"]: r for r in rows}
    ratios = {
        "p50_c1/in_process_batch1": by_c[1]["p50_ms"] / local["batch1_ms"] if 1 in by_c else None,
        "throughput_c16/best_in_process": by_c[16]["throughput"] / local["best_throughput"] if 16 in by_c else None,
    }
    return {"model": label, "max_batch": max_batch, "requests": requests, "in_process": local, "server": rows,
            "ratios": ratios, "failed": sum(r["failed"] for r in rows)}


def render(res: Dict[str, Any]) -> str:
    """The serve section as plain text."""
    local = res["in_process"]
    lines = [f"in process: batch 1 {local['batch1_ms']:.1f} ms; best throughput {local['best_throughput']:.1f}/s "
             f"at batch {local['best_batch']} ({local['engines']} engine(s))"]
    head = ["concurrency", "requests", "failed", "throughput/s", "p50 ms", "p99 ms"]
    body = [[str(r["concurrency"]), str(r["requests"]), str(r["failed"]), f"{r['throughput']:.1f}",
             f"{r['p50_ms']:.1f}", f"{r['p99_ms']:.1f}"] for r in res["server"]]
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    table = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in [head, *body]]
    table.insert(1, "  ".join("-" * w for w in widths))
    ratios = res["ratios"]
    p50 = ratios["p50_c1/in_process_batch1"]
    thr = ratios["throughput_c16/best_in_process"]
    lines += table
    lines.append(f"p50 at c=1 / in-process batch 1: {p50:.2f} (target <= {TARGET_P50_RATIO})" if p50 else "")
    lines.append(f"throughput at c=16 / best in-process: {thr:.2f} (target >= {TARGET_THROUGHPUT_RATIO})"
                 if thr else "")
    return "\n".join(line for line in lines if line)


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    result = bench_serve("--quick" in sys.argv)
    print(render(result))
