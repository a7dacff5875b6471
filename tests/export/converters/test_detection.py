"""Detection post-processing converters (mx_trt/export/converters/detection.py and
suppression.py) against MXNet 1.9.1.

Each case binds the operator twice, natively and with the pass on the ONNX Runtime
backend (strict, every subgraph an engine), asserts that the operator went into an
engine, and compares the outputs row by row: the same kept rows in the same order,
ids, scores and the -1 rows exactly, coordinates within fp32 ``1e-6 * max|x|`` (box_nms
copies them or converts corner/center by the same arithmetic; MultiBoxDetection and
Proposal decode with ``exp``, ``4e-6 * max|x|`` for Proposal's double-precision steps).
Both suppression forms (k x k fixed point, one kept box per iteration) and ``TopK`` in
chunks are run on the same cases by lowering their thresholds; an fp16 engine is
checked for what fp16 can promise; TensorRT-RTX builds every form, fp32 and fp16.

The inputs are built to be hard: scores drawn from a few values (so most scores tie
exactly and the order of ties decides the output), boxes in a few tight clusters (so
most pairs overlap), class ids from a few values, some rows below ``valid_thresh`` or
of the background class, and some coordinates negative.
"""
from __future__ import annotations

from typing import Dict, List, Tuple

import mxnet as mx
import numpy as np
import pytest

import mx_trt
from mx_trt.export.converters import check, suppression
from mx_trt.export.spec import op_spec
from mx_trt.graph.importer import symbol_to_graph

D = mx.sym.Variable("data")
COORD_RTOL = 1e-6


def _bind(sym, shapes: Dict[str, Tuple[int, ...]], inputs: Dict[str, np.ndarray], on: bool, monkeypatch):
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1" if on else "0")
    exe = sym.simple_bind(mx.cpu(), grad_req="null", shared_buffer={}, **shapes)
    for k, v in inputs.items():
        exe.arg_dict[k][:] = v
    exe.forward(is_train=False)
    return exe, [o.asnumpy() for o in exe.outputs]


def _compare(sym, shapes, inputs, monkeypatch, coord_cols: List[int]) -> Tuple[np.ndarray, np.ndarray]:
    """Bind natively and through ONNX Runtime engines; assert the op ran in an engine and the rows match."""
    monkeypatch.setenv("MXNET_TENSORRT_BACKEND", "onnxruntime")
    monkeypatch.setenv("MXNET_TENSORRT_STRICT", "1")
    monkeypatch.setenv("MXNET_TENSORRT_MIN_SUBGRAPH_SIZE", "1")
    _, (ref,) = _bind(sym, shapes, inputs, False, monkeypatch)
    exe, (got,) = _bind(sym, shapes, inputs, True, monkeypatch)
    info = mx_trt.bind_info(exe)
    assert info is not None and len(info.engines) == 1 and not info.plan.partition.native, (
        info and {info.plan.graph.nodes[v].op: w for v, w in info.plan.partition.native.items()})
    assert got.shape == ref.shape and got.dtype == ref.dtype
    other = [c for c in range(ref.shape[-1]) if c not in coord_cols]
    np.testing.assert_array_equal(got[..., other], ref[..., other])
    scale = max(1.0, float(np.abs(ref[..., coord_cols]).max()))
    np.testing.assert_allclose(got[..., coord_cols], ref[..., coord_cols], rtol=0, atol=COORD_RTOL * scale)
    return ref, got


def _rows(rng: np.random.RandomState, shape: Tuple[int, ...], coord_start: int, score_index: int, id_index: int,
          center: bool = False, ids: int = 3) -> np.ndarray:
    """Rows of boxes in a few clusters, tied scores, a few class ids (see the module docstring)."""
    x = rng.uniform(-1, 1, shape).astype(np.float32)
    lead = shape[:-1]
    centers = rng.uniform(-2, 10, (4, 2))
    pick = centers[rng.randint(0, 4, lead)]
    lo = pick + rng.uniform(-1, 1, lead + (2,))
    size = rng.uniform(0.5, 4, lead + (2,))
    box = np.concatenate([lo, lo + size], axis=-1)
    if center:
        box = np.concatenate([lo + size / 2, size], axis=-1)
    x[..., coord_start:coord_start + 4] = box
    x[..., score_index] = rng.choice([0.05, 0.3, 0.3, 0.5, 0.5, 0.5, 0.9, 0.9], lead)
    if id_index >= 0:
        x[..., id_index] = rng.randint(-1, ids, lead).astype(np.float32)
    return x


