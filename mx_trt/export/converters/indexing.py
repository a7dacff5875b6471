"""Converters for shape, index and gather operators (arange, one_hot, pick, take, gather_nd, topk, sort, Sequence*).

MXNet 1.9.1 (CPU, the reference) converts float indices and lengths to integers
with C's ``static_cast``: truncation toward zero, into int64 for ``take`` and into
``index_t`` (int32 in the released builds) for ``pick``, ``one_hot``, ``gather_nd``
and the ``Sequence*`` operators. The converters never leave that rounding to a
backend's ``Cast`` (TensorRT's is not specified for negatives): floats are rounded
explicitly (Floor/Ceil) before any Cast, or compared as floats. Values a C cast
cannot represent (NaN, beyond the integer range) are undefined behaviour in C;
where MXNet's x86 result (the "integer indefinite" minimum) is cheap to reproduce,
the converter does so and says so.

Index results are gathered with ONNX Gather/GatherElements/GatherND, which need
in-range indices: modes that clip or wrap produce them by construction.
"""
from __future__ import annotations

import logging
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

from mx_trt.errors import ConversionError
from mx_trt.export.converters.common import MOVE_DTYPES, cast, check_dtypes, expect_shape, identity, int64s, norm_axis
from mx_trt.export.converters.common import (
    nonzero,
    reshape,
    scalar_const,
    slice_,
    squeeze,
    trunc,
    unsqueeze,
    validator,
)
from mx_trt.export.converters.registry import FLOAT_DTYPES, ConvContext, register
from mx_trt.export.spec import OpSpec

logger = logging.getLogger(__name__)

#: TensorRT's TopK accepts k up to this value.
TRT_MAX_TOPK = 3840
#: Index-like inputs (indices, lengths) MXNet accepts and the engines hold.
INDEX_DTYPES = MOVE_DTYPES
#: Created or index-valued outputs (one_hot, topk/argsort indices, arange).
VALUE_DTYPES = MOVE_DTYPES

_MOVE = validator(dtypes=MOVE_DTYPES)


def _float_index(ctx: ConvContext, x: str, dtype: str) -> str:
    """Float indices in float32 (bounds such as ``n - 1`` may not be representable in half)."""
    return cast(ctx, x, "float32") if dtype == "float16" else x


def _where_lt(ctx: ConvContext, x: str, bound: float, fill: float, rank: int) -> str:
    """``x < bound ? x : fill`` in float32; NaN compares false and so becomes ``fill``."""
    lt = ctx.emit("Less", [x, scalar_const(ctx, bound, "float32", rank, "bound")])[0]
    return ctx.emit("Where", [lt, x, scalar_const(ctx, fill, "float32", rank, "fill")])[0]


def _clip_index(ctx: ConvContext, x: str, dtype: str, n: int, rank: int, int_bits: int) -> str:
    """MXNet's ``j = IntN(x); j = j < 0 ? 0 : j >= n ? n - 1 : j`` as an int64 tensor.

    For float input the C cast of NaN and of values at or beyond ``2**(bits-1)``
    gives the type's minimum on x86, which then clips to 0: reproduced by sending
    them to 0 before ``clip(floor(x))`` (floor and truncation agree after clipping at 0).
    """
    if dtype in FLOAT_DTYPES:
        x = _where_lt(ctx, _float_index(ctx, x, dtype), float(2 ** (int_bits - 1)), 0.0, rank)
        lo = ctx.const(np.array(0, np.float32), "lo")
        hi = ctx.const(np.array(n - 1, np.float32), "hi")
        return cast(ctx, ctx.emit("Clip", [ctx.emit("Floor", [x])[0], lo, hi])[0], "int64")
    x = ctx.emit("Max", [x, scalar_const(ctx, 0, dtype, rank, "lo")])[0]
    x = ctx.emit("Min", [x, scalar_const(ctx, n - 1, dtype, rank, "hi")])[0]
    return x if dtype == "int64" else cast(ctx, x, "int64")


