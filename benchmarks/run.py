"""The benchmark runner: everything measured side by side in one process, written as JSON and a PNG plot.

Usage::

    python benchmarks/run.py [--quick] [--out bench_out] [--runs 10]

Sections (see benchmarks/README.md for the latest numbers):

1. ``partition``: the partition pass on synthetic CNN-like graphs of 1k, 10k
   and 100k operators with 5% unsupported, against the straightforward
   implementation of the design's method (one BFS and one reverse BFS per
   incompatible node, ``mx_trt.passes.partition._literal_partition_reference``) on
   the same graph, in this process. That reference needs O(K * V) memory and
   time (K incompatible nodes): above ``--reference-max`` operators it is not
   run and its time is extrapolated from the two largest sizes measured,
   marked as an estimate.
2. ``bind``: ResNet-50 v1 bind time natively (``simple_bind`` alone, and with
   the ``copy_params_from`` that the design's example adds and that a native
   executor needs for its aux states), with the pass and no plan cache (the
   cost rule), with a cold cache under the cost rule and under the measured rule
   (the default: it times the engines), and with a warm cache (engines and
   decisions found on disk), as ratios to both native binds. Engines kept in memory by earlier binds are forgotten before
   each bind so every leg does its full work.
3. ``fused_node``: the cost of one fused node: the accelerated executor's
   forward time minus its engine's own run time (the same engine called
   directly), next to the forward time of a no-op Python custom operator.
4. ``end_to_end``: model-zoo models (seeded random weights) at batch 1 and
   8: native MXNet and accelerated (the measured engine rule, fresh plan
   cache) with MXNet's default threads; native and accelerated with
   ``OMP_NUM_THREADS`` set to the engines' thread count (the CPUs the process
   may use; worker processes timed in the same rounds,
   ``mx_trt.tools.native_process``: the accelerated worker's measured rule
   compares its engines with MXNet at that thread count); and the whole model
   as one engine (every op converts), with the ratios accelerated/whole (target
   <= 1.05 on CPU) and native/accelerated at both thread counts.
   ``busy``: the same for ResNet-50 v1 and MobileNetV2 (quick: ResNet-18, batch
   1), first quiet, then with a helper process keeping one core busy
   (``benchmarks/busy.py``: bounded, it stops by itself, also if the runner dies).

5. ``models``: GluonCV and GluonNLP models at their real input sizes
   (``benchmarks/bench_models.py``): the partition, and native MXNet against
   the pass with the shipped cost rule and with an engine for every subgraph.
6. ``memory``: peak RSS and RSS after bind, each variant in its own process
   (``benchmarks/bench_memory.py``): native, the pass without plan cache, and
   the pass with a cold and a warm cache, on ResNet-50 v1 and a 2 GB FullyConnected.
7. ``soak`` (only when named in ``--only``): ``--soak-cycles`` cycles of bind,
   forwards and unbind on a small CNN, natively and with the pass, each in its
   own process (``benchmarks/bench_soak.py``): binds/s, forwards/s, RSS start,
   end and max, growth per 1,000 cycles, and the engine pool at the end.
8. ``serve`` (only when named in ``--only``): the model served by Triton
   (``mx_trt.serving``), driven with ``tritonclient`` over gRPC at
   concurrency 1, 4 and 16 for ``--serve-requests`` requests each (default
   2,000; quick 60): throughput, p50, p99 and failed requests, beside the same
   model in process (batch-1 latency, best batch throughput), with the ratios
   (``benchmarks/bench_serve.py``). ResNet-50 v1; ``--quick``: a small CNN.
9. ``int8`` (``benchmarks/bench_int8.py``): top-1 of a small CNN trained on
   scikit-learn's digits at fp32, fp16 and int8 (each calibration method) and
   with MXNet's own oneDNN INT8; and fp32 against int8 engines, native MXNet and
   MXNet's oneDNN INT8 on ResNet-50 v1 and MobileNetV2 at batch 1 and 8, timed in
   alternating rounds, with the ratios and each int8 variant's cosine to fp32.

Output: ``OUT/results.json``, ``OUT/results.png`` (needs matplotlib:
``pip install -r requirements/bench.txt``) and the tables on stdout.
"""
from __future__ import annotations

import argparse
import gc
import json
import logging
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Before mxnet is imported: its start-up hook must find this checkout's mx_trt.
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
os.environ.setdefault("MXNET_SUBGRAPH_VERBOSE", "0")

import numpy as np  # noqa: E402

