"""INT8 binds end to end: settings, the table checked at bind, the plan cache key, and the numbers.

Tolerance: tests.harness.int8check (cosine similarity > COSINE_MIN against native fp32,
top-1 agreement on the prototype classifier).
"""
from __future__ import annotations

import dataclasses

import mxnet as mx
import numpy as np
import pytest

import mx_trt
from mx_trt.builder import engines
from mx_trt.frontends.gluon import bind_infos
from mx_trt.errors import CalibrationError, MxTrtError
from mx_trt.settings import Settings, set_use_fp16
from tests.harness.int8check import COSINE_MIN, TOP1_MIN, cosine, prototype_cnn
from tests.harness.mxcheck import random_params


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    n = prototype_cnn()
    cal, _ = n["sample"](32, seed=7)
    path = tmp_path_factory.mktemp("cal") / "table.json"
    mx_trt.calibrate(n["sym"], (n["args"], n["aux"]), [cal[i:i + 8] for i in range(0, 32, 8)], out=path, progress=False)
    n["table"] = str(path)
    return n


def _bind(net, x, monkeypatch, env):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    exe = net["sym"].simple_bind(mx.cpu(), data=x.shape, grad_req="null", shared_buffer={**net["args"], **net["aux"]})
    if env.get("MXNET_USE_TENSORRT") == "0":
        exe.copy_params_from(net["args"], net["aux"])
    exe.arg_dict["data"][:] = x
    exe.forward(is_train=False)
    return exe, exe.outputs[0].asnumpy()


INT8 = {"MXNET_USE_TENSORRT": "1", "MXNET_TENSORRT_PRECISION": "int8", "MXNET_TENSORRT_CACHE_DIR": ""}


def test_int8_bind_matches_native_within_int8_tolerance(net, monkeypatch):
    x, labels = net["sample"](64, seed=11)
    _, ref = _bind(net, x, monkeypatch, {"MXNET_USE_TENSORRT": "0"})
    exe, got = _bind(net, x, monkeypatch, dict(INT8, MXNET_TENSORRT_CALIBRATION=net["table"], MXNET_TENSORRT_STRICT="1"))
    info = mx_trt.bind_info(exe)
    assert len(info.engines) == 1 and info.engines[0].run_count >= 1
    assert COSINE_MIN < cosine(got, ref) < 1 - 1e-7  # int8 numbers, not fp32 ones
    assert (got.argmax(1) == ref.argmax(1)).mean() >= TOP1_MIN
    assert (ref.argmax(1) == labels).mean() == 1.0  # the classifier is right natively


def test_int8_without_a_table_raises_even_when_not_strict(net, monkeypatch):
    x, _ = net["sample"](2)
    monkeypatch.delenv("MXNET_TENSORRT_CALIBRATION", raising=False)
    monkeypatch.setenv("MXNET_TENSORRT_STRICT", "0")
    with pytest.raises(CalibrationError, match="need a calibration table"):
        _bind(net, x, monkeypatch, INT8)


def test_another_graphs_table_is_refused_at_bind(net, monkeypatch, tmp_path):
    other = mx.sym.Convolution(mx.sym.var("data"), num_filter=2, kernel=(1, 1), name="c")
    args, aux = random_params(other, {"data": (2, 3, 4, 4)})
    path = tmp_path / "other.json"
    mx_trt.calibrate(other, (args, aux), [np.ones((2, 3, 4, 4), np.float32)], method="minmax", out=path, progress=False)
    x, _ = net["sample"](2)
    with pytest.raises(CalibrationError, match="another graph"):
        _bind(net, x, monkeypatch, dict(INT8, MXNET_TENSORRT_CALIBRATION=str(path), MXNET_TENSORRT_STRICT="0"))


