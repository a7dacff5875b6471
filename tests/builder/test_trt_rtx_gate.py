"""The TensorRT build gate: every subgraph mx_trt exports parses and builds with TensorRT-RTX.

CI has no GPU, but TensorRT-RTX's builder (NVIDIA's ONNX parser included) runs
without one. For every model the suite accelerates -- the 34 architectures of
``mxnet.gluon.model_zoo.vision`` at batch 1 and the synthetic graphs of
``tests/pipeline/test_bind.py`` -- the gate runs mx_trt's own analysis and export for
each subgraph, exactly as a bind does (batch-dynamic where the export allows
it, with the profile min 1 / opt 1 / max 4; static otherwise), then parses and
builds an engine. The fp16 leg does the same with fp16 graphs. The int8 leg
builds the INT8 graphs (TensorRT's Q/DQ form, tables from ``mx_trt.calibrate``)
of nine vision models at small inputs; TensorRT-RTX 1.7's builder accepted
every pattern they hold (per-channel weight DQ on Conv and Gemm, activation Q/DQ,
the residual add's shortcut, BatchNorm folded), so no rejection is recorded.
Detection post-processing (``box_nms``, ``MultiBoxDetection``, ``Proposal``: ONNX
``Loop`` with a boolean body, ``TopK`` in chunks past k = 3840, ``ScatterElements``,
``CastLike``) parses and builds too, fp32 and fp16, in the GluonCV detectors here and
in ``tests/export/converters/test_detection.py``: no rejection recorded either.

A failure names the model, the subgraph, the ONNX node with its op, and the
MXNet node (with its op and attributes) that the parser or builder rejected.

Weight-stripped plans: every build first tries ``STRIP_PLAN + REFIT_IDENTICAL``.
TensorRT-RTX 1.7 builds those only on a CUDA device (its compiler needs CUDA
for refittable weights), so without one the gate checks that the builder falls
back to plans with their weights, once per process, and says why; the size
test then skips. The refit itself (deserialize, ``Refitter``, weights by name
from host memory, missing weights, failures) runs against a fake ``Refitter``
and a fake deserialized engine, which is all that can run without a GPU.

TensorRT-RTX is part of the suite (``make test`` installs it): the gate fails,
not skips, when it is missing. Both legs together take about 4 minutes on a
2-core machine; the VGG models take 8-10 s each, mostly creating their random
weights and exporting them (RTX builds are 0.1-3 s: kernels are compiled on the GPU later).
"""
from __future__ import annotations

import contextlib
import ctypes
import logging
import re
import time
import types
from typing import Any, Dict, List, Mapping, Optional, Tuple

import mxnet as mx
import numpy as np
import pytest

from mx_trt.builder.backends.base import BuildOptions
from mx_trt.builder.backends.tensorrt import TensorRTRTXBackend, TrtEngine, cuda, load_engine
from mx_trt.builder.backends.tensorrt import builder as trt_builder
from mx_trt.builder.backends.tensorrt import engine as trt_engine
from mx_trt.builder.backends.tensorrt.logs import LogCapture
from mx_trt.builder.backends.tensorrt.refit import refit_engine, weight_stats
from mx_trt.pipeline.plan import analyze
from mx_trt.pipeline.request import BindRequest
from mx_trt.errors import EngineBuildError, EngineRunError, MxTrtError
from mx_trt.export.calibration import CalibrationTable
from mx_trt.export.dynamic import Int8Export, SubgraphExporter
from mx_trt.settings import Settings
from mx_trt.passes.fuse import boundary
from tests.harness import userops
from tests.harness.mxcheck import random_params
from tests.harness.bindcheck import conv_relu
from tests.models.thirdparty import MODELS as THIRDPARTY
from tests.models.test_model_zoo import ZOO, zoo_model

logger = logging.getLogger(__name__)

#: The dynamic-batch profile of batch-dynamic exports: (min, opt, max).
BATCH_RANGE = (1, 1, 4)


@pytest.fixture(scope="module")
def backend() -> TensorRTRTXBackend:
    reason = TensorRTRTXBackend.build_unavailable_reason()
    if reason is not None:
        pytest.fail(f"the TensorRT build gate needs TensorRT-RTX, which is missing: {reason}. "
                    "`make test` installs it (USE_TENSORRT_RTX=1 in config.mk).")
    return TensorRTRTXBackend()


