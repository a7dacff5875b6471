"""Converters for neural-network operators (convolution, pooling, normalisation, dense, activations, softmax)."""
from __future__ import annotations

from typing import Optional

from .registry import ConvContext, OpSpec, register

_ACT = {"relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh", "softrelu": "Softplus", "softsign": "Softsign"}


def _check_activation(spec: OpSpec) -> Optional[str]:
    act = spec.str_("act_type")
    if act not in _ACT:
        return f"act_type {act!r} is not one of {sorted(_ACT)}"
    return None


@register("Activation", validator=_check_activation)
def _activation(ctx: ConvContext) -> None:
    ctx.emit(_ACT[str(ctx.spec.str_("act_type"))], ctx.inputs[:1], ctx.outputs)
