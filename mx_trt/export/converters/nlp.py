"""Converters for the softmax family, multi-head attention matmuls, Embedding and LayerNorm.

These are the operators of GluonNLP's models (BERT, the Transformer) beyond the
dense and elementwise ones: ``softmax`` with a length mask, the interleaved
attention matmuls of ``mxnet.contrib``, embeddings and layer normalisation.
Every converter reproduces MXNet 1.9.1's inference forward with opset-17 ONNX
that ONNX Runtime and TensorRT's parser accept; whatever cannot be reproduced
is refused by the op's validator with the reason.

Sequence-first layouts (``(seq_len, batch, ...)``, as the attention matmuls
take them) never bake the batch size into a constant: reshapes copy or infer it.
"""
from __future__ import annotations

import logging
from typing import Optional, Sequence

import numpy as np

from mx_trt.export.converters.common import attr_float, check_outputs, int64s, norm_axis, reshape
from mx_trt.export.converters.registry import FLOAT_DTYPES, ConvContext, register
from mx_trt.export.spec import OpSpec

logger = logging.getLogger(__name__)

#: ONNX TensorProto element types used here (fixed by the ONNX spec).
_ONNX_TYPE = {"float32": 1, "int32": 6, "int64": 7, "float16": 10}
#: Index dtypes MXNet's length-masked softmax reads (its kernel refuses others).
_LENGTH_DTYPES = ("int32", "int64")
#: Masked scores are set this far below the row's smallest valid score (or 0): exp(-128)
#: is 0 in float16 and float32, so they add nothing to the sum.
_MASK_MARGIN = 128.0


# -- shared helpers ---------------------------------------------------------------------


def _check_float(spec: OpSpec, *inputs: int) -> Optional[str]:
    """Inputs ``inputs`` (default all) and every output must be float32 or float16."""
    for i in inputs or range(len(spec.in_dtypes)):
        if spec.in_dtypes[i] not in FLOAT_DTYPES:
            return f"input {i} has dtype {spec.in_dtypes[i]}; supported: {', '.join(FLOAT_DTYPES)}"
    for i, dt in enumerate(spec.out_dtypes):
        if dt not in FLOAT_DTYPES:
            return f"output {i} has dtype {dt}; supported: {', '.join(FLOAT_DTYPES)}"
    return None


def _axis(spec: OpSpec, default: int) -> int:
    """The ``axis`` attribute normalised for input 0 (raises ConversionError when out of range)."""
    a = spec.int_("axis", default)
    return norm_axis(default if a is None else a, len(spec.in_shapes[0]))


def _const_like(ctx: ConvContext, value: float, dtype: str, rank: int, hint: str) -> str:
    """A constant of shape ``(1,) * rank`` (same rank as its partner: TensorRT broadcasts those)."""
    return ctx.const(np.full((1,) * rank, value, dtype=np.dtype(dtype)), hint)


def _cast(ctx: ConvContext, x: str, dtype: str, out: Optional[str] = None) -> str:
    return ctx.emit("Cast", [x], None if out is None else [out], to=_ONNX_TYPE[dtype])[0]


# -- softmax family ---------------------------------------------------------------------


def _check_softmax(spec: OpSpec) -> Optional[str]:
    use_length = spec.bool_("use_length", False)
    r = _check_float(spec, 0) or check_outputs(spec, 1)
    if r:
        return r
    axis = _axis(spec, -1)
    t = spec.float_("temperature")
    if t is not None and t <= 0:
        return (f"temperature={t} is not supported: MXNet computes exp((x - max) / T), "
                "which overflows for T <= 0 where a shifted softmax does not")
    n_in = 2 if use_length else 1
    if len(spec.in_shapes) != n_in:
        return f"use_length={use_length} needs {n_in} input(s), got {len(spec.in_shapes)}"
    if use_length:
        if spec.in_dtypes[1] not in _LENGTH_DTYPES:
            return f"length of dtype {spec.in_dtypes[1]} is not supported; MXNet reads int32 or int64 lengths only"
        shape = spec.in_shapes[0]
        want = tuple(d for i, d in enumerate(shape) if i != axis) or (1,)
        if tuple(spec.in_shapes[1]) != want:
            return f"length has shape {tuple(spec.in_shapes[1])}, expected {want} (the data shape without axis {axis})"
    return None


