"""The CPU engine backends side by side: OpenVINO against ONNX Runtime on the same exported subgraph.

Usage::

    .venv/bin/python benchmarks/bench_cpu_backends.py [--models resnet50_v1,mobilenetv2_1.0] [--batches 1,8]
        [--rounds 15] [--threads N[,N...]] [--busy] [--one-stream] [--cold-binds N] [--json OUT.json]

For each model-zoo network (seeded random weights, tests/models/test_model_zoo.py)
and batch, the pass's own analysis and exporter make one static ONNX model of the
whole network; both backends build an engine from that same ``ExportedSubgraph``
with the same thread count (``--threads``, default: the CPUs this process may use;
several counts: an engine per backend and count, all timed in the same rounds),
and the engines run on the same numpy buffers through :meth:`Engine.run`, as a fused
node calls them. Runs alternate between the engines, the order reversing every
round, after a warm-up of each, so that load from other processes falls on all
alike. Printed: the median, mean, 99th percentile and fastest milliseconds of each, the ratio of medians
(ONNX Runtime / OpenVINO: above 1 means OpenVINO is faster), the largest difference
between their outputs, and the machine's load average before and after. With
``--busy`` each pair is timed again while a helper process keeps one core busy
(benchmarks/busy.py, bounded: it stops by itself). ``--one-stream`` also times
each backend as one stream where its engine runs the batch in chunks on several
streams (:mod:`mx_trt.builder.backends.chunks`). ``--cold-binds N`` instead
times N cold binds (a fresh plan cache each) of each model at the first batch
under the measured engine rule, with ONNX Runtime alone as the CPU candidate and
with OpenVINO beside it, alternating, and prints each bind's decision.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

logger = logging.getLogger("benchmarks.cpu_backends")

MODELS = ("resnet50_v1", "mobilenetv2_1.0")
BATCHES = (1, 8)


def export_whole(sym: Any, args: Dict[str, Any], aux: Dict[str, Any],
                 shape: Union[Tuple[int, ...], Mapping[str, Tuple[int, ...]]]) -> Any:
    """The whole network as one static ONNX model, exported as a bind exports it (``shape``: the input
    ``data``'s, or every input's by name)."""
    from mx_trt.builder.backends import select_backend
    from mx_trt.export.dynamic import SubgraphExporter
    from mx_trt.passes.fuse import boundary
    from mx_trt.pipeline.plan import analyze
    from mx_trt.pipeline.request import BindRequest
    from mx_trt.pipeline.weights import LazyWeights
    from mx_trt.settings import Settings

    params = {**args, **aux}
    shapes = {k: tuple(v) for k, v in shape.items()} if isinstance(shape, Mapping) else {"data": tuple(shape)}
    plan = analyze(BindRequest(sym, shapes, params, Settings(engine_rule="always"), select_backend("cpu")))
    inside, total = plan.op_counts()
    if inside != total or len(plan.partition.subgraphs) != 1:
        raise RuntimeError(f"the network is not one engine: {inside} of {total} operators, "
                           f"{len(plan.partition.subgraphs)} subgraphs")
    (sg,) = plan.partition.subgraphs
    absorbed = plan.absorbed_ids()
    ins, outs = boundary(plan.graph, sg.nodes, absorbed)
    names = {plan.graph.nodes[e.node].name for n in sg.nodes for e in plan.graph.nodes[n].inputs
             if plan.graph.nodes[e.node].is_variable and e.node in absorbed}
    exporter = SubgraphExporter(sym, shapes, params, plan.graph, LazyWeights(params, names), False, [])
    return exporter.export(sg.name, sg.nodes, ins, outs, plan.graph, [])


def build_engines(exported: Any, threads: int, one_stream: bool = False) -> Dict[str, Any]:
    """``{backend name: engine}`` of ONNX Runtime and OpenVINO over ``exported``, ``threads`` threads each; with
    ``one_stream``, also ``"<backend> one stream"``: each backend without its batch in chunks (where it splits it)."""
    from mx_trt.builder.backends import BACKENDS, BuildOptions

    out = {}
    for name in ("onnxruntime", "openvino"):
        reason = BACKENDS[name].unavailable_reason()
        if reason:
            raise RuntimeError(f"{name}: {reason}")
        # ONNX Runtime reads its count from "ort_threads" (the bind's MXNET_TENSORRT_ORT_THREADS), OpenVINO from "threads".
        out[name] = BACKENDS[name]().build(exported, BuildOptions(name=name, extra={"threads": threads,
                                                                                   "ort_threads": threads}))
    for name in ("onnxruntime", "openvino"):
        if one_stream and getattr(out[name], "split", None):
            out[f"{name} one stream"] = BACKENDS[name]().build(exported, BuildOptions(
                name=f"{name} one stream", extra={"threads": threads, "ort_threads": threads, "split": False}))
    return out


def _buffers(arrays: Sequence[np.ndarray]) -> List[Any]:
    from mx_trt.builder.backends import Buffer

    return [Buffer(a.ctypes.data, tuple(a.shape), str(a.dtype)) for a in arrays]


def time_interleaved(engines: Dict[str, Any], x: np.ndarray, rounds: int, warmup: int = 3
                     ) -> Tuple[Dict[str, List[float]], float]:
    """Milliseconds per run of each engine, alternating (order swapped each round); and the largest output gap."""
    names = list(engines)
    outs = {n: [np.empty(t.shape, t.dtype) for t in engines[n].outputs] for n in names}
    ins = _buffers([x])
    for n in names:
        for _ in range(warmup):
            engines[n].run(ins, _buffers(outs[n]))
    gap = max((float(np.abs(a - b).max()) for n in names[1:] for a, b in zip(outs[names[0]], outs[n])), default=0.0)
    times: Dict[str, List[float]] = {n: [] for n in names}
    bufs = {n: _buffers(outs[n]) for n in names}
    for r in range(rounds):
        for n in (names if r % 2 == 0 else names[::-1]):
            t0 = time.perf_counter()
            engines[n].run(ins, bufs[n])
            times[n].append((time.perf_counter() - t0) * 1e3)
    return times, gap


def _summary(times: Dict[str, List[float]]) -> Dict[str, Any]:
    med = {n: statistics.median(v) for n, v in times.items()}
    return {"median_ms": med, "min_ms": {n: min(v) for n, v in times.items()},
            "mean_ms": {n: statistics.fmean(v) for n, v in times.items()},
            "p99_ms": {n: float(np.percentile(v, 99)) for n, v in times.items()},
            "onnxruntime/openvino": med["onnxruntime"] / med["openvino"]}


def bench(models: Sequence[str], batches: Sequence[int], rounds: int, threads: Sequence[int],
          busy: bool = False, one_stream: bool = False) -> List[Dict[str, Any]]:
    """A row per model, batch and thread count; each (model, batch)'s engines of every count timed in the same rounds."""
    from benchmarks.busy import BusyCore, deadline_for
    from tests.models.test_model_zoo import imagenet_size, zoo_model

    rows = []
    for model in models:
        sym, args, aux, size = zoo_model(model, size=imagenet_size(model))
        for b in batches:
            shape = (b, 3, size, size)
            exported = export_whole(sym, args, aux, shape)
            engines = {f"{name} {t}t": e for t in threads for name, e in build_engines(exported, t, one_stream).items()}
            x = np.random.RandomState(b).uniform(-1, 1, shape).astype(np.float32)
            t0 = time.perf_counter()
            times, gap = time_interleaved(engines, x, rounds)
            busy_times: Optional[Dict[str, List[float]]] = None
            if busy:
                helper = BusyCore(seconds=deadline_for(time.perf_counter() - t0)).start()
                time.sleep(0.3)
                try:
                    busy_times = time_interleaved(engines, x, rounds)[0]
                finally:
                    helper.stop(f"{model} batch {b}")
            for t in threads:
                def of(ts: Dict[str, List[float]]) -> Dict[str, List[float]]:
                    return {name: ts[f"{name} {t}t"] for name in ("onnxruntime", "openvino", "onnxruntime one stream",
                                                                      "openvino one stream") if f"{name} {t}t" in ts}

                row = {"model": model, "batch": b, "threads": t, "rounds": rounds, **_summary(of(times)),
                       "max_output_gap": gap}
                if busy_times is not None:
                    row["busy"] = _summary(of(busy_times))
                rows.append(row)
                for label, r in [("", row)] + ([(" one core busy", row["busy"])] if busy_times is not None else []):
                    med = r["median_ms"]
                    logger.info("%s batch %d, %d thread(s)%s: onnxruntime %.1f ms, openvino %.1f ms (medians), "
                                "ratio %.2f%s", model, b, t, label, med["onnxruntime"], med["openvino"],
                                r["onnxruntime/openvino"],
                                "".join(f"; {n} as one stream {med[n + ' one stream']:.1f} ms (the batch in chunks: "
                                        f"{med[n + ' one stream'] / med[n]:.2f}x)" for n in ("onnxruntime", "openvino")
                                        if n + " one stream" in med))
            del engines, exported
    return rows


