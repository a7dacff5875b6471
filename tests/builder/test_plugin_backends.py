"""Plugin glue of the backends: TensorRT's plugin registry and ONNX Runtime's session options.

TensorRT itself is absent here: :func:`load_plugins` is driven with a fake module
holding a plugin registry, and with TensorRT-RTX's real one (which its wheel
ships: ``load_library``, ``get_creator``). TensorRT-RTX's ONNX parser is run on
a subgraph holding a plugin node to see what it does without a creator.
"""
from __future__ import annotations

import logging
import types

import numpy as np
import pytest

import mx_trt
from mx_trt.builder.backends import ort_plugins
from mx_trt.builder.backends.tensorrt import builder, plugins as trt_plugins
from mx_trt.errors import EngineBuildError
from mx_trt.export.plugins import plugin_for_node
from tests.export.test_plugins import resnet_like, sparsemax


class FakeRegistry:
    """The part of ``tensorrt.IPluginRegistry`` that load_plugins uses."""

    def __init__(self, library_creators=()):
        self.creators = set()
        self.loaded = []
        self.library_creators = set(library_creators)

    def load_library(self, path):
        self.loaded.append(path)
        if not self.library_creators:
            return None
        self.creators |= self.library_creators
        return object()

    def get_creator(self, name, version, namespace=""):
        return (name, version, namespace) if (name, version, namespace) in self.creators else None


def fake_trt(registry, name="fake_tensorrt"):
    return types.SimpleNamespace(__name__=name, get_plugin_registry=lambda: registry)


@pytest.fixture(autouse=True)
def _clean():
    yield
    for op in ("Custom:it_sparsemax", "Custom:it_other"):
        mx_trt.unregister_plugin(op)
    trt_plugins._LOADED.clear()


def _register(**impls):
    return mx_trt.register_plugin("Custom:it_sparsemax", domain="it.ops", op_type="Sparsemax", attrs={"scale": float},
                                  **impls)


def test_a_plugin_library_is_loaded_once_and_its_creator_checked(tmp_path):
    lib = tmp_path / "libsparsemax.so"
    lib.write_bytes(b"\x7fELF fake")
    p = _register(tensorrt=str(lib))
    reg = FakeRegistry({("Sparsemax", "1", "it.ops")})
    mod = fake_trt(reg)
    trt_plugins.load_plugins(mod, "tensorrt", "TensorRT", [p])
    trt_plugins.load_plugins(mod, "tensorrt", "TensorRT", [p])
    assert reg.loaded == [str(lib)]


def test_a_library_that_does_not_load_is_a_typed_error(tmp_path):
    lib = tmp_path / "libbroken.so"
    lib.write_bytes(b"not a library")
    p = _register(tensorrt=str(lib))
    with pytest.raises(EngineBuildError, match="could not load the plugin library"):
        trt_plugins.load_plugins(fake_trt(FakeRegistry()), "tensorrt", "TensorRT", [p])


def test_a_registrar_is_called_with_the_module_and_must_register_the_creator():
    calls = []

    def register(trt):
        calls.append(trt.__name__)
        trt.get_plugin_registry().creators.add(("Sparsemax", "1", "it.ops"))

    p = _register(tensorrt=register, onnxruntime=sparsemax)
    reg = FakeRegistry()
    trt_plugins.load_plugins(fake_trt(reg), "tensorrt", "TensorRT", [p])
    trt_plugins.load_plugins(fake_trt(reg), "tensorrt", "TensorRT", [p])
    assert calls == ["fake_tensorrt"]

    def register_nothing(trt):
        pass

    p = _register(tensorrt=register_nothing)
    with pytest.raises(EngineBuildError, match="holds no creator named 'Sparsemax', version '1', namespace 'it.ops'"):
        trt_plugins.load_plugins(fake_trt(FakeRegistry(), "other"), "tensorrt", "TensorRT", [p])


def test_a_failing_registrar_and_a_missing_implementation_are_typed_errors():
    def register(trt):
        raise RuntimeError("no tensorrt.plugin here")

    p = _register(tensorrt=register)
    with pytest.raises(EngineBuildError, match="registrar failed: RuntimeError: no tensorrt.plugin here"):
        trt_plugins.load_plugins(fake_trt(FakeRegistry()), "tensorrt", "TensorRT", [p])
    with pytest.raises(EngineBuildError, match="has no tensorrt_rtx implementation"):
        trt_plugins.load_plugins(fake_trt(FakeRegistry()), "tensorrt_rtx", "TensorRT-RTX", [p])


