"""ONNX converters, one per MXNet operator, in a registry (see :mod:`.registry`).

Modules:
    nn: convolution, deconvolution, normalisation, dense, activations, padding, clipping.
    pooling: pooling and upsampling.
    tensor: elementwise, broadcast arithmetic, scalar, unary math, matrix products, reductions.
    shape: reshape family, slicing, splitting, joining, broadcasting, tiling.
    indexing: shape, arange, gather/take/pick, one_hot, topk/sort, Sequence*.
    vision: box coding, ROI pooling, resizing, anchors, NMS-like post-processing.
    nlp: attention matmuls, the softmax family (with lengths), embeddings, layer norm.
"""
from __future__ import annotations

from .registry import ConvContext, OpSpec, check, lookup, register, registered_ops

__all__ = ["ConvContext", "OpSpec", "check", "lookup", "register", "registered_ops", "load_all"]


def load_all() -> None:
    """Import every converter module so that its decorators register."""
    from . import indexing, nlp, nn, pooling, shape, tensor, vision  # noqa: F401
