"""Converters for MXNet's detection post-processing: ``box_nms``, ``MultiBoxDetection``,
``Proposal`` and ``MultiProposal``, exact to MXNet 1.9.1's CPU kernels, in standard ONNX
with static output shapes.

MXNet's non-maximum suppression is greedy over the candidates sorted by score
(``std::stable_sort``: descending scores, ties by the lower index), and its output
keeps the input's shape. ONNX ``NonMaxSuppression`` returns indices in another tie
order, so it is not used. The ONNX form here is built from four exact steps, each
with a fixed shape:

1. **Top-k selection** (``_select``): the ``k`` best valid candidates per batch row,
   ties at the cut-off broken by the lower index (one ``TopK`` for the k-th score,
   one over a unique integer key that ranks the rows above it, then the tied rows
   by index).
2. **Compaction** (``_compact``): the indices of a mask's rows in ascending order, by
   a ``TopK`` over the integer key ``N - index`` (unique, so the order is exact).
3. **Stable sort of the k slots** (``_stable_order``): each slot's rank counts the
   slots before it in MXNet's order (higher score, or equal score and lower index),
   a k x k comparison; a ``TopK`` over the unique ranks gives the permutation.
4. **Greedy suppression** (``_greedy_keep``): with ``S[j, i]`` = "slot j comes before
   slot i and suppresses it when kept", the greedy result is the unique fixed point
   of ``keep[i] = valid[i] and not any_j(keep[j] and S[j, i])``. An ONNX ``Loop``
   iterates it from ``keep = valid`` until nothing changes: after t iterations the
   first t slots are final, so it stops after at most k + 1 iterations (usually a
   handful). The body holds only booleans and int32, so fp16 engines leave it alone.

The k x k steps bound the size: a node whose ``batch * k * k`` exceeds
:data:`MAX_PAIRS` stays native with the reason. ``_contrib_Proposal`` and
``_contrib_MultiProposal`` reuse the same steps after decoding their anchors.
"""
from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from mx_trt.export.converters.common import attr_float, attr_int, attr_str, check_outputs, int64s, trunc
from mx_trt.export.converters.indexing import TRT_MAX_TOPK
from mx_trt.export.converters.registry import ConvContext, register
from mx_trt.export.spec import OpSpec

logger = logging.getLogger(__name__)

#: Largest ``batch * k * k`` (pairwise comparisons of k candidates) a converted node may build.
MAX_PAIRS = 1 << 26
#: The largest k of one ONNX ``TopK`` (TensorRT's limit); larger k are taken in chunks.
TOPK_CHUNK = TRT_MAX_TOPK
#: Integer keys must stay exact in int32.
MAX_ROWS = (1 << 31) - 1
#: ONNX element types.
_INT32, _INT64, _BOOL = 6, 7, 9


# -- small emission helpers ----------------------------------------------------------------


def _op(ctx: ConvContext, op: str, *ins: str, **attrs: Any) -> str:
    return ctx.emit(op, list(ins), **attrs)[0]


def _i32(ctx: ConvContext, value: Any, hint: str) -> str:
    return ctx.const(np.asarray(value, dtype=np.int32), hint)


def _fconst(ctx: ConvContext, value: float, hint: str) -> str:
    return ctx.const(np.asarray(value, dtype=np.dtype(ctx.spec.in_dtypes[0])), hint)


def _unsq(ctx: ConvContext, x: str, axis: int) -> str:
    return _op(ctx, "Unsqueeze", x, int64s(ctx, [axis], "axes"))


def _reduce(ctx: ConvContext, op: str, x: str, axis: int, keepdims: bool) -> str:
    """ReduceX over one axis: ReduceSum takes axes as an input from opset 13, the others from 18."""
    if op == "ReduceSum" or ctx.opset >= 18:
        return _op(ctx, op, x, int64s(ctx, [axis], "axes"), keepdims=int(keepdims))
    return _op(ctx, op, x, axes=[axis], keepdims=int(keepdims))


