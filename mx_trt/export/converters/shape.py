"""Converters for data movement: the reshape family, slicing, splitting, joining, broadcasting and tiling.

Every converter reproduces MXNet 1.9.1's forward semantics exactly for the
attribute/shape/dtype combinations its validator accepts; anything else is
rejected with a reason. Shapes are static at bind time, so shape-dependent
parameters (Reshape targets, slice bounds, split sizes) are computed from
MXNet's own inferred shapes and emitted as constants. Pure data movement is
exact for every element type the engines hold, so these take int32 and int64
tensors (shapes, indices and lengths in detection and NLP graphs) too.

Where a constant can leave the batch dimension free (``Reshape`` keeps
dimension 0 with 0, ``Expand`` broadcasts with 1), it does, so that a subgraph
exports the same graph at every batch size and can get a batch-dynamic engine.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np

from mx_trt.errors import ConversionError
from mx_trt.export.converters.common import MOVE_DTYPES as _MOVE_DTYPES
from mx_trt.export.converters.common import (
    check_dtypes as _check_dtypes,
    expect_shape as _expect_shape,
    identity as _identity,
)
from mx_trt.export.converters.common import (
    int64s as _i64,
    norm_axis as _norm_axis,
    reshape as _reshape,
    same_dtypes as _same_dtypes,
)
from mx_trt.export.converters.common import (
    slice_ as _slice,
    squeeze as _squeeze,
    unsqueeze as _unsqueeze,
    validator as _validator,
)
from mx_trt.export.converters.registry import ConvContext, register
from mx_trt.export.spec import OpSpec, Shape


# ----------------------------------------------------------------------------------------
# Reshape family
# ----------------------------------------------------------------------------------------
def _check_size_kept(spec: OpSpec) -> Optional[str]:
    if int(np.prod(spec.in_shapes[0])) != int(np.prod(spec.out_shapes[0])):
        return f"cannot reshape {spec.in_shapes[0]} to {spec.out_shapes[0]}"
    return None


def _reshape_target(spec: OpSpec) -> List[int]:
    """The ONNX Reshape target for MXNet's Reshape.

    MXNet's codes 0 (copy) and -1 (infer) mean the same in ONNX when no other special
    code, ``reverse`` or legacy ``target_shape`` is involved; then the codes are kept so
    that the batch dimension may vary. Otherwise the target is MXNet's inferred shape.
    """
    ishape, oshape = tuple(spec.in_shapes[0]), tuple(spec.out_shapes[0])
    codes = spec.ints("shape", ()) or ()
    legacy = spec.ints("target_shape", ()) or ()
    if codes and not legacy and not spec.bool_("reverse") and len(codes) == len(oshape):
        if all(c > 0 or c in (0, -1) for c in codes) and list(codes).count(-1) <= 1:
            if all(i < len(ishape) for i, c in enumerate(codes) if c == 0):
                known = [ishape[i] if c == 0 else c for i, c in enumerate(codes)]
                if -1 in codes:
                    rest = int(np.prod([k for k in known if k != -1]))
                    known = [int(np.prod(ishape)) // rest if k == -1 else k for k in known]
                if tuple(known) == oshape:
                    return list(codes)
    return list(oshape)


@register("Reshape", "reshape", validator=_validator(_check_size_kept, dtypes=_MOVE_DTYPES))
def _reshape_op(ctx: ConvContext) -> None:
    """Reshape with any of MXNet's special codes (0, -1, -2, -3, -4, reverse).

    The target is MXNet's inferred shape, except that a leading dimension the
    reshape keeps is written as 0 (ONNX: copy the input's), so the constant does
    not depend on the batch size.
    """
    target = _reshape_target(ctx.spec)
    ishape = ctx.spec.in_shapes[0]
    if target and ishape and target[0] == ishape[0] and ishape[0] > 0:
        target = [0] + list(target[1:])
    _reshape(ctx, ctx.inputs[0], target, ctx.outputs[0])


def _transpose_perm(spec: OpSpec) -> List[int]:
    nd = len(spec.in_shapes[0])
    axes = spec.ints("axes", ()) or ()
    if not axes:
        return list(range(nd))[::-1]
    if any(a < 0 for a in axes):
        # MXNet's transpose indexes the shape with the raw value: negative axes fail.
        raise ConversionError(f"transpose axes {tuple(axes)} contain negative values, which MXNet 1.9 does not support")
    if sorted(axes) != list(range(nd)):
        raise ConversionError(f"transpose axes {tuple(axes)} are not a permutation of {nd} dimensions")
    return list(axes)


def _check_transpose(spec: OpSpec) -> Optional[str]:
    perm = _transpose_perm(spec)
    return _expect_shape(spec, [spec.in_shapes[0][p] for p in perm])


@register("transpose", validator=_validator(_check_transpose, dtypes=_MOVE_DTYPES))
def _transpose(ctx: ConvContext) -> None:
    """Transpose; empty ``axes`` reverses the dimensions."""
    ctx.emit("Transpose", ctx.inputs[:1], ctx.outputs, perm=_transpose_perm(ctx.spec))


def _swap_perm(spec: OpSpec) -> List[int]:
    nd = len(spec.in_shapes[0])
    d1 = _norm_axis(spec.int_("dim1", 0) or 0, nd, "dim1")
    d2 = _norm_axis(spec.int_("dim2", 0) or 0, nd, "dim2")
    perm = list(range(nd))
    perm[d1], perm[d2] = perm[d2], perm[d1]
    return perm


def _check_swap(spec: OpSpec) -> Optional[str]:
    perm = _swap_perm(spec)
    return _expect_shape(spec, [spec.in_shapes[0][p] for p in perm])


@register("SwapAxis", "swapaxes", validator=_validator(_check_swap, dtypes=_MOVE_DTYPES))
def _swapaxis(ctx: ConvContext) -> None:
    """Swap two axes (negative axes allowed)."""
    ctx.emit("Transpose", ctx.inputs[:1], ctx.outputs, perm=_swap_perm(ctx.spec))


def _expand_axis(spec: OpSpec) -> int:
    nd = len(spec.in_shapes[0])
    axis = spec.int_("axis")
    if axis is None:
        raise ConversionError("expand_dims needs an axis")
    return _norm_axis(axis, nd + 1)


def _check_expand_dims(spec: OpSpec) -> Optional[str]:
    ax = _expand_axis(spec)
    s = list(spec.in_shapes[0])
    return _expect_shape(spec, s[:ax] + [1] + s[ax:])


@register("expand_dims", validator=_validator(_check_expand_dims, dtypes=_MOVE_DTYPES))
def _expand_dims(ctx: ConvContext) -> None:
    """Insert a size-1 axis; ``axis`` ranges over ``[-ndim-1, ndim]``."""
    _unsqueeze(ctx, ctx.inputs[0], [_expand_axis(ctx.spec)], ctx.outputs[0])


def _squeeze_axes(spec: OpSpec) -> List[int]:
    ishape = spec.in_shapes[0]
    nd = len(ishape)
    axis = spec.tuple_("axis")
    if axis is None:
        return [i for i, d in enumerate(ishape) if d == 1]
    axes = [_norm_axis(int(a), nd) for a in axis]
    if len(set(axes)) != len(axes):
        raise ConversionError(f"squeeze axis {tuple(axis)} has duplicates")
    for a in axes:
        if ishape[a] != 1:
            raise ConversionError(f"cannot squeeze axis {a} of size {ishape[a]}")
    return sorted(axes)


def _check_squeeze(spec: OpSpec) -> Optional[str]:
    axes = _squeeze_axes(spec)
    kept = [d for i, d in enumerate(spec.in_shapes[0]) if i not in axes]
    return _expect_shape(spec, kept or [1])


@register("squeeze", validator=_validator(_check_squeeze, dtypes=_MOVE_DTYPES))
def _squeeze_op(ctx: ConvContext) -> None:
    """Squeeze; MXNet never returns rank 0 (all-ones squeeze to shape (1,))."""
    axes = _squeeze_axes(ctx.spec)
    if not axes:
        _identity(ctx, ctx.inputs[0], ctx.outputs[0])
    elif len(axes) == len(ctx.spec.in_shapes[0]):
        _reshape(ctx, ctx.inputs[0], ctx.spec.out_shapes[0], ctx.outputs[0])
    else:
        _squeeze(ctx, ctx.inputs[0], axes, ctx.outputs[0])


# ----------------------------------------------------------------------------------------
# Slicing, splitting, joining
# ----------------------------------------------------------------------------------------
_SlicePlan = List[Tuple[int, int, int, int]]  # (axis, begin, end, step); end -1 = before 0


def _slice_range(length: int, b: Optional[int], e: Optional[int], s: int) -> Tuple[int, int, int]:
    """MXNet's GetIndexRange for one axis: normalised begin, end, and the output size."""
    if s == 0:
        raise ConversionError("slice step cannot be 0")
    bb = b if b is not None else (length - 1 if s < 0 else 0)
    ee = e if e is not None else (-1 if s < 0 else length)
    if bb < 0:
        bb += length
    if ee < 0 and e is not None:
        ee += length
    bb = 0 if (bb < 0 and s > 0) else bb
    bb = length - 1 if (bb > length - 1 and s < 0) else bb
    bb = -1 if (bb < 0 or bb > length - 1) else bb
    ee = max(ee, -1)
    ee = min(ee, length)
    if ee == bb or bb < 0:
        size = 0
    elif s > 0:
        size = (ee - bb - 1) // s + 1 if ee > bb else 0
    else:
        size = (bb - ee - 1) // (-s) + 1 if ee < bb else 0
    return bb, ee, size


def _slice_plan(spec: OpSpec) -> Tuple[_SlicePlan, List[int]]:
    ishape = spec.in_shapes[0]
    begin = spec.tuple_("begin", ()) or ()
    end = spec.tuple_("end", ()) or ()
    step = spec.tuple_("step", ()) or ()
    if len(begin) != len(end):
        raise ConversionError(f"begin {begin} and end {end} have different lengths")
    if step and len(step) != len(begin):
        raise ConversionError(f"step {step} and begin {begin} have different lengths")
    if len(begin) > len(ishape):
        raise ConversionError(f"slice has {len(begin)} axes but the input only {len(ishape)}")
    plan: _SlicePlan = []
    shape = list(ishape)
    for i in range(len(begin)):
        s = step[i] if step and step[i] is not None else 1
        b, e, size = _slice_range(ishape[i], begin[i], end[i], int(s))
        shape[i] = size
        if (b, e, s) != (0, ishape[i], 1):
            plan.append((i, b, e, int(s)))
    return plan, shape


def _emit_slice_plan(ctx: ConvContext, x: str, plan: _SlicePlan, ishape: Shape, out: str) -> None:
    # ONNX reads a negative end as counting from the back; "before index 0" for a
    # negative step is any end <= -dim-1, which clamps to -1.
    ends = [e if e >= 0 else -(ishape[a] + 1) for a, _, e, _ in plan]
    _slice(ctx, x, [p[0] for p in plan], [p[1] for p in plan], ends, [p[3] for p in plan], out)


def _check_slice(spec: OpSpec) -> Optional[str]:
    return _expect_shape(spec, _slice_plan(spec)[1])


@register("slice", "crop", validator=_validator(_check_slice, dtypes=_MOVE_DTYPES))
def _slice_op(ctx: ConvContext) -> None:
    """slice with begin/end/step (None entries, negative indices and steps)."""
    plan, _ = _slice_plan(ctx.spec)
    _emit_slice_plan(ctx, ctx.inputs[0], plan, ctx.spec.in_shapes[0], ctx.outputs[0])


def _slice_axis_plan(spec: OpSpec) -> Tuple[_SlicePlan, List[int]]:
    ishape = spec.in_shapes[0]
    axis = _norm_axis(spec.int_("axis", 0) or 0, len(ishape))
    n = ishape[axis]
    b = spec.int_("begin", 0) or 0
    e = spec.int_("end")
    b = b + n if b < 0 else b
    e = n if e is None else (e + n if e < 0 else e)
    if not 0 <= b < e <= n:
        raise ConversionError(f"invalid slice_axis range [{b}, {e}) for axis of size {n}")
    shape = list(ishape)
    shape[axis] = e - b
    plan = [] if (b, e) == (0, n) else [(axis, b, e, 1)]
    return plan, shape


def _check_slice_axis(spec: OpSpec) -> Optional[str]:
    return _expect_shape(spec, _slice_axis_plan(spec)[1])


@register("slice_axis", validator=_validator(_check_slice_axis, dtypes=_MOVE_DTYPES))
def _slice_axis(ctx: ConvContext) -> None:
    """slice_axis(axis, begin, end=None), negative indices allowed."""
    plan, _ = _slice_axis_plan(ctx.spec)
    _emit_slice_plan(ctx, ctx.inputs[0], plan, ctx.spec.in_shapes[0], ctx.outputs[0])


def _check_slice_like(spec: OpSpec) -> Optional[str]:
    ishape, oshape = spec.in_shapes[0], spec.out_shapes[0]
    if len(ishape) != len(oshape) or any(o > i for i, o in zip(ishape, oshape)):
        return f"slice_like output {oshape} is not a prefix box of input {ishape}"
    return _check_dtypes(spec, _MOVE_DTYPES, inputs=[0])


@register("slice_like", validator=_validator(_check_slice_like, dtypes=None))
def _slice_like(ctx: ConvContext) -> None:
    """Slice ``[0, like.shape[a])`` on the selected axes: the static output shape says which."""
    ishape, oshape = ctx.spec.in_shapes[0], ctx.spec.out_shapes[0]
    axes = [a for a in range(len(ishape)) if ishape[a] != oshape[a]]
    _slice(ctx, ctx.inputs[0], axes, [0] * len(axes), [oshape[a] for a in axes], [1] * len(axes), ctx.outputs[0])


def _split_sizes(spec: OpSpec) -> Tuple[int, List[int], bool]:
    """Axis, section sizes and squeeze flag of SliceChannel / _split_v2."""
    ishape = spec.in_shapes[0]
    axis = _norm_axis(spec.int_("axis", 1) if spec.has("axis") else 1, len(ishape))  # type: ignore[arg-type]
    squeeze = spec.bool_("squeeze_axis")
    n = ishape[axis]
    if spec.op == "_split_v2":
        sections = spec.int_("sections", 0) or 0
        if sections > 0:
            base, extra = divmod(n, sections)
            sizes = [base + 1 if i < extra else base for i in range(sections)]
        else:
            idx = [int(v) for v in (spec.tuple_("indices", ()) or ())]
            if not idx or idx[0] != 0:
                raise ConversionError(f"split_v2 indices {tuple(idx)} must start at 0")
            bounds = idx + [n]
            sizes = [bounds[i + 1] - bounds[i] for i in range(len(idx))]
    else:
        k = spec.int_("num_outputs", 1) or 1
        if n % k:
            raise ConversionError(f"axis of size {n} does not split into {k} equal parts")
        sizes = [n // k] * k
    if any(s <= 0 for s in sizes):
        raise ConversionError(f"split sections {sizes} include an empty one")
    if squeeze and any(s != 1 for s in sizes):
        raise ConversionError("squeeze_axis needs sections of size 1")
    return axis, sizes, squeeze


def _check_split(spec: OpSpec) -> Optional[str]:
    axis, sizes, squeeze = _split_sizes(spec)
    if len(sizes) != len(spec.out_shapes):
        return f"{len(sizes)} sections but {len(spec.out_shapes)} outputs"
    for k, size in enumerate(sizes):
        shape = list(spec.in_shapes[0])
        if squeeze:
            del shape[axis]
        else:
            shape[axis] = size
        reason = _expect_shape(spec, shape, k)
        if reason:
            return reason
    return None


@register("SliceChannel", "split", "_split_v2", validator=_validator(_check_split, dtypes=_MOVE_DTYPES))
def _split(ctx: ConvContext) -> None:
    """Split into sections along ``axis``, optionally squeezing it (one output per section)."""
    axis, sizes, squeeze = _split_sizes(ctx.spec)
    if len(sizes) == 1:
        parts = [ctx.inputs[0]]
    else:
        parts = [ctx.tmp("part") for _ in sizes] if squeeze else list(ctx.outputs)
        ctx.emit("Split", [ctx.inputs[0], _i64(ctx, sizes, "split")], parts, axis=axis)
    for p, o in zip(parts, ctx.outputs):
        if squeeze:
            _squeeze(ctx, p, [axis], o)
        elif p != o:
            _identity(ctx, p, o)


def _stack_axis(spec: OpSpec) -> int:
    return _norm_axis(spec.int_("axis", 0) or 0, len(spec.in_shapes[0]) + 1)


def _check_stack(spec: OpSpec) -> Optional[str]:
    if any(tuple(s) != tuple(spec.in_shapes[0]) for s in spec.in_shapes):
        return f"stack inputs have different shapes {list(spec.in_shapes)}"
    ax = _stack_axis(spec)
    s = list(spec.in_shapes[0])
    return _same_dtypes(spec) or _expect_shape(spec, s[:ax] + [len(spec.in_shapes)] + s[ax:])


@register("stack", validator=_validator(_check_stack, dtypes=_MOVE_DTYPES))
def _stack(ctx: ConvContext) -> None:
    """Unsqueeze every input at ``axis`` and concatenate."""
    ax = _stack_axis(ctx.spec)
    parts = [_unsqueeze(ctx, x, [ax]) for x in ctx.inputs]
    if len(parts) == 1:
        _identity(ctx, parts[0], ctx.outputs[0])
    else:
        ctx.emit("Concat", parts, ctx.outputs, axis=ax)


def _reverse_axes(spec: OpSpec) -> List[int]:
    nd = len(spec.in_shapes[0])
    axes = spec.ints("axis", ()) or ()
    for a in axes:
        if a < 0 or a >= nd:
            # MXNet 1.9's reverse indexes the shape with the raw value: negative axes fail.
            raise ConversionError(f"reverse axis {a} is not in [0, {nd}) (MXNet 1.9 rejects negative axes)")
    # Reversing an axis twice restores it, as MXNet's kernel does.
    return [a for a in sorted(set(axes)) if list(axes).count(a) % 2 == 1 and spec.in_shapes[0][a] > 1]


def _check_reverse(spec: OpSpec) -> Optional[str]:
    _reverse_axes(spec)
    return None


@register("reverse", "flip", validator=_validator(_check_reverse, dtypes=_MOVE_DTYPES))
def _reverse(ctx: ConvContext) -> None:
    """Reverse along the given axes (a negative-step Slice)."""
    ishape = ctx.spec.in_shapes[0]
    axes = _reverse_axes(ctx.spec)
    plan = [(a, ishape[a] - 1, -1, -1) for a in axes]
    _emit_slice_plan(ctx, ctx.inputs[0], plan, ishape, ctx.outputs[0])


# ----------------------------------------------------------------------------------------
# Broadcasting, tiling, *_like
# ----------------------------------------------------------------------------------------
def _check_expandable(spec: OpSpec) -> Optional[str]:
    ishape, oshape = spec.in_shapes[0], spec.out_shapes[0]
    if len(ishape) != len(oshape) or any(i not in (1, o) for i, o in zip(ishape, oshape)):
        return f"{ishape} does not broadcast to {oshape}"
    return _check_dtypes(spec, _MOVE_DTYPES, inputs=[0])


@register("broadcast_to", "broadcast_axis", "broadcast_axes", validator=_validator(_check_expandable, dtypes=None))
def _broadcast_to(ctx: ConvContext) -> None:
    """Expand to MXNet's inferred output shape (0 in ``shape`` keeps a dimension)."""
    ishape, oshape = ctx.spec.in_shapes[0], ctx.spec.out_shapes[0]
    if tuple(ishape) == tuple(oshape):
        _identity(ctx, ctx.inputs[0], ctx.outputs[0])
    else:
        # 1 where the input keeps its size: Expand broadcasts it, so the constant does
        # not depend on the batch (or any other unchanged) dimension.
        target = [1 if i == o else o for i, o in zip(ishape, oshape)]
        ctx.emit("Expand", [ctx.inputs[0], _i64(ctx, target, "shape")], ctx.outputs)


def _tile_reps(spec: OpSpec) -> Tuple[List[int], List[int]]:
    """Input shape promoted to the output rank, and reps of the same length."""
    ishape = list(spec.in_shapes[0])
    reps = [int(r) for r in (spec.ints("reps", ()) or ())]
    if not reps:
        return ishape, [1] * len(ishape)
    nd = max(len(ishape), len(reps))
    return [1] * (nd - len(ishape)) + ishape, [1] * (nd - len(reps)) + reps


def _check_tile(spec: OpSpec) -> Optional[str]:
    shape, reps = _tile_reps(spec)
    return _expect_shape(spec, [d * r for d, r in zip(shape, reps)])


@register("tile", validator=_validator(_check_tile, dtypes=_MOVE_DTYPES))
def _tile(ctx: ConvContext) -> None:
    """Tile; a shorter input is promoted by prepending axes, shorter reps by prepending 1s."""
    shape, reps = _tile_reps(ctx.spec)
    x = ctx.inputs[0]
    if len(shape) != len(ctx.spec.in_shapes[0]):
        x = _reshape(ctx, x, shape)
    if all(r == 1 for r in reps):
        _identity(ctx, x, ctx.outputs[0])
    else:
        ctx.emit("Tile", [x, _i64(ctx, reps, "reps")], ctx.outputs)


def _check_repeat(spec: OpSpec) -> Optional[str]:
    r = spec.int_("repeats")
    if r is None or r < 1:
        return f"repeats={r} is not a positive integer"
    ishape = list(spec.in_shapes[0])
    axis = spec.int_("axis")
    if axis is None:
        return _expect_shape(spec, [int(np.prod(ishape)) * r])
    ax = _norm_axis(axis, len(ishape))
    ishape[ax] *= r
    return _expect_shape(spec, ishape)


@register("repeat", validator=_validator(_check_repeat, dtypes=_MOVE_DTYPES))
def _repeat(ctx: ConvContext) -> None:
    """Repeat each element: unsqueeze after the axis, expand it to ``repeats``, merge."""
    ishape = list(ctx.spec.in_shapes[0])
    r = int(ctx.spec.int_("repeats") or 1)
    axis = ctx.spec.int_("axis")
    x = ctx.inputs[0]
    if axis is None:
        ishape = [int(np.prod(ishape))]
        ax = 0
        if len(ctx.spec.in_shapes[0]) != 1:
            x = _reshape(ctx, x, ishape)
    else:
        ax = _norm_axis(axis, len(ishape))
    if r == 1:
        _identity(ctx, x, ctx.outputs[0])
        return
    wide = ishape[: ax + 1] + [r] + ishape[ax + 1 :]
    y = ctx.emit("Expand", [_unsqueeze(ctx, x, [ax + 1]), _i64(ctx, wide, "shape")])[0]
    _reshape(ctx, y, ctx.spec.out_shapes[0], ctx.outputs[0])
