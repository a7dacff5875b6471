"""GluonCV and GluonNLP models, accelerated against native MXNet (random weights, small inputs).

For each model (built offline by ``tests/models/thirdparty.py``):

* it binds with the pass on and the shipped defaults, strictly (a failure of the
  pass fails the test instead of falling back);
* every engine, fed native MXNet's values of its inputs, gives native's values
  of its outputs (``tests/models/compare.py``: fp32, ``|got - ref| <= 1e-4 +
  1e-3 * max|ref|`` per tensor, integers exactly);
* the final outputs equal native's within the same tolerance. Detectors are the
  exception: with random weights many of their candidates tie in score to 1e-6
  (neighbouring anchors of YOLOv3 and SSD, one 16-pixel stride apart), and
  rounding decides which of a tied pair the suppression keeps first, which
  changes the boxes kept after it (YOLOv3-MobileNet on an AVX2 CPU: 65 of 96
  detections equal to native's, every other one a tied neighbour or a box such a
  choice left unsuppressed). So their detections -- the final outputs, and the
  outputs of the engine that computes them -- must be a valid greedy suppression
  of native MXNet's candidates of the final ``box_nms`` (``compare.
  suppression_problems``: each detection a candidate, no two above the overlap
  threshold, every higher candidate kept or suppressed by a higher detection;
  scores within 1.1e-3, boxes within 1e-3 of the range), and as many as native's
  within 5%. YOLOv3 and Faster R-CNN are built with spread score logits
  (``thirdparty.spread_scores``);
* the partition meets the model's target: at most ``max_engines`` engines, and
  only the operators listed in ``native`` left to MXNet, besides small
  post-processing after them that the cost rule leaves native. Detectors, their
  post-processing included, are one engine with nothing native.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Dict, FrozenSet

import mxnet as mx
import pytest

import mx_trt
from mx_trt.frontends.hook import disabled
from tests.models.compare import (check_engines, compare_outputs, detection_problems, match_detections,
                                  native_suppression)
from tests.models.thirdparty import MODELS


@dataclass(frozen=True)
class Target:
    max_engines: int
    native: FrozenSet[str] = frozenset()
    #: Detectors (one engine with their post-processing, box_nms and the slices after it,
    #: nothing native): detections checked against native's candidates (see the module docstring).
    detector: bool = False


TARGETS: Dict[str, Target] = {
    "ssd_resnet50": Target(1, detector=True),
    "ssd_mobilenet": Target(1, detector=True),
    "yolo3_darknet53": Target(1, detector=True),
    "yolo3_mobilenet": Target(1, detector=True),
    "faster_rcnn": Target(1, detector=True),
    "fcn": Target(1),
    "psp": Target(1),
    "deeplab": Target(1),
    "simple_pose": Target(1),
    "i3d": Target(1),
    "bert": Target(2),
    "transformer": Target(1),
}


def _native(model):
    with disabled():
        exe = model.sym.simple_bind(mx.cpu(), grad_req="null", type_dict=model.dtypes, **model.shapes)
    exe.copy_params_from(model.args, model.aux, allow_extra_params=True)
    for k, v in model.inputs.items():
        exe.arg_dict[k][:] = v
    return [o.asnumpy() for o in exe.forward(is_train=False)]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TARGETS))
def test_model_matches_native(name, monkeypatch, default_engine_rule):
    target = TARGETS[name]
    t0 = time.perf_counter()
    model = MODELS[name]()
    ref = _native(model)
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1")
    monkeypatch.setenv("MXNET_TENSORRT_STRICT", "1")
    exe = model.sym.simple_bind(mx.cpu(), grad_req="null", type_dict=model.dtypes,
                                shared_buffer=model.params, **model.shapes)
    info = mx_trt.bind_info(exe)
    assert info is not None and not info.native_failures, info and info.native_failures
    for k, v in model.inputs.items():
        exe.arg_dict[k][:] = v
    got = [o.asnumpy() for o in exe.forward(is_train=False)]
    assert all(f.run_count == 1 for f in info.engines)

    graph = info.plan.graph
    after = _downstream(graph, [v for v in info.plan.partition.native if graph.nodes[v].op in target.native])
    native_ops = {graph.nodes[v].op for v, why in info.plan.partition.native.items()
                  if not (v in after and why.startswith("in a subgraph of"))}
    inside, total = info.plan.op_counts()
    summary = f"{name}: {len(info.engines)} engines, {inside}/{total} ops inside, native {sorted(native_ops)}"
    assert len(info.engines) <= target.max_engines, summary
    assert native_ops <= target.native, summary + f"; reasons: {_reasons(info, native_ops - target.native)}"

    supp = native_suppression(model, graph) if target.detector else None
    bad = check_engines(model, exe, supp=supp)
    assert not bad, "\n".join(bad)
    assert [(r.shape, r.dtype) for r in ref] == [(g.shape, g.dtype) for g in got]
    if supp is not None:
        matched, n_ref, n_got = match_detections(ref, got)
        summary += f"; {matched} of {n_ref} detections equal to native's ({n_got} accelerated)"
        bad = detection_problems(ref, got, supp)
        assert not bad, summary + "; " + "; ".join(bad)
    else:
        bad = compare_outputs(ref, got)
        assert not bad, "\n".join(bad)
    print(f"{summary} ({time.perf_counter() - t0:.1f} s)")


def _downstream(graph, starts):
    """Ids of the nodes that read, directly or not, an output of ``starts``. O(V + E)."""
    seen = set(starts)
    for n in graph.nodes:
        if any(e.node in seen for e in n.inputs):
            seen.add(n.id)
    return seen - set(starts)


def _reasons(info, ops):
    g = info.plan.graph
    out = {}
    for v, why in info.plan.partition.native.items():
        if g.nodes[v].op in ops:
            out.setdefault(g.nodes[v].op, why)
    return out
