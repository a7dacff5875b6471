"""The simple_bind hook: the switch read at every bind, arguments read as MXNet reads them, fallbacks, contrib names.

Each test compares with MXNet's own output (fp32: ``rtol=1e-4, atol=1e-5``).
"""
from __future__ import annotations

import logging

import mxnet as mx
import numpy as np
import pytest

import mx_trt
from mx_trt.runtime import fused_op
from mx_trt.errors import BackendUnavailableError, ParamMismatchError, ShapeError
from tests.harness import userops
from tests.harness.bindcheck import ATOL, RTOL, SHAPES, bind, compare, conv_relu, subgraph_names
from tests.harness.mxcheck import random_inputs, random_params


def test_on_off_on_in_one_process(monkeypatch):
    x = mx.sym.var("data")
    s = mx.sym.FullyConnected(conv_relu(x, "a"), num_hidden=5, name="fc")
    args, aux = random_params(s, SHAPES)
    inputs = random_inputs(SHAPES)
    outs = []
    for on in (True, False, True):
        exe, got = bind(s, SHAPES, args, aux, inputs, on, monkeypatch)
        assert (mx_trt.bind_info(exe) is not None) == on
        outs.append(got[0])
    np.testing.assert_allclose(outs[0], outs[1], rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(outs[0], outs[2])


def test_design_spelling_of_the_variable(monkeypatch):
    monkeypatch.delenv("MXNET_USE_TENSORRT", raising=False)
    monkeypatch.setenv("MXNet_USE_TENSORRT", "1")
    s = conv_relu(mx.sym.var("data"), "a")
    args, aux = random_params(s, SHAPES)
    exe = s.simple_bind(mx.cpu(), grad_req="null", shared_buffer={**args, **aux}, **SHAPES)
    assert mx_trt.bind_info(exe) is not None
    monkeypatch.setenv("MXNet_USE_TENSORRT", "0")
    exe = s.simple_bind(mx.cpu(), grad_req="null", shared_buffer={**args, **aux}, **SHAPES)
    assert mx_trt.bind_info(exe) is None


def test_gradients_requested_bind_natively_with_one_warning(monkeypatch, caplog):
    s = conv_relu(mx.sym.var("data"), "a")
    args, aux = random_params(s, SHAPES)
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1")
    with caplog.at_level(logging.WARNING, logger="mx_trt"):
        exe = s.simple_bind(mx.cpu(), grad_req="write", shared_buffer={**args, **aux}, **SHAPES)
    assert mx_trt.bind_info(exe) is None
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "grad_req" in warnings[0].getMessage()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="mx_trt"):
        exe = s.simple_bind(mx.cpu(), grad_req="null", **SHAPES)
    assert mx_trt.bind_info(exe) is None
    assert len(caplog.records) == 1 and "shared_buffer" in caplog.records[0].getMessage()


def test_wrong_shape_binds_natively_with_one_warning_or_raises_when_strict(monkeypatch, caplog):
    """MXNet binds a data shape that contradicts the weights (it re-allocates them): so does the
    hook, natively, with one warning. MXNET_TENSORRT_STRICT=1 turns it into the typed error."""
    s = conv_relu(mx.sym.var("data"), "a")
    args, aux = random_params(s, SHAPES)
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1")
    with caplog.at_level(logging.WARNING, logger="mx_trt"):
        exe = s.simple_bind(mx.cpu(), grad_req="null", shared_buffer={**args, **aux}, data=(2, 5, 8, 8))
    assert mx_trt.bind_info(exe) is None
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "binding natively" in warnings[0].getMessage()
    assert "Shape inconsistent" in warnings[0].getMessage()
    monkeypatch.setenv("MXNET_TENSORRT_STRICT", "1")
    with pytest.raises(ShapeError):
        s.simple_bind(mx.cpu(), grad_req="null", shared_buffer={**args, **aux}, data=(2, 5, 8, 8))


def test_keywords_mxnet_ignores_are_ignored(monkeypatch):
    """simple_bind reads a keyword as a shape only if it is a tuple of an input's name, as MXNet 1.9.1 does."""
    s = conv_relu(mx.sym.var("data"), "a")
    args, aux = random_params(s, SHAPES)
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1")
    monkeypatch.setenv("MXNET_TENSORRT_STRICT", "1")
    exe = s.simple_bind(mx.cpu(), grad_req="null", shared_buffer={**args, **aux}, data=SHAPES["data"],
                        dta=(1,), force_rebind=True, data_list=[2, 3, 8, 8])
    assert mx_trt.bind_info(exe) is not None and len(mx_trt.bind_info(exe).engines) == 1


def test_forced_missing_backend_is_an_error(monkeypatch):
    s = conv_relu(mx.sym.var("data"), "a")
    args, aux = random_params(s, SHAPES)
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1")
    monkeypatch.setenv("MXNET_TENSORRT_BACKEND", "no_such_backend")
    with pytest.raises(BackendUnavailableError, match="no_such_backend"):
        s.simple_bind(mx.cpu(), grad_req="null", shared_buffer={**args, **aux}, **SHAPES)


def test_tensorrt_bind_and_contrib_names(monkeypatch):
    monkeypatch.delenv("MXNET_USE_TENSORRT", raising=False)
    s = mx.sym.FullyConnected(conv_relu(mx.sym.var("data"), "a"), num_hidden=4, name="fc")
    args, aux = random_params(s, SHAPES)
    exe = mx_trt.tensorrt_bind(s, mx.cpu(), {**args, **aux}, data=SHAPES["data"])
    opt = mx_trt.get_optimized_symbol(exe)
    assert opt.list_arguments() == ["data"]
    assert mx_trt.init_tensorrt_params(opt, args, aux) == ({}, {})
    assert not mx_trt.get_use_tensorrt()
    mx_trt.set_use_tensorrt(True)
    assert mx_trt.get_use_tensorrt()
    mx_trt.set_use_tensorrt(False)
    mx_trt.set_use_fp16(True)
    assert mx_trt.get_use_fp16()
    mx_trt.set_use_fp16(False)
    assert not mx_trt.get_use_fp16()
