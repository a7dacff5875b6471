"""``mx_trt.export_onnx``: the whole graph as one ONNX file, run by ONNX Runtime in a process without MXNet.

Every file is run in a child process where ``import mxnet`` and ``import mx_trt``
fail (``mxfree_run.py``) and compared with native MXNet in this process:

- fp32: ``rtol=1e-4, atol=1e-5``;
- fp16: ``rtol=2e-2`` and ``atol`` 2% of the outputs' largest magnitude;
- int8: a relative L2 error under 0.1 against native (and against the fp32 file,
  from which it must differ), and the same outputs as the int8 engine of a bind
  with the same table (``rtol=1e-4``, ``atol`` 1e-4 of the outputs' magnitude).
"""
from __future__ import annotations

import logging
import os

import mxnet as mx
import numpy as np
import onnx
import pytest
from mxnet.gluon.model_zoo import vision

import mx_trt
from mx_trt.artifacts_onnx import EXPORT_OPSET, MAX_OPSET, MIN_OPSET
from mx_trt.builder.backends import BACKENDS
from mx_trt.errors import CalibrationError, ExportError, NotConvertibleError
from mx_trt.pipeline.plan import analyze
from mx_trt.pipeline.request import BindRequest
from mx_trt.settings import Settings
from tests.harness import userops
from tests.deploy.helpers import assert_close, native, run_without_mxnet


def _params(sym, shapes, seed=0, dtypes=None):
    """Seeded weights for every argument and aux state that is not a data input."""
    rng = np.random.RandomState(seed)
    arg_shapes, _, aux_shapes = sym.infer_shape(**shapes)
    out = {}
    for n, s in zip(sym.list_arguments(), arg_shapes):
        if n not in shapes:
            out[n] = mx.nd.array(rng.uniform(-0.5, 0.5, s))
    for n, s in zip(sym.list_auxiliary_states(), aux_shapes):
        out[n] = mx.nd.array(rng.uniform(0.5, 1.5, s) if n.endswith("var") else rng.uniform(-0.1, 0.1, s))
    return out


@pytest.fixture(scope="module")
def mobilenet():
    """MobileNetV2 0.25 from MXNet's model zoo at 32x32: (symbol, params), seeded, BatchNorm statistics set."""
    mx.random.seed(0)
    rng = np.random.RandomState(0)
    net = vision.get_model("mobilenetv2_0.25", pretrained=False)
    net.initialize(mx.init.Xavier(magnitude=2.0))
    net(mx.nd.zeros((1, 3, 32, 32)))
    sym = net(mx.sym.var("data"))
    params = {}
    for name, p in net.collect_params().items():
        v = p.data()
        if name.endswith("running_var"):
            v = mx.nd.array(rng.uniform(0.5, 1.5, p.shape))
        elif name.endswith("running_mean"):
            v = mx.nd.array(rng.uniform(-0.1, 0.1, p.shape))
        params[name] = v.copy()
    return sym, params


def _cnn():
    """conv-BN-relu-pool twice, a residual add, FullyConnected: what int8 quantizes."""
    x = mx.sym.var("data")
    h = mx.sym.Activation(mx.sym.BatchNorm(mx.sym.Convolution(x, num_filter=8, kernel=(3, 3), pad=(1, 1), name="c0"),
                                           fix_gamma=False, name="bn0"), act_type="relu", name="r0")
    h2 = mx.sym.Activation(mx.sym.Convolution(h, num_filter=8, kernel=(3, 3), pad=(1, 1), name="c1"),
                           act_type="relu", name="r1")
    h = mx.sym.Pooling(mx.sym.elemwise_add(h, h2, name="res0"), kernel=(2, 2), stride=(2, 2), pool_type="max",
                       name="p0")  # named: MXNet's own names (_plusN) depend on what ran before
    return mx.sym.FullyConnected(mx.sym.flatten(h), num_hidden=10, name="fc")


