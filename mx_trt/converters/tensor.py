"""Converters for tensor operators (elementwise, broadcast, scalar, reshape family, slicing, reductions)."""
from __future__ import annotations

from .registry import ConvContext, register


@register("elemwise_add", "_plus", "_Plus")
def _elemwise_add(ctx: ConvContext) -> None:
    ctx.emit("Add", ctx.inputs[:2], ctx.outputs)
