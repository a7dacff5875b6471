"""INT8 and bf16 engines against fp32 engines and against MXNet 1.9.1's own oneDNN INT8 and bf16 (section ``int8``).

Two parts, everything in this process and side by side:

* **accuracy**: the digits CNN (``tests/models/digits.py``, trained here) on its
  held-out test split: top-1 of native MXNet, of the fp32, fp16 and int8 engines
  (calibrated with :func:`mx_trt.calibrate` on the calibration split), and of
  MXNet's own INT8 (``mx.contrib.quantization.quantize_model_mkldnn`` calibrated on
  the same split, then ``get_backend_symbol("MKLDNN_QUANTIZE")``), with the time
  each calibration took.
* **speed**: model-zoo networks (``tests/models/normalized.py``: random weights,
  BatchNorm statistics of image-like inputs, so that int8 meets realistic ranges),
  at batch 1 and 8: the fp32 engine, the int8 engine, native MXNet fp32 and MXNet's
  oneDNN INT8, and where a backend computes in bfloat16 here (:func:`bf16_backend`) the
  bf16 engine and MXNet's own bf16 (``mx.contrib.amp.convert_symbol(..., target_dtype="bfloat16")``), timed in alternating rounds whose order rotates, with a pause after
  each MXNet variant so that its spinning OpenMP threads have stopped before the
  next one is timed (median ms and the ratios), plus the
  centred cosine similarity of each variant's logits to native fp32 (the fp16
  engine's too, not timed: how much rounding alone moves these random networks).

MXNet's quantized symbol is bound with ``type_dict={"data": float32}``: without it
``simple_bind`` declares every argument float32, including the int8 weights the
quantization wrote, and fails with "Type inconsistent, Provided = float32,
inferred type = int8" (``mx.mod.Module`` passes only the data types, so it binds).
"""
from __future__ import annotations

import gc
import logging
import os
import statistics
import tempfile
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

logger = logging.getLogger("benchmarks.int8")

#: (model, input side) of the speed part.
MODELS = (("resnet50_v1", 224), ("mobilenetv2_1.0", 224))
QUICK_MODELS = (("resnet18_v1", 64),)
BATCHES = (1, 8)
#: The target: int8 engines at least this much faster than fp32 engines (ResNet-50, batch 8, equal threads).
TARGET_INT8_SPEEDUP = 1.8
CALIB_BATCHES = 4  # batches of 8 images for the zoo models


def _native_bind(sym: Any, args: Mapping[str, Any], aux: Mapping[str, Any], shape: Tuple[int, ...],
                 type_dict: Optional[Dict[str, Any]] = None) -> Any:
    import mxnet as mx

    from mx_trt.frontends import hook

    with hook.disabled():
        exe = sym.simple_bind(mx.cpu(), data=shape, grad_req="null", type_dict=type_dict)
    exe.copy_params_from(dict(args), dict(aux), allow_extra_params=True)
    return exe


def _engine_bind(sym: Any, args: Mapping[str, Any], aux: Mapping[str, Any], shape: Tuple[int, ...], precision: str,
                 table: str = "", engine_rule: Optional[str] = None, backend: Optional[str] = None) -> Any:
    """An executor with the pass at ``precision`` (plan cache off, so every engine is built here), on ``backend``
    (``None``: the environment's)."""
    import mxnet as mx

    import mx_trt
    from envscope import env_override

    env = {"MXNET_TENSORRT_PRECISION": precision, "MXNET_TENSORRT_CALIBRATION": table or None,
           "MXNET_TENSORRT_CACHE_DIR": "", "MXNET_TENSORRT_USE_FP16": None, "MXNET_TENSORRT_ENGINE_RULE": engine_rule}
    if backend is not None:
        env["MXNET_TENSORRT_BACKEND"] = backend
    with env_override(env):
        exe = mx_trt.tensorrt_bind(sym, mx.cpu(), {**args, **aux}, data=shape)
    info = mx_trt.bind_info(exe)
    if info is None or not info.engines:
        raise RuntimeError(f"{precision}: the pass built no engine")
    return exe