_MX_NODE = re.compile(r"MXNet node '([^']+)'")


def _explain(message: str, graph: Any) -> str:
    """Append the op and attributes of every MXNet node a message names."""
    by_name = {n.name: n for n in graph.nodes}
    lines = []
    for name in dict.fromkeys(_MX_NODE.findall(message)):
        n = by_name.get(name)
        if n is not None:
            attrs = ", ".join(f"{k}={v}" for k, v in sorted(n.attrs.items()))
            lines.append(f"MXNet node {name!r} is {n.op}({attrs})")
    return message + ("\n    " + "\n    ".join(lines) if lines else "")


def gate(model: str, sym: Any, shapes: Mapping[str, Tuple[int, ...]], params: Mapping[str, Any],
         backend: TensorRTRTXBackend, fp16: bool, int8: Optional[CalibrationTable] = None) -> Dict[str, Any]:
    """Export and build every subgraph of one model; fail naming what TensorRT-RTX rejected.

    With ``int8`` (a calibration table of the model), the subgraphs are exported
    with INT8 Q/DQ in TensorRT's form, as an int8 bind on TensorRT would.

    Returns:
        Counts and times, for the log (``qdq``: QuantizeLinear/DequantizeLinear nodes built).
    """
    t0 = time.perf_counter()
    plan = analyze(BindRequest(sym, shapes, params, Settings.from_env(), backend))
    graph = plan.graph
    absorbed = plan.absorbed_ids()
    weights = {n.name: params[n.name].asnumpy() for n in graph.nodes if n.is_variable and n.id in absorbed}
    q = Int8Export(int8.ranges(graph), backend.int8_style) if int8 is not None else None
    exporter = SubgraphExporter(sym, shapes, params, graph, weights, fp16, [BATCH_RANGE], q)
    failures: List[str] = []
    stats = {"subgraphs": 0, "dynamic": 0, "static": 0, "stripped": 0, "build_s": 0.0, "qdq": 0}
    precision = "int8" if int8 is not None else "fp16" if fp16 else "fp32"
    for sg in plan.partition.subgraphs:
        ins, outs = boundary(graph, sg.nodes, absorbed)
        ops = ", ".join(sorted({graph.nodes[i].op for i in sg.nodes}))
        where = f"{model} ({precision}): subgraph {sg.name} ({len(sg.nodes)} ops: {ops})"
        try:
            exported = exporter.export(sg.name, sg.nodes, ins, outs)
        except MxTrtError as exc:
            failures.append(f"{where}: export failed: {_explain(str(exc), graph)}")
            continue
        dynamic = bool(getattr(exported, "batch_dim", None))
        stats["qdq"] += sum(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in exported.model.graph.node)
        t1 = time.perf_counter()
        try:
            engine = backend.build(exported, BuildOptions(name=sg.name, fp16=fp16,
                                                          extra={"batch_ranges": [BATCH_RANGE]} if dynamic else {}))
        except EngineBuildError as exc:
            failures.append(f"{where}: {_explain(str(exc), graph)}")
            continue
        stats["build_s"] += time.perf_counter() - t1
        stats["subgraphs"] += 1
        stats["dynamic" if dynamic else "static"] += 1
        stats["stripped"] += int(engine.stripped)
        assert engine.plan, f"{where}: empty plan"
        meta = engine.meta()
        assert meta["stripped"] or meta["unstripped_reason"], f"{where}: a plan with its weights and no reason"
        if dynamic:
            assert engine.batch_ranges == [BATCH_RANGE], f"{where}: profile {engine.batch_ranges}"
            assert engine.output_shapes([(4,) + t.shape[1:] for t in engine.inputs])
        del engine
    assert not failures, "TensorRT-RTX rejected exported subgraphs:\n" + "\n".join(failures)
    stats["total_s"] = time.perf_counter() - t0
    logger.info("%s: %s", model, stats)
    return stats


