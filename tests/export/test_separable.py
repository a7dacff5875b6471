"""Batch separability of exported ONNX graphs (mx_trt.export.separable): which graphs may run in chunks of the batch."""
from __future__ import annotations

import mxnet as mx
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from mx_trt.export.separable import batch_separable, batch_split, split_sizes, without_batch_constants
from mx_trt.export.subgraph import embedded_model

B = 4


def model(nodes, inits=(), in_shape=(B, 3, 8, 8), out_shape=None, out="y"):
    """A one-input, one-output ONNX model; shapes of the rest come from ONNX shape inference."""
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(in_shape))],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, list(out_shape) if out_shape else None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in dict(inits).items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def conv_net():
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Mul", ["c", "scale"], ["m"]),
             helper.make_node("Relu", ["m"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"], axis=1),
             helper.make_node("Gemm", ["f", "fw", "fb"], ["g"], transB=1),
             helper.make_node("Softmax", ["g"], ["y"], axis=1)]
    inits = {"w": np.ones((6, 3, 3, 3), "f4"), "b": np.zeros(6, "f4"), "scale": np.ones((1, 6, 1, 1), "f4"),
             "fw": np.ones((5, 6), "f4"), "fb": np.zeros(5, "f4")}
    return model(nodes, inits, out_shape=(B, 5))


def test_a_cnn_is_separable():
    assert batch_separable(conv_net(), B) is None


def test_batch_one_and_a_wrong_batch_are_not():
    assert batch_separable(conv_net(), 1) == "batch 1"
    assert "not batch-major" in batch_separable(conv_net(), B + 1)


@pytest.mark.parametrize("nodes, inits, out_shape", [
    ([helper.make_node("Reshape", ["x", "s"], ["y"])], {"s": np.array([0, -1], "i8")}, (B, 192)),
    ([helper.make_node("Reshape", ["x", "s"], ["y"])], {"s": np.array([-1, 3, 64], "i8")}, (B, 3, 64)),
    ([helper.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 3, 1])], {}, (B, 8, 8, 3)),
    ([helper.make_node("ReduceMean", ["x"], ["y"], axes=[2, 3], keepdims=1)], {}, (B, 3, 1, 1)),
    ([helper.make_node("ReduceSum", ["x", "a"], ["y"], keepdims=0)], {"a": np.array([-1], "i8")}, (B, 3, 8)),
    ([helper.make_node("Concat", ["x", "x"], ["y"], axis=1)], {}, (B, 6, 8, 8)),
    ([helper.make_node("Slice", ["x", "st", "en", "ax"], ["y"])],
     {"st": np.array([1], "i8"), "en": np.array([3], "i8"), "ax": np.array([2], "i8")}, (B, 3, 2, 8)),
    ([helper.make_node("Pad", ["x", "p"], ["y"])], {"p": np.array([0, 0, 1, 1, 0, 0, 1, 1], "i8")}, (B, 3, 10, 10)),
    ([helper.make_node("Resize", ["x", "", "sc"], ["y"])], {"sc": np.array([1, 1, 2, 2], "f4")}, (B, 3, 16, 16)),
    ([helper.make_node("Add", ["x", "c"], ["y"])], {"c": np.ones((3, 1, 1), "f4")}, (B, 3, 8, 8)),
    ([helper.make_node("MatMul", ["x", "m"], ["y"])], {"m": np.ones((8, 5), "f4")}, (B, 3, 8, 5)),
    ([helper.make_node("Transpose", ["x"], ["t"], perm=[0, 1, 3, 2]), helper.make_node("MatMul", ["x", "t"], ["y"])],
     {}, (B, 3, 8, 8)),
    ([helper.make_node("Squeeze", ["x", "a"], ["q"]), helper.make_node("Unsqueeze", ["q", "a"], ["y"])],
     {"a": np.array([2], "i8")}, None),
    ([helper.make_node("Split", ["x", "n"], ["y", "z"], axis=3)], {"n": np.array([4, 4], "i8")}, (B, 3, 8, 4)),
])
def test_operators_that_keep_samples_apart(nodes, inits, out_shape):
    shape = (B, 3, 1, 8) if nodes[0].op_type == "Squeeze" else (B, 3, 8, 8)
    assert batch_separable(model(nodes, inits, shape, out_shape or shape), B) is None


