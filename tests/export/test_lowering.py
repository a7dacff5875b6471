"""``RoiAlign`` in the export and TensorRT's lowered form of it (mx_trt/export/lowering.py), against MXNet 1.9.1.

The export of ``_contrib_ROIAlign`` is ONNX's ``RoiAlign``; each case runs it in
ONNX Runtime and in OpenVINO (both CPU backends' own builds), and the copy
:func:`lower_roi_align` gives TensorRT in ONNX Runtime, against MXNet's output
(fp32: ``atol 1e-5``, ``rtol 1e-4``). The cases reach past the feature map, hold
ROIs smaller than a bin and ROIs of invalid images (batch index -1 or past the
batch: MXNet's GPU kernel zeroes their rows; its CPU kernel leaves them unwritten,
or reads out of bounds, and zeroes element ``n`` of the flat output instead for an
invalid ROI ``n``. Those rows must be zeros and every other element MXNet's), and
cover both ``aligned`` modes and sampling grids of 1-3.
"""
from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

import mxnet as mx
import numpy as np
import pytest

from mx_trt.builder.backends.base import Buffer, BuildOptions
from mx_trt.errors import EngineBuildError
from mx_trt.export.lowering import lower_roi_align
from mx_trt.export.precision import to_fp16
from mx_trt.export.subgraph import ExportedSubgraph, embedded_model, export_subgraph
from mx_trt.graph.importer import symbol_to_graph
from mx_trt.passes.ir import Entry
from tests.harness.mxcheck import run_native

RTOL, ATOL = 1e-4, 1e-5

CASES = [
    # name, data shape, ROIs, ROIAlign attributes, batch column (None: random valid images)
    ("rcnn_like", (1, 4, 12, 16), 7, dict(pooled_size=(3, 3), spatial_scale=0.0625, sample_ratio=2), None),
    ("batch2_invalid", (2, 3, 9, 7), 6, dict(pooled_size=(2, 3), spatial_scale=0.5, sample_ratio=2),
     [0, -1, 1, 2, 1, 0]),
    ("single_invalid", (1, 2, 8, 8), 4, dict(pooled_size=(2, 2), spatial_scale=1.0, sample_ratio=1), [0, -1, 0, 1]),
    ("ratio3", (2, 2, 5, 8), 5, dict(pooled_size=(4, 2), spatial_scale=0.25, sample_ratio=3), None),
    ("aligned", (1, 3, 8, 8), 5, dict(pooled_size=(2, 2), spatial_scale=0.125, sample_ratio=2, aligned=True), None),
    ("aligned_batch3", (3, 2, 6, 7), 6, dict(pooled_size=(3, 2), spatial_scale=0.5, sample_ratio=2, aligned=True),
     [2, 0, 1, 3, 0, 2]),
]


def _inputs(dshape: Tuple[int, ...], n: int, scale: float, batch_col: Any, seed: int = 3) -> Dict[str, np.ndarray]:
    rng = np.random.RandomState(seed)
    h, w = dshape[2] / scale, dshape[3] / scale
    p = rng.uniform(-0.2 * max(h, w), 1.1 * max(h, w), (n, 2))
    s = rng.uniform(0.1, 0.6 * max(h, w), (n, 2))
    boxes = np.concatenate([p, p + s], axis=1)
    boxes[0] = [0, 0, w - 1, h - 1]
    boxes[1] = [2.2 / scale, 1.5 / scale, 2.4 / scale, 1.6 / scale]  # smaller than a bin
    b = (rng.randint(0, dshape[0], n) if batch_col is None else np.asarray(batch_col)).reshape(n, 1)
    return {"data": rng.uniform(-1, 1, dshape).astype(np.float32),
            "rois": np.concatenate([b, boxes], axis=1).astype(np.float32)}


def _export(sym: Any, shapes: Dict[str, Tuple[int, ...]]) -> ExportedSubgraph:
    g = symbol_to_graph(sym, shapes)
    ins = [Entry(n.id, 0) for n in g.nodes if n.is_variable]
    return export_subgraph(g, g.op_nodes(), ins, list(g.heads), {})


def _reference(sym: Any, shapes: Dict[str, Tuple[int, ...]], feeds: Dict[str, np.ndarray]) -> List[np.ndarray]:
    """MXNet's output; NaN in the rows of ROIs of an invalid image (what :func:`_close` wants as zeros), and
    ``inf`` at the flat element ``n`` MXNet's CPU kernel zeroes for each invalid ROI ``n`` (not compared)."""
    out = [np.array(o) for o in run_native(sym, shapes, {}, {}, feeds)]
    b = feeds["rois"][:, 0]
    invalid = (b <= -1) | (b >= shapes["data"][0])
    out[0].reshape(-1)[np.flatnonzero(b < 0)] = np.inf
    out[0][invalid] = np.nan
    return out


def _case(name: str) -> Tuple[ExportedSubgraph, Dict[str, np.ndarray], List[np.ndarray]]:
    _, dshape, n, kw, bcol = next(c for c in CASES if c[0] == name)
    sym = mx.sym.contrib.ROIAlign(mx.sym.Variable("data"), mx.sym.Variable("rois"), name="ra", **kw)
    shapes = {"data": dshape, "rois": (n, 5)}
    feeds = _inputs(dshape, n, kw["spatial_scale"], bcol)
    return _export(sym, shapes), feeds, _reference(sym, shapes, feeds)