def _topk(ctx: ConvContext, x: str, k: int, largest: bool, dtype: str = "int32") -> Tuple[str, str]:
    """(values, int64 indices) of ``TopK`` along the last axis of a (B, n) tensor, sorted.

    Past :data:`TOPK_CHUNK` (TensorRT's limit) the k rows come in chunks: each chunk's
    rows are then overwritten (``ScatterElements``) with a value that loses every comparison,
    and the next chunk is taken from what is left. The values are exactly the k best of the
    multiset; the indices are exact when the values are unique (integer keys).
    """
    chunks, left, current = [], k, x
    while left > 0:
        kc = min(left, TOPK_CHUNK)
        v, i = ctx.emit("TopK", [current, int64s(ctx, [kc], "k")], [ctx.tmp("topk_v"), ctx.tmp("topk_i")],
                        axis=-1, largest=int(largest), sorted=1)
        chunks.append((v, i))
        left -= kc
        if left > 0:
            if dtype == "float32":
                fill = -np.inf if largest else np.inf
            else:
                fill = np.iinfo(np.int32).min if largest else np.iinfo(np.int32).max
            loser = ctx.const(np.full((1, 1), fill, dtype=np.dtype(dtype)), "loser")
            current = _op(ctx, "ScatterElements", current, i, _op(ctx, "Expand", loser, _op(ctx, "Shape", i)), axis=1)
    if len(chunks) == 1:
        return chunks[0]
    return (_op(ctx, "Concat", *[v for v, _ in chunks], axis=1), _op(ctx, "Concat", *[i for _, i in chunks], axis=1))


def _column(ctx: ConvContext, x: str, c: int) -> str:
    """``x[..., c]`` of a (B, n, W) tensor: (B, n)."""
    picked = _op(ctx, "Slice", x, int64s(ctx, [c], "s"), int64s(ctx, [c + 1], "e"), int64s(ctx, [2], "ax"))
    return _op(ctx, "Squeeze", picked, int64s(ctx, [2], "axes"))


def _gather_rows(ctx: ConvContext, x: str, idx: str, width: int) -> str:
    """``x[b, idx[b, r], :]`` of (B, n, W) ``x`` and (B, r) int64 ``idx``: (B, r, W)."""
    full = _op(ctx, "Concat", _op(ctx, "Shape", idx), int64s(ctx, [width], "w"), axis=0)
    return _op(ctx, "GatherElements", x, _op(ctx, "Expand", _unsq(ctx, idx, 2), full), axis=1)


def _gather(ctx: ConvContext, x: str, idx: str) -> str:
    """``x[b, idx[b, r]]`` of (B, n) ``x``: (B, r)."""
    return _op(ctx, "GatherElements", x, idx, axis=1)


def _take(ctx: ConvContext, x: str, idx: str, b: int, n: int) -> str:
    """``x[b, idx[b, r], ...]`` of (B, n, ...) ``x`` and (B, r) int64 ``idx`` for any r (GatherElements
    wants r <= n): a Gather over the flattened batch."""
    flat = _op(ctx, "Reshape", x, int64s(ctx, [b * n, -1], "shape"))
    offset = ctx.const((np.arange(b, dtype=np.int64) * n).reshape(b, 1), "offset")
    return _op(ctx, "Gather", flat, _op(ctx, "Add", idx, offset), axis=0)  # (B, r, W)


def _iota(ctx: ConvContext, n: int, hint: str = "iota") -> str:
    """int32 (1, n) constant ``[0, 1, ..., n-1]``."""
    return ctx.const(np.arange(n, dtype=np.int32).reshape(1, n), hint)


def _std_min(ctx: ConvContext, a: str, b: str) -> str:
    """C++'s ``std::min(a, b)``, ``b < a ? b : a``, as a ``Where``.

    ONNX ``Min``/``Max`` are not used: besides their NaN rule, ONNX Runtime 1.19's float16
    ``Min``/``Max`` with broadcasting on both sides corrupt the heap (seen in fp16 engines).
    """
    return _op(ctx, "Where", _op(ctx, "Less", b, a), b, a)


def _std_max(ctx: ConvContext, a: str, b: str) -> str:
    """C++'s ``std::max(a, b)``, ``a < b ? b : a``, as a ``Where``."""
    return _op(ctx, "Where", _op(ctx, "Less", a, b), b, a)


def _pairs(ctx: ConvContext, x: str) -> Tuple[str, str]:
    """(x as (B, k, 1), x as (B, 1, k)): the j (row) and i (column) sides of a pairwise matrix."""
    return _unsq(ctx, x, 2), _unsq(ctx, x, 1)


# -- the four exact steps ------------------------------------------------------------------