def bf16_backend() -> Tuple[Optional[str], str]:
    """The first CPU backend that builds bf16 engines here (``None``: none does), and why the others do not."""
    from mx_trt.builder.backends import candidate_backends

    reasons = []
    for b in candidate_backends("cpu"):
        why = b.precision_reason("bf16")
        if why is None:
            return b.name, "; ".join(reasons)
        reasons.append(why)
    return None, "; ".join(reasons)


def mxnet_bf16(sym: Any) -> Any:
    """MXNet 1.9.1's own bf16 on the CPU: AMP's cast layers around the operators oneDNN runs in bfloat16."""
    from mxnet.contrib import amp

    return amp.convert_symbol(sym, target_dtype="bfloat16", cast_optional_params=False)


def _forward(exe: Any, x: np.ndarray) -> np.ndarray:
    import mxnet as mx

    exe.forward(is_train=False, data=mx.nd.array(x))
    return exe.outputs[0].asnumpy()


def mxnet_int8(sym: Any, args: Mapping[str, Any], aux: Mapping[str, Any], calib: np.ndarray, batch: int,
               calib_mode: str) -> Tuple[Any, Dict[str, Any], Dict[str, Any], float]:
    """MXNet 1.9.1's oneDNN post-training quantization of ``sym``: (symbol, args, aux, seconds).

    ``calib_mode``: ``naive`` (min/max) or ``entropy`` (KL), over ``calib`` in batches of ``batch``.
    """
    import mxnet as mx
    from mxnet.contrib import quantization

    t = time.perf_counter()
    it = mx.io.NDArrayIter(data=calib, batch_size=batch)
    qsym, qarg, qaux = quantization.quantize_model_mkldnn(
        sym, dict(args), dict(aux), ctx=mx.cpu(), calib_mode=calib_mode, calib_data=it,
        num_calib_examples=len(calib), quantized_dtype="auto", logger=None)
    qsym = qsym.get_backend_symbol("MKLDNN_QUANTIZE")
    return qsym, qarg, qaux, time.perf_counter() - t


def _calibrate(sym: Any, args: Mapping[str, Any], aux: Mapping[str, Any], batches: Sequence[np.ndarray], path: str,
               method: str = "entropy", **options: Any) -> float:
    import mx_trt

    t = time.perf_counter()
    mx_trt.calibrate(sym, (dict(args), dict(aux)), list(batches), method=method, out=path, progress=False, **options)
    return time.perf_counter() - t


def bench_accuracy(quick: bool) -> Dict[str, Any]:
    """Top-1 on the digits test split: native, fp32/fp16/bf16/int8 engines, MXNet's oneDNN INT8."""
    from tests.models.digits import trained_digits_cnn

    t = time.perf_counter()
    m = trained_digits_cnn()
    train_s = time.perf_counter() - t
    args, aux, x = m.arg_params, m.aux_params, m.test_x
    rows: List[Dict[str, Any]] = []
    native = _forward(_native_bind(m.symbol, args, aux, x.shape), x)
    rows.append({"variant": "native MXNet fp32", "top1": m.top1(native), "calib_s": None})
    # A tiny model that the default cost rule rightly leaves native: every subgraph gets its engine here.
    fp32 = _forward(_engine_bind(m.symbol, args, aux, x.shape, "fp32", engine_rule="always"), x)
    rows.append({"variant": "fp32 engine", "top1": m.top1(fp32), "calib_s": None})
    fp16 = _forward(_engine_bind(m.symbol, args, aux, x.shape, "fp16", engine_rule="always"), x)
    rows.append({"variant": "fp16 engine", "top1": m.top1(fp16), "calib_s": None})
    bf16, _ = bf16_backend()
    if bf16 is not None:
        out = _forward(_engine_bind(m.symbol, args, aux, x.shape, "bf16", engine_rule="always", backend=bf16), x)
        rows.append({"variant": f"bf16 engine ({bf16})", "top1": m.top1(out), "calib_s": None,
                     "max_abs_diff_fp32": float(np.abs(out - fp32).max())})
    batches = [m.calib_x[i:i + 50] for i in range(0, len(m.calib_x), 50)]
    with tempfile.TemporaryDirectory(prefix="mx_trt_bench_int8_") as tmp:
        for method in (("entropy",) if quick else ("entropy", "percentile", "minmax")):
            path = os.path.join(tmp, f"digits-{method}.json")
            secs = _calibrate(m.symbol, args, aux, batches, path, method, engine_rule="always")
            out = _forward(_engine_bind(m.symbol, args, aux, x.shape, "int8", path, engine_rule="always"), x)
            rows.append({"variant": f"int8 engine ({method})", "top1": m.top1(out), "calib_s": secs,
                         "max_abs_diff_fp32": float(np.abs(out - fp32).max())})
    for mode in (("naive",) if quick else ("naive", "entropy")):
        qsym, qarg, qaux, secs = mxnet_int8(m.symbol, args, aux, m.calib_x, 50, mode)
        out = _forward(_native_bind(qsym, qarg, qaux, x.shape, {"data": np.float32}), x)
        rows.append({"variant": f"MXNet oneDNN INT8 ({mode})", "top1": m.top1(out), "calib_s": secs,
                     "max_abs_diff_fp32": float(np.abs(out - native).max())})
    base = rows[1]["top1"]
    for r in rows:
        r["drop_points_vs_fp32_engine"] = 100 * (base - r["top1"])
        logger.info("digits %s: top-1 %.4f", r["variant"], r["top1"])
    return {"train_s": train_s, "test_samples": int(len(m.test_y)), "calib_samples": int(len(m.calib_x)), "rows": rows}


