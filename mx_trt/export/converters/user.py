"""Your own converters: :func:`register_converter`, the public face of the registry.

A user converter goes into the same table as the built-in ones
(:mod:`mx_trt.export.converters.registry`), so the partition asks it whether a
node is supported and the exporter calls it to emit ONNX. A Python ``CustomOp``
(``mx.sym.Custom(op_type="my_swish")``) is registered as ``"Custom:my_swish"``::

    import mx_trt

    @mx_trt.register_converter("Custom:my_swish", version="1")
    def swish(ctx):
        sig = ctx.emit("Sigmoid", [ctx.inputs[0]])[0]
        ctx.emit("Mul", [ctx.inputs[0], sig], ctx.outputs)

The converter receives a :class:`~mx_trt.export.converters.registry.ConvContext`:

- ``ctx.inputs`` / ``ctx.outputs``: ONNX tensor names, in MXNet order; the
  converter must produce every name of ``ctx.outputs``.
- ``ctx.spec``: an :class:`~mx_trt.export.spec.OpSpec` with ``attrs`` (strings
  as MXNet spells them; read them with ``spec.int_``, ``spec.float_``,
  ``spec.bool_``, ``spec.tuple_``), ``in_shapes``, ``in_dtypes``,
  ``out_shapes``, ``out_dtypes`` and ``backend``.
- ``ctx.emit(op_type, inputs, outputs=None, **attrs)`` adds one ONNX node and
  returns its output names (one fresh name by default).
- ``ctx.const(value, hint, dtype)`` adds an initializer and returns its name.
- ``ctx.tmp(hint)`` gives a fresh tensor name; ``ctx.opset`` is the opset in use.
- ``ctx.const_value(i)`` is the bind-time value of input ``i`` if it is a weight.

Rules:

- Priority: the entry with the highest priority is used; of equal priorities
  the one registered first. Built-ins have priority 0 and are registered when
  the package is imported, so overriding one takes ``priority >= 1``; of two user
  converters for one op the higher priority wins, and on a tie the first.
  Registering again the same function (same module and qualified name, e.g. a
  module imported again) replaces the earlier registration.
- A validator takes the ``OpSpec`` and returns ``None`` or a reason; the reason
  shows in ``mxtrt partition`` and in the report, followed by
  ``(user converter module.name)``.
- The plan-cache key of a subgraph holds the identity, version string and
  source code of every user converter it uses, so changing any of them rebuilds
  its engines.
"""
from __future__ import annotations

import functools
import hashlib
import inspect
import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterable, List, Mapping, Optional, Sequence, Tuple

from mx_trt.errors import ConversionError
from mx_trt.settings import mxnet_op_names
from mx_trt.export.converters.registry import (
    BUILT_IN, ConvContext, Converter, OpEntry, Validator, add_entry, entries, lookup, remove_entries,
)

__all__ = ["BACKENDS", "ConverterInfo", "add_user_converter", "check_registration", "code_digest", "identity_of", "list_converters", "register_converter",
           "unregister_converter", "user_fingerprint"]

logger = logging.getLogger(__name__)


def identity_of(fn: Callable[..., Any]) -> str:
    """``module.qualname`` of a function: what tells two registrations apart."""
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def code_digest(fn: Optional[Callable[..., Any]]) -> str:
    """sha256 of ``fn``'s source, or of its bytecode and constants when the source is not available."""
    if fn is None:
        return ""
    try:
        text = inspect.getsource(fn).encode()
    except (OSError, TypeError):
        code = getattr(fn, "__code__", None)
        text = (code.co_code + repr(code.co_consts).encode()) if code is not None else repr(fn).encode()
    return hashlib.sha256(text).hexdigest()


def register_converter(
    op: str,
    validator: Optional[Validator] = None,
    priority: int = 0,
    version: str = "",
    backends: Optional[Sequence[str]] = None,
) -> Callable[[Converter], Converter]:
    """Decorator: register a function emitting ONNX for the MXNet operator ``op``.

    Args:
        op: An MXNet operator name (``"Activation"``), or ``"Custom:<op_type>"``
            for a Python ``CustomOp`` registered as ``op_type``.
        validator: Returns ``None`` or the reason a node cannot convert.
        priority: See the module's rules; built-ins have 0.
        version: Your version string; changing it rebuilds the engines using it.
        backends: Backends the converter is for (``onnxruntime``, ``tensorrt``,
            ``tensorrt_rtx``); default all.

    Returns:
        The decorator; it returns the function unchanged.

    Raises:
        ValueError: at registration, not at the first bind: ``op`` is empty, ``"Custom:"``
            without an op_type, or an operator MXNet does not have; a backend not in
            :data:`BACKENDS`; a priority that is not an integer; a validator that is not callable.
    """
    chosen = check_registration("register_converter", op, priority, backends, validator)

    def deco(fn: Converter) -> Converter:
        if not callable(fn):
            raise ValueError(f"register_converter({op!r}) decorates a function, got {type(fn).__name__}")
        add_user_converter(op, fn, validator, priority, version, chosen)
        return fn

    return deco