def _wrap_index(ctx: ConvContext, x: str, dtype: str, n: int, rank: int, int_bits: int) -> str:
    """MXNet's ``j = IntN(x) % n; j += j < 0 ? n : 0`` (ONNX Mod with fmod=0 takes the divisor's sign).

    Float NaN and values at or beyond ``2**(bits-1)`` become the integer minimum, as the
    x86 C cast does; values below ``-2**(bits-1)`` saturate to it.
    """
    if dtype in FLOAT_DTYPES:
        low = -float(2 ** (int_bits - 1))
        x = _where_lt(ctx, _float_index(ctx, x, dtype), -low, low, rank)
        x = ctx.emit("Max", [x, scalar_const(ctx, low, "float32", rank, "low")])[0]
        x = cast(ctx, trunc(ctx, x, "float32", rank), "int64")
    elif dtype != "int64":
        x = cast(ctx, x, "int64")
    return ctx.emit("Mod", [x, scalar_const(ctx, n, "int64", rank, "n")], fmod=0)[0]


def _floor_int64(ctx: ConvContext, x: str, dtype: str) -> str:
    """Integral-valued indices as int64: floats are floored first (exact for the valid ranges)."""
    if dtype in FLOAT_DTYPES:
        return cast(ctx, ctx.emit("Floor", [x])[0], "int64")
    return x if dtype == "int64" else cast(ctx, x, "int64")


# ----------------------------------------------------------------------------------------
# Shape queries and creation
# ----------------------------------------------------------------------------------------
def _check_shape_query(spec: OpSpec) -> Optional[str]:
    if spec.out_dtypes[0] != "int64":
        return f"output dtype {spec.out_dtypes[0]} is not int64"
    return check_dtypes(spec, MOVE_DTYPES, outputs=False)


@register("shape_array", validator=validator(_check_shape_query, dtypes=None))
def _shape_array(ctx: ConvContext) -> None:
    """The input's shape as an int64 vector."""
    ctx.emit("Shape", ctx.inputs[:1], ctx.outputs)


@register("size_array", validator=validator(_check_shape_query, dtypes=None))
def _size_array(ctx: ConvContext) -> None:
    """The input's element count as an int64 vector of shape (1,)."""
    reshape(ctx, ctx.emit("Size", ctx.inputs[:1])[0], [1], ctx.outputs[0])


def _make_fill(value: Optional[float]) -> Callable[[ConvContext], None]:
    def convert(ctx: ConvContext) -> None:
        v = ctx.spec.float_("value", 0.0) if value is None else value
        fill = np.array([v], dtype=np.dtype(ctx.spec.out_dtypes[0]))
        if ctx.spec.in_shapes:
            shape = ctx.emit("Shape", [ctx.inputs[0]])[0]
        else:
            shape = int64s(ctx, ctx.spec.out_shapes[0], "shape")
        ctx.emit("ConstantOfShape", [shape], ctx.outputs, value=fill)

    convert.__doc__ = "A tensor filled with one value (``DType(value)``): ConstantOfShape of the (input's) shape."
    return convert


def _check_full(spec: OpSpec) -> Optional[str]:
    if spec.in_shapes:
        return None
    return expect_shape(spec, [int(d) for d in (spec.ints("shape", ()) or ())])


_FILL_VALIDATOR = validator(_check_full, dtypes=VALUE_DTYPES)
register("zeros_like", "_zeros", "_zeros_without_dtype", validator=_FILL_VALIDATOR)(_make_fill(0.0))
register("ones_like", "_ones", validator=_FILL_VALIDATOR)(_make_fill(1.0))
register("_full", validator=_FILL_VALIDATOR)(_make_fill(None))


def _range_values(spec: OpSpec, n: int, dtype: str, start: float, step: float, repeat: int) -> np.ndarray:
    """MXNet's range kernel ``out[i] = DType(start) + (i / repeat) * DType(step)`` in DType arithmetic.

    float32 rounds the product and the sum separately (as the C++ kernel). Integers
    truncate start and step, then wrap to the type. float16 behaves like an integer
    type: mshadow's ``half_t`` meets the integer ``i / repeat`` through its integer
    conversion, so MXNet 1.9.1 computes ``int(half(start)) + k * int(half(step))``
    (``arange(0, 3, 0.3, dtype='float16')`` is all zeros there) and so does the export.
    """
    k = np.arange(n, dtype=np.int64) // repeat
    if dtype in ("int32", "int64", "float16"):
        if dtype == "float16":
            start, step = float(np.float16(start)), float(np.float16(step))
        return (np.int64(int(start)) + k * np.int64(int(step))).astype(dtype)
    s0, st = np.float32(start), np.float32(step)
    return s0 + k.astype(np.float32) * st


