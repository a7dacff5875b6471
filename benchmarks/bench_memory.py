"""Memory of one bind: peak RSS and RSS after bind, each variant in its own process.

A worker process (``python benchmarks/bench_memory.py WORKER_ARGS``) builds the
model's weights, reads its RSS (the baseline: mxnet imported, weights held),
binds as the design's example does (``simple_bind`` with ``shared_buffer`` and
``grad_req='null'``; natively also ``copy_params_from``, which the aux states
need), reads RSS after bind, runs three forwards, and prints one JSON line with
its peak (``VmHWM``, reset just before the bind). The parent compares variants:

* ``native``: the pass off;
* ``pass``: the pass on, plan cache off (a cold build);
* ``pass, cold cache``: the pass on, building its engines into an empty plan
  cache (a model's first bind, as by default);
* ``pass, warm cache``: the pass on, its engines loaded from the plan cache that
  the cold process filled.

Models: ``resnet50_v1`` (model zoo, batch 1, 224x224, 98 MB of weights) and
``fc_2gb`` (one FullyConnected of 2.05 GB of weights, batch 1).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

#: FullyConnected of this many outputs over 1024 inputs: 2.05 GB of float32 weights.
FC_HIDDEN = 500_000


def _status(key: str) -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) // 1024
    return -1


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _model(name: str) -> Tuple[Any, Dict[str, Any], Dict[str, Any], Tuple[int, ...]]:
    import mxnet as mx

    if name == "fc_2gb":
        data = mx.sym.var("data")
        sym = mx.sym.FullyConnected(data, num_hidden=FC_HIDDEN, name="fc")
        args = {"fc_weight": mx.nd.random.uniform(-0.03, 0.03, (FC_HIDDEN, 1024)),
                "fc_bias": mx.nd.random.uniform(-0.03, 0.03, (FC_HIDDEN,))}
        return sym, args, {}, (1, 1024)
    from tests.models.test_model_zoo import imagenet_size, zoo_model

    sym, args, aux, size = zoo_model(name, size=imagenet_size(name))
    return sym, args, aux, (1, 3, size, size)


def worker(variant: str, model: str) -> Dict[str, Any]:
    """Run one variant in this process and return its measurements (MB, seconds)."""
    os.environ["MXNET_USE_TENSORRT"] = "0" if variant == "native" else "1"
    sys.path.insert(0, ROOT)  # this checkout's mx_trt, as the runner measures it
    import mxnet as mx

    import mx_trt  # noqa: F401  (hooks now, whatever version a start-up hook would load)

    sym, args, aux, shape = _model(model)
    mx.nd.waitall()
    base = _status("VmRSS:")
    exact = _reset_peak()
    t = time.perf_counter()
    exe = sym.simple_bind(mx.cpu(), data=shape, shared_buffer={**args, **aux}, grad_req="null")
    if variant == "native":
        exe.copy_params_from(args, aux)
    mx.nd.waitall()
    bind_s = time.perf_counter() - t
    after_bind = _status("VmRSS:")
    exe.arg_dict["data"][:] = 0.5
    for _ in range(3):
        exe.forward(is_train=False)
        exe.outputs[0].wait_to_read()
    return {"variant": variant, "model": model, "base_mb": base, "after_bind_mb": after_bind,
            "peak_mb": _status("VmHWM:"), "end_mb": _status("VmRSS:"), "bind_s": round(bind_s, 3),
            "peak_is_bind_and_forward": exact, "accelerated": hasattr(exe, "_mx_trt")}


def _spawn(variant: str, model: str, env: Dict[str, str]) -> Dict[str, Any]:
    full = dict(os.environ)
    full.update(env)
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", variant, model],
                          cwd=ROOT, env=full, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"memory worker {variant} {model} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def bench_memory(models: Sequence[str]) -> List[Dict[str, Any]]:
    """Each model: native, pass (no cache), pass with a cold and a warm cache, each in a fresh process."""
    out: List[Dict[str, Any]] = []
    for model in models:
        rows: Dict[str, Dict[str, Any]] = {}
        rows["native"] = _spawn("native", model, {})
        rows["pass"] = _spawn("pass", model, {"MXNET_TENSORRT_CACHE_DIR": ""})
        with tempfile.TemporaryDirectory(prefix="mx_trt_bench_mem_") as cache:
            rows["pass, cold cache"] = _spawn("pass", model, {"MXNET_TENSORRT_CACHE_DIR": cache})  # fills it
            rows["pass, warm cache"] = _spawn("pass", model, {"MXNET_TENSORRT_CACHE_DIR": cache})
            rows["pass, warm cache"]["cache_mb"] = round(_folder_bytes(cache) / 2 ** 20, 1)
        native = rows["native"]
        for label, r in rows.items():
            r["label"] = label
            over_native = native["peak_mb"] - native["base_mb"]
            r["peak_over_base_mb"] = r["peak_mb"] - r["base_mb"]
            r["peak_ratio"] = round((r["peak_over_base_mb"] + native["base_mb"]) / native["peak_mb"], 3)
            r["after_bind_over_native_mb"] = (r["after_bind_mb"] - r["base_mb"]) - (native["after_bind_mb"] - native["base_mb"])
            r["native_peak_over_base_mb"] = over_native
            out.append(r)
    return out


def _folder_bytes(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        print(json.dumps(worker(sys.argv[2], sys.argv[3])))
    else:
        print(json.dumps(bench_memory(sys.argv[1:] or ["resnet50_v1"]), indent=1))
