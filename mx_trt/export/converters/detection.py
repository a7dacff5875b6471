"""Converters for MXNet's detection post-processing: ``box_nms``, ``MultiBoxDetection``,
``Proposal`` and ``MultiProposal``, exact to MXNet 1.9.1's CPU kernels (output layout, tie
order, -1 rows), in standard ONNX with static output shapes.

Each converter decodes and filters its candidates as the MXNet kernel does, then uses the
exact blocks of :mod:`.suppression`: top-k selection, stable sort and greedy suppression in
MXNet's order. The k x k steps bound the size: a node whose ``batch * k * k`` exceeds
:data:`~.suppression.MAX_PAIRS` stays native with the reason.
"""
from __future__ import annotations

import logging
from typing import List, Optional, Sequence, Tuple

import numpy as np

from mx_trt.export.converters.common import attr_float, attr_int, attr_str, check_outputs, int64s, trunc
from mx_trt.export.converters.registry import ConvContext, register
from mx_trt.export.converters.suppression import (
    INT64,
    MAX_KEY,
    MAX_PAIRS,
    column,
    compact,
    fconst,
    gather,
    gather_rows,
    greedy,
    multibox_overlap,
    nms_overlap,
    op,
    proposal_overlap,
    reduce,
    select,
    stable_order,
    std_max,
    std_min,
    take,
    unsq,
)
from mx_trt.export.spec import OpSpec

logger = logging.getLogger(__name__)


# -- how large a node's suppression is ------------------------------------------------------


def suppression_candidates(spec: OpSpec) -> Optional[int]:
    """The candidates ``k`` the greedy suppression of a ``box_nms``, ``MultiBoxDetection``, ``Proposal``
    or ``MultiProposal`` node compares, or ``None`` for any other operator. O(1)."""
    if spec.op in ("_contrib_box_nms", "_contrib_box_non_maximum_suppression"):
        return _nms_geometry(spec)[3]
    if spec.op in ("_contrib_MultiBoxDetection", "_npx_multibox_detection"):
        return _multibox_k(spec)
    if spec.op in ("_contrib_Proposal", "_contrib_MultiProposal"):
        return _proposal_k(spec)[1]
    return None


# -- _contrib_box_nms --------------------------------------------------------------------


def _nms_geometry(spec: OpSpec) -> Tuple[int, int, int, int]:
    """(batch, n, width, k) of a box_nms node; k is the candidates kept for suppression."""
    shape = spec.in_shapes[0]
    b = int(np.prod(shape[:-2])) if len(shape) > 2 else 1
    n, w = shape[-2], shape[-1]
    topk = attr_int(spec, "topk", -1)
    return b, n, w, (n if topk < 0 else min(n, topk))


def _check_box_nms(spec: OpSpec) -> Optional[str]:
    r = check_outputs(spec, 1)
    if r:
        return r
    if spec.in_dtypes[0] != "float32" or spec.out_dtypes[0] != "float32":
        return f"input dtype {spec.in_dtypes[0]}: only float32 boxes convert"
    if len(spec.in_shapes[0]) < 2:
        return f"data must have at least 2 dimensions, got {spec.in_shapes[0]}"
    b, n, w, k = _nms_geometry(spec)
    cs, si, ii = attr_int(spec, "coord_start", 2), attr_int(spec, "score_index", 1), attr_int(spec, "id_index", -1)
    if not (0 <= cs and cs + 3 < w and 0 <= si < w and not cs <= si <= cs + 3 and ii < w
            and (ii < 0 or (not cs <= ii <= cs + 3 and ii != si))):
        return f"coord_start={cs}, score_index={si}, id_index={ii} do not fit rows of width {w}"
    for key in ("in_format", "out_format"):
        if attr_str(spec, key, "corner") not in ("corner", "center"):
            return f"{key}={attr_str(spec, key, 'corner')!r} is not 'corner' or 'center'"
    if 3 * n >= MAX_KEY:
        return f"{n} boxes per batch row exceed the int32 keys (up to 3n) of the ONNX form"
    if b * k * k > MAX_PAIRS:
        return (f"suppressing {k} candidates in each of {b} batch rows compares {b * k * k} pairs "
                f"(limit {MAX_PAIRS}); set topk lower to convert it")
    return None


