"""The fused operator inside an MXNet executor: gradient requests (``req``) honoured as native operators do."""
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


@pytest.mark.parametrize("req", ["write", "inplace", "add", "null"])
def test_fused_operator_honours_req(req, monkeypatch):
    s = conv_relu(mx.sym.var("data"), "a")
    args, aux = random_params(s, SHAPES)
    exe, got = bind(s, SHAPES, args, aux, random_inputs(SHAPES), True, monkeypatch)
    fused = mx_trt.bind_info(exe).engines[0]
    op = fused_op.make_operator(fused)
    x = exe.arg_dict["data"].copy()
    out = mx.nd.ones(got[0].shape)
    mx.nd.waitall()
    op.forward(False, [req], [x], [out], [])
    expect = {"write": got[0], "inplace": got[0], "add": got[0] + 1, "null": np.ones_like(got[0])}[req]
    np.testing.assert_allclose(out.asnumpy(), expect, rtol=RTOL, atol=ATOL)
