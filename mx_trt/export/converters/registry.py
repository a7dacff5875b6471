"""The converter registry: one entry per MXNet operator.

An entry couples a *validator* (pure: attributes, shapes and dtypes in, ``None``
or a human-readable reason out) with a *converter* that emits ONNX nodes. The
same table decides what is supported and how it converts, so the two never
drift apart.

Registering::

    @register("Activation", validator=_check_act_type)
    def _activation(ctx: ConvContext) -> None:
        ctx.emit("Relu", ctx.inputs[:1], ctx.outputs)

Entries have a priority (built-ins 0) and a source. Several entries may exist for
one key; the active one has the highest priority, and of equal priorities the one
registered first (built-ins are registered at import, so a user converter replaces
a built-in only with a higher priority). A user ``Custom`` operator is keyed
``"Custom:<op_type>"`` (:func:`op_key`). User converters are added by
:mod:`mx_trt.export.converters.user`.

This module is a leaf of the package: it imports no converter. The package
``mx_trt.export.converters`` imports every converter module, so importing the package
(not only this module) is what fills the table; callers of :func:`lookup`,
:func:`check` and :func:`registered_ops` import them from ``mx_trt.export.converters``.
It imports numpy only; ONNX is imported by :mod:`mx_trt.export.subgraph` when a
subgraph is actually exported.
"""
from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from mx_trt.errors import ConversionError
from mx_trt.export.spec import OpSpec

__all__ = ["BUILT_IN", "FLOAT_DTYPES", "ConvContext", "Converter", "OpEntry", "Validator", "add_entry", "check", "entries",
           "lookup", "op_key", "register", "registered_ops", "remove_entries"]

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
        add_node: Callable[..., None],
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
        *,
        domain: str = "",
        **attrs: Any,
    ) -> List[str]:
        """Add one ONNX node; returns its output names.

        Args:
            op_type: ONNX operator type.
            inputs: Input tensor names (``""`` for an omitted optional input).
            outputs: Output names; default one fresh name.
            domain: The node's domain: ``""`` for standard ONNX, a plugin's own
                domain for a plugin node (the model then imports that domain).
            **attrs: ONNX attributes (ints, floats, strings, lists, numpy arrays
                for tensor attributes).
        """
        outs = list(outputs) if outputs is not None else [self.tmp(op_type.lower())]
        if domain:
            self._add_node(op_type, list(inputs), outs, attrs, domain)
        else:
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


BUILT_IN = "built-in"


@dataclass
class OpEntry:
    """One converter of one operator key.

    Attributes:
        op: The key (an MXNet operator name, or ``"Custom:<op_type>"``).
        converter: Emits the ONNX nodes.
        validators: Each returns ``None`` or a reason the node cannot convert.
        priority: The highest priority of a key is active (built-ins: 0).
        source: ``"built-in"`` or the module of a user converter.
        identity: ``module.qualname`` of a user converter (``""`` for built-ins).
        fingerprint: Digest of a user converter's identity, version and code; part of
            the plan-cache key of every subgraph using it (``""`` for built-ins).
        backends: Backends the converter is for (``None``: all).
        plugin: ``domain::op_type`` of a plugin's entry (:mod:`mx_trt.export.plugins`), else ``""``.
        seq: Registration order, breaking ties of priority (first wins).
    """

    op: str
    converter: Converter
    validators: List[Validator] = field(default_factory=list)
    priority: int = 0
    source: str = BUILT_IN
    identity: str = ""
    fingerprint: str = ""
    backends: Optional[Tuple[str, ...]] = None
    plugin: str = ""
    seq: int = 0

    @property
    def is_user(self) -> bool:
        return self.source != BUILT_IN

    @property
    def label(self) -> str:
        """How reasons name a user entry: ``user converter module.name`` or ``plugin domain::op_type``."""
        return f"plugin {self.plugin}" if self.plugin else f"user converter {self.identity}"


_REGISTRY: Dict[str, List[OpEntry]] = {}  # per key, active entry first
_SEQ = itertools.count()


def op_key(op: str, attrs: Optional[Mapping[str, Any]] = None) -> str:
    """The registry key of a node: its operator, or ``Custom:<op_type>`` for a ``Custom`` node."""
    if op == "Custom" and attrs is not None and attrs.get("op_type"):
        return f"Custom:{attrs['op_type']}"
    return op


