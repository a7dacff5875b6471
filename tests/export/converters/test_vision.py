"""Vision converters (mx_trt/converters/vision.py and pooling.py) against MXNet 1.9.1.

Every case runs the symbol natively and through the ONNX export in ONNX Runtime
(:func:`tests.harness.mxcheck.check_symbol`, fp32 tolerance ``OP_TOL``) after asserting that
the op's validator accepts it, so a case cannot pass by staying native. Box and ROI
inputs are drawn as well-formed boxes (positive sizes) that still reach past the
feature map, round on halves and so on. The TensorRT-RTX gate builds one graph per
converter in fp32 and fp16 and asserts that the op went into a subgraph.
"""
from __future__ import annotations

import json
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

import mxnet as mx
import numpy as np
import pytest

from mx_trt.export.converters import registry
from mx_trt.graph.importer import symbol_to_graph
from mx_trt.export.spec import op_spec
from tests.harness.mxcheck import check_symbol, random_params

D = mx.sym.Variable("data")
R = mx.sym.Variable("rois")
A = mx.sym.Variable("anchors")

Shapes = Mapping[str, Tuple[int, ...]]
Inputs = Optional[Callable[[], Dict[str, np.ndarray]]]


def _accepted(sym, shapes: Shapes, dtypes: Optional[Mapping[str, str]] = None) -> None:
    graph = symbol_to_graph(sym, shapes, dtypes)
    for nid in graph.op_nodes():
        spec = op_spec(graph, nid, {})
        assert registry.check(spec) is None, f"{spec.op}: {registry.check(spec)}"


def _run(sym, shapes: Shapes, inputs: Inputs = None, tol=None) -> None:
    feeds = inputs() if inputs else None
    _accepted(sym, shapes, {k: str(v.dtype) for k, v in feeds.items()} if feeds else None)
    check_symbol(sym, shapes, inputs=feeds, tol=tol)


def _boxes(rng: np.random.RandomState, n: int, lo: float, hi: float, min_size: float = 0.5) -> np.ndarray:
    """(n, 4) corner boxes with positive sizes."""
    p = rng.uniform(lo, hi, (n, 2))
    s = rng.uniform(min_size, (hi - lo) / 2, (n, 2))
    return np.concatenate([p, p + s], axis=1).astype(np.float32)


# -- _contrib_box_decode -------------------------------------------------------------------


def _decode_inputs(shapes: Shapes, fmt: str, seed: int = 1) -> Callable[[], Dict[str, np.ndarray]]:
    def make() -> Dict[str, np.ndarray]:
        rng = np.random.RandomState(seed)
        d = rng.uniform(-2, 2, shapes["data"]).astype(np.float32)
        n = int(np.prod(shapes["anchors"])) // 4
        a = _boxes(rng, n, 0, 1, 0.05)
        if fmt == "center":
            a = np.concatenate([(a[:, :2] + a[:, 2:]) / 2, a[:, 2:] - a[:, :2]], axis=1)
        return {"data": d, "anchors": a.reshape(shapes["anchors"])}

    return make


DECODE = [
    ("center_ssd", (2, 6, 4), (1, 6, 4), dict(std0=0.1, std1=0.1, std2=0.2, std3=0.2, format="center")),
    ("corner_rcnn", (1, 5, 4), (1, 5, 4), dict(std0=0.1, std1=0.1, std2=0.2, std3=0.2, format="corner")),
    ("corner_rpn_default_std", (2, 7, 4), (1, 7, 4), dict(format="corner")),
    ("center_clip", (2, 6, 4), (1, 6, 4), dict(std2=2.0, std3=2.0, clip=0.5, format="center")),
    ("corner_clip", (1, 6, 4), (1, 6, 4), dict(clip=1.5, format="corner")),
    ("default_format", (1, 4, 4), (1, 4, 4), dict()),
    ("anchors_4d", (1, 6, 4), (1, 2, 3, 4), dict(format="corner")),
]


