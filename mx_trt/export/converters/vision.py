"""Converters for vision operators: box coding, ROI pooling and anchors (the detection
post-processing that follows them is in :mod:`.detection`).

``ROIAlign`` becomes ONNX's own ``RoiAlign`` (opset 16 and later, float32), one kernel
in ONNX Runtime and OpenVINO that samples each bin where MXNet does. TensorRT's parser
takes ``RoiAlign`` only through NVIDIA's plugin library, which TensorRT-RTX does not
have, so the TensorRT backends write it out before parsing
(:func:`mx_trt.export.lowering.lower_roi_align`) with :func:`roi_align_matmul`, which
is also the export at older opsets and in float16: the sampling positions of every
ROI are computed in the graph, turned into per-axis weight matrices, and applied to
the feature map with ``MatMul`` (bilinear sampling is separable). That costs
``R * C * H * W * pooled`` multiply-adds where the kernel's are about
``R * C * pooled^2 * samples``: for 1000 ROIs over FPN's 120x160 level of 256
channels, 34 G against 0.2 G. ``ROIPooling`` is written with plain operators too:
masked ``ReduceMax``, whose max over a rectangle is a max over rows of maxima over
columns.
"""
from __future__ import annotations

import logging
from typing import List, Optional, Tuple

import numpy as np

from mx_trt.export.converters.common import (
    attr_float,
    attr_int,
    attr_str,
    check_float,
    check_outputs,
    dtype_of,
    int64s,
    scalar,
)
from mx_trt.export.converters.registry import ConvContext, register
from mx_trt.export.spec import OpSpec

logger = logging.getLogger(__name__)

#: Largest masked intermediate (elements) ROIPooling may build.
ROI_POOL_MAX_ELEMENTS = 1 << 26


# -- small emission helpers ----------------------------------------------------------------


def _col(ctx: ConvContext, x: str, start: int, end: int, axis: int = -1) -> str:
    """``x[..., start:end]`` along ``axis``."""
    return ctx.emit("Slice", [x, int64s(ctx, [start], "s"), int64s(ctx, [end], "e"), int64s(ctx, [axis], "ax")])[0]


def _columns(ctx: ConvContext, x: str, n: int) -> List[str]:
    """The ``n`` last-axis columns of ``x``, each keeping a length-1 last axis."""
    return [_col(ctx, x, i, i + 1) for i in range(n)]


def _bin(ctx: ConvContext, op: str, a: str, b: str) -> str:
    return ctx.emit(op, [a, b])[0]


def _unsqueeze(ctx: ConvContext, x: str, axes: List[int]) -> str:
    return ctx.emit("Unsqueeze", [x, int64s(ctx, axes, "axes")])[0]


def _check_all_float(spec: OpSpec) -> Optional[str]:
    for i in range(len(spec.in_dtypes)):
        r = check_float(spec, i)
        if r:
            return r
    if len(set(spec.in_dtypes)) != 1:
        return f"inputs have different dtypes {sorted(set(spec.in_dtypes))}"
    return None


# -- _contrib_box_decode ------------------------------------------------------------------


def _check_box_decode(spec: OpSpec) -> Optional[str]:
    r = _check_all_float(spec) or check_outputs(spec, 1)
    if r:
        return r
    d, a = spec.in_shapes[0], spec.in_shapes[1]
    if len(d) != 3 or d[2] != 4:
        return f"data must have shape (batch, n, 4), got {d}"
    if len(a) < 3 or a[-1] != 4:
        return f"anchors must have at least 3 dimensions and a last dimension of 4, got {a}"
    if int(np.prod(a)) != d[1] * 4:
        return f"anchors {a} do not hold exactly the {d[1]} boxes of the data (MXNet reads them as (1, {d[1]}, 4))"
    fmt = attr_str(spec, "format", "center")
    if fmt not in ("center", "corner"):
        return f"format {fmt!r} is not 'center' or 'corner'"
    return None