def test_before_a_deserialization_every_plugin_of_the_backend_is_loaded(caplog):
    def register(trt):
        trt.get_plugin_registry().creators.add(("Sparsemax", "1", "it.ops"))

    _register(tensorrt=register)
    mx_trt.register_plugin("Custom:it_other", domain="it.ops", op_type="Other", tensorrt=lambda trt: None,
                           onnxruntime=sparsemax)
    reg = FakeRegistry()
    with caplog.at_level(logging.WARNING, logger=trt_plugins.__name__):
        trt_plugins.load_registered(fake_trt(reg), "tensorrt", "TensorRT")
    assert ("Sparsemax", "1", "it.ops") in reg.creators
    assert "holds no creator named 'Other'" in caplog.text  # logged, not raised: the plan may not need it


def _rtx():
    from mx_trt.builder.backends.tensorrt import TensorRTRTXBackend

    backend = TensorRTRTXBackend()
    reason = backend.build_unavailable_reason()
    assert reason is None, reason
    return backend


def test_tensorrt_rtx_registry_refuses_a_file_that_is_no_plugin_library(tmp_path):
    lib = tmp_path / "libnotaplugin.so"
    lib.write_bytes(b"not a library")
    p = _register(tensorrt_rtx=str(lib))
    with pytest.raises(EngineBuildError, match="TensorRT-RTX could not load the plugin library"):
        trt_plugins.load_plugins(_rtx().module(), "tensorrt_rtx", "TensorRT-RTX", [p])


def _export_for(backend):
    from mx_trt.export.dynamic import SubgraphExporter
    from mx_trt.pipeline.plan import analyze
    from mx_trt.pipeline.request import BindRequest
    from mx_trt.passes.fuse import boundary
    from mx_trt.settings import Settings
    from tests.harness.mxcheck import random_params

    sym, shapes = resnet_like(), {"data": (1, 3, 8, 8)}
    args, aux = random_params(sym, shapes, 0)
    params = {**args, **aux}
    plan = analyze(BindRequest(sym, shapes, params, Settings.from_env(), backend))
    assert plan.reasons == {} and len(plan.partition.subgraphs) == 1
    graph, absorbed = plan.graph, plan.absorbed_ids()
    weights = {n.name: params[n.name].asnumpy() for n in graph.nodes if n.is_variable and n.id in absorbed}
    sg = plan.partition.subgraphs[0]
    ins, outs = boundary(graph, sg.nodes, absorbed)
    return SubgraphExporter(sym, shapes, params, graph, weights, False, []).export(sg.name, sg.nodes, ins, outs)


def test_tensorrt_rtx_build_checks_the_creator_before_its_parser(monkeypatch):
    from mx_trt.builder.backends.base import BuildOptions

    backend = _rtx()
    _register(tensorrt_rtx=lambda trt: None)  # a registrar that registers nothing
    exported = _export_for(backend)
    assert [(n.domain, n.op_type) for n in exported.model.graph.node if n.domain] == [("it.ops", "Sparsemax")]
    with pytest.raises(EngineBuildError, match="TensorRT-RTX's plugin registry holds no creator named 'Sparsemax'"):
        backend.build(exported, BuildOptions(name="sg"))
    # Without that check, TensorRT-RTX's own parser refuses the node: no creator of that name/version/namespace.
    monkeypatch.setattr(builder, "load_plugins", lambda *a: None)
    with pytest.raises(EngineBuildError, match="Plugin not found"):
        backend.build(exported, BuildOptions(name="sg"))


def test_tensorrt_rtx_analysis_refuses_a_plugin_without_its_implementation():
    from mx_trt.pipeline.plan import analyze
    from mx_trt.pipeline.request import BindRequest
    from mx_trt.settings import Settings
    from tests.harness.mxcheck import random_params

    _register(onnxruntime=sparsemax, tensorrt=lambda trt: None)
    sym, shapes = resnet_like(), {"data": (1, 3, 8, 8)}
    args, aux = random_params(sym, shapes, 0)
    plan = analyze(BindRequest(sym, shapes, {**args, **aux}, Settings.from_env(), _rtx()))
    assert list(plan.reasons.values()) == [
        "plugin it.ops::Sparsemax has no tensorrt_rtx implementation (it has: onnxruntime, tensorrt)"]