@pytest.mark.slow
@pytest.mark.parametrize("fp16", [False, True], ids=["fp32", "fp16"])
@pytest.mark.parametrize("name", ZOO)
def test_zoo_model_builds(name, fp16, backend):
    sym, args, aux, size = zoo_model(name)
    stats = gate(name, sym, {"data": (1, 3, size, size)}, {**args, **aux}, backend, fp16)
    assert stats["subgraphs"] >= 1


#: Vision models whose INT8 subgraphs the gate builds, at the suite's input sizes (``zoo_size``; the Q/DQ
#: patterns: plain and grouped/depthwise convolutions, residual adds, concatenations, the classifier).
INT8_ZOO = ("resnet18_v1", "resnet18_v2", "mobilenetv2_0.25", "squeezenet1.1", "mobilenet0.25", "resnet50_v2",
            "densenet121", "inceptionv3", "alexnet")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(INT8_ZOO))
def test_zoo_model_builds_int8(name, backend):
    """Every int8 subgraph parses and builds; the Q/DQ pairs are in the graphs built."""
    import mx_trt

    sym, args, aux, size = zoo_model(name)
    rng = np.random.RandomState(0)
    batches = [rng.uniform(-1, 1, (2, 3, size, size)).astype("float32")]
    table = mx_trt.calibrate(sym, (args, aux), batches, method="minmax", progress=False, backend="tensorrt_rtx")
    assert table.tensors, f"{name}: nothing calibrated"
    stats = gate(name, sym, {"data": (1, 3, size, size)}, {**args, **aux}, backend, False, int8=table)
    assert stats["subgraphs"] >= 1 and stats["qdq"] > 0, stats


# GluonCV and GluonNLP models (tests/models/thirdparty.py), with the shipped engine rule.


@pytest.mark.slow
@pytest.mark.parametrize("fp16", [False, True], ids=["fp32", "fp16"])
@pytest.mark.parametrize("name", sorted(THIRDPARTY))
def test_thirdparty_model_builds(name, fp16, backend, default_engine_rule):
    model = THIRDPARTY[name]()
    stats = gate(name, model.sym, model.shapes, model.params, backend, fp16)
    assert stats["subgraphs"] >= 1


# The synthetic graphs of tests/pipeline/test_bind.py (a user's custom op splits some of them).


def _middle():
    return conv_relu(userops.square(conv_relu(mx.sym.var("data"), "a"), "sq"), "b"), {"data": (2, 3, 8, 8)}


def _edges():
    return userops.square(conv_relu(userops.square(mx.sym.var("data"), "sq_in"), "a"), "sq_out"), {"data": (2, 3, 8, 8)}


def _fan_out():
    a = conv_relu(mx.sym.var("data"), "a")
    s = mx.sym.Group([userops.square(a, "sq1"), userops.square(a, "sq2"), a, conv_relu(a, "b")])
    return s, {"data": (2, 3, 8, 8)}


def _two_in_two_out():
    a, b = conv_relu(mx.sym.var("data"), "a"), conv_relu(mx.sym.var("data2"), "b")
    return mx.sym.Group([a + b, userops.square(a - b, "sq")]), {"data": (2, 3, 8, 8), "data2": (2, 3, 8, 8)}


def _conv_fc():
    return mx.sym.FullyConnected(conv_relu(mx.sym.var("data"), "a"), num_hidden=5, name="fc"), {"data": (2, 3, 8, 8)}


def _bn_fc_tanh():
    bn = mx.sym.BatchNorm(userops.square(conv_relu(mx.sym.var("data"), "a"), "sq"), name="bn")
    s = mx.sym.Activation(mx.sym.FullyConnected(bn, num_hidden=3, name="fc"), act_type="tanh", name="fc_tanh")
    return s, {"data": (2, 3, 8, 8)}


def _detection():
    feat = conv_relu(mx.sym.var("data"), "a")
    pooled = mx.sym.ROIPooling(feat, mx.sym.var("rois"), pooled_size=(2, 2), spatial_scale=1.0, name="roipool")
    head = mx.sym.FullyConnected(pooled, num_hidden=6, name="head")
    nms = mx.sym.contrib.box_nms(mx.sym.reshape(head, shape=(1, -1, 6), name="rs"), overlap_thresh=0.5, name="nms")
    return nms, {"data": (1, 3, 8, 8), "rois": (3, 5)}


