"""A bounded soak: N cycles of bind, forwards and unbind on a small model, RSS sampled as it goes.

Each variant runs in its own process (``python benchmarks/bench_soak.py
--worker VARIANT CYCLES FORWARDS``), so that the heap it measures is its own:

* ``pass``: the pass on, with a plan cache in a temporary folder (the first
  bind builds the engine, every later one loads it from disk, as a service
  that binds again and again would);
* ``native``: MXNet's own ``simple_bind`` and ``copy_params_from``, the baseline.

One cycle: ``simple_bind`` (``shared_buffer``, ``grad_req='null'``),
``FORWARDS`` forwards with their outputs read, and the executor dropped. The
first cycle's output is checked against a native executor's (fp32,
``rtol=1e-4, atol=1e-5``). RSS (``VmRSS``) is read every ``k`` cycles (20
samples in all). Growth per 1,000 cycles is the least-squares slope of RSS over
the second half of the samples: the first half is the warm-up, while glibc's
malloc arenas fill (each engine's ONNX Runtime session runs on threads of its
own, and a new thread may get a new arena, up to 8 per core; measured on the
pass: RSS settles within ~1,000 cycles, then stays flat to 3,000, and is flat
from the start with ``MALLOC_ARENA_MAX=1``). The pass also reports its engine pool (keys, live engines) and live
fused nodes at the end, with the executor gone: both must be 0.

The model: a small CNN (4 conv-BN-ReLU blocks, pooling, one FullyConnected;
input 1x3x32x32), seeded random weights.
"""
from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SHAPE = (1, 3, 32, 32)
SAMPLES = 20
RTOL, ATOL = 1e-4, 1e-5


def _rss_kb() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def _model() -> Any:
    import mxnet as mx
    import numpy as np

    h = mx.sym.var("data")
    for i, ch in enumerate((16, 32, 32, 64)):
        h = mx.sym.Convolution(h, num_filter=ch, kernel=(3, 3), pad=(1, 1), name=f"conv{i}")
        h = mx.sym.BatchNorm(h, fix_gamma=False, name=f"bn{i}")
        h = mx.sym.Activation(h, act_type="relu", name=f"relu{i}")
        if i % 2:
            h = mx.sym.Pooling(h, kernel=(2, 2), stride=(2, 2), pool_type="max", name=f"pool{i}")
    sym = mx.sym.FullyConnected(mx.sym.flatten(h), num_hidden=10, name="fc")
    rng = np.random.RandomState(0)
    arg_shapes, _, aux_shapes = sym.infer_shape(data=SHAPE)
    args = {n: mx.nd.array(rng.uniform(-0.3, 0.3, s)) for n, s in zip(sym.list_arguments(), arg_shapes) if n != "data"}
    aux = {n: mx.nd.array(rng.uniform(0.5, 1.5, s) if "var" in n else rng.uniform(-0.1, 0.1, s))
           for n, s in zip(sym.list_auxiliary_states(), aux_shapes)}
    return sym, args, aux


