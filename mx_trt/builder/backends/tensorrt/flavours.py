"""What differs between TensorRT 10+ and TensorRT-RTX; everything else is shared.

=======================  ==========================  ===================================
                         TensorRT 10+                TensorRT-RTX
=======================  ==========================  ===================================
builds engines           on a CUDA device            without a device (JIT at run time)
networks                 strongly typed if offered   strongly typed, required
unreadable timing cache  a warning                   INFO (it does not use timing caches)
runs on                  any device it supports      the compute capabilities it lists
execution contexts       plain                       runtime config: kernel specialization
                                                     strategy and a runtime cache file
=======================  ==========================  ===================================

A backend class picks its flavour with its ``rtx`` attribute
(:func:`flavour_of`); module names, labels and install hints stay on the
backend classes (:mod:`.backend`).
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Mapping, NamedTuple, Optional, Protocol

from mx_trt.errors import MxTrtError
from mx_trt.settings import RTX_SPECIALIZATIONS
from mx_trt.builder.backends.tensorrt import cuda
from mx_trt.builder.backends.tensorrt.caches import RuntimeCache

if TYPE_CHECKING:
    import tensorrt as trt

logger = logging.getLogger(__name__)

SPECIALIZATIONS = RTX_SPECIALIZATIONS


class TrtBackendInfo(Protocol):
    """A TensorRT backend class as the builder and the engines see it."""

    name: str
    module_name: str
    label: str
    rtx: bool

    def module(self) -> Any:
        """The Python module of this TensorRT (raises ``BackendUnavailableError``)."""

    def unavailable_reason(self) -> Optional[str]:
        """``None`` if engines can be built and run here, else what is missing."""


def rtx_specialization(extra: Mapping[str, Any]) -> str:
    """The RTX dynamic-shapes kernel specialization strategy: ``lazy`` (default), ``eager`` or ``none``.

    ``extra["rtx_specialization"]``: the bind's ``MXNET_TENSORRT_RTX_SPECIALIZATION``
    (:meth:`~mx_trt.settings.Settings.engine_options`), or a caller's own choice.

    Raises:
        MxTrtError: an unknown value.
    """
    raw = extra.get("rtx_specialization")
    value = str(raw or "").strip().lower() or "lazy"
    if value not in SPECIALIZATIONS:
        raise MxTrtError(f"rtx_specialization={raw!r}: expected one of {', '.join(SPECIALIZATIONS)} "
                         "(MXNET_TENSORRT_RTX_SPECIALIZATION)")
    return value


class ContextParts(NamedTuple):
    """An execution context and what must live as long as it (TensorRT-RTX's runtime config and cache)."""

    context: Optional["trt.IExecutionContext"]
    runtime_config: Any = None
    runtime_cache: Optional[RuntimeCache] = None


class Flavour:
    """TensorRT 10+: builds and runs on a device, plain execution contexts.

    Attributes:
        builds_without_device: Engines can be built with no CUDA device.
        requires_strongly_typed: A build fails when the module has no strongly typed networks.
        timing_cache_level: Logging level of "the timing cache file is unusable".
    """

    builds_without_device = False
    requires_strongly_typed = False
    timing_cache_level = logging.WARNING

    def build_specialization(self, extra: Mapping[str, Any]) -> Optional[str]:
        """The kernel specialization strategy recorded with a build (``None``: not applicable).

        Raises:
            MxTrtError: an unknown strategy.
        """
        return None

    def device_reason(self, mod: Any, label: str) -> Optional[str]:
        """Why the devices here cannot run this flavour's engines, or ``None``."""
        return None

    def create_context(self, mod: Any, engine: "trt.ICudaEngine", specialization: str, runtime_cache_path: Optional[str],
                       subgraph: str) -> ContextParts:
        """A new execution context of ``engine`` (its ``context`` is ``None`` when TensorRT refuses)."""
        return ContextParts(engine.create_execution_context())


class RtxFlavour(Flavour):
    """TensorRT-RTX: builds without a device, runs with a runtime config (specialization, runtime cache)."""

    builds_without_device = True
    requires_strongly_typed = True
    timing_cache_level = logging.INFO

    def build_specialization(self, extra: Mapping[str, Any]) -> Optional[str]:
        return rtx_specialization(extra)

    def device_reason(self, mod: Any, label: str) -> Optional[str]:
        """RTX engines run only on the compute capabilities its ``ComputeCapability`` enum lists."""
        cc_enum = getattr(mod, "ComputeCapability", None)
        if cc_enum is None:
            return None
        supported = sorted(
            (int(n[2:-1]), int(n[-1])) for n in getattr(cc_enum, "__members__", {}) if n.startswith("SM") and n[2:].isdigit()
        )
        if not supported:
            return None
        devices = [cuda.compute_capability(i) for i in range(cuda.device_count())]
        if any(cc in supported for cc in devices):
            return None
        have = ", ".join(f"{a}.{b}" for a, b in devices)
        want = ", ".join(f"{a}.{b}" for a, b in supported)
        return f"{label} cannot run on compute capability {have} (it supports {want})"

    def create_context(self, mod: Any, engine: "trt.ICudaEngine", specialization: str, runtime_cache_path: Optional[str],
                       subgraph: str) -> ContextParts:
        """A context with RTX's runtime config: specialization strategy and, given a path, the runtime cache."""
        config: Any = engine.create_runtime_config()
        strategy = getattr(mod, "DynamicShapesKernelSpecializationStrategy", None)
        if strategy is not None:
            config.dynamic_shapes_kernel_specialization_strategy = getattr(strategy, specialization.upper())
        cache = None
        if runtime_cache_path and hasattr(config, "create_runtime_cache"):
            cache = RuntimeCache(config, runtime_cache_path, subgraph)
        # The context refers to the config: the caller keeps it alive as long.
        return ContextParts(engine.create_execution_context(config), config, cache)


TENSORRT = Flavour()
TENSORRT_RTX = RtxFlavour()


def flavour_of(rtx: bool) -> Flavour:
    """The flavour of a backend class from its ``rtx`` attribute."""
    return TENSORRT_RTX if rtx else TENSORRT
