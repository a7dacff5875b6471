"""The exact building blocks of MXNet's non-maximum suppression in standard ONNX, with
static shapes, shared by the detection converters (:mod:`.detection`).

MXNet's suppression is greedy over the candidates sorted by score (``std::stable_sort``:
descending scores, ties by the lower index). ONNX ``NonMaxSuppression`` returns indices
in another tie order, so it is not used. The blocks, each exact:

1. **Top-k selection** (:func:`select`): the ``k`` best valid rows per batch row, ties at
   the cut-off broken by the lower index: one ``TopK`` for the k-th score, one over a
   unique integer key (rows above it, then the tied rows by index).
2. **Compaction** (:func:`compact`): the indices of a mask's rows in ascending order, by a
   ``TopK`` over the unique integer key ``n - index``.
3. **Stable sort** (:func:`stable_order`): a ``TopK`` by score, then runs of equal scores
   numbered with a ``CumSum`` and a ``TopK`` over the unique key ``run * k + slot``.
4. **Greedy suppression** (:func:`greedy`), in one of two exact forms:

   * k x k (k <= :data:`ROW_LOOP_MIN_K`): ``S[j, i]`` = "slot j comes before slot i and
     suppresses it when kept" is built once; the greedy result is the unique fixed point
     of ``keep[i] = valid[i] and not any_j(keep[j] and S[j, i])``, which an ONNX ``Loop``
     iterates from ``keep = valid`` until nothing changes (after t iterations the first t
     slots are final; a handful of iterations in practice). Each iteration is one
     ``MatMul`` of 0/1 values.
   * blocks (larger k, where k x k matrices cost more than they save): a ``Loop`` takes
     the first :data:`BLOCK` undecided slots per iteration, settles them among
     themselves (the same fixed point on a ``BLOCK x BLOCK`` matrix, unrolled), and has
     the kept ones suppress every later slot they overlap; it ends when every slot is
     decided.

ONNX ``TopK`` past TensorRT's limit (:data:`TOPK_CHUNK`) is taken in chunks. ONNX
``Min``/``Max`` are never used: C++'s ``std::min``/``std::max`` are ``Where``s (exact,
NaN included), and ONNX Runtime 1.19's float16 ``Min``/``Max`` with broadcasting on both
sides corrupt the heap. Loop bodies hold float constants as ``CastLike`` of the data, so
that fp16 engines (whose rewrite does not enter bodies) stay consistent.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np

from mx_trt.export.converters.indexing import TRT_MAX_TOPK
from mx_trt.export.converters.registry import ConvContext

logger = logging.getLogger(__name__)

#: Largest ``batch * k * k`` (pairwise comparisons of k candidates) a converted node may build.
MAX_PAIRS = 1 << 26
#: The largest k of one ONNX ``TopK`` (TensorRT's limit); larger k are taken in chunks.
TOPK_CHUNK = TRT_MAX_TOPK
#: Up to this many candidates, suppression builds the k x k matrix; past it, a loop over blocks of slots.
ROW_LOOP_MIN_K = 1024
#: Undecided slots a step of the loop over blocks decides at once (:func:`_greedy_blocks`).
BLOCK = 32
#: Integer keys (up to 3n, or k * k) must stay exact in int32.
MAX_KEY = (1 << 31) - 1
#: ONNX element types.
INT32, INT64, BOOL = 6, 7, 9

# -- small emission helpers ----------------------------------------------------------------


def op(ctx: Any, op_type: str, *ins: str, **attrs: Any) -> str:
    """Emit one node with one output; returns its name."""
    return ctx.emit(op_type, list(ins), **attrs)[0]


def int64s(ctx: Any, values: Sequence[int], hint: str = "idx") -> str:
    """An int64 1-D constant (shapes, axes, indices), in the graph or in a loop body."""
    return ctx.const(np.asarray(list(values), dtype=np.int64), hint)


def i32(ctx: Any, value: Any, hint: str) -> str:
    return ctx.const(np.asarray(value, dtype=np.int32), hint)


def fconst(ctx: Any, value: float, hint: str) -> str:
    """A float constant in the node's input dtype."""
    return ctx.const(np.asarray(value, dtype=np.dtype(ctx.spec.in_dtypes[0])), hint)