from envscope import env_override  # noqa: E402
from report import README, plot, ratio_text, render_tables, update_readme  # noqa: E402

logger = logging.getLogger("benchmarks.run")

SIZES = (1_000, 10_000, 100_000)
UNSUPPORTED = 0.05
ZOO = ("resnet18_v1", "resnet50_v1", "mobilenetv2_1.0", "squeezenet1.1", "densenet121", "inceptionv3")
QUICK_ZOO = ("resnet18_v1", "mobilenetv2_0.5")
BUSY = ("resnet50_v1", "mobilenetv2_1.0")
QUICK_BUSY = ("resnet18_v1",)
BATCHES = (1, 8)


def _best(fn: Callable[[], Any], repeat: int) -> Tuple[float, Any]:
    """Smallest wall time of ``repeat`` calls (seconds) and the last result."""
    best, out = math.inf, None
    for _ in range(repeat):
        gc.collect()
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


# ---------------------------------------------------------------------------
# 1. Partition pass scaling
# ---------------------------------------------------------------------------


def bench_partition(sizes: Sequence[int], reference_max: int, seed: int) -> List[Dict[str, Any]]:
    """The partition pass vs the straightforward BFS-per-node reference on the same graphs."""
    from bench_partition import _plain, synthetic_graph

    from mx_trt.passes.partition import _literal_partition_reference, partition

    rows: List[Dict[str, Any]] = []
    for n in sizes:
        graph, unsupported, _ = synthetic_graph(n, UNSUPPORTED, seed)
        repeat = 3 if n <= 10_000 else 1
        t_pass, result = _best(lambda: partition(graph, unsupported, 2), repeat)
        row: Dict[str, Any] = {
            "ops": n, "unsupported": len(unsupported), "edges": sum(len(v.inputs) for v in graph.nodes),
            "subgraphs": len(result.subgraphs), "pass_s": t_pass, "reference_s": None,
            "reference_estimated": False, "ratio": None,
        }
        if n <= reference_max:
            preds, supported = _plain(graph, unsupported)
            t_ref, _ = _best(lambda: _literal_partition_reference(preds, supported, 2), 1 if n > 1000 else 3)
            row.update(reference_s=t_ref, ratio=t_ref / t_pass)
        logger.info("partition %d ops: pass %.3f s, reference %s", n, t_pass,
                    f"{row['reference_s']:.3f} s" if row["reference_s"] else "skipped")
        rows.append(row)
    measured = [r for r in rows if r["reference_s"]]
    if len(measured) >= 2:
        a, b = measured[-2], measured[-1]
        k = math.log(b["reference_s"] / a["reference_s"]) / math.log(b["ops"] / a["ops"])
        for r in rows:
            if r["reference_s"] is None:
                est = b["reference_s"] * (r["ops"] / b["ops"]) ** k
                r.update(reference_s=est, reference_estimated=True, ratio=est / r["pass_s"], reference_exponent=k)
    return rows


# ---------------------------------------------------------------------------
# 2. Bind cost
# ---------------------------------------------------------------------------


def _forget_engines() -> None:
    """Drop engines kept for reuse in this process, so the next bind gets them from disk or builds them."""
    from mx_trt.builder import engines

    engines.clear_pool()
    gc.collect()