@pytest.mark.parametrize("name,dshape,ashape,kw", DECODE, ids=[c[0] for c in DECODE])
def test_box_decode(name, dshape, ashape, kw):
    shapes = {"data": dshape, "anchors": ashape}
    _run(mx.sym.contrib.box_decode(D, A, name="dec", **kw), shapes, _decode_inputs(shapes, kw.get("format", "center")))


# -- _contrib_box_encode -------------------------------------------------------------------


@pytest.mark.parametrize("b,n,m", [(1, 6, 3), (2, 5, 4)])
def test_box_encode(b, n, m):
    names = ["samples", "matches", "anchors", "refs", "means", "stds"]
    s, mt, a, r, mean, std = (mx.sym.Variable(x) for x in names)
    sym = mx.sym.contrib.box_encode(s, mt, a, r, mean, std, name="enc")
    shapes = {"samples": (b, n), "matches": (b, n), "anchors": (b, n, 4), "refs": (b, m, 4), "means": (4,), "stds": (4,)}

    def make() -> Dict[str, np.ndarray]:
        rng = np.random.RandomState(3)
        return {
            "samples": rng.choice([-1.0, 0.0, 1.0], (b, n)).astype(np.float32),
            "matches": rng.randint(0, m, (b, n)).astype(np.float32),
            "anchors": _boxes(rng, b * n, 0, 10).reshape(b, n, 4),
            "refs": _boxes(rng, b * m, 0, 10).reshape(b, m, 4),
            "means": np.array([0.0, 0.1, -0.1, 0.2], np.float32),
            "stds": np.array([0.1, 0.1, 0.2, 0.2], np.float32),
        }

    _run(sym, shapes, make)


# -- _contrib_MultiBoxPrior ----------------------------------------------------------------

PRIOR = [
    ("defaults", (1, 3, 4, 5), dict()),
    ("sizes_ratios", (1, 3, 5, 5), dict(sizes=(0.2, 0.35), ratios=(1, 2, 0.5))),
    ("steps_offsets", (2, 3, 3, 4), dict(sizes=(0.3,), ratios=(1, 3), steps=(0.25, 0.2), offsets=(0.3, 0.6))),
    ("clip", (1, 3, 3, 3), dict(sizes=(0.9, 1.2), ratios=(1, 2), clip=True)),
    ("not_square", (1, 2, 2, 7), dict(sizes=(0.5, 0.25), ratios=(1, 2, 0.5))),
]


@pytest.mark.parametrize("name,shape,kw", PRIOR, ids=[c[0] for c in PRIOR])
def test_multibox_prior(name, shape, kw):
    _run(mx.sym.contrib.MultiBoxPrior(D, name="prior", **kw), {"data": shape}, tol=(0.0, 1e-7))


# -- _contrib_ROIAlign / ROIPooling --------------------------------------------------------


def _roi_inputs(dshape: Tuple[int, ...], n: int, scale: float, seed: int = 2, batch_col=None,
                halves: bool = False) -> Callable[[], Dict[str, np.ndarray]]:
    """Data plus ROIs in image coordinates that reach beyond the feature map on every side."""

    def make() -> Dict[str, np.ndarray]:
        rng = np.random.RandomState(seed)
        h, w = dshape[2] / scale, dshape[3] / scale
        boxes = _boxes(rng, n, -0.2 * max(h, w), 1.1 * max(h, w), 0.1)
        boxes[0] = [0, 0, w - 1, h - 1]
        if n > 1:
            boxes[1] = [2.2 / scale, 1.5 / scale, 2.4 / scale, 1.6 / scale]  # smaller than a bin
        if halves:
            boxes = (np.round(boxes * scale * 2) / 2 / scale).astype(np.float32)  # x * scale on .5
        b = rng.randint(0, dshape[0], (n, 1)).astype(np.float32) if batch_col is None else np.asarray(batch_col, np.float32).reshape(n, 1)
        data = rng.uniform(-1, 1, dshape).astype(np.float32)
        return {"data": data, "rois": np.concatenate([b, boxes], axis=1)}

    return make


