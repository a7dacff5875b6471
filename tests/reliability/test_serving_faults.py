"""A fault in user code fails the request that caused it; the served model goes on serving.

The model: ``data -> native_gate -> fault_gate -> conv -> relu -> fc``.
``native_gate`` is a Python ``CustomOp`` that MXNet runs (no plugin): it raises
on the value 11. ``fault_gate`` is a plugin whose ONNX Runtime function runs in
the engine: it raises on 13. Before the Python model ran a failed batch again
request by request, every request batched with the faulty one failed too.
Before plugin faults became ``EngineRunError``, one raise in the plugin aborted
the stub; before the supervisor watched the instances, that left every later
request failing with ``Stub process ... is not healthy`` while
``/v2/health/ready`` answered 200. A stub killed outright still dies: the last
test kills one and sees readiness go false and the instance restarted.
"""
from __future__ import annotations

import json
import os
import signal
import time

import mxnet as mx
import numpy as np
import pytest

from tests.serving.cli import CliServer, alive, children, http, infer_json
from tests.serving.conftest import assert_close, needs_server, triton_client

thttp = triton_client("tritonclient.http")

#: Seconds a restarted instance may take to serve again (its engine comes from the plan cache).
RECOVER_S = 60.0

FAULT_OPS = '''
import mxnet as mx
import numpy as np
import mx_trt


def gate(x):
    if np.any(x == 13.0):
        raise ValueError("plugin saw the marker 13")
    return x.copy()


def native(x):
    if np.any(x == 11.0):
        raise ValueError("custom operator saw the marker 11")
    return x.copy()


def _op(name, fn):
    class Op(mx.operator.CustomOp):
        def forward(self, is_train, req, in_data, out_data, aux):
            self.assign(out_data[0], req[0], mx.nd.array(fn(in_data[0].asnumpy())))

        def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
            raise NotImplementedError

    @mx.operator.register(name)
    class Prop(mx.operator.CustomOpProp):
        def __init__(self):
            super().__init__(need_top_grad=False)

        def infer_shape(self, in_shape):
            return in_shape, [in_shape[0]], []

        def create_operator(self, ctx, shapes, dtypes):
            return Op()


_op("fault_gate", gate)
_op("native_gate", native)
'''
#: The server's module: the operators and the plugin (the test process registers only the operators).
SERVER_MODULE = FAULT_OPS + '''
mx_trt.register_plugin("Custom:fault_gate", domain="test.faults", op_type="Gate", onnxruntime=gate)
'''


def _symbol():
    x = mx.sym.var("data")
    h = mx.sym.Custom(x, op_type="native_gate", name="native")
    h = mx.sym.Custom(h, op_type="fault_gate", name="gate")
    h = mx.sym.Activation(mx.sym.Convolution(h, num_filter=4, kernel=(3, 3), pad=(1, 1), name="conv"), act_type="relu",
                          name="relu")
    return mx.sym.FullyConnected(mx.sym.flatten(h), num_hidden=5, name="fc")


def _reference(params, x):
    """The same graph without the gates (identities for values without a marker), run by MXNet."""
    x_ = mx.sym.var("data")
    h = mx.sym.Activation(mx.sym.Convolution(x_, num_filter=4, kernel=(3, 3), pad=(1, 1), name="conv"),
                          act_type="relu", name="relu")
    sym = mx.sym.FullyConnected(mx.sym.flatten(h), num_hidden=5, name="fc")
    exe = sym.simple_bind(mx.cpu(), grad_req="null", data=x.shape)
    exe.copy_params_from(params)
    exe.arg_dict["data"][:] = x
    return exe.forward()[0].asnumpy()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    needs_server()
    root = tmp_path_factory.mktemp("serving_faults")
    (root / "faultops.py").write_text(SERVER_MODULE)
    exec(compile(FAULT_OPS, "fault_ops", "exec"), {})  # MXNet must know the operators to write the symbol
    rng = np.random.RandomState(0)
    shapes = {"conv_weight": (4, 3, 3, 3), "conv_bias": (4,), "fc_weight": (5, 4 * 8 * 8), "fc_bias": (5,)}
    params = {n: mx.nd.array(rng.uniform(-0.3, 0.3, s)) for n, s in shapes.items()}
    mx.model.save_checkpoint(str(root / "fault"), 0, _symbol(), params, {})
    # A queue delay long enough for concurrent requests to share a batch.
    srv = CliServer([str(root / "fault"), "--epoch", "0", "--shape", "data=1,3,8,8", "--max-batch", "4",
                     "--import", str(root / "faultops.py"), "--max-queue-delay-us", "300000", "--grace-period", "5"],
                    str(root / "run"), str(root / "cache"))
    try:
        srv.wait_ready()
        srv.params = params
        yield srv
    finally:
        srv.stop()