def _select(ctx: ConvContext, score: str, valid: str, n: int, k: int) -> Tuple[str, str]:
    """The k best valid rows of each batch row: (int64 (B, k) indices, (B, k) bool real).

    Higher scores first and, at the k-th score, the lower indices, as a stable sort
    keeps them. One ``TopK`` finds the k-th score; a second one over the unique integer
    key ``3n - index`` (rows above the k-th score), ``n - index`` (rows tied with it),
    0 (the rest) returns the rows above it, then the tied rows by index, then padding.
    Rows of equal score are therefore always in index order, as :func:`_stable_order`
    expects.
    """
    iota = _iota(ctx, n)
    rest = _op(ctx, "Sub", _i32(ctx, n, "n"), iota)  # n - index, in [1, n]
    if k >= n:
        key = _op(ctx, "Where", valid, rest, _i32(ctx, 0, "zero"))
    else:
        sv = _op(ctx, "Where", valid, score, _fconst(ctx, float("-inf"), "ninf"))
        vals, _ = _topk(ctx, sv, k, True, "float32")
        kth = _op(ctx, "Slice", vals, int64s(ctx, [k - 1], "s"), int64s(ctx, [k], "e"), int64s(ctx, [1], "ax"))  # (B, 1)
        above = _op(ctx, "Greater", sv, kth)
        tied = _op(ctx, "And", _op(ctx, "Equal", sv, kth), valid)
        key = _op(ctx, "Where", above, _op(ctx, "Add", rest, _i32(ctx, 2 * n, "2n")),
                  _op(ctx, "Where", tied, rest, _i32(ctx, 0, "zero")))
    vals, idx = _topk(ctx, key, k, True)
    return idx, _op(ctx, "Greater", vals, _i32(ctx, 0, "zero"))


def _compact(ctx: ConvContext, mask: str, n: int, k: int) -> Tuple[str, str]:
    """(int64 (B, k) indices of the set rows in ascending order then the others, (B, k) bool set)."""
    key = _op(ctx, "Where", mask, _op(ctx, "Sub", _i32(ctx, n, "n"), _iota(ctx, n)), _i32(ctx, 0, "zero"))
    vals, idx = _topk(ctx, key, k, True)
    return idx, _op(ctx, "Greater", vals, _i32(ctx, 0, "zero"))


def _stable_order(ctx: ConvContext, score: str, valid: str, k: int) -> str:
    """int64 (B, k) permutation of slots into MXNet's sort order: valid slots by descending
    score, equal scores by the lower slot (slots of equal score must be in index order), then
    the invalid ones."""
    si, sj = _pairs(ctx, score)  # [i, j]: reduced over j, the contiguous axis
    lower = ctx.const(np.tril(np.ones((k, k), bool), -1).reshape(1, k, k), "lower")  # [i, j]: j < i
    before = _op(ctx, "Or", _op(ctx, "Greater", sj, si), _op(ctx, "And", _op(ctx, "Equal", sj, si), lower))
    before = _op(ctx, "And", before, _unsq(ctx, valid, 1))
    rank = _reduce(ctx, "ReduceSum", _op(ctx, "Cast", before, to=_INT32), 2, False)  # (B, k)
    rank = _op(ctx, "Where", valid, rank, _op(ctx, "Add", _iota(ctx, k), _i32(ctx, k, "k")))
    _, perm = _topk(ctx, rank, k, False)
    return perm


def _greedy_keep(ctx: ConvContext, suppress: str, valid: str, k: int) -> str:
    """(B, k) bool: greedy suppression in slot order, as the fixed point of
    ``keep = valid & ~any_j(keep[j] & suppress[j, :])`` (``suppress`` (B, k, k) bool, zero on and
    below the diagonal). Every slot's value is final after as many iterations as its position.

    Each iteration is one (1 x k) by (k x k) ``MatMul`` of 0/1 values: a count is 0 exactly when
    no kept box suppresses the slot, whatever the float type (a sum of positive terms never rounds
    to 0), so the matrix may be float32 or, in an fp16 engine, float16; the body follows its type
    with ``CastLike``.
    """
    from onnx import TensorProto, helper, numpy_helper

    matrix = _op(ctx, "Cast", suppress, to=1)  # FLOAT: float16 in an fp16 engine
    names = {n: ctx.tmp(f"loop_{n}") for n in ("it", "cond_in", "keep_in", "ax", "ku", "kf", "cnt", "cs", "half", "halfc",
                                                 "free", "keep_out", "chg", "chgi", "chgm", "zero", "cond_out")}
    t = names.__getitem__

    def const(name: str, value: np.ndarray) -> Any:
        return helper.make_node("Constant", [], [t(name)], value=numpy_helper.from_array(value))

    def reduce_max(x: str, out: str) -> Any:
        return helper.make_node("ReduceMax", [t(x)], [t(out)], keepdims=0)

    body = helper.make_graph([
        const("ax", np.asarray([1], np.int64)),
        const("half", np.asarray(0.5, np.float32)),
        const("zero", np.asarray(0, np.int32)),
        helper.make_node("Unsqueeze", [t("keep_in"), t("ax")], [t("ku")]),  # (B, 1, k)
        helper.make_node("CastLike", [t("ku"), matrix], [t("kf")]),
        helper.make_node("MatMul", [t("kf"), matrix], [t("cnt")]),  # (B, 1, k): kept boxes suppressing each slot
        helper.make_node("Squeeze", [t("cnt"), t("ax")], [t("cs")]),
        helper.make_node("CastLike", [t("half"), matrix], [t("halfc")]),
        helper.make_node("Less", [t("cs"), t("halfc")], [t("free")]),
        helper.make_node("And", [valid, t("free")], [t("keep_out")]),
        helper.make_node("Xor", [t("keep_out"), t("keep_in")], [t("chg")]),
        helper.make_node("Cast", [t("chg")], [t("chgi")], to=_INT32),
        reduce_max("chgi", "chgm"),
        helper.make_node("Greater", [t("chgm"), t("zero")], [t("cond_out")]),
    ], ctx.tmp("nms_body"),
        [helper.make_tensor_value_info(t("it"), TensorProto.INT64, []),
         helper.make_tensor_value_info(t("cond_in"), TensorProto.BOOL, []),
         helper.make_tensor_value_info(t("keep_in"), TensorProto.BOOL, None)],
        [helper.make_tensor_value_info(t("cond_out"), TensorProto.BOOL, []),
         helper.make_tensor_value_info(t("keep_out"), TensorProto.BOOL, None)])
    # Loop's trip count and condition are 0-d: Constant nodes keep that rank (initializers here are 1-D).
    trips = _op(ctx, "Constant", value=np.asarray(k + 1, np.int64))
    go = _op(ctx, "Constant", value=np.asarray(True))
    return ctx.emit("Loop", [trips, go, valid], [ctx.tmp("keep")], body=body)[0]


