"""Converters for neural-network operators (convolution, normalisation, dense, activations).

The softmax family, Embedding and LayerNorm live in :mod:`.nlp`.

Every converter reproduces MXNet 1.9.1's *inference* semantics (``is_train=False``)
with plain opset-17 ONNX operators that both ONNX Runtime and TensorRT's ONNX
parser accept. Whatever cannot be reproduced exactly is refused by the op's
validator with the reason.

Reshapes never bake the batch dimension into a constant (they use ``0`` = copy),
so the exported graphs stay valid with a dynamic batch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from mx_trt.errors import ConversionError
from mx_trt.export.converters.common import (
    attr_float as _float,
    attr_int as _int,
    attr_str as _str,
    check_float as _check_float,
)
from mx_trt.export.converters.common import (
    check_layout as _check_layout,
    check_outputs as _check_outputs,
    dtype_of as _dtype,
)
from mx_trt.export.converters.common import (
    int64s as _int64s,
    norm_axis as _norm_axis,
    reshape as _reshape,
    scalar as _scalar,
)
from mx_trt.export.converters.common import spatial_attr as _spatial
from mx_trt.export.converters.registry import ConvContext, register
from mx_trt.export.spec import OpSpec

Shape = Tuple[int, ...]

# MXNet's SELU constants (src/operator/mshadow_op.h).
_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_LAMBDA = 1.0507009873554804934193349852946


# -- shared helpers ---------------------------------------------------------------------


def _channel_shape(c: int, axis: int, ndim: int) -> List[int]:
    """Shape that broadcasts a per-channel vector along ``axis`` (numpy right alignment)."""
    return [c] + [1] * (ndim - 1 - axis)


# -- Activation ------------------------------------------------------------------------

_ACT = {"relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh", "softrelu": "Softplus", "softsign": "Softsign"}


def _check_activation(spec: OpSpec) -> Optional[str]:
    act = spec.str_("act_type")
    if act not in _ACT:
        return f"act_type {act!r} is not one of {sorted(_ACT)}"
    return _check_float(spec)


@register("Activation", "_npx_activation", validator=_check_activation)
def _activation(ctx: ConvContext) -> None:
    ctx.emit(_ACT[str(ctx.spec.str_("act_type"))], ctx.inputs[:1], ctx.outputs)


# -- LeakyReLU -------------------------------------------------------------------------

_LEAKY_TYPES = ("leaky", "prelu", "rrelu", "elu", "selu", "gelu")


def _prelu_gamma_shape(gshape: Shape, dshape: Shape) -> Optional[Shape]:
    """MXNet's ``expand_shape``: gamma's dims go right-aligned onto data axes 0 and 1 only."""
    out = [1] * len(dshape)
    s = len(gshape) - 1
    for i in range(len(dshape) - 1, -1, -1):
        if s >= 0 and i <= 1 and (dshape[i] == gshape[s] or gshape[s] == 1):
            out[i] = gshape[s]
            s -= 1
    return tuple(out) if s == -1 else None


def _check_leaky(spec: OpSpec) -> Optional[str]:
    act = _str(spec, "act_type", "leaky")
    if act not in _LEAKY_TYPES:
        return f"act_type {act!r} is not one of {list(_LEAKY_TYPES)}"
    if act == "prelu":
        if len(spec.in_shapes) != 2:
            return "prelu needs a gamma input"
        if _prelu_gamma_shape(spec.in_shapes[1], spec.in_shapes[0]) is None:
            return f"prelu gamma of shape {spec.in_shapes[1]} does not broadcast to data {spec.in_shapes[0]}"
    return _check_float(spec)


@register("LeakyReLU", "_npx_leaky_relu", validator=_check_leaky)
def _leaky_relu(ctx: ConvContext) -> None:
    spec = ctx.spec
    act = _str(spec, "act_type", "leaky")
    x = ctx.inputs[0]
    out = ctx.outputs[0]
    if act == "leaky":
        ctx.emit("LeakyRelu", [x], [out], alpha=_float(spec, "slope", 0.25))
    elif act == "rrelu":
        # At inference MXNet uses the fixed slope (lower+upper)/2, computed in float32.
        lo = np.float32(_float(spec, "lower_bound", 0.125))
        hi = np.float32(_float(spec, "upper_bound", 0.334))
        slope = float((lo + hi) / np.float32(2.0))
        ctx.emit("LeakyRelu", [x], [out], alpha=slope)
        if len(ctx.outputs) > 1:
            # MXNet leaves the mask unwritten at inference; give the slope actually used.
            shape = ctx.emit("Shape", [x])[0]
            ctx.emit("Expand", [_scalar(ctx, slope, "slope"), shape], [ctx.outputs[1]])
    elif act == "elu":
        ctx.emit("Elu", [x], [out], alpha=_float(spec, "slope", 0.25))
    elif act == "selu":
        ctx.emit("Selu", [x], [out], alpha=_SELU_ALPHA, gamma=_SELU_LAMBDA)
    elif act == "gelu":
        # Opset 17 has no Gelu: 0.5 * x * (1 + erf(x / sqrt(2))), MXNet's erf form.
        t = ctx.emit("Div", [x, _scalar(ctx, math.sqrt(2.0), "sqrt2")])[0]
        t = ctx.emit("Erf", [t])[0]
        t = ctx.emit("Add", [t, _scalar(ctx, 1.0, "one")])[0]
        t = ctx.emit("Mul", [x, t])[0]
        ctx.emit("Mul", [t, _scalar(ctx, 0.5, "half")], [out])
    else:  # prelu
        gshape = _prelu_gamma_shape(spec.in_shapes[1], spec.in_shapes[0])
        assert gshape is not None
        g = ctx.inputs[1]
        gv = ctx.const_value(1)
        if tuple(spec.in_shapes[1]) != gshape:
            g = ctx.const(gv.reshape(gshape), "gamma") if gv is not None else _reshape(ctx, g, gshape)
        ctx.emit("PRelu", [x, g], [out])


# -- regression outputs (inference: the prediction itself) ------------------------------


def _check_regression(spec: OpSpec) -> Optional[str]:
    return _check_float(spec)


@register("LogisticRegressionOutput", validator=_check_regression)
def _logistic_regression_output(ctx: ConvContext) -> None:
    ctx.emit("Sigmoid", ctx.inputs[:1], ctx.outputs)


@register("LinearRegressionOutput", "MAERegressionOutput", validator=_check_regression)
def _linear_regression_output(ctx: ConvContext) -> None:
    ctx.emit("Identity", ctx.inputs[:1], ctx.outputs)


# -- Dropout / Flatten / Concat / Pad / clip ---------------------------------------------


def _check_dropout(spec: OpSpec) -> Optional[str]:
    if _str(spec, "mode", "training") == "always" and _float(spec, "p", 0.5) > 0:
        return "mode 'always' drops randomly at inference too, which cannot be reproduced"
    return _check_outputs(spec, 1)


@register("Dropout", "_npx_dropout", validator=_check_dropout)
def _dropout(ctx: ConvContext) -> None:
    ctx.emit("Identity", ctx.inputs[:1], ctx.outputs[:1])


@register("Flatten", "flatten", "_npx_batch_flatten")
def _flatten(ctx: ConvContext) -> None:
    # (d0, prod(rest)); a 1-D input becomes (d0, 1) in both MXNet and ONNX.
    ctx.emit("Flatten", ctx.inputs[:1], ctx.outputs, axis=1)


def _check_concat(spec: OpSpec) -> Optional[str]:
    ndim = len(spec.in_shapes[0])
    _norm_axis(_int(spec, "dim", 1), ndim, "dim")
    if len(set(spec.in_dtypes)) != 1:
        return f"inputs have different dtypes {sorted(set(spec.in_dtypes))}"
    return None


@register("Concat", "concat", validator=_check_concat)
def _concat(ctx: ConvContext) -> None:
    ndim = len(ctx.spec.in_shapes[0])
    ctx.emit("Concat", ctx.inputs, ctx.outputs, axis=_norm_axis(_int(ctx.spec, "dim", 1), ndim, "dim"))


def _check_pad(spec: OpSpec) -> Optional[str]:
    mode = _str(spec, "mode", "constant")
    if mode not in ("constant", "edge", "reflect"):
        return f"mode {mode!r} is not supported"
    shape = spec.in_shapes[0]
    pw = spec.ints("pad_width") or ()
    if len(pw) != 2 * len(shape):
        return f"pad_width has {len(pw)} values for a {len(shape)}-D input"
    if any(p < 0 for p in pw):
        return "negative pad_width is not supported"
    if mode == "reflect":
        for i, d in enumerate(shape):
            if pw[2 * i] >= d or pw[2 * i + 1] >= d:
                return f"reflect padding {pw[2 * i]},{pw[2 * i + 1]} on axis {i} must be smaller than its size {d}"
    return _check_float(spec)


@register("Pad", "pad", validator=_check_pad)
def _pad(ctx: ConvContext) -> None:
    spec = ctx.spec
    pw = spec.ints("pad_width") or ()
    mode = _str(spec, "mode", "constant")
    pads = list(pw[0::2]) + list(pw[1::2])
    ins = [ctx.inputs[0], _int64s(ctx, pads, "pads")]
    if mode == "constant":
        ins.append(_scalar(ctx, _float(spec, "constant_value", 0.0), "value"))
    ctx.emit("Pad", ins, ctx.outputs, mode=mode)


def _check_clip(spec: OpSpec) -> Optional[str]:
    lo, hi = spec.float_("a_min"), spec.float_("a_max")
    if lo is None or hi is None:
        return "a_min and a_max are required"
    if lo > hi:
        return f"a_min={lo} > a_max={hi} is not supported"
    return _check_float(spec)


@register("clip", validator=_check_clip)
def _clip(ctx: ConvContext) -> None:
    spec = ctx.spec
    lo = _scalar(ctx, _float(spec, "a_min", 0.0), "min")  # both present: see the validator
    hi = _scalar(ctx, _float(spec, "a_max", 0.0), "max")
    ctx.emit("Clip", [ctx.inputs[0], lo, hi], ctx.outputs)


# -- Convolution / Deconvolution -------------------------------------------------------


@dataclass(frozen=True)
class _ConvGeom:
    kernel: Tuple[int, ...]
    stride: Tuple[int, ...]
    dilate: Tuple[int, ...]
    pad: Tuple[int, ...]
    group: int
    no_bias: bool


def _conv_geom(spec: OpSpec, no_bias_default: bool) -> _ConvGeom:
    kernel = spec.ints("kernel") or ()
    nsp = len(kernel)
    if nsp not in (1, 2, 3):
        raise ConversionError(f"kernel={kernel}: only 1-D, 2-D and 3-D are supported")
    if len(spec.in_shapes[0]) != nsp + 2:
        raise ConversionError(f"a {nsp}-D kernel needs a {nsp + 2}-D input, got {spec.in_shapes[0]}")
    return _ConvGeom(
        kernel=kernel,
        stride=_spatial(spec, "stride", nsp, 1),
        dilate=_spatial(spec, "dilate", nsp, 1),
        pad=_spatial(spec, "pad", nsp, 0),
        group=_int(spec, "num_group", 1) or 1,
        no_bias=spec.bool_("no_bias", no_bias_default),
    )


def _check_conv_common(spec: OpSpec, g: _ConvGeom) -> Optional[str]:
    r = _check_layout(spec, len(g.kernel)) or _check_float(spec) or _check_outputs(spec, 1)
    if r:
        return r
    want_inputs = 2 if g.no_bias else 3
    if len(spec.in_shapes) != want_inputs:
        return f"expected {want_inputs} inputs (no_bias={g.no_bias}), got {len(spec.in_shapes)}"
    if any(s < 1 for s in g.stride) or any(d < 1 for d in g.dilate) or any(p < 0 for p in g.pad):
        return f"invalid stride {g.stride}, dilate {g.dilate} or pad {g.pad}"
    return None


def _check_convolution(spec: OpSpec) -> Optional[str]:
    g = _conv_geom(spec, no_bias_default=False)
    r = _check_conv_common(spec, g)
    if r:
        return r
    x = spec.in_shapes[0][2:]
    want = tuple(
        (x[i] + 2 * g.pad[i] - (g.dilate[i] * (g.kernel[i] - 1) + 1)) // g.stride[i] + 1 for i in range(len(x))
    )
    if want != tuple(spec.out_shapes[0][2:]):
        return f"ONNX Conv would give spatial shape {want}, MXNet gives {spec.out_shapes[0][2:]}"
    return None


@register("Convolution", "_npx_convolution", validator=_check_convolution)
def _convolution(ctx: ConvContext) -> None:
    g = _conv_geom(ctx.spec, no_bias_default=False)
    ctx.emit(
        "Conv",
        ctx.inputs[: 2 if g.no_bias else 3],
        ctx.outputs,
        kernel_shape=list(g.kernel),
        strides=list(g.stride),
        dilations=list(g.dilate),
        pads=list(g.pad) * 2,
        group=g.group,
    )


def _deconv_pads(spec: OpSpec, g: _ConvGeom) -> Tuple[List[int], List[int], List[int], Tuple[int, ...]]:
    """(pads_begin, pads_end, output_padding, output spatial shape) as MXNet's InferPad decides."""
    x = spec.in_shapes[0][2:]
    target = spec.ints("target_shape") or ()
    adj = _spatial(spec, "adj", len(x), 0)
    use_target = any(t != 0 for t in target)
    begin, end, opad, out = [], [], [], []
    for i in range(len(x)):
        full = g.stride[i] * (x[i] - 1) + g.dilate[i] * (g.kernel[i] - 1) + 1
        if use_target:
            t = target[i] if i < len(target) else 0
            total = full - t
            if total < 0:
                raise ConversionError(f"target_shape {target} is larger than the full deconvolution {full}")
            a, p = total % 2, (total + 1) // 2
        else:
            a, p = adj[i], g.pad[i]
        out.append(full - 2 * p + a)
        # MXNet keeps [p, full - p + a): crop p at the front and p - a at the back, or
        # extend by a - p (zeros + bias) when adj exceeds pad.
        begin.append(p)
        end.append(max(p - a, 0))
        opad.append(max(a - p, 0))
    return begin, end, opad, tuple(out)