class FakeSessionOptions:
    def __init__(self, fail=False):
        self.libraries = []
        self.fail = fail

    def register_custom_ops_library(self, path):
        if self.fail:
            raise RuntimeError("undefined symbol: RegisterCustomOps")
        self.libraries.append(path)


def test_onnxruntime_session_options_get_each_library_once(tmp_path):
    lib = tmp_path / "libops.so"
    lib.write_bytes(b"lib")
    a = _register(onnxruntime=str(lib))
    b = mx_trt.register_plugin("Custom:it_other", domain="it.ops", op_type="Other", onnxruntime=str(lib))
    so = FakeSessionOptions()
    assert ort_plugins.register_plugins(so, [a, b]) == [str(lib)] and so.libraries == [str(lib)]
    with pytest.raises(EngineBuildError, match="cannot load the custom-op library .*undefined symbol"):
        ort_plugins.register_plugins(FakeSessionOptions(fail=True), [a])
    with pytest.raises(EngineBuildError, match="needs plugin it.ops::Gone, which is not registered"):
        ort_plugins.plugins_named(["it.ops::Sparsemax", "it.ops::Gone"])


def test_the_extensions_op_calls_the_current_function_in_declared_types():
    from onnxruntime_extensions import get_library_path

    p = _register(onnxruntime=lambda x, scale: (x * scale).astype(np.float64))
    so = FakeSessionOptions()
    assert ort_plugins.register_plugins(so, [p]) == [get_library_path()]
    call = ort_plugins._dispatcher("it.ops", "Sparsemax", p.out_dtypes)
    out = call(np.ones((1, 2), np.float32), scale=2.0)
    assert out.dtype == np.float32 and out.tolist() == [[2.0, 2.0]]
    _register(onnxruntime=lambda x, scale: (x, x))  # a new version: same op, new function
    # The dispatcher never raises into ONNX Runtime: the fault goes to the run's side channel.
    from mx_trt.builder.backends import plugin_runs

    with plugin_runs.watching() as run:
        out = call(np.ones((1, 2), np.float32), scale=2.0)
    assert out.shape == (1, 2) and run.faults and "returned 2 output" in run.faults[0]
    with pytest.raises(mx_trt.EngineRunError, match="returned 2 output"):
        run.raise_fault("engine")
    assert plugin_for_node("it.ops", "Sparsemax") is not None
    mx_trt.unregister_plugin("Custom:it_sparsemax")
    with plugin_runs.watching() as run:
        call(np.ones((1, 2), np.float32), scale=2.0)
    assert run.faults and "no longer registered" in run.faults[0]


# -- the host plugin (HostFunction) against a fake TensorRT module -----------------------------------------

class _Iface:
    def __init__(self):
        pass


class FakeHostTrt:
    """The names host_plugin takes from a TensorRT module, as plain Python."""

    __name__ = "fake_tensorrt_host"
    IPluginV3 = type("IPluginV3", (_Iface,), {})
    IPluginV3OneCore = type("IPluginV3OneCore", (_Iface,), {})
    IPluginV3OneBuild = type("IPluginV3OneBuild", (_Iface,), {})
    IPluginV3OneRuntime = type("IPluginV3OneRuntime", (_Iface,), {})
    IPluginCreatorV3One = type("IPluginCreatorV3One", (_Iface,), {})
    DataType = types.SimpleNamespace(FLOAT=0, HALF=1, INT8=2, UINT8=3, INT32=4, INT64=5, BOOL=6)
    PluginFieldType = types.SimpleNamespace(FLOAT32="f32", INT32="i32", CHAR="char")
    TensorFormat = types.SimpleNamespace(LINEAR="linear", CHW32="chw32")
    PluginFieldCollection = list
    DimsExprs = list

    class PluginField:
        def __init__(self, name, data=None, type=None):
            self.name, self.data, self.type = name, data, type

    def __init__(self):
        self.registry = types.SimpleNamespace(creators=[], register_creator=self._register,
                                              deregister_creator=self._deregister, get_creator=self._get)

    def _register(self, creator, namespace):
        self.registry.creators.append((creator, namespace))
        return True

    def _deregister(self, creator):
        self.registry.creators = [(c, ns) for c, ns in self.registry.creators if c is not creator]
        return True

    def _get(self, name, version, namespace=""):
        return next((c for c, ns in self.registry.creators
                     if (c.name, c.plugin_version, ns) == (name, version, namespace)), None)

    def get_plugin_registry(self):
        return self.registry