def _arange_params(spec: OpSpec) -> Tuple[float, float, int]:
    step = spec.float_("step", 1.0) or 0.0
    repeat = spec.int_("repeat", 1) or 0
    if step == 0 or repeat < 1:
        raise ConversionError(f"step={step}, repeat={repeat}: need step != 0 and repeat >= 1")
    return spec.float_("start", 0.0) or 0.0, step, repeat


def _check_arange(spec: OpSpec) -> Optional[str]:
    start, step, repeat = _arange_params(spec)
    stop = spec.float_("stop")
    if stop is None and not spec.bool_("infer_range"):
        start, stop = 0.0, start
    if stop is not None and not spec.bool_("infer_range"):
        n = int(np.ceil((stop - start) / step)) * repeat
        return expect_shape(spec, [n])
    return None


@register("_arange", validator=validator(_check_arange, dtypes=VALUE_DTYPES))
def _arange(ctx: ConvContext) -> None:
    """``arange(start, stop, step)`` with ``repeat``, a constant (its length is MXNet's inferred shape)."""
    start, step, repeat = _arange_params(ctx.spec)
    if ctx.spec.float_("stop") is None and not ctx.spec.bool_("infer_range"):
        start = 0.0
    n = ctx.spec.out_shapes[0][0]
    identity(ctx, ctx.const(_range_values(ctx.spec, n, ctx.spec.out_dtypes[0], start, step, repeat), "range"), ctx.outputs[0])


def _check_arange_like(spec: OpSpec) -> Optional[str]:
    _arange_params(spec)
    axis = spec.int_("axis")
    ishape = list(spec.in_shapes[0])
    shape = ishape if axis is None else [ishape[norm_axis(axis, len(ishape))]]
    return expect_shape(spec, shape)


@register("_contrib_arange_like", validator=validator(_check_arange_like, dtypes=VALUE_DTYPES))
def _arange_like(ctx: ConvContext) -> None:
    """``start + (i // repeat) * step`` shaped like the input (or its ``axis``), in its dtype; a constant."""
    start, step, repeat = _arange_params(ctx.spec)
    oshape = ctx.spec.out_shapes[0]
    vals = _range_values(ctx.spec, int(np.prod(oshape)), ctx.spec.out_dtypes[0], start, step, repeat)
    identity(ctx, ctx.const(vals.reshape(oshape), "range"), ctx.outputs[0])


# ----------------------------------------------------------------------------------------
# Selection: where, broadcast_like
# ----------------------------------------------------------------------------------------
def _check_where(spec: OpSpec) -> Optional[str]:
    cshape, xshape, yshape = (tuple(s) for s in spec.in_shapes)
    if xshape != yshape:
        return f"x {xshape} and y {yshape} differ in shape"
    if cshape != xshape and not (len(cshape) == 1 and cshape[0] == xshape[0]):
        return f"condition shape {cshape} is neither {xshape} nor ({xshape[0]},)"
    if spec.in_dtypes[1] != spec.in_dtypes[2]:
        return "x and y have different dtypes"
    return check_dtypes(spec, MOVE_DTYPES)


@register("where", validator=validator(_check_where, dtypes=None))
def _where(ctx: ConvContext) -> None:
    """``cond != 0 ? x : y`` (NaN is true); a 1-D condition selects whole rows."""
    cshape, xshape = ctx.spec.in_shapes[0], ctx.spec.in_shapes[1]
    c = ctx.inputs[0]
    if len(cshape) != len(xshape):
        c = reshape(ctx, c, [cshape[0]] + [1] * (len(xshape) - 1))
    cond = nonzero(ctx, c, ctx.spec.in_dtypes[0], len(xshape))
    ctx.emit("Where", [cond, ctx.inputs[1], ctx.inputs[2]], ctx.outputs)


def _check_broadcast_like(spec: OpSpec) -> Optional[str]:
    lhs, rhs = list(spec.in_shapes[0]), list(spec.in_shapes[1])
    la, ra = spec.ints("lhs_axes"), spec.ints("rhs_axes")
    if la is None and ra is None:
        if len(lhs) != len(rhs):
            return f"lhs {tuple(lhs)} and rhs {tuple(rhs)} differ in rank"
        shape = rhs
    else:
        if la is None or ra is None or len(la) != len(ra):
            return f"lhs_axes {la} and rhs_axes {ra} must both be given with equal lengths"
        shape = list(lhs)
        for a, b in zip(la, ra):
            shape[norm_axis(a, len(lhs), "lhs_axes")] = rhs[norm_axis(b, len(rhs), "rhs_axes")]
    if any(i not in (1, o) for i, o in zip(lhs, shape)):
        return f"{tuple(lhs)} does not broadcast to {tuple(shape)}"
    return expect_shape(spec, shape) or check_dtypes(spec, MOVE_DTYPES, inputs=[0])


