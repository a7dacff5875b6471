"""Plugins: ``mx_trt.register_plugin``, an operator that standard ONNX cannot express nicely.

Sparsemax over the channels (the Euclidean projection onto the simplex: sort,
cumulative sum, a data-dependent support size and threshold) is a Python
``CustomOp`` written in numpy, in the middle of a small ResNet-like graph::

    data -> a(conv+BN+relu) -> [sparsemax] -> b(conv+BN+relu) -> add(sparsemax, b) -> c(conv+BN+relu)

Registered as a plugin ``it.ops::Sparsemax`` with an ONNX Runtime implementation
(the same numpy function, run by onnxruntime-extensions), the whole graph is one
engine equal to MXNet (fp32 ``rtol=1e-4, atol=1e-5``); with only a TensorRT
implementation the engine splits around it and the reason says why.
"""
from __future__ import annotations

import importlib.util
import json
import sys

import mxnet as mx
import numpy as np
import pytest

import mx_trt
from mx_trt.builder import engines
from mx_trt.export.plugins import model_plugins, plugin_for_node, plugins
from mx_trt.tools.cli.main import main
from tests.harness.bindcheck import ATOL, RTOL, bind, compare, native_reasons as reasons
from tests.harness.mxcheck import random_inputs, random_params

SHAPES = {"data": (2, 3, 8, 8)}


def sparsemax(x, scale=1.0):
    """Sparsemax over axis 1 of ``x * scale`` (numpy reference, float32)."""
    z = np.moveaxis(np.asarray(x, dtype=np.float32) * np.float32(scale), 1, -1)
    zs = -np.sort(-z, axis=-1)
    k = np.arange(1, z.shape[-1] + 1, dtype=np.float32)
    cs = np.cumsum(zs, axis=-1)
    kz = (1 + k * zs > cs).sum(axis=-1, keepdims=True)
    tau = (np.take_along_axis(cs, kz - 1, axis=-1) - 1) / kz
    return np.moveaxis(np.maximum(z - tau, 0), -1, 1).astype(np.float32)


class _Sparsemax(mx.operator.CustomOp):
    def __init__(self, scale):
        self.scale = scale

    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], mx.nd.array(sparsemax(in_data[0].asnumpy(), self.scale)))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        raise NotImplementedError


@mx.operator.register("it_sparsemax")
class _SparsemaxProp(mx.operator.CustomOpProp):
    def __init__(self, scale="1.0"):
        super().__init__(need_top_grad=False)
        self.scale = float(scale)

    def infer_shape(self, in_shape):
        return in_shape, [in_shape[0]], []

    def create_operator(self, ctx, shapes, dtypes):
        return _Sparsemax(self.scale)


# The user's module. VERSION, IMPLS and EXTRA are replaced per test.
PLUGIN_MODULE = '''
import numpy as np
import mx_trt

CALLS = []


def sparsemax(x, scale):
    CALLS.append(x.shape)
    z = np.moveaxis(x * np.float32(scale), 1, -1)
    zs = -np.sort(-z, axis=-1)
    k = np.arange(1, z.shape[-1] + 1, dtype=np.float32)
    cs = np.cumsum(zs, axis=-1)
    kz = (1 + k * zs > cs).sum(axis=-1, keepdims=True)
    tau = (np.take_along_axis(cs, kz - 1, axis=-1) - 1) / kz
    return np.moveaxis(np.maximum(z - tau, 0), -1, 1)  # EXTRA


mx_trt.register_plugin("Custom:it_sparsemax", domain="it.ops", op_type="Sparsemax", attrs={"scale": float},
                       version="VERSION", IMPLS)
'''


def resnet_like():
    def conv_bn_relu(x, name):
        c = mx.sym.Convolution(x, num_filter=4, kernel=(3, 3), pad=(1, 1), name=f"{name}_conv")
        b = mx.sym.BatchNorm(c, fix_gamma=False, name=f"{name}_bn")
        return mx.sym.Activation(b, act_type="relu", name=f"{name}_relu")

    x = mx.sym.var("data")
    s = mx.sym.Custom(conv_bn_relu(x, "a"), op_type="it_sparsemax", scale="1.5", name="smax")
    return conv_bn_relu(mx.sym.elemwise_add(s, conv_bn_relu(s, "b"), name="add"), "c")


@pytest.fixture(autouse=True)
def _clean_registry():
    yield
    mx_trt.unregister_plugin("Custom:it_sparsemax")
    engines.clear_pool()


