"""mx_trt.artifacts: an export's private plan cache travels with its bind, never through the environment.

Binds in other threads at the same time keep their own cache: none of their
engines lands in the export's folder, and none of them fails.
"""
from __future__ import annotations

import os
import threading

import mxnet as mx
import numpy as np

import mx_trt
from mx_trt.cache import EngineCache


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
