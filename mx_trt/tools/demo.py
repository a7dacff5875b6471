"""The main job: ResNet-50 v1 bound natively and with the pass, side by side.

``python -m mx_trt.tools.demo [--model resnet50_v1] [--batch 1] [--runs 20] [--out demo_out]``

Builds the model from MXNet's model zoo with seeded random weights (no download),
saves a checkpoint, loads it back as a user would, binds it with
the switch off and on in one process (``hook.disabled``/``hook.forced``, as
``MXNET_USE_TENSORRT`` would, without writing the environment), and prints the subgraphs, the
operator coverage, the operators left native with their reasons, the largest
absolute difference of the outputs, and the median latency of both, with
native MXNet also timed at ``OMP_NUM_THREADS`` = the CPUs the process may use
(in a second process, in the same alternating rounds).
"""
from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time
from typing import Any, Dict, List, Tuple

import numpy as np

from mx_trt.frontends import hook
from mx_trt.frontends.contrib import bind_info
from mx_trt.builder.cpus import engine_threads
from mx_trt.builder.engines import clear_pool
from mx_trt.settings import Settings
from mx_trt.tools.cli.timing import forward_fn, measure
from mx_trt.tools.native_process import equal_thread_workers


def merge_dicts(*dicts: Dict[str, Any]) -> Dict[str, Any]:
    """Merge several dictionaries into one (the design's helper)."""
    result: Dict[str, Any] = {}
    for d in dicts:
        result.update(d)
    return result


def make_checkpoint(model: str, prefix: str, seed: int = 0, image: int = 224) -> Tuple[str, int]:
    """Save ``model`` from the model zoo with seeded random weights as ``prefix``-symbol.json/-0000.params."""
    import mxnet as mx
    from mxnet.gluon.model_zoo import vision

    mx.random.seed(seed)
    np.random.seed(seed)
    net = vision.get_model(model, pretrained=False)
    net.initialize(mx.init.Xavier(magnitude=2.0), ctx=mx.cpu())
    net.hybridize()
    net(mx.nd.zeros((1, 3, image, image)))
    # Random, non-trivial BatchNorm statistics so that the test is not vacuous.
    rng = np.random.RandomState(seed)
    for name, p in net.collect_params().items():
        if name.endswith("running_mean"):
            p.set_data(mx.nd.array(rng.uniform(-0.1, 0.1, p.shape)))
        elif name.endswith("running_var"):
            p.set_data(mx.nd.array(rng.uniform(0.5, 1.5, p.shape)))
        elif name.endswith("gamma"):
            p.set_data(mx.nd.array(rng.uniform(0.5, 1.5, p.shape)))
    os.makedirs(os.path.dirname(prefix) or ".", exist_ok=True)
    net.export(prefix, epoch=0)
    return prefix, 0


