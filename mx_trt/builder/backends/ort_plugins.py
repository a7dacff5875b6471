"""Plugin nodes on ONNX Runtime: custom-op libraries and ``onnxruntime-extensions`` Python ops.

A model exported with plugin nodes (:mod:`mx_trt.export.plugins`) imports their
domains. Before ONNX Runtime builds or loads a session over it,
:func:`register_plugins` registers on the session options what runs them:

- a compiled custom-op library: ``SessionOptions.register_custom_ops_library(path)``;
- a Python implementation: one ``onnxruntime-extensions`` op per
  ``(domain, op_type)`` and process (its ``op_type`` is spelled ``domain::op_type``),
  whose body calls the plugin's *current* function, then the extensions' library.

``onnxruntime-extensions`` keeps every op it was given for the life of the
process and ONNX Runtime refuses two kernels of one name, so the op made for a
plugin is a thin dispatcher made once. It calls the function the running engine
holds (:mod:`mx_trt.builder.backends.plugin_runs`): unregistering the plugin, or
registering a new version, changes what later engines call, never what a live
one does, and nothing the function does reaches ONNX Runtime's C++.
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable, List, Sequence

import numpy as np

from mx_trt.errors import EngineBuildError
from mx_trt.builder.backends.plugin_runs import call_plugin, current
from mx_trt.export.plugins import Plugin, mark_ortx_made, ortx_made, ortx_signature, plugin_for_node

__all__ = ["plugins_named", "register_plugins"]

logger = logging.getLogger(__name__)

_LOCK = threading.Lock()  # one maker at a time (the table itself is in mx_trt.export.plugins)


def _dispatcher(domain: str, op_type: str, out_dtypes: Sequence[str]) -> Callable[..., Any]:
    """The body of the extensions' op: the plugin's function through :func:`.plugin_runs.call_plugin`.

    The function is the one the running engine holds (its own reference, taken at
    build or load), else the registered one. Whatever it does, nothing is raised
    into ONNX Runtime: faults go to the run's side channel, and the engine raises
    after the session's run.
    """
    name = f"{domain}::{op_type}"

    def call(*inputs: np.ndarray, **attrs: Any) -> Any:
        run = current()
        fn = run.functions.get(name) if run is not None else None
        if fn is None:
            p = plugin_for_node(domain, op_type)
            fn = p.python.get("onnxruntime") if p is not None else None
        fixed = call_plugin(name, fn, inputs, attrs, out_dtypes)
        return fixed if len(fixed) > 1 else fixed[0]

    call.__name__ = name
    return call


def _make_ortx_op(p: Plugin) -> None:
    """Make the ``onnxruntime-extensions`` op of ``p`` once per process.

    Raises:
        EngineBuildError: onnxruntime-extensions is missing, or holds this op with another signature.
    """
    with _LOCK:
        made = ortx_made(p.domain, p.op_type)
        if made is not None:
            if made != ortx_signature(p):
                raise EngineBuildError(f"plugin {p.name}: onnxruntime-extensions holds it with signature {made}, "
                                       f"not {ortx_signature(p)}; another signature needs a new process")
            return
        try:
            from onnxruntime_extensions import PyCustomOpDef, onnx_op
        except ImportError as exc:
            raise EngineBuildError(f"plugin {p.name}: onnxruntime-extensions is not installed ({exc})") from exc
        types = {"float32": PyCustomOpDef.dt_float, "float16": PyCustomOpDef.dt_float16,
                 "float64": PyCustomOpDef.dt_double, "int8": PyCustomOpDef.dt_int8, "uint8": PyCustomOpDef.dt_uint8,
                 "int32": PyCustomOpDef.dt_int32, "int64": PyCustomOpDef.dt_int64, "bool": PyCustomOpDef.dt_bool}
        attr_types = {int: PyCustomOpDef.dt_int64, float: PyCustomOpDef.dt_float, str: PyCustomOpDef.dt_string}
        onnx_op(op_type=p.name, inputs=[types[d] for d in p.in_dtypes], outputs=[types[d] for d in p.out_dtypes],
                attrs={k: attr_types[t] for k, t in p.attrs.items()})(_dispatcher(p.domain, p.op_type, p.out_dtypes))
        mark_ortx_made(p)
        logger.info("plugin %s: onnxruntime-extensions op made (%s -> %s)", p.name, list(p.in_dtypes), list(p.out_dtypes))


def register_plugins(so: Any, plugins: Sequence[Plugin]) -> List[str]:
    """Register on the session options ``so`` what runs each plugin; returns what was registered.

    Libraries come first (once each), then, if any plugin is Python, the
    extensions' library once.

    Raises:
        EngineBuildError: a plugin has no onnxruntime implementation, or one cannot be registered.
    """
    done: List[str] = []
    python = False
    for p in plugins:
        lib = p.libraries.get("onnxruntime")
        if lib is not None:
            if lib not in done:
                try:
                    so.register_custom_ops_library(lib)
                except Exception as exc:  # onnxruntime raises its own exception types
                    raise EngineBuildError(f"plugin {p.name}: ONNX Runtime cannot load the custom-op library "
                                           f"{lib}: {exc}") from exc
                done.append(lib)
        elif "onnxruntime" in p.python:
            _make_ortx_op(p)
            python = True
        else:
            raise EngineBuildError(f"plugin {p.name} has no onnxruntime implementation")
    if python:
        from onnxruntime_extensions import get_library_path

        path = get_library_path()
        so.register_custom_ops_library(path)
        done.append(path)
    return done


def plugins_named(names: Sequence[str]) -> List[Plugin]:
    """The registered plugins a stored engine names (``domain::op_type``).

    Raises:
        EngineBuildError: one is not registered in this process.
    """
    out: List[Plugin] = []
    for name in names:
        domain, _, op_type = str(name).partition("::")
        p = plugin_for_node(domain, op_type)
        if p is None:
            raise EngineBuildError(f"the stored engine needs plugin {name}, which is not registered in this process")
        out.append(p)
    return out