#: name, data shape, box_nms attributes, rows' layout (coord_start, score_index, id_index), center input.
NMS_CASES = [
    ("defaults", (1, 40, 6), {}, False),
    ("ids_per_class", (2, 50, 6), dict(id_index=0, overlap_thresh=0.3), False),
    ("ids_force_suppress", (2, 50, 6), dict(id_index=0, force_suppress=True, overlap_thresh=0.3), False),
    ("topk_cuts_ties", (2, 60, 6), dict(id_index=0, topk=17, valid_thresh=0.1), False),
    ("background_id", (1, 50, 6), dict(id_index=0, background_id=0, overlap_thresh=0.4), False),
    ("rpn_layout", (1, 64, 5), dict(coord_start=1, score_index=0, id_index=-1, force_suppress=True,
                                    overlap_thresh=0.7, topk=30), False),
    ("score_last", (2, 30, 7), dict(coord_start=0, score_index=6, id_index=4, overlap_thresh=0.5), False),
    ("center_to_corner", (2, 40, 6), dict(in_format="center", out_format="corner", id_index=0), True),
    ("corner_to_center", (2, 40, 6), dict(in_format="corner", out_format="center", overlap_thresh=0.2), False),
    ("center_in_center_out", (1, 40, 6), dict(in_format="center", out_format="center"), True),
    ("batch_dims", (2, 3, 20, 6), dict(id_index=0, topk=8), False),
    ("two_dims", (30, 6), dict(overlap_thresh=0.45), False),
    ("topk_past_n", (1, 20, 6), dict(topk=100, id_index=0), False),
    ("topk_zero_passes_through", (1, 20, 6), dict(topk=0, in_format="corner", out_format="center"), False),
    ("nothing_valid", (2, 20, 6), dict(valid_thresh=0.95), False),
    ("gluoncv_ssd", (1, 600, 6), dict(overlap_thresh=0.45, topk=400, valid_thresh=0.01, id_index=0,
                                      score_index=1, coord_start=2, force_suppress=False), False),
    ("no_overlap_suppresses", (1, 30, 6), dict(overlap_thresh=1.0), False),
    ("everything_overlaps", (1, 30, 6), dict(overlap_thresh=0.0, id_index=0), False),
]


def _layout(kw: Dict) -> Tuple[int, int, int]:
    return kw.get("coord_start", 2), kw.get("score_index", 1), kw.get("id_index", -1)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name,shape,kw,center", NMS_CASES, ids=[c[0] for c in NMS_CASES])
def test_box_nms_matches_mxnet(name, shape, kw, center, seed, monkeypatch):
    cs, si, ii = _layout(kw)
    data = _rows(np.random.RandomState(seed), shape, cs, si, ii, center)
    if name == "nothing_valid":
        data[..., si] = np.minimum(data[..., si], 0.9)
    ref, _ = _compare(mx.sym.contrib.box_nms(D, name="nms", **kw), {"data": shape}, {"data": data}, monkeypatch,
                      list(range(cs, cs + 4)))
    kept = ref[..., si] != -1
    # The cases exercise what they are named for.
    if name not in ("topk_zero_passes_through", "nothing_valid"):
        assert kept.any()
        scores = data[..., si].reshape(-1)
        assert len(np.unique(scores)) < 0.5 * scores.size  # many exact ties
    if name == "nothing_valid":
        assert not kept.any()
    if name in ("defaults", "ids_per_class", "rpn_layout", "gluoncv_ssd"):
        assert kept.sum() < (data[..., si] > kw.get("valid_thresh", 0)).sum()  # something was suppressed


def test_box_non_maximum_suppression_alias(monkeypatch):
    data = _rows(np.random.RandomState(5), (1, 30, 6), 2, 1, 0)
    sym = mx.sym.contrib.box_non_maximum_suppression(D, id_index=0, topk=12, name="nms")
    _compare(sym, {"data": (1, 30, 6)}, {"data": data}, monkeypatch, [2, 3, 4, 5])


