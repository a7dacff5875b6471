"""Users' own operators inside engines: ``mx_trt.register_converter``.

Two Python ``CustomOp``s (swish and a hand-written layer norm) sit in the middle
of a small ResNet-like graph::

    data -> a(conv+BN+relu) -> [swish] -> b(conv+BN+relu) -> add(swish, b) -> [layernorm] -> c(conv+BN+relu)

Without converters the engine splits around them; with the converters (a module
imported before the bind, or ``mxtrt --import FILE``) the whole graph is one
engine, equal to MXNet (fp32 ``rtol=1e-4, atol=1e-5``).
"""
from __future__ import annotations

import importlib.util
import json
import sys

import mxnet as mx
import pytest

import mx_trt
from mx_trt.builder import engines
from mx_trt.tools.cli.main import main
from tests.bindcheck import compare, conv_relu, native_reasons as _reasons
from tests.mxcheck import random_params

SHAPES = {"data": (2, 3, 8, 8)}


class _Swish(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        x = in_data[0]
        self.assign(out_data[0], req[0], x * mx.nd.sigmoid(x))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        raise NotImplementedError


@mx.operator.register("it_swish")
class _SwishProp(mx.operator.CustomOpProp):
    def __init__(self):
        super().__init__(need_top_grad=False)

    def infer_shape(self, in_shape):
        return in_shape, [in_shape[0]], []

    def create_operator(self, ctx, shapes, dtypes):
        return _Swish()


class _LayerNorm(mx.operator.CustomOp):
    def __init__(self, eps):
        self.eps = eps

    def forward(self, is_train, req, in_data, out_data, aux):
        x, gamma, beta = in_data
        mean = mx.nd.mean(x, axis=-1, keepdims=True)
        d = mx.nd.broadcast_sub(x, mean)
        var = mx.nd.mean(d * d, axis=-1, keepdims=True)
        y = mx.nd.broadcast_div(d, mx.nd.sqrt(var + self.eps))
        self.assign(out_data[0], req[0], mx.nd.broadcast_add(mx.nd.broadcast_mul(y, gamma), beta))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        raise NotImplementedError


@mx.operator.register("it_layernorm")
class _LayerNormProp(mx.operator.CustomOpProp):
    def __init__(self, eps="1e-5"):
        super().__init__(need_top_grad=False)
        self.eps = float(eps)

    def list_arguments(self):
        return ["data", "gamma", "beta"]

    def infer_shape(self, in_shape):
        d = in_shape[0]
        return [d, (d[-1],), (d[-1],)], [d], []

    def create_operator(self, ctx, shapes, dtypes):
        return _LayerNorm(self.eps)


# The user's module: converters in standard ONNX ops. VERSION and EXTRA are replaced per test.
CONVERTERS = '''
import numpy as np
import mx_trt

CALLS = []


def _mean_last(ctx, x):
    if ctx.opset >= 18:
        return ctx.emit("ReduceMean", [x, ctx.const(np.array([-1], dtype=np.int64), "axes")], keepdims=1)[0]
    return ctx.emit("ReduceMean", [x], axes=[-1], keepdims=1)[0]


@mx_trt.register_converter("Custom:it_swish", version="VERSION")
def swish(ctx):
    CALLS.append(ctx.name)
    sig = ctx.emit("Sigmoid", [ctx.inputs[0]])[0]
    ctx.emit("Mul", [ctx.inputs[0], sig], ctx.outputs)


@mx_trt.register_converter("Custom:it_layernorm", version="VERSION")
def layernorm(ctx):
    x, gamma, beta = ctx.inputs
    d = ctx.emit("Sub", [x, _mean_last(ctx, x)])[0]
    var = _mean_last(ctx, ctx.emit("Mul", [d, d])[0])
    eps = ctx.const(np.float32(ctx.spec.float_("eps", 1e-5)), "eps")
    den = ctx.emit("Sqrt", [ctx.emit("Add", [var, eps])[0]])[0]
    y = ctx.emit("Mul", [ctx.emit("Div", [d, den])[0], gamma])[0]
    ctx.emit("Add", [y, beta], ctx.outputs)  # EXTRA
'''


def conv_bn_relu(x, name):
    c = mx.sym.Convolution(x, num_filter=4, kernel=(3, 3), pad=(1, 1), name=f"{name}_conv")
    b = mx.sym.BatchNorm(c, fix_gamma=False, name=f"{name}_bn")
    return mx.sym.Activation(b, act_type="relu", name=f"{name}_relu")


def resnet_like():
    x = mx.sym.var("data")
    s = mx.sym.Custom(conv_bn_relu(x, "a"), op_type="it_swish", name="swish")
    r = mx.sym.elemwise_add(s, conv_bn_relu(s, "b"), name="add")
    ln = mx.sym.Custom(r, mx.sym.var("ln_gamma"), mx.sym.var("ln_beta"), op_type="it_layernorm", eps="1e-5", name="ln")
    return conv_bn_relu(ln, "c")


@pytest.fixture(autouse=True)
def _clean_registry():
    yield
    for op in ("Custom:it_swish", "Custom:it_layernorm", "Activation"):
        mx_trt.unregister_converter(op)
    engines.clear_pool()


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, str(path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def write_ops(tmp_path, version="1", extra="", name="it_user_ops"):
    path = tmp_path / f"{name}.py"
    path.write_text(CONVERTERS.replace("VERSION", version).replace("# EXTRA", extra))
    return path


def _run_both(monkeypatch, sym=None):
    return mx_trt.bind_info(compare(resnet_like() if sym is None else sym, SHAPES, monkeypatch))


def test_without_converters_the_engine_splits(monkeypatch):
    info = _run_both(monkeypatch)
    assert len(info.plan.partition.subgraphs) >= 2
    assert _reasons(info)["swish"].startswith("no converter for custom operator it_swish")
    assert "register_converter('Custom:it_layernorm')" in _reasons(info)["ln"]


def test_imported_module_puts_the_whole_graph_in_one_engine(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(tmp_path))
    write_ops(tmp_path, name="it_plain_import")
    module = importlib.import_module("it_plain_import")  # a plain import before the bind
    try:
        info = _run_both(monkeypatch)
    finally:
        sys.modules.pop("it_plain_import", None)
    assert _reasons(info) == {}
    assert len(info.plan.partition.subgraphs) == 1 and len(info.engines) == 1
    assert info.engines[0].run_count == 1
    assert module.CALLS.count("swish") >= 1


def test_validator_reason_says_user_converter(monkeypatch):
    @mx_trt.register_converter("Custom:it_swish", validator=lambda spec: "only for the test" if spec.in_shapes[0][0] == 2 else None)
    def swish(ctx):
        ctx.emit("Mul", [ctx.inputs[0], ctx.emit("Sigmoid", [ctx.inputs[0]])[0]], ctx.outputs)

    info = _run_both(monkeypatch)
    reason = _reasons(info)["swish"]
    assert reason.startswith("only for the test (user converter ") and "swish)" in reason


def test_backend_restricted_converter(monkeypatch):
    @mx_trt.register_converter("Custom:it_swish", backends=["tensorrt"])
    def swish(ctx):
        ctx.emit("Mul", [ctx.inputs[0], ctx.emit("Sigmoid", [ctx.inputs[0]])[0]], ctx.outputs)

    info = _run_both(monkeypatch)
    assert "is for tensorrt only" in _reasons(info)["swish"]


def test_priority_overrides_a_built_in_and_unregister_restores(monkeypatch, caplog):
    calls = []

    @mx_trt.register_converter("Activation", priority=0)
    def low(ctx):
        calls.append(("low", ctx.name))

    assert "is not used" in caplog.text  # equal priority: the built-in comes first

    @mx_trt.register_converter("Activation", priority=1, validator=lambda s: None if s.str_("act_type") == "relu" else "relu only")
    def relu(ctx):
        calls.append(("high", ctx.name))
        ctx.emit("Relu", ctx.inputs[:1], ctx.outputs)

    sym = conv_relu(mx.sym.var("data"), "p")
    info = _run_both(monkeypatch, sym)
    assert calls and {c[0] for c in calls} == {"high"} and info.engines[0].run_count == 1
    assert mx_trt.unregister_converter("Activation") == 2
    calls.clear()
    engines.clear_pool()
    _run_both(monkeypatch, sym)
    assert calls == []  # the built-in again


def test_failing_user_converter_is_typed_and_the_node_stays_native(monkeypatch):
    @mx_trt.register_converter("Custom:it_swish")
    def swish(ctx):
        raise KeyError("oops")

    info = _run_both(monkeypatch)
    assert info.engines == [] or all(e.run_count == 1 for e in info.engines)
    assert any("user converter" in r and "KeyError" in r for r in info.native_failures.values())


def test_version_and_code_are_in_the_plan_cache_key(monkeypatch, tmp_path):
    monkeypatch.setenv("MXNET_TENSORRT_CACHE_DIR", str(tmp_path / "cache"))
    builds = []
    for version, extra in (("1", ""), ("1", ""), ("2", ""), ("2", "# code changed")):
        _load(write_ops(tmp_path, version, extra, name="it_cached_ops"), "it_cached_ops")
        engines.clear_pool()
        builds.append(_run_both(monkeypatch).builds)
    sys.modules.pop("it_cached_ops", None)
    assert builds == [1, 0, 1, 1]


def test_cli_import_and_list_converters(tmp_path, capsys):
    sym = resnet_like()
    args, aux = random_params(sym, {"data": (1, 3, 8, 8)}, 0)
    prefix = str(tmp_path / "net")
    mx.model.save_checkpoint(prefix, 0, sym, args, aux)
    path = write_ops(tmp_path, name="it_cli_ops")

    assert main(["partition", prefix, "--shape", "data=1,3,8,8", "--json"]) == 0
    native = json.loads(capsys.readouterr().out)["native"]
    assert set(native) == {"Custom"}

    assert main(["partition", prefix, "--shape", "data=1,3,8,8", "--json", "--import", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["native"] == {}

    assert main(["partition", "--list-converters", "--import", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    row = next(line.split() for line in lines if line.startswith("Custom:it_swish "))
    assert row[:4] == ["Custom:it_swish", "user:", "mxtrt_user_it_cli_ops.swish", "all"]
    assert next(line.split() for line in lines if line.startswith("Activation "))[:3] == ["Activation", "built-in", "all"]
    sys.modules.pop("mxtrt_user_it_cli_ops", None)


@pytest.mark.parametrize("fp16", [False, True], ids=["fp32", "fp16"])
def test_user_converters_build_in_the_trt_rtx_gate(fp16, monkeypatch, tmp_path):
    """The whole graph, custom operators included, parses and builds with TensorRT-RTX's builder."""
    from mx_trt.builder.backends.tensorrt import TensorRTRTXBackend
    from mx_trt.pipeline.plan import analyze
    from mx_trt.pipeline.request import BindRequest
    from mx_trt.settings import Settings
    from tests.builder.test_trt_rtx_gate import gate

    backend = TensorRTRTXBackend()
    reason = backend.build_unavailable_reason()
    assert reason is None, reason
    monkeypatch.syspath_prepend(str(tmp_path))
    write_ops(tmp_path, name="it_gate_ops")
    importlib.import_module("it_gate_ops")
    try:
        sym = resnet_like()
        args, aux = random_params(sym, SHAPES, 0)
        params = {**args, **aux}
        plan = analyze(BindRequest(sym, SHAPES, params, Settings.from_env(), backend))
        assert plan.reasons == {} and len(plan.partition.subgraphs) == 1
        assert gate("user converters", sym, SHAPES, params, backend, fp16)["subgraphs"] == 1
    finally:
        sys.modules.pop("it_gate_ops", None)
