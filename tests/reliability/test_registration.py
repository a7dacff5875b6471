"""Registering user code: bad arguments fail at registration, with a clear message; surprises are logged.

Before, ``register_converter('NoSuchOp')``, ``backends=['foo']`` and
``priority='high'`` were accepted (or failed at the first bind, obscurely), a
validator that raised was a silent refusal, and registering a plugin again
replaced it under a live executor without a word.
"""
from __future__ import annotations

import logging

import mxnet as mx
import numpy as np
import pytest

import mx_trt
from mx_trt.export.converters.user import list_converters
from tests.harness.bindcheck import bind, native_reasons
from tests.harness.mxcheck import random_inputs
from tests.harness.userops import register_doubling_op

SHAPES = {"data": (2, 3, 4, 4)}


register_doubling_op("rel_reg")


def doubles(ctx):
    ctx.emit("Mul", [ctx.inputs[0], ctx.const(np.float32(2.0), "two")], ctx.outputs)


def broken_validator(spec):
    raise KeyError("no such attribute")


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    monkeypatch.setenv("MXNET_TENSORRT_ENGINE_RULE", "always")
    monkeypatch.setenv("MXNET_TENSORRT_CACHE_DIR", "")
    yield
    mx_trt.unregister_converter("Custom:rel_reg")
    mx_trt.unregister_plugin("Custom:rel_reg")


@pytest.mark.parametrize("op, kwargs, message", [
    ("NoSuchOp", {}, "register_converter: MXNet has no operator 'NoSuchOp'"),
    ("", {}, "bad operator name ''"),
    ("Activation", {"backends": ["foo"]}, r"backends \['foo'\]: each must be one of onnxruntime, tensorrt"),
    ("Activation", {"backends": []}, r"backends \[\]: each must be one of"),
    ("Activation", {"priority": "high"}, "priority must be an integer .*got 'high'"),
    ("Activation", {"priority": True}, "priority must be an integer"),
    ("Activation", {"validator": "nope"}, "validator must be a function or None, got str"),
])
def test_register_converter_refuses_bad_arguments_at_registration(op, kwargs, message):
    with pytest.raises(ValueError, match=message):
        mx_trt.register_converter(op, **kwargs)
    assert not [c for c in list_converters() if c.source.startswith("user:") and c.op in (op, "Activation")]


def test_a_backend_given_as_one_string_is_that_backend():
    mx_trt.register_converter("Custom:rel_reg", backends="onnxruntime")(doubles)
    (row,) = [c for c in list_converters() if c.op == "Custom:rel_reg"]
    assert row.backends == "onnxruntime"


def test_register_plugin_refuses_an_unknown_operator_and_a_bad_priority():
    with pytest.raises(ValueError, match="register_plugin: MXNet has no operator 'NoSuchOp'"):
        mx_trt.register_plugin("NoSuchOp", domain="rel.ops", onnxruntime=lambda x: x)
    with pytest.raises(ValueError, match="priority must be an integer"):
        mx_trt.register_plugin("Custom:rel_reg", domain="rel.ops", onnxruntime=lambda x: x, priority="high")


def graph():
    r = mx.sym.relu(mx.sym.var("data"), name="r")
    return mx.sym.relu(mx.sym.Custom(r, op_type="rel_reg", name="dbl"), name="out")


def test_a_validator_that_raises_is_a_logged_refusal(monkeypatch, caplog):
    mx_trt.register_converter("Custom:rel_reg", validator=broken_validator)(doubles)
    with caplog.at_level(logging.WARNING, logger="mx_trt"):
        exe, _ = bind(graph(), SHAPES, {}, {}, random_inputs(SHAPES, 1), True, monkeypatch)
    reason = native_reasons(mx_trt.bind_info(exe))["dbl"]
    assert reason.startswith("validator raised KeyError: 'no such attribute' (user converter ")
    logged = [r for r in caplog.records if "its validator raised KeyError on node 'dbl'" in r.getMessage()]
    assert logged and logged[0].exc_info is not None and "broken_validator" in caplog.text  # with its traceback


def test_registering_a_plugin_again_under_a_live_executor_warns_and_the_executor_keeps_its_function(
        monkeypatch, caplog):
    mx_trt.register_plugin("Custom:rel_reg", domain="rel.ops", op_type="Reg", onnxruntime=lambda x: x * 2)
    inputs = random_inputs(SHAPES, 1)
    exe, first = bind(graph(), SHAPES, {}, {}, inputs, True, monkeypatch)
    assert len(mx_trt.bind_info(exe).engines) == 1
    with caplog.at_level(logging.WARNING, logger="mx_trt"):
        mx_trt.register_plugin("Custom:rel_reg", domain="rel.ops", op_type="Reg", onnxruntime=lambda x: x * 3,
                               version="2")
    warned = [r.getMessage() for r in caplog.records if "registered again while 1 live engine" in r.getMessage()]
    assert len(warned) == 1 and "rel.ops::Reg" in warned[0]
    exe.forward(is_train=False)
    np.testing.assert_array_equal(exe.outputs[0].asnumpy(), first[0])  # still x * 2
    _, again = bind(graph(), SHAPES, {}, {}, inputs, True, monkeypatch)  # a new bind runs the new one
    np.testing.assert_allclose(again[0], first[0] * 1.5, rtol=1e-6)
