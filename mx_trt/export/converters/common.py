"""Small emission and attribute helpers shared by the converter modules."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from mx_trt.errors import ConversionError
from mx_trt.export.converters.registry import FLOAT_DTYPES, ConvContext, Validator
from mx_trt.export.spec import OpSpec


def norm_axis(axis: int, ndim: int, what: str = "axis") -> int:
    """Normalise a possibly negative axis into ``[0, ndim)`` or raise :class:`ConversionError`."""
    a = axis + ndim if axis < 0 else axis
    if not 0 <= a < ndim:
        raise ConversionError(f"{what}={axis} is out of range for a {ndim}-D input")
    return a


def int64s(ctx: ConvContext, values: Sequence[int], hint: str = "idx") -> str:
    """An int64 1-D constant (shapes, axes, indices)."""
    return ctx.const(np.asarray(list(values), dtype=np.int64), hint)


def reshape(ctx: ConvContext, x: str, shape: Sequence[int], out: Optional[str] = None) -> str:
    """``Reshape`` of ``x`` to a constant target; returns the output name."""
    return ctx.emit("Reshape", [x, int64s(ctx, shape, "shape")], None if out is None else [out])[0]


# -- attribute and dtype helpers for the vision / pooling modules ---------------------------


def attr_int(spec: OpSpec, key: str, default: int) -> int:
    """An integer attribute; a missing or ``"None"`` value gives ``default``."""
    v = spec.int_(key, default)
    return default if v is None else v


def attr_float(spec: OpSpec, key: str, default: float) -> float:
    """A float attribute; a missing or ``"None"`` value gives ``default``."""
    v = spec.float_(key, default)
    return default if v is None else v


def attr_str(spec: OpSpec, key: str, default: str) -> str:
    """A string attribute; a missing value gives ``default``."""
    v = spec.str_(key, default)
    return default if v is None else v


def check_float(spec: OpSpec, i: int = 0) -> Optional[str]:
    """``None`` if input ``i`` is float32/float16, else the reason."""
    dt = spec.in_dtypes[i]
    if dt not in FLOAT_DTYPES:
        return f"input {i} has dtype {dt}; only {'/'.join(FLOAT_DTYPES)} are supported"
    return None


def check_outputs(spec: OpSpec, n: int) -> Optional[str]:
    """``None`` if the node has ``n`` visible outputs, else the reason."""
    if len(spec.out_shapes) != n:
        return f"expected {n} visible output(s), got {len(spec.out_shapes)}"
    return None


def dtype_of(spec: OpSpec, i: int = 0) -> np.dtype:
    """The numpy dtype of input ``i``."""
    return np.dtype(spec.in_dtypes[i])


def scalar(ctx: ConvContext, value: float, hint: str, i: int = 0) -> str:
    """A 0-d constant in the dtype of input ``i`` (ONNX wants matching dtypes)."""
    return ctx.const(np.asarray(value, dtype=dtype_of(ctx.spec, i)), hint)


def spatial_attr(spec: OpSpec, key: str, nsp: int, default: int) -> Tuple[int, ...]:
    """An MXNet spatial tuple attribute; empty means ``default`` in every dimension."""
    t = spec.ints(key)
    if not t:
        return (default,) * nsp
    if len(t) != nsp:
        raise ConversionError(f"{key}={t} has {len(t)} values for a {nsp}-D operator")
    return t


_CHANNEL_FIRST_LAYOUT = {1: "NCW", 2: "NCHW", 3: "NCDHW"}


def check_layout(spec: OpSpec, nsp: int) -> Optional[str]:
    """``None`` if the ``layout`` attribute is absent or channel-first, else the reason."""
    layout = spec.str_("layout")
    if layout in (None, "None", ""):
        return None
    want = _CHANNEL_FIRST_LAYOUT.get(nsp)
    if layout != want:
        return f"layout {layout} is not supported, only {want}"
    return None


# ----------------------------------------------------------------------------------------
# Dtypes, validator building blocks and emission helpers shared by several modules
# ----------------------------------------------------------------------------------------
#: ONNX TensorProto element types by numpy name; fixed by the ONNX spec, spelled out
#: so that the converters import without onnx.
ONNX_DTYPE: Dict[str, int] = {
    "float32": 1,
    "uint8": 2,
    "int8": 3,
    "int32": 6,
    "int64": 7,
    "bool": 9,
    "float16": 10,
    "float64": 11,
}
#: Integer tensors an engine may carry between operators (shape arithmetic, indices, lengths).
INT_DTYPES = ("int32", "int64")
#: Pure data movement is exact for every element type the engines hold.
MOVE_DTYPES = FLOAT_DTYPES + INT_DTYPES
#: TensorRT handles at most this many dimensions.
MAX_RANK = 8


def check_ranks(spec: OpSpec) -> Optional[str]:
    """Reject rank-0 shapes (MXNet's legacy "unknown") and ranks TensorRT cannot hold."""
    for kind, shapes in (("input", spec.in_shapes), ("output", spec.out_shapes)):
        for i, s in enumerate(shapes):
            if s is None:
                return f"{kind} {i} has an unknown shape"
            if len(s) == 0:
                return f"{kind} {i} has rank 0, which MXNet's legacy shape semantics treat as unknown"
            if len(s) > MAX_RANK:
                return f"{kind} {i} has rank {len(s)}; TensorRT supports at most {MAX_RANK} dimensions"
    return None


def check_dtypes(
    spec: OpSpec,
    allowed: Sequence[str] = FLOAT_DTYPES,
    inputs: Optional[Sequence[int]] = None,
    outputs: bool = True,
) -> Optional[str]:
    """Require the dtypes of ``inputs`` (default all) and of the outputs to be in ``allowed``."""
    idx = range(len(spec.in_dtypes)) if inputs is None else inputs
    for i in idx:
        if i < len(spec.in_dtypes) and spec.in_dtypes[i] not in allowed:
            return f"input {i} has dtype {spec.in_dtypes[i]}; supported: {', '.join(allowed)}"
    if outputs:
        for i, d in enumerate(spec.out_dtypes):
            if d not in allowed:
                return f"output {i} has dtype {d}; supported: {', '.join(allowed)}"
    return None


def validator(*checks: Validator, dtypes: Optional[Sequence[str]] = FLOAT_DTYPES) -> Validator:
    """Combine the rank check, a dtype check over all inputs/outputs and ``checks``.

    ``dtypes=None`` leaves dtype checking to ``checks``.
    """

    def validate(spec: OpSpec) -> Optional[str]:
        reason = check_ranks(spec)
        if reason:
            return reason
        if dtypes is not None:
            reason = check_dtypes(spec, dtypes)
            if reason:
                return reason
        for c in checks:
            reason = c(spec)
            if reason:
                return reason
        return None

    return validate


def same_dtypes(spec: OpSpec) -> Optional[str]:
    """All inputs share one dtype."""
    if len(set(spec.in_dtypes)) > 1:
        return f"inputs have different dtypes {list(spec.in_dtypes)}"
    return None


def expect_shape(spec: OpSpec, computed: Sequence[int], k: int = 0) -> Optional[str]:
    """Cross-check a shape computed from the attributes against MXNet's inference."""
    if tuple(computed) != tuple(spec.out_shapes[k]):
        return f"computed output shape {tuple(computed)} differs from MXNet's {tuple(spec.out_shapes[k])}"
    return None


def outs(out: Optional[str]) -> Optional[List[str]]:
    """``[out]`` or ``None`` (a fresh name) for :meth:`ConvContext.emit`."""
    return None if out is None else [out]


def scalar_const(ctx: ConvContext, value: Union[float, np.generic], dtype: str, rank: int, hint: str = "scalar") -> str:
    """A constant of shape ``(1,) * rank``: same rank as its partner (TensorRT-friendly broadcast)."""
    return ctx.const(np.full((1,) * rank, value, dtype=np.dtype(dtype)), hint)


def cast(ctx: ConvContext, x: str, dtype: str, out: Optional[str] = None) -> str:
    """ONNX ``Cast`` to a numpy-named dtype."""
    return ctx.emit("Cast", [x], outs(out), to=ONNX_DTYPE[dtype])[0]


def identity(ctx: ConvContext, x: str, out: Optional[str] = None) -> str:
    return ctx.emit("Identity", [x], outs(out))[0]


def unsqueeze(ctx: ConvContext, x: str, axes: Sequence[int], out: Optional[str] = None) -> str:
    return ctx.emit("Unsqueeze", [x, int64s(ctx, axes, "axes")], outs(out))[0]


def squeeze(ctx: ConvContext, x: str, axes: Sequence[int], out: Optional[str] = None) -> str:
    return ctx.emit("Squeeze", [x, int64s(ctx, axes, "axes")], outs(out))[0]


def slice_(
    ctx: ConvContext,
    x: str,
    axes: Sequence[int],
    starts: Sequence[int],
    ends: Sequence[int],
    steps: Sequence[int],
    out: Optional[str] = None,
) -> str:
    """ONNX ``Slice`` with constant bounds; no axes gives an Identity."""
    if not axes:
        return identity(ctx, x, out)
    ins = [x, int64s(ctx, starts, "starts"), int64s(ctx, ends, "ends"), int64s(ctx, axes, "axes"), int64s(ctx, steps, "steps")]
    return ctx.emit("Slice", ins, outs(out))[0]


def nonzero(ctx: ConvContext, x: str, dtype: str, rank: int) -> str:
    """``x != 0`` as bool (NaN counts as true, as C's truthiness)."""
    eq = ctx.emit("Equal", [x, scalar_const(ctx, 0, dtype, rank, "zero")])[0]
    return ctx.emit("Not", [eq])[0]


def trunc(ctx: ConvContext, x: str, dtype: str, rank: int) -> str:
    """Round a float tensor toward zero (C's conversion to integer): ceil below 0, floor otherwise.

    Emitted explicitly before every float-to-integer ``Cast`` so that the result does
    not depend on how a backend's Cast rounds. NaN stays NaN.
    """
    neg = ctx.emit("Less", [x, scalar_const(ctx, 0, dtype, rank, "zero")])[0]
    return ctx.emit("Where", [neg, ctx.emit("Ceil", [x])[0], ctx.emit("Floor", [x])[0]])[0]