@register("_contrib_box_decode", validator=_check_box_decode)
def _box_decode(ctx: ConvContext) -> None:
    """MXNet's kernel, term by term; the anchors, read as ``(1, n, 4)``, decode every batch row."""
    spec = ctx.spec
    anchors = ctx.emit("Reshape", [ctx.inputs[1], int64s(ctx, [-1, 4], "shape")])[0]
    a0, a1, a2, a3 = _columns(ctx, anchors, 4)
    half = scalar(ctx, 0.5, "half")
    if attr_str(spec, "format", "center") == "corner":
        aw = _bin(ctx, "Sub", a2, a0)
        ah = _bin(ctx, "Sub", a3, a1)
        ax = _bin(ctx, "Add", a0, _bin(ctx, "Mul", aw, half))
        ay = _bin(ctx, "Add", a1, _bin(ctx, "Mul", ah, half))
    else:
        ax, ay, aw, ah = a0, a1, a2, a3
    x0, x1, x2, x3 = _columns(ctx, ctx.inputs[0], 4)
    stds = [scalar(ctx, attr_float(spec, f"std{i}", 1.0), f"std{i}") for i in range(4)]
    ox = _bin(ctx, "Add", _bin(ctx, "Mul", _bin(ctx, "Mul", x0, stds[0]), aw), ax)
    oy = _bin(ctx, "Add", _bin(ctx, "Mul", _bin(ctx, "Mul", x1, stds[1]), ah), ay)
    dw = _bin(ctx, "Mul", x2, stds[2])
    dh = _bin(ctx, "Mul", x3, stds[3])
    clip = attr_float(spec, "clip", -1.0)
    if clip > 0:
        c = scalar(ctx, clip, "clip")
        dw, dh = _bin(ctx, "Min", dw, c), _bin(ctx, "Min", dh, c)
    ow = _bin(ctx, "Mul", _bin(ctx, "Mul", ctx.emit("Exp", [dw])[0], aw), half)
    oh = _bin(ctx, "Mul", _bin(ctx, "Mul", ctx.emit("Exp", [dh])[0], ah), half)
    parts = [_bin(ctx, "Sub", ox, ow), _bin(ctx, "Sub", oy, oh), _bin(ctx, "Add", ox, ow), _bin(ctx, "Add", oy, oh)]
    ctx.emit("Concat", parts, ctx.outputs, axis=-1)


# -- _contrib_box_encode ------------------------------------------------------------------


def _check_box_encode(spec: OpSpec) -> Optional[str]:
    r = _check_all_float(spec) or check_outputs(spec, 2)
    if r:
        return r
    s, m, a, ref, means, stds = spec.in_shapes
    if len(a) != 3 or a[2] != 4:
        return f"anchors must have shape (batch, n, 4), got {a}"
    b, n = a[0], a[1]
    if tuple(s) != (b, n) or tuple(m) != (b, n):
        return f"samples {s} and matches {m} must have shape {(b, n)}"
    if len(ref) != 3 or ref[0] != b or ref[2] != 4:
        return f"refs must have shape ({b}, m, 4), got {ref}"
    if tuple(means) != (4,) or tuple(stds) != (4,):
        return f"means {means} and stds {stds} must have shape (4,)"
    return None


@register("_contrib_box_encode", validator=_check_box_encode)
def _box_encode(ctx: ConvContext) -> None:
    """Targets of matched anchors, 0 elsewhere; masks are 1 where ``samples > 0.5``.

    A valid sample whose match lies outside ``refs`` makes MXNet read outside the
    array; here the match is clamped into range instead.
    """
    spec = ctx.spec
    samples, matches, anchors, refs, means, stds = ctx.inputs
    m = spec.in_shapes[3][1]
    idx = ctx.emit("Cast", [matches], to=7)[0]  # INT64, truncating like MXNet's index_t cast
    idx = ctx.emit("Clip", [idx, ctx.const(np.asarray(0, np.int64), "lo"), ctx.const(np.asarray(m - 1, np.int64), "hi")])[0]
    idx = _unsqueeze(ctx, idx, [2])
    idx = ctx.emit("Expand", [idx, ctx.emit("Shape", [anchors])[0]])[0]
    ref = ctx.emit("GatherElements", [refs, idx], axis=1)[0]
    half = scalar(ctx, 0.5, "half")

    def centers(boxes: str) -> Tuple[str, str, str, str]:
        x0, y0, x1, y1 = _columns(ctx, boxes, 4)
        w, h = _bin(ctx, "Sub", x1, x0), _bin(ctx, "Sub", y1, y0)
        return _bin(ctx, "Add", x0, _bin(ctx, "Mul", w, half)), _bin(ctx, "Add", y0, _bin(ctx, "Mul", h, half)), w, h

    rx, ry, rw, rh = centers(ref)
    ax, ay, aw, ah = centers(anchors)
    t = ctx.emit("Concat", [
        _bin(ctx, "Div", _bin(ctx, "Sub", rx, ax), aw),
        _bin(ctx, "Div", _bin(ctx, "Sub", ry, ay), ah),
        ctx.emit("Log", [_bin(ctx, "Div", rw, aw)])[0],
        ctx.emit("Log", [_bin(ctx, "Div", rh, ah)])[0],
    ], axis=-1)[0]
    t = _bin(ctx, "Div", _bin(ctx, "Sub", t, means), stds)
    valid = _unsqueeze(ctx, _bin(ctx, "Greater", samples, half), [2])
    valid = ctx.emit("Expand", [valid, ctx.emit("Shape", [anchors])[0]])[0]
    ctx.emit("Where", [valid, t, scalar(ctx, 0.0, "zero")], [ctx.outputs[0]])
    ctx.emit("Cast", [valid], [ctx.outputs[1]], to=_onnx_float(spec))


