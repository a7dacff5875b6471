"""The run-time check through Gluon and Module: native MXNet serves when the engines are slower.

The engines are slowed (a sleep in their run). Every output is compared with the
same model run natively, fp32 ``rtol=1e-4, atol=1e-5``; the engines' ``run_count``
stops growing once native MXNet serves.
"""
from __future__ import annotations

import time

import mxnet as mx
import numpy as np
import pytest

import mx_trt
from mx_trt.frontends import gluon as mg
from mx_trt.frontends import hook
from mx_trt.frontends import module as module_frontend
from mx_trt.runtime import arbiter as arb
from mx_trt.runtime.arbiter import NATIVE

RTOL, ATOL = 1e-4, 1e-5
SHAPE = (2, 3, 8, 8)


@pytest.fixture(autouse=True)
def _check_on(monkeypatch, quick_probes):
    module_frontend.install()
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1")
    monkeypatch.setenv("MXNET_TENSORRT_RUNTIME_CHECK", "1")


def _slow(engines, monkeypatch):
    for fused in engines:
        run = fused.engine.run

        def slow(ins, outs, run=run):
            time.sleep(0.01)
            run(ins, outs)

        monkeypatch.setattr(fused.engine, "run", slow)


def _assert_engines_gave_way(counts):
    """The slowed engines ran the first forwards and the probe that checked the switch to MXNet, no more
    (one more at most: the first forward after an idle gap of the caller's is held back)."""
    first = arb.WARMUP + arb.FIRST_AFTER
    assert counts[first - 1] == first
    assert first + arb.PROBE_CALLS <= counts[-1] <= first + arb.PROBE_CALLS + 2
    assert counts[-6:] == [counts[-1]] * 6


def _net():
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Conv2D(8, 3, padding=1), mx.gluon.nn.BatchNorm(), mx.gluon.nn.Activation("relu"),
            mx.gluon.nn.Dense(10))
    net.initialize(mx.init.Xavier())
    return net


def test_gluon(monkeypatch):
    net = _net()
    xs = [mx.nd.random.uniform(shape=SHAPE) for _ in range(30)]
    with hook.disabled():
        want = [net(x).asnumpy() for x in xs]
    net.hybridize(static_alloc=True, static_shape=True)
    net(xs[0]).wait_to_read()
    infos = mg.bind_infos(net)
    assert len(infos) == 1 and infos[0].engines
    _slow(infos[0].engines, monkeypatch)
    counts = []
    for x, w in zip(xs, want):
        np.testing.assert_allclose(net(x).asnumpy(), w, rtol=RTOL, atol=ATOL)
        counts.append(sum(e.run_count for e in infos[0].engines))
    _assert_engines_gave_way(counts)
    (entry,) = net._cached_op._entries.values()
    assert mx_trt.runtime_stats(entry.exe)["serving"] == NATIVE


def test_module(monkeypatch):
    net = _net()
    net(mx.nd.zeros(SHAPE))
    sym = net(mx.sym.var("data"))
    params = {k: v.data() for k, v in net.collect_params().items()}
    args = {k: v for k, v in params.items() if k in sym.list_arguments()}
    aux = {k: v for k, v in params.items() if k in sym.list_auxiliary_states()}
    xs = [mx.nd.random.uniform(shape=SHAPE) for _ in range(30)]
    with hook.disabled():
        ref = mx.mod.Module(sym, data_names=["data"], label_names=None, context=mx.cpu())
        ref.bind(data_shapes=[("data", SHAPE)], for_training=False)
        ref.set_params(args, aux)
    mod = mx.mod.Module(sym, data_names=["data"], label_names=None, context=mx.cpu())
    mod.bind(data_shapes=[("data", SHAPE)], for_training=False)
    mod.set_params(args, aux)
    counts = []
    for i, x in enumerate(xs):
        for m in (ref, mod):
            m.forward(mx.io.DataBatch([x]), is_train=False)
        np.testing.assert_allclose(mod.get_outputs()[0].asnumpy(), ref.get_outputs()[0].asnumpy(), rtol=RTOL,
                                   atol=ATOL)
        (exe,) = mod._exec_group.execs
        if i == 0:
            _slow(exe._mx_trt.engines, monkeypatch)
        counts.append(sum(e.run_count for e in exe._mx_trt.engines))
    _assert_engines_gave_way(counts)
    assert mx_trt.runtime_stats(exe)["serving"] == NATIVE
