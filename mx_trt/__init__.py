"""mx_trt: run MXNet models on TensorRT (or ONNX Runtime) by setting ``MXNET_USE_TENSORRT=1``.

Importing the package hooks ``Symbol.simple_bind``; with the package installed,
the start-up hook does the same as soon as ``mxnet`` is imported.
"""
from __future__ import annotations

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
from .hook import install as _install

__version__ = "0.1.0"

__all__ = [
    "bind_info", "export_model", "load", "get_optimized_symbol", "get_use_fp16", "get_use_tensorrt", "init_tensorrt_params",
    "set_use_fp16", "set_use_tensorrt", "tensorrt_bind", "set_optimization_profiles", "get_optimization_profiles",
    "BackendUnavailableError", "CacheError", "ConversionError", "EngineBuildError", "EngineRunError",
    "MissingWeightError", "MxTrtError", "ParamMismatchError", "ShapeError", "UnsupportedOpError",
]

_install()