@register("broadcast_like", validator=validator(_check_broadcast_like, dtypes=None))
def _broadcast_like(ctx: ConvContext) -> None:
    """Expand lhs to the output shape; without axes that is rhs's runtime shape."""
    oshape = ctx.spec.out_shapes[0]
    if tuple(ctx.spec.in_shapes[1]) == tuple(oshape):
        target = ctx.emit("Shape", [ctx.inputs[1]])[0]
    else:
        target = int64s(ctx, oshape, "shape")
    ctx.emit("Expand", [ctx.inputs[0], target], ctx.outputs)


# ----------------------------------------------------------------------------------------
# Gathers: take, pick, gather_nd, one_hot
# ----------------------------------------------------------------------------------------
def _check_modes(spec: OpSpec, default: str) -> Optional[str]:
    mode = spec.str_("mode", default)
    if mode not in ("clip", "wrap"):
        return f"mode={mode!r} is not supported (only 'clip' and 'wrap': 'raise' raises on bad indices, an engine cannot)"
    return None


def _take_axis(spec: OpSpec) -> int:
    return norm_axis(spec.int_("axis", 0) or 0, len(spec.in_shapes[0]))


def _check_take(spec: OpSpec) -> Optional[str]:
    ax = _take_axis(spec)
    a, idx = list(spec.in_shapes[0]), list(spec.in_shapes[1])
    return (
        _check_modes(spec, "clip")
        or check_dtypes(spec, MOVE_DTYPES, inputs=[0])
        or check_dtypes(spec, INDEX_DTYPES, inputs=[1], outputs=False)
        or expect_shape(spec, a[:ax] + idx + a[ax + 1 :])
    )


@register("take", validator=validator(_check_take, dtypes=None))
def _take(ctx: ConvContext) -> None:
    """Gather along ``axis``; indices converted as C's ``int64_t(i)`` and clipped or wrapped.

    Float indices: NaN and values >= 2**63 act as index 0 in clip mode (MXNet's x86
    cast gives INT64_MIN, which clips to 0).
    """
    ax = _take_axis(ctx.spec)
    n = ctx.spec.in_shapes[0][ax]
    dt, rank = ctx.spec.in_dtypes[1], len(ctx.spec.in_shapes[1])
    make = _wrap_index if ctx.spec.str_("mode", "clip") == "wrap" else _clip_index
    idx = make(ctx, ctx.inputs[1], dt, n, rank, 64)
    ctx.emit("Gather", [ctx.inputs[0], idx], ctx.outputs, axis=ax)


def _pick_axis(spec: OpSpec) -> int:
    if spec.str_("axis") == "None":
        raise ConversionError("pick with axis=None (flattened) is not supported")
    return norm_axis(spec.int_("axis", -1) or 0, len(spec.in_shapes[0]))


def _check_pick(spec: OpSpec) -> Optional[str]:
    ax = _pick_axis(spec)
    ishape = list(spec.in_shapes[0])
    kept = ishape[:ax] + [1] + ishape[ax + 1 :]
    if int(np.prod(spec.in_shapes[1])) != int(np.prod(kept)):
        return f"index shape {spec.in_shapes[1]} does not match data {tuple(ishape)} without axis {ax}"
    out = kept if spec.bool_("keepdims") else ishape[:ax] + ishape[ax + 1 :]
    return (
        _check_modes(spec, "clip")
        or check_dtypes(spec, MOVE_DTYPES, inputs=[0])
        or check_dtypes(spec, INDEX_DTYPES, inputs=[1], outputs=False)
        or expect_shape(spec, out or [1])
    )


@register("pick", validator=validator(_check_pick, dtypes=None))
def _pick(ctx: ConvContext) -> None:
    """One element per position along ``axis`` (GatherElements); MXNet converts indices to int32.

    Float indices: NaN and values >= 2**31 become INT32_MIN as in MXNet's x86 build,
    i.e. index 0 with mode='clip' and ``INT32_MIN mod n`` with mode='wrap'. (int64
    indices beyond the int32 range wrap in MXNet's conversion; the engine clips or
    wraps the full value.)
    """
    ax = _pick_axis(ctx.spec)
    ishape = list(ctx.spec.in_shapes[0])
    kept = ishape[:ax] + [1] + ishape[ax + 1 :]
    idx = ctx.inputs[1]
    if list(ctx.spec.in_shapes[1]) != kept:
        idx = reshape(ctx, idx, kept)
    make = _wrap_index if ctx.spec.str_("mode", "clip") == "wrap" else _clip_index
    idx = make(ctx, idx, ctx.spec.in_dtypes[1], ishape[ax], len(kept), 32)
    g = ctx.emit("GatherElements", [ctx.inputs[0], idx], axis=ax)[0]
    reshape(ctx, g, ctx.spec.out_shapes[0], ctx.outputs[0])