def _desc(shape, type_=0, fmt="linear"):
    return types.SimpleNamespace(dims=list(shape), type=type_, format=fmt)


def test_host_plugin_registers_a_creator_that_builds_and_runs_the_numpy_function(monkeypatch):
    from mx_trt.builder.backends.tensorrt import cuda, host_plugin

    p = _register(tensorrt=mx_trt.HostFunction(sparsemax))
    trt = FakeHostTrt()
    trt_plugins.load_plugins(trt, "tensorrt", "TensorRT", [p])  # registers, then finds the creator
    (creator, namespace), = trt.registry.creators
    assert (creator.name, creator.plugin_version, namespace) == ("Sparsemax", "1", "it.ops")
    assert [f.name for f in creator.field_names] == ["scale"]

    # What TensorRT's parser does with the node's attribute "scale".
    plugin = creator.create_plugin("smax", [trt.PluginField("scale", np.array([1.5], np.float32), "f32")], None)
    assert plugin.attrs == {"scale": 1.5} and plugin.get_capability_interface("build") is plugin
    assert plugin.get_output_data_types([trt.DataType.FLOAT]) == [trt.DataType.FLOAT]
    assert plugin.get_output_shapes([["n", "c", "h", "w"]], [], None) == [["n", "c", "h", "w"]]
    in_out = [types.SimpleNamespace(desc=_desc((1,))), types.SimpleNamespace(desc=_desc((1,)))]
    assert plugin.supports_format_combination(1, in_out, 1)
    assert not plugin.supports_format_combination(0, [types.SimpleNamespace(desc=_desc((1,), 1))], 1)  # fp16
    assert not plugin.supports_format_combination(0, [types.SimpleNamespace(desc=_desc((1,), 0, "chw32"))], 1)
    fields = plugin.get_fields_to_serialize()
    assert host_plugin.read_fields(p.attrs, fields) == {"scale": 1.5}  # what a deserialization gets back
    clone = plugin.attach_to_context(None)
    assert clone is not plugin and clone.attrs == plugin.attrs

    # enqueue, with host buffers standing in for device memory.
    synced = []
    monkeypatch.setattr(cuda, "stream_synchronize", synced.append)
    monkeypatch.setattr(cuda, "memcpy", lambda dst, src, n, kind: __import__("ctypes").memmove(dst, src, n))
    x = np.random.RandomState(0).randn(2, 4, 3, 3).astype(np.float32)
    y = np.zeros_like(x)
    plugin.enqueue([_desc(x.shape)], [_desc(y.shape)], [x.ctypes.data], [y.ctypes.data], 0, 77)
    assert synced == [77]
    np.testing.assert_array_equal(y, sparsemax(x, 1.5))

    bad = FakeHostTrt()
    q = _register(tensorrt=mx_trt.HostFunction(lambda x, scale: (x, x)))
    trt_plugins.load_plugins(bad, "tensorrt", "TensorRT", [q])
    broken = bad.registry.creators[0][0].create_plugin("smax", fields, None)
    with pytest.raises(mx_trt.EngineRunError, match="returned 2 output"):
        broken.enqueue([_desc(x.shape)], [_desc(y.shape)], [x.ctypes.data], [y.ctypes.data], 0, 0)
    no_attrs = bad.registry.creators[0][0].create_plugin("smax", [], None)
    with pytest.raises(mx_trt.EngineRunError, match="raised TypeError: .*scale"):
        no_attrs.enqueue([_desc(x.shape)], [_desc(y.shape)], [x.ctypes.data], [y.ctypes.data], 0, 0)


def test_a_new_version_of_a_host_plugin_replaces_its_creator():
    from mx_trt.builder.backends.tensorrt import host_plugin

    trt = FakeHostTrt()
    p1 = _register(tensorrt=mx_trt.HostFunction(sparsemax))
    host_plugin.register_host_plugin(trt, p1, sparsemax)
    first = trt.registry.creators[0][0]
    host_plugin.register_host_plugin(trt, p1, sparsemax)
    assert len(trt.registry.creators) == 1 and trt.registry.creators[0][0] is not first


def test_host_functions_are_for_tensorrt_only():
    with pytest.raises(ValueError, match="TensorRT-RTX 1.7 cannot add Python plugins"):
        _register(tensorrt_rtx=mx_trt.HostFunction(sparsemax))
    with pytest.raises(ValueError, match="onnxruntime takes the function itself"):
        _register(onnxruntime=mx_trt.HostFunction(sparsemax))