def _convert_format(ctx: ConvContext, coords: List[str], to_center: bool) -> List[str]:
    """MXNet's corner_to_center / center_to_corner, skipping rows whose first coordinate is < 0."""
    two = fconst(ctx, 2.0, "two")
    c0, c1, c2, c3 = coords
    if to_center:
        new = [op(ctx, "Div", op(ctx, "Add", c0, c2), two), op(ctx, "Div", op(ctx, "Add", c1, c3), two),
               op(ctx, "Sub", c2, c0), op(ctx, "Sub", c3, c1)]
    else:
        hw, hh = op(ctx, "Div", c2, two), op(ctx, "Div", c3, two)
        new = [op(ctx, "Sub", c0, hw), op(ctx, "Sub", c1, hh), op(ctx, "Add", c0, hw), op(ctx, "Add", c1, hh)]
    skip = op(ctx, "Less", c0, fconst(ctx, 0.0, "zero"))
    return [op(ctx, "Where", skip, old, nw) for old, nw in zip(coords, new)]


@register("_contrib_box_nms", "_contrib_box_non_maximum_suppression", validator=_check_box_nms)
def _box_nms(ctx: ConvContext) -> None:
    """MXNet's box_nms: kept boxes first in score order (ties by index), then -1 rows.

    Valid boxes have ``score > valid_thresh`` (and, with ``id_index``, an id other
    than ``background_id``); the ``topk`` best of each batch row compete; a box is
    suppressed by a kept, earlier box of the same class (any class with
    ``force_suppress`` or without ``id_index``, classes compared as C ints) whose IoU
    with it exceeds ``overlap_thresh``. Rows are copied whole; coordinates change
    format when ``in_format != out_format`` except in rows whose first coordinate
    is negative, as MXNet's kernel skips them. ``topk=0`` passes the input through.
    """
    spec = ctx.spec
    shape = spec.in_shapes[0]
    b, n, w, k = _nms_geometry(spec)
    if k < 1:
        ctx.emit("Identity", [ctx.inputs[0]], ctx.outputs)
        return
    cs, si, ii = attr_int(spec, "coord_start", 2), attr_int(spec, "score_index", 1), attr_int(spec, "id_index", -1)
    center = attr_str(spec, "in_format", "corner") == "center"
    x = op(ctx, "Reshape", ctx.inputs[0], int64s(ctx, [b, n, w], "shape"))
    score = column(ctx, x, si)
    valid = op(ctx, "Greater", score, fconst(ctx, attr_float(spec, "valid_thresh", 0.0), "valid_thresh"))
    if ii >= 0:
        bg = fconst(ctx, float(attr_int(spec, "background_id", -1)), "background")
        valid = op(ctx, "And", valid, op(ctx, "Not", op(ctx, "Equal", column(ctx, x, ii), bg)))
    slots, slot_valid = select(ctx, score, valid, n, k)
    perm = stable_order(ctx, gather(ctx, score, slots), slot_valid, k)
    order = gather(ctx, slots, perm)
    cand = gather_rows(ctx, x, order, w)  # (B, k, W) in MXNet's sorted order
    cvalid = gather(ctx, slot_valid, perm)
    coords = [column(ctx, cand, cs + c) for c in range(4)]
    thresh = attr_float(spec, "overlap_thresh", 0.5)
    ids = None
    if ii >= 0 and not spec.bool_("force_suppress", False):
        ids = trunc(ctx, column(ctx, cand, ii), spec.in_dtypes[0], 2)  # compared as C ints
    keep = greedy(ctx, coords, cvalid, k, nms_overlap(center, thresh), ids)
    kept, kept_valid = compact(ctx, keep, k, k)
    rows = gather_rows(ctx, cand, kept, w)
    rows = op(ctx, "Where", unsq(ctx, kept_valid, 2), rows, fconst(ctx, -1.0, "minus1"))
    if attr_str(spec, "in_format", "corner") != attr_str(spec, "out_format", "corner"):
        cols = [column(ctx, rows, c) for c in range(w)]
        cols[cs:cs + 4] = _convert_format(ctx, cols[cs:cs + 4], not center)
        rows = op(ctx, "Concat", *[unsq(ctx, c, 2) for c in cols], axis=2)
    if k < n:
        fill = op(ctx, "Constant", value=np.asarray(-1, np.dtype(spec.in_dtypes[0])))  # Pad wants a 0-d value
        rows = op(ctx, "Pad", rows, int64s(ctx, [0, 0, 0, 0, n - k, 0], "pads"), fill)
    ctx.emit("Reshape", [rows, int64s(ctx, list(shape), "shape")], ctx.outputs)