def test_gluoncv_ssd_tail(monkeypatch):
    """box_nms followed by the slices GluonCV emits (ids, scores, boxes of the first 100 rows) in one engine."""
    nms = mx.sym.contrib.box_nms(D, overlap_thresh=0.45, topk=400, valid_thresh=0.01, id_index=0, name="nms")
    head = mx.sym.slice_axis(nms, axis=1, begin=0, end=100)
    out = mx.sym.Group([mx.sym.slice_axis(head, axis=2, begin=0, end=1), mx.sym.slice_axis(head, axis=2, begin=1, end=2),
                        mx.sym.slice_axis(head, axis=2, begin=2, end=6)])
    data = _rows(np.random.RandomState(7), (2, 500, 6), 2, 1, 0)
    monkeypatch.setenv("MXNET_TENSORRT_BACKEND", "onnxruntime")
    monkeypatch.setenv("MXNET_TENSORRT_STRICT", "1")
    _, ref = _bind(out, {"data": data.shape}, {"data": data}, False, monkeypatch)
    exe, got = _bind(out, {"data": data.shape}, {"data": data}, True, monkeypatch)
    info = mx_trt.bind_info(exe)
    assert len(info.engines) == 1 and not info.plan.partition.native
    for r, g in zip(ref, got):
        np.testing.assert_allclose(g, r, rtol=0, atol=1e-5)


def _reason(sym, shapes, dtypes=None, backend=""):
    g = symbol_to_graph(sym, shapes, dtypes)
    return check(op_spec(g, g.op_nodes()[-1], {}, backend))


def test_box_nms_refusals_say_why():
    assert "(limit 67108864)" in _reason(mx.sym.contrib.box_nms(D, topk=-1), {"data": (1, 9000, 6)})
    assert _reason(mx.sym.contrib.box_nms(D, topk=4000), {"data": (1, 9000, 6)}) is None
    assert "float32" in _reason(mx.sym.contrib.box_nms(D), {"data": (1, 10, 6)}, {"data": "float16"})


@pytest.mark.parametrize("name", ["topk_cuts_ties", "gluoncv_ssd", "rpn_layout", "batch_dims", "nothing_valid"])
def test_box_nms_with_topk_in_chunks(name, monkeypatch):
    """Past TensorRT's TopK limit (k > 3840) the form takes TopK in chunks: here with chunks of 7 rows."""
    monkeypatch.setattr(suppression, "TOPK_CHUNK", 7)
    _, shape, kw, center = next(c for c in NMS_CASES if c[0] == name)
    cs, si, ii = _layout(kw)
    data = _rows(np.random.RandomState(3), shape, cs, si, ii, center)
    if name == "nothing_valid":
        data[..., si] = np.minimum(data[..., si], 0.9)
    _compare(mx.sym.contrib.box_nms(D, name="nms", **kw), {"data": shape}, {"data": data}, monkeypatch,
             list(range(cs, cs + 4)))


@pytest.mark.parametrize("block", [1, 3, 32])
@pytest.mark.parametrize("name", ["defaults", "ids_per_class", "ids_force_suppress", "topk_cuts_ties", "background_id",
                                  "score_last", "center_to_corner", "batch_dims", "nothing_valid", "everything_overlaps"])
def test_box_nms_one_kept_box_per_iteration(name, block, monkeypatch):
    """The form for many candidates (k > ROW_LOOP_MIN_K): a Loop deciding a block of slots per iteration (of 1,
    of 3: blocks that end inside runs of overlapping boxes, and of 32)."""
    monkeypatch.setattr(suppression, "ROW_LOOP_MIN_K", 0)
    monkeypatch.setattr(suppression, "BLOCK", block)
    _, shape, kw, center = next(c for c in NMS_CASES if c[0] == name)
    cs, si, ii = _layout(kw)
    data = _rows(np.random.RandomState(5), shape, cs, si, ii, center)
    if name == "nothing_valid":
        data[..., si] = np.minimum(data[..., si], 0.9)
    _compare(mx.sym.contrib.box_nms(D, name="nms", **kw), {"data": shape}, {"data": data}, monkeypatch,
             list(range(cs, cs + 4)))