#: The backends a user converter or plugin may name.
BACKENDS = ("onnxruntime", "tensorrt", "tensorrt_rtx")


def check_registration(what: str, op: Any, priority: Any, backends: Optional[Sequence[str]],
                       validator: Any) -> Optional[Tuple[str, ...]]:
    """Check what :func:`register_converter` and ``register_plugin`` are given; returns the backends as a tuple.

    Raises:
        ValueError: naming the argument and what it may be.
    """
    if not isinstance(op, str) or not op or op == "Custom:":
        raise ValueError(f"{what}: bad operator name {op!r} (use 'Name' or 'Custom:op_type')")
    if not op.startswith("Custom:"):
        known = mxnet_op_names()
        if known and op not in known:
            raise ValueError(f"{what}: MXNet has no operator {op!r} (a Python CustomOp registered as 'name' is "
                             "'Custom:name')")
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ValueError(f"{what}({op!r}): priority must be an integer (built-ins have 0), got {priority!r}")
    if validator is not None and not callable(validator):
        raise ValueError(f"{what}({op!r}): validator must be a function or None, got {type(validator).__name__}")
    if backends is None:
        return None
    names = (backends,) if isinstance(backends, str) else tuple(backends)
    bad = [b for b in names if b not in BACKENDS]
    if bad or not names:
        raise ValueError(f"{what}({op!r}): backends {list(names)!r}: each must be one of {', '.join(BACKENDS)}")
    return names


def add_user_converter(
    op: str,
    fn: Converter,
    validator: Optional[Validator],
    priority: int,
    version: str,
    backends: Optional[Sequence[str]],
    plugin: str = "",
) -> OpEntry:
    """Put ``fn`` into the registry as a user entry (what :func:`register_converter` and plugins share).

    Returns:
        The entry (active or not; a warning says when another comes first).
    """
    ident = identity_of(fn)
    h = hashlib.sha256("\0".join([ident, str(version), code_digest(fn), code_digest(validator)]).encode())

    @functools.wraps(fn)
    def run(ctx: ConvContext) -> None:
        try:
            fn(ctx)
        except ConversionError:
            raise
        except Exception as exc:  # a user's converter may raise anything; it costs the engine, typed
            raise ConversionError(f"user converter {ident} failed on {ctx.name!r}: {type(exc).__name__}: {exc}") from exc

    entry = OpEntry(op, run, [validator] if validator else [], priority=priority, source=getattr(fn, "__module__", "?"),
                    identity=ident, fingerprint=h.hexdigest(), backends=tuple(backends) if backends else None,
                    plugin=plugin)
    if add_entry(entry):
        logger.info("user converter %s registered for %s (priority %d)", ident, op, priority)
    else:
        active = lookup(op)
        logger.warning("user converter %s for %s (priority %d) is not used: %s (priority %d) comes first",
                       ident, op, priority, active.identity or BUILT_IN if active else "?", active.priority if active else 0)
    return entry


def unregister_converter(op: str, fn: Optional[Callable[..., Any]] = None) -> int:
    """Remove the user converters of ``op`` (only ``fn`` if given); a built-in becomes active again.

    Returns:
        How many were removed (built-ins are never removed).
    """
    return remove_entries(op, identity_of(fn) if fn is not None else None)


def user_fingerprint(nodes: Iterable[Tuple[str, Mapping[str, Any]]]) -> str:
    """Digest of the active user converters that ``(op, attrs)`` nodes use; ``""`` if none. O(n)."""
    prints = set()
    for op, attrs in nodes:
        entry = lookup(op, attrs)
        if entry is not None and entry.is_user:
            prints.add(f"{entry.op}={entry.fingerprint}")
    if not prints:
        return ""
    return hashlib.sha256("\n".join(sorted(prints)).encode()).hexdigest()


@dataclass(frozen=True)
class ConverterInfo:
    """One line of ``mxtrt partition --list-converters``."""

    op: str
    source: str
    backends: str
    priority: int
    active: bool


def list_converters() -> List[ConverterInfo]:
    """Every registered entry, by key, the active one first. O(n)."""
    out: List[ConverterInfo] = []
    for key, lst in entries().items():
        for i, e in enumerate(lst):
            source = (f"plugin: {e.plugin}" if e.plugin else f"user: {e.identity}") if e.is_user else BUILT_IN
            out.append(ConverterInfo(key, source, ",".join(e.backends) if e.backends else "all", e.priority, i == 0))
    return out
