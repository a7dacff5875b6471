"""Converters for tensor operators (elementwise, broadcast arithmetic, scalar, unary math, matrix products, reductions).

Data movement (the reshape family, slicing, joining, broadcasting, tiling) is in :mod:`.shape`.

Every converter reproduces MXNet 1.9.1's forward semantics exactly for the
attribute/shape/dtype combinations its validator accepts; anything else is
rejected with a reason. Shapes are static at bind time, so shape-dependent
parameters (Reshape targets, slice bounds, split sizes) are computed here from
MXNet's own inferred shapes and emitted as constants. The ONNX uses opset-17
standard operators that both ONNX Runtime and TensorRT's ONNX parser accept.

Integer tensors (int32/int64: shapes, indices and lengths in detection and NLP
graphs) pass through data movement and through the arithmetic whose integer
result every backend shares with MXNet: +, -, *, max, min, comparisons, logic,
and their scalar forms, where MXNet truncates the scalar to the tensor's type.
Division, power, hypot and unary math stay float-only (see _INT_BINARY_VALIDATOR).
"""
from __future__ import annotations

import math
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from mx_trt.errors import ConversionError
from mx_trt.export.converters.common import MOVE_DTYPES as _MOVE_DTYPES
from mx_trt.export.converters.common import (
    cast as _cast,
    check_dtypes as _check_dtypes,
    expect_shape as _expect_shape,
)
from mx_trt.export.converters.common import (
    identity as _identity,
    int64s as _i64,
    nonzero as _nonzero,
    norm_axis as _norm_axis,
)
from mx_trt.export.converters.common import (
    outs as _out,
    reshape as _reshape,
    same_dtypes as _same_dtypes,
    scalar_const as _scalar,
)
from mx_trt.export.converters.common import trunc as _toward_zero, validator as _validator
from mx_trt.export.converters.registry import FLOAT_DTYPES, ConvContext, register
from mx_trt.export.spec import OpSpec

_MOVE = _validator(dtypes=_MOVE_DTYPES)


def _reduce(ctx: ConvContext, op: str, x: str, axes: Sequence[int], keepdims: bool, out: Optional[str] = None) -> str:
    """ReduceX over explicit ``axes``: ReduceSum takes axes as an input from opset 13, the others from 18."""
    if op == "ReduceSum" or ctx.opset >= 18:
        return ctx.emit(op, [x, _i64(ctx, axes, "axes")], _out(out), keepdims=int(keepdims))[0]
    return ctx.emit(op, [x], _out(out), axes=list(axes), keepdims=int(keepdims))[0]


def _to_f32(ctx: ConvContext, x: str) -> str:
    """MXNet evaluates half-precision math in float32; emulations do the same."""
    return _cast(ctx, x, "float32") if ctx.spec.in_dtypes[0] == "float16" else x


def _from_f32(ctx: ConvContext, y: str, out: str) -> None:
    if ctx.spec.out_dtypes[0] == "float16":
        _cast(ctx, y, "float16", out)
    else:
        _identity(ctx, y, out)


def _bool_to(ctx: ConvContext, b: str, out: str) -> None:
    """MXNet comparisons return 0/1 in the output dtype, not bool."""
    _cast(ctx, b, ctx.spec.out_dtypes[0], out)


# ----------------------------------------------------------------------------------------
# Elementwise and broadcast binary operators
# ----------------------------------------------------------------------------------------
def _check_broadcast(spec: OpSpec) -> Optional[str]:
    try:
        shape = np.broadcast_shapes(*[tuple(s) for s in spec.in_shapes[:2]])
    except ValueError:
        return f"input shapes {list(spec.in_shapes)} do not broadcast"
    return _expect_shape(spec, shape)


_BINARY_VALIDATOR = _validator(_same_dtypes, _check_broadcast)
#: Integer tensors (shape arithmetic in detection/NLP graphs) take the ops whose integer
#: result is the same in MXNet (C arithmetic on the type) and in every backend:
#: +, -, *, max, min, comparisons and logic. Overflow wraps in practice (C leaves it
#: undefined). Division (C truncation; TensorRT does not document its integer
#: rounding), power and hypot (MXNet computes them in float) stay float-only.
_INT_BINARY_VALIDATOR = _validator(_same_dtypes, _check_broadcast, dtypes=_MOVE_DTYPES)
_INT_EXACT = ("Add", "Sub", "Mul", "Max", "Min")

_ARITH: Dict[Tuple[str, ...], str] = {
    ("elemwise_add", "_plus", "_Plus", "_add", "_grad_add", "broadcast_add", "broadcast_plus"): "Add",
    ("elemwise_sub", "_minus", "_Minus", "_sub", "broadcast_sub", "broadcast_minus"): "Sub",
    ("elemwise_mul", "_mul", "_Mul", "broadcast_mul"): "Mul",
    ("elemwise_div", "_div", "_Div", "broadcast_div"): "Div",
    ("_power", "_Power", "broadcast_power"): "Pow",
    ("_maximum", "_Maximum", "broadcast_maximum"): "Max",
    ("_minimum", "_Minimum", "broadcast_minimum"): "Min",
}