# -- pairwise overlap -------------------------------------------------------------------


def _axis_extent(ctx: ConvContext, a: str, b: str, center: bool) -> Tuple[str, str]:
    """(low, high) along one axis from the pair of columns ``a, b`` (corner: x1, x2; center: x, w)."""
    if not center:
        return a, b
    half = _op(ctx, "Div", b, _fconst(ctx, 2.0, "two"))
    return _op(ctx, "Sub", a, half), _op(ctx, "Add", a, half)


def _overlap_nms(ctx: ConvContext, coords: Sequence[str], center: bool, thresh: float) -> str:
    """(B, k, k) bool ``IoU(j, i) > thresh`` as box_nms computes it (no +1; negative sides give area 0)."""
    zero = _fconst(ctx, 0.0, "zero")
    sides = []
    for a, b in ((coords[0], coords[2]), (coords[1], coords[3])):
        lo, hi = _axis_extent(ctx, a, b, center)
        (loj, loi), (hij, hii) = _pairs(ctx, lo), _pairs(ctx, hi)
        left = _op(ctx, "Where", _op(ctx, "Greater", loj, loi), loj, loi)  # a1 > b1 ? a1 : b1
        right = _op(ctx, "Where", _op(ctx, "Less", hij, hii), hij, hii)  # a2 < b2 ? a2 : b2
        w = _op(ctx, "Sub", right, left)
        sides.append(_op(ctx, "Where", _op(ctx, "Greater", w, zero), w, zero))
    inter = _op(ctx, "Mul", sides[0], sides[1])
    if center:
        width, height = coords[2], coords[3]
    else:
        width, height = _op(ctx, "Sub", coords[2], coords[0]), _op(ctx, "Sub", coords[3], coords[1])
    negative = _op(ctx, "Or", _op(ctx, "Less", width, zero), _op(ctx, "Less", height, zero))
    area = _op(ctx, "Where", negative, zero, _op(ctx, "Mul", width, height))
    aj, ai = _pairs(ctx, area)
    iou = _op(ctx, "Div", inter, _op(ctx, "Sub", _op(ctx, "Add", aj, ai), inter))
    return _op(ctx, "Greater", iou, _fconst(ctx, thresh, "thresh"))


def _overlap_multibox(ctx: ConvContext, coords: Sequence[str], thresh: float) -> str:
    """(B, k, k) bool ``IoU(j, i) >= thresh`` as MultiBoxDetection computes it (union <= 0: IoU 0)."""
    zero = _fconst(ctx, 0.0, "zero")
    sides = []
    for a, b in ((coords[0], coords[2]), (coords[1], coords[3])):
        (aj, ai), (bj, bi) = _pairs(ctx, a), _pairs(ctx, b)
        w = _op(ctx, "Sub", _std_min(ctx, bj, bi), _std_max(ctx, aj, ai))
        sides.append(_op(ctx, "Where", _op(ctx, "Less", zero, w), w, zero))  # std::max(0, w)
    inter = _op(ctx, "Mul", sides[0], sides[1])
    area = _op(ctx, "Mul", _op(ctx, "Sub", coords[2], coords[0]), _op(ctx, "Sub", coords[3], coords[1]))
    aj, ai = _pairs(ctx, area)
    union = _op(ctx, "Sub", _op(ctx, "Add", aj, ai), inter)
    iou = _op(ctx, "Where", _op(ctx, "LessOrEqual", union, zero), zero, _op(ctx, "Div", inter, union))
    return _op(ctx, "GreaterOrEqual", iou, _fconst(ctx, thresh, "thresh"))