def _check_deconvolution(spec: OpSpec) -> Optional[str]:
    g = _conv_geom(spec, no_bias_default=True)
    r = _check_conv_common(spec, g)
    if r:
        return r
    target = spec.ints("target_shape") or ()
    if target and len(target) != len(g.kernel):
        return f"target_shape {target} does not match the {len(g.kernel)}-D kernel"
    _, _, opad, out = _deconv_pads(spec, g)
    if out != tuple(spec.out_shapes[0][2:]):
        return f"cannot reproduce MXNet's output shape {spec.out_shapes[0][2:]} (would give {out})"
    for i, o in enumerate(opad):
        if o >= max(g.stride[i], g.dilate[i]):
            return f"adj exceeds pad by {o} on axis {i}, which ONNX output_padding cannot express"
    return None


@register("Deconvolution", "_npx_deconvolution", validator=_check_deconvolution)
def _deconvolution(ctx: ConvContext) -> None:
    g = _conv_geom(ctx.spec, no_bias_default=True)
    begin, end, opad, _ = _deconv_pads(ctx.spec, g)
    attrs: Dict[str, Any] = dict(
        kernel_shape=list(g.kernel),
        strides=list(g.stride),
        dilations=list(g.dilate),
        pads=begin + end,
        group=g.group,
    )
    if any(opad):
        attrs["output_padding"] = opad
    ctx.emit("ConvTranspose", ctx.inputs[: 2 if g.no_bias else 3], ctx.outputs, **attrs)


