"""The port's own helpers: the engine check fails a native bind, and the expected-failure mark
accepts only the native error it names."""
from __future__ import annotations

import mxnet as mx
import numpy as np
import pytest

from tests.compat.engines import assert_engines_built, assert_engines_ran
from tests.compat.native import NativeMXNetFailure, native_failure
from tests.compat.standin import get_mnist


def _graph():
    fc = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=4, name="fc")
    return mx.sym.Activation(fc, act_type="relu", name="relu")


def _params():
    return {"fc_weight": mx.nd.array(np.ones((4, 3))), "fc_bias": mx.nd.zeros((4,))}


def test_native_bind_fails_the_engine_check(monkeypatch):
    monkeypatch.setenv("MXNET_USE_TENSORRT", "0")
    exe = _graph().simple_bind(mx.cpu(), data=(2, 3), grad_req="null", shared_buffer=_params())
    with pytest.raises(AssertionError, match="built no engine"):
        assert_engines_built(exe)


def test_accelerated_bind_passes_the_engine_check_after_a_forward(monkeypatch):
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1")
    exe = _graph().simple_bind(mx.cpu(), data=(2, 3), grad_req="null", shared_buffer=_params())
    assert assert_engines_built(exe)
    with pytest.raises(AssertionError, match="never run"):
        assert_engines_ran(exe)
    exe.forward(is_train=False, data=mx.nd.ones((2, 3)))
    assert assert_engines_ran(exe)


def test_native_failure_converts_only_the_named_error():
    with pytest.raises(NativeMXNetFailure):
        with native_failure("FP16 gemm on cpu not implemented"):
            raise mx.base.MXNetError("MXNetError: FP16 gemm on cpu not implemented!")
    with pytest.raises(RuntimeError, match="something else"):
        with native_failure("FP16 gemm on cpu not implemented"):
            raise RuntimeError("something else")


def test_mnist_stand_in_has_mnists_layout():
    m = get_mnist()
    assert m["train_data"].shape[1:] == (1, 28, 28) and m["test_data"].shape == (360, 1, 28, 28)
    assert m["train_data"].dtype == np.float32 and 0.0 <= m["train_data"].min() and m["train_data"].max() <= 1.0
    assert sorted(set(m["test_label"].astype(int))) == list(range(10))
