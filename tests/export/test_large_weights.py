"""Weights are held once: the export keeps them out of the protobuf and engines read the caller's memory.

fp32 tolerance: ``rtol=1e-5, atol=1e-4`` (one 1024-long dot product per output).
"""
from __future__ import annotations

import mxnet as mx
import numpy as np
import pytest

import mx_trt
from mx_trt.export.subgraph import EXTERNAL_MIN_BYTES, embedded_model, export_subgraph
from mx_trt.graph.importer import symbol_to_graph
from mx_trt.passes.ir import Entry
from mx_trt.pipeline.weights import view
from mx_trt.runtime.fused_op import data_ptr


def _fc_relu(num_hidden):
    d = mx.sym.var("data")
    return mx.sym.Activation(mx.sym.FullyConnected(d, num_hidden=num_hidden, name="fc"), act_type="relu", name="r")


def _weights(num_hidden):
    rng = np.random.RandomState(0)
    w = mx.nd.random.uniform(-1, 1, (num_hidden, 1024))
    b = mx.nd.array(rng.uniform(-1, 1, num_hidden))
    return w, b


def _run(num_hidden, monkeypatch):
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1")
    w, b = _weights(num_hidden)
    x = np.random.RandomState(1).uniform(-1, 1, (1, 1024)).astype("float32")
    exe = _fc_relu(num_hidden).simple_bind(mx.cpu(), data=(1, 1024), grad_req="null",
                                           shared_buffer={"fc_weight": w, "fc_bias": b})
    assert list(exe.arg_dict) == ["data"]
    exe.arg_dict["data"][:] = x
    exe.forward(is_train=False)
    got = exe.outputs[0].asnumpy()
    ref = np.maximum(x @ w.asnumpy().T + b.asnumpy(), 0)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-4)
    return exe


def test_export_refers_to_the_callers_memory_without_copying():
    w, b = _weights(300)
    sym = _fc_relu(300)
    g = symbol_to_graph(sym, {"data": (1, 1024), "fc_weight": w.shape, "fc_bias": b.shape})
    weights = {"fc_weight": view(w), "fc_bias": view(b)}
    ins = [Entry(n.id, 0) for n in g.nodes if n.name == "data"]
    ex = export_subgraph(g, g.op_nodes(), ins, list(g.heads), weights)
    # The weight is not in the protobuf: the model is a few hundred bytes, not 1.2 MB.
    assert ex.model.ByteSize() < 4096 and ex.weight_bytes >= w.size * 4
    assert set(ex.external) == {"fc_weight", "fc_bias"} and b.size * 4 >= EXTERNAL_MIN_BYTES
    assert ex.external["fc_weight"].ctypes.data == data_ptr(w)  # the NDArray's own memory
    assert not ex.external["fc_weight"].flags.writeable  # an exporter cannot write the caller's weights
    full = embedded_model(ex)  # a self-contained copy, for tools
    assert full.ByteSize() > w.size * 4


def test_view_keeps_the_ndarray_alive():
    w, _ = _weights(8)
    ref = w.asnumpy()
    v = view(w)
    del w
    import gc

    gc.collect()
    np.testing.assert_array_equal(v, ref)


def test_bind_reads_weights_in_place(monkeypatch):
    exe = _run(300, monkeypatch)
    assert mx_trt.bind_info(exe).engines[0].run_count == 1


@pytest.mark.slow
def test_weights_over_2gb(monkeypatch):
    # 540000 x 1024 float32 = 2.2 GB in one subgraph, past protobuf's limit: it never enters one.
    exe = _run(540_000, monkeypatch)
    assert mx_trt.bind_info(exe).plan.partition.subgraphs[0].nodes