def _value(v: float, n: int = 1) -> np.ndarray:
    return np.full((n, 3, 8, 8), v, "float32")


def _infer(srv, x):
    status, body = http(srv.base + "/v2/models/fault/infer", infer_json(x.ravel(), x.shape), timeout_s=60)
    if status != 200:
        return status, json.loads(body or b"{}").get("error", "")
    out = json.loads(body)["outputs"][0]
    return status, np.asarray(out["data"], dtype="float32").reshape(out["shape"])


def _stubs(srv):
    return [p for p in children(srv.proc.pid) if _comm(p).startswith("triton_python")]


def _comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def _serves_again(srv, deadline_s=RECOVER_S):
    """Good requests succeed again (three in a row), with readiness 200; the seconds it took."""
    t = time.monotonic()
    streak = 0
    while time.monotonic() - t < deadline_s and streak < 3:
        status, got = _infer(srv, _value(0.5))
        streak = streak + 1 if status == 200 else 0
        if status != 200:
            time.sleep(0.2)
    assert streak == 3, f"still failing after {deadline_s} s: {got}"
    assert_close(got, _reference(srv.params, _value(0.5)))
    assert http(srv.base + "/v2/health/ready")[0] == 200
    return time.monotonic() - t


def _concurrent(srv, xs):
    """Send ``xs`` at once (they share a batch: the queue delay is 0.3 s); outputs or exceptions, in order."""
    client = thttp.InferenceServerClient(srv.base[len("http://"):], concurrency=len(xs), network_timeout=60)
    pending = []
    for x in xs:
        t = thttp.InferInput("data", list(x.shape), "FP32")
        t.set_data_from_numpy(x)
        pending.append(client.async_infer("fault", [t]))
    results = []
    for p in pending:
        try:
            results.append(p.get_result().as_numpy("fc_output"))
        except thttp.InferenceServerException as exc:
            results.append(exc)
    client.close()
    return results


@pytest.mark.parametrize("marker,words", [(11.0, "custom operator saw the marker 11"),
                                          (13.0, "plugin test.faults::Gate raised ValueError: plugin saw the marker 13")],
                         ids=["native-custom-op", "plugin"])
def test_a_forward_that_raises_fails_only_its_request_and_the_instance_keeps_serving(server, marker, words):
    stubs = _stubs(server)
    xs = [_value(0.5), _value(marker), _value(0.25, 2)]
    results = _concurrent(server, xs)
    assert isinstance(results[1], thttp.InferenceServerException), results[1]
    assert results[1].status() == "500" and "inference failed" in str(results[1]), str(results[1])
    if marker == 13.0:
        assert words in str(results[1]), str(results[1])
    for i in (0, 2):
        assert not isinstance(results[i], Exception), results[i]
        assert_close(results[i], _reference(server.params, xs[i]))
    # The same stub process: the instance was neither lost nor restarted.
    assert _stubs(server) == stubs and all(alive(p) for p in stubs)
    assert "died" not in server.output()[1]
    assert _serves_again(server, 5.0) < 5.0


def test_an_instance_that_dies_is_restarted_and_readiness_is_false_meanwhile(server):
    stubs = [p for p in _stubs(server) if alive(p)]
    assert stubs
    os.kill(stubs[0], signal.SIGKILL)
    seen = set()
    t = time.monotonic()
    while time.monotonic() - t < 5.0 and 503 not in seen:
        seen.add(http(server.base + "/v2/health/ready", timeout_s=2)[0])
        time.sleep(0.02)
    assert 503 in seen, f"readiness after the instance died: {seen}"
    _serves_again(server)
    assert "died" in server.output()[1]


def test_a_server_that_dies_makes_mxtrt_serve_exit_1_with_the_reason_and_nothing_left(server):
    # Last in the module: it ends the module's server. Before, `mxtrt serve` returned the dead server's
    # status as its own (250 after an abort) and said nothing.
    below = children(server.proc.pid)
    triton = [p for p in below if _comm(p) == "tritonserver"][0]
    os.kill(triton, signal.SIGKILL)
    assert server.proc.wait(timeout=30) == 1
    err = server.output()[1]
    assert "tritonserver stopped serving on its own (status -9 (killed by SIGKILL))" in err, err[-2000:]
    deadline = time.monotonic() + 10
    while any(alive(p) for p in below) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(p) for p in below)
