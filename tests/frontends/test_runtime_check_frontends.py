"""The run-time check through Gluon and Module: native MXNet serves when the engines are slower.

The checks run on a virtual clock (``check_clock``, tests/harness/checkclock.py), on which the
engines' forwards take 10 ms and MXNet's 1 ms. Every output is compared with the
same model run natively, fp32 ``rtol=1e-4, atol=1e-5``; the engines' ``run_count``
stops growing once native MXNet serves.
"""
from __future__ import annotations

import mxnet as mx
import numpy as np
import pytest

import mx_trt
from mx_trt.frontends import gluon as mg
from mx_trt.frontends import hook
from mx_trt.frontends import module as module_frontend
from mx_trt.runtime import arbiter as arb
from mx_trt.runtime.arbiter import NATIVE
from tests.harness.checkclock import slow_engines

RTOL, ATOL = 1e-4, 1e-5
SHAPE = (2, 3, 8, 8)


@pytest.fixture(autouse=True)
def _check_on(monkeypatch, quick_probes, check_clock):
    module_frontend.install()
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1")
    monkeypatch.setenv("MXNET_TENSORRT_RUNTIME_CHECK", "1")


@pytest.fixture
def _slow(monkeypatch, check_clock):
    return lambda engines: slow_engines(engines, monkeypatch, check_clock)


def _assert_engines_gave_way(counts):
    """The slowed engines ran the first forwards and the probe that checked the switch to MXNet, no more."""
    first = arb.WARMUP + arb.FIRST_AFTER
    assert counts[first - 1] == first
    assert counts[-1] == first + arb.PROBE_CALLS
    assert counts[-6:] == [counts[-1]] * 6


def _net():
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Conv2D(8, 3, padding=1), mx.gluon.nn.BatchNorm(), mx.gluon.nn.Activation("relu"),
            mx.gluon.nn.Dense(10))
    net.initialize(mx.init.Xavier())
    return net


def test_gluon(_slow):
    net = _net()
    xs = [mx.nd.random.uniform(shape=SHAPE) for _ in range(30)]
    with hook.disabled():
        want = [net(x).asnumpy() for x in xs]
    net.hybridize(static_alloc=True, static_shape=True)
    net(xs[0]).wait_to_read()
    infos = mg.bind_infos(net)
    assert len(infos) == 1 and infos[0].engines
    _slow(infos[0].engines)
    counts = []
    for x, w in zip(xs, want):
        np.testing.assert_allclose(net(x).asnumpy(), w, rtol=RTOL, atol=ATOL)
        counts.append(sum(e.run_count for e in infos[0].engines))
    _assert_engines_gave_way(counts)
    (entry,) = net._cached_op._entries.values()
    assert mx_trt.runtime_stats(entry.exe)["serving"] == NATIVE


def test_module(_slow):
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
            _slow(exe._mx_trt.engines)
        counts.append(sum(e.run_count for e in exe._mx_trt.engines))
    _assert_engines_gave_way(counts)
    assert mx_trt.runtime_stats(exe)["serving"] == NATIVE
