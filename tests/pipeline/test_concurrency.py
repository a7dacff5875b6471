"""Binds in several threads at once, each with its own options: nothing one thread asks for reaches another.

Eight threads bind two small CNNs (A and B) at the same moment, with different
options given three ways: explicit ``optimize_for`` options, the scoped setters
called in the thread (``set_use_fp16``, ``set_use_tensorrt``,
``set_optimization_profiles``), and a plan cache folder per bind. A ninth thread
exports a third model with ``mx_trt.export_model`` in a loop. Each executor must
match native MXNet (fp32 ``rtol=1e-4, atol=1e-5``; fp16 engines ``rtol=1e-2,
atol=1e-2``), and its engines must be what its options asked for: the precision
of the stored model's weights, the batch profiles, the operators kept native. Each
plan cache holds its own binds' engines and the export's folder only the export's.
"""
from __future__ import annotations

import dataclasses
import json
import os
import threading
from typing import Any, Dict, List, Tuple

import mxnet as mx
import numpy as np
import onnx

import mx_trt
from mx_trt import settings
from mx_trt.builder.backends import select_backend
from mx_trt.cache import EngineCache
from mx_trt.frontends import hook
from mx_trt.frontends.symbol import engines as symbol_engines
from mx_trt.pipeline.bind import optimize
from mx_trt.pipeline.request import BindRequest
from mx_trt.settings import Settings

SHAPE = (2, 3, 8, 8)
FP32 = {"rtol": 1e-4, "atol": 1e-5}
FP16 = {"rtol": 1e-2, "atol": 1e-2}
FLOAT16 = onnx.TensorProto.FLOAT16


def _cnn(ch: int, hidden: int) -> Any:
    """data -> conv -> relu -> conv -> relu -> fc (one subgraph of five operators)."""
    x = mx.sym.var("data")
    x = mx.sym.Activation(mx.sym.Convolution(x, num_filter=ch, kernel=(3, 3), pad=(1, 1), name="c0"),
                          act_type="relu", name="r0")
    x = mx.sym.Activation(mx.sym.Convolution(x, num_filter=ch, kernel=(3, 3), pad=(1, 1), name="c1"),
                          act_type="relu", name="r1")
    return mx.sym.FullyConnected(x, num_hidden=hidden, name="fc")


def _params(sym: Any, seed: int) -> Dict[str, Any]:
    arg_shapes, _, _ = sym.infer_shape(data=SHAPE)
    rs = np.random.RandomState(seed)
    return {n: mx.nd.array(rs.uniform(-0.3, 0.3, s)) for n, s in zip(sym.list_arguments(), arg_shapes) if n != "data"}


def _native(sym: Any, params: Dict[str, Any], x: np.ndarray) -> np.ndarray:
    with hook.disabled():
        exe = sym.simple_bind(mx.cpu(), grad_req="null", data=SHAPE)
    exe.copy_params_from(params, {})
    return exe.forward(is_train=False, data=mx.nd.array(x))[0].asnumpy()


def _stored_precisions(cache_dir: str) -> List[str]:
    """``fp16`` or ``fp32`` for each engine stored in ``cache_dir``, from the types of its model's weights."""
    out = []
    for entry in EngineCache(cache_dir, max_bytes=0).entries():
        model = onnx.load(os.path.join(entry.directory, str(entry.meta["engine"]["file"])), load_external_data=False)
        types = {init.data_type for init in model.graph.initializer}
        out.append("fp16" if FLOAT16 in types else "fp32")
    return out


def _ops(sym: Any) -> List[str]:
    return [n["op"] for n in json.loads(sym.tojson())["nodes"] if n["op"] != "null"]


#: thread -> (model, optimize_for options, scoped setters called in the thread, expected engine).
CASES: Dict[str, Tuple[str, Dict[str, Any], Dict[str, Any], Dict[str, Any]]] = {
    "A fp32": ("A", {}, {}, {"precision": "fp32", "ranges": [], "native": []}),
    "A fp16 option": ("A", {"fp16": True}, {}, {"precision": "fp16", "ranges": [], "native": []}),
    "A max batch 4": ("A", {"max_batch_size": 4}, {}, {"precision": "fp32", "ranges": [(1, 2, 4)], "native": []}),
    "A without fc": ("A", {"exclude_ops": ["FullyConnected"]}, {},
                     {"precision": "fp32", "ranges": [], "native": ["FullyConnected"]}),
    "B fp32": ("B", {}, {}, {"precision": "fp32", "ranges": [], "native": []}),
    "B fp16 set in thread": ("B", {}, {"fp16": True}, {"precision": "fp16", "ranges": [], "native": []}),
    "B simple_bind switched on in thread": ("B", {}, {"switch": True, "profiles": 4},
                                            {"precision": "fp32", "ranges": [(1, 2, 4)], "native": []}),
    "B fp16, max batch 3, without fc": ("B", {"precision": "fp16", "max_batch_size": 3, "exclude_ops": "FullyConnected"},
                                        {}, {"precision": "fp16", "ranges": [(1, 2, 3)], "native": ["FullyConnected"]}),
}


