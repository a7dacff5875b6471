"""Engine backends and how one is chosen for a context.

======================  =============================================  ==============
name                    engines                                        contexts
======================  =============================================  ==============
``onnxruntime``         ONNX Runtime, CPU execution provider            ``mx.cpu()``
``openvino``            OpenVINO, CPU plugin (optional)                 ``mx.cpu()``
``tensorrt``            TensorRT 10+ (``tensorrt``)                     ``mx.gpu(i)``
``tensorrt_rtx``        TensorRT-RTX (``tensorrt_rtx_bindings``)        ``mx.gpu(i)``
======================  =============================================  ==============

CPU contexts take ``onnxruntime`` by default, ``openvino`` where ONNX Runtime is
missing; the measured engine rule times both where both are installed. GPU
contexts take the first available of ``tensorrt``, ``tensorrt_rtx``.
"""
from __future__ import annotations

import logging
from typing import Dict, List, Optional, Type

from mx_trt.errors import BackendUnavailableError
from mx_trt.builder.backends.base import Backend, Buffer, BuildOptions, Engine, TensorSpec
from mx_trt.builder.backends.onnxruntime import OnnxRuntimeBackend
from mx_trt.builder.backends.openvino import OpenVinoBackend
from mx_trt.builder.backends.tensorrt import TensorRTBackend, TensorRTRTXBackend

logger = logging.getLogger(__name__)

BACKENDS: Dict[str, Type[Backend]] = {
    OnnxRuntimeBackend.name: OnnxRuntimeBackend,
    OpenVinoBackend.name: OpenVinoBackend,
    TensorRTBackend.name: TensorRTBackend,
    TensorRTRTXBackend.name: TensorRTRTXBackend,
}

__all__ = ["Backend", "Buffer", "BuildOptions", "Engine", "TensorSpec", "BACKENDS", "candidate_backends",
           "named_backend", "select_backend"]

#: Backends for each device type, in order of preference: the first available is the
#: default (:func:`select_backend`), and the measured engine rule times every available one.
PREFERENCE: Dict[str, List[str]] = {
    "cpu": ["onnxruntime", "openvino"],
    "gpu": ["tensorrt", "tensorrt_rtx"],
}


def candidate_backends(device_type: str, forced: Optional[str] = None) -> List[Backend]:
    """Every backend that can serve ``device_type`` here, in order of preference.

    The measured engine rule (:mod:`mx_trt.pipeline.measure`) builds and times
    an engine of each for a subgraph and keeps the fastest, if it beats MXNet.

    Args:
        device_type: ``"cpu"`` or ``"gpu"``.
        forced: ``MXNET_TENSORRT_BACKEND``, if set: then that backend alone.

    Raises:
        BackendUnavailableError: as :func:`select_backend`.
    """
    first = select_backend(device_type, forced)
    if forced or device_type != "cpu":  # a TensorRT build takes minutes: GPUs time their default backend only
        return [first]
    out = [first]
    for name in PREFERENCE.get(device_type, []):
        cls = BACKENDS.get(name)
        if cls is not None and name != first.name and cls.unavailable_reason() is None:
            out.append(cls())
    return out


def named_backend(name: str, unknown: str, unusable: str) -> Backend:
    """The backend registered as ``name``, usable here.

    Raises:
        BackendUnavailableError: ``unknown`` when no backend has that name; ``unusable: <why>``
            when it cannot be used here (its :meth:`~Backend.unavailable_reason`).
    """
    cls = BACKENDS.get(name)
    if cls is None:
        raise BackendUnavailableError(unknown)
    reason = cls.unavailable_reason()
    if reason:
        raise BackendUnavailableError(f"{unusable}: {reason}")
    return cls()


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
        return named_backend(forced, f"MXNET_TENSORRT_BACKEND={forced!r} is not one of {sorted(BACKENDS)}",
                             f"MXNET_TENSORRT_BACKEND={forced!r} cannot be used")
    order = [n for n in PREFERENCE.get(device_type, []) if n in BACKENDS]
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
