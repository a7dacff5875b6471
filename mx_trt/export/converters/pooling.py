"""Converters for pooling and resampling operators: ``Pooling`` (1-D to 3-D),
``_contrib_AdaptiveAvgPooling2D``, ``UpSampling`` and ``_contrib_BilinearResize2D``.

Every converter reproduces MXNet 1.9.1's inference output with plain opset-17 ONNX
operators that ONNX Runtime and TensorRT's ONNX parser both accept; what cannot be
reproduced exactly is refused by the op's validator with the reason.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from mx_trt.errors import ConversionError
from mx_trt.export.converters.common import (
    attr_int,
    attr_str,
    check_float,
    check_layout,
    check_outputs,
    dtype_of,
    int64s,
    scalar,
    spatial_attr,
)
from mx_trt.export.converters.registry import ConvContext, register
from mx_trt.export.spec import OpSpec

logger = logging.getLogger(__name__)


# -- Pooling ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _PoolPlan:
    pool_type: str
    p: int
    global_pool: bool
    include_pad: bool
    kernel: Tuple[int, ...] = ()
    stride: Tuple[int, ...] = ()
    pad: Tuple[int, ...] = ()
    extra: Tuple[int, ...] = ()  # windows reaching past the padded input (ceil mode)


def _pool_plan(spec: OpSpec) -> _PoolPlan:
    """Decode the attributes; raises ConversionError with the reason when not reproducible."""
    # The attributes first: they decide without shapes (the placeholder partition of get_backend_symbol asks).
    pool_type = attr_str(spec, "pool_type", "max")
    if pool_type not in ("max", "avg", "sum", "lp"):
        raise ConversionError(f"pool_type {pool_type!r} is not supported")
    p = 1
    if pool_type == "lp":
        p = attr_int(spec, "p_value", 0) or 0
        if p not in (1, 2, 3):
            raise ConversionError(f"lp pooling with p_value={spec.str_('p_value')} is not supported (1, 2 or 3)")
    shape = spec.in_shapes[0]
    if len(shape) not in (3, 4, 5):
        raise ConversionError(f"input must be 3-D, 4-D or 5-D, got {shape}")
    nsp = len(shape) - 2
    reason = check_layout(spec, nsp)
    if reason:
        raise ConversionError(reason)
    include_pad = spec.bool_("count_include_pad", True) if spec.str_("count_include_pad") != "None" else True
    if spec.bool_("global_pool", False):
        return _PoolPlan(pool_type, p, True, include_pad)
    conv = attr_str(spec, "pooling_convention", "valid")
    if conv not in ("valid", "full"):
        raise ConversionError(f"pooling_convention {conv!r} is not supported")
    kernel = spec.ints("kernel") or ()
    if len(kernel) != nsp:
        raise ConversionError(f"kernel={kernel} does not match the {nsp}-D input")
    stride = spatial_attr(spec, "stride", nsp, 1)
    pad = spatial_attr(spec, "pad", nsp, 0)
    out = spec.out_shapes[0][2:]
    extra = []
    for i in range(nsp):
        x, k, s, pd, o = shape[2 + i], kernel[i], stride[i], pad[i], out[i]
        span = x + 2 * pd - k
        want = 1 + (span // s if conv == "valid" else int(math.ceil(span / s)))
        if o != want:
            raise ConversionError(f"output size {o} on spatial axis {i} differs from the expected {want}")
        extra.append(max(0, (o - 1) * s + k - (x + 2 * pd)))
        if pd >= k and pool_type in ("max", "avg"):
            # oneDNN (MXNet's CPU kernel for max/avg) refuses this; only sum/lp run it.
            raise ConversionError(
                f"pad {pd} >= kernel {k} on spatial axis {i} is not supported for {pool_type} pooling"
            )
        if (o - 1) * s - pd >= x and (pool_type == "max" or (pool_type == "avg" and not include_pad)):
            raise ConversionError(
                f"the last pooling window on spatial axis {i} covers only padding (kernel {k}, pad {pd}, "
                f"stride {s}, input {x}); MXNet outputs a placeholder there"
            )
    return _PoolPlan(pool_type, p, False, include_pad, kernel, stride, pad, tuple(extra))


def _check_pooling(spec: OpSpec) -> Optional[str]:
    r = check_float(spec) or check_outputs(spec, 1)
    if r:
        return r
    _pool_plan(spec)
    return None


def _pow_p(ctx: ConvContext, x: str, p: int) -> str:
    y = x
    for _ in range(p - 1):
        y = ctx.emit("Mul", [y, x])[0]
    return y


def _root_p(ctx: ConvContext, x: str, p: int, out: Optional[str]) -> str:
    outs = [out] if out is not None else None
    if p == 1:
        return ctx.emit("Identity", [x], outs)[0]
    if p == 2:
        return ctx.emit("Sqrt", [x], outs)[0]
    # Signed cube root (MXNet's cbrt of a possibly negative sum of cubes).
    a = ctx.emit("Abs", [x])[0]
    r = ctx.emit("Pow", [a, scalar(ctx, 1.0 / 3.0, "third")])[0]
    sgn = ctx.emit("Sign", [x])[0]
    return ctx.emit("Mul", [sgn, r], outs)[0]


@register("Pooling", "_npx_pooling", validator=_check_pooling)
def _pooling(ctx: ConvContext) -> None:
    spec = ctx.spec
    plan = _pool_plan(spec)
    x = ctx.inputs[0]
    out = ctx.outputs[0]
    ndim = len(spec.in_shapes[0])
    if plan.global_pool:
        axes = list(range(2, ndim))
        if plan.pool_type == "max":
            ctx.emit("GlobalMaxPool", [x], [out])
        elif plan.pool_type == "avg":
            ctx.emit("GlobalAveragePool", [x], [out])
        else:
            s = ctx.emit("ReduceSum", [_pow_p(ctx, x, plan.p), int64s(ctx, axes, "axes")], keepdims=1)[0]
            _root_p(ctx, s, plan.p, out)
        return

    kernel, stride, pad, extra = plan.kernel, plan.stride, plan.pad, plan.extra
    in_spatial = tuple(spec.in_shapes[0][2:])
    out_spatial = tuple(spec.out_shapes[0][2:])
    lift = len(kernel) == 1
    if lift:
        # TensorRT pools 2-D/3-D only: run 1-D as (N, C, 1, W).
        x = ctx.emit("Unsqueeze", [x, int64s(ctx, [2], "axes")])[0]
        kernel, stride, pad, extra = (1,) + kernel, (1,) + stride, (0,) + pad, (0,) + extra
        in_spatial, out_spatial = (1,) + in_spatial, (1,) + out_spatial
    nsp = len(kernel)
    y_out = [out] if not lift else None
    end_pads = [p + e for p, e in zip(pad, extra)]
    common: Dict[str, Any] = dict(kernel_shape=list(kernel), strides=list(stride))

    # ceil_mode is never used: the ceil-mode windows are made explicit with end padding,
    # so ONNX Runtime and TensorRT cannot disagree about the last window.
    if plan.pool_type == "max":
        # ONNX ignores padded cells for max, like MXNet's clipped windows.
        y = ctx.emit("MaxPool", [x], y_out, pads=list(pad) + end_pads, **common)[0]
    elif plan.pool_type == "avg" and not plan.include_pad:
        # Divisor = real cells only, in MXNet and with ONNX count_include_pad=0.
        y = ctx.emit("AveragePool", [x], y_out, pads=list(pad) + end_pads, count_include_pad=0, **common)[0]
    elif plan.pool_type == "avg" and not any(extra) and all(p < k for p, k in zip(pad, kernel)):
        # Every window lies inside the padded input: the divisor is the kernel size.
        y = ctx.emit("AveragePool", [x], y_out, pads=list(pad) * 2, count_include_pad=1, **common)[0]
    else:
        # Window sums as a depthwise convolution with a ones kernel over the zero-padded
        # input: unlike AveragePool it has no divisor rule to get wrong, and no
        # Pad+AveragePool pair that a graph optimizer could fuse incorrectly (ONNX Runtime
        # 1.19 fuses Pad into AveragePool even when count_include_pad=0).
        c = spec.in_shapes[0][1]
        ones = ctx.const(np.ones((c, 1) + tuple(kernel), dtype=dtype_of(spec)), "ones")
        v = x if plan.pool_type == "avg" else _pow_p(ctx, x, plan.p)
        sums = ctx.emit("Conv", [v, ones], group=c, pads=list(pad) + end_pads, **common)[0]
        if plan.pool_type == "avg":
            # MXNet divides by the window clipped to the padded extent [-pad, size + pad).
            div = np.ones(out_spatial, dtype=np.float64)
            for i in range(nsp):
                starts = np.arange(out_spatial[i]) * stride[i] - pad[i]
                sizes = np.minimum(starts + kernel[i], in_spatial[i] + pad[i]) - starts
                div = div * sizes.reshape([-1 if j == i else 1 for j in range(nsp)])
            inv = ctx.const((1.0 / div).reshape((1, 1) + out_spatial).astype(dtype_of(spec)), "inv_count")
            y = ctx.emit("Mul", [sums, inv], y_out)[0]
        else:
            y = _root_p(ctx, sums, plan.p, out if not lift else None)
    if lift:
        ctx.emit("Squeeze", [y, int64s(ctx, [2], "axes")], [out])


# -- UpSampling ------------------------------------------------------------------------


def _check_upsampling(spec: OpSpec) -> Optional[str]:
    r = check_float(spec) or check_outputs(spec, 1)
    if r:
        return r
    st = spec.str_("sample_type")
    scale = attr_int(spec, "scale", 1)
    out = spec.out_shapes[0]
    if st == "nearest":
        for i, s in enumerate(spec.in_shapes):
            if len(s) != 4:
                return f"input {i} must be 4-D, got {s}"
            if out[2] % s[2] or out[3] % s[3] or out[2] // s[2] != out[3] // s[3]:
                return f"input {i} of shape {s} is not upsampled by one integer factor to {out}"
        mode = attr_str(spec, "multi_input_mode", "concat")
        if mode not in ("concat", "sum"):
            return f"multi_input_mode {mode!r} is not supported"
        return None
    if st == "bilinear":
        # MXNet runs bilinear upsampling as a grouped Deconvolution with the weight input.
        c = spec.in_shapes[0][1]
        if attr_int(spec, "num_filter", 0) != c:
            return f"bilinear needs num_filter equal to the channel count {c}"
        k = 2 * scale - scale % 2
        if len(spec.in_shapes) != 2 or tuple(spec.in_shapes[1]) != (c, 1, k, k):
            return f"bilinear needs a ({c}, 1, {k}, {k}) weight input"
        return None
    return f"sample_type {st!r} is not supported"


@register("UpSampling", validator=_check_upsampling)
def _upsampling(ctx: ConvContext) -> None:
    spec = ctx.spec
    out = spec.out_shapes[0]
    scale = attr_int(spec, "scale", 1)
    if spec.str_("sample_type") == "bilinear":
        k = 2 * scale - scale % 2
        p = int(math.ceil((scale - 1) / 2.0))
        ctx.emit(
            "ConvTranspose", ctx.inputs[:2], ctx.outputs,
            kernel_shape=[k, k], strides=[scale, scale], pads=[p] * 4, group=spec.in_shapes[0][1],
        )
        return
    ups = []
    for name, s in zip(ctx.inputs, spec.in_shapes):
        f = out[2] // s[2]
        if f == 1:
            ups.append(name)
            continue
        # asymmetric + floor: out[y] = in[y // f], MXNet's nearest neighbour.
        scales = ctx.const(np.asarray([1, 1, f, f], dtype=np.float32), "scales")
        ups.append(
            ctx.emit(
                "Resize", [name, "", scales], mode="nearest",
                coordinate_transformation_mode="asymmetric", nearest_mode="floor",
            )[0]
        )
    if len(ups) == 1:
        ctx.emit("Identity", ups, ctx.outputs)
    elif attr_str(spec, "multi_input_mode", "concat") == "sum":
        ctx.emit("Sum", ups, ctx.outputs)
    else:
        ctx.emit("Concat", ups, ctx.outputs, axis=1)




# -- _contrib_AdaptiveAvgPooling2D -----------------------------------------------------------


def adaptive_bins(in_size: int, out_size: int) -> List[Tuple[int, int]]:
    """MXNet's [start, end) input range of each output cell: floor(a*in/out) to
    ceil((a+1)*in/out), the quotients taken in float32 as its kernel does."""
    f = np.float32
    return [(int(np.floor(f(a * in_size) / f(out_size))), int(np.ceil(f((a + 1) * in_size) / f(out_size))))
            for a in range(out_size)]


def _check_adaptive_avg(spec: OpSpec) -> Optional[str]:
    r = check_float(spec) or check_outputs(spec, 1)
    if r:
        return r
    if len(spec.in_shapes[0]) != 4:
        return f"data must be 4-D (N, C, H, W), got {spec.in_shapes[0]}"
    return None


def _average_matrix(in_size: int, out_size: int) -> np.ndarray:
    """(out, in): row a averages MXNet's bin a."""
    m = np.zeros((out_size, in_size), dtype=np.float64)
    for a, (s, e) in enumerate(adaptive_bins(in_size, out_size)):
        m[a, s:e] = 1.0 / (e - s)
    return m


