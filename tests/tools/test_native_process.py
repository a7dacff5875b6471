"""The worker process of the equal-threads comparisons (mx_trt.tools.native_process): runs and the check's share."""
from __future__ import annotations

import mxnet as mx
import numpy as np
import pytest

from mx_trt.tools.native_process import NativeProcess

SHAPES = {"data": (1, 3, 8, 8)}


def _model():
    x = mx.sym.Convolution(mx.sym.var("data"), num_filter=4, kernel=(3, 3), name="c")
    sym = mx.sym.FullyConnected(mx.sym.Activation(x, act_type="relu", name="r"), num_hidden=3, name="fc")
    exe = sym.simple_bind(mx.cpu(), **SHAPES)
    rng = np.random.RandomState(0)
    params = {k: mx.nd.array(rng.uniform(size=v.shape)) for k, v in exe.arg_dict.items() if k != "data"}
    return sym, params, {"data": rng.uniform(size=SHAPES["data"]).astype("float32")}


def test_the_worker_times_forwards_and_reports_what_native_mxnet_served(monkeypatch, tmp_path):
    sym, params, inputs = _model()
    monkeypatch.setenv("MXNET_TENSORRT_RUNTIME_CHECK", "1")  # the suite's engine rule is "always": on by name
    with NativeProcess(sym, params, SHAPES, inputs, accelerated=True, cache_dir=str(tmp_path)) as acc:
        assert acc.engines == 1
        # Enough forwards of this tiny model for the check's first probe: it waits for 20 ms of the
        # engines' forwards and then for 20 ms of MXNet's before it compares.
        assert acc.warm_check(0.0)[0] == 0  # a limit of 0 s: no forward
        n, secs = acc.warm_check()
        assert n >= 4 and secs > 0.0  # the engines' first forwards, then MXNet's probe: its twin bound and run
        assert acc.warm_check()[0] == 0  # every side probed once: warm
        times = acc.run(3000, 1)
        assert len(times) == 3000 and all(t > 0 for t in times)
        shares = acc.served_shares()
        assert shares is not None and sum(shares.values()) == pytest.approx(1.0) and set(shares) <= {"engines", "native"}
        # The first probe gave native MXNet four forwards at least (of 3002 and the warm-up's).
        assert 4 / (3002 + n) <= shares.get("native", 0.0) <= 1.0
    with NativeProcess(sym, params, SHAPES, inputs) as native:
        assert native.engines == 0 and len(native.run(3)) == 3
        assert native.warm_check()[0] == 0  # no check to warm
        assert len(native.run(2, 1, 0.02)) == 2  # a turn settled for 20 ms, then two timed forwards
        assert native.served_shares() is None  # a native bind has no check