def _check_gather_nd(spec: OpSpec) -> Optional[str]:
    dshape, ishape = list(spec.in_shapes[0]), list(spec.in_shapes[1])
    m = ishape[0]
    if m > len(dshape):
        return f"indices address {m} axes of a {len(dshape)}-D input"
    out = ishape[1:] + dshape[m:]
    return (
        check_dtypes(spec, MOVE_DTYPES, inputs=[0])
        or check_dtypes(spec, INDEX_DTYPES, inputs=[1], outputs=False)
        or expect_shape(spec, out or [1])
    )


@register("gather_nd", validator=validator(_check_gather_nd, dtypes=None))
def _gather_nd(ctx: ConvContext) -> None:
    """``out[y...] = data[idx[0, y...], ..., idx[M-1, y...]]`` as ONNX GatherND on indices moved last.

    MXNet reads ``int(i + dim) % dim``: for its valid range ``[-dim, dim-1]`` (it
    raises outside it) that is ``floor(i)`` with Python-style negative indices,
    which GatherND takes as they are. Out-of-range indices raise in MXNet and in
    ONNX Runtime; TensorRT's result for them is undefined.
    """
    ishape = list(ctx.spec.in_shapes[1])
    idx = _floor_int64(ctx, ctx.inputs[1], ctx.spec.in_dtypes[1])
    if len(ishape) == 1:
        idx = unsqueeze(ctx, idx, [0])
    else:
        idx = ctx.emit("Transpose", [idx], perm=list(range(1, len(ishape))) + [0])[0]
    g = ctx.emit("GatherND", [ctx.inputs[0], idx], batch_dims=0)[0]
    reshape(ctx, g, ctx.spec.out_shapes[0], ctx.outputs[0])


def _check_one_hot(spec: OpSpec) -> Optional[str]:
    depth = spec.int_("depth")
    if depth is None or depth < 1:
        return f"depth={depth} is not a positive integer"
    if spec.in_dtypes[0] in FLOAT_DTYPES and depth > 2 ** 24:
        return f"depth={depth} exceeds the integers float32 holds exactly"
    return (
        check_dtypes(spec, INDEX_DTYPES, inputs=[0], outputs=False)
        or check_dtypes(spec, VALUE_DTYPES, inputs=[])
        or expect_shape(spec, list(spec.in_shapes[0]) + [depth])
    )


@register("one_hot", validator=validator(_check_one_hot, dtypes=None))
def _one_hot(ctx: ConvContext) -> None:
    """``int(i) == k ? on_value : off_value`` for k in ``[0, depth)``.

    Compared, not gathered: an index outside ``[0, depth)`` (negative, too large,
    NaN, beyond int32) matches no k and gives a row of ``off_value``, as in MXNet.
    ONNX OneHot is not used because it wraps negative indices.
    """
    s = ctx.spec
    depth = int(s.int_("depth") or 0)
    rank = len(s.in_shapes[0]) + 1
    dt, odt = s.in_dtypes[0], s.out_dtypes[0]
    idx = unsqueeze(ctx, ctx.inputs[0], [rank - 1])
    if dt in FLOAT_DTYPES:
        idx = trunc(ctx, _float_index(ctx, idx, dt), "float32", rank)
        dt = "float32"
    ks = ctx.const(np.arange(depth, dtype=np.dtype(dt)).reshape((1,) * (rank - 1) + (depth,)), "depth_range")
    eq = ctx.emit("Equal", [idx, ks])[0]
    on = scalar_const(ctx, np.dtype(odt).type(s.float_("on_value", 1.0)), odt, rank, "on")
    off = scalar_const(ctx, np.dtype(odt).type(s.float_("off_value", 0.0)), odt, rank, "off")
    ctx.emit("Where", [eq, on, off], ctx.outputs)


