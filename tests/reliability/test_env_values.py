"""Bad environment values are one clear line: a typed error naming the variable, or the default when empty."""
from __future__ import annotations

import logging

import mxnet as mx
import pytest

import mx_trt
from mx_trt.errors import MxTrtError
from tests.harness.mxcheck import random_params
from tests.harness.bindcheck import conv_relu

SHAPES = {"data": (2, 3, 8, 8)}

BAD = [
    ("MXNET_TENSORRT_ORT_THREADS", "lots", "expected an integer"),
    ("MXNET_TENSORRT_ORT_THREADS", "99999999999", "between 0 and 1024"),
    ("MXNET_TENSORRT_ORT_THREADS", "-2", "between 0 and 1024"),
    ("MXNET_TENSORRT_MIN_SUBGRAPH_SIZE", "two", "expected an integer"),
    ("MXNET_TENSORRT_ENGINE_RULE", "sometimes", "expected one of measured, cost, always"),
    ("MXNET_TENSORRT_PRECISION", "fp8", "expected one of fp32, fp16, bf16, int8"),
    ("MXNET_TENSORRT_INT8_KEEP_OUTPUT_LAYER", "maybe", "expected 1 or 0"),
]


def _bind(monkeypatch):
    s = conv_relu(mx.sym.var("data"), "a")
    args, aux = random_params(s, SHAPES)
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1")
    return s.simple_bind(mx.cpu(), grad_req="null", shared_buffer={**args, **aux}, **SHAPES)


@pytest.mark.parametrize("var,value,allowed", BAD, ids=[f"{v}={x}" for v, x, _ in BAD])
def test_a_bad_value_names_the_variable(var, value, allowed, monkeypatch, caplog):
    monkeypatch.setenv(var, value)
    with caplog.at_level(logging.WARNING, logger="mx_trt"):
        exe = _bind(monkeypatch)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert mx_trt.bind_info(exe) is None and len(warnings) == 1
    assert f"{var}={value!r}" in warnings[0] and allowed in warnings[0]
    monkeypatch.setenv("MXNET_TENSORRT_STRICT", "1")
    with pytest.raises(MxTrtError, match=f"{var}={value!r}"):
        _bind(monkeypatch)


@pytest.mark.parametrize("var", ["MXNET_TENSORRT_ORT_THREADS", "MXNET_TENSORRT_MIN_SUBGRAPH_SIZE", "MXNET_TENSORRT_ENGINE_RULE",
                                 "MXNET_TENSORRT_PRECISION", "MXNET_TENSORRT_CALIBRATION"])
def test_empty_means_the_default(var, monkeypatch):
    monkeypatch.setenv(var, " ")
    monkeypatch.setenv("MXNET_TENSORRT_STRICT", "1")
    exe = _bind(monkeypatch)
    assert mx_trt.bind_info(exe) is not None
