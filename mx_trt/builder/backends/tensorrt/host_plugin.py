"""A TensorRT plugin around a numpy function (:class:`~mx_trt.export.plugins.HostFunction`).

Written against TensorRT's class-based Python plugin interface (``IPluginV3``
with its core, build and runtime capabilities, and an ``IPluginCreatorV3One``),
which TensorRT 10+ and TensorRT-RTX both have; the classes are made per module,
since each module has its own base classes.

- Build: every output has input 0's shape and the plugin's declared type; the
  only format is linear, in the declared types. No workspace, no tactics.
- Attributes: the plugin's ``attrs`` are the creator's fields (float32, int32
  or char), read from the ONNX node by TensorRT's parser and serialized into the plan.
- Run (``enqueue``): wait for the engine's stream, copy each input to host
  memory, call the function, copy each result into its output. One run at a
  time per plugin object; TensorRT gives each execution context its own clone.
  The function runs through :func:`~mx_trt.builder.backends.plugin_runs.call_plugin`:
  whatever it raises or returns never reaches TensorRT's C++; the engine's run
  raises an ``EngineRunError`` naming the plugin afterwards.
"""
from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Tuple

import numpy as np

from mx_trt.errors import EngineBuildError
from mx_trt.export.plugins import Plugin
from mx_trt.builder.backends.plugin_runs import call_plugin, current, watching
from mx_trt.builder.backends.tensorrt import cuda

if TYPE_CHECKING:
    import tensorrt as trt

__all__ = ["register_host_plugin"]

logger = logging.getLogger(__name__)

#: Numpy type name -> TensorRT ``DataType`` member name.
_TRT_TYPES = {"float32": "FLOAT", "float16": "HALF", "int8": "INT8", "uint8": "UINT8", "int32": "INT32",
              "int64": "INT64", "bool": "BOOL"}
#: (module name, plugin name) -> the creator registered: kept alive (the registry holds no Python
#: reference), and deregistered when a new version of the plugin replaces it.
_CREATORS: Dict[Tuple[str, str], Any] = {}


def _field_type(mod: Any, typ: type) -> Any:
    return {float: mod.PluginFieldType.FLOAT32, int: mod.PluginFieldType.INT32, str: mod.PluginFieldType.CHAR}[typ]


def _field_array(typ: type, value: Any) -> np.ndarray:
    if typ is float:
        return np.array([float(value)], dtype=np.float32)
    if typ is int:
        return np.array([int(value)], dtype=np.int32)
    return np.frombuffer(str(value).encode(), dtype=np.int8).copy()


def _shape(dims: "trt.Dims") -> Tuple[int, ...]:
    return tuple(int(dims[i]) for i in range(len(dims)))


def read_fields(attrs: Mapping[str, type], fields: Any) -> Dict[str, Any]:
    """The plugin's attributes from a ``PluginFieldCollection_`` (fields it does not declare are ignored)."""
    out: Dict[str, Any] = {}
    for i in range(len(fields)):
        f = fields[i]
        typ = attrs.get(f.name)
        if typ is None:
            continue
        data = np.asarray(f.data)
        if typ is str:
            out[f.name] = data.astype(np.int8).tobytes().decode(errors="replace").rstrip("\x00")
        elif data.size:
            out[f.name] = typ(data.reshape(-1)[0])
    return out


