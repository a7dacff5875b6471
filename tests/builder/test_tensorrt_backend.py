"""The TensorRT / TensorRT-RTX backends without a GPU: selection, settings, profiles, shapes, errors and RTX builds.

Module selection and unavailable reasons, profiles, output shape rules,
settings, parser-error mapping, real TensorRT-RTX builds of tiny graphs exported
by mx_trt (RTX builds without a device), timing caches, stored engines and the
builder flags. The runner and the GPU are ``test_tensorrt_runner.py``'s.

TensorRT-RTX is part of the suite (``make test`` installs it): its tests fail,
not skip, when it is missing.
"""
from __future__ import annotations

import json
import logging
import os
import sys
import types

import mxnet as mx
import pytest

from mx_trt.builder.backends import BACKENDS, Buffer, BuildOptions, select_backend
from mx_trt.builder.backends.base import TensorSpec
from mx_trt.builder.backends.tensorrt import TensorRTBackend, TensorRTRTXBackend, TrtEngine, cuda, load_engine
from mx_trt.builder.backends.tensorrt.builder import workspace_limit
from mx_trt.builder.backends.tensorrt.caches import load_timing_cache
from mx_trt.builder.backends.tensorrt.diagnostics import parser_error_messages
from mx_trt.builder.backends.tensorrt.flavours import rtx_specialization
from mx_trt.builder.backends.tensorrt.logs import LogCapture, logger_for
from mx_trt.builder.backends.tensorrt.shapes import (
    batch_rule_output_shapes,
    context_output_shapes,
    dims_tuple,
    make_profiles,
    profiles_from_batch_ranges,
    select_profile,
)
from mx_trt.pipeline.plan import analyze
from mx_trt.pipeline.request import BindRequest
from mx_trt.errors import BackendUnavailableError, EngineBuildError, MxTrtError, ShapeError
from mx_trt.settings import Settings
from tests.harness.bindcheck import conv_relu
from tests.harness.mxcheck import random_params
from tests.builder.tensorrt_fixtures import SHAPES, FakeDims, build, export_all, no_gpu_here, rtx, tiny


# --------------------------------------------------------------------------- selection and availability


def test_both_backends_are_registered():
    assert BACKENDS["tensorrt"] is TensorRTBackend
    assert BACKENDS["tensorrt_rtx"] is TensorRTRTXBackend
    # One implementation: the RTX backend only names its module and turns on its extras.
    assert issubclass(TensorRTRTXBackend, TensorRTBackend)
    assert TensorRTRTXBackend.build is TensorRTBackend.build
    assert (TensorRTBackend.module_name, TensorRTRTXBackend.module_name) == ("tensorrt", "tensorrt_rtx_bindings")


def test_gpu_contexts_try_tensorrt_then_rtx(monkeypatch):
    calls = []
    monkeypatch.setattr(TensorRTBackend, "unavailable_reason", classmethod(lambda cls: calls.append(cls.name) or "nope " + cls.name))
    with pytest.raises(BackendUnavailableError) as info:
        select_backend("gpu")
    assert calls == ["tensorrt", "tensorrt_rtx"]
    assert "tensorrt: nope tensorrt" in str(info.value) and "tensorrt_rtx: nope tensorrt_rtx" in str(info.value)
    monkeypatch.setattr(TensorRTBackend, "unavailable_reason", classmethod(lambda cls: None if cls.rtx else "missing"))
    assert isinstance(select_backend("gpu"), TensorRTRTXBackend)


@pytest.mark.parametrize("cls, switch", [(TensorRTBackend, "USE_TENSORRT=1"), (TensorRTRTXBackend, "USE_TENSORRT_RTX=1")])
def test_missing_module_is_named_with_how_to_install(cls, switch, monkeypatch):
    monkeypatch.setitem(sys.modules, cls.module_name, None)  # import raises ImportError
    reason = cls.unavailable_reason()
    assert f"import {cls.module_name} failed" in reason and switch in reason
    assert cls.build_unavailable_reason() == reason
    with pytest.raises(BackendUnavailableError, match=cls.module_name):
        cls().build(None, BuildOptions())