def test_zoo_classifier_runs_without_mxnet_at_two_batches(mobilenet, tmp_path):
    sym, params = mobilenet
    path = str(tmp_path / "mobilenet.onnx")
    result = mx_trt.export_onnx(sym, params, {"data": (2, 3, 32, 32)}, path)
    assert result.batch_dynamic and result.data_path is None and result.opset == EXPORT_OPSET
    assert result.inputs == [("data", ("batch", 3, 32, 32), "float32")]
    assert [o[0] for o in result.outputs] == sym.list_outputs()
    assert os.listdir(tmp_path) == ["mobilenet.onnx"]
    onnx.checker.check_model(path)
    for batch in (1, 5):
        x = np.random.RandomState(batch).uniform(-1, 1, (batch, 3, 32, 32)).astype("float32")
        got = run_without_mxnet(path, {"data": x}, str(tmp_path))
        want = native(sym, params, {"data": x})
        assert list(got) == list(want)
        for name in want:
            assert_close(got[name], want[name])


def test_fp16_variant(mobilenet, tmp_path):
    sym, params = mobilenet
    path = str(tmp_path / "fp16.onnx")
    result = mx_trt.export_onnx(sym, params, {"data": (1, 3, 32, 32)}, path, precision="fp16")
    assert result.precision == "fp16"
    model = onnx.load(path)
    kinds = {t.data_type for t in model.graph.initializer if len(t.dims) == 4}
    assert kinds == {onnx.TensorProto.FLOAT16}, "the convolution weights are not fp16"
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT  # fp32 I/O, as MXNet's
    x = np.random.RandomState(3).uniform(-1, 1, (3, 3, 32, 32)).astype("float32")
    got = run_without_mxnet(path, {"data": x}, str(tmp_path))
    want = native(sym, params, {"data": x})
    for name, w in want.items():
        assert_close(got[name], w, rtol=2e-2, atol=2e-2 * float(np.abs(w).max()))
        assert not np.array_equal(got[name], w)


def test_bf16_is_refused_naming_what_to_do_instead(mobilenet, tmp_path):
    sym, params = mobilenet
    path = tmp_path / "bf16.onnx"
    with pytest.raises(ExportError, match="bf16 is a precision of engines, not of an ONNX file.*--precision bf16"):
        mx_trt.export_onnx(sym, params, {"data": (1, 3, 32, 32)}, str(path), precision="bf16")
    assert not path.exists()


def test_int8_variant_with_a_table_from_calibrate(tmp_path):
    sym = _cnn()
    params = _params(sym, {"data": (4, 3, 16, 16)})
    rng = np.random.RandomState(7)
    batches = [{"data": rng.uniform(-1, 1, (4, 3, 16, 16)).astype("float32")} for _ in range(8)]
    table = str(tmp_path / "calib.json")
    mx_trt.calibrate(sym, params, batches, method="minmax", out=table, progress=False)
    fp32 = mx_trt.export_onnx(sym, params, {"data": (4, 3, 16, 16)}, str(tmp_path / "fp32.onnx"))
    int8 = mx_trt.export_onnx(sym, params, {"data": (4, 3, 16, 16)}, str(tmp_path / "int8.onnx"),
                              precision="int8", calibration=table)
    assert int8.precision == "int8" and sorted(int8.quantized) == ["c0", "c1", "fc", "res0"], int8.quantized
    ops = [n.op_type for n in onnx.load(int8.path).graph.node]
    assert ops.count("QuantizeLinear") >= 3 and ops.count("DequantizeLinear") >= 3
    x = rng.uniform(-1, 1, (4, 3, 16, 16)).astype("float32")
    got = run_without_mxnet(int8.path, {"data": x}, str(tmp_path))["fc_output"]
    ref = run_without_mxnet(fp32.path, {"data": x}, str(tmp_path))["fc_output"]
    want = native(sym, params, {"data": x})["fc_output"]
    assert_close(ref, want)
    assert not np.allclose(got, ref, rtol=1e-4, atol=1e-5), "the int8 file computes what the fp32 one does"
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 0.1
    # The same graph as the int8 engine of a bind with this table.
    exe = sym.simple_bind(mx.cpu(), data=x.shape, grad_req="null", shared_buffer=dict(params))
    bound = mx_trt.bind_info(exe)
    assert bound is None  # the bind above ran natively (MXNET_USE_TENSORRT is not set)
    trt_sym = sym.optimize_for("TensorRT", dict(params), {}, mx.cpu(), shape_dict={"data": x.shape},
                               precision="int8", calibration=table, engine_rule="always", strict=True)
    try:
        exe = trt_sym.simple_bind(mx.cpu(), data=x.shape, grad_req="null")
        exe.forward(is_train=False, data=mx.nd.array(x))
        engine = exe.outputs[0].asnumpy()
    finally:
        mx_trt.release(trt_sym)
    assert_close(got, engine, rtol=1e-4, atol=1e-4 * float(np.abs(engine).max()))


