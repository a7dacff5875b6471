"""mx_trt.artifacts: export a bound model to a folder and bind it again with mx_trt.load.

An export's private plan cache travels with its bind, never through the
environment: binds in other threads at the same time keep their own cache.
A loaded export gives MXNet's outputs without building an engine, takes the
batches its engines take, and a damaged or foreign folder is refused with a
typed error naming what is wrong.
"""
from __future__ import annotations

import json
import os
import threading

import mxnet as mx
import numpy as np
import pytest

import mx_trt
from mx_trt.cache import EngineCache
from mx_trt.errors import BackendUnavailableError, ExportError, ShapeError


def _cnn(ch):
    x = mx.sym.var("data")
    x = mx.sym.Convolution(x, num_filter=ch, kernel=(3, 3), pad=(1, 1), name="c0")
    x = mx.sym.Activation(x, act_type="relu", name="r0")
    x = mx.sym.Convolution(x, num_filter=ch, kernel=(3, 3), pad=(1, 1), name="c1")
    return mx.sym.FullyConnected(x, num_hidden=5, name="fc")


def _params(sym, shape, seed):
    arg_shapes, _, _ = sym.infer_shape(data=shape)
    rs = np.random.RandomState(seed)
    return {n: mx.nd.array(rs.uniform(-0.3, 0.3, s)) for n, s in zip(sym.list_arguments(), arg_shapes) if n != "data"}