def _onnx_float(spec: OpSpec, i: int = 0) -> int:
    """ONNX TensorProto type of float input ``i`` (FLOAT or FLOAT16)."""
    return 10 if spec.in_dtypes[i] == "float16" else 1


# -- _contrib_MultiBoxPrior ---------------------------------------------------------------


def _prior_floats(spec: OpSpec, key: str, default: Tuple[float, ...]) -> Tuple[float, ...]:
    t = spec.tuple_(key)
    return default if t is None else tuple(float(v) for v in t)


def _check_multibox_prior(spec: OpSpec) -> Optional[str]:
    r = check_float(spec) or check_outputs(spec, 1)
    if r:
        return r
    if len(spec.in_shapes[0]) != 4:
        return f"data must be 4-D, got {spec.in_shapes[0]}"
    sizes = _prior_floats(spec, "sizes", (1.0,))
    ratios = _prior_floats(spec, "ratios", (1.0,))
    steps = _prior_floats(spec, "steps", (-1.0, -1.0))
    offsets = _prior_floats(spec, "offsets", (0.5, 0.5))
    if not sizes or not ratios:
        return "sizes and ratios must not be empty"
    if len(steps) != 2 or len(offsets) != 2:
        return f"steps {steps} and offsets {offsets} must have two values"
    return None


def multibox_prior(spec: OpSpec) -> np.ndarray:
    """MXNet's anchors, computed in float32 in the kernel's order of operations."""
    f = np.float32
    _, _, h, w = spec.in_shapes[0]
    sizes = [f(v) for v in _prior_floats(spec, "sizes", (1.0,))]
    ratios = [f(v) for v in _prior_floats(spec, "ratios", (1.0,))]
    steps = [f(v) for v in _prior_floats(spec, "steps", (-1.0, -1.0))]
    offsets = [f(v) for v in _prior_floats(spec, "offsets", (0.5, 0.5))]
    if steps[0] <= 0 or steps[1] <= 0:
        steps = [f(1.0) / f(h), f(1.0) / f(w)]
    rows = []
    # One anchor per size with the first ratio, then one per further ratio with sizes[0].
    shapes = [(s, np.sqrt(ratios[0])) for s in sizes] + [(sizes[0], np.sqrt(r)) for r in ratios[1:]]
    half = [(s * f(h) / f(w) * r / f(2), s / r / f(2)) for s, r in shapes]
    for r in range(h):
        cy = (f(r) + offsets[0]) * steps[0]
        for c in range(w):
            cx = (f(c) + offsets[1]) * steps[1]
            for bw, bh in half:
                rows.append((cx - bw, cy - bh, cx + bw, cy + bh))
    out = np.asarray(rows, dtype=np.float32).reshape(1, -1, 4)
    if spec.bool_("clip", False):
        out = np.clip(out, 0, 1)
    return out


@register("_contrib_MultiBoxPrior", "_npx_multibox_prior", validator=_check_multibox_prior)
def _multibox_prior(ctx: ConvContext) -> None:
    """Anchors depend on the input's spatial shape only: a constant."""
    value = multibox_prior(ctx.spec).astype(np.dtype(ctx.spec.out_dtypes[0]))
    ctx.emit("Identity", [ctx.const(value, "anchors")], ctx.outputs)


