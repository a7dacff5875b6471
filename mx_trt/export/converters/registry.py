"""The converter registry: one entry per MXNet operator.

An entry couples a *validator* (pure: attributes, shapes and dtypes in, ``None``
or a human-readable reason out) with a *converter* that emits ONNX nodes. The
same table decides what is supported and how it converts, so the two never
drift apart.

Registering::

    @register("Activation", validator=_check_act_type)
    def _activation(ctx: ConvContext) -> None:
        ctx.emit("Relu", ctx.inputs[:1], ctx.outputs)

This module is a leaf of the package: it imports no converter. The package
``mx_trt.export.converters`` imports every converter module, so importing the package
(not only this module) is what fills the table; callers of :func:`lookup`,
:func:`check` and :func:`registered_ops` import them from ``mx_trt.export.converters``.
It imports numpy only; ONNX is imported by :mod:`mx_trt.export.subgraph` when a
subgraph is actually exported.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np

from mx_trt.errors import ConversionError
from mx_trt.export.spec import OpSpec

__all__ = ["FLOAT_DTYPES", "ConvContext", "Converter", "OpEntry", "Validator", "check", "lookup", "register", "registered_ops"]

logger = logging.getLogger(__name__)

Validator = Callable[[OpSpec], Optional[str]]


class ConvContext:
    """What a converter sees while emitting ONNX for one MXNet node.

    The exporter owns the ONNX graph; a converter only calls :meth:`emit`,
    :meth:`const` and :meth:`tmp`. Names are made unique per subgraph.

    Attributes:
        spec: The node's :class:`OpSpec`.
        inputs: ONNX tensor names of the node's inputs, in MXNet order.
        outputs: ONNX tensor names the converter must produce, one per visible
            output (hidden outputs such as BatchNorm's saved mean are not asked for).
        opset: The ONNX opset in use.
    """

    def __init__(
        self,
        spec: OpSpec,
        inputs: Sequence[str],
        outputs: Sequence[str],
        opset: int,
        add_node: Callable[[str, Sequence[str], Sequence[str], Dict[str, Any]], None],
        add_const: Callable[[np.ndarray, str], str],
        unique: Callable[[str], str],
        const_values: Mapping[int, np.ndarray],
    ) -> None:
        self.spec = spec
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.opset = opset
        self._add_node = add_node
        self._add_const = add_const
        self._unique = unique
        self._const_values = dict(const_values)

    @property
    def name(self) -> str:
        return self.spec.name

    def tmp(self, hint: str = "t") -> str:
        """A fresh tensor name derived from the node name."""
        return self._unique(f"{self.spec.name}__{hint}")

    def emit(
        self,
        op_type: str,
        inputs: Sequence[str],
        outputs: Optional[Sequence[str]] = None,
        **attrs: Any,
    ) -> List[str]:
        """Add one ONNX node; returns its output names.

        Args:
            op_type: ONNX operator type.
            inputs: Input tensor names (``""`` for an omitted optional input).
            outputs: Output names; default one fresh name.
            **attrs: ONNX attributes (ints, floats, strings, lists, numpy arrays
                for tensor attributes).
        """
        outs = list(outputs) if outputs is not None else [self.tmp(op_type.lower())]
        self._add_node(op_type, list(inputs), outs, attrs)
        return outs

    def const(self, value: Any, hint: str = "c", dtype: Optional[Any] = None) -> str:
        """Add an initializer holding ``value`` and return its name."""
        arr = np.asarray(value, dtype=dtype)
        return self._add_const(arr, self._unique(f"{self.spec.name}__{hint}"))

    def const_value(self, i: int) -> Optional[np.ndarray]:
        """The bind-time value of input ``i`` if it is a weight, else ``None``."""
        return self._const_values.get(i)


Converter = Callable[[ConvContext], None]


@dataclass
class OpEntry:
    op: str
    converter: Converter
    validators: List[Validator] = field(default_factory=list)


_REGISTRY: Dict[str, OpEntry] = {}


def register(op: str, *aliases: str, validator: Optional[Validator] = None) -> Callable[[Converter], Converter]:
    """Decorator: register ``fn`` as the converter of ``op`` (and its aliases).

    Raises:
        ValueError: the op already has a converter (one converter per op).
    """

    def deco(fn: Converter) -> Converter:
        for name in (op,) + aliases:
            if name in _REGISTRY:
                raise ValueError(f"converter for {name!r} registered twice")
            _REGISTRY[name] = OpEntry(name, fn, [validator] if validator else [])
        return fn

    return deco


def lookup(op: str) -> Optional[OpEntry]:
    """The entry of ``op``, or ``None`` when no converter is registered. O(1)."""
    return _REGISTRY.get(op)


def registered_ops() -> List[str]:
    """Every operator name with a converter (aliases included), sorted. O(n log n)."""
    return sorted(_REGISTRY)


FLOAT_DTYPES = ("float32", "float16")


def check(spec: OpSpec) -> Optional[str]:
    """Decide whether ``spec`` converts. Returns ``None`` or the reason it does not.

    Generic rules first (a converter exists, shapes are known), then the op's own
    validators (which check dtypes). The bind pass adds the engine-wide dtype rule. A validator that raises is reported as a reason.
    """
    entry = lookup(spec.op)
    if entry is None:
        return f"no converter for operator {spec.op}"
    for i, s in enumerate(spec.in_shapes):
        if not s or any(d <= 0 for d in s):
            return f"input {i} has an unknown shape {s}"
    for i, s in enumerate(spec.out_shapes):
        if not s or any(d <= 0 for d in s):
            return f"output {i} has an unknown or empty shape {s}"
    for v in entry.validators:
        try:
            reason = v(spec)
        except ConversionError as exc:
            return str(exc)
        except (ValueError, TypeError, KeyError) as exc:
            return f"invalid attributes: {exc}"
        if reason:
            return reason
    return None