def _make_arith(onnx_op: str) -> Callable[[ConvContext], None]:
    def convert(ctx: ConvContext) -> None:
        ctx.emit(onnx_op, ctx.inputs[:2], ctx.outputs)

    convert.__doc__ = f"Elementwise/broadcast binary op as ONNX {onnx_op} (same multidirectional broadcast)."
    return convert


for _names, _onnx_op in _ARITH.items():
    _v = _INT_BINARY_VALIDATOR if _onnx_op in _INT_EXACT else _BINARY_VALIDATOR
    register(*_names, validator=_v)(_make_arith(_onnx_op))


def _compare(ctx: ConvContext, kind: str, a: str, b: str) -> str:
    """Return a bool tensor for MXNet's comparison ``kind`` (eq, ne, gt, ge, lt, le)."""
    if kind == "ne":
        return ctx.emit("Not", [ctx.emit("Equal", [a, b])[0]])[0]
    op = {"eq": "Equal", "gt": "Greater", "ge": "GreaterOrEqual", "lt": "Less", "le": "LessOrEqual"}[kind]
    return ctx.emit(op, [a, b])[0]


_COMPARE: Dict[Tuple[str, ...], str] = {
    ("_equal", "_Equal", "broadcast_equal"): "eq",
    ("_not_equal", "_Not_Equal", "broadcast_not_equal"): "ne",
    ("_greater", "_Greater", "broadcast_greater"): "gt",
    ("_greater_equal", "_Greater_Equal", "broadcast_greater_equal"): "ge",
    ("_lesser", "_Lesser", "broadcast_lesser"): "lt",
    ("_lesser_equal", "_Lesser_Equal", "broadcast_lesser_equal"): "le",
}


def _make_compare(kind: str) -> Callable[[ConvContext], None]:
    def convert(ctx: ConvContext) -> None:
        _bool_to(ctx, _compare(ctx, kind, ctx.inputs[0], ctx.inputs[1]), ctx.outputs[0])

    convert.__doc__ = f"Comparison {kind}: ONNX gives bool, MXNet gives 0/1 in the input dtype."
    return convert


for _names, _kind in _COMPARE.items():
    register(*_names, validator=_INT_BINARY_VALIDATOR)(_make_compare(_kind))


_LOGICAL: Dict[Tuple[str, ...], str] = {
    ("_logical_and", "_Logical_And", "broadcast_logical_and"): "And",
    ("_logical_or", "_Logical_Or", "broadcast_logical_or"): "Or",
    ("_logical_xor", "_Logical_Xor", "broadcast_logical_xor"): "Xor",
}


def _make_logical(onnx_op: str) -> Callable[[ConvContext], None]:
    def convert(ctx: ConvContext) -> None:
        rank = len(ctx.spec.out_shapes[0])
        dt = ctx.spec.in_dtypes[0]
        a = _nonzero(ctx, ctx.inputs[0], dt, rank)
        b = _nonzero(ctx, ctx.inputs[1], dt, rank)
        _bool_to(ctx, ctx.emit(onnx_op, [a, b])[0], ctx.outputs[0])

    convert.__doc__ = f"Logical {onnx_op} on ``x != 0``, returned as 0/1 in the input dtype."
    return convert


for _names, _onnx_op in _LOGICAL.items():
    register(*_names, validator=_INT_BINARY_VALIDATOR)(_make_logical(_onnx_op))


def _hypot(ctx: ConvContext, a: str, b: str, out: str) -> None:
    """C's ``hypot`` without intermediate overflow: ``m * sqrt(1 + (n/m)^2)``.

    The naive ``sqrt(a*a + b*b)`` overflows for |a| > ~1.8e19 in float32 where MXNet
    (C ``hypot``) does not. Accurate to a few ulp.
    """
    dt = ctx.spec.out_dtypes[0]
    rank = len(ctx.spec.out_shapes[0])
    one = _scalar(ctx, 1, dt, rank, "one")
    aa = ctx.emit("Abs", [a])[0]
    ab = ctx.emit("Abs", [b])[0]
    m = ctx.emit("Max", [aa, ab])[0]
    n = ctx.emit("Min", [aa, ab])[0]
    q = ctx.emit("Div", [n, m])[0]
    r = ctx.emit("Mul", [m, ctx.emit("Sqrt", [ctx.emit("Add", [one, ctx.emit("Mul", [q, q])[0]])[0]])[0]])[0]
    # m == 0 (0/0) and m == inf (inf/inf) make q NaN; the answer is m itself.
    zero = ctx.emit("Equal", [m, _scalar(ctx, 0, dt, rank, "zero")])[0]
    inf = ctx.emit("Equal", [m, _scalar(ctx, np.inf, dt, rank, "inf")])[0]
    ctx.emit("Where", [ctx.emit("Or", [zero, inf])[0], m, r], [out])


@register("_hypot", "_Hypot", "broadcast_hypot", validator=_BINARY_VALIDATOR)
def _hypot_binary(ctx: ConvContext) -> None:
    """hypot(a, b) elementwise/broadcast."""
    _hypot(ctx, ctx.inputs[0], ctx.inputs[1], ctx.outputs[0])


def _check_add_n(spec: OpSpec) -> Optional[str]:
    if any(tuple(s) != tuple(spec.out_shapes[0]) for s in spec.in_shapes):
        return f"add_n inputs have different shapes {list(spec.in_shapes)}"
    return _same_dtypes(spec)