# -- ROIAlign / ROIPooling: per-ROI coordinates ---------------------------------------------


def _roi_parts(ctx: ConvContext, rois: str) -> Tuple[str, List[str]]:
    """(batch column, [x1, y1, x2, y2]) of an (R, 5) ROI tensor, each (R, 1)."""
    parts = _columns(ctx, rois, 5)
    return parts[0], parts[1:]


def _invalid_batch(ctx: ConvContext, batch: str, nbatch: int) -> str:
    """(R, 1) mask of the ROIs whose batch index (MXNet truncates it to an int) is below 0 or past the batch."""
    return ctx.emit("Or", [
        _bin(ctx, "LessOrEqual", batch, scalar(ctx, -1.0, "minus1", 1)),
        _bin(ctx, "GreaterOrEqual", batch, scalar(ctx, float(nbatch), "nbatch", 1)),
    ])[0]


def _batch_index(ctx: ConvContext, batch: str, nbatch: int) -> str:
    """(R,) int64 image of each ROI, clipped into the batch (invalid ROIs read image 0 or the last)."""
    idx = ctx.emit("Floor", [ctx.emit("Clip", [batch, scalar(ctx, 0.0, "b0", 1), scalar(ctx, nbatch - 1, "b1", 1)])[0]])[0]
    return ctx.emit("Cast", [ctx.emit("Squeeze", [idx, int64s(ctx, [1], "axes")])[0]], to=7)[0]


def _batch_select(ctx: ConvContext, data: str, batch: str, nbatch: int) -> Tuple[str, str]:
    """(features per ROI, (R, 1) mask of ROIs whose batch index MXNet treats as invalid).

    With one image the features broadcast over the ROIs; otherwise they are gathered.
    """
    invalid = _invalid_batch(ctx, batch, nbatch)
    if nbatch == 1:
        return data, invalid
    return ctx.emit("Gather", [data, _batch_index(ctx, batch, nbatch)], axis=0)[0], invalid


def _mask_rois(ctx: ConvContext, y: str, invalid: str, out: str) -> None:
    """Zero the outputs of invalid ROIs (``invalid`` is (R, 1))."""
    m = _unsqueeze(ctx, invalid, [2, 3])
    ctx.emit("Where", [m, scalar(ctx, 0.0, "zero"), y], [out])


# -- _contrib_ROIAlign ----------------------------------------------------------------------


def _pooled(spec: OpSpec) -> Tuple[int, int]:
    p = spec.ints("pooled_size") or ()
    if len(p) == 1:
        return p[0], p[0]
    if len(p) != 2:
        raise ValueError(f"pooled_size={p} must have one or two values")
    return p[0], p[1]


def _check_roi_inputs(spec: OpSpec) -> Optional[str]:
    """4-D data and (n, 5) ROIs ``[batch index, x1, y1, x2, y2]``, shared by ROIAlign and ROIPooling."""
    d, b = spec.in_shapes
    if len(d) != 4:
        return f"data must be 4-D, got {d}"
    if len(b) != 2 or b[1] != 5:
        return f"rois must have shape (n, 5), got {b}"
    return None


def _check_roi_align(spec: OpSpec) -> Optional[str]:
    r = _check_all_float(spec) or check_outputs(spec, 1)
    if r:
        return r
    if spec.bool_("position_sensitive", False):
        return "position_sensitive=True is not supported"
    if attr_int(spec, "sample_ratio", -1) <= 0:
        return ("sample_ratio <= 0 (the adaptive sampling grid) depends on each ROI's size at run time; "
                "only a fixed sample_ratio > 0 converts")
    r = _check_roi_inputs(spec)
    if r:
        return r
    ph, pw = _pooled(spec)
    if ph < 1 or pw < 1:
        return f"pooled_size ({ph}, {pw}) must be positive"
    return None


