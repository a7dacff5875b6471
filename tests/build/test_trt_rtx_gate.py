"""The TensorRT build gate: every subgraph mx_trt exports parses and builds with TensorRT-RTX.

CI has no GPU, but TensorRT-RTX's builder (NVIDIA's ONNX parser included) runs
without one. For every model the suite accelerates -- the 34 architectures of
``mxnet.gluon.model_zoo.vision`` at batch 1 and the synthetic graphs of
``tests/pipeline/test_bind.py`` -- the gate runs mx_trt's own analysis and export for
each subgraph, exactly as a bind does (batch-dynamic where the export allows
it, with the profile min 1 / opt 1 / max 4; static otherwise), then parses and
builds an engine. The fp16 leg does the same with fp16 graphs.

A failure names the model, the subgraph, the ONNX node with its op, and the
MXNet node (with its op and attributes) that the parser or builder rejected.

TensorRT-RTX is part of the suite (``make test`` installs it): the gate fails,
not skips, when it is missing. Both legs together take about 4 minutes on a
2-core machine; the VGG models take 8-10 s each, mostly creating their random
weights and exporting them (RTX builds are 0.1-3 s: kernels are compiled on the GPU later).
"""
from __future__ import annotations

import logging
import re
import time
from typing import Any, Dict, List, Mapping, Tuple

import mxnet as mx
import pytest

from mx_trt.build.backends.base import BuildOptions
from mx_trt.build.backends.tensorrt import TensorRTRTXBackend
from mx_trt.pipeline.plan import analyze
from mx_trt.pipeline.request import BindRequest
from mx_trt.errors import EngineBuildError, MxTrtError
from mx_trt.export.dynamic import SubgraphExporter
from mx_trt.settings import Settings
from mx_trt.passes.fuse import boundary
from tests import userops
from tests.mxcheck import random_params
from tests.bindcheck import conv_relu
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
         backend: TensorRTRTXBackend, fp16: bool) -> Dict[str, Any]:
    """Export and build every subgraph of one model; fail naming what TensorRT-RTX rejected.

    Returns:
        Counts and times, for the log.
    """
    t0 = time.perf_counter()
    plan = analyze(BindRequest(sym, shapes, params, Settings.from_env(), backend))
    graph = plan.graph
    absorbed = plan.absorbed_ids()
    weights = {n.name: params[n.name].asnumpy() for n in graph.nodes if n.is_variable and n.id in absorbed}
    exporter = SubgraphExporter(sym, shapes, params, graph, weights, fp16, [BATCH_RANGE])
    failures: List[str] = []
    stats = {"subgraphs": 0, "dynamic": 0, "static": 0, "build_s": 0.0}
    for sg in plan.partition.subgraphs:
        ins, outs = boundary(graph, sg.nodes, absorbed)
        ops = ", ".join(sorted({graph.nodes[i].op for i in sg.nodes}))
        where = f"{model} ({'fp16' if fp16 else 'fp32'}): subgraph {sg.name} ({len(sg.nodes)} ops: {ops})"
        try:
            exported = exporter.export(sg.name, sg.nodes, ins, outs)
        except MxTrtError as exc:
            failures.append(f"{where}: export failed: {_explain(str(exc), graph)}")
            continue
        dynamic = bool(getattr(exported, "batch_dim", None))
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
        assert engine.plan, f"{where}: empty plan"
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