@register("add_n", "ElementWiseSum", validator=_validator(_check_add_n))
def _add_n(ctx: ConvContext) -> None:
    """Sum of all inputs (ONNX Sum)."""
    if len(ctx.inputs) == 1:
        _identity(ctx, ctx.inputs[0], ctx.outputs[0])
    else:
        ctx.emit("Sum", ctx.inputs, ctx.outputs)


# ----------------------------------------------------------------------------------------
# Tensor-scalar operators
# ----------------------------------------------------------------------------------------
def _check_scalar(spec: OpSpec) -> Optional[str]:
    spec.float_("scalar", 1.0)  # raises (-> reason) if unparsable
    if spec.has("is_int"):
        spec.bool_("is_int")
    # Legacy scalar ops keep the input dtype for float inputs whatever is_int says.
    if spec.out_dtypes[0] != spec.in_dtypes[0]:
        return f"output dtype {spec.out_dtypes[0]} differs from input dtype {spec.in_dtypes[0]}"
    return None


_SCALAR_VALIDATOR = _validator(_check_scalar)


def _check_int_scalar(spec: OpSpec) -> Optional[str]:
    """On an integer tensor MXNet uses ``DType(scalar)``: truncated toward zero; it must fit the type."""
    dt = spec.in_dtypes[0]
    if dt in FLOAT_DTYPES:
        return None
    v = float(spec.float_("scalar", 1.0))  # type: ignore[arg-type]
    info = np.iinfo(np.dtype(dt))
    if not (math.isfinite(v) and info.min <= math.trunc(v) <= info.max):
        return f"scalar {v} does not fit {dt} (its C conversion is undefined)"
    return None


#: Scalar ops exact on integer tensors (see _INT_BINARY_VALIDATOR).
_INT_SCALAR_VALIDATOR = _validator(_check_scalar, _check_int_scalar, dtypes=_MOVE_DTYPES)


def _scalar_value(spec: OpSpec) -> np.generic:
    """MXNet's ``DType(alpha)``: rounded to the float type, or truncated toward zero for integers."""
    v = float(spec.float_("scalar", 1.0))  # type: ignore[arg-type]
    dt = np.dtype(spec.in_dtypes[0])
    return dt.type(math.trunc(v)) if dt.kind in "iu" else dt.type(v)


def _scalar_operand(ctx: ConvContext) -> str:
    """The ``scalar`` attribute cast to the input dtype, as MXNet's ``DType(alpha)``."""
    return _scalar(ctx, _scalar_value(ctx.spec), ctx.spec.in_dtypes[0], len(ctx.spec.in_shapes[0]))


# name -> (ONNX op, scalar on the left?)
_SCALAR_ARITH: Dict[Tuple[str, ...], Tuple[str, bool]] = {
    ("_plus_scalar", "_PlusScalar"): ("Add", False),
    ("_minus_scalar", "_MinusScalar"): ("Sub", False),
    ("_rminus_scalar", "_RMinusScalar"): ("Sub", True),
    ("_mul_scalar", "_MulScalar"): ("Mul", False),
    ("_div_scalar", "_DivScalar"): ("Div", False),
    ("_rdiv_scalar", "_RDivScalar"): ("Div", True),
    ("_power_scalar", "_PowerScalar"): ("Pow", False),
    ("_rpower_scalar", "_RPowerScalar"): ("Pow", True),
    ("_maximum_scalar", "_MaximumScalar"): ("Max", False),
    ("_minimum_scalar", "_MinimumScalar"): ("Min", False),
}


def _make_scalar_arith(onnx_op: str, reverse: bool) -> Callable[[ConvContext], None]:
    def convert(ctx: ConvContext) -> None:
        s = _scalar_operand(ctx)
        ins = [s, ctx.inputs[0]] if reverse else [ctx.inputs[0], s]
        ctx.emit(onnx_op, ins, ctx.outputs)

    convert.__doc__ = f"Tensor-scalar {onnx_op}{' (scalar first)' if reverse else ''}."
    return convert


for _names, (_onnx_op, _rev) in _SCALAR_ARITH.items():
    _v = _INT_SCALAR_VALIDATOR if _onnx_op in _INT_EXACT else _SCALAR_VALIDATOR
    register(*_names, validator=_v)(_make_scalar_arith(_onnx_op, _rev))

_SCALAR_COMPARE: Dict[Tuple[str, ...], str] = {
    ("_equal_scalar", "_EqualScalar"): "eq",
    ("_not_equal_scalar", "_NotEqualScalar"): "ne",
    ("_greater_scalar", "_GreaterScalar"): "gt",
    ("_greater_equal_scalar", "_GreaterEqualScalar"): "ge",
    ("_lesser_scalar", "_LesserScalar"): "lt",
    ("_lesser_equal_scalar", "_LesserEqualScalar"): "le",
}


def _make_scalar_compare(kind: str) -> Callable[[ConvContext], None]:
    def convert(ctx: ConvContext) -> None:
        _bool_to(ctx, _compare(ctx, kind, ctx.inputs[0], _scalar_operand(ctx)), ctx.outputs[0])

    convert.__doc__ = f"Tensor-scalar comparison {kind}, as 0/1 in the input dtype."
    return convert