@pytest.mark.parametrize("block", [1, 4, 32])
def test_multibox_detection_and_proposal_one_kept_box_per_iteration(block, monkeypatch):
    monkeypatch.setattr(suppression, "ROW_LOOP_MIN_K", 0)
    monkeypatch.setattr(suppression, "BLOCK", block)
    for seed in (0, 1):
        inputs = _multibox_inputs(np.random.RandomState(seed), 2, 4, 40)
        sym = mx.sym.contrib.MultiBoxDetection(mx.sym.Variable("cls"), mx.sym.Variable("loc"), mx.sym.Variable("anchors"),
                                               nms_topk=25, nms_threshold=0.3, name="det")
        _compare(sym, {k: v.shape for k, v in inputs.items()}, inputs, monkeypatch, [2, 3, 4, 5])
        inputs = _proposal_inputs(np.random.RandomState(seed), 2, 2, 6, 5, 16)
        sym = mx.sym.contrib.MultiProposal(mx.sym.Variable("cls"), mx.sym.Variable("bbox"), mx.sym.Variable("im_info"),
                                           scales=(2, 4), ratios=(1,), rpn_pre_nms_top_n=45, rpn_post_nms_top_n=30,
                                           threshold=0.5, name="prop")
        _compare(sym, {k: v.shape for k, v in inputs.items()}, inputs, monkeypatch, [1, 2, 3, 4])


def test_multibox_detection_and_proposal_with_topk_in_chunks(monkeypatch):
    monkeypatch.setattr(suppression, "TOPK_CHUNK", 7)
    inputs = _multibox_inputs(np.random.RandomState(4), 2, 4, 40)
    sym = mx.sym.contrib.MultiBoxDetection(mx.sym.Variable("cls"), mx.sym.Variable("loc"), mx.sym.Variable("anchors"),
                                           nms_topk=25, name="det")
    _compare(sym, {k: v.shape for k, v in inputs.items()}, inputs, monkeypatch, [2, 3, 4, 5])
    inputs = _proposal_inputs(np.random.RandomState(4), 2, 2, 6, 5, 16)
    sym = mx.sym.contrib.MultiProposal(mx.sym.Variable("cls"), mx.sym.Variable("bbox"), mx.sym.Variable("im_info"),
                                       scales=(2, 4), ratios=(1,), rpn_pre_nms_top_n=45, rpn_post_nms_top_n=30, name="prop")
    _compare(sym, {k: v.shape for k, v in inputs.items()}, inputs, monkeypatch, [1, 2, 3, 4])


def test_box_nms_past_tensorrt_topk_limit(monkeypatch):
    """Faster R-CNN's RPN at 480x640: topk=6000 of 18,000 boxes, TopK in two chunks."""
    data = _rows(np.random.RandomState(6), (1, 18000, 5), 1, 0, -1)
    sym = mx.sym.contrib.box_nms(D, overlap_thresh=0.7, topk=6000, coord_start=1, score_index=0, id_index=-1,
                                 force_suppress=True, name="nms")
    ref, _ = _compare(sym, {"data": data.shape}, {"data": data}, monkeypatch, [1, 2, 3, 4])
    assert 0 < (ref[..., 0] != -1).sum() < 6000


def test_multibox_and_proposal_refusals_say_why():
    det = mx.sym.contrib.MultiBoxDetection(mx.sym.Variable("cls"), mx.sym.Variable("loc"), mx.sym.Variable("anchors"))
    assert "nms_topk" in _reason(det, {"cls": (1, 21, 8732), "loc": (1, 4 * 8732), "anchors": (1, 8732, 4)})
    assert "background" in _reason(det, {"cls": (1, 1, 10), "loc": (1, 40), "anchors": (1, 10, 4)})
    prop = mx.sym.contrib.Proposal(mx.sym.Variable("cls"), mx.sym.Variable("bbox"), mx.sym.Variable("im_info"),
                                   rpn_pre_nms_top_n=-1, scales=(8,), ratios=(1,))
    assert "rpn_pre_nms_top_n" in _reason(prop, {"cls": (1, 2, 100, 100), "bbox": (1, 4, 100, 100), "im_info": (1, 3)})
    batch = mx.sym.contrib.Proposal(mx.sym.Variable("cls"), mx.sym.Variable("bbox"), mx.sym.Variable("im_info"),
                                    scales=(8,), ratios=(1,))
    assert "MultiProposal" in _reason(batch, {"cls": (2, 2, 4, 4), "bbox": (2, 4, 4, 4), "im_info": (2, 3)})


# -- _contrib_MultiBoxDetection -------------------------------------------------------------


