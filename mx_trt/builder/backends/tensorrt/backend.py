"""The two TensorRT backend classes: availability, build, and stored engines.

:class:`TensorRTBackend` is written against TensorRT's Python API;
:class:`TensorRTRTXBackend` names the other module with the same API and turns
on its flavour (:mod:`.flavours`) with ``rtx = True``.
"""
from __future__ import annotations

import importlib
import os
from typing import Any, Mapping, Optional, Tuple, Type

from mx_trt.errors import BackendUnavailableError, EngineBuildError
from mx_trt.builder.backends.base import Backend, BuildOptions
from mx_trt.builder.backends.tensorrt import cuda
from mx_trt.builder.backends.tensorrt.builder import build_engine
from mx_trt.builder.backends.tensorrt.engine import TrtEngine
from mx_trt.builder.backends.tensorrt.flavours import flavour_of
from mx_trt.builder.backends.tensorrt.meta import check_stored
from mx_trt.builder.backends.tensorrt.refit import weights_source


def _import_module(module_name: str) -> Tuple[Optional[Any], str]:
    """The module, or ``None`` and why it cannot be used."""
    try:
        mod = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or a broken install raising anything while loading its libraries
        return None, f"{type(exc).__name__}: {exc}"
    if not hasattr(mod, "Builder") or not hasattr(mod, "OnnxParser"):
        return None, f"{module_name} was imported from {getattr(mod, '__file__', '?')} but has no Builder/OnnxParser (an incomplete install)"
    return mod, ""