def _length_mask(ctx: ConvContext, length: str, axis: int, shape: Sequence[int]) -> str:
    """``arange(M) < length`` along ``axis`` as a bool tensor broadcastable to ``shape`` (rank >= 2).

    Lengths outside ``[0, M]`` give an empty or a full row (MXNet reads or writes
    out of bounds there).
    """
    rank = len(shape)
    m = shape[axis]
    if ctx.spec.in_dtypes[1] != "int32":
        # Clip in int64 first so that huge lengths do not wrap in the int32 cast.
        hi = ctx.const(np.asarray(m, np.int64), "len_max")
        lo = ctx.const(np.asarray(-1, np.int64), "len_min")
        length = _cast(ctx, ctx.emit("Min", [ctx.emit("Max", [length, lo])[0], hi])[0], "int32")
    pos = ctx.const(np.arange(m, dtype=np.int32).reshape([m] + [1] * (rank - 1 - axis)), "positions")
    length = ctx.emit("Unsqueeze", [length, int64s(ctx, [axis], "axes")])[0]
    return ctx.emit("Less", [pos, length])[0]


def _softmax_core(ctx: ConvContext, op_type: str, x: str, axis: int, shape: Sequence[int], dtype: str,
                  length: Optional[str], out: str) -> None:
    """``op_type`` (Softmax / LogSoftmax) of ``x`` over ``axis``, length-masked if ``length`` is given.

    Masked positions get ``min(valid scores, 0)`` minus :data:`_MASK_MARGIN` before
    the softmax (so they weigh exactly 0, and the value stays finite in float16) and
    are written as 0 after it, as MXNet does. A 1-D input runs as a (1, n) view:
    TensorRT's softmax needs rank 2 or more.
    """
    rank = len(shape)
    one_d = rank == 1
    if one_d:
        x = ctx.emit("Unsqueeze", [x, int64s(ctx, [0], "row")])[0]
        shape, axis, rank = (1,) + tuple(shape), 1, 2
    y_out = None if one_d else out
    if length is None:
        y = ctx.emit(op_type, [x], None if y_out is None else [y_out], axis=axis)[0]
    else:
        mask = _length_mask(ctx, length, axis, shape)
        zero = _const_like(ctx, 0.0, dtype, rank, "zero")
        # min(valid scores and 0) <= the largest valid score, and masked values (which
        # MXNet never reads, NaN or inf included) do not enter it.
        low = ctx.emit("ReduceMin", [ctx.emit("Where", [mask, x, zero])[0]], axes=[axis], keepdims=1)[0]
        fill = ctx.emit("Sub", [low, _const_like(ctx, _MASK_MARGIN, dtype, rank, "margin")])[0]
        s = ctx.emit(op_type, [ctx.emit("Where", [mask, x, fill])[0]], axis=axis)[0]
        y = ctx.emit("Where", [mask, s, zero], None if y_out is None else [y_out])[0]
    if one_d:
        ctx.emit("Squeeze", [y, int64s(ctx, [0], "unrow")], [out])