ALIGN = [
    ("rcnn_like", (1, 4, 8, 8), 6, dict(pooled_size=(3, 3), spatial_scale=0.0625, sample_ratio=2)),
    ("batch2", (2, 3, 9, 7), 5, dict(pooled_size=(2, 3), spatial_scale=0.5, sample_ratio=2)),
    ("ratio1_scale1", (1, 2, 6, 6), 4, dict(pooled_size=(2, 2), spatial_scale=1.0, sample_ratio=1)),
    ("ratio3", (2, 2, 5, 8), 4, dict(pooled_size=(4, 2), spatial_scale=0.25, sample_ratio=3)),
    ("aligned", (1, 3, 8, 8), 5, dict(pooled_size=(2, 2), spatial_scale=0.125, sample_ratio=2, aligned=True)),
    ("aligned_batch3", (3, 2, 6, 7), 6, dict(pooled_size=(3, 2), spatial_scale=0.5, sample_ratio=2, aligned=True)),
]


@pytest.mark.parametrize("name,dshape,n,kw", ALIGN, ids=[c[0] for c in ALIGN])
def test_roi_align(name, dshape, n, kw):
    shapes = {"data": dshape, "rois": (n, 5)}
    _run(mx.sym.contrib.ROIAlign(D, R, name="ra", **kw), shapes, _roi_inputs(dshape, n, kw["spatial_scale"]))


def test_roi_align_adaptive_grid_stays_native():
    sym = mx.sym.contrib.ROIAlign(D, R, pooled_size=(2, 2), spatial_scale=1.0, name="ra")
    graph = symbol_to_graph(sym, {"data": (1, 2, 6, 6), "rois": (3, 5)})
    reason = registry.check(op_spec(graph, graph.op_nodes()[-1], {}))
    assert reason and "sample_ratio" in reason


POOL = [
    ("scale1", (1, 3, 8, 8), 5, dict(pooled_size=(2, 2), spatial_scale=1.0), None),
    ("scale_half_rounding", (1, 2, 9, 9), 6, dict(pooled_size=(3, 2), spatial_scale=0.5), None),
    ("batch2", (2, 3, 7, 6), 5, dict(pooled_size=(2, 3), spatial_scale=0.25), None),
    ("invalid_batch", (2, 2, 6, 6), 4, dict(pooled_size=(2, 2), spatial_scale=1.0), [0, -1, 2, 1]),
    ("invalid_batch_single", (1, 2, 6, 6), 3, dict(pooled_size=(2, 2), spatial_scale=1.0), [-1, 0, 1]),
    ("pooled_big", (1, 2, 4, 4), 3, dict(pooled_size=(6, 5), spatial_scale=1.0), None),
]


@pytest.mark.parametrize("name,dshape,n,kw,bcol", POOL, ids=[c[0] for c in POOL])
def test_roi_pooling(name, dshape, n, kw, bcol):
    shapes = {"data": dshape, "rois": (n, 5)}
    inputs = _roi_inputs(dshape, n, kw["spatial_scale"], batch_col=bcol, halves=True)
    _run(mx.sym.ROIPooling(D, R, name="rp", **kw), shapes, inputs, tol=(0.0, 0.0))


def test_roi_pooling_too_large_stays_native():
    sym = mx.sym.ROIPooling(D, R, pooled_size=(7, 7), spatial_scale=0.0625, name="rp")
    graph = symbol_to_graph(sym, {"data": (1, 1024, 64, 64), "rois": (300, 5)})
    reason = registry.check(op_spec(graph, graph.op_nodes()[-1], {}))
    assert reason and "elements" in reason


# -- _contrib_AdaptiveAvgPooling2D ---------------------------------------------------------

