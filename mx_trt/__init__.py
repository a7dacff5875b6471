"""mx_trt: run MXNet models on TensorRT (or ONNX Runtime) by setting ``MXNET_USE_TENSORRT=1``.

Importing the package hooks ``Symbol.simple_bind`` and hands the hook the
pass (:func:`mx_trt.bind.accelerated_simple_bind`); with the package installed,
the start-up hook (``mx_trt_autoload``) imports it as soon as ``mxnet`` is
imported. The version lives in :mod:`mx_trt._version`, which is what the
plugin's own modules import.
"""
from __future__ import annotations

from . import hook as _hook
from ._version import __version__
from .api import (
    bind_info,
    get_optimization_profiles,
    get_optimized_symbol,
    get_use_fp16,
    get_use_tensorrt,
    init_tensorrt_params,
    set_optimization_profiles,
    set_use_fp16,
    set_use_tensorrt,
    tensorrt_bind,
)
from .bind import accelerated_simple_bind as _accelerated_simple_bind
from .errors import (
    BackendUnavailableError,
    CacheError,
    ConversionError,
    EngineBuildError,
    EngineRunError,
    MissingWeightError,
    MxTrtError,
    ParamMismatchError,
    ShapeError,
    UnsupportedOpError,
)
from .export import export_model, load

__all__ = [
    "bind_info", "export_model", "load", "get_optimized_symbol", "get_use_fp16", "get_use_tensorrt", "init_tensorrt_params",
    "set_use_fp16", "set_use_tensorrt", "tensorrt_bind", "set_optimization_profiles", "get_optimization_profiles",
    "BackendUnavailableError", "CacheError", "ConversionError", "EngineBuildError", "EngineRunError",
    "MissingWeightError", "MxTrtError", "ParamMismatchError", "ShapeError", "UnsupportedOpError",
]

_hook.set_accelerated_bind(_accelerated_simple_bind)
_hook.install()