def _align_weights(ctx: ConvContext, start: str, length: str, pooled: int, grid: int, size: int) -> str:
    """(R, pooled, size): the bilinear weights of each bin's ``grid`` samples along one axis,
    averaged over the samples, exactly as MXNet places and clamps them."""
    dt = dtype_of(ctx.spec, 1)
    bin_size = _bin(ctx, "Div", length, scalar(ctx, float(pooled), "pooled", 1))
    p = np.repeat(np.arange(pooled), grid).reshape(1, -1).astype(dt)
    frac = np.tile(np.arange(grid) + 0.5, pooled).reshape(1, -1).astype(dt)
    # start + p * bin + (i + .5) * bin / grid, in MXNet's order
    t = _bin(ctx, "Add", start, _bin(ctx, "Mul", ctx.const(p, "p"), bin_size))
    u = _bin(ctx, "Div", _bin(ctx, "Mul", ctx.const(frac, "frac"), bin_size), scalar(ctx, float(grid), "grid", 1))
    y = _bin(ctx, "Add", t, u)  # (R, pooled * grid)
    empty = ctx.emit("Or", [_bin(ctx, "Less", y, scalar(ctx, -1.0, "minus1", 1)),
                            _bin(ctx, "Greater", y, scalar(ctx, float(size), "size", 1))])[0]
    y = _bin(ctx, "Max", y, scalar(ctx, 0.0, "zero", 1))
    low = ctx.emit("Floor", [y])[0]
    last = scalar(ctx, float(size - 1), "last", 1)
    at_end = _bin(ctx, "GreaterOrEqual", low, last)
    low = ctx.emit("Where", [at_end, last, low])[0]
    y = ctx.emit("Where", [at_end, low, y])[0]
    high = _bin(ctx, "Min", _bin(ctx, "Add", low, scalar(ctx, 1.0, "one", 1)), last)
    ly = _bin(ctx, "Sub", y, low)
    hy = _bin(ctx, "Sub", scalar(ctx, 1.0, "one", 1), ly)
    cells = ctx.const(np.arange(size).reshape(1, 1, -1).astype(dt), "cells")

    def onehot(at: str, weight: str) -> str:
        eq = ctx.emit("Cast", [_bin(ctx, "Equal", _unsqueeze(ctx, at, [2]), cells)], to=_onnx_float(ctx.spec, 1))[0]
        return _bin(ctx, "Mul", eq, _unsqueeze(ctx, weight, [2]))

    w = _bin(ctx, "Add", onehot(low, hy), onehot(high, ly))
    w = ctx.emit("Where", [_unsqueeze(ctx, empty, [2]), scalar(ctx, 0.0, "zero", 1), w])[0]
    w = ctx.emit("Reshape", [w, int64s(ctx, [0, pooled, grid, size], "shape")])[0]
    w = ctx.emit("ReduceSum", [w, int64s(ctx, [2], "axes")], keepdims=0)[0]
    return _bin(ctx, "Div", w, scalar(ctx, float(grid), "grid", 1))


#: The first opset whose ``RoiAlign`` has ``coordinate_transformation_mode`` (MXNet's ``aligned``).
ROI_ALIGN_OPSET = 16
#: ``Pad`` of a 4-D feature map by one image of zeros after the batch: where ROIs of invalid images read
#: (:func:`mx_trt.export.lowering.lower_roi_align` recognizes it).
ZERO_IMAGE_PADS = (0, 0, 0, 0, 1, 0, 0, 0)


@register("_contrib_ROIAlign", validator=_check_roi_align)
def _roi_align(ctx: ConvContext) -> None:
    """ONNX ``RoiAlign`` on MXNet's boxes, with the image of each ROI as its batch index.

    MXNet's ``aligned=False`` is ONNX's ``output_half_pixel`` (no half-pixel shift, ROIs
    at least one cell wide), ``aligned=True`` its ``half_pixel``; ``sample_ratio`` is
    ``sampling_ratio``, and each bin averages its samples in both. ROIs with a batch
    index below 0 or past the batch give zeros, as MXNet's GPU kernel does (its CPU
    kernel leaves their rows unwritten, or reads out of bounds). Below
    :data:`ROI_ALIGN_OPSET`, and in float16 (ONNX Runtime's CPU kernel is float32
    only), :func:`roi_align_matmul`.
    """
    spec = ctx.spec
    if ctx.opset < ROI_ALIGN_OPSET or spec.in_dtypes[0] != "float32":
        roi_align_matmul(ctx)
        return
    data, rois = ctx.inputs
    nb = spec.in_shapes[0][0]
    ph, pw = _pooled(spec)
    batch = _col(ctx, rois, 0, 1)
    # ROIs of an invalid image read an image of zeros appended to the batch: exact zeros, for the cost of
    # copying the feature map once (masking the output instead costs a pass over R * C * ph * pw values).
    padded = ctx.emit("Pad", [data, int64s(ctx, ZERO_IMAGE_PADS, "pads")], mode="constant")[0]
    index = ctx.emit("Where", [ctx.emit("Squeeze", [_invalid_batch(ctx, batch, nb), int64s(ctx, [1], "axes")])[0],
                               int64s(ctx, [nb], "zero_image_index"), _batch_index(ctx, batch, nb)])[0]
    mode = "half_pixel" if spec.bool_("aligned", False) else "output_half_pixel"
    ctx.emit("RoiAlign", [padded, _col(ctx, rois, 1, 5), index], ctx.outputs, mode="avg", output_height=ph,
             output_width=pw, sampling_ratio=attr_int(spec, "sample_ratio", -1),
             spatial_scale=attr_float(spec, "spatial_scale", 1.0), coordinate_transformation_mode=mode)


