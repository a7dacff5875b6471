"""Small emission and attribute helpers shared by the converter modules."""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from ..errors import ConversionError
from .registry import ConvContext


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