def _ort(exported: ExportedSubgraph, feeds: Dict[str, np.ndarray]) -> List[np.ndarray]:
    import onnxruntime as ort

    sess = ort.InferenceSession(embedded_model(exported).SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(exported.output_names, {k: feeds[k] for k in exported.input_names})


def _engine(backend: Any, exported: ExportedSubgraph, feeds: Dict[str, np.ndarray]) -> List[np.ndarray]:
    engine = backend.build(exported, BuildOptions(name="roi_align"))
    xs = [np.ascontiguousarray(feeds[k]) for k in exported.input_names]
    outs = [np.empty(t.shape, dtype=t.dtype) for t in engine.outputs]
    engine.run([Buffer(int(x.ctypes.data), x.shape, x.dtype.name) for x in xs],
               [Buffer(int(o.ctypes.data), o.shape, o.dtype.name) for o in outs])
    return outs


def _close(got: Sequence[np.ndarray], ref: Sequence[np.ndarray], rtol: float = RTOL, atol: float = ATOL) -> None:
    """``got`` against MXNet's ``ref``; zeros where ``ref`` is NaN (ROIs of invalid images)."""
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        assert g.shape == r.shape and g.dtype == r.dtype
        invalid, compared = np.isnan(r), np.isfinite(r)
        assert np.all(g[invalid] == 0)
        np.testing.assert_allclose(g[compared], r[compared], rtol=rtol, atol=atol)


NAMES = [c[0] for c in CASES]


@pytest.mark.parametrize("name", NAMES)
def test_export_is_onnx_roi_align(name):
    exported, feeds, ref = _case(name)
    assert [n.op_type for n in exported.model.graph.node].count("RoiAlign") == 1
    _close(_ort(exported, feeds), ref)


@pytest.mark.parametrize("name", NAMES)
def test_openvino_runs_it_as_mxnet_does(name):
    from mx_trt.builder.backends.openvino import OpenVinoBackend

    reason = OpenVinoBackend.unavailable_reason()
    assert reason is None, reason  # make test installs it
    exported, feeds, ref = _case(name)
    _close(_engine(OpenVinoBackend(), exported, feeds), ref)


@pytest.mark.parametrize("name", NAMES)
def test_lowered_for_tensorrt(name):
    exported, feeds, ref = _case(name)
    lowered = lower_roi_align(exported)
    ops = [n.op_type for n in lowered.model.graph.node]
    assert "RoiAlign" not in ops and "MatMul" in ops
    assert [n.op_type for n in exported.model.graph.node].count("RoiAlign") == 1  # the export is not changed
    assert all(lowered.origin.get(n.name) == "ra" for n in lowered.model.graph.node if n.op_type == "MatMul")
    assert not {i.name for i in lowered.model.graph.initializer} - {i.name for i in exported.model.graph.initializer}
    _close(_ort(lowered, feeds), ref)


def test_without_roi_align_is_the_same_export():
    sym = mx.sym.relu(mx.sym.Variable("data"), name="r")
    exported = _export(sym, {"data": (1, 3)})
    assert lower_roi_align(exported) is exported


def test_fp16_export_keeps_roi_align_float32():
    exported, feeds, ref = _case("rcnn_like")
    half = to_fp16(exported)
    ra = next(n for n in half.model.graph.node if n.op_type == "RoiAlign")
    producers = {o: n for n in half.model.graph.node for o in n.output}
    assert all(producers[x].op_type == "Cast" and producers[x].attribute[0].i == 1 for x in ra.input[:2])
    lowered = lower_roi_align(half)
    ops = [n.op_type for n in lowered.model.graph.node]
    assert "RoiAlign" not in ops and "Gather" not in ops and "Pad" not in ops  # the feature map, not a copy per ROI
    # float16 inside: MXNet's values within float16 rounding
    _close(_ort(lowered, feeds), ref, rtol=1e-2, atol=2e-2)


def test_a_roi_align_it_cannot_write_out_is_a_typed_error():
    from onnx import helper

    exported, _, _ = _case("rcnn_like")
    ra = next(n for n in exported.model.graph.node if n.op_type == "RoiAlign")
    ra.attribute.append(helper.make_attribute("mode", "max"))
    with pytest.raises(EngineBuildError, match="only mode 'avg'"):
        lower_roi_align(exported)


def test_older_opset_exports_matmul():
    from mx_trt.export.converters.vision import ROI_ALIGN_OPSET

    _, dshape, n, kw, bcol = CASES[1]
    sym = mx.sym.contrib.ROIAlign(mx.sym.Variable("data"), mx.sym.Variable("rois"), name="ra", **kw)
    shapes = {"data": dshape, "rois": (n, 5)}
    g = symbol_to_graph(sym, shapes)
    ins = [Entry(x.id, 0) for x in g.nodes if x.is_variable]
    exported = export_subgraph(g, g.op_nodes(), ins, list(g.heads), {}, opset=ROI_ALIGN_OPSET - 1)
    assert "RoiAlign" not in [x.op_type for x in exported.model.graph.node]
    feeds = _inputs(dshape, n, kw["spatial_scale"], bcol)
    _close(_ort(exported, feeds), _reference(sym, shapes, feeds))


def test_lowered_single_image_reads_the_feature_map_without_a_gather():
    # The export's image of zeros (a Pad to batch 2) must not make TensorRT's form gather a copy of the
    # feature map per ROI: it reads the feature map itself, as for one image, and masks invalid ROIs.
    exported, feeds, ref = _case("single_invalid")
    assert "Pad" in [n.op_type for n in exported.model.graph.node]
    lowered = lower_roi_align(exported)
    ops = [n.op_type for n in lowered.model.graph.node]
    assert "Gather" not in ops and "Pad" not in ops
    _close(_ort(lowered, feeds), ref)
