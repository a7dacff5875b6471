"""Any graph MXNet binds also binds with the pass on: odd names, odd simple_bind calls, dtypes.

Each test compares with MXNet's own output for the same graph and weights
(fp32: ``rtol=1e-4, atol=1e-5``; integer outputs exactly) and, where the pass
should accelerate, proves through the bind info that engines ran.
"""
from __future__ import annotations

import json
import logging
import os

import mxnet as mx
import numpy as np
import pytest

import mx_trt
from mx_trt.errors import GraphImportError
from mx_trt.graph.importer import symbol_to_graph
from tests.harness import userops
from tests.harness.mxcheck import OP_TOL, random_inputs, random_params
from tests.harness.bindcheck import bind, conv_relu

RTOL, ATOL = OP_TOL["float32"]
SHAPES = {"data": (2, 3, 8, 8)}


def _both(sym, shapes, monkeypatch, args=None, aux=None, inputs=None, **kw):
    if args is None:
        args, aux = random_params(sym, shapes, 0)
    inputs = inputs if inputs is not None else random_inputs(shapes, 1)
    _, ref = bind(sym, shapes, args, aux, inputs, False, monkeypatch, **kw)
    monkeypatch.setenv("MXNET_TENSORRT_STRICT", "1")
    exe, got = bind(sym, shapes, args, aux, inputs, True, monkeypatch, **kw)
    assert len(ref) == len(got)
    for r, g in zip(ref, got):
        assert r.dtype == g.dtype and r.shape == g.shape
        np.testing.assert_allclose(g, r, rtol=RTOL, atol=ATOL)
    return exe


def _renamed(sym, rename):
    """The symbol with node names changed by ``rename(index, node) -> name`` (MXNet binds duplicates)."""
    js = json.loads(sym.tojson())
    for i, n in enumerate(js["nodes"]):
        n["name"] = rename(i, n)
    return mx.sym.load_json(json.dumps(js))


def test_duplicate_node_names_bind_and_match(monkeypatch):
    """A block called twice repeats its node names (GluonCV's Mask R-CNN, I3D): keyed by id, not name."""
    #   data -> a_conv -> a_relu -> [sq] -> a_conv -> a_relu   (second pair: same names, own weights)
    x = mx.sym.var("data")
    s = conv_relu(userops.square(conv_relu(x, "a"), "sq"), "b")
    dup = _renamed(s, lambda i, n: n["name"].replace("b_conv", "a_conv").replace("b_relu", "a_relu")
                   if n["op"] != "null" else n["name"])
    ops = [n["name"] for n in json.loads(dup.tojson())["nodes"] if n["op"] != "null"]
    assert ops.count("a_conv") == 2 and ops.count("a_relu") == 2
    exe = _both(dup, SHAPES, monkeypatch)
    info = mx_trt.bind_info(exe)
    assert len(info.engines) == 2 and all(f.run_count == 1 for f in info.engines)


def test_nodes_without_names(monkeypatch):
    x = mx.sym.var("data")
    s = mx.sym.Activation(conv_relu(x, "a") * 2.0, act_type="tanh", name="t")
    unnamed = _renamed(s, lambda i, n: "" if n["op"] != "null" else n["name"])
    g = symbol_to_graph(unnamed, {**SHAPES})
    assert len({n.name for n in g.nodes}) == len(g.nodes)
    exe = _both(unnamed, SHAPES, monkeypatch)
    assert len(mx_trt.bind_info(exe).engines) == 1


def test_duplicate_variable_names_behave_as_natively(monkeypatch, caplog):
    """Two variables of one name cannot be told apart: the pass steps aside with one warning, and the
    bind does whatever MXNet's own does with such a graph."""
    a, b = mx.sym.var("data"), mx.sym.var("w")
    s = mx.sym.broadcast_mul(mx.sym.relu(a), mx.sym.relu(b))
    dup = _renamed(s, lambda i, n: "data" if n["name"] == "w" else n["name"])
    with pytest.raises(GraphImportError, match="two variables are named 'data'"):
        symbol_to_graph(dup, {"data": (2, 3)})

    def attempt():
        try:
            return dup.simple_bind(mx.cpu(), grad_req="null", shared_buffer={"x": mx.nd.ones((1,))}, data=(2, 3))
        except Exception as exc:  # MXNet's own verdict, whatever it is
            return type(exc)

    monkeypatch.setenv("MXNET_USE_TENSORRT", "0")
    native = attempt()
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1")
    with caplog.at_level(logging.WARNING, logger="mx_trt"):
        accelerated = attempt()
    assert (native if isinstance(native, type) else "bound") == (accelerated if isinstance(accelerated, type) else "bound")
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "two variables are named" in warnings[0].getMessage()


