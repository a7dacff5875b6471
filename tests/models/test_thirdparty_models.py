"""GluonCV and GluonNLP models, accelerated against native MXNet (random weights, small inputs).

For each model (built offline by ``tests/models/thirdparty.py``):

* it binds with the pass on and the shipped defaults, strictly (a failure of the
  pass fails the test instead of falling back);
* every engine, fed native MXNet's values of its inputs, gives native's values
  of its outputs (``tests/models/compare.py``: fp32, ``|got - ref| <= 1e-4 +
  1e-3 * max|ref|`` per tensor, integers exactly);
* the final outputs equal native's within the same tolerance. Detectors are the
  exception: with random weights their class scores agree to 1e-7 (measured:
  the top 20 scores of SSD, YOLOv3 and Faster R-CNN have gaps of 0 to 1e-6), so
  NMS turns rounding differences of 1e-6 into other suppressions (MXNet's own
  box_nms, fed the native and the accelerated inputs of YOLOv3-MobileNet, keeps
  84 of the same 100 boxes). YOLOv3 and Faster R-CNN are built with spread score
  logits (``thirdparty.spread_scores``). Their detections -- the final outputs, and
  the outputs of the engine that computes them -- are matched one to one (same
  class, score within 1e-4, box within 1e-3 of the range): at least ``min_match``
  of native's and of the engine's must be found;
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
from tests.models.compare import check_engines, compare_outputs, match_detections
from tests.models.thirdparty import MODELS

#: Detectors: one engine with their post-processing (box_nms and the slices after it), nothing native;
#: their detections matched one to one, at least this share of native's and of the engine's.
DETECTOR_MATCH = 0.95


@dataclass(frozen=True)
class Target:
    max_engines: int
    native: FrozenSet[str] = frozenset()
    #: Final outputs compared (as sets for detection); False: engines checked, outputs only by shape.
    #: Detectors: the share of native detections, and of accelerated ones, that must be matched
    #: one to one (see the module docstring).
    min_match: float = 0.0


TARGETS: Dict[str, Target] = {
    "ssd_resnet50": Target(1, min_match=DETECTOR_MATCH),
    "ssd_mobilenet": Target(1, min_match=DETECTOR_MATCH),
    "yolo3_darknet53": Target(1, min_match=DETECTOR_MATCH),
    "yolo3_mobilenet": Target(1, min_match=DETECTOR_MATCH),
    "faster_rcnn": Target(1, min_match=DETECTOR_MATCH),
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

    bad = check_engines(model, exe, min_match=target.min_match)
    assert not bad, "\n".join(bad)
    assert [(r.shape, r.dtype) for r in ref] == [(g.shape, g.dtype) for g in got]
    if model.kind == "detection":
        matched, n_ref, n_got = match_detections(ref, got)
        summary += f"; {matched} of {n_ref} detections matched ({n_got} accelerated)"
        assert n_ref > 0 and abs(n_got - n_ref) <= 0.05 * n_ref, summary
        assert matched >= target.min_match * n_ref and matched >= target.min_match * n_got, summary
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
