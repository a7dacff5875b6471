"""Subgraphs whose weights pass protobuf's 2 GB limit go to ONNX external data.

fp32 tolerance: ``rtol=1e-5, atol=1e-4`` (one 1024-long dot product per output).
"""
from __future__ import annotations

import os

import mxnet as mx
import numpy as np
import pytest

import mx_trt


def _fc_relu(num_hidden):
    d = mx.sym.var("data")
    return mx.sym.Activation(mx.sym.FullyConnected(d, num_hidden=num_hidden, name="fc"), act_type="relu", name="r")


def _run(num_hidden, monkeypatch, threshold=None):
    if threshold is not None:
        monkeypatch.setenv("MXNET_TENSORRT_EXTERNAL_DATA_BYTES", str(threshold))
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1")
    rng = np.random.RandomState(0)
    w = mx.nd.random.uniform(-1, 1, (num_hidden, 1024))
    b = mx.nd.array(rng.uniform(-1, 1, num_hidden))
    x = rng.uniform(-1, 1, (1, 1024)).astype("float32")
    exe = _fc_relu(num_hidden).simple_bind(mx.cpu(), data=(1, 1024), grad_req="null",
                                           shared_buffer={"fc_weight": w, "fc_bias": b})
    assert list(exe.arg_dict) == ["data"]
    exe.arg_dict["data"][:] = x
    exe.forward(is_train=False)
    got = exe.outputs[0].asnumpy()
    ref = np.maximum(x @ w.asnumpy().T + b.asnumpy(), 0)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-4)
    return exe


def test_external_data_path_small(monkeypatch, caplog):
    import logging

    with caplog.at_level(logging.INFO, logger="mx_trt.export.subgraph"):
        _run(300, monkeypatch, threshold=1 << 16)
    assert any("external data" in r.getMessage() for r in caplog.records)


@pytest.mark.slow
def test_weights_over_2gb(monkeypatch):
    # 540000 x 1024 float32 = 2.2 GB in one subgraph (about 9 GB of memory, ~12 s).
    exe = _run(540_000, monkeypatch)
    assert mx_trt.bind_info(exe).plan.partition.subgraphs[0].nodes