def test_multi_output_node_feeding_different_subgraphs(monkeypatch):
    #            +-- out0 -> conv -> relu ------------------+
    # data -> split                                         +-> concat
    #            +-- out1 -> [sq] -> conv -> relu ----------+
    x = mx.sym.var("data")
    parts = mx.sym.split(mx.sym.Convolution(x, num_filter=4, kernel=(1, 1), name="c0"), num_outputs=2, axis=1,
                         name="split")
    left = conv_relu(parts[0], "l")
    right = conv_relu(userops.square(parts[1], "sq"), "r")
    s = mx.sym.concat(left, right, dim=1, name="cat")
    exe = _both(s, SHAPES, monkeypatch)
    info = mx_trt.bind_info(exe)
    assert info.plan.partition.native.keys() == {info.plan.graph.by_name("sq").id}
    assert all(f.run_count == 1 for f in info.engines)


def test_identities_do_not_split_subgraphs(monkeypatch):
    # data -> conv -> Dropout -> relu -> BlockGrad -> identity -> conv : one engine, no identity left
    x = mx.sym.var("data")
    c = mx.sym.Convolution(x, num_filter=4, kernel=(3, 3), pad=(1, 1), name="c1")
    d = mx.sym.Dropout(c, p=0.5, name="drop")
    r = mx.sym.relu(d, name="r")
    s = mx.sym.Convolution(mx.sym.identity(mx.sym.BlockGrad(r, name="bg"), name="id"), num_filter=4,
                           kernel=(3, 3), pad=(1, 1), name="c2")
    exe = _both(s, SHAPES, monkeypatch)
    info = mx_trt.bind_info(exe)
    ops = {n.op for n in info.plan.graph.nodes if not n.is_variable}
    assert ops == {"Convolution", "relu"}
    assert len(info.engines) == 1


def test_dropout_always_is_not_an_identity():
    from mx_trt.graph.importer import inference_identity
    from mx_trt.passes.ir import Node

    assert inference_identity(Node(0, "d", "Dropout", {"p": "0.5"}))
    assert not inference_identity(Node(0, "d", "Dropout", {"p": "0.5", "mode": "always"}))


def test_shape_given_for_a_weight_takes_its_value_from_shared_buffer(monkeypatch):
    """simple_bind(data=S, fc_weight=(10, 8), shared_buffer=P): as natively, the weight's value is P's."""
    s = mx.sym.FullyConnected(mx.sym.relu(mx.sym.var("data")), num_hidden=10, name="fc")
    shapes = {"data": (2, 8)}
    args, aux = random_params(s, shapes, 0)
    inputs = random_inputs(shapes, 1)
    _, ref = bind(s, shapes, args, aux, inputs, False, monkeypatch)
    monkeypatch.setenv("MXNET_TENSORRT_STRICT", "1")
    exe, got = bind(s, shapes, args, aux, inputs, True, monkeypatch, fc_weight=(10, 8))
    assert mx_trt.bind_info(exe) is not None
    np.testing.assert_allclose(got[0], ref[0], rtol=RTOL, atol=ATOL)
    assert float(np.abs(got[0]).max()) > 0


def test_integer_tensors_cross_fused_boundaries(monkeypatch):
    """An int32 graph input feeds an engine, and an engine's int64 output feeds a native op."""
    #   idx(int32) -> Embedding -> *2 -> +1 -> relu --------------------------> out0 (float32)
    #   data -> relu -> *2 -> shape_array (int64) -> [sq: native, int64] ------> out1 (int64)
    idx = mx.sym.var("idx", dtype="int32")
    emb = mx.sym.Embedding(idx, input_dim=10, output_dim=4, name="emb")
    out0 = mx.sym.relu(emb * 2.0 + 1.0, name="r")
    shape = mx.sym.shape_array(mx.sym.relu(mx.sym.var("data"), name="r2") * 2.0, name="shp")
    out1 = userops.square(shape, "sq")
    s = mx.sym.Group([out0, out1])
    shapes = {"idx": (2, 5), "data": (3, 7)}
    args, aux = random_params(s, shapes, 0)
    inputs = {"idx": np.random.RandomState(0).randint(0, 10, (2, 5)).astype("int32"),
              "data": random_inputs({"data": (3, 7)})["data"]}
    exe = _both(s, shapes, monkeypatch, args, aux, inputs, type_dict={"idx": "int32", "data": "float32"})
    info = mx_trt.bind_info(exe)
    assert len(info.engines) == 2
    dtypes = sorted((t.dtype for f in info.engines for t in f.engine.inputs + f.engine.outputs))
    assert dtypes == ["float32", "float32", "int32", "int64"]
    assert exe.arg_dict["idx"].dtype == np.int32 and exe.outputs[1].dtype == np.int64
    assert exe.outputs[1].asnumpy().tolist() == [9, 49]