@pytest.mark.parametrize("nodes, inits, out_shape, why", [
    ([helper.make_node("ReduceMean", ["x"], ["m"], axes=[0], keepdims=1), helper.make_node("Sub", ["x", "m"], ["y"])],
     {}, (B, 3, 8, 8), "axis 0"),
    ([helper.make_node("ReduceMean", ["x"], ["m"], keepdims=1), helper.make_node("Sub", ["x", "m"], ["y"])],
     {}, (B, 3, 8, 8), "reduces over the batch"),
    ([helper.make_node("Softmax", ["x"], ["y"], axis=0)], {}, (B, 3, 8, 8), "axis 0"),
    ([helper.make_node("Softmax", ["x"], ["y"], axis=-4)], {}, (B, 3, 8, 8), "axis -4"),
    ([helper.make_node("Reshape", ["x", "s"], ["y"])], {"s": np.array([-1, 96], "i8")}, (2 * B, 96), "not batch-major"),
    ([helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0, 2, 3])], {}, (3, B, 8, 8), "not batch-major"),
    ([helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2, 3]),
      helper.make_node("ReduceMean", ["t"], ["m"], axes=[1], keepdims=1), helper.make_node("Sub", ["t", "m"], ["u"]),
      helper.make_node("Transpose", ["u"], ["y"], perm=[1, 0, 2, 3])], {}, (B, 3, 8, 8), "reduces the batch axis 1"),
    ([helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2, 3]), helper.make_node("Reshape", ["t", "s"], ["r"]),
      helper.make_node("Reshape", ["r", "s2"], ["y"])], {"s": np.array([3 * B, 64], "i8"), "s2": np.array([B, 3, 8, 8], "i8")},
     (B, 3, 8, 8), "does not stay the outer factor"),
    ([helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2, 3]),
      helper.make_node("LayerNormalization", ["t", "ln_g"], ["n"], axis=1),
      helper.make_node("Transpose", ["n"], ["y"], perm=[1, 0, 2, 3])], {"ln_g": np.ones((B, 8, 8), "f4")},
     (B, 3, 8, 8), "covers the batch axis 1"),
    ([helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2, 3]), helper.make_node("Conv", ["t", "w"], ["c"]),
      helper.make_node("Transpose", ["c"], ["y"], perm=[1, 0, 2, 3])], {"w": np.ones((3, B, 1, 1), "f4")},
     (B, 3, 8, 8), "reads channels"),
    ([helper.make_node("Add", ["x", "c"], ["y"])], {"c": np.ones((B, 3, 8, 8), "f4")}, (B, 3, 8, 8), "spans the batch axis"),
    ([helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Cast", ["s"], ["c"], to=TensorProto.FLOAT),
      helper.make_node("ReduceProd", ["c"], ["n"], keepdims=1), helper.make_node("Div", ["x", "n"], ["y"])],
     {}, (B, 3, 8, 8), "the batch's size read by ReduceProd"),
    ([helper.make_node("Resize", ["x", "", "", "sz"], ["y"])], {"sz": np.array([B, 3, 16, 16], "i8")},
     (B, 3, 16, 16), "sizes"),
    ([helper.make_node("Pad", ["x", "p"], ["y"])], {"p": np.array([1, 0, 0, 0, 1, 0, 0, 0], "i8")}, (B + 2, 3, 8, 8),
     "not batch-major"),
    ([helper.make_node("Concat", ["x", "x"], ["c"], axis=0), helper.make_node("Slice", ["c", "st", "en", "ax"], ["y"])],
     {"st": np.array([1], "i8"), "en": np.array([B + 1], "i8"), "ax": np.array([0], "i8")}, (B, 3, 8, 8), "axis 0"),
    ([helper.make_node("TopK", ["x", "k"], ["y", "i"], axis=0)], {"k": np.array([B], "i8")}, (B, 3, 8, 8), "axis 0"),
    ([helper.make_node("Gather", ["x", "i"], ["y"], axis=0)], {"i": np.arange(B)[::-1].astype("i8")}, (B, 3, 8, 8),
     "gathers along the batch axis 0"),
    ([helper.make_node("Einsum", ["x"], ["y"], equation="bchw->bchw")], {}, (B, 3, 8, 8), "no rule"),
    ([helper.make_node("Relu", ["x"], ["y"], domain="com.example")], {}, (B, 3, 8, 8), "com.example"),
])
def test_operators_that_may_mix_samples(nodes, inits, out_shape, why):
    got = batch_separable(model(nodes, inits, (B, 3, 8, 8), out_shape), B)
    assert got is not None and why in got, got


