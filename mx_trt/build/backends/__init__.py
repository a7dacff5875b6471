"""Engine backends and how one is chosen for a context.

======================  =============================================  ==============
name                    engines                                        contexts
======================  =============================================  ==============
``onnxruntime``         ONNX Runtime, CPU execution provider            ``mx.cpu()``
``openvino``            OpenVINO, CPU plugin (optional, by name)        ``mx.cpu()``
``tensorrt``            TensorRT 10+ (``tensorrt``)                     ``mx.gpu(i)``
``tensorrt_rtx``        TensorRT-RTX (``tensorrt_rtx_bindings``)        ``mx.gpu(i)``
======================  =============================================  ==============

GPU contexts take the first available of ``tensorrt``, ``tensorrt_rtx``.
"""
from __future__ import annotations

import logging
from typing import Dict, Optional, Type

from mx_trt.errors import BackendUnavailableError
from mx_trt.build.backends.base import Backend, Buffer, BuildOptions, Engine, TensorSpec
from mx_trt.build.backends.onnxruntime import OnnxRuntimeBackend
from mx_trt.build.backends.openvino import OpenVinoBackend
from mx_trt.build.backends.tensorrt import TensorRTBackend, TensorRTRTXBackend

logger = logging.getLogger(__name__)

BACKENDS: Dict[str, Type[Backend]] = {
    OnnxRuntimeBackend.name: OnnxRuntimeBackend,
    OpenVinoBackend.name: OpenVinoBackend,
    TensorRTBackend.name: TensorRTBackend,
    TensorRTRTXBackend.name: TensorRTRTXBackend,
}

__all__ = ["Backend", "Buffer", "BuildOptions", "Engine", "TensorSpec", "BACKENDS", "select_backend"]


def select_backend(device_type: str, forced: Optional[str] = None) -> Backend:
    """The backend for a context.

    Args:
        device_type: ``"cpu"`` or ``"gpu"``.
        forced: ``MXNET_TENSORRT_BACKEND``, if set.

    Raises:
        BackendUnavailableError: the forced backend is unknown or not installed, or
            no backend can serve ``device_type``.
    """
    if forced:
        cls = BACKENDS.get(forced)
        if cls is None:
            raise BackendUnavailableError(f"MXNET_TENSORRT_BACKEND={forced!r} is not one of {sorted(BACKENDS)}")
        reason = cls.unavailable_reason()
        if reason:
            raise BackendUnavailableError(f"MXNET_TENSORRT_BACKEND={forced!r} cannot be used: {reason}")
        return cls()
    order = ["onnxruntime"] if device_type == "cpu" else [n for n in ("tensorrt", "tensorrt_rtx") if n in BACKENDS]
    reasons = []
    for name in order:
        cls = BACKENDS[name]
        reason = cls.unavailable_reason()
        if reason is None:
            return cls()
        reasons.append(f"{name}: {reason}")
    raise BackendUnavailableError(
        f"no engine backend for {device_type} contexts" + (f" ({'; '.join(reasons)})" if reasons else "")
    )