def unsq(ctx: Any, x: str, axis: int) -> str:
    return op(ctx, "Unsqueeze", x, int64s(ctx, [axis], "axes"))


def reduce(ctx: Any, op_type: str, x: str, axis: int, keepdims: bool) -> str:
    """ReduceX over one axis: ReduceSum takes axes as an input from opset 13, the others from 18."""
    if op_type == "ReduceSum" or ctx.opset >= 18:
        return op(ctx, op_type, x, int64s(ctx, [axis], "axes"), keepdims=int(keepdims))
    return op(ctx, op_type, x, axes=[axis], keepdims=int(keepdims))


def topk(ctx: ConvContext, x: str, k: int, largest: bool, dtype: str = "int32") -> Tuple[str, str]:
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
            current = op(ctx, "ScatterElements", current, i, op(ctx, "Expand", loser, op(ctx, "Shape", i)), axis=1)
    if len(chunks) == 1:
        return chunks[0]
    return (op(ctx, "Concat", *[v for v, _ in chunks], axis=1), op(ctx, "Concat", *[i for _, i in chunks], axis=1))


def column(ctx: Any, x: str, c: int) -> str:
    """``x[..., c]`` of a (B, n, W) tensor: (B, n)."""
    picked = op(ctx, "Slice", x, int64s(ctx, [c], "s"), int64s(ctx, [c + 1], "e"), int64s(ctx, [2], "ax"))
    return op(ctx, "Squeeze", picked, int64s(ctx, [2], "axes"))


def gather_rows(ctx: ConvContext, x: str, idx: str, width: int) -> str:
    """``x[b, idx[b, r], :]`` of (B, n, W) ``x`` and (B, r) int64 ``idx`` (r <= n): (B, r, W)."""
    full = op(ctx, "Concat", op(ctx, "Shape", idx), int64s(ctx, [width], "w"), axis=0)
    return op(ctx, "GatherElements", x, op(ctx, "Expand", unsq(ctx, idx, 2), full), axis=1)


def gather(ctx: Any, x: str, idx: str) -> str:
    """``x[b, idx[b, r]]`` of (B, n) ``x`` (r <= n): (B, r)."""
    return op(ctx, "GatherElements", x, idx, axis=1)


def take(ctx: ConvContext, x: str, idx: str, b: int, n: int) -> str:
    """``x[b, idx[b, r], ...]`` of (B, n, ...) ``x`` and (B, r) int64 ``idx`` for any r (GatherElements
    wants r <= n): a Gather over the flattened batch."""
    flat = op(ctx, "Reshape", x, int64s(ctx, [b * n, -1], "shape"))
    offset = ctx.const((np.arange(b, dtype=np.int64) * n).reshape(b, 1), "offset")
    return op(ctx, "Gather", flat, op(ctx, "Add", idx, offset), axis=0)  # (B, r, W)


def iota(ctx: Any, n: int, dtype: Any = np.int32, hint: str = "iota") -> str:
    """(1, n) constant ``[0, 1, ..., n-1]``."""
    return ctx.const(np.arange(n, dtype=dtype).reshape(1, n), hint)


def std_min(ctx: Any, a: str, b: str) -> str:
    """C++'s ``std::min(a, b)``, ``b < a ? b : a``."""
    return op(ctx, "Where", op(ctx, "Less", b, a), b, a)


def std_max(ctx: Any, a: str, b: str) -> str:
    """C++'s ``std::max(a, b)``, ``a < b ? b : a``."""
    return op(ctx, "Where", op(ctx, "Less", a, b), b, a)


# -- selection, compaction, stable sort ------------------------------------------------------