def _classes(mod: Any, plugin: Plugin, fn: Callable[..., Any]) -> Tuple[type, type]:
    """The plugin and creator classes of ``plugin`` for the TensorRT module ``mod``."""
    try:
        in_types = [getattr(mod.DataType, _TRT_TYPES[d]) for d in plugin.in_dtypes]
        out_types = [getattr(mod.DataType, _TRT_TYPES[d]) for d in plugin.out_dtypes]
    except KeyError as exc:
        raise EngineBuildError(f"plugin {plugin.name}: TensorRT has no {exc.args[0]} tensors") from exc
    np_of = {int(getattr(mod.DataType, v)): np.dtype(k) for k, v in _TRT_TYPES.items()}
    n_in = len(plugin.in_dtypes)

    bases = (mod.IPluginV3, mod.IPluginV3OneCore, mod.IPluginV3OneBuild, mod.IPluginV3OneRuntime)

    class HostPlugin(*bases):  # type: ignore[misc]
        def __init__(self, attrs: Mapping[str, Any]) -> None:
            mod.IPluginV3.__init__(self)
            mod.IPluginV3OneCore.__init__(self)
            mod.IPluginV3OneBuild.__init__(self)
            mod.IPluginV3OneRuntime.__init__(self)
            self.plugin_name = plugin.op_type
            self.plugin_namespace = plugin.domain
            self.plugin_version = plugin.plugin_version
            self.num_outputs = len(plugin.out_dtypes)
            self.attrs = dict(attrs)

        # -- core
        def get_capability_interface(self, type: Any) -> Any:
            return self

        def clone(self) -> "trt.IPluginV3":
            return HostPlugin(self.attrs)

        def destroy(self) -> None:
            pass

        # -- build
        def get_output_data_types(self, input_types: List["trt.DataType"]) -> List["trt.DataType"]:
            return list(out_types)

        def get_output_shapes(self, inputs: List["trt.DimsExprs"], shape_inputs: List["trt.DimsExprs"],
                              expr_builder: "trt.IExprBuilder") -> List["trt.DimsExprs"]:
            first = inputs[0]
            return [mod.DimsExprs([first[i] for i in range(len(first))]) for _ in out_types]

        def supports_format_combination(self, pos: int, in_out: List["trt.DynamicPluginTensorDesc"],
                                        num_inputs: int) -> bool:
            desc: trt.PluginTensorDesc = in_out[pos].desc
            want = in_types[pos] if pos < n_in else out_types[pos - n_in]
            return bool(desc.format == mod.TensorFormat.LINEAR and desc.type == want)

        def configure_plugin(self, in_: List["trt.DynamicPluginTensorDesc"],
                             out: List["trt.DynamicPluginTensorDesc"]) -> None:
            pass

        def get_workspace_size(self, in_: List["trt.DynamicPluginTensorDesc"],
                               out: List["trt.DynamicPluginTensorDesc"]) -> int:
            return 0

        def get_valid_tactics(self) -> List[int]:
            return []

        # -- runtime
        def set_tactic(self, tactic: int) -> None:
            pass

        def on_shape_change(self, in_: List["trt.PluginTensorDesc"], out: List["trt.PluginTensorDesc"]) -> None:
            pass

        def attach_to_context(self, resource_context: Any) -> "trt.IPluginV3":
            return self.clone()

        def get_fields_to_serialize(self) -> "trt.PluginFieldCollection_":
            fields = [mod.PluginField(k, _field_array(plugin.attrs[k], v), _field_type(mod, plugin.attrs[k]))
                      for k, v in self.attrs.items() if k in plugin.attrs]
            return mod.PluginFieldCollection(fields)

        def enqueue(self, input_desc: List["trt.PluginTensorDesc"], output_desc: List["trt.PluginTensorDesc"],
                    inputs: List[int], outputs: List[int], workspace: int, stream: int) -> None:
            cuda.stream_synchronize(stream)  # the inputs are written by kernels queued on it
            arrays = []
            for d, ptr in zip(input_desc, inputs):
                arr = np.empty(_shape(d.dims), dtype=np_of[int(d.type)])
                cuda.memcpy(arr.ctypes.data, ptr, arr.nbytes, cuda.DEVICE_TO_HOST)
                arrays.append(arr)
            # Never raises into TensorRT: a fault goes to the run's side channel (TrtRunner raises it after
            # the run); called outside one (a direct call), it is raised here.
            outside = current() is None
            with (watching() if outside else contextlib.nullcontext(current())) as run:
                results = call_plugin(plugin.name, fn, arrays, self.attrs, plugin.out_dtypes,
                                      [_shape(d.dims) for d in output_desc])
            if outside and run is not None:
                run.raise_fault(plugin.name)
            for d, ptr, arr in zip(output_desc, outputs, results):
                cuda.memcpy(ptr, arr.ctypes.data, arr.nbytes, cuda.HOST_TO_DEVICE)

    class HostPluginCreator(mod.IPluginCreatorV3One):  # type: ignore[misc]
        def __init__(self) -> None:
            mod.IPluginCreatorV3One.__init__(self)
            self.name = plugin.op_type
            self.plugin_namespace = plugin.domain
            self.plugin_version = plugin.plugin_version
            self.field_names = mod.PluginFieldCollection(
                [mod.PluginField(k, np.array([], dtype=np.float32 if t is float else np.int32 if t is int else np.int8),
                                 _field_type(mod, t)) for k, t in plugin.attrs.items()])

        def create_plugin(self, name: str, field_collection: "trt.PluginFieldCollection_", phase: Any) -> "trt.IPluginV3":
            return HostPlugin(read_fields(plugin.attrs, field_collection))

    return HostPlugin, HostPluginCreator


def register_host_plugin(mod: Any, plugin: Plugin, fn: Callable[..., Any]) -> None:
    """Register in ``mod``'s plugin registry a creator of ``plugin`` running ``fn`` on the host.

    Raises:
        EngineBuildError: a type TensorRT lacks, or the registry refuses the creator
            (one of that name, version and namespace is there already).
    """
    _, creator_class = _classes(mod, plugin, fn)
    creator = creator_class()
    registry: trt.IPluginRegistry = mod.get_plugin_registry()
    key = (str(getattr(mod, "__name__", "?")), plugin.name)
    old = _CREATORS.pop(key, None)
    if old is not None:
        registry.deregister_creator(old)
    if not registry.register_creator(creator, plugin.domain):
        raise EngineBuildError(f"plugin {plugin.name}: the plugin registry refused its creator (one named "
                               f"{plugin.op_type!r}, version {plugin.plugin_version!r}, namespace {plugin.domain!r} "
                               "is there already)")
    _CREATORS[key] = creator
    logger.info("plugin %s: host creator registered (%s)", plugin.name, getattr(mod, "__name__", "?"))
