"""Binding a symbol natively and with the pass, and comparing the two (shared by the bind tests).

Tolerance: fp32, ``rtol=1e-4, atol=1e-5`` (tests.harness.mxcheck.OP_TOL) for few-layer graphs.
"""
from __future__ import annotations

import mxnet as mx
import numpy as np

import mx_trt
from tests.harness.mxcheck import OP_TOL, random_inputs, random_params

RTOL, ATOL = OP_TOL["float32"]
SHAPES = {"data": (2, 3, 8, 8)}


def conv_relu(x, name, ch=4):
    c = mx.sym.Convolution(x, num_filter=ch, kernel=(3, 3), pad=(1, 1), name=f"{name}_conv")
    return mx.sym.Activation(c, act_type="relu", name=f"{name}_relu")


def bind(sym, shapes, args, aux, inputs, on: bool, monkeypatch, **kw):
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1" if on else "0")
    exe = sym.simple_bind(mx.cpu(), grad_req="null", shared_buffer={**args, **aux}, **shapes, **kw)
    if not on:
        exe.copy_params_from(args, aux)
    for k, v in inputs.items():
        exe.arg_dict[k][:] = v
    exe.forward(is_train=False)
    return exe, [o.asnumpy() for o in exe.outputs]


def compare(sym, shapes, monkeypatch, seed=0):
    args, aux = random_params(sym, shapes, seed)
    inputs = random_inputs(shapes, seed + 1)
    _, ref = bind(sym, shapes, args, aux, inputs, False, monkeypatch)
    exe, got = bind(sym, shapes, args, aux, inputs, True, monkeypatch)
    assert len(ref) == len(got)
    for r, g in zip(ref, got):
        np.testing.assert_allclose(g, r, rtol=RTOL, atol=ATOL)
    return exe


def subgraph_names(exe):
    info = mx_trt.bind_info(exe)
    g = info.plan.graph
    return [sorted(g.nodes[n].name for n in sg.nodes) for sg in info.plan.partition.subgraphs]


def native_reasons(info):
    """Node name -> why it stayed native, from a bind's plan."""
    g = info.plan.graph
    return {g.nodes[n].name: r for n, r in info.plan.partition.native.items()}
