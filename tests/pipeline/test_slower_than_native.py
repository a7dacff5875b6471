"""Nodes a backend runs far slower than MXNet's own kernel stay native under the cost and measured rules.

ONNX Runtime: suppression of more than ``ROW_LOOP_MIN_K`` candidates (Faster R-CNN's RPN
keeps 6,000) runs in an ONNX ``Loop`` about 5x slower than MXNet's ``box_nms``. The
``always`` rule, and with it the whole-model export, still puts such a node in the engine.
"""
from __future__ import annotations

import mxnet as mx
import pytest

from mx_trt.builder.backends.onnxruntime import OnnxRuntimeBackend
from mx_trt.export.converters.suppression import ROW_LOOP_MIN_K
from mx_trt.pipeline.plan import analyze
from mx_trt.pipeline.request import BindRequest
from mx_trt.settings import Settings

D = mx.sym.Variable("data")


def _rpn(topk: int):
    """A convolution, then box_nms over its rows (an RPN's shape: score, then 4 coordinates)."""
    x = mx.sym.Convolution(D, kernel=(1, 1), num_filter=5, name="conv")
    rows = mx.sym.transpose(mx.sym.reshape(x, shape=(0, 5, -1)), axes=(0, 2, 1), name="rows")
    return mx.sym.contrib.box_nms(rows, overlap_thresh=0.7, topk=topk, coord_start=1, score_index=0, id_index=-1,
                                  force_suppress=True, name="nms")


def _plan(sym, rule: str, n: int):
    arg_shapes, _, _ = sym.infer_shape(data=(1, 3, 1, n))
    params = {k: mx.nd.ones(s) for k, s in zip(sym.list_arguments(), arg_shapes) if k != "data"}
    settings = Settings(engine_rule=rule, min_subgraph_size=1)
    return analyze(BindRequest(sym, {"data": (1, 3, 1, n)}, params, settings, OnnxRuntimeBackend()))


def _native_ops(plan):
    return {plan.graph.nodes[v].op: why for v, why in plan.reasons.items()}


@pytest.mark.parametrize("rule", ["cost", "measured"])
def test_large_suppression_stays_native(rule):
    plan = _plan(_rpn(ROW_LOOP_MIN_K + 1), rule, 2000)
    why = _native_ops(plan).get("_contrib_box_nms")
    assert why is not None and f"suppressing {ROW_LOOP_MIN_K + 1} candidates" in why and "ENGINE_RULE=always" in why
    assert "_contrib_box_nms" not in {plan.graph.nodes[v].op for sg in plan.partition.subgraphs for v in sg.nodes}


def test_always_keeps_it_in_the_engine():
    plan = _plan(_rpn(ROW_LOOP_MIN_K + 1), "always", 2000)
    assert "_contrib_box_nms" not in _native_ops(plan)
    assert "_contrib_box_nms" in {plan.graph.nodes[v].op for sg in plan.partition.subgraphs for v in sg.nodes}


@pytest.mark.parametrize("rule", ["cost", "measured"])
def test_small_suppression_goes_to_the_engine(rule):
    plan = _plan(_rpn(ROW_LOOP_MIN_K), rule, 2000)
    assert "_contrib_box_nms" not in _native_ops(plan)


def test_topk_bounds_the_candidates():
    # 2,000 rows, topk -1: all of them compete.
    plan = _plan(_rpn(-1), "measured", 2000)
    assert "suppressing 2000 candidates" in _native_ops(plan)["_contrib_box_nms"]
    plan = _plan(_rpn(-1), "measured", 900)
    assert "_contrib_box_nms" not in _native_ops(plan)