class TensorRTBackend(Backend):
    """TensorRT 10+ (``import tensorrt``). Subclasses name another module with the same API.

    Attributes:
        module_name: The Python module.
        label: Its name in messages.
        install_hint: How to install it, for messages.
        rtx: Selects the TensorRT-RTX flavour (:func:`.flavours.flavour_of`).
    """

    name = "tensorrt"
    # TensorRT 10 has no float64; int8/uint8 tensors need quantization scales, so they stay native.
    tensor_dtypes = ("float32", "float16", "int32", "int64", "bool")
    module_name = "tensorrt"
    label = "TensorRT"
    install_hint = "install it with `make venv USE_TENSORRT=1` (requirements/tensorrt.txt; needs NVIDIA's package index)"
    rtx = False

    # -- availability

    @classmethod
    def module(cls) -> Any:
        """The Python module (imported on first use).

        Raises:
            BackendUnavailableError: it cannot be imported.
        """
        mod, why = _import_module(cls.module_name)
        if mod is None:
            raise BackendUnavailableError(f"{cls.label} is not installed: import {cls.module_name} failed ({why}); {cls.install_hint}")
        return mod

    @classmethod
    def build_unavailable_reason(cls) -> Optional[str]:
        """``None`` if engines can be built here, else why not."""
        mod, why = _import_module(cls.module_name)
        if mod is None:
            return f"{cls.label} is not installed: import {cls.module_name} failed ({why}); {cls.install_hint}"
        if not flavour_of(cls.rtx).builds_without_device:
            reason = cuda.unavailable_reason()
            if reason is not None:
                return f"{cls.label} builds engines on a CUDA device: {reason}"
        return None

    @classmethod
    def unavailable_reason(cls) -> Optional[str]:
        """``None`` if engines can be built and run here, else what is missing."""
        reason = cls.build_unavailable_reason()
        if reason is not None:
            return reason
        reason = cuda.unavailable_reason()
        if reason is not None:
            return f"{cls.label} engines need a CUDA device to run: {reason}"
        return flavour_of(cls.rtx).device_reason(cls.module(), cls.label)

    def precision_reason(self, precision: str) -> Optional[str]:
        """``None`` if engines of ``precision`` can be built here, else why not.

        ``bf16`` needs a module with ``DataType.BF16`` (and ``BuilderFlag.BF16`` if
        it has no strongly typed networks: what :func:`.builder.build_engine`
        checks) and, where the CUDA runtime tells the current device's compute
        capability, at least 8.0 (Ampere); without a device only the module is
        checked (TensorRT-RTX builds without one). Other precisions: ``None``.
        """
        if precision != "bf16":
            return None
        mod, why = _import_module(self.module_name)
        if mod is None:
            return f"{self.label} is not installed: import {self.module_name} failed ({why})"
        version = getattr(mod, "__version__", "?")
        if not hasattr(getattr(mod, "DataType", None), "BF16"):
            return f"{self.label} {version} has no bfloat16 (no DataType.BF16)"
        weak = not hasattr(getattr(mod, "NetworkDefinitionCreationFlag", None), "STRONGLY_TYPED")
        if weak and not hasattr(getattr(mod, "BuilderFlag", None), "BF16"):
            return f"{self.label} {version} has no bfloat16 (no BuilderFlag.BF16 for its weakly typed networks)"
        if cuda.unavailable_reason() is not None:
            return None
        try:
            device = cuda.current_device()
            major, minor = cuda.compute_capability(device)
        except (BackendUnavailableError, cuda.CudaError):
            return None  # the device does not say: the build will
        if (major, minor) < (8, 0):
            return (f"{self.label} bf16 engines need compute capability 8.0 (Ampere) or later; "
                    f"CUDA device {device} is {major}.{minor}")
        return None

    def version(self) -> str:
        return f"{self.module_name}-{getattr(self.module(), '__version__', '?')}"

    def device_signature(self, device_id: int) -> str:
        """Compute capability of the device (engines are specific to it), or ``no-device``."""
        if cuda.unavailable_reason() is not None:
            return "no-device"
        major, minor = cuda.compute_capability(device_id if device_id >= 0 else cuda.current_device())
        return f"sm{major}{minor}"

    # -- build

    def build(self, exported: Any, options: BuildOptions) -> TrtEngine:
        """Parse the exported ONNX model and build a serialized engine (:func:`.builder.build_engine`).

        Raises:
            EngineBuildError: parse or build failed, or the options are inconsistent.
            BackendUnavailableError: the module is not installed.
        """
        return build_engine(type(self), exported, options)

    # -- stored engines

    @classmethod
    def load_engine(cls, plan: bytes, meta: Mapping[str, Any], options: BuildOptions) -> TrtEngine:
        """An engine from stored plan bytes and :meth:`TrtEngine.meta`, without rebuilding.

        Deserialization happens at the first run, on a device; a weight-stripped
        plan (``meta["stripped"]``) takes its weights from ``options.extra["weights"]``
        and, where a device can run it, is deserialized and refitted here, so a
        plan that cannot be refitted costs a rebuild instead of a failed forward.

        Raises:
            EngineBuildError: the metadata is from another backend, module or
                version, the plan does not match its recorded digest, or a
                stripped plan has no weights or cannot be refitted.
        """
        check_stored(cls, plan, meta)
        name = meta.get("name") or options.name
        source = weights_source(options.extra) if meta.get("stripped") else None
        if meta.get("stripped") and source is None:
            raise EngineBuildError(f"stored engine {name!r}: a stripped plan needs the weights to be refitted, "
                                   "and BuildOptions.extra['weights'] was not given")
        try:
            engine = TrtEngine(cls, plan, meta, options, weights=source)
        except (KeyError, TypeError, ValueError) as exc:
            raise EngineBuildError(f"stored engine {name!r}: malformed metadata ({type(exc).__name__}: {exc})") from exc
        if engine.stripped and cls.unavailable_reason() is None:
            engine.refit_now()
        return engine

    def load(self, meta: Mapping[str, Any], directory: str, options: BuildOptions) -> TrtEngine:
        """:meth:`load_engine` from what :meth:`TrtEngine.save` wrote into ``directory``."""
        path = os.path.join(directory, str(meta.get("plan_file", "engine.plan")))
        try:
            with open(path, "rb") as f:
                plan = f.read()
        except OSError as exc:
            raise EngineBuildError(f"cannot read stored engine {path}: {exc}") from exc
        return self.load_engine(plan, meta, options)


class TensorRTRTXBackend(TensorRTBackend):
    """TensorRT-RTX (``import tensorrt_rtx_bindings``): same API, builds without a device, JIT at run time."""

    name = "tensorrt_rtx"
    module_name = "tensorrt_rtx_bindings"
    label = "TensorRT-RTX"
    install_hint = "install it with `make venv USE_TENSORRT_RTX=1` (requirements/trt-rtx.txt)"
    rtx = True


def backend_for(meta: Mapping[str, Any]) -> Type[TensorRTBackend]:
    """The backend class that wrote ``meta``.

    Raises:
        EngineBuildError: ``meta`` names no TensorRT backend.
    """
    for cls in (TensorRTBackend, TensorRTRTXBackend):
        if meta.get("backend") == cls.name:
            return cls
    raise EngineBuildError(f"stored engine is for backend {meta.get('backend')!r}, not a TensorRT one")


def load_engine(plan: bytes, meta: Mapping[str, Any], options: BuildOptions) -> TrtEngine:
    """:meth:`TensorRTBackend.load_engine` on the backend named in ``meta``."""
    return backend_for(meta).load_engine(plan, meta, options)
