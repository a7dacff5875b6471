"""A plugin's Python function cannot take the process down, and the executor keeps working.

Before, a function that raised, returned the wrong number of outputs, or called
``sys.exit`` ended the process inside ONNX Runtime (``terminate called after
throwing an instance of 'pybind11::error_already_set'``, rc 134), and so did a
forward after ``unregister_plugin``. Each case runs in one subprocess so a
regression shows as a failed test, not a dead pytest. Graph::

    data -> relu -> [plugin rel.ops::Double] -> relu -> + 1      (one engine)
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest

import mx_trt

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = textwrap.dedent("""
    import json, os, sys
    sys.path.insert(0, {root!r})
    os.environ["MXNET_USE_TENSORRT"] = "1"
    os.environ["MXNET_TENSORRT_CACHE_DIR"] = ""
    os.environ["MXNET_TENSORRT_ENGINE_RULE"] = "always"
    import mxnet as mx, numpy as np
    import mx_trt

    state = {{"mode": "ok"}}

    def double(x):
        m = state["mode"]
        if m == "raise":
            raise ValueError("bad input\\nsecond line")
        if m == "two":
            return x * 2, x * 2
        if m == "exit":
            sys.exit(3)
        if m == "shape":
            return (x * 2)[:, :, :1, :1]
        if m == "none":
            return None
        if m == "keyboard":
            raise KeyboardInterrupt()
        return x * 2

    class Op(mx.operator.CustomOp):
        def forward(self, is_train, req, in_data, out_data, aux):
            self.assign(out_data[0], req[0], in_data[0] * 2)

    @mx.operator.register("rel_double")
    class OpProp(mx.operator.CustomOpProp):
        def __init__(self):
            super().__init__(need_top_grad=False)
        def infer_shape(self, in_shape):
            return in_shape, [in_shape[0]], []
        def create_operator(self, ctx, shapes, dtypes):
            return Op()

    mx_trt.register_plugin("Custom:rel_double", domain="rel.ops", op_type="Double", onnxruntime=double)
    x = mx.sym.var("data")
    y = mx.sym.relu(mx.sym.Custom(mx.sym.relu(x), op_type="rel_double")) + 1
    exe = y.simple_bind(mx.cpu(), data=(2, 3, 4, 4), grad_req="null", shared_buffer={{}})
    assert len(mx_trt.bind_info(exe).engines) == 1
    data = np.random.RandomState(0).randn(2, 3, 4, 4).astype(np.float32)
    want = np.maximum(np.maximum(data, 0) * 2, 0) + 1
    exe.arg_dict["data"][:] = data

    def forward():
        try:
            exe.forward(is_train=False)
            return "ok", float(np.abs(exe.outputs[0].asnumpy() - want).max())
        except Exception as exc:
            return type(exc).__name__, str(exc)

    for mode in sys.argv[1:]:
        if mode == "unregister":
            mx_trt.unregister_plugin("Custom:rel_double")
            state["mode"] = "ok"
        else:
            state["mode"] = mode
        first = forward()
        state["mode"] = "ok"
        print(json.dumps({{"mode": mode, "first": first, "next": forward()}}), flush=True)