def main(argv: List[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50_v1")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--out", default="demo_out")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    logging.getLogger("mx_trt").setLevel(logging.INFO)

    import mxnet as mx

    image = 299 if args.model.startswith("inception") else 224
    prefix, epoch = make_checkpoint(args.model, os.path.join(args.out, args.model), args.seed, image)
    sym, arg_params, aux_params = mx.model.load_checkpoint(prefix, epoch)
    shape = (args.batch, 3, image, image)
    x = np.random.RandomState(args.seed + 1).uniform(-1, 1, shape).astype("float32")
    ctx = mx.cpu()

    results = {}
    executors = {}
    for label, switch in (("native", hook.disabled), ("mx_trt", hook.forced)):
        t = time.perf_counter()
        with switch():
            exe = sym.simple_bind(ctx=ctx, data=shape, shared_buffer=merge_dicts(arg_params, aux_params),
                                  grad_req="null")
        bind_s = time.perf_counter() - t
        if label == "native":
            exe.copy_params_from(arg_params, aux_params)
        exe.arg_dict["data"][:] = x
        exe.forward(is_train=False)
        results[label] = (exe.outputs[0].asnumpy(), bind_s)
        executors[label] = exe

    info = bind_info(executors["mx_trt"])
    print(f"\n== {args.model}, batch {args.batch}, backend {info.backend if info else 'none'} ==")
    if info is None:
        print("the pass did not run (see the warning above)")
        return 1
    plan = info.plan
    g = plan.graph
    inside, total = plan.op_counts()
    print(f"subgraphs: {len(info.engines)}")
    for sg in plan.partition.subgraphs:
        decision = info.decisions.get(sg.name)
        state = "engine" if sg.name not in info.native_failures else f"native ({info.native_failures[sg.name]})"
        if decision is not None and decision.engine is not None:
            state += f" ({decision.text})"
        print(f"  {sg.name}: {len(sg.nodes)} ops -> {state}")
    print(f"op coverage: {inside}/{total} operators inside engines ({100.0 * inside / max(total, 1):.1f}%)")
    native = plan.partition.native
    if native:
        print("operators left native:")
        by_op: Dict[str, List[str]] = {}
        for nid, reason in sorted(native.items()):
            by_op.setdefault(f"{g.nodes[nid].op}: {reason}", []).append(g.nodes[nid].name)
        for key, names in sorted(by_op.items()):
            print(f"  {key} ({len(names)}: {', '.join(names[:3])}{'...' if len(names) > 3 else ''})")
    else:
        print("operators left native: none")
    ref, got = results["native"][0], results["mx_trt"][0]
    print(f"largest absolute difference of the outputs: {float(np.abs(ref - got).max()):.3g} "
          f"(output range {float(np.abs(ref).max()):.3g})")
    # A second accelerated bind, as a new process would do it: engines come from the plan cache.
    clear_pool()
    t = time.perf_counter()
    with hook.forced():
        again = sym.simple_bind(ctx=ctx, data=shape, shared_buffer=merge_dicts(arg_params, aux_params),
                                grad_req="null")
    warm_s = time.perf_counter() - t
    warm = bind_info(again)
    loads = warm.loads if warm is not None else 0
    cached = f"{loads} engine(s) from the plan cache" if loads else "plan cache off (MXNET_TENSORRT_CACHE_DIR empty)"
    print(f"bind: native {results['native'][1]:.2f} s, mx_trt {results['mx_trt'][1]:.2f} s "
          f"({info.builds} built, {info.loads} loaded), mx_trt again {warm_s:.2f} s ({cached})")
    del again
    settings = Settings.from_env()
    lat = _latencies(executors, sym, merge_dicts(arg_params, aux_params), shape, x, args.runs, settings.ort_threads)
    threads = settings.omp_threads if settings.omp_threads is not None else "unset"
    print(f"median latency over {args.runs} runs, in alternating rounds (the machine may be shared: ratios count):")
    print(f"  native, MXNet's own threads (OMP_NUM_THREADS={threads}): {lat['native']:.1f} ms "
          f"(native/mx_trt = {lat['native'] / lat['mx_trt']:.2f}x)")
    print(f"  mx_trt: {lat['mx_trt']:.1f} ms")
    eq, acc_eq = lat.get("native_equal"), lat.get("mx_trt_equal")
    if eq is not None:
        print(f"  at OMP_NUM_THREADS={lat['threads']:.0f} (the CPUs this process may use; worker processes): "
              f"native {eq:.1f} ms" + (f", mx_trt {acc_eq:.1f} ms (native/mx_trt = {eq / acc_eq:.2f}x)"
                                       if acc_eq is not None else ""))
    return 0


def _latencies(executors: Dict[str, Any], sym: Any, params: Dict[str, Any], shape: Tuple[int, ...], x: np.ndarray,
               runs: int, ort_threads: int = 0, rounds: int = 5) -> Dict[str, float]:
    """Median ms of each executor, and of native and accelerated MXNet at the engines' thread count
    (``ort_threads``, 0: the usable CPUs; worker processes: MXNet fixes its thread count at import),
    in alternating rounds."""
    threads = ort_threads or engine_threads()
    times: Dict[str, List[float]] = {k: [] for k in executors}
    by_side, _ = equal_thread_workers(sym, params, {"data": shape}, {"data": x}, threads=threads)
    workers = {{"native": "native_equal", "accelerated": "mx_trt_equal"}[side]: w for side, w in by_side.items()}
    times.update({k: [] for k in workers})
    try:
        per = max(1, runs // rounds)
        for r in range(rounds):
            for k, e in executors.items():
                times[k] += measure(forward_fn(e), per, 3 if r == 0 else 1)
            for k, w in workers.items():
                times[k] += w.run(per, 3 if r == 0 else 1)
    finally:
        for w in workers.values():
            w.close()
    out = {k: statistics.median(v) for k, v in times.items()}
    out["threads"] = float(threads)
    return out


if __name__ == "__main__":
    sys.exit(main())