# ----------------------------------------------------------------------------------------
# Search and sort: argmax / argmin / topk / sort / argsort
# ----------------------------------------------------------------------------------------
def _arg_axis(spec: OpSpec) -> Optional[int]:
    """Normalised axis, or None for MXNet's global (flattened) search."""
    nd = len(spec.in_shapes[0])
    axis = 1 if spec.op == "argmax_channel" else spec.int_("axis")
    if axis is None or nd == 1:
        return None
    return norm_axis(axis, nd)


def _check_arg(spec: OpSpec) -> Optional[str]:
    ishape = list(spec.in_shapes[0])
    ax = _arg_axis(spec)
    keep = spec.op != "argmax_channel" and spec.bool_("keepdims")
    if ax is None:
        shape = [1] * len(ishape) if keep else [1]
    elif keep:
        shape = ishape[:ax] + [1] + ishape[ax + 1 :]
    else:
        shape = ishape[:ax] + ishape[ax + 1 :]
    return expect_shape(spec, shape)


def _make_arg(onnx_op: str) -> Callable[[ConvContext], None]:
    def convert(ctx: ConvContext) -> None:
        ax = _arg_axis(ctx.spec)
        x = ctx.inputs[0]
        if ax is None:
            # A global search runs on a (1, n) view: TensorRT's ArgMax/ArgMin needs rank >= 2.
            x = reshape(ctx, x, [1, int(np.prod(ctx.spec.in_shapes[0]))])
            idx = ctx.emit(onnx_op, [x], axis=1, keepdims=1)[0]
            reshape(ctx, cast(ctx, idx, ctx.spec.out_dtypes[0]), ctx.spec.out_shapes[0], ctx.outputs[0])
        else:
            keep = ctx.spec.op != "argmax_channel" and ctx.spec.bool_("keepdims")
            idx = ctx.emit(onnx_op, [x], axis=ax, keepdims=int(keep))[0]
            cast(ctx, idx, ctx.spec.out_dtypes[0], ctx.outputs[0])

    convert.__doc__ = f"{onnx_op} (first occurrence) with MXNet's float-typed indices."
    return convert


register("argmax", "argmax_channel", validator=validator(_check_arg))(_make_arg("ArgMax"))
register("argmin", validator=validator(_check_arg))(_make_arg("ArgMin"))


def _topk_plan(spec: OpSpec) -> Tuple[Optional[int], int, str, bool, str]:
    """(axis or None for flattened, k, ret_typ, is_ascend, index dtype) for topk, sort and argsort."""
    ishape = spec.in_shapes[0]
    axis_s = spec.str_("axis", "-1")
    axis = None if axis_s == "None" else norm_axis(int(axis_s), len(ishape))  # type: ignore[arg-type]
    n = int(np.prod(ishape)) if axis is None else ishape[axis]
    if spec.op == "topk":
        k = spec.int_("k", 1) or 0
        k = n if k < 1 else k
        if k > n:
            raise ConversionError(f"k={k} exceeds the {n} elements along the axis")
        ret, ascend = str(spec.str_("ret_typ", "indices")), spec.bool_("is_ascend", False)
    else:
        k, ret, ascend = n, "value" if spec.op == "sort" else "indices", spec.bool_("is_ascend", True)
    return axis, k, ret, ascend, str(spec.str_("dtype", "float32"))


def _check_topk(spec: OpSpec) -> Optional[str]:
    axis, k, ret, _, dt = _topk_plan(spec)
    if ret not in ("value", "indices", "both", "mask"):
        return f"ret_typ={ret!r} is not one of value, indices, both, mask"
    if k > TRT_MAX_TOPK and spec.for_tensorrt:
        return f"k={k} exceeds TensorRT's TopK limit of {TRT_MAX_TOPK} (other backends take it)"
    if ret in ("indices", "both") and dt not in VALUE_DTYPES:
        return f"index dtype {dt} is not supported ({', '.join(VALUE_DTYPES)})"
    ishape = list(spec.in_shapes[0])
    if ret == "mask":
        shape = ishape
    else:
        shape = [k] if axis is None else ishape[:axis] + [k] + ishape[axis + 1 :]
    for i in range(len(spec.out_shapes)):
        reason = expect_shape(spec, shape, i)
        if reason:
            return reason
    return check_dtypes(spec, FLOAT_DTYPES, outputs=False)