def _suppressor(ctx: ConvContext, overlap: str, valid: str, k: int, same_class: Optional[str]) -> str:
    """(B, k, k) bool ``S[j, i]``: j < i, both valid, same class (when given) and overlapping."""
    upper = ctx.const(np.triu(np.ones((k, k), bool), 1).reshape(1, k, k), "upper")
    s = _op(ctx, "And", overlap, upper)
    vj, vi = _pairs(ctx, valid)
    s = _op(ctx, "And", s, _op(ctx, "And", vj, vi))
    return s if same_class is None else _op(ctx, "And", s, same_class)


def _same(ctx: ConvContext, ids: str) -> str:
    """(B, k, k) bool ``ids[j] == ids[i]``."""
    j, i = _pairs(ctx, ids)
    return _op(ctx, "Equal", j, i)


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
    if 3 * n >= MAX_ROWS:
        return f"{n} boxes per batch row exceed the int32 keys (up to 3n) of the ONNX form"
    if b * k * k > MAX_PAIRS:
        return (f"suppressing {k} candidates in each of {b} batch rows compares {b * k * k} pairs "
                f"(limit {MAX_PAIRS}); set topk lower to convert it")
    return None


def _convert_format(ctx: ConvContext, coords: List[str], to_center: bool) -> List[str]:
    """MXNet's corner_to_center / center_to_corner, skipping rows whose first coordinate is < 0."""
    two = _fconst(ctx, 2.0, "two")
    c0, c1, c2, c3 = coords
    if to_center:
        new = [_op(ctx, "Div", _op(ctx, "Add", c0, c2), two), _op(ctx, "Div", _op(ctx, "Add", c1, c3), two),
               _op(ctx, "Sub", c2, c0), _op(ctx, "Sub", c3, c1)]
    else:
        hw, hh = _op(ctx, "Div", c2, two), _op(ctx, "Div", c3, two)
        new = [_op(ctx, "Sub", c0, hw), _op(ctx, "Sub", c1, hh), _op(ctx, "Add", c0, hw), _op(ctx, "Add", c1, hh)]
    skip = _op(ctx, "Less", c0, _fconst(ctx, 0.0, "zero"))
    return [_op(ctx, "Where", skip, old, nw) for old, nw in zip(coords, new)]


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
    x = _op(ctx, "Reshape", ctx.inputs[0], int64s(ctx, [b, n, w], "shape"))
    score = _column(ctx, x, si)
    valid = _op(ctx, "Greater", score, _fconst(ctx, attr_float(spec, "valid_thresh", 0.0), "valid_thresh"))
    if ii >= 0:
        bg = _fconst(ctx, float(attr_int(spec, "background_id", -1)), "background")
        valid = _op(ctx, "And", valid, _op(ctx, "Not", _op(ctx, "Equal", _column(ctx, x, ii), bg)))
    slots, slot_valid = _select(ctx, score, valid, n, k)
    perm = _stable_order(ctx, _gather(ctx, score, slots), slot_valid, k)
    order = _gather(ctx, slots, perm)
    cand = _gather_rows(ctx, x, order, w)  # (B, k, W) in MXNet's sorted order
    cvalid = _gather(ctx, slot_valid, perm)
    coords = [_column(ctx, cand, cs + c) for c in range(4)]
    overlap = _overlap_nms(ctx, coords, center, attr_float(spec, "overlap_thresh", 0.5))
    same = None
    if ii >= 0 and not spec.bool_("force_suppress", False):
        same = _same(ctx, trunc(ctx, _column(ctx, cand, ii), spec.in_dtypes[0], 2))
    keep = _greedy_keep(ctx, _suppressor(ctx, overlap, cvalid, k, same), cvalid, k)
    kept, kept_valid = _compact(ctx, keep, k, k)
    rows = _gather_rows(ctx, cand, kept, w)
    rows = _op(ctx, "Where", _unsq(ctx, kept_valid, 2), rows, _fconst(ctx, -1.0, "minus1"))
    if attr_str(spec, "in_format", "corner") != attr_str(spec, "out_format", "corner"):
        cols = [_column(ctx, rows, c) for c in range(w)]
        cols[cs:cs + 4] = _convert_format(ctx, cols[cs:cs + 4], not center)
        rows = _op(ctx, "Concat", *[_unsq(ctx, c, 2) for c in cols], axis=2)
    if k < n:
        fill = _op(ctx, "Constant", value=np.asarray(-1, np.dtype(spec.in_dtypes[0])))  # Pad wants a 0-d value
        rows = _op(ctx, "Pad", rows, int64s(ctx, [0, 0, 0, 0, n - k, 0], "pads"), fill)
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
    a = _op(ctx, "Reshape", anchors, int64s(ctx, [1, n, 4], "shape"))
    al, at, ar, ab = (_column(ctx, a, c) for c in range(4))
    p = _op(ctx, "Reshape", loc, int64s(ctx, [0, n, 4], "shape"))
    px, py, pw, ph = (_column(ctx, p, c) for c in range(4))
    vx, vy, vw, vh = (_fconst(ctx, v, "var") for v in _variances(spec))
    two = _fconst(ctx, 2.0, "two")
    aw, ah = _op(ctx, "Sub", ar, al), _op(ctx, "Sub", ab, at)
    ax, ay = _op(ctx, "Div", _op(ctx, "Add", al, ar), two), _op(ctx, "Div", _op(ctx, "Add", at, ab), two)
    ox = _op(ctx, "Add", _op(ctx, "Mul", _op(ctx, "Mul", px, vx), aw), ax)
    oy = _op(ctx, "Add", _op(ctx, "Mul", _op(ctx, "Mul", py, vy), ah), ay)
    ow = _op(ctx, "Div", _op(ctx, "Mul", _op(ctx, "Exp", _op(ctx, "Mul", pw, vw)), aw), two)
    oh = _op(ctx, "Div", _op(ctx, "Mul", _op(ctx, "Exp", _op(ctx, "Mul", ph, vh)), ah), two)
    out = [_op(ctx, "Sub", ox, ow), _op(ctx, "Sub", oy, oh), _op(ctx, "Add", ox, ow), _op(ctx, "Add", oy, oh)]
    if spec.bool_("clip", True):
        zero, one = _fconst(ctx, 0.0, "zero"), _fconst(ctx, 1.0, "one")
        out = [_std_max(ctx, zero, _std_min(ctx, one, v)) for v in out]
    return out


