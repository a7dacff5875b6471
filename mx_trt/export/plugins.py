"""Plugins: your own operator as one ONNX node in your own domain, implemented per backend.

When standard ONNX cannot express an operator, :func:`register_plugin` makes
its converter emit a single node ``<domain>::<op_type>`` and names the code that
runs that node on each backend::

    import numpy as np
    import mx_trt

    def soft_threshold(x, lam):                      # numpy in, numpy out
        return np.sign(x) * np.maximum(np.abs(x) - lam, 0).astype(np.float32)

    mx_trt.register_plugin("Custom:soft_threshold", domain="my.ops", op_type="SoftThreshold",
                           attrs={"lam": float}, onnxruntime=soft_threshold,
                           tensorrt="/opt/my_ops/libsoft_threshold_plugin.so", version="1")

Implementations, one per backend name:

- ``onnxruntime``: a Python function (run by ``onnxruntime-extensions``; it gets
  numpy arrays and the attributes as keywords and returns one array per output),
  or the path of a compiled ONNX Runtime custom-op library registering the domain.
- ``tensorrt`` / ``tensorrt_rtx``: the path of a plugin library (loaded into that
  TensorRT's plugin registry), a :class:`HostFunction` (mx_trt makes a plugin
  that runs your numpy function on host copies of the tensors; correct, not
  fast), or a function ``register(trt_module)`` that
  registers the plugin creator, for example with ``tensorrt.plugin``
  (``@trtp.register("my.ops::SoftThreshold")`` and ``@trtp.impl``). It is called
  once per process, before the first parse or deserialization, so your module
  stays importable where TensorRT is absent. TensorRT's ONNX parser finds the
  creator by name ``op_type``, namespace ``domain`` and version ``plugin_version``
  (node attributes that the default converter writes).

A backend without an implementation keeps the node native and the engine splits
around it; the reason reads ``plugin my.ops::SoftThreshold has no onnxruntime
implementation``. The plugin's identity (domain, op type, version, the code of
its Python functions and the bytes of its libraries) is part of the plan-cache
key of every engine holding it, as for user converters.

This module is export-layer bookkeeping only: the backends
(:mod:`mx_trt.builder.backends.ort_plugins`, :mod:`mx_trt.builder.backends.tensorrt.plugins`)
read the table through :func:`plugin_for_node` and :func:`plugins`.
"""
from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple, Union

from mx_trt.errors import ConversionError, EngineBuildError
from mx_trt.export.converters.registry import ConvContext, Validator, remove_entries
from mx_trt.export.converters.user import BACKENDS, add_user_converter, check_registration, code_digest, identity_of
from mx_trt.export.shapes import shape_text
from mx_trt.export.spec import OpSpec

__all__ = ["BACKEND_NAMES", "DEFAULT_DOMAIN", "HostFunction", "Implementation", "Plugin", "library_digest",
           "hold_plugin", "model_plugins", "plugin_for_node", "plugins",
           "mark_ortx_made", "ortx_made", "ortx_signature", "register_plugin", "unregister_plugin"]

logger = logging.getLogger(__name__)

#: The backends a plugin may name an implementation for.
BACKEND_NAMES = BACKENDS
#: The domain of plugins that do not name one.
DEFAULT_DOMAIN = "mx_trt.user"
#: ONNX attribute types a plugin's ``attrs`` may name.
_ATTR_TYPES = (int, float, str)
#: Domains a plugin may not take: they hold standard or ONNX Runtime operators.
_RESERVED_DOMAINS = ("", "ai.onnx", "ai.onnx.ml", "com.microsoft", "com.microsoft.nchwc")
#: Tensor types a plugin's signature may hold (numpy names).
_DTYPES = ("float32", "float16", "float64", "int8", "uint8", "int32", "int64", "bool")

@dataclass(frozen=True)
class HostFunction:
    """A TensorRT implementation that runs a numpy function on the host, inside the engine.

    mx_trt makes the plugin (TensorRT's class-based ``IPluginV3``) around it: the
    inputs are copied to host memory, ``fn(*inputs, **attrs)`` runs, and its
    results are copied back. Every output has input 0's shape and its declared
    type. Correct first, not fast: each run waits for the engine's stream and
    copies both ways.
    """

    fn: Callable[..., Any]