def select(ctx: ConvContext, score: str, valid: str, n: int, k: int) -> Tuple[str, str]:
    """The k best valid rows of each batch row: (int64 (B, k) indices, (B, k) bool real).

    Higher scores first and, at the k-th score, the lower indices, as a stable sort keeps
    them. The indices come as: the rows above the k-th score by index, then the tied rows
    by index, then padding; rows of equal score are therefore in index order, as
    :func:`stable_order` expects.
    """
    rest = op(ctx, "Sub", i32(ctx, n, "n"), iota(ctx, n))  # n - index, in [1, n]
    if k >= n:
        key = op(ctx, "Where", valid, rest, i32(ctx, 0, "zero"))
    else:
        sv = op(ctx, "Where", valid, score, fconst(ctx, float("-inf"), "ninf"))
        vals, _ = topk(ctx, sv, k, True, "float32")
        kth = op(ctx, "Slice", vals, int64s(ctx, [k - 1], "s"), int64s(ctx, [k], "e"), int64s(ctx, [1], "ax"))  # (B, 1)
        above = op(ctx, "Greater", sv, kth)
        tied = op(ctx, "And", op(ctx, "Equal", sv, kth), valid)
        key = op(ctx, "Where", above, op(ctx, "Add", rest, i32(ctx, 2 * n, "2n")),
                 op(ctx, "Where", tied, rest, i32(ctx, 0, "zero")))
    vals, idx = topk(ctx, key, k, True)
    return idx, op(ctx, "Greater", vals, i32(ctx, 0, "zero"))


def compact(ctx: ConvContext, mask: str, n: int, k: int) -> Tuple[str, str]:
    """(int64 (B, k) indices of the set rows in ascending order then the others, (B, k) bool set)."""
    key = op(ctx, "Where", mask, op(ctx, "Sub", i32(ctx, n, "n"), iota(ctx, n)), i32(ctx, 0, "zero"))
    vals, idx = topk(ctx, key, k, True)
    return idx, op(ctx, "Greater", vals, i32(ctx, 0, "zero"))


def stable_order(ctx: ConvContext, score: str, valid: str, k: int) -> str:
    """int64 (B, k) permutation of slots into MXNet's sort order: valid slots by descending
    score, equal scores by the lower slot (slots of equal score must be in index order),
    then the invalid ones (their score taken as -inf, below every valid score).

    ``TopK`` orders the scores, ties in any order; consecutive equal scores form runs,
    numbered by a ``CumSum``; a second ``TopK`` over ``run * k + slot`` (unique) orders
    the slots by run, then by slot. O(k log k).
    """
    sv = op(ctx, "Where", valid, score, fconst(ctx, float("-inf"), "ninf"))
    vals, slots = topk(ctx, sv, k, True, "float32")
    if k == 1:
        return slots
    step = op(ctx, "Cast", op(ctx, "Not", op(ctx, "Equal",
                                              op(ctx, "Slice", vals, int64s(ctx, [1], "s"), int64s(ctx, [k], "e"),
                                                 int64s(ctx, [1], "ax")),
                                              op(ctx, "Slice", vals, int64s(ctx, [0], "s"), int64s(ctx, [k - 1], "e"),
                                                 int64s(ctx, [1], "ax")))), to=INT32)
    run = op(ctx, "CumSum", op(ctx, "Pad", step, int64s(ctx, [0, 1, 0, 0], "pads")), i32(ctx, 1, "axis"))
    key = op(ctx, "Add", op(ctx, "Mul", run, i32(ctx, k, "k")), op(ctx, "Cast", slots, to=INT32))
    ordered, _ = topk(ctx, key, k, False)
    return op(ctx, "Cast", op(ctx, "Sub", ordered, op(ctx, "Mul", op(ctx, "Div", ordered, i32(ctx, k, "k")),
                                                      i32(ctx, k, "k"))), to=INT64)


# -- overlap, as MXNet's kernels compute it ---------------------------------------------------