# -- _contrib_MultiBoxDetection -------------------------------------------------------------


def _check_multibox_detection(spec: OpSpec) -> Optional[str]:
    r = check_outputs(spec, 1)
    if r:
        return r
    if any(d != "float32" for d in spec.in_dtypes):
        return f"input dtypes {list(spec.in_dtypes)}: only float32 converts"
    (b, c, n), loc, anchors = spec.in_shapes
    if c < 2:
        return f"cls_prob has {c} class(es); MXNet's first class is the background, so no box could be kept"
    if tuple(loc) != (b, 4 * n) or len(anchors) != 3 or anchors[1:] != (n, 4):
        return f"loc_pred {loc} and anchors {anchors} do not fit {n} anchors"
    if len(_variances(spec)) != 4:
        return f"variances {_variances(spec)} must have 4 values"
    k = _multibox_k(spec)
    if b * k * k > MAX_PAIRS:
        return (f"suppressing {k} detections in each of {b} images compares {b * k * k} pairs "
                f"(limit {MAX_PAIRS}); set nms_topk lower to convert it")
    return None


def _variances(spec: OpSpec) -> Tuple[float, ...]:
    v = spec.tuple_("variances")
    return (0.1, 0.1, 0.2, 0.2) if v is None else tuple(float(x) for x in v)


def _multibox_k(spec: OpSpec) -> int:
    n = spec.in_shapes[0][2]
    topk = attr_int(spec, "nms_topk", -1)
    return n if topk <= 0 else min(topk, n)


def _decode_anchors(ctx: ConvContext, loc: str, anchors: str, n: int) -> List[str]:
    """MXNet's TransformLocations, term by term: four (B, n) corner columns."""
    spec = ctx.spec
    a = op(ctx, "Reshape", anchors, int64s(ctx, [1, n, 4], "shape"))
    al, at, ar, ab = (column(ctx, a, c) for c in range(4))
    p = op(ctx, "Reshape", loc, int64s(ctx, [0, n, 4], "shape"))
    px, py, pw, ph = (column(ctx, p, c) for c in range(4))
    vx, vy, vw, vh = (fconst(ctx, v, "var") for v in _variances(spec))
    two = fconst(ctx, 2.0, "two")
    aw, ah = op(ctx, "Sub", ar, al), op(ctx, "Sub", ab, at)
    ax, ay = op(ctx, "Div", op(ctx, "Add", al, ar), two), op(ctx, "Div", op(ctx, "Add", at, ab), two)
    ox = op(ctx, "Add", op(ctx, "Mul", op(ctx, "Mul", px, vx), aw), ax)
    oy = op(ctx, "Add", op(ctx, "Mul", op(ctx, "Mul", py, vy), ah), ay)
    ow = op(ctx, "Div", op(ctx, "Mul", op(ctx, "Exp", op(ctx, "Mul", pw, vw)), aw), two)
    oh = op(ctx, "Div", op(ctx, "Mul", op(ctx, "Exp", op(ctx, "Mul", ph, vh)), ah), two)
    out = [op(ctx, "Sub", ox, ow), op(ctx, "Sub", oy, oh), op(ctx, "Add", ox, ow), op(ctx, "Add", oy, oh)]
    if spec.bool_("clip", True):
        zero, one = fconst(ctx, 0.0, "zero"), fconst(ctx, 1.0, "one")
        out = [std_max(ctx, zero, std_min(ctx, one, v)) for v in out]
    return out


def _setcolumn(ctx: ConvContext, rows: str, c: int, width: int, value: str) -> str:
    """``rows`` (B, n, W) with column ``c`` replaced by the (B, n) ``value``."""
    cols = [column(ctx, rows, j) for j in range(width)]
    cols[c] = value
    return op(ctx, "Concat", *[unsq(ctx, v, 2) for v in cols], axis=2)