@register("topk", "sort", "argsort", validator=validator(_check_topk, dtypes=None))
def _topk(ctx: ConvContext) -> None:
    """Top-k values, indices, both or a 0/1 mask, sorted (sort/argsort: k = all).

    Ties: ONNX TopK puts the lower index first. MXNet's CPU kernel uses
    ``std::sort``/``std::partial_sort``, whose order for equal values is unspecified
    (in practice the lower index first for short rows), its GPU kernel a stable sort.
    Rows with distinct values agree exactly.
    """
    axis, k, ret, ascend, idx_dtype = _topk_plan(ctx.spec)
    ishape = list(ctx.spec.in_shapes[0])
    x = ctx.inputs[0]
    if axis is None:
        x = reshape(ctx, x, [int(np.prod(ishape))])
        axis = 0
    values, indices = ctx.tmp("values"), ctx.tmp("indices")
    ctx.emit("TopK", [x, int64s(ctx, [k], "k")], [values, indices], axis=axis, largest=int(not ascend), sorted=1)
    if ret == "mask":
        dt = ctx.spec.out_dtypes[0]
        zeros = ctx.emit("ConstantOfShape", [ctx.emit("Shape", [x])[0]], value=np.zeros(1, np.dtype(dt)))[0]
        ones = ctx.emit("ConstantOfShape", [ctx.emit("Shape", [indices])[0]], value=np.ones(1, np.dtype(dt)))[0]
        m = ctx.emit("ScatterElements", [zeros, indices, ones], axis=axis)[0]
        reshape(ctx, m, ishape, ctx.outputs[0])
    elif ret == "value":
        identity(ctx, values, ctx.outputs[0])
    elif ret == "indices":
        cast(ctx, indices, idx_dtype, ctx.outputs[0])
    else:
        identity(ctx, values, ctx.outputs[0])
        cast(ctx, indices, idx_dtype, ctx.outputs[1])


# ----------------------------------------------------------------------------------------
# Sequences: SequenceMask, SequenceLast, SequenceReverse
# ----------------------------------------------------------------------------------------
def _seq_axis(spec: OpSpec, allowed: Sequence[int]) -> int:
    axis = spec.int_("axis", 0) or 0
    if axis not in allowed:
        raise ConversionError(f"{spec.op} axis={axis} is not supported (MXNet 1.9 supports {list(allowed)})")
    return axis


def _check_sequence(spec: OpSpec, axes: Sequence[int], out_shape: Callable[[List[int], int], List[int]]) -> Optional[str]:
    axis = _seq_axis(spec, axes)
    dshape = list(spec.in_shapes[0])
    if len(dshape) < 2:
        return f"{spec.op} needs data of rank >= 2, got {tuple(dshape)}"
    use = spec.bool_("use_sequence_length")
    if use:
        if len(spec.in_shapes) < 2 or tuple(spec.in_shapes[1]) != (dshape[1 - axis],):
            return f"sequence_length must have shape ({dshape[1 - axis]},)"
        reason = check_dtypes(spec, INDEX_DTYPES, inputs=[1], outputs=False)
        if reason:
            return reason
    return check_dtypes(spec, MOVE_DTYPES, inputs=[0]) or expect_shape(spec, out_shape(dshape, axis))


def _lengths(ctx: ConvContext, axis: int, rank: int, time_dtype: Optional[str] = None) -> Tuple[str, str]:
    """Lengths as a (B, 1...) or (1, B, 1...) view, and the (T, 1...)/(1, T, 1...) time steps.

    Float lengths are floored (``t < floor(len)`` is ``t < int(len)`` for integer ``t >= 0``)
    and compared as float32; integer lengths keep their type (or ``time_dtype``).
    """
    dshape = ctx.spec.in_shapes[0]
    dt = ctx.spec.in_dtypes[1]
    lens = ctx.inputs[1]
    if dt in FLOAT_DTYPES:
        lens, dt = ctx.emit("Floor", [_float_index(ctx, lens, dt)])[0], "float32"
    if time_dtype and time_dtype != dt:
        lens, dt = cast(ctx, lens, time_dtype), time_dtype
    view = [1] * rank
    view[1 - axis] = dshape[1 - axis]
    tview = [1] * rank
    tview[axis] = dshape[axis]
    steps = ctx.const(np.arange(dshape[axis], dtype=np.dtype(dt)).reshape(tview), "steps")
    return reshape(ctx, lens, view), steps