@dataclass(frozen=True)
class Overlap:
    """How one MXNet kernel decides that a kept box suppresses a later one.

    Attributes:
        prepare: ``prepare(ctx, coords)``: per box, once, the values the test reads
            (the extents ``[x1, y1, x2, y2]`` its intersection uses, then its area).
        test: ``test(ctx, a, b)``: bool, broadcast over the prepared values of the
            earlier boxes ``a`` and the later boxes ``b``.
    """

    prepare: Callable[[Any, Sequence[str]], List[str]]
    test: Callable[[Any, Sequence[str], Sequence[str]], str]


def _clamped_side(ctx: Any, lo: str, hi: str) -> str:
    """``w > 0 ? w : 0`` of ``w = hi - lo``."""
    zero = fconst(ctx, 0.0, "zero")
    w = op(ctx, "Sub", hi, lo)
    return op(ctx, "Where", op(ctx, "Greater", w, zero), w, zero)


def nms_overlap(center: bool, thresh: float) -> Overlap:
    """box_nms: ``IoU > thresh``, no +1, sides below 0 give area 0, intersections clamped at 0;
    corner ``[x1, y1, x2, y2]`` or center ``[x, y, w, h]`` boxes (the center extents as its
    ``Intersect`` computes them, ``x -/+ w / 2``)."""

    def prepare(ctx: Any, c: Sequence[str]) -> List[str]:
        zero = fconst(ctx, 0.0, "zero")
        if center:
            hw, hh = (op(ctx, "Div", v, fconst(ctx, 2.0, "two")) for v in (c[2], c[3]))
            ext = [op(ctx, "Sub", c[0], hw), op(ctx, "Sub", c[1], hh), op(ctx, "Add", c[0], hw), op(ctx, "Add", c[1], hh)]
            w, h = c[2], c[3]
        else:
            ext, w, h = list(c), op(ctx, "Sub", c[2], c[0]), op(ctx, "Sub", c[3], c[1])
        negative = op(ctx, "Or", op(ctx, "Less", w, zero), op(ctx, "Less", h, zero))
        return ext + [op(ctx, "Where", negative, zero, op(ctx, "Mul", w, h))]

    def test(ctx: Any, a: Sequence[str], b: Sequence[str]) -> str:
        sides = []
        for lo, hi in ((0, 2), (1, 3)):
            left = op(ctx, "Where", op(ctx, "Greater", a[lo], b[lo]), a[lo], b[lo])  # a1 > b1 ? a1 : b1
            right = op(ctx, "Where", op(ctx, "Less", a[hi], b[hi]), a[hi], b[hi])  # a2 < b2 ? a2 : b2
            sides.append(_clamped_side(ctx, left, right))
        inter = op(ctx, "Mul", sides[0], sides[1])
        iou = op(ctx, "Div", inter, op(ctx, "Sub", op(ctx, "Add", a[4], b[4]), inter))
        return op(ctx, "Greater", iou, fconst(ctx, thresh, "thresh"))

    return Overlap(prepare, test)


def multibox_overlap(thresh: float) -> Overlap:
    """MultiBoxDetection: ``IoU >= thresh``, no +1, unclamped areas, a union <= 0 gives IoU 0."""

    def prepare(ctx: Any, c: Sequence[str]) -> List[str]:
        return list(c) + [op(ctx, "Mul", op(ctx, "Sub", c[2], c[0]), op(ctx, "Sub", c[3], c[1]))]

    def test(ctx: Any, a: Sequence[str], b: Sequence[str]) -> str:
        zero = fconst(ctx, 0.0, "zero")
        sides = [std_max(ctx, zero, op(ctx, "Sub", std_min(ctx, a[hi], b[hi]), std_max(ctx, a[lo], b[lo])))
                 for lo, hi in ((0, 2), (1, 3))]
        inter = op(ctx, "Mul", sides[0], sides[1])
        union = op(ctx, "Sub", op(ctx, "Add", a[4], b[4]), inter)
        iou = op(ctx, "Where", op(ctx, "LessOrEqual", union, zero), zero, op(ctx, "Div", inter, union))
        return op(ctx, "GreaterOrEqual", iou, fconst(ctx, thresh, "thresh"))

    return Overlap(prepare, test)


