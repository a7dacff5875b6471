"""Plugin nodes on TensorRT and TensorRT-RTX: their creators in the plugin registry in time.

TensorRT's ONNX parser turns a node it has no importer for into a plugin layer
when the plugin registry holds a creator named ``op_type``, version
``plugin_version`` and namespace ``plugin_namespace`` (node attributes that
:mod:`mx_trt.export.plugins` writes). Without one it fails with "Plugin not
found, are the plugin name, version, and namespace correct?" (seen with
TensorRT-RTX 1.7's parser). Deserializing a plan that holds a plugin layer
needs the same creator.

So before a parse, :func:`load_plugins` puts each plugin's implementation for
this backend into ``mod.get_plugin_registry()``, once per module and process:

- a library path: ``IPluginRegistry.load_library(path)``;
- a :class:`~mx_trt.export.plugins.HostFunction`: the creator of
  :mod:`.host_plugin` (a class-based ``IPluginV3`` running the numpy function);
- a Python registrar ``register(mod)``: your code registers the creator, for
  example with TensorRT's Python plugin API (``tensorrt.plugin``:
  ``@trtp.register("domain::op_type")`` on a shape/type descriptor and
  ``@trtp.impl`` on the launcher), or with ``registry.register_creator``.

and then checks that the registry holds the creator.

TensorRT-RTX 1.7 has the same plugin registry (``load_library``,
``register_creator``) but no ``tensorrt.plugin`` module and no
``INetworkDefinition.add_plugin_v3``. Its parser does find a creator written in
Python and creates the plugin, then the process aborts ("terminate called
without an active exception") while the plugin is added to the network (seen
with the host plugin of :mod:`.host_plugin`). So on TensorRT-RTX plugins come as
libraries, and :class:`~mx_trt.export.plugins.HostFunction` is refused for it.
"""
from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any, Sequence, Set, Tuple

from mx_trt.errors import EngineBuildError
from mx_trt.export.plugins import Plugin, plugins
from mx_trt.builder.backends.tensorrt.host_plugin import register_host_plugin

if TYPE_CHECKING:
    import tensorrt as trt

__all__ = ["load_plugins", "load_registered"]

logger = logging.getLogger(__name__)

_LOCK = threading.Lock()
#: (module name, plugin name, plugin fingerprint) already in that module's registry.
_LOADED: Set[Tuple[str, str, str]] = set()


def load_plugins(mod: Any, backend: str, label: str, needed: Sequence[Plugin]) -> None:
    """Put the creators of ``needed`` into ``mod``'s plugin registry and check they are there.

    Args:
        mod: The TensorRT module (``tensorrt`` or ``tensorrt_rtx_bindings``).
        backend: The backend's name, selecting each plugin's implementation.
        label: The backend's name in messages.
        needed: The plugins of the model about to be parsed.

    Raises:
        EngineBuildError: a plugin has no implementation for ``backend``, its
            library does not load, its registrar raises, or the registry holds
            no creator of its name, version and namespace afterwards.
    """
    registry: trt.IPluginRegistry = mod.get_plugin_registry()
    for p in needed:
        key = (getattr(mod, "__name__", label), p.name, p.fingerprint)
        with _LOCK:
            if key in _LOADED:
                continue
            lib = p.libraries.get(backend)
            register = p.python.get(backend)
            hosted = p.hosted.get(backend)
            if hosted is not None:
                register_host_plugin(mod, p, hosted)
            elif lib is not None:
                handle = registry.load_library(lib)
                if handle is None and registry.get_creator(p.op_type, p.plugin_version, p.domain) is None:
                    raise EngineBuildError(f"plugin {p.name}: {label} could not load the plugin library {lib}")
                logger.info("plugin %s: %s loaded %s", p.name, label, lib)
            elif register is not None:
                try:
                    register(mod)
                except Exception as exc:  # the user's registrar may raise anything; it costs the engine, typed
                    raise EngineBuildError(f"plugin {p.name}: its {backend} registrar failed: "
                                           f"{type(exc).__name__}: {exc}") from exc
            else:
                raise EngineBuildError(f"plugin {p.name} has no {backend} implementation")
            if registry.get_creator(p.op_type, p.plugin_version, p.domain) is None:
                raise EngineBuildError(f"plugin {p.name}: {label}'s plugin registry holds no creator named "
                                       f"{p.op_type!r}, version {p.plugin_version!r}, namespace {p.domain!r} "
                                       "after its implementation was loaded")
            _LOADED.add(key)


def load_registered(mod: Any, backend: str, label: str) -> None:
    """Before a deserialization: every registered plugin with an implementation for ``backend``.

    A plan records its plugin layers by creator, not by node, so every plugin this
    process knows for the backend is loaded; one that fails is logged, and a plan
    needing it then fails to deserialize with TensorRT's own message.
    """
    for p in plugins():
        if backend in p.backends:
            try:
                load_plugins(mod, backend, label, [p])
            except EngineBuildError as exc:
                logger.warning("%s", exc)