# -- BatchNorm -------------------------------------------------------------------------


def _check_batchnorm(spec: OpSpec) -> Optional[str]:
    r = _check_float(spec)
    if r:
        return r
    ndim = len(spec.in_shapes[0])
    axis = _norm_axis(_int(spec, "axis", 1), ndim)
    c = spec.in_shapes[0][axis]
    for i in range(1, 5):
        if tuple(spec.in_shapes[i]) != (c,):
            return f"input {i} has shape {spec.in_shapes[i]}, expected ({c},)"
    n_out = 3 if spec.bool_("output_mean_var", False) else 1
    return _check_outputs(spec, n_out)


@register("BatchNorm", "_npx_batch_norm", validator=_check_batchnorm)
def _batchnorm(ctx: ConvContext) -> None:
    """Inference: (x - moving_mean) / sqrt(moving_var + eps) * gamma + beta.

    ``fix_gamma=True`` means gamma is 1 whatever its stored value. With
    ``output_mean_var=True`` MXNet's extra outputs at inference are the moving mean
    and 1/sqrt(moving_var + eps) (CPU; cuDNN leaves them unwritten).
    """
    spec = ctx.spec
    x, gamma, beta, mean, var = ctx.inputs[:5]
    ndim = len(spec.in_shapes[0])
    axis = _norm_axis(_int(spec, "axis", 1), ndim)
    c = spec.in_shapes[0][axis]
    eps = _float(spec, "eps", 1e-3)
    fix_gamma = spec.bool_("fix_gamma", True)
    dt = _dtype(spec)
    bshape = _channel_shape(c, axis, ndim)

    vals = [None if fix_gamma else ctx.const_value(1)] + [ctx.const_value(i) for i in (2, 3, 4)]
    if (fix_gamma or vals[0] is not None) and all(v is not None for v in vals[1:]):
        # All constant: fold into one Mul and one Add.
        g = np.ones(c) if fix_gamma else np.asarray(vals[0], np.float64)
        b, m, v = (np.asarray(a, np.float64) for a in vals[1:])
        invstd = 1.0 / np.sqrt(v + eps)
        scale = g * invstd
        shift = b - m * scale
        y = ctx.emit("Mul", [x, ctx.const(scale.reshape(bshape).astype(dt), "scale")])[0]
        ctx.emit("Add", [y, ctx.const(shift.reshape(bshape).astype(dt), "shift")], ctx.outputs[:1])
        if len(ctx.outputs) == 3:
            ctx.emit("Identity", [mean], [ctx.outputs[1]])
            ctx.emit("Identity", [ctx.const(invstd.astype(dt), "invstd")], [ctx.outputs[2]])
        return

    if fix_gamma:
        gamma = ctx.const(np.ones(c, dtype=dt), "ones")
    if axis == 1 and ndim >= 2:
        ctx.emit("BatchNormalization", [x, gamma, beta, mean, var], ctx.outputs[:1], epsilon=eps)
    else:
        def bc(t: str) -> str:
            return t if len(bshape) == 1 else _reshape(ctx, t, bshape)

        vr = ctx.emit("Add", [bc(var), _scalar(ctx, eps, "eps")])[0]
        inv = ctx.emit("Reciprocal", [ctx.emit("Sqrt", [vr])[0]])[0]
        scale = ctx.emit("Mul", [inv, bc(gamma)])[0]
        centered = ctx.emit("Sub", [x, bc(mean)])[0]
        y = ctx.emit("Mul", [centered, scale])[0]
        ctx.emit("Add", [y, bc(beta)], ctx.outputs[:1])
    if len(ctx.outputs) == 3:
        ctx.emit("Identity", [mean], [ctx.outputs[1]])
        vr = ctx.emit("Add", [var, _scalar(ctx, eps, "eps")])[0]
        ctx.emit("Reciprocal", [ctx.emit("Sqrt", [vr])[0]], [ctx.outputs[2]])