def _softmax_like(ctx: ConvContext, op_type: str) -> None:
    """softmax / log_softmax with MXNet's temperature, dtype and length mask.

    With ``dtype`` differing from the input MXNet computes in the wider type
    (float32) and writes the output type; the temperature is rounded to the input
    dtype first, as MXNet's kernel does.
    """
    spec = ctx.spec
    in_dt, out_dt = spec.in_dtypes[0], spec.out_dtypes[0]
    x = ctx.inputs[0]
    shape = spec.in_shapes[0]
    compute = in_dt if in_dt == out_dt else "float32"
    if compute != in_dt:
        x = _cast(ctx, x, compute)
    t = spec.float_("temperature")
    if t is not None and t != 1.0:
        t_in = float(np.asarray(t, dtype=np.dtype(in_dt)))
        x = ctx.emit("Div", [x, _const_like(ctx, t_in, compute, len(shape), "temperature")])[0]
    length = ctx.inputs[1] if spec.bool_("use_length", False) else None
    y = ctx.outputs[0] if compute == out_dt else ctx.tmp("y")
    _softmax_core(ctx, op_type, x, _axis(spec, -1), shape, compute, length, y)
    if compute != out_dt:
        _cast(ctx, y, out_dt, ctx.outputs[0])


@register("softmax", "_npx_softmax", validator=_check_softmax)
def _softmax(ctx: ConvContext) -> None:
    _softmax_like(ctx, "Softmax")


@register("log_softmax", "_npx_log_softmax", validator=_check_softmax)
def _log_softmax(ctx: ConvContext) -> None:
    _softmax_like(ctx, "LogSoftmax")


def _check_softmax_output(spec: OpSpec) -> Optional[str]:
    ndim = len(spec.in_shapes[0])
    if spec.bool_("multi_output", False):
        if ndim < 2:
            return "multi_output=True needs an input with at least 2 dimensions"
    elif not spec.bool_("preserve_shape", False) and ndim != 2:
        # MXNet disagrees with itself here: its CPU (oneDNN) kernel takes the softmax over
        # the last axis, its GPU kernel over all non-batch axes flattened.
        return (
            f"a {ndim}-D input without preserve_shape or multi_output is not supported "
            "(MXNet's CPU and GPU results differ)"
        )
    return _check_float(spec, 0)


@register("SoftmaxOutput", "Softmax", validator=_check_softmax_output)
def _softmax_output(ctx: ConvContext) -> None:
    """Inference output only (the label input is ignored): softmax over axis 1 with
    ``multi_output``, else over the last axis."""
    shape = ctx.spec.in_shapes[0]
    axis = 1 if ctx.spec.bool_("multi_output", False) else len(shape) - 1
    _softmax_core(ctx, "Softmax", ctx.inputs[0], axis, shape, ctx.spec.in_dtypes[0], None, ctx.outputs[0])


def _check_softmax_activation(spec: OpSpec) -> Optional[str]:
    mode = spec.str_("mode", "instance")
    if mode not in ("instance", "channel"):
        return f"mode {mode!r} is not supported"
    if mode == "channel" and len(spec.in_shapes[0]) < 3:
        return "mode 'channel' needs an input with at least 3 dimensions"
    return _check_float(spec, 0)


@register("SoftmaxActivation", validator=_check_softmax_activation)
def _softmax_activation(ctx: ConvContext) -> None:
    # 'instance' flattens to (prod(shape[:-1]), shape[-1]): a softmax over the last axis.
    shape = ctx.spec.in_shapes[0]
    axis = 1 if ctx.spec.str_("mode", "instance") == "channel" else len(shape) - 1
    _softmax_core(ctx, "Softmax", ctx.inputs[0], axis, shape, ctx.spec.in_dtypes[0], None, ctx.outputs[0])


# -- interleaved multi-head attention matmuls (src/operator/contrib/transformer.cc) ------------
#
# Projections are sequence-first. Self-attention packs (seq, batch, heads * 3 * head_dim)
# as [heads][q|k|v][head_dim] per batch entry; encoder-decoder attention packs the
# queries as (seq, batch, heads * head_dim) and the keys/values as [heads][k|v][head_dim].
# Attention batches are ordered batch-major: index b * heads + h.


def _heads(spec: OpSpec) -> int:
    h = spec.int_("heads")
    if h is None or h <= 0:
        raise ValueError(f"heads={spec.str_('heads')} must be a positive integer")
    return h