def _multibox_inputs(rng: np.random.RandomState, b: int, c: int, n: int) -> Dict[str, np.ndarray]:
    """Class probabilities from a few values (ties within and across anchors), clustered anchors."""
    probs = rng.choice([0.0, 0.005, 0.2, 0.2, 0.4, 0.4, 0.7], (b, c, n)).astype(np.float32)
    centers = rng.uniform(0.2, 0.8, (3, 2))[rng.randint(0, 3, n)] + rng.uniform(-0.05, 0.05, (n, 2))
    size = rng.uniform(0.1, 0.4, (n, 2))
    anchors = np.concatenate([centers - size / 2, centers + size / 2], axis=1).astype(np.float32)
    loc = rng.uniform(-0.5, 0.5, (b, n * 4)).astype(np.float32)
    return {"cls": probs, "loc": loc, "anchors": anchors.reshape(1, n, 4)}


MULTIBOX_CASES = [
    ("defaults", 1, 4, 40, {}),
    ("batch_topk", 2, 5, 60, dict(nms_topk=15, nms_threshold=0.3)),
    ("force_suppress", 2, 3, 50, dict(force_suppress=True, nms_threshold=0.4)),
    ("no_clip_variances", 1, 4, 40, dict(clip=False, variances=(0.2, 0.1, 0.3, 0.1))),
    ("threshold_high", 2, 4, 40, dict(threshold=0.5)),
    ("nms_off", 1, 4, 40, dict(nms_threshold=0.0)),
    ("nms_one", 1, 3, 40, dict(nms_threshold=1.0)),
    ("topk_past_n", 1, 3, 30, dict(nms_topk=100)),
    ("two_classes", 2, 2, 50, dict(nms_topk=20, nms_threshold=0.45)),
]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name,b,c,n,kw", MULTIBOX_CASES, ids=[m[0] for m in MULTIBOX_CASES])
def test_multibox_detection_matches_mxnet(name, b, c, n, kw, seed, monkeypatch):
    inputs = _multibox_inputs(np.random.RandomState(seed), b, c, n)
    sym = mx.sym.contrib.MultiBoxDetection(mx.sym.Variable("cls"), mx.sym.Variable("loc"), mx.sym.Variable("anchors"),
                                           name="det", **kw)
    shapes = {k: v.shape for k, v in inputs.items()}
    ref, _ = _compare(sym, shapes, inputs, monkeypatch, [2, 3, 4, 5])
    ids = ref[..., 0]
    if name != "threshold_high":
        assert (ids >= 0).any()
    if name in ("defaults", "batch_topk", "force_suppress"):
        # something was suppressed: a row with a score but no id
        assert ((ids == -1) & (ref[..., 1] > 0)).any()


# -- TensorRT-RTX build gate ------------------------------------------------------------------


def _gate_cases() -> Dict[str, Tuple[object, Dict[str, Tuple[int, ...]], str]]:
    """name -> (symbol, input shapes, the op that must land in a subgraph)."""
    det = mx.sym.contrib.MultiBoxDetection(mx.sym.softmax(mx.sym.Variable("cls"), axis=1), mx.sym.Variable("loc"),
                                           mx.sym.Variable("anchors"), nms_topk=20, name="op")
    nms = mx.sym.contrib.box_nms(D * 1, overlap_thresh=0.45, topk=30, valid_thresh=0.01, id_index=0, name="op")
    return {
        "box_nms_ssd": (mx.sym.slice_axis(nms, axis=1, begin=0, end=10), {"data": (2, 50, 6)}, "_contrib_box_nms"),
        "box_nms_center_rpn": (mx.sym.contrib.box_nms(D * 1, coord_start=1, score_index=0, force_suppress=True,
                                                      in_format="center", out_format="corner", name="op"),
                               {"data": (1, 40, 5)}, "_contrib_box_nms"),
        "box_nms_rpn_topk_6000": (mx.sym.contrib.box_nms(D * 1, overlap_thresh=0.7, topk=6000, coord_start=1, score_index=0,
                                                         force_suppress=True, name="op"),
                                  {"data": (1, 18000, 5)}, "_contrib_box_nms"),
        "multibox_detection": (det, {"cls": (2, 4, 30), "loc": (2, 120), "anchors": (1, 30, 4)},
                               "_contrib_MultiBoxDetection"),
        "proposal": (mx.sym.contrib.Proposal(mx.sym.Variable("cls") * 1, mx.sym.Variable("bbox"), mx.sym.Variable("im_info"),
                                             scales=(2, 4), ratios=(0.5, 1, 2), rpn_pre_nms_top_n=60,
                                             rpn_post_nms_top_n=20, name="op"),
                     {"cls": (1, 12, 6, 5), "bbox": (1, 24, 6, 5), "im_info": (1, 3)}, "_contrib_Proposal"),
        "multi_proposal": (mx.sym.contrib.MultiProposal(mx.sym.Variable("cls") * 1, mx.sym.Variable("bbox"),
                                                        mx.sym.Variable("im_info"), scales=(2,), ratios=(1,),
                                                        rpn_pre_nms_top_n=-1, rpn_post_nms_top_n=40, name="op"),
                           {"cls": (2, 2, 6, 5), "bbox": (2, 4, 6, 5), "im_info": (2, 3)}, "_contrib_MultiProposal"),
    }