def test_incomplete_module_is_reported(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", types.ModuleType("tensorrt"))
    assert "incomplete install" in TensorRTBackend.unavailable_reason()


def test_running_needs_a_device_building_rtx_does_not(rtx, monkeypatch):
    monkeypatch.setattr(cuda, "unavailable_reason", lambda: "no CUDA device: (test)")
    assert TensorRTRTXBackend.build_unavailable_reason() is None
    reason = TensorRTRTXBackend.unavailable_reason()
    assert "need a CUDA device to run" in reason and "(test)" in reason
    # TensorRT proper times tactics on the device even to build.
    fake = types.ModuleType("tensorrt")
    fake.Builder = fake.OnnxParser = object
    monkeypatch.setitem(sys.modules, "tensorrt", fake)
    assert "builds engines on a CUDA device" in TensorRTBackend.build_unavailable_reason()


def test_rtx_reports_an_unsupported_compute_capability(rtx, monkeypatch):
    monkeypatch.setattr(cuda, "unavailable_reason", lambda: None)
    monkeypatch.setattr(cuda, "device_count", lambda: 1)
    monkeypatch.setattr(cuda, "compute_capability", lambda i: (9, 0))
    reason = TensorRTRTXBackend.unavailable_reason()
    assert "9.0" in reason and "8.6" in reason
    monkeypatch.setattr(cuda, "compute_capability", lambda i: (8, 6))
    assert TensorRTRTXBackend.unavailable_reason() is None


def test_cuda_wrapper_names_a_missing_library(monkeypatch):
    monkeypatch.setattr(cuda, "candidates", lambda: ["/nonexistent/libcudart.so"])
    cuda.reset()
    try:
        reason = cuda.unavailable_reason()
        assert "libcudart" in reason and "MXNET_TENSORRT_CUDART" in reason and "/nonexistent/libcudart.so" in reason
        with pytest.raises(BackendUnavailableError):
            cuda.Stream()
    finally:
        monkeypatch.undo()
        cuda.reset()


@pytest.mark.skipif(os.path.exists("/dev/nvidiactl"), reason="this machine has an NVIDIA driver")
def test_cuda_wrapper_says_why_there_is_no_device():
    reason = cuda.unavailable_reason()
    assert reason and ("CUDA" in reason or "libcudart" in reason)


# --------------------------------------------------------------------------- settings


def test_workspace_option():
    assert workspace_limit({}) is None
    assert workspace_limit({"workspace_mb": 256}) == 256 << 20
    for bad in ("256", 0, -4, 1.5, True):
        with pytest.raises(MxTrtError, match="workspace_mb"):
            workspace_limit({"workspace_mb": bad})


def test_workspace_cap_reaches_the_builder_config(rtx, monkeypatch):
    seen = []
    real = rtx.IBuilderConfig.set_memory_pool_limit
    monkeypatch.setattr(rtx.IBuilderConfig, "set_memory_pool_limit",
                        lambda self, pool, size: seen.append((pool, size)) or real(self, pool, size))
    monkeypatch.setenv("MXNET_TENSORRT_WORKSPACE_MB", "32")  # the builder reads its options, never the environment
    build(tiny())
    assert seen == []  # no cap by default
    build(tiny(), **Settings(workspace_mb=64).engine_options())
    assert seen == [(rtx.MemoryPoolType.WORKSPACE, 64 << 20)]
    with pytest.raises(EngineBuildError, match="workspace_mb"):
        build(tiny(), workspace_mb="lots")


def test_workspace_and_specialization_come_from_the_binds_settings(monkeypatch):
    monkeypatch.setenv("MXNET_TENSORRT_WORKSPACE_MB", "64")
    monkeypatch.setenv("MXNET_TENSORRT_RTX_SPECIALIZATION", "EAGER")
    assert Settings.from_env().engine_options() == {"workspace_mb": 64, "rtx_specialization": "eager"}
    monkeypatch.delenv("MXNET_TENSORRT_WORKSPACE_MB")
    monkeypatch.delenv("MXNET_TENSORRT_RTX_SPECIALIZATION")
    assert Settings.from_env().engine_options() == {}


def test_rtx_specialization_setting(monkeypatch):
    monkeypatch.setenv("MXNET_TENSORRT_RTX_SPECIALIZATION", "eager")  # not read here: the options carry it
    assert rtx_specialization({}) == "lazy"
    assert rtx_specialization({"rtx_specialization": "EAGER"}) == "eager"
    assert rtx_specialization({"rtx_specialization": "none"}) == "none"
    with pytest.raises(MxTrtError, match="lazy, eager, none"):
        rtx_specialization({"rtx_specialization": "sometimes"})


# --------------------------------------------------------------------------- profiles


DIMS = {"data": (-1, 3, 8, 8), "mask": (4,)}
NAMES = {"data": ["batch", None, None, None], "mask": [None]}


def test_static_inputs_get_one_fixed_profile():
    dims = {"data": (2, 3, 8, 8)}
    assert make_profiles(dims, None, "sg") == [{"data": ((2, 3, 8, 8),) * 3}]


def test_dynamic_inputs_without_profiles_are_an_error():
    with pytest.raises(EngineBuildError, match=r"input 'data' \(\?, 3, 8, 8\) has dynamic axis 0 \('batch'\).*extra\['profiles'\]"):
        make_profiles(DIMS, None, "sg", NAMES)


def test_profiles_are_completed_and_checked():
    p = make_profiles(DIMS, [{"data": [(1, 3, 8, 8), (2, 3, 8, 8), (8, 3, 8, 8)]}], "sg")
    assert p == [{"data": ((1, 3, 8, 8), (2, 3, 8, 8), (8, 3, 8, 8)), "mask": ((4,), (4,), (4,))}]
    # An input left out whose only dynamic axis is the batch follows the others' batch range.
    two = {"a": (-1, 3), "b": (-1, 5)}
    p = make_profiles(two, [{"a": [(1, 3), (2, 3), (4, 3)]}], "sg")
    assert p[0]["b"] == ((1, 5), (2, 5), (4, 5))
    cases = [
        ({"data": [(1, 3, 8, 8), (9, 3, 8, 8), (8, 3, 8, 8)]}, "min <= opt <= max"),
        ({"data": [(1, 3, 8, 8), (2, 3, 8, 8), (8, 3, 9, 8)]}, "axis 2 is static"),
        ({"data": [(1, 3, 8), (2, 3, 8), (8, 3, 8)]}, "rank 4"),
        ({"data": [(1, 3, 8, 8), (2, 3, 8, 8), (8, 3, 8, 8)], "nope": [(1,), (1,), (1,)]}, "not inputs"),
        ({"mask": [(4,), (4,), (4,)]}, "does not cover input 'data'"),
        ({"data": [(1, 3, 8, 8), (2, 3, 8, 8)]}, r"\(min_shape, opt_shape, max_shape\)"),
    ]
    for prof, msg in cases:
        with pytest.raises(EngineBuildError, match=msg):
            make_profiles(DIMS, [prof], "sg")


def test_batch_ranges_become_profiles():
    p = profiles_from_batch_ranges(DIMS, [(1, 2, 4), (5, 8, 16)], "sg")
    assert p == [{"data": ((1, 3, 8, 8), (2, 3, 8, 8), (4, 3, 8, 8))}, {"data": ((5, 3, 8, 8), (8, 3, 8, 8), (16, 3, 8, 8))}]
    with pytest.raises(EngineBuildError, match="besides the batch"):
        profiles_from_batch_ranges({"x": (-1, -1)}, [(1, 2, 3)], "sg")


def test_profile_selection():
    profiles = make_profiles(DIMS, [{"data": [(1, 3, 8, 8), (2, 3, 8, 8), (4, 3, 8, 8)]},
                                         {"data": [(3, 3, 8, 8), (8, 3, 8, 8), (16, 3, 8, 8)]}], "sg")
    names = ["data", "mask"]
    assert select_profile(profiles, names, [(1, 3, 8, 8), (4,)], "sg") == 0
    assert select_profile(profiles, names, [(4, 3, 8, 8), (4,)], "sg") == 0  # the first that fits
    assert select_profile(profiles, names, [(5, 3, 8, 8), (4,)], "sg") == 1
    for bad in ([(17, 3, 8, 8), (4,)], [(2, 3, 8, 9), (4,)], [(2, 3, 8), (4,)], [(2, 3, 8, 8), (5,)]):
        with pytest.raises(ShapeError, match="outside every optimization profile"):
            select_profile(profiles, names, bad, "sg")


# --------------------------------------------------------------------------- output shapes


class ShapeContext:
    def __init__(self, out, accept=True):
        self.out, self.accept, self.set = out, accept, {}

    def set_input_shape(self, name, shape):
        self.set[name] = shape
        return self.accept

    def get_tensor_shape(self, name):
        return self.out[name]


def test_dims_tuple(rtx):
    assert dims_tuple(rtx.Dims([2, 3])) == (2, 3)
    assert dims_tuple(rtx.Dims()) == ()
    assert dims_tuple((-1, 4)) == (-1, 4)
    assert dims_tuple(FakeDims()) is None


def test_context_output_shapes():
    ok = ShapeContext({"y": (5, 10)})
    assert context_output_shapes(ok, ["x"], [(5, 3)], ["y"], "sg") == [(5, 10)]
    assert ok.set == {"x": (5, 3)}
    with pytest.raises(ShapeError, match="nbDims == -1"):
        context_output_shapes(ShapeContext({"y": FakeDims()}), ["x"], [(5, 3)], ["y"], "sg")
    with pytest.raises(ShapeError, match="depends on the data"):
        context_output_shapes(ShapeContext({"y": (-1, 10)}), ["x"], [(5, 3)], ["y"], "sg")
    with pytest.raises(ShapeError, match="rejected shape"):
        context_output_shapes(ShapeContext({"y": (5, 10)}, accept=False), ["x"], [(5, 3)], ["y"], "sg")


def test_batch_rule():
    ins = [TensorSpec("a", (2, 3), "float32"), TensorSpec("b", (2, 4, 4), "float32")]
    outs = [TensorSpec("y", (2, 7), "float32")]
    assert batch_rule_output_shapes(ins, outs, [(6, 3), (6, 4, 4)], "sg") == [(6, 7)]
    with pytest.raises(ShapeError, match="disagree on the batch"):
        batch_rule_output_shapes(ins, outs, [(6, 3), (5, 4, 4)], "sg")
    with pytest.raises(ShapeError, match="must keep dimensions"):
        batch_rule_output_shapes(ins, outs, [(6, 4), (6, 4, 4)], "sg")


# --------------------------------------------------------------------------- parser errors


def test_parser_errors_name_the_mxnet_node(rtx, caplog):
    ex = tiny()
    conv = next(n for n in ex.model.graph.node if n.op_type == "Conv")
    assert ex.origin[conv.name] == "a_conv"
    conv.op_type = "NoSuchOnnxOp"
    with caplog.at_level(logging.ERROR, logger="mx_trt.builder.backends.tensorrt"):
        with pytest.raises(EngineBuildError) as info:
            build(ex)
    msg = str(info.value)
    assert ex.model.graph.name in msg and "ONNX parser rejected" in msg
    assert f"ONNX node {conv.name!r} (NoSuchOnnxOp) from MXNet node 'a_conv'" in msg
    assert any("from MXNet node 'a_conv'" in r.getMessage() for r in caplog.records if r.levelno == logging.ERROR)


def test_parser_error_mapping_uses_node_index_and_doc_string():
    ex = tiny()
    node = ex.model.graph.node[1]

    class Err:
        def __init__(self, index, name, op, desc):
            self.index, self.name, self.op, self.text = index, name, op, desc

        def code(self):
            return types.SimpleNamespace(name="UNSUPPORTED_NODE")

        def node(self):
            return self.index

        def node_name(self):
            return self.name

        def node_operator(self):
            return self.op

        def desc(self):
            return self.text

    errors = [Err(1, "", "", "bad attribute"), Err(-1, "", "", "bad model")]
    parser = types.SimpleNamespace(num_errors=2, get_error=lambda i: errors[i])
    ex.origin.pop(node.name)  # falls back to the node's doc_string, which the exporter sets to the MXNet name
    msgs = parser_error_messages(parser, ex)
    assert msgs[0] == f"ONNX node {node.name!r} ({node.op_type}) from MXNet node {node.doc_string!r}: UNSUPPORTED_NODE: bad attribute"
    assert msgs[1] == "model: UNSUPPORTED_NODE: bad model"


def test_output_shape_disagreement_names_the_mxnet_node(rtx):
    ex = tiny()
    ex.model.graph.output[0].type.tensor_type.shape.dim[1].dim_value = 6  # fc really has 5
    with pytest.raises(EngineBuildError, match=r"output 'fc_output'.*from MXNet node 'fc'.*\(2, 6\).*\(2, 5\)"):
        build(ex)


NEEDS_2D_VIEW = [
    # TensorRT's Softmax and ArgMax/ArgMin take rank >= 2: the converters run these on a (1, n) view.
    ("softmax_1d", lambda x: mx.sym.softmax(x * 2, name="op"), (7,)),
    ("log_softmax_1d", lambda x: mx.sym.log_softmax(x * 2, name="op"), (7,)),
    ("softmax_activation_1d", lambda x: mx.sym.SoftmaxActivation(x * 2, name="op"), (7,)),
    ("argmax_1d", lambda x: mx.sym.argmax(x * 2, axis=0, name="op"), (7,)),
    ("argmax_global", lambda x: mx.sym.argmax(x * 2, name="op"), (3, 4)),
    ("argmin_global", lambda x: mx.sym.argmin(x * 2, keepdims=True, name="op"), (3, 4)),
    ("softmax_2d", lambda x: mx.sym.softmax(x * 2, name="op"), (3, 4)),
    ("argmax_axis", lambda x: mx.sym.argmax(x * 2, axis=1, name="op"), (3, 4)),
]


@pytest.mark.parametrize("make, shape", [r[1:] for r in NEEDS_2D_VIEW], ids=[r[0] for r in NEEDS_2D_VIEW])
def test_rank_one_softmax_and_global_argmax_build(rtx, make, shape):
    """The shapes TensorRT's parser rejected as 1-D ops now convert to a form it builds, and stay in the engine."""
    sym = make(mx.sym.var("x"))
    plan = analyze(BindRequest(sym, {"x": shape}, {}, Settings.from_env(), TensorRTRTXBackend()))
    assert plan.partition.native == {}
    (ex,) = export_all(sym, {"x": shape})
    assert build(ex).plan


# --------------------------------------------------------------------------- TensorRT-RTX builds (no device needed)


def plan_is_wellformed(rtx, plan: bytes) -> bool:
    """The runtime's own header check: no MALFORMED_ENGINE flag (other flags: no usable GPU here)."""
    _, diagnostics = rtx.Runtime(logger_for(rtx)).get_engine_validity(plan)
    return not int(diagnostics) & int(rtx.EngineInvalidityDiagnostics.MALFORMED_ENGINE)


def test_static_build(rtx):
    eng = build(tiny())
    assert isinstance(eng, TrtEngine) and isinstance(eng.plan, bytes) and len(eng.plan) > 1000
    assert plan_is_wellformed(rtx, eng.plan)
    assert not plan_is_wellformed(rtx, b"\0" * 4096)
    assert eng.inputs == [TensorSpec("data", (2, 3, 8, 8), "float32")]
    assert eng.outputs == [TensorSpec("fc_output", (2, 5), "float32")]
    assert eng.output_shape_rule == "static" and eng.batch_ranges == [] and not eng.dynamic
    assert eng.output_shapes([(2, 3, 8, 8)]) == [(2, 5)]
    with pytest.raises(ShapeError, match="outside every optimization profile"):
        eng.output_shapes([(3, 3, 8, 8)])
    assert eng.covers(2) and not eng.covers(3)


@pytest.mark.parametrize("bound, top", [(2, 8), (1, 4)])
def test_dynamic_batch_build(rtx, bound, top):
    shapes = {"data": (bound, 3, 8, 8)}
    s = mx.sym.FullyConnected(conv_relu(mx.sym.var("data"), "a"), num_hidden=5, name="fc")
    (ex,) = export_all(s, shapes, "batch")
    assert [d.dim_param for d in (ex.model.graph.input[0].type.tensor_type.shape.dim[0], ex.model.graph.output[0].type.tensor_type.shape.dim[0])] == ["batch", "batch"]
    with pytest.raises(EngineBuildError, match="'batch'"):
        build(ex)  # symbolic batch, no profile
    eng = build(ex, profiles=[{"data": [(1, 3, 8, 8), (bound, 3, 8, 8), (top, 3, 8, 8)]}])
    assert plan_is_wellformed(rtx, eng.plan)
    assert eng.dynamic and eng.output_shape_rule == "batch" and eng.batch_ranges == [(1, bound, top)]
    assert eng.inputs[0].shape == (bound, 3, 8, 8) and eng.outputs[0].shape == (bound, 5)
    for b in (1, bound, top):
        assert eng.output_shapes([(b, 3, 8, 8)]) == [(b, 5)]
    with pytest.raises(ShapeError):
        eng.output_shapes([(top + 1, 3, 8, 8)])
    same = build(ex, batch_ranges=[(1, bound, top)])
    assert same.profiles == eng.profiles


def test_several_inputs_and_outputs(rtx):
    x, y = mx.sym.var("data"), mx.sym.var("data2")
    a, b = conv_relu(x, "a"), conv_relu(y, "b")
    s = mx.sym.Group([a + b, mx.sym.Activation(a - b, act_type="tanh", name="t")])
    shapes = {"data": (2, 3, 8, 8), "data2": (2, 3, 8, 8)}
    (ex,) = export_all(s, shapes, "batch")
    eng = build(ex, batch_ranges=[(1, 2, 4), (5, 6, 8)])
    assert [t.name for t in eng.inputs] == ex.input_names and [t.name for t in eng.outputs] == ex.output_names
    assert eng.batch_ranges == [(1, 2, 4), (5, 6, 8)]
    assert eng.output_shapes([(7, 3, 8, 8)] * 2) == [(7, 4, 8, 8)] * 2
    assert eng.select_profile([(7, 3, 8, 8)] * 2) == 1


def test_batch_ranges_on_a_static_export_keep_it_static(rtx):
    eng = build(tiny(), batch_ranges=[(1, 2, 8)])
    assert not eng.dynamic and eng.batch_ranges == [] and len(eng.profiles) == 1


def test_external_weights_are_parsed_from_a_file(rtx, monkeypatch):
    monkeypatch.setenv("MXNET_TENSORRT_EXTERNAL_DATA_BYTES", "1")
    ex = tiny()
    assert ex.external, "the exporter should have kept the weights as external data"
    eng = build(ex)
    assert plan_is_wellformed(rtx, eng.plan)


def test_progress_is_forwarded(rtx):
    seen = []
    build(tiny(), progress=lambda phase, step, total: seen.append((phase, step, total)))
    assert seen, "no progress reported"
    phases = {p for p, _, _ in seen}
    for p in phases:
        steps = [(s, t) for q, s, t in seen if q == p]
        assert steps[0][0] == 0 and steps[-1][0] == steps[-1][1]  # starts at 0, finishes at total
    # A failing callback never breaks the build.
    build(tiny(), progress=lambda *a: 1 / 0)


def test_timing_cache_is_written_and_reloaded(rtx, tmp_path, caplog):
    path = tmp_path / "sub" / "timing.cache"
    build(tiny(), timing_cache_path=str(path))
    first = path.read_bytes()
    assert first
    build(tiny(), timing_cache_path=str(path))  # reads it back (RTX may decline it without a GPU: a warning)
    assert path.read_bytes()
    path.write_bytes(b"garbage" * 100)
    with caplog.at_level(logging.DEBUG, logger="mx_trt.builder.backends.tensorrt"):
        eng = build(tiny(), timing_cache_path=str(path))
    assert eng.plan
    # One line says what happened (INFO: TensorRT-RTX does not use timing caches); TensorRT's own
    # complaints about the file go to DEBUG.
    assert [r.levelno for r in caplog.records if "ignoring it" in r.getMessage()] == [logging.INFO]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and "timing cache" in r.getMessage()]
    assert path.read_bytes() != b"garbage" * 100  # replaced by a fresh one
    assert not [p for p in os.listdir(path.parent) if p.endswith(".tmp")]