""")

CASES = {
    "raise": ("EngineRunError", "plugin rel.ops::Double raised ValueError: bad input"),
    "two": ("EngineRunError", "plugin rel.ops::Double: returned 2 output(s), 1 declared"),
    "exit": ("EngineRunError", "plugin rel.ops::Double raised SystemExit: 3"),
    "keyboard": ("EngineRunError", "plugin rel.ops::Double raised KeyboardInterrupt"),
    "shape": ("EngineRunError", "plugin rel.ops::Double: output 0 has shape (2, 3, 1, 1), MXNet infers (2, 3, 4, 4)"),
    "none": ("EngineRunError", "plugin rel.ops::Double: output 0 is NoneType"),
}


def test_a_faulty_plugin_function_fails_one_forward_and_the_executor_keeps_working(tmp_path):
    script = tmp_path / "faults.py"
    script.write_text(SCRIPT.format(root=ROOT))
    modes = list(CASES) + ["unregister"]
    r = subprocess.run([sys.executable, str(script), *modes], capture_output=True, text=True, timeout=300,
                       cwd=str(tmp_path))
    got = {d["mode"]: d for d in (json.loads(line) for line in r.stdout.splitlines() if line.startswith("{"))}
    assert r.returncode == 0, f"rc {r.returncode} after {list(got)}: {r.stderr[-800:]}"
    for mode, (kind, text) in CASES.items():
        first_kind, message = got[mode]["first"]
        assert first_kind == kind and text in message and "second line" not in message, (mode, message)
        assert message.startswith("trt_subgraph_0: "), message  # the subgraph is named too
        assert got[mode]["next"][0] == "ok" and got[mode]["next"][1] < 1e-5, (mode, got[mode]["next"])
    # Unregistering cannot pull the function out from under the live engine: it keeps running it.
    first, after = got["unregister"]["first"], got["unregister"]["next"]
    assert first[0] == "ok" and first[1] < 1e-5 and after[0] == "ok", got["unregister"]


# -- the TensorRT host-function plugin, with the fake TensorRT module of the backend tests -----------------

@pytest.fixture
def host_trt(monkeypatch):
    from mx_trt.builder.backends.tensorrt import cuda
    from tests.builder.test_plugin_backends import FakeHostTrt

    monkeypatch.setattr(cuda, "stream_synchronize", lambda stream: None)
    monkeypatch.setattr(cuda, "memcpy", lambda dst, src, n, kind: __import__("ctypes").memmove(dst, src, n))
    yield FakeHostTrt()
    mx_trt.unregister_plugin("Custom:rel_host")


def _desc(shape):
    return types.SimpleNamespace(dims=list(shape), type=0, format="linear")


@pytest.mark.parametrize("body, text", [
    (lambda x: (_ for _ in ()).throw(ValueError("bad\nmore")), "raised ValueError: bad"),
    (lambda x: sys.exit(2), "raised SystemExit: 2"),
    (lambda x: (x, x), "returned 2 output(s), 1 declared"),
    (lambda x: x[:, :1], "output 0 has shape (2, 1), MXNet infers (2, 3)"),
])
def test_a_host_function_never_raises_into_tensorrt_and_the_run_raises_after(host_trt, body, text):
    from mx_trt.builder.backends import plugin_runs
    from mx_trt.builder.backends.tensorrt import plugins as trt_plugins

    p = mx_trt.register_plugin("Custom:rel_host", domain="rel.ops", op_type="Host",
                               tensorrt=mx_trt.HostFunction(body))
    trt_plugins.load_plugins(host_trt, "tensorrt", "TensorRT", [p])
    plugin = host_trt.registry.creators[0][0].create_plugin("host", [], None)
    x = np.ones((2, 3), np.float32)
    y = np.full_like(x, 7.0)
    # Inside an engine run (TrtRunner.run opens it around execute_async_v3): enqueue returns normally.
    with plugin_runs.watching() as run:
        plugin.enqueue([_desc(x.shape)], [_desc(y.shape)], [x.ctypes.data], [y.ctypes.data], 0, 0)
    assert (y == 0).all()  # zeros of the output's shape in place of the result
    with pytest.raises(mx_trt.EngineRunError, match=r"^trt_subgraph_0: plugin rel.ops::Host") as info:
        run.raise_fault("trt_subgraph_0")
    assert text in str(info.value) and "more" not in str(info.value)


def test_a_fault_on_a_thread_with_no_run_open_is_raised_by_the_next_run():
    """A backend calling back from a thread of its own must not make a fault silent."""
    import threading

    from mx_trt.builder.backends import plugin_runs

    def boom(x):
        raise ValueError("off the run's thread")

    got = []
    t = threading.Thread(target=lambda: got.append(
        plugin_runs.call_plugin("rel.ops::Off", boom, [np.ones((2, 3), np.float32)], {}, ["float32"])))
    t.start()
    t.join()
    assert got[0][0].shape == (2, 3) and not got[0][0].any()  # zeros in place of the result
    with plugin_runs.watching() as run:
        pass
    with pytest.raises(mx_trt.EngineRunError, match="plugin rel.ops::Off raised ValueError: off the run's thread"):
        run.raise_fault("trt_subgraph_0")