def _set_column(ctx: ConvContext, rows: str, c: int, width: int, value: str) -> str:
    """``rows`` (B, n, W) with column ``c`` replaced by the (B, n) ``value``."""
    cols = [_column(ctx, rows, j) for j in range(width)]
    cols[c] = value
    return _op(ctx, "Concat", *[_unsq(ctx, v, 2) for v in cols], axis=2)


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
    probs = _op(ctx, "Slice", cls_prob, int64s(ctx, [1], "s"), int64s(ctx, [c], "e"), int64s(ctx, [1], "ax"))
    best = _reduce(ctx, "ReduceMax", probs, 1, False)  # (B, n)
    cls = _op(ctx, "Cast", _op(ctx, "ArgMax", probs, axis=1, keepdims=0, select_last_index=0), to=1)
    found = _op(ctx, "Greater", best, _fconst(ctx, -1.0, "minus1"))  # MXNet starts its maximum at -1
    score = _op(ctx, "Where", found, best, _fconst(ctx, -1.0, "minus1"))
    valid = _op(ctx, "And", found, _op(ctx, "Not", _op(ctx, "Less", score, _fconst(ctx, attr_float(spec, "threshold", 0.01),
                                                                                       "threshold"))))
    ids = _op(ctx, "Where", valid, cls, _fconst(ctx, -1.0, "minus1"))  # class j is id j - 1
    boxes = _decode_anchors(ctx, loc, anchors, n)
    rows = _op(ctx, "Concat", *[_unsq(ctx, v, 2) for v in [ids, score] + boxes], axis=2)  # (B, n, 6)
    minus1 = _fconst(ctx, -1.0, "minus1")
    comp, comp_valid = _compact(ctx, valid, n, n)
    packed = _op(ctx, "Where", _unsq(ctx, comp_valid, 2), _gather_rows(ctx, rows, comp, 6), minus1)
    nms = attr_float(spec, "nms_threshold", 0.5)
    if not 0 < nms <= 1:
        ctx.emit("Identity", [packed], ctx.outputs)
        return
    k = _multibox_k(spec)
    slots, slot_valid = _select(ctx, score, valid, n, k)
    perm = _stable_order(ctx, _gather(ctx, score, slots), slot_valid, k)
    top = _gather_rows(ctx, rows, _gather(ctx, slots, perm), 6)
    top_valid = _gather(ctx, slot_valid, perm)
    top_ids = _column(ctx, top, 0)
    same = None if spec.bool_("force_suppress", False) else _same(ctx, top_ids)
    overlap = _overlap_multibox(ctx, [_column(ctx, top, j) for j in range(2, 6)], nms)
    keep = _greedy_keep(ctx, _suppressor(ctx, overlap, top_valid, k, same), top_valid, k)
    top = _set_column(ctx, top, 0, 6, _op(ctx, "Where", keep, top_ids, minus1))
    top = _op(ctx, "Where", _unsq(ctx, top_valid, 2), top, minus1)
    if k < n:
        rest = _op(ctx, "Slice", packed, int64s(ctx, [k], "s"), int64s(ctx, [n], "e"), int64s(ctx, [1], "ax"))
        rest = _set_column(ctx, rest, 0, 6, ctx.const(np.full((b, n - k), -1, np.float32), "no_id"))
        top = _op(ctx, "Concat", top, rest, axis=1)
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
    x1, y1, x2, y2 = (_op(ctx, "Gather", anchors, int64s(ctx, [i], "i"), axis=0) for i in range(4))
    x1, y1, x2, y2 = (_op(ctx, "Squeeze", v, int64s(ctx, [0], "axes")) for v in (x1, y1, x2, y2))  # (1, count)
    dx, dy, dw, dh = deltas
    one, half = _fconst(ctx, 1.0, "one"), _fconst(ctx, 0.5, "half")
    if spec.bool_("iou_loss", False):
        out = [_op(ctx, "Add", x1, dx), _op(ctx, "Add", y1, dy), _op(ctx, "Add", x2, dw), _op(ctx, "Add", y2, dh)]
    else:
        width = _op(ctx, "Add", _op(ctx, "Sub", x2, x1), one)
        height = _op(ctx, "Add", _op(ctx, "Sub", y2, y1), one)
        cx = _op(ctx, "Add", x1, _op(ctx, "Mul", half, _op(ctx, "Sub", width, one)))
        cy = _op(ctx, "Add", y1, _op(ctx, "Mul", half, _op(ctx, "Sub", height, one)))
        px, py = _op(ctx, "Add", _op(ctx, "Mul", dx, width), cx), _op(ctx, "Add", _op(ctx, "Mul", dy, height), cy)
        pw = _op(ctx, "Mul", _op(ctx, "Exp", dw), width)
        ph = _op(ctx, "Mul", _op(ctx, "Exp", dh), height)
        hw, hh = _op(ctx, "Mul", half, _op(ctx, "Sub", pw, one)), _op(ctx, "Mul", half, _op(ctx, "Sub", ph, one))
        out = [_op(ctx, "Sub", px, hw), _op(ctx, "Sub", py, hh), _op(ctx, "Add", px, hw), _op(ctx, "Add", py, hh)]
    zero = _fconst(ctx, 0.0, "zero")
    im_h, im_w = info[0], info[1]
    xmax, ymax = _op(ctx, "Sub", im_w, one), _op(ctx, "Sub", im_h, one)
    return [_std_max(ctx, _std_min(ctx, v, m), zero) for v, m in zip(out, (xmax, ymax, xmax, ymax))]


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
    fg = _op(ctx, "Slice", cls_prob, int64s(ctx, [a], "s"), int64s(ctx, [c], "e"), int64s(ctx, [1], "ax"))
    score = _op(ctx, "Reshape", _op(ctx, "Transpose", fg, perm=[0, 2, 3, 1]), int64s(ctx, [b, count], "shape"))
    d = _op(ctx, "Reshape", bbox_pred, int64s(ctx, [b, a, 4, h, w], "shape"))
    d = _op(ctx, "Reshape", _op(ctx, "Transpose", d, perm=[0, 3, 4, 1, 2]), int64s(ctx, [b, count, 4], "shape"))
    deltas = [_column(ctx, d, i) for i in range(4)]
    info = [_op(ctx, "Slice", im_info, int64s(ctx, [i], "s"), int64s(ctx, [i + 1], "e"), int64s(ctx, [1], "ax"))
            for i in range(3)]  # (B, 1) each: height, width, scale
    x1, y1, x2, y2 = _proposal_boxes(ctx, deltas, info, count)
    minus1 = _fconst(ctx, -1.0, "minus1")
    # Anchors whose cell lies past the image's real size: score -1.
    cells = np.arange(count) // a
    stride_c = _fconst(ctx, stride, "stride")
    real_h, real_w = (trunc(ctx, _op(ctx, "Div", v, stride_c), "float32", 2) for v in info[:2])
    past = _op(ctx, "Or", _op(ctx, "GreaterOrEqual", ctx.const((cells // w).astype(np.float32).reshape(1, -1), "row"), real_h),
               _op(ctx, "GreaterOrEqual", ctx.const((cells % w).astype(np.float32).reshape(1, -1), "col"), real_w))
    score = _op(ctx, "Where", past, minus1, score)
    # FilterBox: too small after clipping -> grown by min_size, score -1.
    one = _fconst(ctx, 1.0, "one")
    min_size = _op(ctx, "Mul", _fconst(ctx, float(attr_int(spec, "rpn_min_size", 16)), "min_size"), info[2])
    small = _op(ctx, "Or", _op(ctx, "Less", _op(ctx, "Add", _op(ctx, "Sub", x2, x1), one), min_size),
                _op(ctx, "Less", _op(ctx, "Add", _op(ctx, "Sub", y2, y1), one), min_size))
    grow = _op(ctx, "Div", min_size, _fconst(ctx, 2.0, "two"))
    x1, y1 = (_op(ctx, "Where", small, _op(ctx, "Sub", v, grow), v) for v in (x1, y1))
    x2, y2 = (_op(ctx, "Where", small, _op(ctx, "Add", v, grow), v) for v in (x2, y2))
    score = _op(ctx, "Where", small, minus1, score)
    rows = _op(ctx, "Concat", *[_unsq(ctx, v, 2) for v in (x1, y1, x2, y2, score)], axis=2)  # (B, count, 5)
    every = _op(ctx, "Expand", ctx.const(np.ones((1, count), bool), "all"), int64s(ctx, [b, count], "bn"))
    slots, slot_valid = _select(ctx, score, every, count, pre)
    perm = _stable_order(ctx, _gather(ctx, score, slots), slot_valid, pre)
    top = _gather_rows(ctx, rows, _gather(ctx, slots, perm), 5)  # (B, pre, 5), MXNet's sorted order
    bx = [_column(ctx, top, i) for i in range(4)]
    sides = []
    for lo, hi in ((bx[0], bx[2]), (bx[1], bx[3])):
        (loj, loi), (hij, hii) = _pairs(ctx, lo), _pairs(ctx, hi)
        wd = _op(ctx, "Add", _op(ctx, "Sub", _std_min(ctx, hij, hii), _std_max(ctx, loj, loi)), one)
        sides.append(_op(ctx, "Where", _op(ctx, "Less", _fconst(ctx, 0.0, "zero"), wd), wd, _fconst(ctx, 0.0, "zero")))
    inter = _op(ctx, "Mul", sides[0], sides[1])
    area = _op(ctx, "Mul", _op(ctx, "Add", _op(ctx, "Sub", bx[2], bx[0]), one), _op(ctx, "Add", _op(ctx, "Sub", bx[3], bx[1]), one))
    aj, ai = _pairs(ctx, area)
    iou = _op(ctx, "Div", inter, _op(ctx, "Sub", _op(ctx, "Add", aj, ai), inter))
    overlap = _op(ctx, "Greater", iou, _fconst(ctx, attr_float(spec, "threshold", 0.7), "thresh"))
    every_k = _op(ctx, "Expand", ctx.const(np.ones((1, pre), bool), "all_k"), int64s(ctx, [b, pre], "bk"))
    keep = _greedy_keep(ctx, _suppressor(ctx, overlap, every_k, pre, None), every_k, pre)
    kept, _ = _compact(ctx, keep, pre, pre)
    nkept = _reduce(ctx, "ReduceSum", _op(ctx, "Cast", keep, to=_INT64), 1, True)  # (B, 1), at least 1
    at = ctx.const(np.arange(post, dtype=np.int64).reshape(1, post), "at")
    at = _op(ctx, "Sub", at, _op(ctx, "Mul", _op(ctx, "Div", at, nkept), nkept))  # i mod kept, cyclic
    src = _op(ctx, "Squeeze", _take(ctx, kept, at, b, pre), int64s(ctx, [2], "axes"))  # (B, post)
    out = _take(ctx, top, src, b, pre)  # (B, post, 5)
    image = ctx.const(np.repeat(np.arange(b, dtype=np.float32), post).reshape(b, post, 1), "image")
    boxes = _op(ctx, "Slice", out, int64s(ctx, [0], "s"), int64s(ctx, [4], "e"), int64s(ctx, [2], "ax"))
    ctx.emit("Reshape", [_op(ctx, "Concat", image, boxes, axis=2), int64s(ctx, [b * post, 5], "shape")], ctx.outputs[:1])
    if len(ctx.outputs) > 1:
        sc = _op(ctx, "Slice", out, int64s(ctx, [4], "s"), int64s(ctx, [5], "e"), int64s(ctx, [2], "ax"))
        ctx.emit("Reshape", [sc, int64s(ctx, [b * post, 1], "shape")], ctx.outputs[1:2])