@register("_contrib_AdaptiveAvgPooling2D", validator=_check_adaptive_avg)
def _adaptive_avg_pooling(ctx: ConvContext) -> None:
    """Global average for a 1x1 output, AveragePool when every bin has the same size and
    stride, otherwise the separable form ``A_h @ x @ A_w^T`` with constant averaging matrices."""
    spec = ctx.spec
    _, _, h, w = spec.in_shapes[0]
    oh, ow = spec.out_shapes[0][2:]
    x = ctx.inputs[0]
    if (oh, ow) == (1, 1):
        ctx.emit("GlobalAveragePool", [x], ctx.outputs)
        return
    if h % oh == 0 and w % ow == 0:
        k = [h // oh, w // ow]
        ctx.emit("AveragePool", [x], ctx.outputs, kernel_shape=k, strides=k)
        return
    dt = dtype_of(spec)
    y = x
    if ow != w:
        y = ctx.emit("MatMul", [y, ctx.const(_average_matrix(w, ow).T.astype(dt), "avg_w")])[0]
    if oh != h:
        ctx.emit("MatMul", [ctx.const(_average_matrix(h, oh).astype(dt), "avg_h"), y], ctx.outputs)
    else:
        ctx.emit("Identity", [y], ctx.outputs)


# -- _contrib_BilinearResize2D ---------------------------------------------------------------

_RESIZE_MODES = ("size", "odd_scale", "like", "to_even_down", "to_even_up", "to_odd_down", "to_odd_up")


def _check_bilinear_resize(spec: OpSpec) -> Optional[str]:
    r = check_float(spec) or check_outputs(spec, 1)
    if r:
        return r
    mode = attr_str(spec, "mode", "size")
    if mode not in _RESIZE_MODES:
        return f"mode {mode!r} is not one of {list(_RESIZE_MODES)}"
    if len(spec.in_shapes[0]) != 4:
        return f"data must be 4-D (N, C, H, W), got {spec.in_shapes[0]}"
    return None


def bilinear_matrix(in_size: int, out_size: int, align_corners: bool) -> np.ndarray:
    """(out, in) interpolation weights of MXNet's CPU kernel along one axis (float32 maths)."""
    f = np.float32
    m = np.zeros((out_size, in_size), dtype=np.float32)
    if out_size > 1:
        scale = f(in_size - 1) / f(out_size - 1) if align_corners else f(in_size) / f(out_size)
    else:
        scale = f(0)
    for d in range(out_size):
        if align_corners:
            src = f(scale * f(d))
        else:
            src = f(scale * f(d + 0.5) - f(0.5))
            src = f(0) if src < 0 else src
        lo = int(src)
        step = 1 if lo < in_size - 1 else 0
        lam = f(src - f(lo))
        m[d, lo] += f(1) - lam
        m[d, lo + step] += lam
    return m


@register("_contrib_BilinearResize2D", validator=_check_bilinear_resize)
def _bilinear_resize(ctx: ConvContext) -> None:
    """MXNet's bilinear resize to the inferred output size (every mode only sets that size).

    ``align_corners=False`` is ONNX's ``half_pixel`` (sources below 0 clamp to the first
    pixel in both) and ``align_corners=True`` ONNX's ``align_corners``, for output sizes
    above 1. A length-1 output axis takes MXNet's source index 0, so it is sliced
    first; with ``align_corners=True`` the remaining axis then runs as a MatMul with
    MXNet's weights (ONNX's align_corners formula divides by zero on a length-1 axis).
    """
    spec = ctx.spec
    _, _, h, w = spec.in_shapes[0]
    oh, ow = spec.out_shapes[0][2:]
    align = spec.bool_("align_corners", True)
    x = ctx.inputs[0]
    out = ctx.outputs[0]
    if (h, w) == (oh, ow):
        ctx.emit("Identity", [x], [out])
        return
    for axis, (i, o) in ((2, (h, oh)), (3, (w, ow))):
        if o == 1 and i != 1:
            x = ctx.emit("Slice", [x, int64s(ctx, [0], "s"), int64s(ctx, [1], "e"), int64s(ctx, [axis], "ax")])[0]
    h, w = (1 if oh == 1 else h), (1 if ow == 1 else w)
    if (h, w) == (oh, ow):
        ctx.emit("Identity", [x], [out])
        return
    if align and 1 in (oh, ow):
        dt = dtype_of(spec)
        if ow != w:
            x = ctx.emit("MatMul", [x, ctx.const(bilinear_matrix(w, ow, True).T.astype(dt), "interp_w")])[0]
        if oh != h:
            x = ctx.emit("MatMul", [ctx.const(bilinear_matrix(h, oh, True).astype(dt), "interp_h"), x])[0]
        ctx.emit("Identity", [x], [out])
        return
    # Output size from the input's own batch and channels, so the batch may vary.
    nc = ctx.emit("Slice", [ctx.emit("Shape", [x])[0], int64s(ctx, [0], "s"), int64s(ctx, [2], "e")])[0]
    sizes = ctx.emit("Concat", [nc, int64s(ctx, [oh, ow], "hw")], axis=0)[0]
    ctx.emit(
        "Resize", [x, "", "", sizes], [out], mode="linear",
        coordinate_transformation_mode="align_corners" if align else "half_pixel",
    )