def _slope_per_1000(points: Sequence[Sequence[float]]) -> float:
    """Least-squares slope of (cycle, KB) points, in KB per 1,000 cycles (0 with fewer than 2 points)."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mx_ = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    den = sum((p[0] - mx_) ** 2 for p in points)
    return 0.0 if den == 0 else 1000.0 * sum((p[0] - mx_) * (p[1] - my) for p in points) / den


def worker(variant: str, cycles: int, forwards: int) -> Dict[str, Any]:
    """Run the soak in this process and return its measurements."""
    os.environ["MXNET_USE_TENSORRT"] = "1" if variant == "pass" else "0"
    sys.path.insert(0, ROOT)  # this checkout's mx_trt
    import mxnet as mx
    import numpy as np

    import mx_trt
    from mx_trt.builder import engines
    from mx_trt.frontends.hook import disabled
    from mx_trt.runtime import fused_op

    sym, args, aux = _model()
    x = mx.nd.array(np.random.RandomState(1).uniform(-1, 1, SHAPE))
    with disabled():
        ref = sym.simple_bind(mx.cpu(), data=SHAPE, grad_req="null")
    ref.copy_params_from(args, aux)
    ref.arg_dict["data"][:] = x
    want = ref.forward(is_train=False)[0].asnumpy()
    del ref
    every = max(1, cycles // SAMPLES)
    samples: List[List[float]] = []
    bind_s = forward_s = 0.0
    accelerated = engines_per_bind = 0
    gc.collect()
    rss_start = _rss_kb()
    t_all = time.perf_counter()
    for i in range(cycles):
        t = time.perf_counter()
        exe = sym.simple_bind(mx.cpu(), data=SHAPE, shared_buffer={**args, **aux}, grad_req="null")
        if variant == "native":
            exe.copy_params_from(args, aux)
        bind_s += time.perf_counter() - t
        info = mx_trt.bind_info(exe)
        accelerated += info is not None
        engines_per_bind = len(info.engines) if info is not None else 0
        del info
        exe.arg_dict["data"][:] = x
        t = time.perf_counter()
        for _ in range(forwards):
            out = exe.forward(is_train=False)[0].asnumpy()
        forward_s += time.perf_counter() - t
        if i == 0:
            np.testing.assert_allclose(out, want, rtol=RTOL, atol=ATOL)
        del exe
        if (i + 1) % every == 0 or i + 1 == cycles:
            samples.append([i + 1, _rss_kb()])
    total_s = time.perf_counter() - t_all
    after_warmup = [p for p in samples if p[0] > cycles // 2] or samples
    keys, live = engines.pool_size()
    return {
        "variant": variant, "cycles": cycles, "forwards_per_cycle": forwards, "accelerated_binds": accelerated,
        "engines_per_bind": engines_per_bind,
        "binds_per_s": round(cycles / bind_s, 1) if bind_s else None,
        "forwards_per_s": round(cycles * forwards / forward_s, 1) if forward_s else None,
        "cycles_per_s": round(cycles / total_s, 1),
        "rss_start_mb": round(rss_start / 1024, 1), "rss_end_mb": round(samples[-1][1] / 1024, 1),
        "rss_max_mb": round(max(p[1] for p in samples) / 1024, 1),
        "growth_kb_per_1000": round(_slope_per_1000(after_warmup), 1),
        "malloc_arena_max": os.environ.get("MALLOC_ARENA_MAX", "default"),
        "pool_keys_end": keys, "pool_engines_end": live, "fused_nodes_end": fused_op.registry_size(),
        "samples_kb": samples,
    }


def _spawn(variant: str, cycles: int, forwards: int, env: Dict[str, str]) -> Dict[str, Any]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("MXNET_TENSORRT")}
    full.update(env)
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", variant, str(cycles), str(forwards)],
                          cwd=ROOT, env=full, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"soak worker {variant} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def bench_soak(cycles: int, forwards: int = 5) -> List[Dict[str, Any]]:
    """The soak natively and with the pass (warm plan cache), each in a fresh process."""
    rows = [_spawn("native", cycles, forwards, {})]
    with tempfile.TemporaryDirectory(prefix="mx_trt_bench_soak_") as cache:
        rows.append(_spawn("pass", cycles, forwards, {"MXNET_TENSORRT_CACHE_DIR": cache}))
    return rows


def render(rows: Sequence[Dict[str, Any]]) -> str:
    """The soak as a plain-text table."""
    head = ["variant", "cycles", "binds/s", "forwards/s", "RSS start MB", "end MB", "max MB",
            "growth KB/1000 cycles", "pool keys/engines at end"]
    body = [[r["variant"], str(r["cycles"]), f"{r['binds_per_s']}", f"{r['forwards_per_s']}", f"{r['rss_start_mb']}",
             f"{r['rss_end_mb']}", f"{r['rss_max_mb']}", f"{r['growth_kb_per_1000']}",
             f"{r['pool_keys_end']}/{r['pool_engines_end']}" if r["variant"] == "pass" else "-"] for r in rows]
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
             for r in [head, *body]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--worker":
        print(json.dumps(worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))))
    else:
        result = bench_soak(int(sys.argv[1]) if len(sys.argv) > 1 else 1000)
        print(render(result))
