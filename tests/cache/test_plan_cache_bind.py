"""The plan cache seen from a bind: warm binds load engines, stale or corrupt entries never serve.

fp32 tolerance ``rtol=1e-4, atol=1e-5`` (tests.harness.mxcheck.OP_TOL).
"""
from __future__ import annotations

import logging
import os

import mxnet as mx
import numpy as np
import pytest

import mx_trt
from mx_trt.frontends.hook import disabled
from mx_trt.builder import engines
from mx_trt.runtime.fused_op import data_ptr
from tests.harness.mxcheck import OP_TOL, random_params

RTOL, ATOL = OP_TOL["float32"]
SHAPES = {"data": (2, 3, 8, 8)}


def cnn():
    x = mx.sym.var("data")
    c = mx.sym.Convolution(x, num_filter=4, kernel=(3, 3), pad=(1, 1), name="conv")
    return mx.sym.FullyConnected(mx.sym.Activation(c, act_type="relu", name="relu"), num_hidden=3, name="fc")


def bind(sym, args, aux, x):
    exe = sym.simple_bind(mx.cpu(), grad_req="null", shared_buffer={**args, **aux}, **SHAPES)
    exe.arg_dict["data"][:] = x
    exe.forward(is_train=False)
    return exe, exe.outputs[0].asnumpy()


def entries(cache_dir):
    return [d for root, dirs, files in os.walk(cache_dir) for d in files if d == "meta.json"]


def _setup(monkeypatch, tmp_path):
    """Pass on, a fresh plan cache, a small CNN with seeded weights and an input."""
    cache_dir = tmp_path / "c"
    monkeypatch.setenv("MXNET_TENSORRT_CACHE_DIR", str(cache_dir))
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1")
    sym = cnn()
    args, aux = random_params(sym, SHAPES)
    x = np.random.RandomState(0).uniform(-1, 1, SHAPES["data"]).astype("float32")
    return cache_dir, sym, args, aux, x


def test_warm_cache_loads_instead_of_building(monkeypatch, tmp_path):
    cache_dir, sym, args, aux, x = _setup(monkeypatch, tmp_path)
    e1, out1 = bind(sym, args, aux, x)
    assert (mx_trt.bind_info(e1).builds, mx_trt.bind_info(e1).loads) == (1, 0)
    assert len(entries(cache_dir)) == 1
    engines.clear_pool()  # as in a new process
    e2, out2 = bind(sym, args, aux, x)
    assert (mx_trt.bind_info(e2).builds, mx_trt.bind_info(e2).loads) == (0, 1)
    np.testing.assert_array_equal(out1, out2)
    # A changed weight is a different engine, never the stale one.
    engines.clear_pool()
    args2 = dict(args, conv_weight=args["conv_weight"] + 0.5)
    e3, out3 = bind(sym, args2, aux, x)
    assert mx_trt.bind_info(e3).builds == 1
    with disabled():
        ref = sym.simple_bind(mx.cpu(), grad_req="null", **SHAPES)
    ref.copy_params_from(args2, aux)
    ref.arg_dict["data"][:] = x
    ref.forward(is_train=False)
    np.testing.assert_allclose(out3, ref.outputs[0].asnumpy(), rtol=RTOL, atol=ATOL)
    assert len(entries(cache_dir)) == 2


def test_precision_and_shape_are_part_of_the_key(monkeypatch, tmp_path):
    monkeypatch.setenv("MXNET_TENSORRT_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1")
    sym = cnn()
    args, aux = random_params(sym, SHAPES)
    x = np.zeros(SHAPES["data"], "float32")
    bind(sym, args, aux, x)
    engines.clear_pool()
    monkeypatch.setenv("MXNET_TENSORRT_USE_FP16", "1")
    e, _ = bind(sym, args, aux, x)
    assert mx_trt.bind_info(e).builds == 1