for _names, _kind in _SCALAR_COMPARE.items():
    register(*_names, validator=_INT_SCALAR_VALIDATOR)(_make_scalar_compare(_kind))

_SCALAR_LOGICAL: Dict[Tuple[str, ...], str] = {
    ("_logical_and_scalar", "_LogicalAndScalar"): "And",
    ("_logical_or_scalar", "_LogicalOrScalar"): "Or",
    ("_logical_xor_scalar", "_LogicalXorScalar"): "Xor",
}


def _make_scalar_logical(onnx_op: str) -> Callable[[ConvContext], None]:
    def convert(ctx: ConvContext) -> None:
        dt = ctx.spec.in_dtypes[0]
        rank = len(ctx.spec.in_shapes[0])
        a = _nonzero(ctx, ctx.inputs[0], dt, rank)
        # The scalar's truth value is known now (after MXNet's cast to the dtype; NaN is true).
        b = ctx.const(np.full((1,) * rank, bool(_scalar_value(ctx.spec) != 0)), "scalar_nonzero")
        _bool_to(ctx, ctx.emit(onnx_op, [a, b])[0], ctx.outputs[0])

    convert.__doc__ = f"Tensor-scalar logical {onnx_op}, as 0/1 in the input dtype."
    return convert


for _names, _onnx_op in _SCALAR_LOGICAL.items():
    register(*_names, validator=_INT_SCALAR_VALIDATOR)(_make_scalar_logical(_onnx_op))


@register("_hypot_scalar", "_HypotScalar", validator=_SCALAR_VALIDATOR)
def _hypot_scalar(ctx: ConvContext) -> None:
    """hypot(x, scalar)."""
    _hypot(ctx, ctx.inputs[0], _scalar_operand(ctx), ctx.outputs[0])


# ----------------------------------------------------------------------------------------
# Unary math
# ----------------------------------------------------------------------------------------
def _check_unary(spec: OpSpec) -> Optional[str]:
    if spec.out_dtypes[0] != spec.in_dtypes[0]:
        return f"output dtype {spec.out_dtypes[0]} differs from input dtype {spec.in_dtypes[0]}"
    return None


_UNARY_VALIDATOR = _validator(_check_unary)

# One ONNX op with MXNet's exact formula.
_UNARY: Dict[Tuple[str, ...], str] = {
    ("relu",): "Relu",
    ("sigmoid",): "Sigmoid",
    ("tanh",): "Tanh",
    ("exp",): "Exp",
    ("log",): "Log",
    ("sqrt",): "Sqrt",
    ("abs",): "Abs",
    ("negative",): "Neg",
    ("reciprocal",): "Reciprocal",
    ("floor",): "Floor",
    ("ceil",): "Ceil",
    ("sign",): "Sign",
    ("sin",): "Sin",
    ("cos",): "Cos",
    ("tan",): "Tan",
    ("arcsin",): "Asin",
    ("arccos",): "Acos",
    ("arctan",): "Atan",
    ("sinh",): "Sinh",
    ("cosh",): "Cosh",
    ("arcsinh",): "Asinh",
    ("arccosh",): "Acosh",
    ("arctanh",): "Atanh",
    ("erf",): "Erf",
    ("softsign",): "Softsign",
}


def _make_unary(onnx_op: str) -> Callable[[ConvContext], None]:
    def convert(ctx: ConvContext) -> None:
        ctx.emit(onnx_op, ctx.inputs[:1], ctx.outputs)

    convert.__doc__ = f"Unary ONNX {onnx_op}."
    return convert


for _names, _onnx_op in _UNARY.items():
    register(*_names, validator=_UNARY_VALIDATOR)(_make_unary(_onnx_op))


@register("_copy", "identity", "BlockGrad", "stop_gradient", "make_loss", "MakeLoss", validator=_MOVE)
def _copy(ctx: ConvContext) -> None:
    """Identity at inference (gradient-only semantics are irrelevant here)."""
    _identity(ctx, ctx.inputs[0], ctx.outputs[0])


@register("rsqrt", validator=_UNARY_VALIDATOR)
def _rsqrt(ctx: ConvContext) -> None:
    """MXNet computes ``1 / sqrt(x)``."""
    ctx.emit("Reciprocal", [ctx.emit("Sqrt", ctx.inputs[:1])[0]], ctx.outputs)


@register("square", validator=_UNARY_VALIDATOR)
def _square(ctx: ConvContext) -> None:
    """``x * x``."""
    ctx.emit("Mul", [ctx.inputs[0], ctx.inputs[0]], ctx.outputs)


def _cbrt_of(ctx: ConvContext, x: str) -> str:
    """``sign(x) * |x|^(1/3)``: Pow alone is NaN for negative bases."""
    third = _scalar(ctx, 1.0 / 3.0, ctx.spec.in_dtypes[0], len(ctx.spec.in_shapes[0]), "third")
    p = ctx.emit("Pow", [ctx.emit("Abs", [x])[0], third])[0]
    return ctx.emit("Mul", [ctx.emit("Sign", [x])[0], p])[0]