def test_export_and_concurrent_binds_keep_their_own_caches(tmp_path):
    shape = (1, 3, 8, 8)
    exported, other = _cnn(4), _cnn(6)
    eparams, oparams = _params(exported, shape, 0), _params(other, shape, 1)
    outdir = str(tmp_path / "export")
    errors, infos = [], []

    def export_loop():
        try:
            for _ in range(3):
                mx_trt.export_model(exported, mx.cpu(), eparams, {"data": shape}, outdir, overwrite=True)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(f"export: {exc!r}")

    def bind_one(k):
        try:
            trt = other.optimize_for("TensorRT", dict(oparams), {}, mx.cpu(), shape_dict={"data": shape})
            exe = trt.simple_bind(mx.cpu(), data=shape, grad_req="null")
            exe.forward(data=mx.nd.ones(shape))
            infos.append(len(mx_trt.frontends.symbol.engines(trt)))
            mx_trt.release(trt)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(f"bind {k}: {exc!r}")

    threads = [threading.Thread(target=export_loop)] + [threading.Thread(target=bind_one, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert infos == [1] * 6  # every bind built (or loaded) its engine
    export_cache = EngineCache(os.path.join(outdir, "engines"), max_bytes=0)
    # Only the exported model's engine is in the export's folder; the binds' went to their own cache.
    subgraph_nets = {str(e.meta.get("subgraph")) for e in export_cache.entries()}
    assert len(list(export_cache.entries())) == 1, subgraph_nets
    own = EngineCache(os.environ["MXNET_TENSORRT_CACHE_DIR"], max_bytes=0)
    assert len(list(own.entries())) >= 1


def test_an_export_builds_its_own_engines_and_leaves_the_pool_to_other_binds(tmp_path, monkeypatch):
    """An engine another bind keeps in memory has no stored artifacts: the export builds its own
    and stores it, and does not empty the process's pool (which other threads' binds rely on)."""
    from mx_trt.builder import engines

    monkeypatch.setenv("MXNET_USE_TENSORRT", "1")
    shape = (1, 3, 8, 8)
    sym = _cnn(4)
    params = _params(sym, shape, 0)
    exe = sym.simple_bind(mx.cpu(), data=shape, grad_req="null", shared_buffer=dict(params))
    held = mx_trt.bind_info(exe)
    assert held is not None and len(held.engines) == 1
    pooled = engines.pool_size()
    assert pooled[0] >= 1
    manifest = mx_trt.export_model(sym, mx.cpu(), params, {"data": shape}, str(tmp_path / "export"))
    assert len(manifest["engines"]) == 1
    stored = list(EngineCache(str(tmp_path / "export" / "engines"), max_bytes=0).entries())
    assert len(stored) == 1
    assert engines.pool_size()[0] >= pooled[0]  # the bind's engine is still there for the next bind
    again = sym.simple_bind(mx.cpu(), data=shape, grad_req="null", shared_buffer=dict(params))
    assert mx_trt.bind_info(again).reuses == 1  # taken from the pool, not built again
    del exe, again


# -- export, then load: the same outputs as MXNet, and every way a folder can be refused ---------------------------
#
# Tolerance: fp32 OP_TOL (tests.harness.mxcheck), a three-layer network.

SHAPE = (2, 3, 8, 8)


def _export(tmp_path, monkeypatch, max_batch=None):
    if max_batch is not None:
        monkeypatch.setenv("MXNET_TENSORRT_MAX_BATCH_SIZE", str(max_batch))
    sym = _cnn(4)
    params = _params(sym, SHAPE, 0)
    outdir = str(tmp_path / "export")
    manifest = mx_trt.export_model(sym, mx.cpu(), params, {"data": SHAPE}, outdir)
    monkeypatch.delenv("MXNET_TENSORRT_MAX_BATCH_SIZE", raising=False)
    return sym, params, outdir, manifest


def _forward(exe, x):
    exe.arg_dict["data"][:] = x
    return exe.forward(is_train=False)[0].asnumpy()


def _snapshot(folder):
    return {os.path.join(r, f): os.stat(os.path.join(r, f)).st_mtime_ns for r, _, fs in os.walk(folder) for f in fs}


def test_a_loaded_export_matches_native_mxnet_and_leaves_the_folder_untouched(tmp_path, monkeypatch):
    from tests.harness.mxcheck import OP_TOL, run_native

    sym, params, outdir, manifest = _export(tmp_path, monkeypatch)
    assert manifest["engines"] and manifest["inputs"] == {"data": list(SHAPE)}
    before = _snapshot(outdir)
    exe = mx_trt.load(outdir)
    x = np.random.RandomState(3).uniform(-1, 1, SHAPE).astype(np.float32)
    ref = run_native(sym, {"data": SHAPE}, params, {}, {"data": x})[0]
    rtol, atol = OP_TOL["float32"]
    np.testing.assert_allclose(_forward(exe, x), ref, rtol=rtol, atol=atol)
    loaded = exe._mx_trt_loaded
    assert [f.source for f in loaded.engines] == ["export"] * len(manifest["engines"])
    assert all(f.build_count == 0 and f.run_count == 1 for f in loaded.engines)
    assert _snapshot(outdir) == before  # read only: nothing written, renamed or removed


def test_a_dynamic_export_binds_any_batch_inside_its_profiles(tmp_path, monkeypatch):
    from tests.harness.mxcheck import OP_TOL, run_native

    sym, params, outdir, _ = _export(tmp_path, monkeypatch, max_batch=4)
    rtol, atol = OP_TOL["float32"]
    for batch in (1, 4):
        shape = (batch,) + SHAPE[1:]
        x = np.random.RandomState(batch).uniform(-1, 1, shape).astype(np.float32)
        got = _forward(mx_trt.load(outdir, shapes={"data": shape}), x)
        np.testing.assert_allclose(got, run_native(sym, {"data": shape}, params, {}, {"data": x})[0],
                                   rtol=rtol, atol=atol)
    with pytest.raises(ShapeError, match=r"batch 5 is outside the profiles \[\(1, \d, 4\)\]"):
        mx_trt.load(outdir, shapes={"data": (5,) + SHAPE[1:]})


@pytest.mark.parametrize("shapes, message", [
    ({"data": (4, 3, 8, 8)}, "was built for batch 2 only, not 4"),
    ({"data": (2, 3, 9, 8)}, r"only the batch, dimension 0, may vary"),
    ({"label": (2,)}, r"\['label'\] are not inputs of the export"),
    ({"data": (0, 3, 8, 8)}, "expected a tuple of positive ints"),
    ({"data": (True, 3, 8, 8)}, "expected a tuple of positive ints"),
    ({"data": "2,3,8,8"}, "expected a tuple of positive ints"),
    ([("data", (2, 3, 8, 8))], "shapes must be a dict"),
])
def test_shapes_a_static_export_cannot_take_are_a_shape_error(tmp_path, monkeypatch, shapes, message):
    _, _, outdir, _ = _export(tmp_path, monkeypatch)
    with pytest.raises(ShapeError, match=message):
        mx_trt.load(outdir, shapes=shapes)


def _rewrite_manifest(outdir, **changes):
    path = os.path.join(outdir, "mx_trt.json")
    with open(path) as f:
        manifest = json.load(f)
    manifest.update(changes)
    with open(path, "w") as f:
        json.dump(manifest, f)


@pytest.mark.parametrize("damage, error, message", [
    ("flip a byte of the params", ExportError, "model-0000.params is damaged: its sha256 differs"),
    ("truncate the symbol", ExportError, "model-symbol.json is damaged: its size differs"),
    ("remove the manifest", ExportError, "is not an mx_trt export: no mx_trt.json"),
    ("another format", ExportError, "has format 1; this mx_trt reads format 2"),
    ("a symbol outside the folder", ExportError, "'symbol' is '../model-symbol.json'; expected a file name inside"),
    ("an unknown backend", BackendUnavailableError, "needs the tensorrt_9 backend, which this build lacks"),
    ("an engine of an unknown backend", BackendUnavailableError, "needs the openvino_1 backend, which this build"),
    ("remove the engines", ExportError, "the engine of .* is missing or corrupt"),
])
def test_a_damaged_export_is_refused_naming_what_is_wrong(tmp_path, monkeypatch, damage, error, message):
    import shutil

    _, _, outdir, manifest = _export(tmp_path, monkeypatch)
    if damage == "flip a byte of the params":
        path = os.path.join(outdir, "model-0000.params")
        data = bytearray(open(path, "rb").read())
        data[-1] ^= 0xFF
        open(path, "wb").write(bytes(data))
    elif damage == "truncate the symbol":
        path = os.path.join(outdir, "model-symbol.json")
        open(path, "w").write(open(path).read()[:-10])
    elif damage == "remove the manifest":
        os.remove(os.path.join(outdir, "mx_trt.json"))
    elif damage == "another format":
        _rewrite_manifest(outdir, format=1)
    elif damage == "a symbol outside the folder":
        _rewrite_manifest(outdir, symbol="../model-symbol.json")
    elif damage == "an unknown backend":
        _rewrite_manifest(outdir, backend="tensorrt_9")
    elif damage == "an engine of an unknown backend":
        _rewrite_manifest(outdir, engines=[{**rec, "backend": "openvino_1"} for rec in manifest["engines"]])
    else:
        shutil.rmtree(os.path.join(outdir, "engines"))
    with pytest.raises(error, match=message):
        mx_trt.load(outdir)


def test_an_export_for_the_cpu_is_not_bound_on_a_gpu_and_a_full_folder_is_not_overwritten(tmp_path, monkeypatch):
    sym, params, outdir, _ = _export(tmp_path, monkeypatch)
    with pytest.raises(ExportError, match=r"holds cpu engines; it cannot be bound on gpu\(0\)"):
        mx_trt.load(outdir, ctx=mx.gpu(0))
    with pytest.raises(ExportError, match="is not empty"):
        mx_trt.export_model(sym, mx.cpu(), params, {"data": SHAPE}, outdir)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("the user's")
    with pytest.raises(ExportError, match=r"is not an mx_trt export .*not overwriting it"):
        mx_trt.export_model(sym, mx.cpu(), params, {"data": SHAPE}, str(mine), overwrite=True)
    assert (mine / "notes.txt").read_text() == "the user's"