def test_softmax_before_opset_13_covers_every_axis_from_its_own():
    t = helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2, 3])
    back = helper.make_node("Transpose", ["s"], ["y"], perm=[1, 0, 2, 3])
    for opset, axis, mixes in [(11, 1, True), (11, 2, False), (13, 1, True), (13, 2, False), (13, 0, False)]:
        m = model([t, helper.make_node("Softmax", ["t"], ["s"], axis=axis), back], out_shape=(B, 3, 8, 8))
        m.opset_import[0].version = opset
        got = batch_separable(m, B)
        assert (got is not None) == mixes, (opset, axis, got)
    m = model([t, helper.make_node("Softmax", ["t"], ["s"], axis=0), back], out_shape=(B, 3, 8, 8))
    m.opset_import[0].version = 11  # axes 0 to 3 flattened into one row: the batch (axis 1) among them
    assert "covers the batch axis 1" in batch_separable(m, B)


def test_an_output_of_constants_alone_is_not_batched():
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Identity", ["c"], ["y"])]
    m = model(nodes, {"c": np.ones((B, 2), "f4")}, out_shape=(B, 2))
    m.graph.output.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, [B, 3, 8, 8]))
    assert "does not depend on the batch" in batch_separable(m, B)


def test_embedding_lookup_by_batched_indices_is_separable():
    g = helper.make_graph([helper.make_node("Gather", ["table", "ids"], ["y"], axis=0)], "g",
                          [helper.make_tensor_value_info("ids", TensorProto.INT64, [B, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, 5, 7])],
                          [numpy_helper.from_array(np.ones((10, 7), "f4"), "table")])
    assert batch_separable(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), B) is None


@pytest.mark.parametrize("batch, streams, expected", [
    (8, 2, (1, 2)), (64, 2, (8, 2)), (6, 2, (1, 2)), (2, 2, (1, 2)), (1, 2, (1, 1)), (8, 1, (8, 1)),
    (30, 4, (1, 4)), (7, 2, (1, 2)), (3, 8, (1, 3)), (96, 2, (12, 2)),
])
def test_split_sizes(batch, streams, expected):
    sub, n = split_sizes(batch, streams)
    assert (sub, n) == expected and batch % sub == 0 and n <= max(1, batch // sub)


def _exported(sym, shape):
    """The whole of ``sym`` exported as a bind exports it (random weights)."""
    from benchmarks.bench_cpu_backends import export_whole
    from tests.harness.mxcheck import random_params

    args, aux = random_params(sym, {"data": shape}, 0)
    return export_whole(sym, args, aux, shape)


def test_exports_of_mxnet_graphs():
    x = mx.sym.var("data")
    c = mx.sym.Convolution(x, num_filter=4, kernel=(3, 3), pad=(1, 1), name="c")
    bn = mx.sym.BatchNorm(c, name="bn", fix_gamma=False)
    fc = mx.sym.FullyConnected(mx.sym.relu(bn), num_hidden=3, name="fc")
    assert batch_separable(_exported(fc, (B, 3, 6, 6)).model, B) is None
    # Samples normalized by the batch's mean: each output sample depends on every input sample.
    mixed = mx.sym.broadcast_sub(fc, mx.sym.mean(fc, axis=0, keepdims=True))
    assert "axis 0" in batch_separable(_exported(mixed, (B, 3, 6, 6)).model, B)
    # A reshape that folds two samples into one row.
    folded = mx.sym.FullyConnected(mx.sym.reshape(x, shape=(B // 2, -1)), num_hidden=3, name="fc2")
    assert batch_separable(_exported(folded, (B, 3, 6, 6)).model, B) is not None


def test_model_macs_counts_convolutions_and_matrix_products():
    from mx_trt.export.separable import model_macs

    # Conv: 4 x 6 x 8 x 8 outputs x 27; Gemm: 4 x 5 outputs x 6.
    assert model_macs(conv_net()) == B * 6 * 64 * 27 + B * 5 * 6
    m = model([helper.make_node("MatMul", ["x", "m"], ["y"])], {"m": np.ones((8, 5), "f4")}, out_shape=(B, 3, 8, 5))
    assert model_macs(m) == B * 3 * 8 * 5 * 8
    t = model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2])], {"w": np.ones((3, 2, 2, 2), "f4")},
              out_shape=(B, 2, 16, 16))
    assert model_macs(t) == B * 3 * 64 * 2 * 2 * 2