def test_corrupt_table_is_refused_at_bind(net, monkeypatch, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"format": "mx_trt.calibration/1", "tensors": ')
    x, _ = net["sample"](2)
    with pytest.raises(CalibrationError, match="not valid JSON"):
        _bind(net, x, monkeypatch, dict(INT8, MXNET_TENSORRT_CALIBRATION=str(path)))


def test_precision_and_table_are_in_the_plan_cache_key(net, monkeypatch, tmp_path):
    """Same table: the engine comes from the cache; another table (or fp32): built again."""
    x, _ = net["sample"](2)
    cal2, _ = net["sample"](8, seed=99)
    other = tmp_path / "t2.json"
    mx_trt.calibrate(net["sym"], (net["args"], net["aux"]), [cal2], method="minmax", out=other, progress=False)
    cache = {"MXNET_TENSORRT_CACHE_DIR": str(tmp_path / "cache")}
    runs = [("int8", net["table"], "built"), ("int8", net["table"], "disk"), ("int8", str(other), "built"),
            ("fp32", None, "built"), ("fp32", None, "disk")]
    outs = []
    for precision, table, want in runs:
        engines.clear_pool()
        env = dict(INT8, **cache, MXNET_TENSORRT_PRECISION=precision)
        if table:
            env["MXNET_TENSORRT_CALIBRATION"] = table
        else:
            monkeypatch.delenv("MXNET_TENSORRT_CALIBRATION", raising=False)
        exe, y = _bind(net, x, monkeypatch, env)
        assert [e.source for e in mx_trt.bind_info(exe).engines] == [want], (precision, table)
        outs.append(y)
        del exe
    engines.clear_pool()
    np.testing.assert_array_equal(outs[1], outs[0])  # the stored int8 engine computes what the built one did
    assert not np.array_equal(outs[2], outs[0]) and not np.array_equal(outs[3], outs[0])


def test_exclusions_keep_operators_in_float(net, monkeypatch, caplog):
    x, _ = net["sample"](2)
    with caplog.at_level("INFO", logger="mx_trt.export.dynamic"):
        _bind(net, x, monkeypatch, dict(INT8, MXNET_TENSORRT_CALIBRATION=net["table"],
                                        MXNET_TENSORRT_INT8_EXCLUDE_OPS="elemwise_add",
                                        MXNET_TENSORRT_INT8_KEEP_OUTPUT_LAYER="1"))
    text = caplog.text
    assert "4 operator(s) in int8" in text
    assert "b1_add (elemwise_add is listed in int8_exclude_ops)" in text
    assert "fc (the output layer is kept in float (int8_keep_output_layer))" in text


# Settings


def test_settings_from_the_environment(monkeypatch):
    monkeypatch.setenv("MXNET_TENSORRT_PRECISION", "int8")
    monkeypatch.setenv("MXNET_TENSORRT_CALIBRATION", "t.json")
    monkeypatch.setenv("MXNET_TENSORRT_INT8_EXCLUDE_NODES", "fc, head")
    s = Settings.from_env()
    assert (s.precision, s.int8, s.fp16, s.calibration) == ("int8", True, False, "t.json")
    assert s.int8_exclude_nodes == {"fc", "head"}
    monkeypatch.setenv("MXNET_TENSORRT_PRECISION", "fp16")
    assert Settings.from_env().precision == "fp16"
    monkeypatch.setenv("MXNET_TENSORRT_PRECISION", "bf16")
    assert (Settings.from_env().precision, Settings.from_env().int8) == ("bf16", False)
    monkeypatch.setenv("MXNET_TENSORRT_PRECISION", "tf32")
    with pytest.raises(MxTrtError, match="MXNET_TENSORRT_PRECISION='tf32'"):
        Settings.from_env()


def test_int8_and_fp16_together_are_refused(monkeypatch):
    monkeypatch.setenv("MXNET_TENSORRT_PRECISION", "int8")
    monkeypatch.setenv("MXNET_TENSORRT_CALIBRATION", "t.json")
    set_use_fp16(True)
    try:
        with pytest.raises(MxTrtError, match="ask for one precision"):
            Settings.from_env()
    finally:
        set_use_fp16(None)


def test_set_use_fp16_still_works(monkeypatch):
    monkeypatch.delenv("MXNET_TENSORRT_PRECISION", raising=False)
    set_use_fp16(True)
    try:
        assert Settings.from_env().precision == "fp16"
    finally:
        set_use_fp16(None)
    assert Settings.from_env().precision == "fp32"


def test_options(net):
    table = mx_trt.load_table(net["table"])
    s = Settings().with_options({"precision": "int8", "calibration": table, "int8_exclude_ops": "FullyConnected",
                                 "int8_keep_output_layer": True})
    assert s.int8 and s.calibration is table and s.int8_exclude_ops == {"FullyConnected"} and s.int8_keep_output_layer
    assert s.with_options({"fp16": True}).precision == "fp16"
    assert s.with_options({"precision": "fp32"}).precision == "fp32"
    with pytest.raises(CalibrationError, match="need a calibration table"):
        Settings().with_options({"precision": "int8"})
    with pytest.raises(MxTrtError, match="calibration=3"):
        Settings().with_options({"calibration": 3})
    assert dataclasses.replace(s, int8=False).precision == "fp32"


def test_optimize_for_takes_the_int8_options(net):
    x, _ = net["sample"](4, seed=3)
    args, aux = dict(net["args"]), dict(net["aux"])
    trt_sym = net["sym"].optimize_for("TensorRT", args, aux, mx.cpu(), shape_dict={"data": x.shape},
                                      precision="int8", calibration=net["table"], strict=True, cache_dir="")
    try:
        exe = trt_sym.simple_bind(mx.cpu(), data=x.shape, grad_req="null")
        exe.copy_params_from(args, aux)
        exe.arg_dict["data"][:] = x
        exe.forward(is_train=False)
        got = exe.outputs[0].asnumpy()
    finally:
        mx_trt.release(trt_sym)
    from tests.harness.mxcheck import run_native

    ref = run_native(net["sym"], {"data": x.shape}, net["args"], net["aux"], {"data": x})[0]
    assert COSINE_MIN < cosine(got, ref) < 1 - 1e-7


def test_tensorrt_bind_takes_the_int8_options(net, monkeypatch):
    monkeypatch.delenv("MXNET_TENSORRT_PRECISION", raising=False)
    monkeypatch.setenv("MXNET_TENSORRT_CACHE_DIR", "")
    x, _ = net["sample"](4, seed=5)
    exe = mx_trt.tensorrt_bind(net["sym"], mx.cpu(), {**net["args"], **net["aux"]}, data=x.shape,
                               precision="int8", calibration=mx_trt.load_table(net["table"]), strict=True)
    exe.arg_dict["data"][:] = x
    exe.forward(is_train=False)
    from tests.harness.mxcheck import run_native

    ref = run_native(net["sym"], {"data": x.shape}, net["args"], net["aux"], {"data": x})[0]
    got = exe.outputs[0].asnumpy()
    assert [e.run_count for e in mx_trt.bind_info(exe).engines] == [1]
    assert COSINE_MIN < cosine(got, ref) < 1 - 1e-7  # int8 numbers, not fp32 ones
    with pytest.raises(CalibrationError, match="need a calibration table"):
        mx_trt.tensorrt_bind(net["sym"], mx.cpu(), {**net["args"], **net["aux"]}, data=x.shape, precision="int8")


def test_gluon_hybridize_takes_the_int8_options(net, monkeypatch):
    """The table calibrated on the exported symbol serves the Gluon block of the same graph."""
    monkeypatch.setenv("MXNET_TENSORRT_CACHE_DIR", "")
    block = mx.gluon.SymbolBlock(net["sym"], [mx.sym.var("data")])
    for name, p in block.collect_params().items():
        p._load_init(net["args"].get(name, net["aux"].get(name)), mx.cpu())
    block.hybridize(backend="TensorRT", static_alloc=True, static_shape=True, precision="int8",
                    calibration=net["table"], strict=True)
    x, _ = net["sample"](4, seed=6)
    got = block(mx.nd.array(x)).asnumpy()
    from tests.harness.mxcheck import run_native

    ref = run_native(net["sym"], {"data": x.shape}, net["args"], net["aux"], {"data": x})[0]
    infos = bind_infos(block)
    assert len(infos) == 1 and [e.run_count for e in infos[0].engines] == [1]  # the int8 engine ran
    assert 0 < cosine(got, ref) - COSINE_MIN and cosine(got, ref) < 1 - 1e-7  # int8, not an fp32 engine
    np.testing.assert_array_equal(got.argmax(1), ref.argmax(1))


def test_a_table_calibrated_with_other_options_is_one_warning(net, monkeypatch, tmp_path, caplog):
    """Calibrated with FullyConnected left native, bound with it inside the engine: fc stays float, said once."""
    cal, _ = net["sample"](8, seed=21)
    path = tmp_path / "no_fc.json"
    mx_trt.calibrate(net["sym"], (net["args"], net["aux"]), [cal], method="minmax", out=path, progress=False,
                     exclude_ops=["FullyConnected"])
    x, _ = net["sample"](2)
    with caplog.at_level("INFO", logger="mx_trt"):
        exe, _ = _bind(net, x, monkeypatch, dict(INT8, MXNET_TENSORRT_CALIBRATION=str(path), MXNET_TENSORRT_STRICT="1"))
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "fc (no calibrated range for flat_output)" in warnings[0], warnings
    assert "calibrate with the options of this bind" in warnings[0]
    assert len(mx_trt.bind_info(exe).engines) == 1