def bench_bind(model: str, repeat: int) -> Dict[str, Any]:
    """Native bind vs the pass without cache, with a cold cache and with a warm cache."""
    import mxnet as mx

    import mx_trt
    from mx_trt.frontends import hook
    from tests.models.test_model_zoo import imagenet_size, zoo_model

    sym, args, aux, size = zoo_model(model, size=imagenet_size(model))
    params = {**args, **aux}
    shape = (1, 3, size, size)
    legs: Dict[str, Any] = {}

    copy = {"on": False}

    def bind(on: bool) -> Tuple[float, Any]:
        _forget_engines()
        t = time.perf_counter()
        with (hook.forced() if on else hook.disabled()):
            exe = sym.simple_bind(mx.cpu(), data=shape, shared_buffer=dict(params), grad_req="null")
            if copy["on"]:
                exe.copy_params_from(args, aux)
                mx.nd.waitall()
        return time.perf_counter() - t, exe

    def timed(label: str, on: bool, prepare: Optional[Callable[[], None]] = None) -> None:
        times = []
        info = None
        for _ in range(repeat):
            if prepare:
                prepare()
            dt, exe = bind(on)
            times.append(dt)
            info = mx_trt.bind_info(exe)
            del exe
        leg: Dict[str, Any] = {"median_s": statistics.median(times), "times_s": times}
        if info is not None:
            leg.update(engines=len(info.engines), timings=dict(info.timings),
                       builds=getattr(info, "builds", None), loads=getattr(info, "loads", None))
        legs[label] = leg
        logger.info("bind %s: %.3f s", label, leg["median_s"])

    timed("native", False)
    copy["on"] = True
    timed("native + copy_params_from", False)
    copy["on"] = False
    with env_override({"MXNET_TENSORRT_CACHE_DIR": ""}):
        timed("pass, no cache", True)
    with tempfile.TemporaryDirectory(prefix="mx_trt_bench_cache_") as tmp:
        import shutil

        def empty_cache() -> None:
            shutil.rmtree(tmp, ignore_errors=True)
            os.makedirs(tmp, exist_ok=True)

        with env_override({"MXNET_TENSORRT_CACHE_DIR": tmp, "MXNET_TENSORRT_ENGINE_RULE": "cost"}):
            timed("pass, cold cache, cost rule", True, empty_cache)
        with env_override({"MXNET_TENSORRT_CACHE_DIR": tmp}):
            timed("pass, cold cache", True, empty_cache)  # the measured rule times the engines
            timed("pass, warm cache", True)
    native = legs["native"]["median_s"]
    native_copy = legs["native + copy_params_from"]["median_s"]
    for leg in legs.values():
        leg["ratio_to_native"] = leg["median_s"] / native
        leg["ratio_to_native_copy"] = leg["median_s"] / native_copy
    return {"model": model, "shape": list(shape), "repeat": repeat, "legs": legs}


# ---------------------------------------------------------------------------
# 3. Cost of one fused node
# ---------------------------------------------------------------------------

_NOOP = "mxtrt_bench_noop"


def _register_noop() -> None:
    import mxnet as mx

    class NoOp(mx.operator.CustomOp):  # type: ignore[misc]
        def forward(self, is_train: bool, req: Any, in_data: Any, out_data: Any, aux: Any) -> None:
            pass

        def backward(self, req: Any, out_grad: Any, in_data: Any, out_data: Any, in_grad: Any, aux: Any) -> None:
            pass

    @mx.operator.register(_NOOP)
    class NoOpProp(mx.operator.CustomOpProp):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(need_top_grad=False)

        def list_arguments(self) -> List[str]:
            return ["data"]

        def list_outputs(self) -> List[str]:
            return ["output"]

        def infer_shape(self, in_shape: Any) -> Any:
            return in_shape, [in_shape[0]], []

        def create_operator(self, ctx: Any, shapes: Any, dtypes: Any) -> Any:
            return NoOp()