def roi_align_matmul(ctx: ConvContext) -> None:
    """ROIAlign in plain operators: out[r] = Wy[r] @ data[batch[r]] @ Wx[r]^T, with the weights of MXNet's
    sampling; O(R * C * H * W * pooled) multiply-adds.

    ROIs with a batch index below 0 or past the batch give zeros.
    """
    spec = ctx.spec
    data, rois = ctx.inputs
    nb, _, h, w = spec.in_shapes[0]
    ph, pw = _pooled(spec)
    grid = attr_int(spec, "sample_ratio", -1)
    scale = scalar(ctx, attr_float(spec, "spatial_scale", 1.0), "scale", 1)
    aligned = spec.bool_("aligned", False)
    batch, (x1, y1, x2, y2) = _roi_parts(ctx, rois)
    coords = [_bin(ctx, "Mul", v, scale) for v in (x1, y1, x2, y2)]
    if aligned:
        off = scalar(ctx, 0.5, "offset", 1)
        coords = [_bin(ctx, "Sub", v, off) for v in coords]
    sx, sy, ex, ey = coords
    rw, rh = _bin(ctx, "Sub", ex, sx), _bin(ctx, "Sub", ey, sy)
    if not aligned:
        one = scalar(ctx, 1.0, "one", 1)
        rw, rh = _bin(ctx, "Max", rw, one), _bin(ctx, "Max", rh, one)
    wy = _align_weights(ctx, sy, rh, ph, grid, h)  # (R, ph, H)
    wx = _align_weights(ctx, sx, rw, pw, grid, w)  # (R, pw, W)
    feats, invalid = _batch_select(ctx, data, batch, nb)
    t = ctx.emit("MatMul", [_unsqueeze(ctx, wy, [1]), feats])[0]  # (R, C, ph, W)
    wxt = _unsqueeze(ctx, ctx.emit("Transpose", [wx], perm=[0, 2, 1])[0], [1])  # (R, 1, W, pw)
    _mask_rois(ctx, ctx.emit("MatMul", [t, wxt])[0], invalid, ctx.outputs[0])


# -- ROIPooling -----------------------------------------------------------------------------


def _check_roi_pooling(spec: OpSpec) -> Optional[str]:
    r = _check_all_float(spec) or check_outputs(spec, 1) or _check_roi_inputs(spec)
    if r:
        return r
    d, b = spec.in_shapes
    ph, pw = _pooled(spec)
    nr, (_, c, h, w) = b[0], d
    biggest = nr * c * max(h * pw * w, ph * h * pw)
    if biggest > ROI_POOL_MAX_ELEMENTS:
        return (f"the masked maximum would build a tensor of {biggest} elements "
                f"(limit {ROI_POOL_MAX_ELEMENTS}) for {nr} ROIs over a {c}x{h}x{w} feature map")
    return None


def _round_half_away(ctx: ConvContext, v: str) -> str:
    """``std::round``: halves away from zero (ONNX ``Round`` rounds them to even)."""
    a = ctx.emit("Abs", [v])[0]
    fl = ctx.emit("Floor", [a])[0]
    up = ctx.emit("Cast", [_bin(ctx, "GreaterOrEqual", _bin(ctx, "Sub", a, fl), scalar(ctx, 0.5, "half", 1))],
                  to=_onnx_float(ctx.spec, 1))[0]
    return _bin(ctx, "Mul", ctx.emit("Sign", [v])[0], _bin(ctx, "Add", fl, up))