def proposal_overlap(thresh: float) -> Overlap:
    """Proposal's NonMaximumSuppression: ``IoU > thresh`` with sides + 1, intersections clamped at 0."""

    def prepare(ctx: Any, c: Sequence[str]) -> List[str]:
        one = fconst(ctx, 1.0, "one")
        return list(c) + [op(ctx, "Mul", op(ctx, "Add", op(ctx, "Sub", c[2], c[0]), one),
                             op(ctx, "Add", op(ctx, "Sub", c[3], c[1]), one))]

    def test(ctx: Any, a: Sequence[str], b: Sequence[str]) -> str:
        zero, one = fconst(ctx, 0.0, "zero"), fconst(ctx, 1.0, "one")
        sides = [std_max(ctx, zero, op(ctx, "Add", op(ctx, "Sub", std_min(ctx, a[hi], b[hi]), std_max(ctx, a[lo], b[lo])),
                                       one)) for lo, hi in ((0, 2), (1, 3))]
        inter = op(ctx, "Mul", sides[0], sides[1])
        iou = op(ctx, "Div", inter, op(ctx, "Sub", op(ctx, "Add", a[4], b[4]), inter))
        return op(ctx, "Greater", iou, fconst(ctx, thresh, "thresh"))

    return Overlap(prepare, test)


# -- greedy suppression -----------------------------------------------------------------------


def greedy(ctx: ConvContext, coords: Sequence[str], valid: str, k: int, overlap: Overlap,
           ids: Optional[str] = None) -> str:
    """(B, k) bool: MXNet's greedy suppression over k sorted slots.

    ``coords``: four (B, k) coordinate tensors in sorted order; ``valid`` (B, k): slots
    that take part (a prefix); ``ids`` (B, k): class ids when suppression is per class.
    A kept slot suppresses every later valid slot (of its class) that ``overlap`` says it
    overlaps; the boxes are prepared (extents, areas) once, outside the loops.
    """
    boxes = overlap.prepare(ctx, coords)
    if k > ROW_LOOP_MIN_K:
        return _greedy_blocks(ctx, boxes, valid, k, overlap, ids)
    later = [unsq(ctx, c, 1) for c in boxes]  # [j, i]: j earlier (rows), i later (columns)
    earlier = [unsq(ctx, c, 2) for c in boxes]
    s = op(ctx, "And", overlap.test(ctx, earlier, later), ctx.const(np.triu(np.ones((k, k), bool), 1).reshape(1, k, k), "upper"))
    s = op(ctx, "And", s, op(ctx, "And", unsq(ctx, valid, 2), unsq(ctx, valid, 1)))
    if ids is not None:
        s = op(ctx, "And", s, op(ctx, "Equal", unsq(ctx, ids, 2), unsq(ctx, ids, 1)))
    return _fixed_point(ctx, s, valid, k)


class _Body:
    """Emits the nodes of a ``Loop`` body with the helpers of this module.

    Constants become ``Constant`` nodes (float ones ``CastLike`` the float tensor ``like``,
    so that an fp16 engine's body computes in float16 as its outer graph does).
    """

    def __init__(self, ctx: ConvContext, like: str) -> None:
        self.spec, self.opset, self.tmp = ctx.spec, ctx.opset, ctx.tmp
        self.like = like
        self.nodes: List[Any] = []
        #: The body's 0-d bool output: whether to run another iteration.
        self.cond_out = ""

    def emit(self, op_type: str, inputs: Sequence[str], outputs: Optional[Sequence[str]] = None, **attrs: Any) -> List[str]:
        from onnx import helper, numpy_helper

        outs = list(outputs) if outputs is not None else [self.tmp(op_type.lower())]
        attrs = {k: numpy_helper.from_array(v) if isinstance(v, np.ndarray) else v for k, v in attrs.items()}
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, **attrs))
        return outs

    def const(self, value: Any, hint: str = "c", dtype: Optional[Any] = None) -> str:
        arr = np.asarray(value, dtype=dtype)
        if arr.dtype.kind == "f":
            raw = self.emit("Constant", [], [self.tmp(hint)], value=arr.astype(np.float32))[0]
            return self.emit("CastLike", [raw, self.like], [self.tmp(hint)])[0]
        return self.emit("Constant", [], [self.tmp(hint)], value=arr)[0]