def test_timing_cache_file_contents_reach_the_config(tmp_path):
    class Config:
        def __init__(self):
            self.created, self.set = [], None

        def create_timing_cache(self, data):
            self.created.append(bytes(data))
            return "cache"

        def set_timing_cache(self, cache, ignore_mismatch):
            self.set = (cache, ignore_mismatch)
            return True

    class Log:
        def capture(self, quiet=False):
            import contextlib

            return contextlib.nullcontext(LogCapture(quiet))

    path = tmp_path / "t.cache"
    path.write_bytes(b"valid-bytes")
    cfg = Config()
    load_timing_cache(cfg, Log(), str(path), "sg")
    assert cfg.created == [b"valid-bytes"] and cfg.set == ("cache", False)
    cfg = Config()
    load_timing_cache(cfg, Log(), str(tmp_path / "absent.cache"), "sg")
    assert cfg.created == [b""]
    cfg.create_timing_cache = lambda data: None if data else "empty"  # TensorRT refuses the file's contents
    load_timing_cache(cfg, Log(), str(path), "sg")
    assert cfg.set == ("empty", False)


def test_meta_and_load_engine_round_trip(rtx, tmp_path):
    (ex,) = export_all(mx.sym.FullyConnected(conv_relu(mx.sym.var("data"), "a"), num_hidden=5, name="fc"), SHAPES, "batch")
    eng = build(ex, batch_ranges=[(1, 2, 8)], rtx_specialization="eager")
    meta = json.loads(json.dumps(eng.meta()))
    again = load_engine(eng.plan, meta, BuildOptions(name="x"))
    assert isinstance(again, TrtEngine) and again.backend is TensorRTRTXBackend
    for attr in ("inputs", "outputs", "profiles", "batch_ranges", "output_shape_rule", "plan", "specialization"):
        assert getattr(again, attr) == getattr(eng, attr), attr
    assert again.output_shapes([(5, 3, 8, 8)]) == [(5, 5)]
    stored = eng.save(str(tmp_path))
    assert (tmp_path / stored["plan_file"]).read_bytes() == eng.plan
    loaded = TensorRTRTXBackend().load(stored, str(tmp_path), BuildOptions(extra={"rtx_specialization": "none"}))
    assert loaded.plan == eng.plan and loaded.specialization == "none"
    with pytest.raises(EngineBuildError, match="sha256"):
        load_engine(eng.plan[:-1] + b"x", meta, BuildOptions())
    with pytest.raises(EngineBuildError, match="1.0.0"):
        load_engine(eng.plan, {**meta, "version": "1.0.0"}, BuildOptions())
    with pytest.raises(EngineBuildError, match="not a TensorRT one"):
        load_engine(eng.plan, {**meta, "backend": "onnxruntime"}, BuildOptions())