def _check_interleaved(spec: OpSpec, n_in: int, packs: Sequence[int]) -> Optional[str]:
    """Shared checks: float dtypes, 3-D inputs, last dims that split evenly into heads."""
    r = _check_float(spec) or check_outputs(spec, 1)
    if r:
        return r
    if len(spec.in_shapes) != n_in:
        return f"expected {n_in} input(s), got {len(spec.in_shapes)}"
    if len(set(spec.in_dtypes)) != 1:
        return f"inputs have different dtypes {list(spec.in_dtypes)}"
    heads = _heads(spec)
    for i, (s, pack) in enumerate(zip(spec.in_shapes, packs)):
        if len(s) != 3:
            return f"input {i} must be 3-D, got {tuple(s)}"
        if pack and s[2] % (pack * heads):
            return f"input {i} has last dimension {s[2]}, not a multiple of {pack} x heads={heads}"
    return None


def _expect(spec: OpSpec, what: str, got: Sequence[int], want: Sequence[int]) -> Optional[str]:
    if tuple(got) != tuple(want):
        return f"{what} has shape {tuple(got)}, expected {tuple(want)}"
    return None


def _check_selfatt_qk(spec: OpSpec) -> Optional[str]:
    r = _check_interleaved(spec, 1, (3,))
    if r:
        return r
    seq, batch, _ = spec.in_shapes[0]
    return _expect(spec, "the output", spec.out_shapes[0], (batch * _heads(spec), seq, seq))


