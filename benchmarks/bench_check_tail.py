"""The slowest forwards of an accelerated executor under its run-time check: what its probes cost one forward.

Usage::

    .venv/bin/python benchmarks/bench_check_tail.py [--models resnet18_v1] [--forwards 600] [--checked]

For each model-zoo network (seeded random weights, ImageNet size, batch 1) one
accelerated executor is bound with the measured engine rule and the run-time
check on, over a fresh plan cache, and its forwards are timed one by one, each
waited for. ``--checked`` makes the bind keep its first candidate untimed (the
path of a model of seconds a forward: ``checked`` decisions), so that every
other CPU backend's engine is an *alternate* that the check builds when its first
probe is due. Printed per model: the median, 99th percentile and slowest
forward, the side that served the slowest five, the forwards served while an
alternate was being built beside them, and the check's own statistics.

A benchmark of the latencies a server sees: the other benchmarks leave the
check's first probes out of their timed runs, as they leave out MXNet's first
forward.

``--against-native BLOCK [--busy]`` measures instead what the check costs over
a long run, which runs of 30 timed forwards cannot show (its probes come every
few hundred forwards): native MXNet and an accelerated executor, bound with the
engine rule of the environment, take turns of BLOCK forwards each, and the ratio
of their means is printed. Run it with ``OMP_NUM_THREADS`` set to the CPUs for
equal threads, where the two are closest.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def _zoo(name: str) -> Tuple[Any, Dict[str, Any], Tuple[int, ...], Any]:
    """Model-zoo network ``name`` (seeded random weights) at ImageNet size and batch 1: its symbol, its weights
    (arguments and auxiliary states merged), its input shape and a seeded input."""
    import mxnet as mx

    from tests.models.test_model_zoo import imagenet_size, zoo_model

    sym, args, aux, size = zoo_model(name, size=imagenet_size(name))
    shape = (1, 3, size, size)
    return sym, {**args, **aux}, shape, mx.nd.array(np.random.RandomState(0).rand(*shape).astype("float32"))


def _bind(sym: Any, weights: Dict[str, Any], shape: Tuple[int, ...], env: Dict[str, str]) -> Any:
    """``sym.simple_bind`` for inference with ``env`` set during the bind (mx_trt reads it there)."""
    import mxnet as mx

    from envscope import env_override

    with env_override(env):
        return sym.simple_bind(mx.cpu(), data=shape, grad_req="null", shared_buffer=weights)


def tail(name: str, forwards: int, checked: bool) -> Dict[str, Any]:
    """Time ``forwards`` forwards of one accelerated executor of ``name``; see the module docstring."""
    from mx_trt import bind_info, runtime_stats
    from mx_trt.pipeline import measure

    sym, weights, shape, x = _zoo(name)
    saved = measure.LONG_RUN_S
    with tempfile.TemporaryDirectory(prefix="mx_trt_tail_") as cache:
        if checked:
            measure.LONG_RUN_S = 0.0  # every first forward is "long": the first candidate is kept untimed
        try:
            exe = _bind(sym, weights, shape, {"MXNET_USE_TENSORRT": "1", "MXNET_TENSORRT_ENGINE_RULE": "measured",
                                              "MXNET_TENSORRT_RUNTIME_CHECK": "1", "MXNET_TENSORRT_CACHE_DIR": cache})
        finally:
            measure.LONG_RUN_S = saved
        info = bind_info(exe)
        decisions = [d.text for d in info.decisions.values()]
        times: List[float] = []
        sides: List[str] = []
        making: List[bool] = []
        for _ in range(forwards):
            before = dict((runtime_stats(exe) or {}).get("served", {}))
            t = time.perf_counter()
            exe.forward(is_train=False, data=x)
            exe.outputs[0].wait_to_read()
            times.append((time.perf_counter() - t) * 1e3)
            stats = runtime_stats(exe) or {}
            served = stats.get("served", {})
            sides.append(next((s for s in served if served[s] > before.get(s, 0)), "engines"))
            making.append(bool(stats.get("making")))
    ms = np.asarray(times)
    worst = [int(i) for i in np.argsort(ms)[::-1][:5]]
    during = [t for t, m in zip(times, making) if m]
    return {"model": name, "decisions": decisions, "forwards": forwards, "median_ms": float(np.median(ms)),
            "p99_ms": float(np.percentile(ms, 99)), "max_ms": float(ms.max()),
            "slowest": [(i, round(times[i], 1), sides[i]) for i in worst],
            "while_making": {"forwards": len(during), "max_ms": max(during) if during else None,
                             "median_ms": statistics.median(during) if during else None},
            "check": {k: v for k, v in (runtime_stats(exe) or {}).items()
                      if k in ("serving", "served", "probes", "switches", "dropped")}}


def against_native(name: str, forwards: int, block: int, busy: bool) -> Dict[str, Any]:
    """What the check costs over a long run: ``forwards`` forwards each of native MXNet and of an accelerated
    executor (run-time check on), in alternating blocks of ``block``, batch 1; with ``busy``, a helper process
    keeps one core busy throughout. Both use this process's threads: run it with ``OMP_NUM_THREADS`` set to
    the CPUs for equal threads."""
    from busy import BusyCore, deadline_for
    from mx_trt import runtime_stats
    from mx_trt.tools.cli.timing import forward_fn, measure

    sym, weights, shape, x = _zoo(name)
    exes = {}
    with tempfile.TemporaryDirectory(prefix="mx_trt_tail_") as cache:
        for side, env in (("native", {"MXNET_USE_TENSORRT": "0"}),
                          ("accelerated", {"MXNET_USE_TENSORRT": "1", "MXNET_TENSORRT_RUNTIME_CHECK": "1",
                                           "MXNET_TENSORRT_CACHE_DIR": cache})):
            exes[side] = _bind(sym, weights, shape, env)
            x.copyto(exes[side].arg_dict["data"])

        def run(side: str, n: int) -> List[float]:
            return measure(forward_fn(exes[side]), n, 0)  # ms

        # Warm-up: MXNet's first forwards, the check's first probes; their medians size the helper's deadline.
        quiet_s = sum(statistics.median(run(side, 200)) for side in exes) / 1e3 * forwards
        times: Dict[str, List[float]] = {"native": [], "accelerated": []}
        t0 = time.perf_counter()
        helper = BusyCore(seconds=deadline_for(quiet_s)).start() if busy else None
        busy_throughout = None
        try:
            for i in range(max(1, forwards // block)):
                for side in (("native", "accelerated") if i % 2 == 0 else ("accelerated", "native")):
                    times[side] += run(side, block)
        finally:
            if helper is not None:
                busy_throughout = helper.stop(f"{name} against native")
        check = runtime_stats(exes["accelerated"]) or {}
    mean = {k: statistics.fmean(v) for k, v in times.items()}
    return {"model": name, "forwards": len(times["native"]), "block": block, "busy": busy,
            "busy_throughout": busy_throughout,
            "seconds": time.perf_counter() - t0, "mean_ms": mean,
            "native/accelerated": mean["native"] / mean["accelerated"],
            "check": {k: v for k, v in check.items() if k in ("serving", "served", "probes", "switches")}}


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--models", default="resnet18_v1", help="comma-separated model-zoo names")
    ap.add_argument("--forwards", type=int, default=600)
    ap.add_argument("--checked", action="store_true", help="keep the first candidate untimed: the others are "
                    "alternates built by the run-time check")
    ap.add_argument("--against-native", type=int, metavar="BLOCK", default=0,
                    help="instead: time --forwards forwards each of native MXNet and the accelerated executor in "
                    "alternating blocks of BLOCK, and print the ratio of their means (the check's long-run cost)")
    ap.add_argument("--busy", action="store_true", help="with --against-native: one core kept busy throughout")
    args = ap.parse_args(argv)
    for name in args.models.split(","):
        if args.against_native:
            r = against_native(name, args.forwards, args.against_native, args.busy)
            busy = (" (one core busy)" if r["busy_throughout"] else " (one core busy for part of it only: the helper "
                    "ended first)") if args.busy else ""
            print(f"{name}{busy}: {r['forwards']} forwards a side in blocks of "
                  f"{r['block']}: native {r['mean_ms']['native']:.2f} ms, accelerated "
                  f"{r['mean_ms']['accelerated']:.2f} ms (means), native/accelerated {r['native/accelerated']:.3f}; "
                  f"run-time check: {r['check']}")
            continue
        r = tail(name, args.forwards, args.checked)
        print(f"{name}: {r['decisions']}")
        print(f"  {r['forwards']} forwards: median {r['median_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, "
              f"slowest {r['max_ms']:.1f} ms; slowest five (index, ms, side): {r['slowest']}")
        w = r["while_making"]
        if w["forwards"]:
            print(f"  served while an alternate was built beside them: {w['forwards']} forwards, "
                  f"median {w['median_ms']:.1f} ms, slowest {w['max_ms']:.1f} ms")
        print(f"  run-time check: {r['check']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