@pytest.mark.skipif(not no_gpu_here(), reason="this machine has a usable GPU")
def test_running_without_a_device_is_a_clear_error(rtx):
    eng = build(tiny())
    x = Buffer(1, (2, 3, 8, 8), "float32", 0)
    y = Buffer(2, (2, 5), "float32", 0)
    with pytest.raises(BackendUnavailableError, match="needs a CUDA device to run"):
        eng.run([x], [y])
    with pytest.raises(ShapeError, match="float16"):
        eng.run([Buffer(1, (2, 3, 8, 8), "float16", 0)], [y])  # checked before any device work
    with pytest.raises(ShapeError, match="outside every optimization profile"):
        eng.run([Buffer(1, (3, 3, 8, 8), "float32", 0)], [y])


def test_bind_pass_builds_stores_and_reloads_engines(rtx, monkeypatch):
    """The bind pass with this backend, up to the forward (which needs a device): build, reuse, plan cache, reshape."""
    from mx_trt.builder import engines
    from mx_trt.frontends.hook import original_simple_bind
    from mx_trt.pipeline.bind import bind

    monkeypatch.setenv("MXNET_TENSORRT_MAX_BATCH_SIZE", "8")
    s = mx.sym.FullyConnected(conv_relu(mx.sym.var("data"), "a"), num_hidden=5, name="fc")
    args, aux = random_params(s, SHAPES)
    sources = []
    for k in range(3):
        if k == 2:
            engines.clear_pool()  # a new process: the engine comes from the plan cache on disk
        exe, info = bind(BindRequest(s, SHAPES, {**args, **aux}, Settings.from_env(), TensorRTRTXBackend(), ctx=mx.cpu(),
                                      native_bind=original_simple_bind()))
        fused = info.engines[0]
        sources.append(fused.source)
        assert isinstance(fused.engine, TrtEngine) and fused.engine.batch_ranges == [(1, 2, 8)]
        assert exe.reshape(allow_up_sizing=True, data=(6, 3, 8, 8)).outputs[0].shape == (6, 5)
        assert fused.build_count == (1 if k == 0 else 0)
    assert sources == ["built", "memory", "disk"]