@register("_contrib_MultiBoxDetection", "_npx_multibox_detection", validator=_check_multibox_detection)
def _multibox_detection(ctx: ConvContext) -> None:
    """MXNet's MultiBoxDetection (CPU kernel): rows ``[id, score, x1, y1, x2, y2]`` per anchor.

    Each anchor's class is the first of the highest non-background probabilities (class 0
    is the background whatever ``background_id`` says, as in MXNet's kernel); anchors
    under ``threshold`` are dropped and the others compacted in anchor order. With a
    valid ``nms_threshold`` in (0, 1], the first ``nms_topk`` of them by score (stable)
    lead, the rest of the compacted rows follow with id -1, and suppressed rows keep
    their place with id -1 (``IoU >= nms_threshold``, same id unless ``force_suppress``).
    Unused rows are -1.
    """
    spec = ctx.spec
    cls_prob, loc, anchors = ctx.inputs
    b, c, n = spec.in_shapes[0]
    probs = op(ctx, "Slice", cls_prob, int64s(ctx, [1], "s"), int64s(ctx, [c], "e"), int64s(ctx, [1], "ax"))
    best = reduce(ctx, "ReduceMax", probs, 1, False)  # (B, n)
    cls = op(ctx, "Cast", op(ctx, "ArgMax", probs, axis=1, keepdims=0, select_last_index=0), to=1)
    found = op(ctx, "Greater", best, fconst(ctx, -1.0, "minus1"))  # MXNet starts its maximum at -1
    score = op(ctx, "Where", found, best, fconst(ctx, -1.0, "minus1"))
    valid = op(ctx, "And", found, op(ctx, "Not", op(ctx, "Less", score, fconst(ctx, attr_float(spec, "threshold", 0.01),
                                                                                       "threshold"))))
    class_ids = op(ctx, "Where", valid, cls, fconst(ctx, -1.0, "minus1"))  # class j is id j - 1
    boxes = _decode_anchors(ctx, loc, anchors, n)
    rows = op(ctx, "Concat", *[unsq(ctx, v, 2) for v in [class_ids, score] + boxes], axis=2)  # (B, n, 6)
    minus1 = fconst(ctx, -1.0, "minus1")
    comp, comp_valid = compact(ctx, valid, n, n)
    packed = op(ctx, "Where", unsq(ctx, comp_valid, 2), gather_rows(ctx, rows, comp, 6), minus1)
    nms = attr_float(spec, "nms_threshold", 0.5)
    if not 0 < nms <= 1:
        ctx.emit("Identity", [packed], ctx.outputs)
        return
    k = _multibox_k(spec)
    slots, slot_valid = select(ctx, score, valid, n, k)
    perm = stable_order(ctx, gather(ctx, score, slots), slot_valid, k)
    top = gather_rows(ctx, rows, gather(ctx, slots, perm), 6)
    top_valid = gather(ctx, slot_valid, perm)
    top_ids = column(ctx, top, 0)
    keep = greedy(ctx, [column(ctx, top, j) for j in range(2, 6)], top_valid, k, multibox_overlap(nms),
                  None if spec.bool_("force_suppress", False) else top_ids)
    top = _setcolumn(ctx, top, 0, 6, op(ctx, "Where", keep, top_ids, minus1))
    top = op(ctx, "Where", unsq(ctx, top_valid, 2), top, minus1)
    if k < n:
        rest = op(ctx, "Slice", packed, int64s(ctx, [k], "s"), int64s(ctx, [n], "e"), int64s(ctx, [1], "ax"))
        rest = _setcolumn(ctx, rest, 0, 6, ctx.const(np.full((b, n - k), -1, np.float32), "no_id"))
        top = op(ctx, "Concat", top, rest, axis=1)
    ctx.emit("Identity", [top], ctx.outputs)


# -- _contrib_Proposal / _contrib_MultiProposal ---------------------------------------------


def _floats(spec: OpSpec, key: str, default: Tuple[float, ...]) -> Tuple[float, ...]:
    v = spec.tuple_(key)
    return default if v is None else tuple(float(x) for x in v)