SYNTHETIC = {
    "unsupported_in_the_middle": _middle,
    "unsupported_at_inputs_and_outputs": _edges,
    "output_used_by_native_nodes_and_as_graph_output": _fan_out,
    "several_inputs_and_outputs": _two_in_two_out,
    "conv_then_fully_connected": _conv_fc,
    "batchnorm_fc_tanh": _bn_fc_tanh,
    "detection_style": _detection,
}


@pytest.mark.parametrize("fp16", [False, True], ids=["fp32", "fp16"])
@pytest.mark.parametrize("name", sorted(SYNTHETIC))
def test_synthetic_graph_builds(name, fp16, backend):
    sym, shapes = SYNTHETIC[name]()
    args, aux = random_params(sym, shapes)
    stats = gate(name, sym, shapes, {**args, **aux}, backend, fp16)
    assert stats["subgraphs"] >= 1


def test_a_rejected_subgraph_names_model_subgraph_op_and_mxnet_node(backend, monkeypatch):
    """The gate's own failure report, on a subgraph made unparsable on purpose."""
    real = backend.build

    def sabotage(exported, options):
        for n in exported.model.graph.node:
            if n.op_type == "Conv":
                n.op_type = "NoSuchOnnxOp"
                break
        return real(exported, options)

    monkeypatch.setattr(backend, "build", sabotage)
    sym, shapes = _conv_fc()
    args, aux = random_params(sym, shapes)
    with pytest.raises(AssertionError) as info:
        gate("conv_then_fully_connected", sym, shapes, {**args, **aux}, backend, False)
    msg = str(info.value)
    assert "conv_then_fully_connected (fp32): subgraph trt_subgraph_0" in msg
    assert "(NoSuchOnnxOp) from MXNet node 'a_conv'" in msg
    assert "MXNet node 'a_conv' is Convolution(" in msg and "kernel=" in msg


# --------------------------------------------------------------------------- weight-stripped plans


def export_one(sym: Any, shapes: Mapping[str, Tuple[int, ...]], fp16: bool = False) -> Any:
    """The one subgraph of ``sym``, exported as a bind does (static), weights from seeded random values."""
    args, aux = random_params(sym, shapes)
    params = {**args, **aux}
    plan = analyze(BindRequest(sym, shapes, params, Settings.from_env(), TensorRTRTXBackend()))
    absorbed = plan.absorbed_ids()
    weights = {n.name: params[n.name].asnumpy() for n in plan.graph.nodes if n.is_variable and n.id in absorbed}
    (sg,) = plan.partition.subgraphs
    ins, outs = boundary(plan.graph, sg.nodes, absorbed)
    return SubgraphExporter(sym, shapes, params, plan.graph, weights, fp16, []).export(sg.name, sg.nodes, ins, outs)


def conv_net() -> Any:
    """Two 64-channel convolutions and a dense layer: about 3.4 MB of weights."""
    c = conv_relu(conv_relu(mx.sym.var("data"), "a", 64), "b", 64)
    return export_one(mx.sym.FullyConnected(c, num_hidden=50, name="fc"), {"data": (2, 3, 16, 16)})


def test_stripped_plans_are_smaller_by_the_weights(backend):
    ex = conv_net()
    full = backend.build(ex, BuildOptions(name="full", extra={"strip_weights": False}))
    assert not full.stripped and full.meta()["unstripped_reason"] == "BuildOptions.extra['strip_weights'] is False"
    assert full.meta()["onnx_weight_bytes"] == ex.weight_bytes > 3_000_000
    stripped = backend.build(ex, BuildOptions(name="stripped"))
    meta = stripped.meta()
    if not stripped.stripped:
        # TensorRT-RTX 1.7.1 without a GPU: its compiler needs CUDA for refittable weights.
        assert "only on a CUDA device" in meta["unstripped_reason"] and cuda.unavailable_reason() is not None
        pytest.skip(f"no weight-stripped build here: {meta['unstripped_reason']}")
    saved = len(full.plan) - len(stripped.plan)
    logger.info("conv net: %d bytes with weights, %d stripped (%d weight bytes)", len(full.plan), len(stripped.plan),
                ex.weight_bytes)
    assert saved >= 0.8 * ex.weight_bytes, (len(full.plan), len(stripped.plan), ex.weight_bytes)
    assert meta["stripped"] and meta["plan_bytes"] == len(stripped.plan)