def _pool_bins(ctx: ConvContext, start: str, end: str, pooled: int, size: int) -> Tuple[str, str]:
    """(mask (R, pooled, size) of each bin's cells, empty (R, pooled)) as MXNet clips them."""
    dt = dtype_of(ctx.spec, 1)
    length = _bin(ctx, "Max", _bin(ctx, "Add", _bin(ctx, "Sub", end, start), scalar(ctx, 1.0, "one", 1)),
                  scalar(ctx, 1.0, "one", 1))
    bin_size = _bin(ctx, "Div", length, scalar(ctx, float(pooled), "pooled", 1))
    p = np.arange(pooled).reshape(1, -1)
    lo = ctx.emit("Floor", [_bin(ctx, "Mul", ctx.const(p.astype(dt), "p"), bin_size)])[0]
    hi = ctx.emit("Ceil", [_bin(ctx, "Mul", ctx.const((p + 1).astype(dt), "p1"), bin_size)])[0]
    zero, top = scalar(ctx, 0.0, "zero", 1), scalar(ctx, float(size), "size", 1)
    lo = ctx.emit("Clip", [_bin(ctx, "Add", lo, start), zero, top])[0]
    hi = ctx.emit("Clip", [_bin(ctx, "Add", hi, start), zero, top])[0]
    cells = ctx.const(np.arange(size).reshape(1, 1, -1).astype(dt), "cells")
    mask = ctx.emit("And", [_bin(ctx, "GreaterOrEqual", cells, _unsqueeze(ctx, lo, [2])),
                            _bin(ctx, "Less", cells, _unsqueeze(ctx, hi, [2]))])[0]
    return mask, _bin(ctx, "LessOrEqual", hi, lo)


@register("ROIPooling", "_npx_roi_pooling", validator=_check_roi_pooling)
def _roi_pooling(ctx: ConvContext) -> None:
    """Max over each bin as a masked maximum: over the columns of each row, then over rows.

    Outside the bin the mask puts the dtype's lowest value, which is also what MXNet's
    maximum starts from; empty bins and ROIs with an invalid batch index give 0.
    """
    spec = ctx.spec
    data, rois = ctx.inputs
    nb, _, h, w = spec.in_shapes[0]
    ph, pw = _pooled(spec)
    scale = scalar(ctx, attr_float(spec, "spatial_scale", 1.0), "scale", 1)
    batch, (x1, y1, x2, y2) = _roi_parts(ctx, rois)
    sx, sy, ex, ey = (_round_half_away(ctx, _bin(ctx, "Mul", v, scale)) for v in (x1, y1, x2, y2))
    mask_h, empty_h = _pool_bins(ctx, sy, ey, ph, h)  # (R, ph, H), (R, ph)
    mask_w, empty_w = _pool_bins(ctx, sx, ex, pw, w)  # (R, pw, W), (R, pw)
    feats, invalid = _batch_select(ctx, data, batch, nb)
    lowest = ctx.const(np.asarray(np.finfo(dtype_of(spec)).min, dtype=dtype_of(spec)), "lowest")
    # columns: (R|1, C, H, 1, W) with mask (R, 1, 1, pw, W) -> max over W -> (R, C, H, pw)
    v = ctx.emit("Where", [_unsqueeze(ctx, mask_w, [1, 2]), _unsqueeze(ctx, feats, [3]), lowest])[0]
    m1 = ctx.emit("ReduceMax", [v], axes=[4], keepdims=0)[0]
    # rows: (R, C, 1, H, pw) with mask (R, 1, ph, H, 1) -> max over H -> (R, C, ph, pw)
    v = ctx.emit("Where", [_unsqueeze(ctx, mask_h, [1, 4]), _unsqueeze(ctx, m1, [2]), lowest])[0]
    y = ctx.emit("ReduceMax", [v], axes=[3], keepdims=0)[0]
    empty = ctx.emit("Or", [_unsqueeze(ctx, empty_h, [2]), _unsqueeze(ctx, empty_w, [1])])[0]  # (R, ph, pw)
    empty = ctx.emit("Or", [empty, _unsqueeze(ctx, invalid, [2])])[0]
    ctx.emit("Where", [_unsqueeze(ctx, empty, [1]), scalar(ctx, 0.0, "zero"), y], ctx.outputs[:1])