def test_eight_threads_bind_with_their_own_options_while_another_exports(tmp_path):
    models = {"A": _cnn(4, 5), "B": _cnn(6, 7), "C": _cnn(3, 4)}
    params = {k: _params(sym, seed) for seed, (k, sym) in enumerate(models.items())}
    x = np.random.RandomState(9).uniform(-1, 1, SHAPE).astype("float32")
    want = {k: _native(models[k], params[k], x) for k in models}
    mx_trt.set_use_fp16(False)  # the main thread's value: every thread's default
    barrier = threading.Barrier(len(CASES) + 1)
    results: Dict[str, Dict[str, Any]] = {}
    errors: List[str] = []
    outdir = str(tmp_path / "export")
    env_cache = os.environ["MXNET_TENSORRT_CACHE_DIR"]

    def bind_one(name: str) -> None:
        model, options, scoped, _ = CASES[name]
        sym, p = models[model], params[model]
        try:
            if "fp16" in scoped:
                mx_trt.set_use_fp16(scoped["fp16"])
            if "switch" in scoped:
                mx_trt.set_use_tensorrt(scoped["switch"])
                mx_trt.set_optimization_profiles([{"data": ((1,) + SHAPE[1:], SHAPE, (scoped["profiles"],) + SHAPE[1:])}])
            barrier.wait(timeout=60)  # every thread has set its values before any binds
            seen = {"fp16": settings.get_use_fp16(), "switch": hook.pass_enabled()}
            if "switch" in scoped:  # MXNet 1.3/1.4's way: the switch, then simple_bind with shared_buffer
                exe = sym.simple_bind(mx.cpu(), grad_req="null", shared_buffer=dict(p), data=SHAPE)
                info = mx_trt.bind_info(exe)
                fused, ops, cache_dir = (info.engines if info else []), _ops(info.symbol) if info else [], env_cache
            else:
                cache_dir = str(tmp_path / name.replace(" ", "_").replace(",", ""))
                left = dict(p)
                trt = sym.optimize_for("TensorRT", left, {}, mx.cpu(), shape_dict={"data": SHAPE}, cache_dir=cache_dir,
                                       engine_rule="always", **options)
                exe = trt.simple_bind(mx.cpu(), grad_req="null", data=SHAPE)
                exe.copy_params_from(left, {}, allow_extra_params=True)
                fused, ops = symbol_engines(trt), _ops(trt)
            out = exe.forward(is_train=False, data=mx.nd.array(x))[0].asnumpy()
            results[name] = {"seen": seen, "out": out, "ranges": [list(f.engine.batch_ranges) for f in fused],
                             "ops": ops, "cache": cache_dir}
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(f"{name}: {exc!r}")
            barrier.abort()

    def export_loop() -> None:
        try:
            barrier.wait(timeout=60)
            for _ in range(3):
                mx_trt.export_model(models["C"], mx.cpu(), params["C"], {"data": SHAPE}, outdir, overwrite=True)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(f"export: {exc!r}")

    threads = [threading.Thread(target=export_loop)] + [threading.Thread(target=bind_one, args=(n,)) for n in CASES]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors

    for name, (model, _, scoped, expect) in CASES.items():
        r = results[name]
        assert r["seen"] == {"fp16": scoped.get("fp16", False), "switch": scoped.get("switch", False)}, name
        tol = FP16 if expect["precision"] == "fp16" else FP32
        np.testing.assert_allclose(r["out"], want[model], **tol, err_msg=name)
        if expect["precision"] == "fp16":  # the engine really ran in half precision
            assert not np.allclose(r["out"], want[model], rtol=1e-6, atol=1e-7), name
        assert r["ranges"] == [[tuple(b) for b in expect["ranges"]]], (name, r["ranges"])
        native = [op for op in r["ops"] if op != "Custom"]
        assert native == expect["native"] and r["ops"].count("Custom") == 1, (name, r["ops"])
        if r["cache"] != env_cache:  # a folder of its own: this bind's engine and nothing else
            assert _stored_precisions(r["cache"]) == [expect["precision"]], name
    assert _stored_precisions(env_cache) == ["fp32"]  # the simple_bind thread's, in the environment's cache

    # The export's folder holds the export's engines only, and they bind and run.
    manifest = json.load(open(os.path.join(outdir, "mx_trt.json"), encoding="utf-8"))
    stored = {e.key for e in EngineCache(os.path.join(outdir, "engines"), max_bytes=0).entries()}
    assert stored == {e["key"] for e in manifest["engines"]} and len(stored) == 1
    loaded = mx_trt.load(outdir)
    got = loaded.forward(is_train=False, data=mx.nd.array(x))[0].asnumpy()
    np.testing.assert_allclose(got, want["C"], **FP32)

    # The main thread kept its own values.
    assert settings.get_use_fp16() is False and hook.pass_enabled() is False
    assert settings.get_optimization_profiles() is None


def test_the_engines_take_the_requests_settings_not_the_environment(monkeypatch, tmp_path):
    """A stage reads its options from the request: the environment changed after ``from_env`` reaches nothing."""
    sym = _cnn(4, 5)
    params = _params(sym, 3)
    monkeypatch.setenv("MXNET_TENSORRT_ORT_THREADS", "1")
    s = dataclasses.replace(Settings.from_env(), ort_threads=2, cache_dir=str(tmp_path / "mine"))
    monkeypatch.setenv("MXNET_TENSORRT_CACHE_DIR", str(tmp_path / "environment"))
    info = optimize(BindRequest(symbol=sym, shapes={"data": SHAPE}, params=params, settings=s,
                                backend=select_backend("cpu"), ctx=mx.cpu()))
    (fused,) = info.engines
    assert fused.engine.session.get_session_options().intra_op_num_threads == 2
    assert _stored_precisions(str(tmp_path / "mine")) == ["fp32"] and not (tmp_path / "environment").exists()