def bench_fused_node(runs: int) -> List[Dict[str, Any]]:
    """Fused node forward minus its engine's run, next to a no-op custom operator, per case.

    Each case is one fused node, so the executor's forward is the direct one (``runtime.direct``); the node's
    forward through MXNet's executor (what a fused node beside native operators costs) is timed too.
    """
    import mxnet as mx

    from mx_trt.tools.cli.binding import WholeModelEngine, bind_accelerated
    from mx_trt.tools.cli.checkpoint import Checkpoint
    from mx_trt.tools.cli.options import backend_for, settings_from_env
    from mx_trt.tools.cli.timing import forward_fn, measure
    from tests.harness.mxcheck import random_params

    _register_noop()
    x = mx.sym.var("data")
    cases = {
        "FC+relu, 1x64": (mx.sym.Activation(mx.sym.FullyConnected(x, num_hidden=64, name="fc"), act_type="relu",
                                            name="relu"), (1, 64)),
        "conv3x3+relu, 1x64x56x56": (mx.sym.Activation(mx.sym.Convolution(x, num_filter=64, kernel=(3, 3), pad=(1, 1),
                                                                           name="conv"), act_type="relu", name="relu"),
                                     (1, 64, 56, 56)),
    }
    settings = settings_from_env()
    ctx = mx.cpu()
    backend = backend_for(ctx, settings)
    rows = []
    for label, (sym, shape) in cases.items():
        args, aux = random_params(sym, {"data": shape})
        ckpt = Checkpoint(label, 0, sym, args, aux)
        data = np.random.RandomState(0).uniform(-1, 1, shape).astype("float32")
        # The cases are a few tiny operators, which the default cost rule rightly leaves native:
        # this section measures the hop itself, so every subgraph gets its engine.
        with env_override({"MXNET_TENSORRT_CACHE_DIR": "", "MXNET_TENSORRT_ENGINE_RULE": "always"}):
            exe, info = bind_accelerated(ckpt, {"data": shape}, ctx, settings_from_env(), backend)
        exe.arg_dict["data"][:] = data
        engine = WholeModelEngine.from_bind(info)
        assert engine is not None, "every op of the case converts"
        engine.set_inputs({"data": data})
        noop = mx.sym.Custom(x, op_type=_NOOP, name="noop")
        from mx_trt.frontends.hook import disabled

        with disabled():
            nexe = noop.simple_bind(ctx, grad_req="null", data=shape)
        warm = max(5, runs // 10)
        # Interleave the three in rounds so drift hits them alike.
        fused_ms: List[float] = []
        direct_ms: List[float] = []
        engine_ms: List[float] = []
        noop_ms: List[float] = []

        def through_mxnet(e: Any = exe) -> None:  # the executor's own forward, not the guarded (direct) one
            for o in type(e).forward(e, is_train=False):
                o.wait_to_read()

        for _ in range(10):
            fused_ms += measure(through_mxnet, runs // 10, warm)
            direct_ms += measure(forward_fn(exe), runs // 10, warm)
            engine_ms += measure(engine.run, runs // 10, warm)
            noop_ms += measure(forward_fn(nexe), runs // 10, warm)
        f, d, e, n = (statistics.median(v) * 1e3 for v in (fused_ms, direct_ms, engine_ms, noop_ms))
        fb, db, eb, nb = (min(v) * 1e3 for v in (fused_ms, direct_ms, engine_ms, noop_ms))
        rows.append({"case": label, "runs": len(fused_ms), "fused_forward_us": f, "engine_run_us": e,
                     "overhead_us": f - e, "noop_custom_op_us": n, "overhead_over_noop": (f - e) / n if n else None,
                     "direct_forward_us": d, "direct_overhead_us": d - e,
                     "best": {"fused_forward_us": fb, "engine_run_us": eb, "overhead_us": fb - eb,
                              "noop_custom_op_us": nb, "direct_forward_us": db, "direct_overhead_us": db - eb}})
        logger.info("fused node %s: through MXNet %.1f us, direct %.1f us, engine %.1f us, no-op custom op %.1f us",
                    label, f, d, e, n)
        del exe, info, engine, nexe
    return rows


# ---------------------------------------------------------------------------
# 4. End to end on the model zoo
# ---------------------------------------------------------------------------


def bench_end_to_end(models: Sequence[str], batches: Sequence[int], runs: int, warmup: int,
                     busy: bool = False, control: bool = False) -> List[Dict[str, Any]]:
    """``mxtrt bench``'s measurement on model-zoo models with seeded random weights.

    Native MXNet runs with its default threads and, in a worker process, with
    ``OMP_NUM_THREADS`` set to the engines' thread count (the usable CPUs). The
    pass uses the shipped default, the measured engine rule, with a fresh plan
    cache (so the bind times the engines: ``bind_s`` holds that cold bind). With
    ``busy``, every model is measured twice: on the machine as it is, then with a
    helper process keeping one core busy (``benchmarks/busy.py``); the second
    bind finds its decisions and engines in the plan cache. With ``control``, native
    MXNet is also timed against itself bound a second time, at both thread counts
    (``bench_one``'s A/A control).
    """
    from busy import BusyCore, deadline_for

    import mxnet as mx

    from mx_trt.tools.cli.bench import bench_one, bench_steps, bench_variants
    from mx_trt.tools.cli.checkpoint import Checkpoint
    from mx_trt.tools.cli.options import backend_for, settings_from_env
    from mx_trt.tools.cli.timing import Progress
    from tests.models.test_model_zoo import imagenet_size, zoo_model

    settings = settings_from_env()
    ctx = mx.cpu()
    backend = backend_for(ctx, settings)
    conditions = ("quiet", "one core busy") if busy else ("as is",)
    progress = Progress(len(models) * len(batches) * len(conditions) * bench_variants(control)
                        * bench_steps(runs, warmup))
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="mx_trt_bench_e2e_") as cache:
            for name in models:
                sym, args, aux, size = zoo_model(name, size=imagenet_size(name))
                ckpt = Checkpoint(name, 0, sym, args, aux)
                for b in batches:
                    quiet_s = 0.0
                    for cond in conditions:
                        helper = BusyCore(seconds=deadline_for(quiet_s)) if cond == "one core busy" else None
                        busy_throughout: Optional[bool] = None
                        if helper is not None:
                            helper.start()
                            time.sleep(0.3)
                        t0 = time.perf_counter()
                        try:
                            with env_override({"MXNET_TENSORRT_CACHE_DIR": cache}):
                                r = bench_one(ckpt, {"data": (b, 3, size, size)}, b, ctx, settings, backend, runs,
                                              warmup, progress, control=control)
                        finally:
                            if helper is not None:
                                busy_throughout = helper.stop(f"{name} batch {b}")
                        quiet_s = quiet_s or time.perf_counter() - t0
                        _forget_engines()
                        row = {"model": name, "condition": cond, **r.to_json()}
                        if helper is not None:
                            row["busy_throughout"] = busy_throughout
                        rows.append(row)
                        ratios = row["ratios"]
                        logger.info("%s batch %d (%s): native %.1f ms, accelerated %.1f ms, native/acc %.2f; "
                                    "at %d threads native %s, accelerated %s, native/acc %s", name, b, cond,
                                    r.native["median_ms"], r.accelerated["median_ms"],
                                    ratios["native/accelerated"] or 0, r.threads,
                                    f"{r.native_threads['median_ms']:.1f} ms" if r.native_threads else "-",
                                    f"{r.accelerated_threads['median_ms']:.1f} ms" if r.accelerated_threads else "-",
                                    ratio_text(ratios.get("native_equal_threads/accelerated_equal_threads")))
                del sym, args, aux, ckpt
                gc.collect()
    finally:
        progress.close()
    return rows


def machine_info() -> Dict[str, Any]:
    import mxnet as mx

    from mx_trt.builder.cpus import cpu_info

    cpu, isa = cpu_info()  # an AVX2 CPU runs these models 2-4x slower than one with AVX-512 and VNNI
    info: Dict[str, Any] = {"python": platform.python_version(), "platform": platform.platform(),
                            "cpus": os.cpu_count(), "cpu": cpu, "isa": isa, "mxnet": mx.__version__,
                            "threads": os.environ.get("OMP_NUM_THREADS", "default")
                            if os.environ.get("OMP_NUM_THREADS") == os.environ.get("MXNET_TENSORRT_ORT_THREADS")
                            else f"MXNet {os.environ.get('OMP_NUM_THREADS', 'default')}, "
                                 f"ONNX Runtime {os.environ.get('MXNET_TENSORRT_ORT_THREADS', 'default')}"}
    try:
        import onnxruntime

        info["backend"] = f"onnxruntime {onnxruntime.__version__}"
    except ImportError:
        info["backend"] = "none"
    return info


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, two small models, batch 1, few runs")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench_out"), help="output folder (default bench_out/)")
    ap.add_argument("--runs", type=int, default=None, help="timed runs per end-to-end variant (default 10; quick 3)")
    ap.add_argument("--reference-max", type=int, default=20_000,
                    help="largest graph on which the O(K*V) reference runs (default 20000)")
    ap.add_argument("--only", default="partition,bind,memory,fused_node,end_to_end,busy,models,int8",
                    help="comma-separated sections to run")
    ap.add_argument("--soak-cycles", type=int, default=None, help="cycles of the soak section (default 1000; quick 100)")
    ap.add_argument("--serve-requests", type=int, default=None,
                    help="requests per concurrency in the serve section (default 2000; quick 60)")
    ap.add_argument("--models", default=None, help="comma-separated model-zoo names for end_to_end and busy")
    ap.add_argument("--batches", default=None, help="comma-separated batch sizes of end_to_end and busy "
                    "(default 1,8; quick 1)")
    ap.add_argument("--bind-model", default=None, help="model-zoo name of the bind section (default resnet50_v1; "
                    "quick: resnet18_v1)")
    ap.add_argument("--thirdparty", default=None, help="comma-separated names for the models section "
                    "(default: all of benchmarks/bench_models.py)")
    ap.add_argument("--models-batches", default=None, help="comma-separated batch sizes of the models section "
                    "(default 1)")
    ap.add_argument("--models-runs", type=int, default=None, help="timed rounds per executor and condition in the "
                    "models section (default bench_models.RUNS; quick 3)")
    ap.add_argument("--models-busy", action="store_true", help="in the models section, also time every executor "
                    "with one core kept busy")
    ap.add_argument("--control", action="store_true",
                    help="in end_to_end, busy and models, also time native MXNet against itself bound a second time, at "
                         "both thread counts (an A/A control: what the run reads between two identical executors)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None,
                    help="threads for MXNet (OMP_NUM_THREADS) and each ONNX Runtime engine "
                         "(MXNET_TENSORRT_ORT_THREADS); default: the libraries' own")
    ap.add_argument("--update-readme", metavar="BLOCK", nargs="?", const="latest", default=None,
                    help="write the tables into the BLOCK markers of benchmarks/README.md (default block: latest) "
                         "and copy the plot to benchmarks/BLOCK.png")
    args = ap.parse_args(argv)
    if args.threads is not None:
        if "mxnet" in sys.modules:
            raise SystemExit("--threads must be set before mxnet is imported")
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "MXNET_TENSORRT_ORT_THREADS"):
            os.environ[var] = str(args.threads)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S", stream=sys.stderr)
    logging.getLogger("mx_trt").setLevel(logging.WARNING)
    logging.getLogger("passes").setLevel(logging.WARNING)
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    if "models" in only and args.thirdparty:
        import bench_models

        known = bench_models._builders()
        unknown = [n for n in args.thirdparty.split(",") if n not in known]
        if unknown:  # before any section runs, not after an hour of them
            ap.error(f"--thirdparty: no model named {', '.join(unknown)} in the models section "
                     f"(it has {', '.join(known)})")
    runs = args.runs or (3 if args.quick else 10)
    os.makedirs(args.out, exist_ok=True)

    res: Dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M"), "quick": args.quick,
                           "command": " ".join(["python benchmarks/run.py", *(argv if argv is not None else sys.argv[1:])]),
                           "machine": machine_info()}
    load_before = os.getloadavg()[0]  # other processes on the machine skew the timings
    t0 = time.perf_counter()
    if "partition" in only:
        sizes = (300, 1_000, 10_000) if args.quick else SIZES
        # quick: the quadratic reference partitioner up to 1,000 operators, its time at 10,000 estimated from the
        # two (it took 11 s there on the 2-core machine)
        res["partition"] = bench_partition(sizes, min(args.reference_max, 1_000 if args.quick else args.reference_max),
                                           args.seed)
    if "bind" in only:
        res["bind"] = bench_bind(args.bind_model or ("resnet18_v1" if args.quick else "resnet50_v1"),
                                 1 if args.quick else 3)
    if "fused_node" in only:
        res["fused_node"] = bench_fused_node(200 if args.quick else 1000)
    batches = tuple(int(b) for b in args.batches.split(",")) if args.batches else (1,) if args.quick else BATCHES
    if "end_to_end" in only:
        models = args.models.split(",") if args.models else (QUICK_ZOO if args.quick else ZOO)
        res["end_to_end"] = bench_end_to_end(models, batches, runs, 1 if args.quick else 2, control=args.control)
    if "busy" in only:
        models = args.models.split(",") if args.models else (QUICK_BUSY if args.quick else BUSY)
        res["busy"] = bench_end_to_end(models, batches, runs, 1 if args.quick else 2, busy=True,
                                       control=args.control)
    if "memory" in only:
        from bench_memory import bench_memory

        res["memory"] = bench_memory(["resnet18_v1"] if args.quick else ["resnet50_v1", "fc_2gb"])
    if "soak" in only:
        from bench_soak import bench_soak

        res["soak"] = bench_soak(args.soak_cycles or (100 if args.quick else 1000))
    if "serve" in only:
        from bench_serve import bench_serve

        res["serve"] = bench_serve(args.quick, args.serve_requests or 0)
    if "models" in only:
        import bench_models

        names = args.thirdparty.split(",") if args.thirdparty else (
            bench_models.QUICK if args.quick else tuple(bench_models._builders()))
        res["models"] = bench_models.bench_models(
            names, args.models_runs or (3 if args.quick else bench_models.RUNS),
            batches=tuple(int(b) for b in args.models_batches.split(",")) if args.models_batches else (1,),
            busy=args.models_busy, control=args.control)
    if "int8" in only:
        from bench_int8 import bench_int8

        res["int8"] = bench_int8(args.quick, runs)
    res["seconds"] = time.perf_counter() - t0
    res["machine"]["loadavg_before_after"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    json_path = os.path.join(args.out, "results.json")
    with open(json_path, "w") as f:
        json.dump(res, f, indent=2)
    png_path = os.path.join(args.out, "results.png")
    wrote_png = plot(res, png_path)
    print(render_tables(res))
    if args.update_readme:
        update_readme(res, png_path if wrote_png else None, args.update_readme)
        print(f"updated {README}")
    print(f"wrote {json_path}" + (f" and {png_path}" if wrote_png else "") + f" in {res['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