@register("SequenceMask", validator=validator(lambda s: _check_sequence(s, (0, 1), lambda d, a: d), dtypes=None))
def _sequence_mask(ctx: ConvContext) -> None:
    """Steps at or after ``int(len[b])`` become ``DType(value)``; axis 0 is (T, B, ...), axis 1 (B, T, ...).

    Lengths beyond the int32 range (or NaN) make MXNet write out of bounds (undefined).
    """
    s = ctx.spec
    if not s.bool_("use_sequence_length"):
        identity(ctx, ctx.inputs[0], ctx.outputs[0])
        return
    rank = len(s.in_shapes[0])
    lens, steps = _lengths(ctx, _seq_axis(s, (0, 1)), rank)
    keep = ctx.emit("Less", [steps, lens])[0]
    value = scalar_const(ctx, np.dtype(s.in_dtypes[0]).type(s.float_("value", 0.0)), s.in_dtypes[0], rank, "value")
    ctx.emit("Where", [keep, ctx.inputs[0], value], ctx.outputs)


def _last_index(ctx: ConvContext, axis: int) -> str:
    """int64 ``clip(int(len[b]) - 1, 0, T - 1)`` broadcast to the data shape with size 1 on ``axis``."""
    dshape = list(ctx.spec.in_shapes[0])
    rank = len(dshape)
    lens, _ = _lengths(ctx, axis, rank, "int64")
    one = scalar_const(ctx, 1, "int64", rank, "one")
    last = ctx.emit("Sub", [lens, one])[0]
    last = ctx.emit("Max", [last, scalar_const(ctx, 0, "int64", rank, "zero")])[0]
    last = ctx.emit("Min", [last, scalar_const(ctx, dshape[axis] - 1, "int64", rank, "tmax")])[0]
    kept = list(dshape)
    kept[axis] = 1
    return ctx.emit("Expand", [last, int64s(ctx, kept, "shape")])[0]


def _drop_axis(d: List[int], a: int) -> List[int]:
    return d[:a] + d[a + 1 :]


@register("SequenceLast", validator=validator(lambda s: _check_sequence(s, (0, 1), _drop_axis), dtypes=None))
def _sequence_last(ctx: ConvContext) -> None:
    """``data[int(len[b]) - 1]`` per batch entry along ``axis`` (the last step without lengths).

    A length of 0 (or beyond T) makes MXNet read out of bounds (undefined); the
    engine clips the step into ``[0, T-1]``.
    """
    s = ctx.spec
    axis = _seq_axis(s, (0, 1))
    dshape = s.in_shapes[0]
    if s.bool_("use_sequence_length"):
        g = ctx.emit("GatherElements", [ctx.inputs[0], _last_index(ctx, axis)], axis=axis)[0]
        squeeze(ctx, g, [axis], ctx.outputs[0])
    else:
        t = dshape[axis]
        squeeze(ctx, slice_(ctx, ctx.inputs[0], [axis], [t - 1], [t], [1]), [axis], ctx.outputs[0])


@register("SequenceReverse", validator=validator(lambda s: _check_sequence(s, (0,), lambda d, a: d), dtypes=None))
def _sequence_reverse(ctx: ConvContext) -> None:
    """Reverse the first ``int(len[b])`` steps of every batch entry along axis 0; later steps stay.

    Lengths outside ``[0, T]`` make MXNet read and write out of bounds (undefined);
    the engine clips them into ``[0, T]``.
    """
    s = ctx.spec
    dshape = list(s.in_shapes[0])
    rank, t = len(dshape), dshape[0]
    if not s.bool_("use_sequence_length"):
        slice_(ctx, ctx.inputs[0], [0], [t - 1], [-(t + 1)], [-1], ctx.outputs[0])
        return
    lens, steps = _lengths(ctx, 0, rank, "int64")
    lens = ctx.emit("Max", [lens, scalar_const(ctx, 0, "int64", rank, "zero")])[0]
    lens = ctx.emit("Min", [lens, scalar_const(ctx, t, "int64", rank, "tmax")])[0]
    # Step t < L reads L - 1 - t; the rest read themselves.
    rev = ctx.emit("Sub", [ctx.emit("Sub", [lens, scalar_const(ctx, 1, "int64", rank, "one")])[0], steps])[0]
    idx = ctx.emit("Where", [ctx.emit("Less", [steps, lens])[0], rev, steps])[0]
    idx = ctx.emit("Expand", [idx, int64s(ctx, dshape, "shape")])[0]
    ctx.emit("GatherElements", [ctx.inputs[0], idx], ctx.outputs, axis=0)