def test_corrupt_entry_is_rebuilt_with_a_warning(monkeypatch, tmp_path, caplog):
    cache_dir, sym, args, aux, x = _setup(monkeypatch, tmp_path)
    _, good = bind(sym, args, aux, x)
    # Truncate the stored engine.
    stored = [os.path.join(r, f) for r, _, fs in os.walk(cache_dir) for f in fs if f.startswith("model")]
    assert stored
    with open(stored[0], "r+b") as f:
        f.truncate(100)
    engines.clear_pool()
    with caplog.at_level(logging.WARNING):
        e, out = bind(sym, args, aux, x)
    assert mx_trt.bind_info(e).builds == 1
    assert any("corrupt" in r.getMessage().lower() or "mismatch" in r.getMessage().lower() or "size" in r.getMessage().lower()
               for r in caplog.records if r.levelno == logging.WARNING)
    np.testing.assert_array_equal(out, good)


def test_disabled_cache_writes_nothing(monkeypatch, tmp_path):
    monkeypatch.setenv("MXNET_TENSORRT_CACHE_DIR", "")
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    sym = cnn()
    args, aux = random_params(sym, SHAPES)
    bind(sym, args, aux, np.zeros(SHAPES["data"], "float32"))
    assert not (tmp_path / "xdg").exists() and not (tmp_path / ".cache").exists()



def test_cold_bind_runs_the_engine_it_stored(monkeypatch, tmp_path, caplog):
    """ONNX Runtime: a cold bind runs its stored form (weights fed from the caller's memory), as a warm one will."""
    from mx_trt.builder.backends import onnxruntime as ort_backend

    cache_dir, sym, args, aux, x = _setup(monkeypatch, tmp_path)
    with disabled():
        ref = bind(sym, args, aux, x)[1]
    exe, out = bind(sym, args, aux, x)
    info = mx_trt.bind_info(exe)
    assert (info.builds, info.loads) == (1, 0) and len(entries(cache_dir)) == 1
    (fused,) = info.engines
    # The weights it uses as they are come from the caller's arrays, not a copy.
    fed = fused.engine.stored_weights()
    assert fed["fc_weight"].ctypes.data == data_ptr(args["fc_weight"])
    assert fused.run_count >= 1
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)
    # When the optimized model cannot be stored, the engine is built in memory (logged), not lost.
    engines.clear_pool()
    monkeypatch.setenv("MXNET_TENSORRT_CACHE_DIR", str(tmp_path / "c2"))

    def broken(art, arrays):
        raise OSError("disk gone")

    monkeypatch.setattr(ort_backend, "_strip_optimized", broken)
    with caplog.at_level(logging.INFO, logger="mx_trt"):
        exe2, out2 = bind(sym, args, aux, x)
    assert mx_trt.bind_info(exe2).builds == 1 and not mx_trt.bind_info(exe2).native_failures
    assert "optimized model not stored (OSError: disk gone); building in memory" in caplog.text
    assert entries(tmp_path / "c2") == []
    np.testing.assert_allclose(out2, ref, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("fp16", [False, True])
def test_warm_load_feeds_the_callers_arrays_without_exporting(monkeypatch, tmp_path, fp16):
    """Weights used as they are come straight from the caller at a warm load; converted ones (fp16) need the export."""
    from mx_trt.export.dynamic import SubgraphExporter

    cache_dir, sym, args, aux, x = _setup(monkeypatch, tmp_path)
    if fp16:
        monkeypatch.setenv("MXNET_TENSORRT_USE_FP16", "1")
    out1 = bind(sym, args, aux, x)[1]
    engines.clear_pool()
    exports = []
    real = SubgraphExporter.initializers
    monkeypatch.setattr(SubgraphExporter, "initializers",
                        lambda self, *a, **k: exports.append(a[0]) or real(self, *a, **k))
    exe, out2 = bind(sym, args, aux, x)
    info = mx_trt.bind_info(exe)
    assert (info.builds, info.loads) == (0, 1)
    assert len(exports) == (1 if fp16 else 0)
    (fused,) = info.engines
    fed = fused.engine.stored_weights()
    if not fp16:
        assert fed["fc_weight"].ctypes.data == data_ptr(args["fc_weight"])
    np.testing.assert_array_equal(out1, out2)