@register("cbrt", validator=_UNARY_VALIDATOR)
def _cbrt(ctx: ConvContext) -> None:
    """Cube root; within a few ulp of C's ``cbrtf``."""
    _identity(ctx, _cbrt_of(ctx, ctx.inputs[0]), ctx.outputs[0])


@register("rcbrt", validator=_UNARY_VALIDATOR)
def _rcbrt(ctx: ConvContext) -> None:
    """``1 / cbrt(x)``."""
    ctx.emit("Reciprocal", [_cbrt_of(ctx, ctx.inputs[0])], ctx.outputs)


def _make_scaled_log(factor: float) -> Callable[[ConvContext], None]:
    def convert(ctx: ConvContext) -> None:
        c = _scalar(ctx, factor, ctx.spec.in_dtypes[0], len(ctx.spec.in_shapes[0]), "inv_ln")
        ctx.emit("Mul", [ctx.emit("Log", ctx.inputs[:1])[0], c], ctx.outputs)

    convert.__doc__ = "Logarithm in another base as ``log(x) * (1 / ln(base))``; within 2 ulp."
    return convert


register("log2", validator=_UNARY_VALIDATOR)(_make_scaled_log(1.0 / math.log(2.0)))
register("log10", validator=_UNARY_VALIDATOR)(_make_scaled_log(1.0 / math.log(10.0)))


def _make_scale(factor: float) -> Callable[[ConvContext], None]:
    def convert(ctx: ConvContext) -> None:
        c = _scalar(ctx, factor, ctx.spec.in_dtypes[0], len(ctx.spec.in_shapes[0]), "factor")
        ctx.emit("Mul", [ctx.inputs[0], c], ctx.outputs)

    convert.__doc__ = "Multiplication by a constant factor (degrees/radians)."
    return convert


register("degrees", validator=_UNARY_VALIDATOR)(_make_scale(180.0 / math.pi))
register("radians", validator=_UNARY_VALIDATOR)(_make_scale(math.pi / 180.0))


@register("round", validator=_UNARY_VALIDATOR)
def _round(ctx: ConvContext) -> None:
    """C ``roundf``: halves away from zero (ONNX Round rounds halves to even).

    ``f = floor(|x|)`` and ``d = |x| - f`` are exact in binary floating point, so
    ``sign(x) * (f + (d >= 0.5))`` is exactly ``roundf(x)`` (NaN/inf propagate).
    """
    x = _to_f32(ctx, ctx.inputs[0])
    rank = len(ctx.spec.in_shapes[0])
    a = ctx.emit("Abs", [x])[0]
    f = ctx.emit("Floor", [a])[0]
    d = ctx.emit("Sub", [a, f])[0]
    up = ctx.emit("GreaterOrEqual", [d, _scalar(ctx, 0.5, "float32", rank, "half")])[0]
    f1 = ctx.emit("Add", [f, _scalar(ctx, 1.0, "float32", rank, "one")])[0]
    mag = ctx.emit("Where", [up, f1, f])[0]
    _from_f32(ctx, ctx.emit("Mul", [ctx.emit("Sign", [x])[0], mag])[0], ctx.outputs[0])


@register("rint", validator=_UNARY_VALIDATOR)
def _rint(ctx: ConvContext) -> None:
    """MXNet's rint: ``(x - floor) <= (ceil - x) ? floor : ceil`` (halves go down, not to even)."""
    x = _to_f32(ctx, ctx.inputs[0])
    f = ctx.emit("Floor", [x])[0]
    c = ctx.emit("Ceil", [x])[0]
    down = ctx.emit("LessOrEqual", [ctx.emit("Sub", [x, f])[0], ctx.emit("Sub", [c, x])[0]])[0]
    _from_f32(ctx, ctx.emit("Where", [down, f, c])[0], ctx.outputs[0])


@register("fix", "trunc", validator=_UNARY_VALIDATOR)
def _trunc(ctx: ConvContext) -> None:
    """Round toward zero: ceil for negatives, floor otherwise."""
    _identity(ctx, _toward_zero(ctx, ctx.inputs[0], ctx.spec.in_dtypes[0], len(ctx.spec.in_shapes[0])), ctx.outputs[0])


@register("log1p", validator=_UNARY_VALIDATOR)
def _log1p(ctx: ConvContext) -> None:
    """``log(1 + x)`` accurate for tiny x: ``log(u) * x / (u - 1)`` with ``u = 1 + x``.

    The correction factor ``x / (u - 1)`` cancels the rounding of ``1 + x``
    (Goldberg's method); ``u == 1`` gives ``x`` and ``u == inf`` gives ``inf``.
    """
    x = _to_f32(ctx, ctx.inputs[0])
    rank = len(ctx.spec.in_shapes[0])
    one = _scalar(ctx, 1.0, "float32", rank, "one")
    u = ctx.emit("Add", [x, one])[0]
    d = ctx.emit("Sub", [u, one])[0]
    r = ctx.emit("Mul", [ctx.emit("Log", [u])[0], ctx.emit("Div", [x, d])[0]])[0]
    r = ctx.emit("Where", [ctx.emit("Equal", [d, _scalar(ctx, 0.0, "float32", rank, "zero")])[0], x, r])[0]
    r = ctx.emit("Where", [ctx.emit("Equal", [u, _scalar(ctx, np.inf, "float32", rank, "inf")])[0], u, r])[0]
    _from_f32(ctx, r, ctx.outputs[0])