def test_short_product_share_is_the_work_in_products_of_few_rows_a_chunk():
    from mx_trt.export.separable import short_product_share

    conv, gemm = B * 6 * 64 * 27, B * 5 * 6  # the convolution: 8x8 = 64 rows a sample; the Gemm: 1
    assert short_product_share(conv_net(), B, 1, 48) == pytest.approx(gemm / (conv + gemm))
    assert short_product_share(conv_net(), B, 1, 65) == 1.0  # 64 rows in a chunk of 1 ...
    assert short_product_share(conv_net(), B, 2, 65) == pytest.approx(gemm / (conv + gemm))  # ... 128 in one of 2
    assert short_product_share(conv_net(), B, 1, 1) == 0.0
    # A matrix product over a (batch, 3, 8) input: 24 rows a sample.
    m = model([helper.make_node("MatMul", ["x", "m"], ["y"])], {"m": np.ones((8, 5), "f4")}, out_shape=(B, 3, 8, 5))
    assert short_product_share(m, B, 1, 24) == 0.0 and short_product_share(m, B, 1, 25) == 1.0


def _chunks_match(m, feeds, batch, sub):
    """Run ``m`` on the whole batch, and its chunk model (:func:`without_batch_constants`, inputs and outputs
    of ``sub`` samples: what a split engine compiles) on each chunk; the results must be equal.
    Returns :func:`batch_split`'s findings."""
    import onnxruntime as ort

    found = batch_split(m, batch)
    assert found.reason is None, found.reason
    chunk = without_batch_constants(m, found.reshapes)
    for v in list(chunk.graph.input) + list(chunk.graph.output):
        v.type.tensor_type.shape.dim[0].dim_value = sub
    del chunk.graph.value_info[:]

    def run(model, inputs):
        return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, inputs)

    whole = run(m, feeds)
    for i in range(0, batch, sub):
        part = run(chunk, {k: v[i:i + sub] for k, v in feeds.items()})
        for w, p in zip(whole, part):
            np.testing.assert_allclose(p, w[i:i + sub], rtol=1e-5, atol=1e-5)
    return found


def test_a_reshape_that_spells_out_the_batch_is_rewritten_for_chunks():
    nodes = [helper.make_node("Reshape", ["x", "s"], ["r"]), helper.make_node("Relu", ["r"], ["y"])]
    m = model(nodes, {"s": np.array([B, -1], "i8")}, out_shape=(B, 192))
    found = _chunks_match(m, {"x": np.random.RandomState(0).randn(B, 3, 8, 8).astype("f4")}, B, 1)
    assert found.reshapes == {"r": (-1, 192)}
    # The model itself is unchanged.
    assert [t.name for t in m.graph.initializer] == ["s"] and list(m.graph.node[0].input) == ["x", "s"]