def load_module(tmp_path, name, version="1", impls="onnxruntime=sparsemax", extra=""):
    path = tmp_path / f"{name}.py"
    path.write_text(PLUGIN_MODULE.replace("VERSION", version).replace("IMPLS", impls).replace("# EXTRA", extra))
    spec = importlib.util.spec_from_file_location(name, str(path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    return module


def run_both(monkeypatch):
    return mx_trt.bind_info(compare(resnet_like(), SHAPES, monkeypatch))


def test_the_reference_is_sparsemax():
    x = np.random.RandomState(0).randn(2, 5, 3, 3).astype(np.float32)
    y = sparsemax(x, 1.5)
    np.testing.assert_allclose(y.sum(axis=1), 1.0, rtol=1e-6)  # on the simplex
    assert (y >= 0).all() and (y == 0).any()  # sparse
    np.testing.assert_allclose(sparsemax(np.array([[0.0, 3.0]], np.float32)), [[0.0, 1.0]])


def test_plugin_runs_inside_one_engine_on_onnxruntime(monkeypatch, tmp_path):
    module = load_module(tmp_path, "it_plugin_ops")
    info = run_both(monkeypatch)
    assert reasons(info) == {}
    assert len(info.plan.partition.subgraphs) == 1 and len(info.engines) == 1
    assert info.engines[0].run_count == 1
    assert module.CALLS == [(2, 4, 8, 8)]  # the plugin ran inside that engine, once
    assert info.engines[0].engine.plugins == ["it.ops::Sparsemax"]


def test_without_an_onnxruntime_implementation_the_engine_splits(monkeypatch, tmp_path):
    module = load_module(tmp_path, "it_plugin_trt_only", impls="tensorrt=mx_trt.HostFunction(sparsemax)")
    info = run_both(monkeypatch)
    assert reasons(info) == {"smax": "plugin it.ops::Sparsemax has no onnxruntime implementation (it has: tensorrt)"}
    assert len(info.plan.partition.subgraphs) >= 2
    assert module.CALLS == []


def test_plugin_identity_is_in_the_plan_cache_key_and_stored_engines_reload(monkeypatch, tmp_path):
    monkeypatch.setenv("MXNET_TENSORRT_CACHE_DIR", str(tmp_path / "cache"))
    builds, calls = [], []
    for version, extra in (("1", ""), ("1", ""), ("2", ""), ("2", "# code changed")):
        module = load_module(tmp_path, "it_plugin_cached", version, extra=extra)
        engines.clear_pool()
        builds.append(run_both(monkeypatch).builds)
        calls.append(len(module.CALLS))
    # The second bind loads the stored optimized model (custom domain included) and runs
    # the plugin through it; the third and fourth rebuild for a new version, new code.
    assert builds == [1, 0, 1, 1]
    assert calls == [1, 1, 1, 1]


def test_list_converters_shows_plugins_with_their_backends(tmp_path, capsys):
    path = tmp_path / "it_cli_plugin.py"
    impls = "onnxruntime=sparsemax, tensorrt=mx_trt.HostFunction(sparsemax)"
    path.write_text(PLUGIN_MODULE.replace("VERSION", "1").replace("IMPLS", impls))
    assert main(["partition", "--list-converters", "--import", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    row = next(line.split() for line in lines if line.startswith("Custom:it_sparsemax "))
    assert row[:4] == ["Custom:it_sparsemax", "plugin:", "it.ops::Sparsemax", "onnxruntime,tensorrt"]
    sys.modules.pop("mxtrt_user_it_cli_plugin", None)


def test_fp16_engine_keeps_the_plugin_in_float32(monkeypatch, tmp_path):
    module = load_module(tmp_path, "it_plugin_fp16")
    sym = resnet_like()
    args, aux = random_params(sym, SHAPES, 0)
    inputs = random_inputs(SHAPES, 1)
    _, ref = bind(sym, SHAPES, args, aux, inputs, False, monkeypatch)
    mx_trt.set_use_fp16(True)
    try:
        exe, got = bind(sym, SHAPES, args, aux, inputs, True, monkeypatch)
    finally:
        mx_trt.set_use_fp16(None)
    info = mx_trt.bind_info(exe)
    assert len(info.engines) == 1 and info.engines[0].run_count == 1 and module.CALLS
    np.testing.assert_allclose(got[0], ref[0], rtol=2e-2, atol=2e-2)  # fp16 engine: fp16 tolerance


def test_model_plugins_and_lookup(tmp_path):
    from onnx import helper

    load_module(tmp_path, "it_plugin_lookup")
    p = plugin_for_node("it.ops", "Sparsemax")
    assert p is not None and p in plugins() and p.backends == ("onnxruntime",)
    node = helper.make_node("Sparsemax", ["x"], ["y"], domain="it.ops")
    stray = helper.make_node("Other", ["y"], ["z"], domain="it.ops", name="stray")
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]), node], "g", [], [])
    assert model_plugins(helper.make_model(graph)) == [p]
    with pytest.raises(mx_trt.EngineBuildError, match="it.ops::Other, which no registered plugin implements"):
        model_plugins(helper.make_model(helper.make_graph([node, stray], "g", [], [])))