ADAPTIVE = [
    ("psp_1", (1, 3, 16, 16), 1),
    ("psp_2", (1, 3, 16, 16), 2),
    ("psp_3", (1, 3, 16, 16), 3),
    ("psp_6", (2, 3, 16, 16), 6),
    ("rect_nondivisible", (2, 3, 7, 5), (3, 2)),
    ("one_axis_same", (1, 2, 9, 4), (4, 4)),
    ("larger_than_input", (1, 2, 5, 3), (7, 4)),
    ("divisible_rect", (1, 2, 8, 6), (4, 3)),
]


@pytest.mark.parametrize("name,shape,size", ADAPTIVE, ids=[c[0] for c in ADAPTIVE])
def test_adaptive_avg_pooling(name, shape, size):
    _run(mx.sym.contrib.AdaptiveAvgPooling2D(D, output_size=size, name="aap"), {"data": shape})


# -- _contrib_BilinearResize2D -------------------------------------------------------------

RESIZE = [
    ("fcn_up8", (1, 3, 16, 16), dict(height=128, width=128)),
    ("psp_from_1x1", (2, 3, 1, 1), dict(height=16, width=16)),
    ("psp_from_3x3", (1, 3, 3, 3), dict(height=16, width=16)),
    ("down", (1, 2, 9, 11), dict(height=4, width=5)),
    ("down_no_align", (1, 2, 9, 11), dict(height=4, width=5, align_corners=False)),
    ("up_no_align", (2, 2, 5, 4), dict(height=11, width=9, align_corners=False)),
    ("one_axis_same", (1, 2, 5, 4), dict(height=5, width=9)),
    ("same", (1, 2, 5, 4), dict(height=5, width=4)),
    ("to_one_row", (1, 2, 5, 4), dict(height=1, width=7)),
    ("to_one_row_no_align", (1, 2, 5, 4), dict(height=1, width=7, align_corners=False)),
    ("to_1x1", (1, 2, 5, 4), dict(height=1, width=1)),
    ("from_one_col_no_align", (1, 2, 3, 1), dict(height=6, width=5, align_corners=False)),
    ("scale", (1, 2, 6, 5), dict(scale_height=2.0, scale_width=1.5)),
    ("scale_no_align", (1, 2, 6, 5), dict(scale_height=0.5, scale_width=2.5, align_corners=False)),
    ("odd_scale", (1, 2, 7, 6), dict(mode="odd_scale", scale_height=2.0, scale_width=2.0)),
    ("to_even_down", (1, 2, 7, 6), dict(mode="to_even_down")),
    ("to_even_up", (1, 2, 7, 6), dict(mode="to_even_up")),
    ("to_odd_down", (1, 2, 7, 6), dict(mode="to_odd_down", align_corners=False)),
    ("to_odd_up", (1, 2, 7, 6), dict(mode="to_odd_up")),
]


@pytest.mark.parametrize("name,shape,kw", RESIZE, ids=[c[0] for c in RESIZE])
def test_bilinear_resize(name, shape, kw):
    _run(mx.sym.contrib.BilinearResize2D(D, name="rs", **kw), {"data": shape})


@pytest.mark.parametrize("align", [True, False])
def test_bilinear_resize_like(align):
    like = mx.sym.Variable("like")
    sym = mx.sym.contrib.BilinearResize2D(D, like, mode="like", align_corners=align, name="rs")
    _run(sym, {"data": (1, 3, 6, 5), "like": (1, 1, 13, 8)})


# -- UpSampling (moved to pooling.py) -------------------------------------------------------


@pytest.mark.parametrize("sample_type,scale", [("nearest", 2), ("nearest", 3), ("bilinear", 2), ("bilinear", 4)])
def test_upsampling(sample_type, scale):
    kw = dict(num_filter=3) if sample_type == "bilinear" else {}
    _run(mx.sym.UpSampling(D, scale=scale, sample_type=sample_type, name="up", **kw), {"data": (1, 3, 4, 5)})