def test_design_example_verbatim(tmp_path, monkeypatch):
    """The design's own example, word for word: a SoftmaxOutput checkpoint, softmax_label and force_rebind."""
    data_sym = mx.sym.var("data")
    net = mx.sym.FullyConnected(mx.sym.relu(mx.sym.Convolution(data_sym, num_filter=4, kernel=(3, 3), name="conv")),
                                num_hidden=5, name="fc")
    net = mx.sym.SoftmaxOutput(net, name="softmax")
    batch_size = 2
    data_shape = (batch_size, 3, 8, 8)
    arg, aux = random_params(net, {"data": data_shape, "softmax_label": (batch_size,)})
    arg.pop("softmax_label", None)
    prefix = str(tmp_path / "model")
    mx.model.save_checkpoint(prefix, 3, net, arg, aux)
    model_name, num_epochs = prefix, 3
    my_data_batch = random_inputs({"data": data_shape})["data"]
    outs = {}
    for flag in ("0", "1"):
        os.environ["MXNET_USE_TENSORRT"] = flag
        try:
            def merge_dicts(*dict_args):
                """Merge several dictionaries into one"""
                result = {}
                for dictionary in dict_args:
                    result.update(dictionary)
                return result

            device = mx.cpu()
            sym, arg_params, aux_params = mx.model.load_checkpoint(model_name, num_epochs)
            executor = sym.simple_bind(ctx=device,
                                       data=data_shape,
                                       softmax_label=(batch_size,),
                                       shared_buffer=merge_dicts(arg_params, aux_params),
                                       grad_req='null',
                                       force_rebind=True)
            if flag == "0":
                executor.copy_params_from(arg_params, aux_params)
            executor.arg_dict["data"][:] = my_data_batch
            executor.forward(is_train=False)
            predictions = executor.outputs[0].asnumpy()
            outs[flag] = (predictions, mx_trt.bind_info(executor))
        finally:
            os.environ.pop("MXNET_USE_TENSORRT", None)
    ref, got = outs["0"][0], outs["1"][0]
    info = outs["1"][1]
    assert info is not None and len(info.engines) == 1 and info.engines[0].run_count == 1
    assert not info.plan.partition.native
    np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL)


#: Every dtype MXNet 1.9.1 binds. Data movement converts exactly for these on ONNX Runtime.
ALL_DTYPES = ("float16", "float32", "float64", "uint8", "int8", "int32", "int64", "bool")
EXPECT_ENGINE = ("float16", "float32", "int32", "int64")


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_every_dtype_crosses_fused_boundaries_as_mxnet_infers_it(dtype, monkeypatch):
    """x(dtype) -> tile -> reshape -> expand_dims: the outputs keep MXNet's dtype and values.

    Where the converters take the dtype the chain is one engine whose inputs and outputs
    carry it (the fused node's infer_type agrees with MXNet's); otherwise it stays native
    with a reason naming the dtype.
    """
    x = mx.sym.var("data", dtype=dtype)
    # (MXNet's transpose, slice and concat refuse bool; tile, reshape and expand_dims take every dtype.)
    s = mx.sym.expand_dims(mx.sym.reshape(mx.sym.tile(x, reps=(1, 2, 1), name="t"), shape=(4, -1), name="r"),
                           axis=0, name="e")
    shapes = {"data": (2, 4, 3)}
    rng = np.random.RandomState(0)
    if dtype == "bool":
        value = rng.rand(*shapes["data"]) > 0.5
    elif np.dtype(dtype).kind in "iu":
        value = rng.randint(0, 100, shapes["data"]).astype(dtype)
    else:
        value = rng.uniform(-1, 1, shapes["data"]).astype(dtype)
    inputs = {"data": value}
    monkeypatch.setenv("MXNET_TENSORRT_MIN_SUBGRAPH_SIZE", "1")
    _, ref = bind(s, shapes, {}, {}, inputs, False, monkeypatch, type_dict={"data": dtype})
    exe, got = bind(s, shapes, {}, {}, inputs, True, monkeypatch, type_dict={"data": dtype})
    assert got[0].dtype == ref[0].dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got[0], ref[0])
    info = mx_trt.bind_info(exe)
    assert info is not None
    if info.engines:
        eng = info.engines[0].engine
        assert [t.dtype for t in eng.inputs] == [dtype] and [t.dtype for t in eng.outputs] == [dtype]
        assert info.engines[0].run_count == 1
    else:
        assert dtype not in EXPECT_ENGINE, f"{dtype}: {info.plan.partition.native}"
        assert all(dtype in why for why in info.plan.partition.native.values()), info.plan.partition.native
