"""Typed errors raised by mx_trt. All derive from :class:`MxTrtError`."""
from __future__ import annotations

from typing import List, Sequence, Tuple


class MxTrtError(RuntimeError):
    """Base class of every error mx_trt raises on purpose."""


class UnsupportedOpError(MxTrtError):
    """An operator has no converter, or its attributes/shapes are not supported."""


class ConversionError(MxTrtError):
    """Converting an MXNet node to ONNX failed (bad attributes, unexpected shapes)."""


class MissingWeightError(MxTrtError):
    """A weight needed by an engine is missing from ``shared_buffer``."""


class ShapeError(MxTrtError):
    """A shape given at bind or run time does not fit the graph or the engine."""


class EngineBuildError(MxTrtError):
    """A backend failed to build an engine from an exported subgraph."""


class EngineRunError(MxTrtError):
    """An engine failed while running."""


class BackendUnavailableError(MxTrtError):
    """The requested backend is not installed or cannot run on this context."""


class ParamMismatchError(MxTrtError):
    """``copy_params_from`` got a value different from the one baked into an engine."""


class CacheError(MxTrtError):
    """A cache entry could not be read or written."""


class GraphImportError(MxTrtError):
    """The MXNet graph cannot be read into the IR (the bind stays native)."""


class ExportError(MxTrtError):
    """An export folder (``mxtrt export``, :func:`mx_trt.load`) cannot be written, or is missing, damaged or unreadable;
    or an ONNX export (:func:`mx_trt.export_onnx`) got a bad argument or cannot be written."""


class ServeError(MxTrtError):
    """A model cannot be served: the serving extra is missing, the interpreter does not fit Triton, or the server failed."""


class CalibrationError(MxTrtError):
    """INT8 was asked for without a usable calibration table: none given, unreadable, damaged, or made for another graph.

    An explicit request that cannot be honoured: the bind raises it whether or not
    ``MXNET_TENSORRT_STRICT`` is set, rather than run in another precision.
    """


class TrainingNotSupportedError(MxTrtError):
    """A TensorRT bind asked for gradients (``tensorrt_bind(..., grad_req='write')``): engines are inference-only."""


class NotConvertibleError(UnsupportedOpError):
    """A whole-model export was asked for, and some operators do not convert.

    Attributes:
        operators: One ``(node name, operator, reason)`` per operator that does not
            convert, in graph order; the reasons are those ``mxtrt partition`` shows.
    """

    def __init__(self, message: str, operators: Sequence[Tuple[str, str, str]]) -> None:
        super().__init__(message)
        self.operators: List[Tuple[str, str, str]] = list(operators)


class PrecisionConflictError(MxTrtError):
    """Two precisions were asked for at once (``precision='int8'`` with ``fp16=True``, in any order or way).

    Like :class:`CalibrationError`, an explicit request that cannot be honoured as
    asked: raised whether or not ``MXNET_TENSORRT_STRICT`` is set.
    """