# -- I3D-style 3-D layers --------------------------------------------------------------------

W3 = mx.sym.Variable("w")


def _i3d_stem(data=D):
    c = mx.sym.Convolution(data, kernel=(5, 7, 7), stride=(2, 2, 2), pad=(2, 3, 3), num_filter=4, no_bias=True, name="c1")
    b = mx.sym.BatchNorm(c, fix_gamma=False, eps=1e-5, name="bn1")
    r = mx.sym.Activation(b, act_type="relu", name="r1")
    p = mx.sym.Pooling(r, kernel=(1, 3, 3), stride=(2, 2, 2), pad=(0, 1, 1), pool_type="max", name="p1")
    c2 = mx.sym.Convolution(p, kernel=(3, 1, 1), pad=(1, 0, 0), num_filter=4, name="c2")
    b2 = mx.sym.BatchNorm(c2, fix_gamma=True, name="bn2")
    p2 = mx.sym.Pooling(b2, kernel=(2, 1, 1), stride=(2, 1, 1), pool_type="max", name="p2")
    return mx.sym.Pooling(p2, kernel=(1, 1, 1), global_pool=True, pool_type="avg", name="gap")


def test_i3d_stem():
    _run(_i3d_stem(), {"data": (1, 3, 8, 16, 16)})


# -- TensorRT-RTX build gate ------------------------------------------------------------------


def _gate_cases() -> Dict[str, Tuple[Any, Dict[str, Tuple[int, ...]], str]]:
    """name -> (symbol, input shapes, the op that must land in a subgraph)."""
    feat = mx.sym.Convolution(D, kernel=(3, 3), pad=(1, 1), num_filter=4, name="conv")
    return {
        "box_decode": (mx.sym.contrib.box_decode(mx.sym.sigmoid(D), A, std0=0.1, std1=0.1, std2=0.2, std3=0.2,
                                                 clip=4.0, format="corner", name="op"),
                       {"data": (1, 6, 4), "anchors": (1, 6, 4)}, "_contrib_box_decode"),
        "box_encode": (mx.sym.contrib.box_encode(mx.sym.Variable("s"), mx.sym.Variable("m"), A, mx.sym.Variable("r"),
                                                 mx.sym.Variable("mean"), mx.sym.Variable("std"), name="op"),
                       {"s": (1, 5), "m": (1, 5), "anchors": (1, 5, 4), "r": (1, 3, 4)},
                       "_contrib_box_encode"),
        "multibox_prior": (mx.sym.contrib.MultiBoxPrior(feat, sizes=(0.2, 0.4), ratios=(1, 2), name="op") + 0,
                           {"data": (1, 3, 4, 4)}, "_contrib_MultiBoxPrior"),
        "roi_align": (mx.sym.contrib.ROIAlign(feat, R, pooled_size=(3, 3), spatial_scale=0.5, sample_ratio=2, name="op"),
                      {"data": (2, 3, 8, 8), "rois": (4, 5)}, "_contrib_ROIAlign"),
        "roi_align_single_image": (mx.sym.contrib.ROIAlign(feat, R, pooled_size=(2, 2), spatial_scale=0.5, sample_ratio=2,
                                                           aligned=True, name="op"),
                                   {"data": (1, 3, 8, 8), "rois": (4, 5)}, "_contrib_ROIAlign"),
        "roi_pooling": (mx.sym.ROIPooling(feat, R, pooled_size=(2, 2), spatial_scale=0.5, name="op"),
                        {"data": (2, 3, 8, 8), "rois": (3, 5)}, "ROIPooling"),
        "adaptive_avg_nondivisible": (mx.sym.contrib.AdaptiveAvgPooling2D(feat, output_size=3, name="op"),
                                      {"data": (1, 3, 8, 8)}, "_contrib_AdaptiveAvgPooling2D"),
        "adaptive_avg_divisible": (mx.sym.contrib.AdaptiveAvgPooling2D(feat, output_size=(4, 2), name="op"),
                                   {"data": (1, 3, 8, 8)}, "_contrib_AdaptiveAvgPooling2D"),
        "adaptive_avg_global": (mx.sym.contrib.AdaptiveAvgPooling2D(feat, output_size=1, name="op"),
                                {"data": (1, 3, 8, 8)}, "_contrib_AdaptiveAvgPooling2D"),
        "resize_align": (mx.sym.contrib.BilinearResize2D(feat, height=16, width=12, name="op"),
                         {"data": (2, 3, 8, 8)}, "_contrib_BilinearResize2D"),
        "resize_half_pixel": (mx.sym.contrib.BilinearResize2D(feat, height=5, width=13, align_corners=False, name="op"),
                              {"data": (2, 3, 8, 8)}, "_contrib_BilinearResize2D"),
        "resize_one_row_align": (mx.sym.contrib.BilinearResize2D(feat, height=1, width=13, name="op"),
                                 {"data": (1, 3, 8, 8)}, "_contrib_BilinearResize2D"),
        "resize_from_1x1": (mx.sym.contrib.BilinearResize2D(mx.sym.contrib.AdaptiveAvgPooling2D(feat, output_size=1),
                                                            height=8, width=8, name="op"),
                            {"data": (1, 3, 8, 8)}, "_contrib_BilinearResize2D"),
        "resize_like": (mx.sym.contrib.BilinearResize2D(feat, mx.sym.Variable("like"), mode="like", name="op"),
                        {"data": (1, 3, 8, 8), "like": (1, 1, 11, 6)}, "_contrib_BilinearResize2D"),
        "upsampling_bilinear": (mx.sym.UpSampling(feat, scale=2, sample_type="bilinear", num_filter=4, name="op"),
                                {"data": (1, 3, 4, 4)}, "UpSampling"),
        "upsampling_nearest": (mx.sym.UpSampling(feat, scale=2, sample_type="nearest", name="op"),
                               {"data": (1, 3, 4, 4)}, "UpSampling"),
        "i3d_stem": (_i3d_stem(), {"data": (1, 3, 8, 16, 16)}, "Pooling"),
    }