@pytest.mark.parametrize("rows", [False, True], ids=["k_by_k", "one_box_per_iteration"])
@pytest.mark.parametrize("fp16", [False, True], ids=["fp32", "fp16"])
@pytest.mark.parametrize("name", sorted(_gate_cases()))
def test_trt_rtx_gate(name, fp16, rows, monkeypatch):
    """The ONNX form (TopK in chunks, CumSum, ScatterElements, either Loop) parses and builds with TensorRT-RTX."""
    monkeypatch.setattr(suppression, "ROW_LOOP_MIN_K", 0 if rows else 1 << 30)
    from mx_trt.builder.backends.tensorrt import TensorRTRTXBackend
    from mx_trt.pipeline.plan import analyze
    from mx_trt.pipeline.request import BindRequest
    from mx_trt.settings import Settings
    from tests.builder.test_trt_rtx_gate import gate
    from tests.harness.mxcheck import random_params

    monkeypatch.setenv("MXNET_TENSORRT_MIN_SUBGRAPH_SIZE", "1")
    backend = TensorRTRTXBackend()
    reason = backend.build_unavailable_reason()
    assert reason is None, reason
    sym, shapes, op = _gate_cases()[name]
    args, aux = random_params(sym, shapes)
    params = {**args, **aux}
    plan = analyze(BindRequest(sym, shapes, params, Settings.from_env(), backend))
    in_engine = {plan.graph.nodes[i].op for sg in plan.partition.subgraphs for i in sg.nodes}
    assert op in in_engine, f"{op} stayed native: {[plan.reasons.get(i) for i in plan.reasons]}"
    assert not plan.partition.native
    assert gate(name, sym, shapes, params, backend, fp16)["subgraphs"] == 1


# -- _contrib_Proposal / _contrib_MultiProposal -------------------------------------------------