#: Seconds to wait after a native MXNet variant: its OpenMP threads keep spinning for a while after
#: a forward and would take the cores from the variant timed next.
SETTLE_S = 0.3


def _rounds(fns: Mapping[str, Callable[[], None]], runs: int, warmup: int, rounds: int = 5,
            settle: Sequence[str] = ()) -> Dict[str, List[float]]:
    """Latencies (ms) of each function, measured in ``rounds`` alternating rounds so drift hits all alike.

    The order rotates each round and is reversed every other round, so that each variant follows different
    ones (a rotation alone keeps every variant after the same one: the fp32 engine always ran right after
    native MXNet's turn and its wait), and after a variant named in ``settle`` the next waits :data:`SETTLE_S`.
    Each turn starts with untimed forwards, one at least and more until they took the timing module's
    ``SETTLE_S``: an engine's threads that slept during another variant's turn (or the wait) take a few
    forwards to be back at full speed. Without them, two forwards a turn of MobileNetV2 at batch 1 read
    9.7 ms for the fp32 engine and 9.8 for the int8 one, against 6.2 and 3.8 ms settled.
    """
    from mx_trt.tools.cli.timing import SETTLE_S as TURN_SETTLE_S
    from mx_trt.tools.cli.timing import measure

    out: Dict[str, List[float]] = {k: [] for k in fns}
    names = list(fns)
    per = max(1, runs // rounds)
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for k in (order[::-1] if r % 2 else order):
            out[k] += measure(fns[k], per, max(1, warmup) if r == 0 else 1, settle_s=TURN_SETTLE_S)
            if k in settle:
                time.sleep(SETTLE_S)
    return out


def bench_speed(models: Sequence[Tuple[str, int]], batches: Sequence[int], runs: int, warmup: int,
                with_mxnet: bool = True) -> List[Dict[str, Any]]:
    """fp32 vs int8 engines vs native MXNet fp32 vs MXNet's oneDNN INT8, per model and batch."""
    import mxnet as mx

    from mx_trt.builder import engines
    from mx_trt.tools.cli.timing import forward_fn, warm_check
    from tests.models.normalized import centered_cosine, normalized_zoo_model, smooth_images

    rows: List[Dict[str, Any]] = []
    from mx_trt.builder.backends import select_backend
    from mx_trt.settings import Settings

    bf16, no_bf16 = bf16_backend()
    if bf16 is None:
        logger.warning("bf16 not measured: %s", no_bf16)
    default = select_backend("cpu", Settings.from_env().backend).name
    f32_of_bf16 = "fp32 engine" if bf16 == default else f"{bf16} fp32 engine"
    for name, size in models:
        sym, args, aux = normalized_zoo_model(name, size, stats_images=8)
        calib = [smooth_images(8, size, seed) for seed in range(CALIB_BATCHES)]
        with tempfile.TemporaryDirectory(prefix="mx_trt_bench_int8_") as tmp:
            path = os.path.join(tmp, f"{name}.json")
            calib_s = _calibrate(sym, args, aux, calib, path)
            q = mxnet_int8(sym, args, aux, np.concatenate(calib), 8, "naive") if with_mxnet else None
            for b in batches:
                shape = (b, 3, size, size)
                x = smooth_images(b, size, 99)
                exes = {"native fp32": _native_bind(sym, args, aux, shape),
                        "fp32 engine": _engine_bind(sym, args, aux, shape, "fp32"),
                        "int8 engine": _engine_bind(sym, args, aux, shape, "int8", path)}
                if q is not None:
                    exes["MXNet INT8"] = _native_bind(q[0], q[1], q[2], shape, {"data": np.float32})
                if bf16:
                    # Its fp32 baseline is the same backend's fp32 engine (the bf16 one's, when not the default).
                    exes["bf16 engine"] = _engine_bind(sym, args, aux, shape, "bf16", backend=bf16)
                    if bf16 != default:
                        exes[f"{bf16} fp32 engine"] = _engine_bind(sym, args, aux, shape, "fp32", backend=bf16)
                    if with_mxnet:
                        exes["MXNet bf16"] = _native_bind(mxnet_bf16(sym), args, aux, shape)
                # Not timed: how much fp16 rounding alone moves the logits (random networks amplify rounding).
                fp16 = _forward(_engine_bind(sym, args, aux, shape, "fp16"), x)
                outs = {"fp16 engine": fp16}
                for k, exe in exes.items():
                    exe.arg_dict["data"][:] = mx.nd.array(x)
                    exe.forward(is_train=False)
                    outs[k] = exe.outputs[0].asnumpy()
                for exe in exes.values():  # the run-time check's first probes are not timed (bench_models)
                    warm_check(forward_fn(exe), exe)
                times = _rounds({k: forward_fn(e) for k, e in exes.items()}, runs, warmup,
                                settle=("native fp32", "MXNet INT8", "MXNet bf16"))
                med = {k: statistics.median(v) for k, v in times.items()}
                best = {k: min(v) for k, v in times.items()}
                row: Dict[str, Any] = {
                    "model": name, "size": size, "batch": b, "runs": len(times["int8 engine"]), "calib_s": calib_s,
                    "mxnet_quantize_s": q[3] if q is not None else None, "median_ms": med, "best_ms": best,
                    "fp32/int8": med["fp32 engine"] / med["int8 engine"],
                    "fp32/int8_best": best["fp32 engine"] / best["int8 engine"],
                    "mxnet_int8/int8": med["MXNet INT8"] / med["int8 engine"] if q is not None else None,
                    "mxnet_int8/int8_best": best["MXNet INT8"] / best["int8 engine"] if q is not None else None,
                    "native/int8": med["native fp32"] / med["int8 engine"],
                    "bf16_backend": bf16, "bf16_fp32": f32_of_bf16 if bf16 else None,
                    "fp32/bf16": med[f32_of_bf16] / med["bf16 engine"] if bf16 else None,
                    "native/bf16": med["native fp32"] / med["bf16 engine"] if bf16 else None,
                    "mxnet_bf16/bf16": med["MXNet bf16"] / med["bf16 engine"] if "MXNet bf16" in med else None,
                    # Centred over the batch: with batch 1 only the plain cosine is defined.
                    "cosine_to_native": {k: (centered_cosine if b > 1 else _plain_cosine)(outs[k], outs["native fp32"])
                                         for k in outs if k != "native fp32"},
                    "top1_agreement": {k: float(np.mean(outs[k].argmax(1) == outs["native fp32"].argmax(1)))
                                       for k in outs if k != "native fp32"},
                }
                rows.append(row)
                logger.info("int8 %s batch %d: fp32 engine %.1f ms, int8 engine %.1f ms (%.2fx), MXNet INT8 %s",
                            name, b, med["fp32 engine"], med["int8 engine"], row["fp32/int8"],
                            f"{med['MXNet INT8']:.1f} ms" if q is not None else "-")
                del exes, outs
                engines.clear_pool()
                gc.collect()
        del sym, args, aux, q
        gc.collect()
    return rows


def _plain_cosine(a: np.ndarray, b: np.ndarray) -> float:
    from tests.models.normalized import cosine

    return cosine(a, b)


def bench_int8(quick: bool, runs: int) -> Dict[str, Any]:
    """The section: accuracy on the digits CNN, speed on the zoo models."""
    acc = bench_accuracy(quick)
    speed = bench_speed(QUICK_MODELS if quick else MODELS, (1,) if quick else BATCHES, runs, 1 if quick else 3)
    return {"accuracy": acc, "speed": speed}


def _fmt_table(head: Sequence[str], body: Sequence[Sequence[str]]) -> List[str]:
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
             for r in [head, *body]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def render(res: Mapping[str, Any]) -> str:
    """The section as plain-text tables."""
    acc = res["accuracy"]
    out = [f"INT8 accuracy: digits CNN trained in {acc['train_s']:.1f} s, top-1 on {acc['test_samples']} held-out "
           f"images, calibrated on {acc['calib_samples']} others"]
    out += _fmt_table(["variant", "top-1 %", "drop vs fp32 engine, points", "calibration s"],
                      [[r["variant"], f"{100 * r['top1']:.2f}", f"{r['drop_points_vs_fp32_engine']:.2f}",
                        f"{r['calib_s']:.2f}" if r["calib_s"] is not None else "-"] for r in acc["rows"]])
    out.append("")
    out.append("INT8 speed: median ms of alternating rounds (ratios of medians; best-run ratios in brackets); "
               f"target fp32/int8 >= {TARGET_INT8_SPEEDUP} on resnet50_v1 batch 8")
    body = []
    for r in res["speed"]:
        m = r["median_ms"]
        mx_int8 = m.get("MXNet INT8")
        body.append([f"{r['model']} {r['size']}px", str(r["batch"]), f"{m['native fp32']:.1f}",
                     f"{m['fp32 engine']:.1f}", f"{m['int8 engine']:.1f}", f"{mx_int8:.1f}" if mx_int8 else "-",
                     f"{r['fp32/int8']:.2f} ({r['fp32/int8_best']:.2f})",
                     f"{r['mxnet_int8/int8']:.2f} ({r['mxnet_int8/int8_best']:.2f})" if r["mxnet_int8/int8"] else "-",
                     f"{r['cosine_to_native']['fp16 engine']:.4f}", f"{r['cosine_to_native']['int8 engine']:.4f}",
                     f"{r['cosine_to_native']['MXNet INT8']:.4f}" if "MXNet INT8" in r["cosine_to_native"] else "-"])
    out += _fmt_table(["model", "batch", "native fp32", "fp32 engine", "int8 engine", "MXNet INT8", "fp32/int8",
                       "MXNet INT8/int8", "cos fp16", "cos int8", "cos MXNet INT8"], body)
    out.append("cos: cosine similarity of the logits to native fp32, centred over the batch (plain at batch 1); "
               "random networks amplify rounding (see cos fp16), so these compare the variants, not accuracy")
    bf16 = [r for r in res["speed"] if r.get("fp32/bf16")]
    if bf16:
        out.append("")
        out.append("bf16 speed, the same rounds: native MXNet fp32 and its own bf16 (AMP), the fp32 and bf16 engines")
        body = []
        for r in bf16:
            m, cos = r["median_ms"], r["cosine_to_native"]
            body.append([f"{r['model']} {r['size']}px", str(r["batch"]), f"{m['native fp32']:.1f}",
                         f"{m['MXNet bf16']:.1f}" if "MXNet bf16" in m else "-", r["bf16_backend"],
                         f"{m[r['bf16_fp32']]:.1f}",
                         f"{m['bf16 engine']:.1f}", f"{r['fp32/bf16']:.2f}", f"{r['native/bf16']:.2f}",
                         f"{r['mxnet_bf16/bf16']:.2f}" if r.get("mxnet_bf16/bf16") else "-",
                         f"{cos['bf16 engine']:.4f}", f"{cos['MXNet bf16']:.4f}" if "MXNet bf16" in cos else "-"])
        out += _fmt_table(["model", "batch", "native fp32", "MXNet bf16", "backend", "its fp32", "bf16 engine", "fp32/bf16",
                           "native/bf16", "MXNet bf16/bf16", "cos bf16", "cos MXNet bf16"], body)
    return "\n".join(out)