def cold_binds(model: str, batch: int, repeats: int) -> Dict[str, List[float]]:
    """Seconds of ``repeats`` cold binds with the candidates ``[onnxruntime]`` and ``[onnxruntime, openvino]``."""
    import tempfile

    import mxnet as mx

    import mx_trt
    from mx_trt.builder import backends, engines
    from envscope import env_override
    from tests.models.test_model_zoo import imagenet_size, zoo_model

    sym, args, aux, size = zoo_model(model, size=imagenet_size(model))
    variants = {"onnxruntime": ["onnxruntime"], "onnxruntime+openvino": ["onnxruntime", "openvino"]}
    out: Dict[str, List[float]] = {k: [] for k in variants}
    saved = backends.PREFERENCE["cpu"]
    try:
        for r in range(repeats):
            for label in (list(variants) if r % 2 == 0 else list(variants)[::-1]):
                backends.PREFERENCE["cpu"] = variants[label]
                engines.clear_pool()
                with tempfile.TemporaryDirectory(prefix="mx_trt_cold_") as cache, env_override(
                        {"MXNET_USE_TENSORRT": "1", "MXNET_TENSORRT_ENGINE_RULE": "measured",
                         "MXNET_TENSORRT_CACHE_DIR": cache, "MXNET_TENSORRT_BACKEND": None}):
                    t0 = time.perf_counter()
                    exe = sym.simple_bind(mx.cpu(), grad_req="null", shared_buffer={**args, **aux},
                                          data=(batch, 3, size, size))
                    out[label].append(time.perf_counter() - t0)
                    info = mx_trt.bind_info(exe)
                    for d in (info.decisions.values() if info is not None else []):
                        logger.info("%s, candidates %s: bind %.2f s, %s", model, label, out[label][-1], d.text)
                    del exe, info
    finally:
        backends.PREFERENCE["cpu"] = saved
        engines.clear_pool()
    return out


