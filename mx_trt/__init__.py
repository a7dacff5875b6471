"""mx_trt: run MXNet models on TensorRT (or ONNX Runtime) by setting ``MXNET_USE_TENSORRT=1``.

Importing the package hands the ``simple_bind`` hook the pass
(:func:`mx_trt.frontends.simple_bind.accelerated_simple_bind`), registers the
other front-ends (``Symbol.optimize_for``/``bind``, Module, Gluon) and installs
the hooks: at once when ``mxnet`` is already imported, else as soon as it is (so
importing the package, its settings or its passes never imports mxnet). With
the package installed, the start-up hook (``mx_trt_autoload``) imports it as
soon as ``mxnet`` is imported.

The tree follows one bind (see ARCHITECTURE.md): ``frontends`` -> ``pipeline``
(``graph``, ``passes``, ``export``, ``build``, ``cache``) -> ``runtime``.
Nothing inside the package imports this module.
"""
from __future__ import annotations

from mx_trt._version import __version__
from mx_trt.patches import uninstall
from mx_trt.artifacts import export_model, load
from mx_trt.artifacts_onnx import export_onnx
from mx_trt.errors import (
    BackendUnavailableError,
    CacheError,
    CalibrationError,
    ConversionError,
    EngineBuildError,
    EngineRunError,
    MissingWeightError,
    MxTrtError,
    NotConvertibleError,
    ParamMismatchError,
    PrecisionConflictError,
    TrainingNotSupportedError,
    ShapeError,
    UnsupportedOpError,
)
from mx_trt.export.calibration import CalibrationTable, load_table
from mx_trt.export.converters.user import register_converter, unregister_converter
from mx_trt.export.plugins import HostFunction, register_plugin, unregister_plugin
from mx_trt.frontends import contrib as _contrib
from mx_trt.frontends import deferred as _deferred
from mx_trt.frontends import gluon as _gluon
from mx_trt.frontends import hook as _hook
from mx_trt.frontends import module as _module
from mx_trt.frontends import symbol as _symbol
from mx_trt.frontends.contrib import (
    bind_info,
    get_optimization_profiles,
    get_optimized_symbol,
    get_use_fp16,
    get_use_tensorrt,
    init_tensorrt_params,
    refresh,
    release,
    set_optimization_profiles,
    set_use_fp16,
    set_use_tensorrt,
    tensorrt_bind,
)
from mx_trt.frontends.simple_bind import accelerated_simple_bind as _accelerated_simple_bind
from mx_trt.frontends import common as _common
from mx_trt.quantize import calibrate
from mx_trt.runtime.twin import runtime_stats
from mx_trt.quantize.online import calibrating_bind as _calibrating_bind
from mx_trt.quantize.online import calibration_table

__all__ = [
    "__version__", "uninstall", "bind_info", "runtime_stats", "export_model", "export_onnx", "load", "get_optimized_symbol",
    "get_use_fp16", "get_use_tensorrt",
    "init_tensorrt_params", "set_use_fp16", "set_use_tensorrt", "tensorrt_bind", "set_optimization_profiles",
    "get_optimization_profiles", "refresh", "release", "register_converter", "unregister_converter",
    "register_plugin", "unregister_plugin", "HostFunction", "calibrate", "calibration_table", "CalibrationTable", "load_table",
    "BackendUnavailableError", "CacheError", "CalibrationError", "ConversionError", "EngineBuildError", "EngineRunError",
    "MissingWeightError", "MxTrtError", "NotConvertibleError", "ParamMismatchError", "PrecisionConflictError",
    "ShapeError", "TrainingNotSupportedError", "UnsupportedOpError",
]

_hook.set_accelerated_bind(_accelerated_simple_bind)
_common.set_calibrating_bind(_calibrating_bind)
_hook.set_deferred_bind(_deferred.is_deferred, _deferred.deferred_simple_bind)
for _install in (_symbol.install, _module.install, _gluon.install, _contrib.install_module):  # the other front-ends, once mxnet is hooked
    _hook.add_installer(_install)
_hook.install_when_mxnet_imported()