def _loop(ctx: ConvContext, body: _Body, carried: Sequence[Tuple[str, str, str]], k: int) -> List[str]:
    """Emit ``Loop`` over ``body`` with at most ``k + 1`` iterations; ``carried``: (initial
    outer tensor, body input, body output) per loop-carried tensor, the condition excluded
    (body output ``cond_out``). Returns the final values."""
    from onnx import TensorProto, helper

    it, cond_in, cond_out = ctx.tmp("loop_it"), ctx.tmp("loop_cond"), body.cond_out
    graph = helper.make_graph(
        body.nodes, ctx.tmp("loop_body"),
        [helper.make_tensor_value_info(it, TensorProto.INT64, []), helper.make_tensor_value_info(cond_in, TensorProto.BOOL, [])]
        + [helper.make_tensor_value_info(b_in, TensorProto.BOOL, None) for _, b_in, _ in carried],
        [helper.make_tensor_value_info(cond_out, TensorProto.BOOL, [])]
        + [helper.make_tensor_value_info(b_out, TensorProto.BOOL, None) for _, _, b_out in carried])
    # Loop's trip count and condition are 0-d: Constant nodes keep that rank (initializers here are 1-D).
    trips = op(ctx, "Constant", value=np.asarray(k + 1, np.int64))
    go = op(ctx, "Constant", value=np.asarray(True))
    return ctx.emit("Loop", [trips, go] + [c[0] for c in carried], [ctx.tmp("loop_out") for _ in carried], body=graph)


def _any(ctx: Any, mask: str) -> str:
    """0-d bool: any element of ``mask`` set."""
    return op(ctx, "Greater", op(ctx, "ReduceMax", op(ctx, "Cast", mask, to=INT32), keepdims=0), ctx.const(
        np.asarray(0, np.int32), "zero"))


def _fixed_point(ctx: ConvContext, suppress: str, valid: str, k: int) -> str:
    """Iterate ``keep = valid & ~any_j(keep[j] & suppress[j, :])`` from ``keep = valid`` to its
    fixed point. Each iteration is one (1 x k) by (k x k) ``MatMul`` of 0/1 values: a count is 0
    exactly when no kept box suppresses the slot, in float32 or float16 alike (a sum of positive
    terms never rounds to 0)."""
    matrix = op(ctx, "Cast", suppress, to=1)  # FLOAT: float16 in an fp16 engine
    body = _Body(ctx, matrix)
    keep_in = ctx.tmp("keep_in")
    kf = op(body, "CastLike", unsq(body, keep_in, 1), matrix)  # (B, 1, k)
    count = op(body, "Squeeze", op(body, "MatMul", kf, matrix), int64s(body, [1], "axes"))
    keep_out = op(body, "And", valid, op(body, "Less", count, fconst(body, 0.5, "half")))
    body.cond_out = _any(body, op(body, "Xor", keep_out, keep_in))
    return _loop(ctx, body, [(valid, keep_in, keep_out)], k)[0]