def proposal_anchors(spec: OpSpec) -> np.ndarray:
    """(H * W * A, 4) float32: MXNet's base anchors (GenerateAnchors, float and double steps as in
    its C++) shifted over the feature map, rows in MXNet's (h, w, anchor) order."""
    f32 = np.float32
    stride = attr_int(spec, "feature_stride", 16)
    ratios = _floats(spec, "ratios", (0.5, 1.0, 2.0))
    scales = _floats(spec, "scales", (4.0, 8.0, 16.0, 32.0))
    _, _, h, w = spec.in_shapes[0]
    base = [f32(0.0), f32(0.0), f32(stride - 1.0), f32(stride - 1.0)]
    bw = f32(base[2] - base[0] + f32(1.0))
    bh = f32(base[3] - base[1] + f32(1.0))
    x_ctr = f32(np.float64(base[0]) + 0.5 * (np.float64(bw) - 1.0))
    y_ctr = f32(np.float64(base[1]) + 0.5 * (np.float64(bh) - 1.0))
    size = f32(bw * bh)
    cell = []
    for ratio in (f32(r) for r in ratios):
        for scale in (f32(c) for c in scales):
            size_ratios = f32(np.floor(f32(size / ratio)))
            new_w = f32(f32(np.floor(f32(np.sqrt(size_ratios) + f32(0.5)))) * scale)
            new_h = f32(f32(np.floor(f32(f32(new_w / scale) * ratio) + f32(0.5))) * scale)
            hw, hh = f32(f32(0.5) * f32(new_w - f32(1.0))), f32(f32(0.5) * f32(new_h - f32(1.0)))
            cell.append([f32(x_ctr - hw), f32(y_ctr - hh), f32(x_ctr + hw), f32(y_ctr + hh)])
    a = np.asarray(cell, np.float32)  # (A, 4)
    jj, kk = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    shift = np.stack([kk, jj, kk, jj], axis=-1).reshape(h, w, 1, 4) * stride
    return (a.reshape(1, 1, -1, 4) + shift.astype(np.float32)).reshape(-1, 4).astype(np.float32)


def _proposal_k(spec: OpSpec) -> Tuple[int, int, int]:
    """(count, pre_nms_top_n, rpn_post_nms_top_n) as MXNet clamps them."""
    _, c, h, w = spec.in_shapes[0]
    count = c // 2 * h * w
    pre = attr_int(spec, "rpn_pre_nms_top_n", 6000)
    pre = min(pre if pre > 0 else count, count)
    return count, pre, attr_int(spec, "rpn_post_nms_top_n", 300)


def _check_proposal(spec: OpSpec) -> Optional[str]:
    if any(d != "float32" for d in spec.in_dtypes):
        return f"input dtypes {list(spec.in_dtypes)}: only float32 converts"
    cls, bbox, info = spec.in_shapes
    if len(cls) != 4 or cls[1] % 2:
        return f"cls_prob must be (batch, 2 * anchors, height, width), got {cls}"
    b, c, h, w = cls
    n_anchors = len(_floats(spec, "ratios", (0.5, 1.0, 2.0))) * len(_floats(spec, "scales", (4.0, 8.0, 16.0, 32.0)))
    if c // 2 != n_anchors:
        return f"cls_prob has {c // 2} anchors per cell, ratios x scales give {n_anchors}"
    if tuple(bbox) != (b, 2 * c, h, w) or tuple(info) != (b, 3):
        return f"bbox_pred {bbox} and im_info {info} do not fit cls_prob {cls}"
    if spec.op == "_contrib_Proposal" and b != 1:
        return f"Proposal takes one image (MXNet refuses batch {b}); MultiProposal takes several"
    count, pre, post = _proposal_k(spec)
    if post < 1:
        return f"rpn_post_nms_top_n={post} must be positive"
    if b * pre * pre > MAX_PAIRS:
        return (f"suppressing {pre} proposals in each of {b} images compares {b * pre * pre} pairs "
                f"(limit {MAX_PAIRS}); set rpn_pre_nms_top_n lower to convert it")
    return None