def test_without_a_device_plans_keep_their_weights_and_the_stripped_build_is_tried_once(backend, monkeypatch, caplog):
    if cuda.unavailable_reason() is None:
        pytest.skip("this machine has a CUDA device")
    monkeypatch.setattr(trt_builder, "_strip_needs_device", {})
    tries = []
    real = trt_builder.set_strip_flags
    monkeypatch.setattr(trt_builder, "set_strip_flags", lambda mod, config, on: tries.append(on) or real(mod, config, on))
    ex = export_one(mx.sym.FullyConnected(conv_relu(mx.sym.var("data"), "a"), num_hidden=5, name="fc"), {"data": (2, 3, 8, 8)})
    with caplog.at_level(logging.DEBUG, logger="mx_trt.builder.backends.tensorrt"):
        first = backend.build(ex, BuildOptions(name="first"))
        second = backend.build(ex, BuildOptions(name="second"))
    if first.stripped:
        pytest.skip("this TensorRT-RTX builds weight-stripped plans without a device")
    assert not second.stripped
    assert tries == [True, False]  # tried once; the second build went straight to a plan with its weights
    for eng in (first, second):
        assert "builds weight-stripped plans only on a CUDA device" in eng.meta()["unstripped_reason"]
    said = [r for r in caplog.records if "only on a CUDA device" in r.getMessage() and r.levelno >= logging.INFO]
    assert len(said) == 1 and said[0].levelno == logging.INFO  # expected here: one line, not a warning
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and "mx_trt" in r.name]


# --------------------------------------------------------------------------- the refit against fakes


class FakeCudaEngine:
    """A deserialized engine as the refit sees it: its refittable weights, which are stripped, and its stats."""

    def __init__(self, names, stripped=None, prototypes=None, reject=(), refit_ok=True):
        self.names = list(names)
        self.stripped = set(self.names if stripped is None else stripped)
        self.prototypes = dict(prototypes or {})
        self.reject = set(reject)
        self.refit_ok = refit_ok
        self.refitters: List["FakeRefitter"] = []

    def get_engine_stat(self, stat):
        return {"STRIPPED_WEIGHTS_SIZE": 1000, "TOTAL_WEIGHTS_SIZE": 1200}[stat.name]


class FakeRefitter:
    """What mx_trt uses of ``trt.Refitter``; records what it was given and checks it at refit time."""

    def __init__(self, engine, log):
        self.engine = engine
        self.given: Dict[str, Tuple[Any, int, int]] = {}  # name -> (dtype, pointer, count)
        self.expect: Dict[str, bytes] = {}
        self.refits = 0
        engine.refitters.append(self)

    def get_all_weights(self):
        return list(self.engine.names)

    def get_weights_prototype(self, name):
        return self.engine.prototypes.get(name, types.SimpleNamespace(size=-1, dtype=None))

    def set_named_weights(self, name, weights):
        if name in self.engine.reject:
            return False
        view = weights.numpy()
        self.given[name] = (weights.dtype, int(view.ctypes.data), int(weights.size))
        self.expect[name] = view.tobytes()
        return True

    def get_missing_weights(self):
        return sorted(self.engine.stripped - set(self.given))

    def refit_cuda_engine(self):
        # The host memory must still hold the weights while TensorRT copies them.
        for name, (_, ptr, _) in self.given.items():
            assert ctypes.string_at(ptr, len(self.expect[name])) == self.expect[name], name
        self.refits += 1
        return self.engine.refit_ok


class QuietLog:
    """The part of a TensorRT logger the refit uses."""

    def capture(self, quiet=False):
        return contextlib.nullcontext(LogCapture(quiet))


def fake_mod(rtx):
    """The TensorRT-RTX module's types with a fake ``Refitter`` (real ``Weights``: they wrap a pointer, no device)."""
    return types.SimpleNamespace(Refitter=FakeRefitter, Weights=rtx.Weights, DataType=rtx.DataType,
                                 EngineStat=rtx.EngineStat)