# -- FullyConnected --------------------------------------------------------------------


def _check_fully_connected(spec: OpSpec) -> Optional[str]:
    r = _check_float(spec) or _check_outputs(spec, 1)
    if r:
        return r
    no_bias = spec.bool_("no_bias", False)
    want = 2 if no_bias else 3
    if len(spec.in_shapes) != want:
        return f"expected {want} inputs (no_bias={no_bias}), got {len(spec.in_shapes)}"
    shape = spec.in_shapes[0]
    flatten = spec.bool_("flatten", True)
    k = int(np.prod(shape[1:])) if flatten else shape[-1]
    h = spec.int_("num_hidden")
    if tuple(spec.in_shapes[1]) != (h, k):
        return f"weight shape {spec.in_shapes[1]} is not (num_hidden={h}, {k})"
    return None


@register("FullyConnected", "_npx_fully_connected", validator=_check_fully_connected)
def _fully_connected(ctx: ConvContext) -> None:
    spec = ctx.spec
    x, w = ctx.inputs[0], ctx.inputs[1]
    bias = ctx.inputs[2:3] if not spec.bool_("no_bias", False) else []
    ndim = len(spec.in_shapes[0])
    if spec.bool_("flatten", True) or ndim == 2:
        if ndim != 2:
            x = ctx.emit("Flatten", [x], axis=1)[0]
        # transB on the stored (num_hidden, k) weight: no transposed copy of the initializer.
        ctx.emit("Gemm", [x, w] + bias, ctx.outputs, transB=1)
        return
    # flatten=False on N-D data: a MatMul over the last axis.
    wv = ctx.const_value(1)
    if wv is not None:
        wt = ctx.const(np.ascontiguousarray(wv.T), "weight_t")
    else:
        wt = ctx.emit("Transpose", [w], perm=[1, 0])[0]
    if bias:
        y = ctx.emit("MatMul", [x, wt])[0]
        ctx.emit("Add", [y, bias[0]], ctx.outputs)
    else:
        ctx.emit("MatMul", [x, wt], ctx.outputs)


