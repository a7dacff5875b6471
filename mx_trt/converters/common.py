"""Small emission and attribute helpers shared by the converter modules."""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import numpy as np

from ..errors import ConversionError
from .registry import FLOAT_DTYPES, ConvContext, OpSpec


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
