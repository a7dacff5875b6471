"""ONNX converters, one per MXNet operator, in a registry (see :mod:`.registry`).

Importing this package imports every converter module, whose decorators fill
the registry; :mod:`.registry` and :mod:`mx_trt.export.spec` import no converter. Callers
ask the registry through this package (``from mx_trt.export.converters import check``)
so that the table is complete whenever they use it.

Modules:
    (:class:`OpSpec`, what a validator sees of one node, lives in :mod:`mx_trt.export.spec`, a leaf shared with the backends.)
    registry: the table of converters and validators, :func:`check` and :func:`lookup`.
    common: emission and attribute helpers shared by the converter modules.
    nn: convolution, deconvolution, normalisation, dense, activations, padding, clipping.
    pooling: pooling and upsampling.
    tensor: elementwise, broadcast arithmetic, scalar, unary math, matrix products, reductions.
    shape: reshape family, slicing, splitting, joining, broadcasting, tiling.
    indexing: shape, arange, gather/take/pick, one_hot, topk/sort, Sequence*.
    vision: box coding, ROI pooling, resizing, anchors.
    detection: box_nms, MultiBoxDetection, Proposal/MultiProposal, built from
    suppression: exact top-k selection, stable sort and greedy suppression in MXNet's order.
    nlp: attention matmuls, the softmax family (with lengths), embeddings, layer norm.
    user: :func:`register_converter`, the public API for your own operators' converters.
"""
from __future__ import annotations

from mx_trt.export.converters import detection, indexing, nlp, nn, pooling, shape, tensor, vision  # noqa: F401  (importing registers)
from mx_trt.export.converters.registry import ConvContext, check, lookup, register, registered_ops
from mx_trt.export.converters.user import list_converters, register_converter, unregister_converter, user_fingerprint
from mx_trt.export.spec import OpSpec

__all__ = ["ConvContext", "OpSpec", "check", "list_converters", "lookup", "register", "register_converter", "registered_ops",
           "unregister_converter", "user_fingerprint"]