@pytest.fixture
def rtx(backend):
    return backend.module()


def test_refit_sets_each_weight_by_name_from_the_callers_memory(rtx):
    caller = np.arange(64, dtype=np.float32)  # the caller's buffer: the weights are views into it
    weights = {"w": caller[:48].reshape(4, 12), "b": caller[48:52], "h": np.ones(3, np.float16)}
    engine = FakeCudaEngine(["w", "b", "h", "kept_in_plan"], stripped=["w", "b", "h"],
                            prototypes={"w": types.SimpleNamespace(size=48, dtype=rtx.DataType.FLOAT)})
    names = refit_engine(fake_mod(rtx), engine, weights, QuietLog(), "sg", "TensorRT-RTX")
    (r,) = engine.refitters
    assert names == ["w", "b", "h"] and r.refits == 1
    assert r.given["w"] == (rtx.DataType.FLOAT, caller.ctypes.data, 48)  # no copy: the caller's own address
    assert r.given["b"] == (rtx.DataType.FLOAT, caller.ctypes.data + 48 * 4, 4)
    assert r.given["h"] == (rtx.DataType.HALF, weights["h"].ctypes.data, 3)
    assert "kept_in_plan" not in r.given  # refittable but not stripped, and not an initializer: left alone
    assert weight_stats(fake_mod(rtx), engine) == {"stripped_weights_bytes": 1000, "total_weights_bytes": 1200}


def test_refit_copies_only_a_non_contiguous_array_and_keeps_it_until_the_refit(rtx):
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    strided = base[:, ::2]
    engine = FakeCudaEngine(["w"])
    refit_engine(fake_mod(rtx), engine, {"w": strided}, QuietLog(), "sg", "TensorRT-RTX")
    dtype, ptr, count = engine.refitters[0].given["w"]
    assert count == 12 and ptr != base.ctypes.data
    assert engine.refitters[0].expect["w"] == np.ascontiguousarray(strided).tobytes()


@pytest.mark.parametrize("case, match", [
    ("missing", r"needs weights that are not among the 1 given initializers: \(unnamed\), 'b'$"),
    ("rejected", r"rejected weights 'w' \(float32, 6 values\)"),
    ("refit_fails", "could not refit the stripped plan"),
    ("count", r"expects 5 values for weights 'w', the given array has 6 \(2, 3\)"),
    ("dtype", "expects weights 'w' as HALF, the given array is float32"),
    ("float64", "weights 'w' are float64, which TensorRT-RTX cannot refit"),
])
def test_refit_failures_are_typed_and_name_the_weights(rtx, case, match):
    w = np.zeros((2, 3), np.float64 if case == "float64" else np.float32)
    engine = {
        "missing": FakeCudaEngine(["w", "b", ""]),
        "rejected": FakeCudaEngine(["w"], reject=["w"]),
        "refit_fails": FakeCudaEngine(["w"], refit_ok=False),
        "count": FakeCudaEngine(["w"], prototypes={"w": types.SimpleNamespace(size=5, dtype=rtx.DataType.FLOAT)}),
        "dtype": FakeCudaEngine(["w"], prototypes={"w": types.SimpleNamespace(size=6, dtype=rtx.DataType.HALF)}),
        "float64": FakeCudaEngine(["w"]),
    }[case]
    with pytest.raises(EngineBuildError, match=match):
        refit_engine(fake_mod(rtx), engine, {"w": w}, QuietLog(), "sg", "TensorRT-RTX")
    if case != "refit_fails":
        assert all(r.refits == 0 for r in engine.refitters)  # never refitted with weights missing or refused


def stripped_copy(eng: TrtEngine) -> Tuple[bytes, Dict[str, Any]]:
    """A plan and description marked weight-stripped (what a build on a device stores)."""
    return eng.plan, {**eng.meta(), "stripped": True}


@pytest.fixture
def tiny_engine(backend):
    ex = export_one(mx.sym.FullyConnected(conv_relu(mx.sym.var("data"), "a"), num_hidden=5, name="fc"), {"data": (2, 3, 8, 8)})
    return ex, backend.build(ex, BuildOptions(name="tiny", extra={"strip_weights": False}))