def test_an_expand_that_spells_out_the_batch_is_rewritten_for_chunks():
    # YOLOv3's nearest upsampling: (B, 3, 8, 8, 1) expanded to [B, 3, 8, 8, 2], the batch written out.
    nodes = [helper.make_node("Unsqueeze", ["x", "ax"], ["u"]), helper.make_node("Expand", ["u", "s"], ["e"]),
             helper.make_node("Reshape", ["e", "r"], ["y"])]
    m = model(nodes, {"ax": np.array([4], "i8"), "s": np.array([B, 3, 8, 8, 2], "i8"),
                      "r": np.array([0, 0, 8, 16], "i8")}, out_shape=(B, 3, 8, 16))
    found = _chunks_match(m, {"x": np.random.RandomState(2).randn(B, 3, 8, 8).astype("f4")}, B, 1)
    assert found.reshapes == {"e": (1, 3, 8, 8, 2)}
    # 1 at the batch axis (broadcasting leaves it): nothing to rewrite.
    m = model(nodes, {"ax": np.array([4], "i8"), "s": np.array([1, 3, 8, 8, 2], "i8"),
                      "r": np.array([0, 0, 8, 16], "i8")}, out_shape=(B, 3, 8, 16))
    assert batch_split(m, B).reshapes == {} and batch_separable(m, B) is None


def attention_net(heads=2):
    """Self-attention as GluonNLP's BERT computes it: time-major, the heads folded into the batch axis, and a
    per-sample mask whose reshape the exporter writes with the batch spelled out."""
    x = mx.sym.var("data")  # (B, T, C)
    t = mx.sym.transpose(x, axes=(1, 0, 2), name="tnc")  # (T, B, C)
    qkv = mx.sym.FullyConnected(t, num_hidden=3 * 16, flatten=False, name="qkv")
    scores = mx.sym.contrib.interleaved_matmul_selfatt_qk(qkv, heads=heads, name="qk")  # (B * heads, T, T)
    keep = mx.sym.broadcast_axis(mx.sym.expand_dims(mx.sym.sum(x, axis=2), axis=1), axis=1, size=heads)
    mask = mx.sym.reshape(keep, shape=(-1, 0), reverse=True, name="mask")  # (B * heads, T)
    att = mx.sym.softmax(mx.sym.broadcast_add(scores, mx.sym.expand_dims(mask, axis=1)), axis=-1, name="att")
    out = mx.sym.contrib.interleaved_matmul_selfatt_valatt(qkv, att, heads=heads, name="va")  # (T, B, C)
    return mx.sym.transpose(out, axes=(1, 0, 2), name="ntc")


@pytest.mark.parametrize("sub", [1, 2])
def test_attention_with_the_batch_moved_and_folded_with_heads_is_separable(sub):
    shape = (B, 6, 16)
    ex = _exported(attention_net(), shape)
    x = np.random.RandomState(3).uniform(-1, 1, shape).astype("f4")
    found = _chunks_match(embedded_model(ex), {ex.input_names[0]: x}, B, sub)
    assert found.reshapes == {"mask_output": (-1, 6)}


def test_batch_split_states_where_the_batch_ends_up():
    # A graph output holding the batch folded with another axis is not batch-major.
    nodes = [helper.make_node("Reshape", ["x", "s"], ["y"])]
    m = model(nodes, {"s": np.array([3 * B, 64], "i8")}, out_shape=(3 * B, 64))
    assert "not batch-major" in batch_separable(m, B)
    m = model(nodes, {"s": np.array([B, 3, 64], "i8")}, out_shape=(B, 3, 64))
    assert batch_split(m, B).reshapes == {"y": (-1, 3, 64)}


def upsampling_net():
    """GluonCV's segmentation head: a bilinear upsampling whose sizes the exporter computes from the input's
    ``Shape``, and a ``zeros_like`` (``ConstantOfShape`` of a ``Shape``)."""
    x = mx.sym.var("data")
    c = mx.sym.Convolution(x, num_filter=4, kernel=(3, 3), pad=(1, 1), name="c")
    up = mx.sym.contrib.BilinearResize2D(c, height=12, width=10, name="up")
    return mx.sym.broadcast_add(up, mx.sym.zeros_like(up), name="out")


@pytest.mark.parametrize("sub", [1, 2])
def test_shapes_computed_from_the_batch_size_a_chunk_by_its_own(sub):
    shape = (B, 3, 6, 5)
    ex = _exported(upsampling_net(), shape)
    assert any(n.op_type == "Shape" for n in ex.model.graph.node)
    x = np.random.RandomState(4).uniform(-1, 1, shape).astype("f4")
    found = _chunks_match(embedded_model(ex), {ex.input_names[0]: x}, B, sub)
    assert found.reshapes == {}