def _greedy_blocks(ctx: ConvContext, boxes: Sequence[str], valid: str, k: int, overlap: Overlap,
                 ids: Optional[str]) -> str:
    """Greedy suppression a block of slots per iteration: the first :data:`BLOCK` undecided slots.

    Every slot before the last of them is decided, and no kept slot suppresses an
    undecided one (a kept slot marks what it suppresses at once), so each of them is
    kept unless an earlier one of the block is kept and suppresses it: the block's
    ``BLOCK x BLOCK`` fixed point, unrolled (after t steps its first t + 1 slots are
    final). The kept ones then suppress every later valid slot they overlap (of
    their class). Each iteration decides at least the block's first slot; iterations:
    about the busiest batch row's kept boxes over the block, for (B, BLOCK, k)
    tensors each. ``boxes``: the prepared values (:attr:`Overlap.prepare`) of every slot.
    """
    m = min(BLOCK, k)
    body = _Body(ctx, boxes[0])
    decided_in, keep_in = ctx.tmp("decided_in"), ctx.tmp("keep_in")
    slots = iota(body, k, np.int32)
    # The first m undecided slots, in slot order: TopK over k - slot of the undecided ones (0 for the others).
    key = op(body, "Where", decided_in, body.const(np.asarray(0, np.int32), "zero"),
             op(body, "Sub", body.const(np.asarray(k, np.int32), "k"), slots))
    vals, first = body.emit("TopK", [key, int64s(body, [m], "m")], [body.tmp("topk_v"), body.tmp("topk_i")],
                            axis=-1, largest=1, sorted=1)  # (B, m)
    has = op(body, "Greater", vals, body.const(np.asarray(0, np.int32), "zero"))
    cur = [gather(body, c, first) for c in boxes]  # (B, m) each
    cur_ids = gather(body, ids, first) if ids is not None else None
    # Within the block: S[j, i], j before i, both real slots, j suppresses i when kept.
    s = op(body, "And", overlap.test(body, [unsq(body, c, 2) for c in cur], [unsq(body, c, 1) for c in cur]),
           body.const(np.triu(np.ones((m, m), bool), 1).reshape(1, m, m), "upper"))
    s = op(body, "And", s, op(body, "And", unsq(body, has, 2), unsq(body, has, 1)))
    if cur_ids is not None:
        s = op(body, "And", s, op(body, "Equal", unsq(body, cur_ids, 2), unsq(body, cur_ids, 1)))
    # 0/1 in the boxes' float type (float16 in an fp16 engine: counts up to m stay exact).
    matrix = op(body, "CastLike", s, boxes[0])  # (B, m, m)
    half = body.const(np.asarray(0.5, np.float32), "half")
    kept = has
    for _ in range(m - 1):
        count = op(body, "MatMul", unsq(body, op(body, "CastLike", kept, boxes[0]), 1), matrix)  # (B, 1, m)
        kept = op(body, "And", has, op(body, "Less", op(body, "Squeeze", count, int64s(body, [1], "axes")), half))
    # The kept ones of the block suppress the later valid slots they overlap: (B, m, k) reduced over the block.
    first32 = unsq(body, op(body, "Cast", first, to=INT32), 2)  # (B, m, 1)
    hit = op(body, "And", overlap.test(body, [unsq(body, c, 2) for c in cur], [unsq(body, c, 1) for c in boxes]),
             op(body, "Greater", unsq(body, slots, 1), first32))
    if ids is not None and cur_ids is not None:
        hit = op(body, "And", hit, op(body, "Equal", unsq(body, cur_ids, 2), unsq(body, ids, 1)))
    hit = op(body, "And", op(body, "And", hit, unsq(body, kept, 2)), unsq(body, valid, 1))
    at = op(body, "Equal", unsq(body, slots, 1), first32)  # (B, m, k): where each block slot is
    chosen = _any_over(body, op(body, "And", at, unsq(body, kept, 2)), 1)
    in_block = _any_over(body, op(body, "And", at, unsq(body, has, 2)), 1)
    keep_out = op(body, "Or", keep_in, chosen)
    decided_out = op(body, "Or", op(body, "Or", decided_in, in_block), _any_over(body, hit, 1))
    body.cond_out = _any(body, op(body, "Not", decided_out))
    _, keep = _loop(ctx, body, [(op(ctx, "Not", valid), decided_in, decided_out),
                                (op(ctx, "And", valid, ctx.const(np.zeros((1, 1), bool), "none")), keep_in, keep_out)], k)
    return keep


def _any_over(ctx: Any, mask: str, axis: int) -> str:
    """bool: any element of ``mask`` set along ``axis`` (dropped)."""
    return op(ctx, "Greater", reduce(ctx, "ReduceMax", op(ctx, "Cast", mask, to=INT32), axis, False),
              ctx.const(np.asarray(0, np.int32), "zero"))