@register("expm1", validator=_UNARY_VALIDATOR)
def _expm1(ctx: ConvContext) -> None:
    """``exp(x) - 1`` accurate for tiny x: ``(u - 1) * x / log(u)`` with ``u = exp(x)`` (Kahan).

    ``u == 1`` gives ``x``; ``u - 1 == -1`` gives ``-1``; ``u == inf`` gives ``inf``.
    """
    x = _to_f32(ctx, ctx.inputs[0])
    rank = len(ctx.spec.in_shapes[0])
    one = _scalar(ctx, 1.0, "float32", rank, "one")
    minus_one = _scalar(ctx, -1.0, "float32", rank, "minus_one")
    u = ctx.emit("Exp", [x])[0]
    um1 = ctx.emit("Sub", [u, one])[0]
    r = ctx.emit("Mul", [um1, ctx.emit("Div", [x, ctx.emit("Log", [u])[0]])[0]])[0]
    r = ctx.emit("Where", [ctx.emit("Equal", [um1, minus_one])[0], minus_one, r])[0]
    r = ctx.emit("Where", [ctx.emit("Equal", [u, one])[0], x, r])[0]
    r = ctx.emit("Where", [ctx.emit("Equal", [u, _scalar(ctx, np.inf, "float32", rank, "inf")])[0], u, r])[0]
    _from_f32(ctx, r, ctx.outputs[0])


@register("hard_sigmoid", validator=_UNARY_VALIDATOR)
def _hard_sigmoid(ctx: ConvContext) -> None:
    """``clip(alpha * x + beta, 0, 1)``."""
    s = ctx.spec
    ctx.emit("HardSigmoid", ctx.inputs[:1], ctx.outputs, alpha=float(s.float_("alpha", 0.2)), beta=float(s.float_("beta", 0.5)))  # type: ignore[arg-type]


@register("logical_not", validator=_UNARY_VALIDATOR)
def _logical_not(ctx: ConvContext) -> None:
    """``x == 0`` as 0/1 in the input dtype."""
    zero = _scalar(ctx, 0, ctx.spec.in_dtypes[0], len(ctx.spec.in_shapes[0]), "zero")
    _bool_to(ctx, ctx.emit("Equal", [ctx.inputs[0], zero])[0], ctx.outputs[0])


#: Cast's types: those the engines hold, plus the 8-bit integers ONNX Runtime holds.
_CAST_DTYPES = _MOVE_DTYPES + ("uint8", "int8")


def _check_cast(spec: OpSpec) -> Optional[str]:
    """Cast between float16/32 and int8/uint8/int32/int64, as MXNet 1.9.1 does it.

    MXNet converts with C's ``static_cast``: float to integer truncates toward zero
    (-2.5 -> -2, 2.5 -> 2, -0.5 -> 0). The converter emits that truncation itself
    (Floor/Ceil) before the ONNX Cast, so no backend's Cast rounding matters for
    values the target type holds: ONNX Runtime's Cast truncates as well, and
    TensorRT's documentation shows truncation only by example (1.2 -> 1, 5.6 -> 5).

    NaN, infinities and values outside the target range are undefined behaviour in
    C. What the backends do with them (measured, float32 -> int32; 1e10, -1e10,
    inf, nan): MXNet 1.9.1 CPU and ONNX Runtime 1.19 both give INT32_MIN (the x86
    conversion's "integer indefinite"); TensorRT saturates (INT32_MAX for 1e10 and
    +inf) and gives 0 for NaN, as CUDA's conversion and MXNet's GPU kernels do.
    To int64 the same holds beyond +-2**63; 8-bit targets wrap the truncated value
    through int32 on x86 (-2.5 -> 254 as uint8). Those inputs have no defined result
    in MXNet and are not matched. Integer-to-integer narrowing wraps (two's complement)
    in MXNet and ONNX Runtime.
    """
    target = spec.str_("dtype")
    if target not in _CAST_DTYPES:
        return f"Cast to {target} is not supported (only {', '.join(_CAST_DTYPES)})"
    if spec.out_dtypes[0] != target:
        return f"inferred output dtype {spec.out_dtypes[0]} differs from dtype={target}"
    return _check_dtypes(spec, _CAST_DTYPES, outputs=False)


@register("Cast", "cast", validator=_validator(_check_cast, dtypes=None))
def _cast_op(ctx: ConvContext) -> None:
    """Cast; float to integer truncates toward zero explicitly first (see :func:`_check_cast`)."""
    src, dst = ctx.spec.in_dtypes[0], ctx.spec.out_dtypes[0]
    x = ctx.inputs[0]
    if src == dst:
        _identity(ctx, x, ctx.outputs[0])
        return
    if src in FLOAT_DTYPES and dst not in FLOAT_DTYPES:
        x = _toward_zero(ctx, x, src, len(ctx.spec.in_shapes[0]))
    _cast(ctx, x, dst, ctx.outputs[0])