def pretend_a_device(monkeypatch, rtx, cuda_engine):
    """A runnable device for the refit path: deserialization gives ``cuda_engine``, the Refitter is fake."""
    monkeypatch.setattr(cuda, "unavailable_reason", lambda: None)
    monkeypatch.setattr(cuda, "set_device", lambda i: None)
    monkeypatch.setattr(cuda, "current_device", lambda: 0)
    monkeypatch.setattr(TensorRTRTXBackend, "unavailable_reason", classmethod(lambda cls: None))
    monkeypatch.setattr(trt_engine, "deserialize_plan", lambda mod, label, plan, device, name: (object(), cuda_engine))
    monkeypatch.setattr(trt_engine, "check_io", lambda *a: None)
    monkeypatch.setattr(rtx, "Refitter", FakeRefitter)


def test_loading_a_stripped_plan_needs_the_weights(tiny_engine):
    ex, eng = tiny_engine
    plan, meta = stripped_copy(eng)
    with pytest.raises(EngineBuildError, match="stripped plan needs the weights"):
        load_engine(plan, meta, BuildOptions())
    with pytest.raises(EngineBuildError, match="must be a callable"):
        load_engine(plan, meta, BuildOptions(extra={"weights": {"w": 1}}))
    assert not load_engine(eng.plan, eng.meta(), BuildOptions()).stripped  # a plan with its weights needs none


def test_a_stripped_plan_loaded_without_a_device_refits_at_first_use(tiny_engine, rtx, monkeypatch):
    ex, eng = tiny_engine
    plan, meta = stripped_copy(eng)
    calls = []
    arrays = {t.name: np.full(tuple(t.dims), 0.5, np.float32) for t in ex.model.graph.initializer}
    loaded = load_engine(plan, meta, BuildOptions(extra={"weights": lambda: calls.append(1) or arrays}))
    assert loaded.stripped and calls == []  # nothing to refit where nothing can run
    cuda_engine = FakeCudaEngine(sorted(arrays))
    pretend_a_device(monkeypatch, rtx, cuda_engine)
    assert loaded._deserialized() is cuda_engine and calls == [1]
    (r,) = cuda_engine.refitters
    assert {n: p for n, (_, p, _) in r.given.items()} == {n: a.ctypes.data for n, a in arrays.items()}
    assert loaded._weights is None  # the caller's arrays are not held once they are on the device
    assert loaded.meta()["refit_weights"] == sorted(arrays) and loaded.meta()["stripped_weights_bytes"] == 1000
    # With no weights source the first use is a run error, not a crash.
    bare = TrtEngine(TensorRTRTXBackend, plan, meta, BuildOptions())
    with pytest.raises(EngineRunError, match="needs the weights to refit"):
        bare._deserialized()


def test_a_stripped_plan_is_refitted_at_load_where_a_device_can_run_it(tiny_engine, rtx, monkeypatch):
    ex, eng = tiny_engine
    plan, meta = stripped_copy(eng)
    names = [t.name for t in ex.model.graph.initializer]
    arrays = {n: np.zeros(3, np.float32) for n in names}
    pretend_a_device(monkeypatch, rtx, FakeCudaEngine(names))
    loaded = load_engine(plan, meta, BuildOptions(extra={"weights": lambda: arrays}))
    assert loaded._cuda_engine is not None and loaded.refitted == names
    # A weight the engine needs that the caller does not have: the load fails (typed), so the plan is rebuilt.
    pretend_a_device(monkeypatch, rtx, FakeCudaEngine(names + ["fc_weight_transposed"]))
    with pytest.raises(EngineBuildError, match="'fc_weight_transposed'"):
        load_engine(plan, meta, BuildOptions(extra={"weights": lambda: arrays}))
    # A failing weights source is the same: a typed error at load.
    with pytest.raises(EngineBuildError, match="weights source of the stripped plan failed: KeyError"):
        load_engine(plan, meta, BuildOptions(extra={"weights": lambda: {}["nope"]}))

    # So is a Refitter that raises (an API this TensorRT spells otherwise).
    class Raising(FakeRefitter):
        def set_named_weights(self, name, weights):
            raise TypeError("incompatible function arguments")

    monkeypatch.setattr(rtx, "Refitter", Raising)
    with pytest.raises(EngineBuildError, match="could not refit the stripped plan: TypeError"):
        load_engine(plan, meta, BuildOptions(extra={"weights": lambda: arrays}))