# -- LRN / InstanceNorm / L2Normalization -----------------------------------------------


def _check_lrn(spec: OpSpec) -> Optional[str]:
    r = _check_float(spec) or _check_outputs(spec, 1)
    if r:
        return r
    if len(spec.in_shapes[0]) < 3:
        return f"LRN needs an input with at least 3 dimensions, got {spec.in_shapes[0]}"
    n = spec.int_("nsize")
    if n is None or n % 2 != 1:
        return f"nsize={n} must be odd"
    # TensorRT's LRN layer limits (window 1..15, beta 0.01..1e5, k 1e-5..1e10).
    if n > 15:
        return f"nsize={n} exceeds TensorRT's LRN window limit of 15"
    beta, k = _float(spec, "beta", 0.75), _float(spec, "knorm", 2.0)
    if not 0.01 <= beta <= 1e5:
        return f"beta={beta} is outside TensorRT's LRN range [0.01, 1e5]"
    if not 1e-5 <= k <= 1e10:
        return f"knorm={k} is outside TensorRT's LRN range [1e-5, 1e10]"
    return None


@register("LRN", validator=_check_lrn)
def _lrn(ctx: ConvContext) -> None:
    # Both MXNet and ONNX scale the square sum by alpha / nsize.
    spec = ctx.spec
    ctx.emit(
        "LRN", ctx.inputs[:1], ctx.outputs[:1],
        size=spec.int_("nsize"), alpha=_float(spec, "alpha", 1e-4), beta=_float(spec, "beta", 0.75),
        bias=_float(spec, "knorm", 2.0),
    )