def _check_selfatt_valatt(spec: OpSpec) -> Optional[str]:
    r = _check_interleaved(spec, 2, (3, 0))
    if r:
        return r
    (seq, batch, units3), att = spec.in_shapes
    # MXNet reads batch * heads attention maps whatever the attention's shape says.
    return (_expect(spec, "the attention (batch * heads, seq, seq)", att, (batch * _heads(spec), seq, seq))
            or _expect(spec, "the output", spec.out_shapes[0], (seq, batch, units3 // 3)))


def _check_encdec_qk(spec: OpSpec) -> Optional[str]:
    r = _check_interleaved(spec, 2, (1, 2))
    if r:
        return r
    (q_seq, batch, units), (kv_seq, kv_batch, kv_units) = spec.in_shapes
    return (_expect(spec, "keys_values", (kv_batch, kv_units), (batch, 2 * units))
            or _expect(spec, "the output", spec.out_shapes[0], (batch * _heads(spec), q_seq, kv_seq)))


def _check_encdec_valatt(spec: OpSpec) -> Optional[str]:
    r = _check_interleaved(spec, 2, (2, 0))
    if r:
        return r
    (kv_seq, batch, kv_units), att = spec.in_shapes
    return (_expect(spec, "the attention (batch * heads, q_seq, kv_seq)", (att[0], att[2]),
                    (batch * _heads(spec), kv_seq))
            or _expect(spec, "the output", spec.out_shapes[0], (att[1], batch, kv_units // 2)))


def _heads_first(ctx: ConvContext, packed: str, pack: int, head_dim: int, part: int, keys: bool = False) -> str:
    """Part ``part`` of a (seq, batch, heads * pack * head_dim) projection as
    (batch * heads, seq, head_dim), or (batch * heads, head_dim, seq) with ``keys``."""
    x = reshape(ctx, packed, [0, -1, pack * head_dim])
    if pack > 1:
        starts, ends = int64s(ctx, [part * head_dim], "starts"), int64s(ctx, [(part + 1) * head_dim], "ends")
        x = ctx.emit("Slice", [x, starts, ends, int64s(ctx, [2], "axes")])[0]
    return ctx.emit("Transpose", [x], perm=[1, 2, 0] if keys else [1, 0, 2])[0]


def _scores(ctx: ConvContext, q: str, k: str, head_dim: int) -> None:
    """``(q @ k) * (1 / sqrt(head_dim))``: MXNet's GEMM scales the product."""
    scale = float(np.float32(1.0) / np.sqrt(np.float32(head_dim)))
    prod = ctx.emit("MatMul", [q, k])[0]
    ctx.emit("Mul", [prod, _const_like(ctx, scale, ctx.spec.in_dtypes[0], 3, "scale")], ctx.outputs[:1])


def _weighted_values(ctx: ConvContext, att: str, v: str, units: int) -> None:
    """``att @ v`` back to sequence-first (seq, batch, heads * head_dim)."""
    y = ctx.emit("MatMul", [att, v])[0]
    y = ctx.emit("Transpose", [y], perm=[1, 0, 2])[0]
    reshape(ctx, y, [0, -1, units], ctx.outputs[0])


@register("_contrib_interleaved_matmul_selfatt_qk", validator=_check_selfatt_qk)
def _selfatt_qk(ctx: ConvContext) -> None:
    """(batch * heads, seq, seq) scores ``q k^T / sqrt(head_dim)`` of a packed q|k|v projection."""
    head_dim = ctx.spec.in_shapes[0][2] // (3 * _heads(ctx.spec))
    qkv = ctx.inputs[0]
    q = _heads_first(ctx, qkv, 3, head_dim, 0)
    k = _heads_first(ctx, qkv, 3, head_dim, 1, keys=True)
    _scores(ctx, q, k, head_dim)


@register("_contrib_interleaved_matmul_selfatt_valatt", validator=_check_selfatt_valatt)
def _selfatt_valatt(ctx: ConvContext) -> None:
    """Attention-weighted values of a packed q|k|v projection, (seq, batch, heads * head_dim)."""
    units = ctx.spec.in_shapes[0][2] // 3
    head_dim = units // _heads(ctx.spec)
    v = _heads_first(ctx, ctx.inputs[0], 3, head_dim, 2)
    _weighted_values(ctx, ctx.inputs[1], v, units)


@register("_contrib_interleaved_matmul_encdec_qk", validator=_check_encdec_qk)
def _encdec_qk(ctx: ConvContext) -> None:
    """(batch * heads, q_seq, kv_seq) scores of queries against a packed k|v projection."""
    head_dim = ctx.spec.in_shapes[0][2] // _heads(ctx.spec)
    q = _heads_first(ctx, ctx.inputs[0], 1, head_dim, 0)
    k = _heads_first(ctx, ctx.inputs[1], 2, head_dim, 0, keys=True)
    _scores(ctx, q, k, head_dim)


@register("_contrib_interleaved_matmul_encdec_valatt", validator=_check_encdec_valatt)
def _encdec_valatt(ctx: ConvContext) -> None:
    """Attention-weighted values of a packed k|v projection, (q_seq, batch, heads * head_dim)."""
    units = ctx.spec.in_shapes[0][2] // 2
    head_dim = units // _heads(ctx.spec)
    v = _heads_first(ctx, ctx.inputs[0], 2, head_dim, 1)
    _weighted_values(ctx, ctx.inputs[1], v, units)


# -- Embedding --------------------------------------------------------------------------


def _check_embedding(spec: OpSpec) -> Optional[str]:
    r = _check_float(spec, 1) or check_outputs(spec, 1)
    if r:
        return r
    idx_dt = spec.in_dtypes[0]
    if idx_dt not in FLOAT_DTYPES + ("int32", "int64"):
        return f"indices of dtype {idx_dt} are not supported"
    if len(spec.in_shapes[1]) != 2:
        return f"weight must be 2-D, got {spec.in_shapes[1]}"
    if spec.out_dtypes[0] != spec.in_dtypes[1]:
        return f"output dtype {spec.out_dtypes[0]} differs from the weight's {spec.in_dtypes[1]}"
    if idx_dt in FLOAT_DTYPES and spec.in_shapes[1][0] > 1 << 24:
        return f"input_dim {spec.in_shapes[1][0]} exceeds 2**24, past which float indices are not exact"
    return None


@register("Embedding", "_npx_embedding", validator=_check_embedding)
def _embedding(ctx: ConvContext) -> None:
    """``weight[clip(int(x), 0, input_dim - 1)]``: MXNet truncates float ids toward zero,
    then clips out-of-range ids to the first or last row."""
    spec = ctx.spec
    idx, w = ctx.inputs[0], ctx.inputs[1]
    rows = spec.in_shapes[1][0]
    idx_dt = spec.in_dtypes[0]
    if idx_dt in FLOAT_DTYPES:
        if idx_dt != "float32":
            idx = _cast(ctx, idx, "float32")  # float16 holds fewer row numbers exactly than float32
        # Clipping before the cast gives the same row (truncation is monotonic) and keeps
        # the cast in range.
        lo = ctx.const(np.asarray(0.0, np.float32), "lo")
        hi = ctx.const(np.asarray(rows - 1, np.float32), "hi")
        idx = _cast(ctx, ctx.emit("Clip", [idx, lo, hi])[0], "int32")  # what TensorRT gathers with
    else:
        np_dt = np.dtype(idx_dt)
        lo = ctx.const(np.asarray(0, np_dt), "lo")
        hi = ctx.const(np.asarray(rows - 1, np_dt), "hi")
        # Clipped in the index type, so that int64 ids beyond the int32 range do not wrap.
        idx = ctx.emit("Min", [ctx.emit("Max", [idx, lo])[0], hi])[0]
        if idx_dt != "int32":
            idx = _cast(ctx, idx, "int32")
    ctx.emit("Gather", [w, idx], ctx.outputs, axis=0)


# -- LayerNorm --------------------------------------------------------------------------


def _check_layer_norm(spec: OpSpec) -> Optional[str]:
    if spec.bool_("output_mean_var", False):
        return "output_mean_var=True is not supported"
    r = _check_float(spec) or check_outputs(spec, 1)
    if r:
        return r
    axis = _axis(spec, -1)
    c = spec.in_shapes[0][axis]
    for i in (1, 2):
        if tuple(spec.in_shapes[i]) != (c,):
            return f"input {i} has shape {tuple(spec.in_shapes[i])}, expected ({c},)"
    return None


@register("LayerNorm", "_npx_layer_norm", validator=_check_layer_norm)
def _layer_norm(ctx: ConvContext) -> None:
    """``(x - mean) / sqrt(var + eps) * gamma + beta`` over one axis (biased variance)."""
    spec = ctx.spec
    x, gamma, beta = ctx.inputs[:3]
    ndim = len(spec.in_shapes[0])
    axis = _axis(spec, -1)
    eps = attr_float(spec, "eps", 1e-5)
    if axis == ndim - 1:
        ctx.emit("LayerNormalization", [x, gamma, beta], ctx.outputs[:1], axis=-1, epsilon=eps)
        return
    # ONNX LayerNormalization normalizes over all axes from `axis` on; MXNet over one axis.
    dt = spec.in_dtypes[0]
    bshape = [spec.in_shapes[0][axis]] + [1] * (ndim - 1 - axis)
    mean = ctx.emit("ReduceMean", [x], axes=[axis], keepdims=1)[0]
    d = ctx.emit("Sub", [x, mean])[0]
    var = ctx.emit("ReduceMean", [ctx.emit("Mul", [d, d])[0]], axes=[axis], keepdims=1)[0]
    std = ctx.emit("Sqrt", [ctx.emit("Add", [var, _const_like(ctx, eps, dt, ndim, "eps")])[0]])[0]
    y = ctx.emit("Div", [d, std])[0]
    y = ctx.emit("Mul", [y, reshape(ctx, gamma, bshape)])[0]
    ctx.emit("Add", [y, reshape(ctx, beta, bshape)], ctx.outputs[:1])