def _proposal_inputs(rng: np.random.RandomState, b: int, a: int, h: int, w: int, stride: int) -> Dict[str, np.ndarray]:
    """Foreground probabilities from a few values (ties), small deltas on a 1/16 grid, images that
    fill most of the feature map (some cells past the real size), scales that make the minimum size bite."""
    cls = rng.choice([0.05, 0.3, 0.3, 0.6, 0.6, 0.9], (b, 2 * a, h, w)).astype(np.float32)
    bbox = (np.round(rng.uniform(-0.4, 0.4, (b, 4 * a, h, w)) * 16) / 16).astype(np.float32)
    info = np.stack([rng.randint(h * stride * 3 // 4, h * stride + 1, b), rng.randint(w * stride * 3 // 4, w * stride + 1, b),
                     rng.choice([0.5, 1.0, 1.5], b)], axis=1).astype(np.float32)
    return {"cls": cls, "bbox": bbox, "im_info": info}


PROPOSAL_CASES = [
    ("defaults_small", "Proposal", 1, dict(scales=(2, 4), ratios=(0.5, 1, 2), rpn_pre_nms_top_n=60, rpn_post_nms_top_n=20)),
    ("output_score", "Proposal", 1, dict(scales=(2, 4), ratios=(1,), rpn_pre_nms_top_n=50, rpn_post_nms_top_n=30,
                                         output_score=True, threshold=0.5)),
    ("cyclic_padding", "Proposal", 1, dict(scales=(8,), ratios=(1,), rpn_pre_nms_top_n=40, rpn_post_nms_top_n=60,
                                           threshold=0.3, output_score=True)),
    ("iou_loss_min_size", "Proposal", 1, dict(scales=(1, 2), ratios=(1,), iou_loss=True, rpn_min_size=4,
                                              rpn_pre_nms_top_n=-1, rpn_post_nms_top_n=16)),
    ("multi_batch", "MultiProposal", 2, dict(scales=(2, 4), ratios=(0.5, 1), rpn_pre_nms_top_n=50, rpn_post_nms_top_n=20,
                                             feature_stride=8, output_score=True)),
    ("multi_all_candidates", "MultiProposal", 2, dict(scales=(4,), ratios=(1,), rpn_pre_nms_top_n=-1,
                                                      rpn_post_nms_top_n=12, threshold=0.4)),
]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name,op,b,kw", PROPOSAL_CASES, ids=[c[0] for c in PROPOSAL_CASES])
def test_proposal_matches_mxnet(name, op, b, kw, seed, monkeypatch):
    a = len(kw["scales"]) * len(kw["ratios"])
    stride = kw.get("feature_stride", 16)
    inputs = _proposal_inputs(np.random.RandomState(seed), b, a, 6, 5, stride)
    make = getattr(mx.sym.contrib, op)
    sym = make(mx.sym.Variable("cls"), mx.sym.Variable("bbox"), mx.sym.Variable("im_info"), name="prop", **kw)
    if kw.get("output_score"):
        sym = mx.sym.Group([sym[0], sym[1] * 1])
    shapes = {k: v.shape for k, v in inputs.items()}
    monkeypatch.setenv("MXNET_TENSORRT_BACKEND", "onnxruntime")
    monkeypatch.setenv("MXNET_TENSORRT_STRICT", "1")
    monkeypatch.setenv("MXNET_TENSORRT_MIN_SUBGRAPH_SIZE", "1")
    _, ref = _bind(sym, shapes, inputs, False, monkeypatch)
    exe, got = _bind(sym, shapes, inputs, True, monkeypatch)
    info = mx_trt.bind_info(exe)
    assert len(info.engines) == 1 and not info.plan.partition.native
    rois_r, rois_g = ref[0], got[0]
    assert rois_g.shape == rois_r.shape
    np.testing.assert_array_equal(rois_g[:, 0], rois_r[:, 0])
    scale = max(1.0, float(np.abs(rois_r).max()))
    np.testing.assert_allclose(rois_g[:, 1:], rois_r[:, 1:], rtol=0, atol=COORD_RTOL * scale * 4)
    if kw.get("output_score"):
        np.testing.assert_array_equal(got[1], ref[1])
        assert (ref[1] == -1).any() or name != "iou_loss_min_size"


@pytest.mark.parametrize("rows", [False, True], ids=["k_by_k", "one_box_per_iteration"])
def test_box_nms_in_an_fp16_engine(rows, monkeypatch):
    """fp16 engines run the same form in half precision (ONNX Runtime's float16 Min/Max with
    two-sided broadcasting corrupt the heap, so the form has none). The result is fp16's: kept
    rows are input rows rounded to half, in descending score, then -1 rows."""
    if rows:
        monkeypatch.setattr(suppression, "ROW_LOOP_MIN_K", 0)
    data = _rows(np.random.RandomState(8), (2, 200, 6), 2, 1, 0)
    sym = mx.sym.contrib.box_nms(D, overlap_thresh=0.45, topk=100, valid_thresh=0.01, id_index=0, name="nms")
    monkeypatch.setenv("MXNET_TENSORRT_BACKEND", "onnxruntime")
    monkeypatch.setenv("MXNET_TENSORRT_STRICT", "1")
    monkeypatch.setenv("MXNET_TENSORRT_MIN_SUBGRAPH_SIZE", "1")
    monkeypatch.setenv("MXNET_TENSORRT_USE_FP16", "1")
    _, (ref,) = _bind(sym, {"data": data.shape}, {"data": data}, False, monkeypatch)
    exe, (got,) = _bind(sym, {"data": data.shape}, {"data": data}, True, monkeypatch)
    assert len(mx_trt.bind_info(exe).engines) == 1
    half = data.astype(np.float16).astype(np.float32)
    for b in range(2):
        kept = got[b][got[b, :, 1] != -1]
        assert abs(len(kept) - (ref[b, :, 1] != -1).sum()) <= 0.1 * len(kept)
        assert (got[b, len(kept):] == -1).all() and (np.diff(kept[:, 1]) <= 0).all()
        for row in kept:
            assert np.isclose(half[b], row, rtol=1e-3, atol=1e-3).all(axis=1).any()