def test_int8_without_a_table_is_refused(tmp_path):
    sym = _cnn()
    with pytest.raises(CalibrationError):
        mx_trt.export_onnx(sym, _params(sym, {"data": (1, 3, 16, 16)}), {"data": (1, 3, 16, 16)},
                           str(tmp_path / "m.onnx"), precision="int8")
    assert not os.listdir(tmp_path)


def test_several_inputs_and_outputs_named_as_mxnet_names_them(tmp_path):
    a, b = mx.sym.var("a"), mx.sym.var("b")
    fc = mx.sym.FullyConnected(mx.sym.concat(a, b, dim=1), num_hidden=6, name="fc")
    parts = mx.sym.split(fc, num_outputs=2, axis=1, name="split")
    dropped = mx.sym.Dropout(mx.sym.tanh(parts[0], name="tanh"), p=0.5, name="drop")  # gone at inference
    sym = mx.sym.Group([dropped, parts[1], mx.sym.sum(b * 2.0, axis=1, name="bsum")])
    shapes = {"a": (3, 4), "b": (3, 5)}
    params = _params(sym, shapes)
    # A tuple (arg_params, aux_params) works as well as one dict.
    result = mx_trt.export_onnx(sym, (params, {}), shapes, str(tmp_path / "multi.onnx"))
    assert [i[0] for i in result.inputs] == ["a", "b"]
    assert [o[0] for o in result.outputs] == sym.list_outputs() == ["drop_output", "split_output1", "bsum_output"]
    assert result.batch_dynamic
    rng = np.random.RandomState(1)
    for batch in (1, 4):
        feeds = {"a": rng.uniform(-1, 1, (batch, 4)).astype("float32"),
                 "b": rng.uniform(-1, 1, (batch, 5)).astype("float32")}
        got = run_without_mxnet(result.path, feeds, str(tmp_path))
        want = native(sym, params, feeds)
        assert list(got) == list(want)
        for name in want:
            assert_close(got[name], want[name])


def test_integer_inputs(tmp_path):
    tokens = mx.sym.var("tokens")
    emb = mx.sym.Embedding(tokens, input_dim=50, output_dim=8, name="emb")
    sym = mx.sym.FullyConnected(mx.sym.mean(emb, axis=1), num_hidden=3, name="fc")
    shapes = {"tokens": (2, 7)}
    params = {k: v.asnumpy() for k, v in _params(sym, shapes).items()}  # numpy weights work too
    result = mx_trt.export_onnx(sym, params, shapes, str(tmp_path / "tokens.onnx"), type_dict={"tokens": "int32"})
    assert result.inputs == [("tokens", ("batch", 7), "int32")]
    feeds = {"tokens": np.random.RandomState(2).randint(0, 50, (3, 7)).astype("int32")}
    got = run_without_mxnet(result.path, feeds, str(tmp_path))
    assert_close(got["fc_output"], native(sym, params, feeds, {"tokens": "int32"})["fc_output"])