@register("_contrib_div_sqrt_dim", validator=_UNARY_VALIDATOR)
def _div_sqrt_dim(ctx: ConvContext) -> None:
    """``x / DType(sqrt(double(last dim)))``."""
    d = ctx.spec.in_shapes[0][-1]
    c = _scalar(ctx, math.sqrt(float(d)), ctx.spec.in_dtypes[0], len(ctx.spec.in_shapes[0]), "sqrt_dim")
    ctx.emit("Div", [ctx.inputs[0], c], ctx.outputs)


# ----------------------------------------------------------------------------------------
# Matrix products
# ----------------------------------------------------------------------------------------
def _dot_dims(spec: OpSpec) -> Tuple[Tuple[int, int], Tuple[int, int], bool, bool]:
    """MXNet's 2-D views of dot's operands: A as (a0, a1), B as (b0, b1), and the flags."""
    ls, rs = list(spec.in_shapes[0]), list(spec.in_shapes[1])
    ta, tb = spec.bool_("transpose_a"), spec.bool_("transpose_b")
    if len(ls) == 1 and len(rs) == 1 and (ta or tb):
        raise ConversionError("dot cannot transpose vectors")
    a = (ls[0], int(np.prod(ls[1:]))) if ta else (int(np.prod(ls[:-1])), ls[-1])
    b = (int(np.prod(rs[:-1])), rs[-1]) if tb else (rs[0], int(np.prod(rs[1:])))
    return a, b, ta, tb


def _check_dot(spec: OpSpec) -> Optional[str]:
    stype = spec.str_("forward_stype", "None")
    if stype not in ("None", "default"):
        return f"forward_stype={stype} (sparse output) is not supported"
    a, b, ta, tb = _dot_dims(spec)
    k_a = a[0] if ta else a[1]
    k_b = b[1] if tb else b[0]
    if k_a != k_b:
        return f"dot inner dimensions differ ({k_a} vs {k_b})"
    m = a[1] if ta else a[0]
    n = b[0] if tb else b[1]
    if m * n != int(np.prod(spec.out_shapes[0])):
        return f"dot output {spec.out_shapes[0]} does not hold {m}x{n} values"
    return _same_dtypes(spec)


@register("dot", validator=_validator(_check_dot))
def _dot(ctx: ConvContext) -> None:
    """N-D dot: flatten to MXNet's 2-D views, one Gemm, reshape to the output shape."""
    a, b, ta, tb = _dot_dims(ctx.spec)
    x, y = ctx.inputs[0], ctx.inputs[1]
    if tuple(ctx.spec.in_shapes[0]) != a:
        x = _reshape(ctx, x, a)
    if tuple(ctx.spec.in_shapes[1]) != b:
        y = _reshape(ctx, y, b)
    oshape = tuple(ctx.spec.out_shapes[0])
    m = a[1] if ta else a[0]
    n = b[0] if tb else b[1]
    if oshape == (m, n):
        ctx.emit("Gemm", [x, y], ctx.outputs, transA=int(ta), transB=int(tb))
    else:
        g = ctx.emit("Gemm", [x, y], transA=int(ta), transB=int(tb))[0]
        _reshape(ctx, g, oshape, ctx.outputs[0])


def _swap_last2(ctx: ConvContext, x: str, rank: int) -> str:
    perm = list(range(rank))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return ctx.emit("Transpose", [x], perm=perm)[0]


def _batched_matmul(ctx: ConvContext, alpha: float = 1.0) -> None:
    rank = len(ctx.spec.in_shapes[0])
    x, y = ctx.inputs[0], ctx.inputs[1]
    if ctx.spec.bool_("transpose_a"):
        x = _swap_last2(ctx, x, rank)
    if ctx.spec.bool_("transpose_b"):
        y = _swap_last2(ctx, y, rank)
    if alpha == 1.0:
        ctx.emit("MatMul", [x, y], ctx.outputs)
    else:
        p = ctx.emit("MatMul", [x, y])[0]
        ctx.emit("Mul", [p, _scalar(ctx, alpha, ctx.spec.out_dtypes[0], rank, "alpha")], ctx.outputs)


def _check_batch_dot(spec: OpSpec) -> Optional[str]:
    ls, rs = list(spec.in_shapes[0]), list(spec.in_shapes[1])
    if len(ls) != len(rs) or len(ls) < 3:
        return f"batch_dot needs two inputs of equal rank >= 3, got {ls} and {rs}"
    stype = spec.str_("forward_stype", "None")
    if stype not in ("None", "default"):
        return f"forward_stype={stype} (sparse output) is not supported"
    return _check_matmul_shape(spec, ls, rs)


def _check_matmul_shape(spec: OpSpec, ls: List[int], rs: List[int]) -> Optional[str]:
    ta, tb = spec.bool_("transpose_a"), spec.bool_("transpose_b")
    m, k1 = (ls[-1], ls[-2]) if ta else (ls[-2], ls[-1])
    k2, n = (rs[-1], rs[-2]) if tb else (rs[-2], rs[-1])
    if k1 != k2 or ls[:-2] != rs[:-2]:
        return f"incompatible matrix shapes {ls} x {rs}"
    return _same_dtypes(spec) or _expect_shape(spec, ls[:-2] + [m, n])