def pretend_stripped_builds(monkeypatch):
    """The flags are recorded but not set, so the build here succeeds; the builder takes its plan as stripped."""
    tries = []
    monkeypatch.setattr(trt_builder, "set_strip_flags", lambda mod, config, on: tries.append(on))
    return tries


def test_a_fresh_stripped_plan_is_refitted_from_the_exported_initializers(backend, rtx, monkeypatch):
    ex = conv_net()
    names = [t.name for t in ex.model.graph.initializer]
    cuda_engine = FakeCudaEngine(names)
    pretend_a_device(monkeypatch, rtx, cuda_engine)
    tries = pretend_stripped_builds(monkeypatch)
    eng = backend.build(ex, BuildOptions(name="conv"))
    assert tries == [True] and eng.stripped and eng._cuda_engine is cuda_engine
    meta = eng.meta()
    assert meta["stripped"] and meta["refit_weights"] == sorted(names) and meta["total_weights_bytes"] == 1200
    (r,) = cuda_engine.refitters
    for n, arr in ex.external.items():  # the exported arrays themselves, no copy
        assert r.given[n][1] == arr.ctypes.data, n
    # The caller's weights source wins over the exported model when given.
    calls = []
    arrays = {n: np.zeros(1, np.float32) for n in names}
    pretend_a_device(monkeypatch, rtx, FakeCudaEngine(names))
    eng = backend.build(ex, BuildOptions(name="conv", extra={"weights": lambda: calls.append(1) or arrays}))
    assert eng.stripped and calls == [1]


def test_a_weight_tensorrt_names_otherwise_makes_the_plan_keep_its_weights(backend, rtx, monkeypatch, caplog):
    ex = conv_net()
    names = [t.name for t in ex.model.graph.initializer]
    pretend_a_device(monkeypatch, rtx, FakeCudaEngine(names + ["(Unnamed Layer* 4) [Constant]_weights"]))
    tries = pretend_stripped_builds(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="mx_trt.builder.backends.tensorrt"):
        eng = backend.build(ex, BuildOptions(name="conv"))
    assert tries == [True, False] and not eng.stripped and eng._cuda_engine is None
    reason = eng.meta()["unstripped_reason"]
    assert reason.startswith("refit from the initializers failed") and "(Unnamed Layer* 4) [Constant]_weights" in reason
    assert any("cannot be refitted from the subgraph's initializers" in r.getMessage() for r in caplog.records)


def test_a_failed_stripped_build_on_a_device_falls_back_with_a_warning(backend, rtx, monkeypatch, caplog):
    monkeypatch.setattr(trt_builder, "_strip_needs_device", {})
    pretend_a_device(monkeypatch, rtx, FakeCudaEngine([]))
    real = trt_builder._serialize

    def serialize(*args, quiet=False):
        if quiet:
            raise EngineBuildError("sg: TensorRT-RTX could not build the engine:\n  [E] refit is not supported here")
        return real(*args)

    monkeypatch.setattr(trt_builder, "_serialize", serialize)
    ex = conv_net()
    with caplog.at_level(logging.WARNING, logger="mx_trt.builder.backends.tensorrt"):
        eng = backend.build(ex, BuildOptions(name="conv"))
        again = backend.build(ex, BuildOptions(name="conv"))
    assert not eng.stripped and not again.stripped
    assert eng.meta()["unstripped_reason"] == "the weight-stripped build failed: [E] refit is not supported here"
    assert len([r for r in caplog.records if "weight-stripped build failed" in r.getMessage()]) == 2  # not memoized with a device
    assert trt_builder._strip_needs_device == {}


def test_the_weights_option_must_be_callable(backend):
    ex = export_one(mx.sym.FullyConnected(conv_relu(mx.sym.var("data"), "a"), num_hidden=5, name="fc"), {"data": (2, 3, 8, 8)})
    with pytest.raises(EngineBuildError, match="must be a callable"):
        backend.build(ex, BuildOptions(extra={"weights": {"a": np.zeros(1)}}))