def _check_instance_norm(spec: OpSpec) -> Optional[str]:
    if len(spec.in_shapes[0]) < 3:
        return f"InstanceNorm needs an input with at least 3 dimensions, got {spec.in_shapes[0]}"
    return _check_float(spec) or _check_outputs(spec, 1)


@register("InstanceNorm", validator=_check_instance_norm)
def _instance_norm(ctx: ConvContext) -> None:
    ctx.emit("InstanceNormalization", ctx.inputs[:3], ctx.outputs[:1], epsilon=_float(ctx.spec, "eps", 1e-3))


def _check_l2norm(spec: OpSpec) -> Optional[str]:
    mode = _str(spec, "mode", "instance")
    ndim = len(spec.in_shapes[0])
    if mode not in ("instance", "channel", "spatial"):
        return f"mode {mode!r} is not supported"
    if mode == "instance" and ndim < 2:
        return "mode 'instance' needs an input with at least 2 dimensions"
    if mode in ("channel", "spatial") and ndim < 3:
        return f"mode {mode!r} needs an input with at least 3 dimensions"
    return _check_float(spec) or _check_outputs(spec, 1)


@register("L2Normalization", validator=_check_l2norm)
def _l2_normalization(ctx: ConvContext) -> None:
    """x / sqrt(sum(x^2) + eps) -- eps inside the root, unlike ONNX LpNormalization."""
    spec = ctx.spec
    ndim = len(spec.in_shapes[0])
    mode = _str(spec, "mode", "instance")
    axes = {"instance": list(range(1, ndim)), "channel": [1], "spatial": list(range(2, ndim))}[mode]
    x = ctx.inputs[0]
    ss = ctx.emit("ReduceSumSquare", [x], axes=axes, keepdims=1)[0]
    norm = ctx.emit("Sqrt", [ctx.emit("Add", [ss, _scalar(ctx, _float(spec, "eps", 1e-10), "eps")])[0]])[0]
    ctx.emit("Div", [x, norm], ctx.outputs[:1])