#: A backend's implementation: a Python function, the path of a compiled library,
#: or (TensorRT backends) a :class:`HostFunction`.
Implementation = Union[Callable[..., Any], str, "os.PathLike[str]", HostFunction]


def library_digest(path: str) -> str:
    """sha256 of a library's bytes (a missing file digests its path). O(file size)."""
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except OSError:
        h.update(f"missing:{path}".encode())
    return h.hexdigest()


@dataclass(frozen=True)
class Plugin:
    """One registered plugin.

    Attributes:
        op: The MXNet registry key (``"Custom:<op_type>"`` or an operator name).
        domain / op_type: The ONNX node's domain and type.
        version: Your version string (part of the plan-cache key).
        attrs: MXNet attribute name -> ``int``, ``float`` or ``str``: written on the
            node as ONNX attributes of that type (absent ones are left out).
        in_dtypes / out_dtypes: The implementation's tensor types, one per input /
            output; a node with other types stays native.
        python: Backend -> Python implementation (``onnxruntime``: the op's
            function; ``tensorrt*``: a registrar ``register(trt_module)``).
        libraries: Backend -> library path.
        hosted: Backend (``tensorrt*``) -> numpy function of a :class:`HostFunction`.
        identity: ``module.qualname`` of the converter entry in the registry.
        fingerprint: Digest of everything above that decides the engine's result.
        plugin_version: The TensorRT plugin creator's version (node attribute
            ``plugin_version``; ``tensorrt.plugin`` creators have ``"1"``).
    """

    op: str
    domain: str
    op_type: str
    version: str
    attrs: Mapping[str, type]
    in_dtypes: Tuple[str, ...]
    out_dtypes: Tuple[str, ...]
    python: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    libraries: Mapping[str, str] = field(default_factory=dict)
    hosted: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    identity: str = ""
    fingerprint: str = ""
    plugin_version: str = "1"

    @property
    def name(self) -> str:
        """``domain::op_type``, as TensorRT's Python plugin API and ``onnxruntime-extensions`` spell it."""
        return f"{self.domain}::{self.op_type}"

    @property
    def backends(self) -> Tuple[str, ...]:
        """The backends with an implementation, in :data:`BACKEND_NAMES` order."""
        return tuple(b for b in BACKEND_NAMES if b in self.python or b in self.libraries or b in self.hosted)

    def missing_reason(self, backend: str) -> Optional[str]:
        """Why ``backend`` cannot run this plugin, or ``None``."""
        if backend and backend not in self.backends:
            return f"plugin {self.name} has no {backend} implementation (it has: {', '.join(self.backends)})"
        python_ort = backend == "onnxruntime" and backend in self.python
        if python_ort and importlib.util.find_spec("onnxruntime_extensions") is None:
            return (f"plugin {self.name}: its onnxruntime implementation is Python, which needs onnxruntime-extensions "
                    "(pip install onnxruntime-extensions==0.12.0)")
        return None

    def node(self, ctx: ConvContext, inputs: Optional[Sequence[str]] = None,
             outputs: Optional[Sequence[str]] = None) -> List[str]:
        """Emit the plugin node (default: the MXNet node's inputs and outputs); returns its outputs.

        For a converter of your own that adds standard ONNX around the node.
        """
        return ctx.emit(self.op_type, list(ctx.inputs if inputs is None else inputs),
                        list(ctx.outputs if outputs is None else outputs), domain=self.domain, **_node_attrs(self, ctx.spec))


_LOCK = threading.Lock()
_PLUGINS: Dict[str, Plugin] = {}  # by op key
#: (domain, op_type) -> signature of the onnxruntime-extensions Python op made for it in this
#: process (by mx_trt.builder.backends.ort_plugins): such an op cannot be replaced by one of
#: another signature until the process ends.
_ORTX_SIGNATURES: Dict[Tuple[str, str], Tuple[Any, ...]] = {}
#: ``domain::op_type`` -> the live engines holding that plugin's implementation (their own reference).
_HOLDERS: Dict[str, "weakref.WeakSet[Any]"] = {}


def hold_plugin(p: Plugin, engine: Any) -> None:
    """Record that ``engine`` runs ``p`` with its own reference to it (for as long as the engine lives)."""
    with _LOCK:
        _HOLDERS.setdefault(p.name, weakref.WeakSet()).add(engine)