def test_int8_flag_only_for_weakly_typed_networks():
    """Strongly typed networks read INT8 from their Q/DQ pairs; weakly typed ones need the INT8 builder flag."""
    import types as pytypes

    from mx_trt.builder.backends.base import BuildOptions
    from mx_trt.builder.backends.tensorrt.builder import _config

    class Config:
        def __init__(self):
            self.flags = []

        def set_flag(self, flag):
            self.flags.append(flag)

    mod = pytypes.SimpleNamespace(BuilderFlag=pytypes.SimpleNamespace(FP16="FP16", INT8="INT8"))
    builder = pytypes.SimpleNamespace(create_builder_config=Config)
    for int8, fp16, strongly, want in ((True, False, False, ["INT8"]), (True, False, True, []), (False, True, False, ["FP16"]),
                                       (False, False, False, [])):
        opts = BuildOptions(fp16=fp16, name="s", extra={"int8": True} if int8 else {})
        assert _config(mod, builder, opts, [], strongly, None, "TensorRT").flags == want, (int8, fp16, strongly)


# --------------------------------------------------------------------------- bf16


def fake_trt(name, strongly_typed, bf16_flag=True, bf16_type=True):
    """A TensorRT module of fakes that builds any ONNX model: records the model its parser got and the config flags."""
    import onnx

    seen = types.SimpleNamespace(models=[], flags=[])
    mod = types.ModuleType(name)
    mod.__version__ = "10.99"

    class ILogger:
        Severity = types.SimpleNamespace(INTERNAL_ERROR=0, ERROR=1, WARNING=2, INFO=3, VERBOSE=4)

        def __init__(self):
            pass

    class Tensor:
        def __init__(self, vi):
            self.name, self.shape = vi.name, tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)

    class Network:
        inputs, outputs = [], []
        num_inputs = property(lambda self: len(self.inputs))
        num_outputs = property(lambda self: len(self.outputs))

        def get_input(self, i):
            return self.inputs[i]

        def get_output(self, i):
            return self.outputs[i]

    class OnnxParser:
        num_errors = 0

        def __init__(self, network, log):
            self.network = network

        def parse(self, data):
            model = onnx.load_from_string(data)
            seen.models.append(model)
            self.network.inputs = [Tensor(v) for v in model.graph.input]
            self.network.outputs = [Tensor(v) for v in model.graph.output]
            return True

    class Config:
        def set_flag(self, flag):
            seen.flags.append(flag)

    class Builder:
        def __init__(self, log):
            pass

        def create_network(self, flags):
            return Network()

        def create_builder_config(self):
            return Config()

        def build_serialized_network(self, network, config):
            return b"fake plan"

    mod.ILogger, mod.OnnxParser, mod.Builder = ILogger, OnnxParser, Builder
    mod.get_plugin_registry = lambda: None
    mod.NetworkDefinitionCreationFlag = types.SimpleNamespace(**({"STRONGLY_TYPED": 0} if strongly_typed else {}))
    mod.BuilderFlag = types.SimpleNamespace(FP16="FP16", INT8="INT8", **({"BF16": "BF16"} if bf16_flag else {}))
    mod.DataType = types.SimpleNamespace(FLOAT="FLOAT", HALF="HALF", **({"BF16": "BF16"} if bf16_type else {}))
    return mod, seen


