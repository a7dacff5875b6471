"""mx_trt: run MXNet models on TensorRT (or ONNX Runtime) by flipping ``MXNET_USE_TENSORRT=1``."""
from __future__ import annotations

from .hook import install as _install

__version__ = "0.1.0"

_install()