@pytest.mark.parametrize("kwargs, message", [
    (dict(domain="", onnxruntime=sparsemax), "cannot name a plugin"),
    (dict(domain="com.microsoft", onnxruntime=sparsemax), "cannot name a plugin"),
    (dict(domain="it.ops"), "name an implementation"),
    (dict(domain="it.ops", onnxruntime=sparsemax, attrs={"scale": list}), "must map to int, float or str"),
    (dict(domain="it.ops", onnxruntime=sparsemax, in_dtypes=("complex64",)), "is not one of"),
    (dict(domain="it.ops", tensorrt="/nonexistent/libplugin.so"), "does not exist"),
    (dict(domain="it.ops", onnxruntime=42), "must be a function or a path"),
])
def test_bad_registrations_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        mx_trt.register_plugin("Custom:it_sparsemax", **kwargs)
    assert plugin_for_node("it.ops", "it_sparsemax") is None


def test_an_onnxruntime_extensions_op_keeps_its_signature(monkeypatch, tmp_path):
    load_module(tmp_path, "it_plugin_sig")
    run_both(monkeypatch)  # the engine's build makes the extensions' op, which stays for the process
    with pytest.raises(ValueError, match="another signature needs a new process"):
        mx_trt.register_plugin("Custom:it_sparsemax", domain="it.ops", op_type="Sparsemax",
                               attrs={"scale": int}, onnxruntime=sparsemax)


def test_validator_reason_names_the_plugin(monkeypatch):
    mx_trt.register_plugin("Custom:it_sparsemax", domain="it.ops", op_type="Sparsemax", attrs={"scale": float},
                           onnxruntime=sparsemax, validator=lambda spec: "not today")
    info = run_both(monkeypatch)
    assert reasons(info) == {"smax": "not today (plugin it.ops::Sparsemax)"}


def test_partition_json_reports_the_missing_implementation(tmp_path, capsys):
    sym = resnet_like()
    args, aux = random_params(sym, {"data": (1, 3, 8, 8)}, 0)
    prefix = str(tmp_path / "net")
    mx.model.save_checkpoint(prefix, 0, sym, args, aux)
    path = tmp_path / "it_cli_trt_only.py"
    path.write_text(PLUGIN_MODULE.replace("VERSION", "1").replace("IMPLS", "tensorrt=mx_trt.HostFunction(sparsemax)"))
    assert main(["partition", prefix, "--shape", "data=1,3,8,8", "--json", "--import", str(path)]) == 0
    out = json.dumps(json.loads(capsys.readouterr().out)["native"])
    assert "plugin it.ops::Sparsemax has no onnxruntime implementation (it has: tensorrt)" in out
    sys.modules.pop("mxtrt_user_it_cli_trt_only", None)


class _Inverse(mx.operator.CustomOp):
    def __init__(self, shift):
        self.shift = shift

    def forward(self, is_train, req, in_data, out_data, aux):
        x = in_data[0].asnumpy()
        self.assign(out_data[0], req[0], mx.nd.array(np.linalg.inv(x + self.shift * np.eye(x.shape[-1], dtype=x.dtype))))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        raise NotImplementedError


@mx.operator.register("it_inverse")
class _InverseProp(mx.operator.CustomOpProp):
    def __init__(self, shift="0"):
        super().__init__(need_top_grad=False)
        self.shift = float(shift)

    def infer_shape(self, in_shape):
        return in_shape, [in_shape[0]], []

    def create_operator(self, ctx, shapes, dtypes):
        return _Inverse(self.shift)


def test_a_compiled_custom_op_library_with_a_converter_around_the_node(monkeypatch):
    """ONNX Runtime runs the node with a compiled library: onnxruntime-extensions' own ``Inverse`` kernel."""
    from onnxruntime_extensions import get_library_path

    seen = []

    def shifted_inverse(ctx, plugin):
        n = ctx.spec.in_shapes[0][-1]
        shift = ctx.const(np.float32(ctx.spec.float_("shift", 0.0)) * np.eye(n, dtype=np.float32), "shift")
        seen.append(plugin.node(ctx, [ctx.emit("Add", [ctx.inputs[0], shift])[0]]))

    mx_trt.register_plugin("Custom:it_inverse", domain="ai.onnx.contrib", op_type="Inverse",
                           onnxruntime=get_library_path(), converter=shifted_inverse)
    try:
        x = mx.sym.var("data")
        h = mx.sym.FullyConnected(x, num_hidden=4, name="fc1")
        inv = mx.sym.Custom(h, op_type="it_inverse", shift="4", name="inv")
        sym = mx.sym.FullyConnected(mx.sym.Activation(inv, act_type="tanh", name="t"), num_hidden=4, name="fc2")
        shapes = {"data": (4, 6)}
        args, aux = random_params(sym, shapes, 0)
        inputs = random_inputs(shapes, 1)
        _, ref = bind(sym, shapes, args, aux, inputs, False, monkeypatch)
        exe, got = bind(sym, shapes, args, aux, inputs, True, monkeypatch)
        np.testing.assert_allclose(got[0], ref[0], rtol=RTOL, atol=ATOL)
        info = mx_trt.bind_info(exe)
        assert reasons(info) == {} and len(info.engines) == 1 and info.engines[0].run_count == 1
        assert info.engines[0].engine.plugins == ["ai.onnx.contrib::Inverse"] and len(seen) == 1
    finally:
        mx_trt.unregister_plugin("Custom:it_inverse")