def test_a_graph_fixed_to_its_batch_is_exported_static_with_a_log_line(tmp_path, caplog):
    x = mx.sym.var("data")
    sym = mx.sym.FullyConnected(mx.sym.reshape(x, shape=(2, 12)), num_hidden=3, name="fc")  # the batch is in the graph
    shapes = {"data": (2, 3, 4)}
    params = _params(sym, shapes)
    with caplog.at_level(logging.INFO, logger="mx_trt"):
        result = mx_trt.export_onnx(sym, params, shapes, str(tmp_path / "static.onnx"))
    assert not result.batch_dynamic and result.static_reason
    assert result.inputs == [("data", (2, 3, 4), "float32")]
    assert any("static batch 2, not batch-dynamic" in r.getMessage() for r in caplog.records)
    feeds = {"data": np.random.RandomState(0).uniform(-1, 1, shapes["data"]).astype("float32")}
    got = run_without_mxnet(result.path, feeds, str(tmp_path))
    assert_close(got["fc_output"], native(sym, params, feeds)["fc_output"])
    # Asked for: static even where the batch could vary.
    fixed = mx_trt.export_onnx(_cnn(), _params(_cnn(), {"data": (1, 3, 8, 8)}), {"data": (1, 3, 8, 8)},
                               str(tmp_path / "fixed.onnx"), dynamic_batch=False)
    assert not fixed.batch_dynamic and fixed.static_reason is None and fixed.inputs[0][1] == (1, 3, 8, 8)


