"""ONNX Runtime session configurations on a quiet and on a busy machine, side by side in one process.

Configurations: ``t0`` is the engines' default thread count (the CPUs the
process may use, ``mx_trt.builder.cpus``), ``t1``/``t2`` one and two intra-op
threads, ``spin`` lets ONNX Runtime's threads spin after a run (the engines turn
it off), ``dyn4``/``dyn1`` set ``session.dynamic_block_base`` (dynamic block
sizes in its parallel loops). Run under ``taskset -c 0`` to see a process
allowed one CPU.

Usage::

    python benchmarks/ort_threads_probe.py [--model resnet50_v1] [--batch 1] [--runs 8] [--rounds 4]

Every configuration builds the whole model as one ONNX Runtime session (the
pass's own export), then the sessions run in alternating rounds, first with the
machine as it is, then with a helper process spinning (bounded in time, it stops
by itself). Native MXNet (this process's threads) runs in the same rounds.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any, Callable, Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import numpy as np  # noqa: E402

from busy import BusyCore  # noqa: E402

CONFIGS: Dict[str, Dict[str, str]] = {
    "t0 (default)": {},
    "t0 spin": {"session.intra_op.allow_spinning": "1"},
    "t0 dyn4": {"session.dynamic_block_base": "4"},
    "t0 dyn1": {"session.dynamic_block_base": "1"},
    "t1": {"threads": "1"},
    "t2": {"threads": "2"},
    "t2 dyn4": {"threads": "2", "session.dynamic_block_base": "4"},
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet50_v1")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    args = ap.parse_args()
    import mxnet as mx

    from mx_trt.builder.backends import onnxruntime as ortb
    from mx_trt.builder.engines import clear_pool
    from envscope import env_override
    from mx_trt.tools.cli.binding import WholeModelEngine, bind_accelerated, bind_native
    from mx_trt.tools.cli.checkpoint import Checkpoint
    from mx_trt.tools.cli.options import backend_for, settings_from_env
    from mx_trt.tools.cli.timing import forward_fn
    from tests.models.test_model_zoo import imagenet_size, zoo_model

    sym, a, x, size = zoo_model(args.model, size=imagenet_size(args.model))
    ckpt = Checkpoint(args.model, 0, sym, a, x)
    shape = {"data": (args.batch, 3, size, size)}
    data = np.random.RandomState(0).uniform(-1, 1, shape["data"]).astype("float32")
    ctx = mx.cpu()
    native = bind_native(ckpt, shape, ctx)
    native.arg_dict["data"][:] = data
    fns: Dict[str, Callable[[], None]] = {"native": forward_fn(native)}
    keep: List[Any] = []
    original = ortb._session_options
    for label in args.configs.split(","):
        cfg = dict(CONFIGS[label])
        threads = cfg.pop("threads", "0")

        def patched(optimize: bool = True, threads: int = 0, cfg: Dict[str, str] = cfg) -> Any:
            so = original(optimize, threads)
            for k, v in cfg.items():
                so.add_session_config_entry(k, v)
            return so

        ortb._session_options = patched
        clear_pool()  # each configuration builds its own session
        with env_override({"MXNET_TENSORRT_CACHE_DIR": "", "MXNET_TENSORRT_ENGINE_RULE": "always",
                           "MXNET_TENSORRT_ORT_THREADS": threads}):
            settings = settings_from_env()
            exe, info = bind_accelerated(ckpt, shape, ctx, settings, backend_for(ctx, settings))
        ortb._session_options = original
        exe.arg_dict["data"][:] = data
        keep.append((exe, info))
        fns[f"acc {label}"] = forward_fn(exe)
        eng = WholeModelEngine.from_bind(info)
        if eng is not None:
            eng.set_inputs({"data": data})
            keep.append(eng)
            fns[f"eng {label}"] = eng.run
    for fn in fns.values():
        fn()
    print(f"{args.model} batch {args.batch}, cpus {sorted(os.sched_getaffinity(0))}, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'default')}, load {os.getloadavg()[0]:.2f}")
    for cond in ("quiet", "busy"):
        times: Dict[str, List[float]] = {k: [] for k in fns}
        busy = BusyCore(seconds=600) if cond == "busy" else None
        if busy:
            busy.start()
            time.sleep(0.5)
        try:
            for _ in range(args.rounds):
                for k, fn in fns.items():
                    fn()
                    for _ in range(max(1, args.runs // args.rounds)):
                        t = time.perf_counter()
                        fn()
                        times[k].append((time.perf_counter() - t) * 1e3)
        finally:
            if busy:
                busy.stop()
        nat = statistics.median(times["native"])
        print(f"-- {cond} (load {os.getloadavg()[0]:.2f})")
        for k, v in times.items():
            med = statistics.median(v)
            print(f"{k:24s} {med:8.2f} ms  min {min(v):8.2f}  native/this {nat / med:5.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