def _live_holders(name: str) -> int:
    holders = _HOLDERS.get(name)
    return len(holders) if holders is not None else 0


def _ortx_signature(p: Plugin) -> Tuple[Any, ...]:
    return (p.in_dtypes, p.out_dtypes, tuple(sorted((k, t.__name__) for k, t in p.attrs.items())))


def _node_attrs(p: Plugin, spec: OpSpec) -> Dict[str, Any]:
    """The ONNX attributes of the plugin node: the declared MXNet attributes, typed, and TensorRT's lookup keys."""
    out: Dict[str, Any] = {}
    for key, typ in p.attrs.items():
        if key in spec.attrs:
            raw = spec.attrs[key]
            try:
                out[key] = int(float(raw)) if typ is int else float(raw) if typ is float else str(raw)
            except ValueError as exc:
                raise ConversionError(f"plugin {p.name}: attribute {key}={raw!r} is not a {typ.__name__}") from exc
    out["plugin_namespace"] = p.domain
    out["plugin_version"] = p.plugin_version
    return out


def register_plugin(
    op: str,
    domain: str = DEFAULT_DOMAIN,
    op_type: Optional[str] = None,
    *,
    onnxruntime: Optional[Implementation] = None,
    tensorrt: Optional[Implementation] = None,
    tensorrt_rtx: Optional[Implementation] = None,
    attrs: Optional[Mapping[str, type]] = None,
    in_dtypes: Sequence[str] = ("float32",),
    out_dtypes: Sequence[str] = ("float32",),
    converter: Optional[Callable[[ConvContext, "Plugin"], None]] = None,
    validator: Optional[Validator] = None,
    priority: int = 0,
    version: str = "1",
    plugin_version: str = "1",
) -> Plugin:
    """Register a plugin for the MXNet operator ``op`` (see the module's docstring).

    Args:
        op: ``"Custom:<op_type>"`` for a Python ``CustomOp``, or an MXNet operator name.
        domain: The ONNX domain of the node (not a standard or ONNX Runtime one).
        op_type: The ONNX op type; default the part of ``op`` after ``Custom:``.
        onnxruntime / tensorrt / tensorrt_rtx: The implementation on that backend:
            a Python function or a library path (``tensorrt*``: a function
            ``register(trt_module)``). At least one.
        attrs: MXNet attributes to pass, by name, with their type (int, float, str).
        in_dtypes / out_dtypes: One tensor type per input / output.
        converter: ``converter(ctx, plugin)`` emits standard ONNX around the node
            and the node itself with ``plugin.node(ctx, inputs, outputs)``; default:
            the single node, inputs and outputs as MXNet has them.
        validator: Returns ``None`` or a reason; asked after the plugin's own checks.
        priority / version: As for :func:`~mx_trt.export.converters.user.register_converter`.
        plugin_version: The TensorRT plugin creator's version.

    Returns:
        The :class:`Plugin`.

    Raises:
        ValueError: a bad name (or an operator MXNet does not have), priority, validator,
            domain, attribute type, dtype or implementation, no
            implementation at all, or an ``onnxruntime-extensions`` op of this name
            already made in this process with another signature.
    """
    check_registration("register_plugin", op, priority, None, validator)
    op_type = op_type or (op[len("Custom:"):] if op.startswith("Custom:") else op)
    if not domain or domain in _RESERVED_DOMAINS or "::" in domain or "::" in op_type:
        raise ValueError(f"register_plugin({op!r}): domain {domain!r} / op_type {op_type!r} cannot name a plugin "
                         f"(a domain of your own, not one of {[d for d in _RESERVED_DOMAINS if d]}, and no '::')")
    attrs = dict(attrs or {})
    for key, typ in attrs.items():
        if typ not in _ATTR_TYPES or key in ("plugin_namespace", "plugin_version"):
            raise ValueError(f"register_plugin({op!r}): attribute {key!r} must map to int, float or str, got {typ!r}")
    for dt in tuple(in_dtypes) + tuple(out_dtypes):
        if dt not in _DTYPES:
            raise ValueError(f"register_plugin({op!r}): dtype {dt!r} is not one of {', '.join(_DTYPES)}")
    if not in_dtypes or not out_dtypes:
        raise ValueError(f"register_plugin({op!r}): a plugin takes at least one input and gives at least one output")
    python: Dict[str, Callable[..., Any]] = {}
    libraries: Dict[str, str] = {}
    hosted: Dict[str, Callable[..., Any]] = {}
    for backend, impl in (("onnxruntime", onnxruntime), ("tensorrt", tensorrt), ("tensorrt_rtx", tensorrt_rtx)):
        if impl is None:
            continue
        if isinstance(impl, HostFunction):
            if backend != "tensorrt" or not callable(impl.fn):
                # TensorRT-RTX 1.7's parser creates a Python plugin, then aborts the process adding it.
                raise ValueError(f"register_plugin({op!r}): HostFunction(function) is for the tensorrt backend "
                                 "(onnxruntime takes the function itself; TensorRT-RTX 1.7 cannot add Python "
                                 "plugins to its networks: give it a plugin library)")
            hosted[backend] = impl.fn
        elif isinstance(impl, (str, os.PathLike)):
            path = os.path.abspath(os.fspath(impl))
            if not os.path.isfile(path):
                raise ValueError(f"register_plugin({op!r}): the {backend} library {path} does not exist")
            libraries[backend] = path
        elif callable(impl):
            python[backend] = impl
        else:
            raise ValueError(f"register_plugin({op!r}): the {backend} implementation must be a function or a path, "
                             f"got {type(impl).__name__}")
    if not python and not libraries and not hosted:
        raise ValueError(f"register_plugin({op!r}): name an implementation for at least one of {', '.join(BACKEND_NAMES)}")

    parts = [domain, op_type, str(version), str(plugin_version), repr(sorted((k, t.__name__) for k, t in attrs.items())),
             ",".join(in_dtypes), ",".join(out_dtypes), code_digest(converter), code_digest(validator)]
    parts += [f"{b}:py:{identity_of(fn)}:{code_digest(fn)}" for b, fn in sorted(python.items())]
    parts += [f"{b}:lib:{path}:{library_digest(path)}" for b, path in sorted(libraries.items())]
    parts += [f"{b}:host:{identity_of(fn)}:{code_digest(fn)}" for b, fn in sorted(hosted.items())]
    if "onnxruntime" in python:
        parts.append(f"onnxruntime-extensions:{_dist_version('onnxruntime-extensions')}")
    fingerprint = hashlib.sha256("\0".join(parts).encode()).hexdigest()
    key = op
    plugin = Plugin(op=op, domain=domain, op_type=op_type, version=str(version), attrs=attrs,
                    in_dtypes=tuple(in_dtypes), out_dtypes=tuple(out_dtypes), python=python, libraries=libraries,
                    hosted=hosted,
                    identity=f"{__name__}.plugin[{domain}::{op_type}]", fingerprint=fingerprint,
                    plugin_version=str(plugin_version))
    with _LOCK:
        if "onnxruntime" in python:
            made = _ORTX_SIGNATURES.get((domain, op_type))
            if made is not None and made != _ortx_signature(plugin):
                raise ValueError(f"register_plugin({op!r}): onnxruntime-extensions already holds {plugin.name} with "
                                 f"signature {made} in this process; another signature needs a new process")

        def check_plugin(spec: OpSpec) -> Optional[str]:
            reason = plugin.missing_reason(spec.backend)
            if reason:
                return reason
            if len(spec.in_dtypes) != len(plugin.in_dtypes) or len(spec.out_dtypes) != len(plugin.out_dtypes):
                return (f"plugin {plugin.name} takes {len(plugin.in_dtypes)} input(s) and gives {len(plugin.out_dtypes)} "
                        f"output(s); the node has {len(spec.in_dtypes)} and {len(spec.out_dtypes)}")
            if tuple(spec.in_dtypes) != plugin.in_dtypes or tuple(spec.out_dtypes) != plugin.out_dtypes:
                return (f"plugin {plugin.name} is for types {list(plugin.in_dtypes)} -> {list(plugin.out_dtypes)}; "
                        f"the node has {list(spec.in_dtypes)} -> {list(spec.out_dtypes)}")
            if spec.backend in plugin.hosted:
                # A HostFunction's outputs are declared with input 0's shape (host_plugin).
                first = spec.in_shapes[0] if spec.in_shapes else None
                for k, shape in enumerate(spec.out_shapes):
                    if first is not None and shape is not None and tuple(shape) != tuple(first):
                        return (f"plugin {plugin.name}: output {k} has shape {shape_text(first)} (a HostFunction's "
                                f"outputs take input 0's shape), MXNet infers {shape_text(shape)}")
            return validator(spec) if validator is not None else None

        def emit(ctx: ConvContext) -> None:
            if converter is not None:
                converter(ctx, plugin)
            else:
                plugin.node(ctx)

        emit.__module__ = __name__
        emit.__qualname__ = f"plugin[{plugin.name}]"
        old = _PLUGINS.get(key)
        if old is not None and old.identity != plugin.identity:
            remove_entries(key, old.identity)  # one plugin per operator: the new one replaces it
        live = _live_holders(old.name) if old is not None and old.fingerprint != plugin.fingerprint else 0
        if live:
            logger.warning("plugin %s for %s registered again while %d live engine(s) use the earlier one: they "
                           "keep running it; bind again to use the new one", plugin.name, key, live)
        add_user_converter(key, emit, check_plugin, priority, fingerprint, plugin.backends, plugin=plugin.name)
        _PLUGINS[key] = plugin
    logger.info("plugin %s registered for %s (backends: %s)", plugin.name, key, ", ".join(plugin.backends))
    return plugin