def _proposal_boxes(ctx: ConvContext, deltas: Sequence[str], info: Sequence[str], count: int) -> List[str]:
    """MXNet's BBoxTransformInv (or IoUTransformInv) and clipping: four (B, count) columns."""
    spec = ctx.spec
    anchors = ctx.const(proposal_anchors(spec).T.reshape(4, 1, count), "anchors")
    x1, y1, x2, y2 = (op(ctx, "Gather", anchors, int64s(ctx, [i], "i"), axis=0) for i in range(4))
    x1, y1, x2, y2 = (op(ctx, "Squeeze", v, int64s(ctx, [0], "axes")) for v in (x1, y1, x2, y2))  # (1, count)
    dx, dy, dw, dh = deltas
    one, half = fconst(ctx, 1.0, "one"), fconst(ctx, 0.5, "half")
    if spec.bool_("iou_loss", False):
        out = [op(ctx, "Add", x1, dx), op(ctx, "Add", y1, dy), op(ctx, "Add", x2, dw), op(ctx, "Add", y2, dh)]
    else:
        width = op(ctx, "Add", op(ctx, "Sub", x2, x1), one)
        height = op(ctx, "Add", op(ctx, "Sub", y2, y1), one)
        cx = op(ctx, "Add", x1, op(ctx, "Mul", half, op(ctx, "Sub", width, one)))
        cy = op(ctx, "Add", y1, op(ctx, "Mul", half, op(ctx, "Sub", height, one)))
        px, py = op(ctx, "Add", op(ctx, "Mul", dx, width), cx), op(ctx, "Add", op(ctx, "Mul", dy, height), cy)
        pw = op(ctx, "Mul", op(ctx, "Exp", dw), width)
        ph = op(ctx, "Mul", op(ctx, "Exp", dh), height)
        hw, hh = op(ctx, "Mul", half, op(ctx, "Sub", pw, one)), op(ctx, "Mul", half, op(ctx, "Sub", ph, one))
        out = [op(ctx, "Sub", px, hw), op(ctx, "Sub", py, hh), op(ctx, "Add", px, hw), op(ctx, "Add", py, hh)]
    zero = fconst(ctx, 0.0, "zero")
    im_h, im_w = info[0], info[1]
    xmax, ymax = op(ctx, "Sub", im_w, one), op(ctx, "Sub", im_h, one)
    return [std_max(ctx, std_min(ctx, v, m), zero) for v, m in zip(out, (xmax, ymax, xmax, ymax))]