@register("batch_dot", validator=_validator(_check_batch_dot))
def _batch_dot(ctx: ConvContext) -> None:
    """Batched matrix product over the last two axes."""
    _batched_matmul(ctx)


def _check_gemm2(spec: OpSpec) -> Optional[str]:
    ls, rs = list(spec.in_shapes[0]), list(spec.in_shapes[1])
    if len(ls) != len(rs) or len(ls) < 2:
        return f"linalg_gemm2 needs two inputs of equal rank >= 2, got {ls} and {rs}"
    axis = spec.int_("axis", -2)
    if axis not in (-2, len(ls) - 2):
        return f"linalg_gemm2 axis={axis} is not supported (only the default -2: rows on the second-last axis)"
    spec.float_("alpha", 1.0)
    return _check_matmul_shape(spec, ls, rs)


@register("_linalg_gemm2", "linalg_gemm2", validator=_validator(_check_gemm2))
def _gemm2(ctx: ConvContext) -> None:
    """``alpha * op(A) @ op(B)`` over the last two axes."""
    alpha = float(np.dtype(ctx.spec.out_dtypes[0]).type(ctx.spec.float_("alpha", 1.0)))
    _batched_matmul(ctx, alpha)


# ----------------------------------------------------------------------------------------
# Reductions
# ----------------------------------------------------------------------------------------
def _reduce_axes(spec: OpSpec, allow_exclude: bool = True) -> List[int]:
    """The reduced axes (sorted), following MXNet's ReduceAxesShapeImpl."""
    nd = len(spec.in_shapes[0])
    axis = spec.tuple_("axis")
    if not axis:
        return list(range(nd))  # None or (): reduce everything, exclude notwithstanding
    axes = sorted(_norm_axis(int(a), nd) for a in axis)
    if len(set(axes)) != len(axes):
        raise ConversionError(f"reduction axes {tuple(axis)} have duplicates")
    if allow_exclude and spec.bool_("exclude"):
        return [a for a in range(nd) if a not in axes]
    return axes


def _reduced_shape(spec: OpSpec, axes: Sequence[int]) -> List[int]:
    ishape = list(spec.in_shapes[0])
    if spec.bool_("keepdims"):
        return [1 if i in axes else d for i, d in enumerate(ishape)]
    kept = [d for i, d in enumerate(ishape) if i not in axes]
    return kept or [1]


def _emit_reduction(ctx: ConvContext, op: str, axes: Sequence[int]) -> None:
    ishape = list(ctx.spec.in_shapes[0])
    oshape = list(ctx.spec.out_shapes[0])
    if not axes:
        _identity(ctx, ctx.inputs[0], ctx.outputs[0])
        return
    kept_dims = [1 if i in axes else d for i, d in enumerate(ishape)]
    squeezed = [d for i, d in enumerate(ishape) if i not in axes]
    if oshape == kept_dims:
        _reduce(ctx, op, ctx.inputs[0], axes, True, ctx.outputs[0])
    elif oshape == squeezed:
        _reduce(ctx, op, ctx.inputs[0], axes, False, ctx.outputs[0])
    else:  # everything reduced without keepdims: MXNet returns shape (1,)
        r = _reduce(ctx, op, ctx.inputs[0], axes, True)
        _reshape(ctx, r, oshape, ctx.outputs[0])


def _check_reduce(spec: OpSpec) -> Optional[str]:
    return _expect_shape(spec, _reduced_shape(spec, _reduce_axes(spec)))


_REDUCE: Dict[Tuple[str, ...], str] = {
    ("sum", "sum_axis"): "ReduceSum",
    ("mean",): "ReduceMean",
    ("prod",): "ReduceProd",
    ("max", "max_axis"): "ReduceMax",
    ("min", "min_axis"): "ReduceMin",
}


def _make_reduce(onnx_op: str) -> Callable[[ConvContext], None]:
    def convert(ctx: ConvContext) -> None:
        _emit_reduction(ctx, onnx_op, _reduce_axes(ctx.spec))

    convert.__doc__ = f"{onnx_op} over MXNet's axes (None/int/tuple, negative, exclude, keepdims)."
    return convert


for _names, _onnx_op in _REDUCE.items():
    register(*_names, validator=_validator(_check_reduce))(_make_reduce(_onnx_op))


def _check_norm(spec: OpSpec) -> Optional[str]:
    ord_ = spec.int_("ord", 2)
    if ord_ not in (1, 2):
        return f"norm ord={ord_} is not supported (MXNet supports only 1 and 2)"
    out_dtype = spec.str_("out_dtype", "None")
    if out_dtype not in ("None", spec.in_dtypes[0]):
        return f"norm out_dtype={out_dtype} differs from the input dtype {spec.in_dtypes[0]}"
    return _expect_shape(spec, _reduced_shape(spec, _reduce_axes(spec, allow_exclude=False)))


@register("norm", validator=_validator(_check_norm))
def _norm(ctx: ConvContext) -> None:
    """L1 (sum of |x|) or L2 (sqrt of sum of squares) over the axes; MXNet has no matrix norms."""
    op = "ReduceL1" if ctx.spec.int_("ord", 2) == 1 else "ReduceL2"
    _emit_reduction(ctx, op, _reduce_axes(ctx.spec, allow_exclude=False))