GATE = sorted(_gate_cases())


@pytest.mark.parametrize("fp16", [False, True], ids=["fp32", "fp16"])
@pytest.mark.parametrize("name", GATE)
def test_trt_rtx_gate(name, fp16, monkeypatch):
    from mx_trt.builder.backends.tensorrt import TensorRTRTXBackend
    from mx_trt.pipeline.plan import analyze
    from mx_trt.pipeline.request import BindRequest
    from mx_trt.settings import Settings
    from tests.builder.test_trt_rtx_gate import gate

    # Every subgraph becomes an engine, however small (single-op graphs included).
    monkeypatch.setenv("MXNET_TENSORRT_ENGINE_RULE", "always")
    monkeypatch.setenv("MXNET_TENSORRT_MIN_SUBGRAPH_SIZE", "1")
    backend = TensorRTRTXBackend()
    reason = backend.build_unavailable_reason()
    assert reason is None, reason
    sym, shapes, op = _gate_cases()[name]
    args, aux = random_params(sym, shapes)
    params = {**args, **aux}
    plan = analyze(BindRequest(sym, shapes, params, Settings.from_env(), backend))
    in_engine = {plan.graph.nodes[i].op for sg in plan.partition.subgraphs for i in sg.nodes}
    native = {plan.graph.nodes[i].op: why for i, why in plan.reasons.items()}
    assert op in in_engine, f"{op} stayed native: {native.get(op)}"
    ops = {n["op"] for n in json.loads(sym.tojson())["nodes"] if n["op"] != "null"}
    assert ops <= in_engine, f"native: {native}"
    assert gate(name, sym, shapes, params, backend, fp16)["subgraphs"] >= 1