def table(rows: Sequence[Dict[str, Any]]) -> str:
    lines = ["| model | batch | threads | condition | ONNX Runtime ms (median / mean / p99 / min) "
             "| OpenVINO ms (median / mean / p99 / min) | ONNX Runtime / OpenVINO | max output gap |",
             "|---|---|---|---|---|---|---|---|"]

    def cell(s: Dict[str, Any], name: str) -> str:
        return " / ".join(f"{s[k][name]:.1f}" for k in ("median_ms", "mean_ms", "p99_ms", "min_ms"))

    for r in rows:
        for cond, s in [("as found", r)] + ([("one core busy", r["busy"])] if "busy" in r else []):
            lines.append(f"| {r['model']} | {r['batch']} | {r['threads']} | {cond} | {cell(s, 'onnxruntime')} "
                         f"| {cell(s, 'openvino')} | {s['onnxruntime/openvino']:.2f} | {r['max_output_gap']:.2g} |")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    from mx_trt.builder.cpus import engine_threads

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--batches", default=",".join(map(str, BATCHES)))
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--threads", default=str(engine_threads()),
                   help="threads per engine; several (1,2): an engine of each count, timed in the same rounds")
    p.add_argument("--busy", action="store_true", help="also time with one core kept busy by a helper process")
    p.add_argument("--one-stream", action="store_true",
                   help="also time each backend as one stream where it runs the batch in chunks")
    p.add_argument("--cold-binds", type=int, default=0, help="time this many cold binds per candidate set instead")
    p.add_argument("--json", default="")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    load_before = os.getloadavg()
    if a.cold_binds:
        batch = int(a.batches.split(",")[0])
        for model in a.models.split(","):
            times = cold_binds(model, batch, a.cold_binds)
            print(f"{model} batch {batch}, cold bind seconds (median of {a.cold_binds}): "
                  + ", ".join(f"{k} {statistics.median(v):.2f}" for k, v in times.items()))
        print(f"load average (1, 5, 15 min) before {load_before}, after {os.getloadavg()}")
        return 0
    rows = bench(a.models.split(","), [int(b) for b in a.batches.split(",")], a.rounds,
                 [int(t) for t in a.threads.split(",")], a.busy, a.one_stream)
    load_after = os.getloadavg()
    print(table(rows))
    print(f"load average (1, 5, 15 min) before {load_before}, after {load_after}; CPUs usable: {engine_threads()}")
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump({"rows": rows, "load_before": load_before, "load_after": load_after}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