def _shape_graph(nodes, inits=(), out_shape=(B, 3, 8, 8)):
    return model([helper.make_node("Shape", ["x"], ["s"])] + nodes, inits, out_shape=out_shape)


@pytest.mark.parametrize("nodes, inits, out_shape", [
    # Sizes of the batch axis at its own size: the batch element sliced, gathered, concatenated.
    ([helper.make_node("Slice", ["s", "z", "two"], ["n"]), helper.make_node("Concat", ["n", "hw"], ["sz"], axis=0),
      helper.make_node("Resize", ["x", "", "", "sz"], ["y"])],
     {"z": np.array([0], "i8"), "two": np.array([2], "i8"), "hw": np.array([16, 16], "i8")}, (B, 3, 16, 16)),
    ([helper.make_node("Gather", ["s", "i"], ["g"], axis=0), helper.make_node("Reshape", ["x", "g"], ["y"])],
     {"i": np.array([0, 3, 2, 1], "i8")}, (B, 8, 8, 3)),
    ([helper.make_node("ConstantOfShape", ["s"], ["k"]), helper.make_node("Add", ["x", "k"], ["y"])], {}, None),
    ([helper.make_node("Cast", ["s"], ["c"], to=TensorProto.INT64), helper.make_node("Expand", ["one", "c"], ["e"]),
      helper.make_node("Mul", ["x", "e"], ["y"])], {"one": np.ones((1, 3, 1, 1), "f4")}, None),
    # A shape without the batch's element is a constant.
    ([helper.make_node("Slice", ["s", "one", "four"], ["t"]), helper.make_node("ConstantOfShape", ["t"], ["k"]),
      helper.make_node("Add", ["x", "k"], ["y"])], {"one": np.array([1], "i8"), "four": np.array([4], "i8")}, None),
])
def test_operators_on_a_shape_that_holds_the_batch_size(nodes, inits, out_shape):
    m = _shape_graph(nodes, inits, out_shape or (B, 3, 8, 8))
    found = _chunks_match(m, {"x": np.random.RandomState(6).randn(B, 3, 8, 8).astype("f4")}, B, 1)
    assert found.reshapes == {}


@pytest.mark.parametrize("nodes, inits, out_shape, why", [
    ([helper.make_node("Cast", ["s"], ["c"], to=TensorProto.FLOAT), helper.make_node("ReduceProd", ["c"], ["n"]),
      helper.make_node("Div", ["x", "n"], ["y"])], {}, (B, 3, 8, 8), "read by ReduceProd"),
    ([helper.make_node("Gather", ["s", "i"], ["g"], axis=0), helper.make_node("Reshape", ["x", "g"], ["y"])],
     {"i": np.array([1, 0, 2, 3], "i8")}, None, "does not keep the batch"),
    ([helper.make_node("Gather", ["s", "i"], ["g"], axis=0), helper.make_node("Concat", ["g", "g"], ["d"], axis=0),
      helper.make_node("Reshape", ["x", "d"], ["y"])], {"i": np.array([0, 1], "i8")}, None, "two parts"),
    ([helper.make_node("Slice", ["s", "one", "four"], ["t"]), helper.make_node("Concat", ["t", "hw"], ["sz"], axis=0),
      helper.make_node("Resize", ["x", "", "", "sz"], ["y"])],
     {"one": np.array([1], "i8"), "four": np.array([4], "i8"), "hw": np.array([1], "i8")}, None, "sizes"),
    ([helper.make_node("Gather", ["s", "i"], ["g"], axis=0), helper.make_node("Concat", ["g", "hw"], ["sz"], axis=0),
      helper.make_node("Resize", ["x", "", "", "sz"], ["y"])],
     {"i": np.array([1, 0], "i8"), "hw": np.array([8, 8], "i8")}, None, "another size"),
])
def test_a_shape_that_holds_the_batch_size_may_still_mix_samples(nodes, inits, out_shape, why):
    # Declared batch-major (the walk reaches the operator; a computed shape leaves the output's to the model).
    got = batch_separable(_shape_graph(nodes, inits, out_shape or (B, 3, 8, 8)), B)
    assert got is not None and why in got, got