@register("_contrib_Proposal", "_contrib_MultiProposal", validator=_check_proposal)
def _proposal(ctx: ConvContext) -> None:
    """MXNet's Proposal / MultiProposal (CPU): ``(batch * rpn_post_nms_top_n, 5)`` rois
    ``[image, x1, y1, x2, y2]`` and, with ``output_score``, their scores.

    Anchors over the feature map are decoded and clipped to the image; anchors
    past the image's real size (``im_info``) and proposals under ``rpn_min_size``
    (scaled, after which they grow by it) get score -1; the ``rpn_pre_nms_top_n``
    best (stable, ties by anchor order) go through greedy suppression (IoU with
    +1 sides, ``> threshold``); the kept ones fill the output in order, repeated
    cyclically when fewer than ``rpn_post_nms_top_n`` survive.
    """
    spec = ctx.spec
    cls_prob, bbox_pred, im_info = ctx.inputs
    b, c, h, w = spec.in_shapes[0]
    a = c // 2
    count, pre, post = _proposal_k(spec)
    stride = float(attr_int(spec, "feature_stride", 16))
    fg = op(ctx, "Slice", cls_prob, int64s(ctx, [a], "s"), int64s(ctx, [c], "e"), int64s(ctx, [1], "ax"))
    score = op(ctx, "Reshape", op(ctx, "Transpose", fg, perm=[0, 2, 3, 1]), int64s(ctx, [b, count], "shape"))
    d = op(ctx, "Reshape", bbox_pred, int64s(ctx, [b, a, 4, h, w], "shape"))
    d = op(ctx, "Reshape", op(ctx, "Transpose", d, perm=[0, 3, 4, 1, 2]), int64s(ctx, [b, count, 4], "shape"))
    deltas = [column(ctx, d, i) for i in range(4)]
    info = [op(ctx, "Slice", im_info, int64s(ctx, [i], "s"), int64s(ctx, [i + 1], "e"), int64s(ctx, [1], "ax"))
            for i in range(3)]  # (B, 1) each: height, width, scale
    x1, y1, x2, y2 = _proposal_boxes(ctx, deltas, info, count)
    minus1 = fconst(ctx, -1.0, "minus1")
    # Anchors whose cell lies past the image's real size: score -1.
    cells = np.arange(count) // a
    stride_c = fconst(ctx, stride, "stride")
    real_h, real_w = (trunc(ctx, op(ctx, "Div", v, stride_c), "float32", 2) for v in info[:2])
    past = op(ctx, "Or", op(ctx, "GreaterOrEqual", ctx.const((cells // w).astype(np.float32).reshape(1, -1), "row"), real_h),
               op(ctx, "GreaterOrEqual", ctx.const((cells % w).astype(np.float32).reshape(1, -1), "col"), real_w))
    score = op(ctx, "Where", past, minus1, score)
    # FilterBox: too small after clipping -> grown by min_size, score -1.
    one = fconst(ctx, 1.0, "one")
    min_size = op(ctx, "Mul", fconst(ctx, float(attr_int(spec, "rpn_min_size", 16)), "min_size"), info[2])
    small = op(ctx, "Or", op(ctx, "Less", op(ctx, "Add", op(ctx, "Sub", x2, x1), one), min_size),
                op(ctx, "Less", op(ctx, "Add", op(ctx, "Sub", y2, y1), one), min_size))
    grow = op(ctx, "Div", min_size, fconst(ctx, 2.0, "two"))
    x1, y1 = (op(ctx, "Where", small, op(ctx, "Sub", v, grow), v) for v in (x1, y1))
    x2, y2 = (op(ctx, "Where", small, op(ctx, "Add", v, grow), v) for v in (x2, y2))
    score = op(ctx, "Where", small, minus1, score)
    rows = op(ctx, "Concat", *[unsq(ctx, v, 2) for v in (x1, y1, x2, y2, score)], axis=2)  # (B, count, 5)
    every = op(ctx, "Expand", ctx.const(np.ones((1, count), bool), "all"), int64s(ctx, [b, count], "bn"))
    slots, slot_valid = select(ctx, score, every, count, pre)
    perm = stable_order(ctx, gather(ctx, score, slots), slot_valid, pre)
    top = gather_rows(ctx, rows, gather(ctx, slots, perm), 5)  # (B, pre, 5), MXNet's sorted order
    every_k = op(ctx, "Expand", ctx.const(np.ones((1, pre), bool), "all_k"), int64s(ctx, [b, pre], "bk"))
    thresh = attr_float(spec, "threshold", 0.7)
    keep = greedy(ctx, [column(ctx, top, i) for i in range(4)], every_k, pre, proposal_overlap(thresh))
    kept, _ = compact(ctx, keep, pre, pre)
    nkept = reduce(ctx, "ReduceSum", op(ctx, "Cast", keep, to=INT64), 1, True)  # (B, 1), at least 1
    at = ctx.const(np.arange(post, dtype=np.int64).reshape(1, post), "at")
    at = op(ctx, "Sub", at, op(ctx, "Mul", op(ctx, "Div", at, nkept), nkept))  # i mod kept, cyclic
    src = op(ctx, "Squeeze", take(ctx, kept, at, b, pre), int64s(ctx, [2], "axes"))  # (B, post)
    out = take(ctx, top, src, b, pre)  # (B, post, 5)
    image = ctx.const(np.repeat(np.arange(b, dtype=np.float32), post).reshape(b, post, 1), "image")
    boxes = op(ctx, "Slice", out, int64s(ctx, [0], "s"), int64s(ctx, [4], "e"), int64s(ctx, [2], "ax"))
    ctx.emit("Reshape", [op(ctx, "Concat", image, boxes, axis=2), int64s(ctx, [b * post, 5], "shape")], ctx.outputs[:1])
    if len(ctx.outputs) > 1:
        sc = op(ctx, "Slice", out, int64s(ctx, [4], "s"), int64s(ctx, [5], "e"), int64s(ctx, [2], "ax"))
        ctx.emit("Reshape", [sc, int64s(ctx, [b * post, 1], "shape")], ctx.outputs[1:2])