def unregister_plugin(op: str) -> bool:
    """Remove the plugin of ``op`` (and its converter entry). Returns whether there was one.

    An ``onnxruntime-extensions`` op made for it stays in the process (it cannot be
    removed); registering the plugin again with the same signature reuses it.
    Engines built with the plugin keep their own reference to it and keep running;
    later binds leave its nodes native.
    """
    with _LOCK:
        plugin = _PLUGINS.pop(op, None)
        live = _live_holders(plugin.name) if plugin is not None else 0
    if plugin is None:
        return False
    remove_entries(op, plugin.identity)
    if live:
        logger.info("plugin %s unregistered; %d live engine(s) keep their own reference to it", plugin.name, live)
    return True


def plugins() -> List[Plugin]:
    """Every registered plugin, by op key. O(n log n)."""
    with _LOCK:
        return [p for _, p in sorted(_PLUGINS.items())]


def plugin_for_node(domain: str, op_type: str) -> Optional[Plugin]:
    """The registered plugin of an ONNX node's ``(domain, op_type)``, or ``None``. O(n)."""
    with _LOCK:
        for p in _PLUGINS.values():
            if p.domain == domain and p.op_type == op_type:
                return p
    return None


def model_plugins(model: Any) -> List[Plugin]:
    """The registered plugins whose nodes an ONNX ``model`` holds, each once, in node order. O(nodes).

    Raises:
        EngineBuildError: a node of a non-standard domain names no registered plugin.
    """
    out: List[Plugin] = []
    seen: Set[str] = set()
    for n in model.graph.node:
        if n.domain in _RESERVED_DOMAINS:
            continue
        p = plugin_for_node(n.domain, n.op_type)
        if p is None:
            raise EngineBuildError(f"node {n.name!r} is {n.domain}::{n.op_type}, which no registered plugin implements")
        if p.name not in seen:
            seen.add(p.name)
            out.append(p)
    return out


def ortx_signature(p: Plugin) -> Tuple[Any, ...]:
    """The signature an ``onnxruntime-extensions`` op of ``p`` is made with (types in and out, attributes)."""
    return _ortx_signature(p)


def ortx_made(domain: str, op_type: str) -> Optional[Tuple[Any, ...]]:
    """The signature of the ``onnxruntime-extensions`` op made for ``(domain, op_type)``, or ``None``."""
    with _LOCK:
        return _ORTX_SIGNATURES.get((domain, op_type))


def mark_ortx_made(p: Plugin) -> None:
    """Record that the ``onnxruntime-extensions`` op of ``p`` exists now (for the life of the process)."""
    with _LOCK:
        _ORTX_SIGNATURES[(p.domain, p.op_type)] = _ortx_signature(p)


def _dist_version(name: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"
