"""ONNX converters, one per MXNet operator, in a registry (see :mod:`.registry`).

Modules:
    nn: convolution, pooling, normalisation, dense, activations, softmax...
    tensor: elementwise, broadcast, scalar, reshape-family, slicing, reductions.
    indexing: shape, arange, gather/take/pick, one_hot, topk/sort, Sequence*.
    vision: box coding, ROI pooling, resizing, anchors, NMS-like post-processing.
    nlp: attention matmuls, length-masked softmax, embeddings.
"""
from __future__ import annotations

from .registry import ConvContext, OpSpec, check, lookup, register, registered_ops

__all__ = ["ConvContext", "OpSpec", "check", "lookup", "register", "registered_ops", "load_all"]


def load_all() -> None:
    """Import every converter module so that its decorators register."""
    from . import indexing, nlp, nn, tensor, vision  # noqa: F401