def fake_backend(mod):
    """TensorRT (not RTX: weakly typed networks allowed) over ``mod``; it cannot run engines here."""
    return type("FakeTrt", (TensorRTBackend,), {"module": classmethod(lambda cls: mod),
                                                 "unavailable_reason": classmethod(lambda cls: "fake")})


def small_export():
    """x -> Conv -> Relu -> Mul(Constant) -> y; x -> Shape -> Cast(to=FLOAT) -> n."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from mx_trt.export.subgraph import ExportedSubgraph

    rng = np.random.RandomState(0)
    inits = [numpy_helper.from_array(rng.randn(4, 3, 3, 3).astype(np.float32), "W"),
             numpy_helper.from_array(rng.randn(4).astype(np.float32), "B")]
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Constant", [], ["k"], name="k", value=numpy_helper.from_array(np.float32([0.5]), "k")),
             helper.make_node("Mul", ["r", "k"], ["y"], name="mul"),
             helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Cast", ["s"], ["n"], name="cast", to=TensorProto.FLOAT)]
    graph = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4]),
                               helper.make_tensor_value_info("n", TensorProto.FLOAT, [4])], initializer=inits)
    return ExportedSubgraph(model=helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
                            input_names=["x"], output_names=["y", "n"], weight_bytes=4 * (108 + 4))


def float_types(model):
    """Element types of the initializers, Casts and Constants of an ONNX model."""
    casts = [a.i for n in model.graph.node if n.op_type == "Cast" for a in n.attribute if a.name == "to"]
    consts = [a.t.data_type for n in model.graph.node if n.op_type == "Constant" for a in n.attribute]
    return {t.data_type for t in model.graph.initializer}, casts, consts


def test_bf16_on_a_weakly_typed_network_is_the_builder_flag():
    from onnx import TensorProto

    mod, seen = fake_trt("fake_trt_bf16_weak", strongly_typed=False)
    ex = small_export()
    eng = fake_backend(mod)().build(ex, BuildOptions(name="sg", bf16=True))
    assert "BF16" in seen.flags and "FP16" not in seen.flags
    # The parser gets the float32 export as it is.
    (parsed,) = seen.models
    assert float_types(parsed) == ({TensorProto.FLOAT}, [TensorProto.FLOAT], [TensorProto.FLOAT])
    assert [n.op_type for n in parsed.graph.node] == [n.op_type for n in ex.model.graph.node]
    assert eng.plan == b"fake plan" and [t.dtype for t in eng.inputs + eng.outputs] == ["float32"] * 3
    seen.flags.clear()
    fake_backend(mod)().build(ex, BuildOptions(name="sg"))
    assert "BF16" not in seen.flags



def test_bf16_on_a_strongly_typed_network_is_a_bfloat16_graph():
    from onnx import TensorProto

    mod, seen = fake_trt("fake_trt_bf16_strong", strongly_typed=True)
    mod.BuilderFlag.STRIP_PLAN, mod.BuilderFlag.REFIT_IDENTICAL = "STRIP_PLAN", "REFIT_IDENTICAL"
    ex = small_export()
    eng = fake_backend(mod)().build(ex, BuildOptions(name="sg", bf16=True))
    assert seen.flags == []  # no precision flag, and no weight-stripped build (its refit would get float32 weights)
    (parsed,) = seen.models
    BF16, F32 = TensorProto.BFLOAT16, TensorProto.FLOAT
    inits, casts, consts = float_types(parsed)
    assert inits == {BF16} and consts == [BF16]
    assert casts == [BF16, BF16, F32, F32]  # x down; the graph's own Cast; y and n up
    assert [(v.name, v.type.tensor_type.elem_type) for v in (*parsed.graph.input, *parsed.graph.output)] == \
        [("x", F32), ("y", F32), ("n", F32)]
    meta = eng.meta()
    assert meta["stripped"] is False and "bf16" in meta["unstripped_reason"]
    assert eng.inputs[0].dtype == "float32" and {t.data_type for t in ex.model.graph.initializer} == {F32}


def test_bf16_needs_a_tensorrt_that_has_it():
    weak, seen = fake_trt("fake_trt_no_bf16_flag", strongly_typed=False, bf16_flag=False)
    with pytest.raises(EngineBuildError, match=r"^sg: this TensorRT has no bf16"):
        fake_backend(weak)().build(small_export(), BuildOptions(name="sg", bf16=True))
    strong, _ = fake_trt("fake_trt_no_bf16_type", strongly_typed=True, bf16_type=False)
    with pytest.raises(EngineBuildError, match=r"^sg: this TensorRT has no bf16"):
        fake_backend(strong)().build(small_export(), BuildOptions(name="sg", bf16=True))
    assert seen.models == []  # refused before parsing
    with pytest.raises(EngineBuildError, match=r"^sg: fp16 and bf16 were both asked for"):
        fake_backend(weak)().build(small_export(), BuildOptions(name="sg", fp16=True, bf16=True))


def test_bf16_build_with_tensorrt_rtx(rtx):
    ex = tiny()
    eng = TensorRTRTXBackend().build(ex, BuildOptions(name=ex.model.graph.name, bf16=True))
    assert plan_is_wellformed(rtx, eng.plan)
    assert eng.inputs == [TensorSpec("data", (2, 3, 8, 8), "float32")]
    assert eng.outputs == [TensorSpec("fc_output", (2, 5), "float32")]
    assert eng.meta()["strongly_typed"] is True and not eng.stripped
    with pytest.raises(EngineBuildError, match="fp16 and bf16"):
        TensorRTRTXBackend().build(ex, BuildOptions(name="x", fp16=True, bf16=True))


def test_precision_reason(monkeypatch):
    mod, _ = fake_trt("tensorrt", strongly_typed=True)
    monkeypatch.setitem(sys.modules, "tensorrt", mod)
    trt = TensorRTBackend()
    assert [trt.precision_reason(p) for p in ("fp32", "fp16", "int8")] == [None] * 3
    monkeypatch.setattr(cuda, "unavailable_reason", lambda: "no CUDA device: (test)")
    assert trt.precision_reason("bf16") is None  # no device to ask: the module decides
    monkeypatch.setattr(cuda, "unavailable_reason", lambda: None)
    monkeypatch.setattr(cuda, "current_device", lambda: 1)
    monkeypatch.setattr(cuda, "compute_capability", lambda i: (7, 5) if i == 1 else (9, 0))
    reason = trt.precision_reason("bf16")
    assert "8.0 (Ampere)" in reason and "device 1 is 7.5" in reason
    monkeypatch.setattr(cuda, "compute_capability", lambda i: (8, 0))
    assert trt.precision_reason("bf16") is None

    def no_answer(i):
        raise cuda.CudaError("cudaDeviceGetAttribute failed", 1)

    monkeypatch.setattr(cuda, "compute_capability", no_answer)
    assert trt.precision_reason("bf16") is None
    del mod.DataType.BF16
    assert "no DataType.BF16" in trt.precision_reason("bf16") and "10.99" in trt.precision_reason("bf16")
    weak, _ = fake_trt("tensorrt", strongly_typed=False, bf16_flag=False)
    monkeypatch.setitem(sys.modules, "tensorrt", weak)
    assert "no BuilderFlag.BF16" in trt.precision_reason("bf16")
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    assert "import tensorrt failed" in trt.precision_reason("bf16")
    assert trt.precision_reason("fp16") is None


def test_precision_reason_of_tensorrt_rtx(rtx, monkeypatch):
    monkeypatch.setattr(cuda, "unavailable_reason", lambda: "no CUDA device: (test)")
    assert hasattr(rtx.DataType, "BF16") and TensorRTRTXBackend().precision_reason("bf16") is None