def test_weights_past_the_threshold_go_to_external_data(mobilenet, tmp_path):
    sym, params = mobilenet
    path = str(tmp_path / "big.onnx")
    result = mx_trt.export_onnx(sym, params, {"data": (1, 3, 32, 32)}, path, external_threshold=100_000)
    assert result.bytes > 100_000 and result.data_path == path + ".data"
    assert sorted(os.listdir(tmp_path)) == ["big.onnx", "big.onnx.data"]
    # Initializers under 1 KB stay inline; the weights are in the data file.
    assert os.path.getsize(path) * 5 < os.path.getsize(result.data_path)
    model = onnx.load(path, load_external_data=False)
    external = [t for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    assert external and {kv.value for t in external for kv in t.external_data if kv.key == "location"} == {"big.onnx.data"}
    x = np.random.RandomState(0).uniform(-1, 1, (2, 3, 32, 32)).astype("float32")
    got = run_without_mxnet(path, {"data": x}, str(tmp_path))
    want = native(sym, params, {"data": x})
    for name in want:
        assert_close(got[name], want[name])
    with pytest.raises(ExportError, match="external_threshold"):
        mx_trt.export_onnx(sym, params, {"data": (1, 3, 32, 32)}, path, external_threshold=2**31)


@pytest.mark.parametrize("opset", [MIN_OPSET + 1, MAX_OPSET])
def test_opsets(opset, tmp_path):
    sym = mx.sym.LayerNorm(_cnn(), axis=-1, name="ln")  # LayerNorm and mean reductions change form across opsets
    sym = mx.sym.mean(mx.sym.softmax(sym, axis=-1, name="sm"), axis=1, keepdims=True, name="m")
    shapes = {"data": (2, 3, 8, 8)}
    params = _params(sym, shapes)
    path = str(tmp_path / "m.onnx")
    result = mx_trt.export_onnx(sym, params, shapes, path, opset=opset, external_threshold=0)
    model = onnx.load(path)
    assert result.opset == opset and [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] == [opset]
    onnx.checker.check_model(model)
    feeds = {"data": np.random.RandomState(0).uniform(-1, 1, (3, 3, 8, 8)).astype("float32")}
    got = run_without_mxnet(path, feeds, str(tmp_path))
    assert_close(got["m_output"], native(sym, params, feeds)["m_output"])


@pytest.mark.parametrize("opset", [MIN_OPSET - 1, MAX_OPSET + 1, "17", True])
def test_an_opset_out_of_range_names_the_range(opset, tmp_path):
    with pytest.raises(ExportError, match=f"opsets {MIN_OPSET} to {MAX_OPSET} \\(default {EXPORT_OPSET}\\)"):
        mx_trt.export_onnx(_cnn(), {}, {"data": (1, 3, 8, 8)}, str(tmp_path / "m.onnx"), opset=opset)


def test_unconvertible_operators_are_listed_with_the_reasons_partition_gives(tmp_path, monkeypatch):
    monkeypatch.setenv("MXNET_TENSORRT_EXCLUDE_OPS", "Pooling")
    x = mx.sym.var("data")
    c = mx.sym.Convolution(x, num_filter=4, kernel=(3, 3), pad=(1, 1), name="conv")
    sq = userops.square(c, "sq")
    p = mx.sym.Pooling(sq, kernel=(2, 2), stride=(2, 2), pool_type="max", name="pool")
    sym = mx.sym.FullyConnected(p, num_hidden=3, name="fc")
    shapes = {"data": (1, 3, 8, 8)}
    params = _params(sym, shapes)
    with pytest.raises(NotConvertibleError) as info:
        mx_trt.export_onnx(sym, params, shapes, str(tmp_path / "m.onnx"))
    assert not os.listdir(tmp_path)
    plan = analyze(BindRequest(sym, shapes, params, Settings.from_env(), BACKENDS["onnxruntime"]()))
    expected = [(plan.graph.nodes[n].name, plan.graph.nodes[n].op, why) for n, why in sorted(plan.reasons.items())]
    assert info.value.operators == expected
    assert [(n, op) for n, op, _ in expected] == [("sq", "Custom"), ("pool", "Pooling")]
    assert "no converter for custom operator user_square" in expected[0][2]
    assert "MXNET_TENSORRT_EXCLUDE_OPS" in expected[1][2]
    text = str(info.value)
    assert "2 of 4 operators do not convert" in text and "sq (Custom)" in text and "pool (Pooling)" in text
    # The cost rule plays no part: a one-operator graph, which no bind would make an engine of, exports.
    one = mx.sym.relu(mx.sym.var("data"), name="relu")
    assert mx_trt.export_onnx(one, {}, shapes, str(tmp_path / "one.onnx"), engine_rule="cost").batch_dynamic


def test_bad_options_and_params_are_typed_errors(tmp_path):
    with pytest.raises(mx_trt.MxTrtError, match="unknown option 'fp17'"):
        mx_trt.export_onnx(_cnn(), {}, {"data": (1, 3, 8, 8)}, str(tmp_path / "m.onnx"), fp17=True)
    with pytest.raises(ExportError, match="params must be"):
        mx_trt.export_onnx(_cnn(), [1, 2, 3], {"data": (1, 3, 8, 8)}, str(tmp_path / "m.onnx"))


def test_tensorrt_rules_and_int8_form(tmp_path):
    """``backend="tensorrt"``: TensorRT's support rules and its symmetric int8 (int8 zero points), run here by
    ONNX Runtime; nothing is built, so TensorRT need not be installed."""
    sym = _cnn()
    params = _params(sym, {"data": (2, 3, 16, 16)})
    rng = np.random.RandomState(3)
    table = mx_trt.calibrate(sym, params, [{"data": rng.uniform(-1, 1, (2, 3, 16, 16)).astype("float32")}
                                           for _ in range(4)], method="minmax", progress=False, backend="tensorrt")
    result = mx_trt.export_onnx(sym, params, {"data": (2, 3, 16, 16)}, str(tmp_path / "trt.onnx"),
                                backend="tensorrt", precision="int8", calibration=table)
    assert result.backend == "tensorrt" and result.quantized
    model = onnx.load(result.path)
    zero_points = {n.input[2] for n in model.graph.node if n.op_type == "QuantizeLinear" and len(n.input) > 2}
    kinds = {t.data_type for t in model.graph.initializer if t.name in zero_points}
    assert kinds == {onnx.TensorProto.INT8}, kinds
    x = rng.uniform(-1, 1, (3, 3, 16, 16)).astype("float32")
    got = run_without_mxnet(result.path, {"data": x}, str(tmp_path))["fc_output"]
    want = native(sym, params, {"data": x})["fc_output"]
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 0.1
