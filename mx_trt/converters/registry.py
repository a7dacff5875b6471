"""The converter registry: one entry per MXNet operator.

An entry couples a *validator* (pure: attributes, shapes and dtypes in, ``None``
or a human-readable reason out) with a *converter* that emits ONNX nodes. The
same table decides what is supported and how it converts, so the two never
drift apart.

Registering::

    @register("Activation", validator=_check_act_type)
    def _activation(ctx: ConvContext) -> None:
        ctx.emit("Relu", ctx.inputs[:1], ctx.outputs)

This module imports numpy only; ONNX is imported by :mod:`mx_trt.onnx_export`
when a subgraph is actually exported.
"""
from __future__ import annotations

import ast
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..errors import ConversionError

logger = logging.getLogger(__name__)

Shape = Tuple[int, ...]


@dataclass(frozen=True)
class OpSpec:
    """Everything a validator may look at, known at bind time.

    Attributes:
        name: MXNet node name.
        op: MXNet operator name.
        attrs: Attributes as MXNet spells them (strings).
        in_shapes / in_dtypes: Per input, from MXNet's own shape/type inference.
        out_shapes / out_dtypes: Per (visible) output.
        const_inputs: Indices of inputs whose values are known at bind time
            (weights from ``shared_buffer``); converters may fold them.
        backend: Name of the backend the engine is for (``onnxruntime``,
            ``tensorrt``, ``tensorrt_rtx``), or ``""`` when unknown. A validator
            uses it only for a limit of one backend (TensorRT's TopK k), so that
            the others are not held to it; the export itself never differs.
    """

    name: str
    op: str
    attrs: Mapping[str, str]
    in_shapes: Tuple[Shape, ...]
    in_dtypes: Tuple[str, ...]
    out_shapes: Tuple[Shape, ...]
    out_dtypes: Tuple[str, ...]
    const_inputs: frozenset = frozenset()
    backend: str = ""

    @property
    def for_tensorrt(self) -> bool:
        """Whether the engine is built by TensorRT or TensorRT-RTX."""
        return self.backend.startswith("tensorrt")

    # -- attribute parsing, MXNet style -------------------------------------------------
    def has(self, key: str) -> bool:
        return key in self.attrs

    def str_(self, key: str, default: Optional[str] = None) -> Optional[str]:
        v = self.attrs.get(key)
        return default if v is None else str(v)

    def int_(self, key: str, default: Optional[int] = None) -> Optional[int]:
        v = self.attrs.get(key)
        if v is None or v == "None":
            return default
        return int(float(v)) if isinstance(v, str) and "." in v else int(v)

    def float_(self, key: str, default: Optional[float] = None) -> Optional[float]:
        v = self.attrs.get(key)
        if v is None or v == "None":
            return default
        return float(v)

    def bool_(self, key: str, default: bool = False) -> bool:
        v = self.attrs.get(key)
        if v is None:
            return default
        s = str(v).strip().lower()
        if s in ("true", "1"):
            return True
        if s in ("false", "0"):
            return False
        raise ConversionError(f"{self.op} {self.name!r}: attribute {key}={v!r} is not a boolean")

    def tuple_(self, key: str, default: Optional[Tuple[Any, ...]] = None) -> Optional[Tuple[Any, ...]]:
        """Parse ``"(1, 2)"``, ``"[1,2]"``, ``"3"``, ``"None"`` or ``"(None, 2)"``."""
        v = self.attrs.get(key)
        if v is None:
            return default
        return parse_tuple(v)

    def ints(self, key: str, default: Optional[Tuple[int, ...]] = None) -> Optional[Tuple[int, ...]]:
        t = self.tuple_(key, None)
        if t is None:
            return default
        return tuple(int(x) for x in t)


def parse_tuple(v: str) -> Optional[Tuple[Any, ...]]:
    """Parse an MXNet tuple attribute. ``"None"`` gives ``None``; a scalar gives a 1-tuple."""
    s = str(v).strip()
    if s in ("None", ""):
        return None if s == "None" else ()
    try:
        val = ast.literal_eval(s)
    except (ValueError, SyntaxError) as exc:
        raise ConversionError(f"cannot parse tuple attribute {v!r}") from exc
    if isinstance(val, (list, tuple)):
        return tuple(val)
    return (val,)


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
    _ensure_loaded()
    return _REGISTRY.get(op)


def registered_ops() -> List[str]:
    _ensure_loaded()
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


_LOADED = False


def _ensure_loaded() -> None:
    """Import the converter modules once (they register themselves)."""
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    from . import load_all  # noqa: F401  (import registers)

    load_all()