def register(op: str, *aliases: str, validator: Optional[Validator] = None) -> Callable[[Converter], Converter]:
    """Decorator: register ``fn`` as the built-in converter of ``op`` (and its aliases).

    Raises:
        ValueError: the op already has a built-in converter (one converter per op).
    """

    def deco(fn: Converter) -> Converter:
        for name in (op,) + aliases:
            if any(not e.is_user for e in _REGISTRY.get(name, ())):
                raise ValueError(f"converter for {name!r} registered twice")
            add_entry(OpEntry(name, fn, [validator] if validator else []))
        return fn

    return deco


def add_entry(entry: OpEntry) -> bool:
    """Add ``entry`` under ``entry.op``; returns whether it is now the active one. O(k log k).

    A user entry with the identity of one already there (a module imported again)
    replaces it in place.
    """
    lst = _REGISTRY.setdefault(entry.op, [])
    if entry.is_user:
        lst[:] = [e for e in lst if e.identity != entry.identity]
    entry.seq = next(_SEQ)
    lst.append(entry)
    lst.sort(key=lambda e: (-e.priority, e.seq))
    return lst[0] is entry


def remove_entries(op: str, identity: Optional[str] = None) -> int:
    """Remove the user entries of key ``op`` (only the one of ``identity`` if given).

    Built-in entries are never removed. Returns how many were removed. O(k).
    """
    lst = _REGISTRY.get(op, [])
    keep = [e for e in lst if not e.is_user or (identity is not None and e.identity != identity)]
    removed = len(lst) - len(keep)
    if keep:
        _REGISTRY[op] = keep
    else:
        _REGISTRY.pop(op, None)
    return removed


def entries() -> Dict[str, List[OpEntry]]:
    """Every key and its entries, active first (a copy). O(n)."""
    return {k: list(v) for k, v in sorted(_REGISTRY.items())}


def lookup(op: str, attrs: Optional[Mapping[str, Any]] = None) -> Optional[OpEntry]:
    """The active entry of ``op`` (``Custom`` nodes by their ``op_type`` in ``attrs``),
    or ``None`` when no converter is registered. O(1)."""
    lst = _REGISTRY.get(op_key(op, attrs))
    return lst[0] if lst else None


def registered_ops() -> List[str]:
    """Every operator name with a converter (aliases included), sorted. O(n log n)."""
    return sorted(_REGISTRY)


FLOAT_DTYPES = ("float32", "float16")


def check(spec: OpSpec) -> Optional[str]:
    """Decide whether ``spec`` converts. Returns ``None`` or the reason it does not.

    Generic rules first (a converter exists, shapes are known), then the op's own
    validators (which check dtypes). The bind pass adds the engine-wide dtype rule. A validator that raises is
    reported as a reason (a user's is also logged, with its traceback).
    """
    entry = lookup(spec.op, spec.attrs)
    if entry is None:
        key = op_key(spec.op, spec.attrs)
        if key != spec.op:
            return f"no converter for custom operator {key[len('Custom:'):]} (add one with mx_trt.register_converter({key!r}))"
        return f"no converter for operator {spec.op}"
    for i, s in enumerate(spec.in_shapes):
        if not s or any(d <= 0 for d in s):
            return f"input {i} has an unknown shape {s}"
    for i, s in enumerate(spec.out_shapes):
        if not s or any(d <= 0 for d in s):
            return f"output {i} has an unknown or empty shape {s}"
    if entry.backends is not None and spec.backend and spec.backend not in entry.backends:
        if entry.plugin:
            return f"plugin {entry.plugin} has no {spec.backend} implementation (it has: {', '.join(entry.backends)})"
        return f"user converter {entry.identity} is for {', '.join(entry.backends)} only"
    for v in entry.validators:
        try:
            reason = v(spec)
        except ConversionError as exc:
            reason = str(exc)
        except Exception as exc:  # a user's validator may raise anything; it only refuses the node
            if entry.is_user:
                # A refusal, but not a silent one: the traceback says where the validator broke.
                logger.warning("%s: its validator raised %s on node %r; the node stays native", entry.label,
                               type(exc).__name__, spec.name, exc_info=True)
                reason = f"validator raised {type(exc).__name__}: {exc}"
            elif isinstance(exc, (ValueError, TypeError, KeyError)):
                reason = f"invalid attributes: {exc}"
            else:
                raise
        if reason:
            return f"{reason} ({entry.label})" if entry.is_user else reason
    return None
