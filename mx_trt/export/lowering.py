"""Standard ONNX operators written out with others, for a backend whose parser lacks them.

The converters emit ONNX's own ``RoiAlign`` for MXNet's ``ROIAlign``: ONNX
Runtime and OpenVINO run it as one kernel. TensorRT's ONNX parser takes
``RoiAlign`` only through NVIDIA's plugin library ("ROIAlign plugin was not found
in the plugin registry"), which TensorRT-RTX does not have, so the TensorRT
backends parse the copy :func:`lower_roi_align` gives, where each ``RoiAlign`` is
:func:`~mx_trt.export.converters.vision.roi_align_matmul`: weight matrices and
``MatMul``, what the export was before it used ``RoiAlign``.

The export itself stays one model for every backend (its plan-cache keys and the
models ``mxtrt export`` writes do not depend on the backend); only the TensorRT
builder sees the lowered copy. Its constants are ``Constant`` nodes, not
initializers: a weight-stripped plan is refitted with the export's initializers,
so a plan with lowered nodes is stored with its weights (the builder's check of
missing weights decides that). Pure ONNX rewriting, no MXNet.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np

from mx_trt.errors import EngineBuildError
from mx_trt.export.converters.common import FLOAT_DTYPES, ONNX_DTYPE, cast
from mx_trt.export.converters.registry import ConvContext
from mx_trt.export.converters.vision import ZERO_IMAGE_PADS, roi_align_matmul
from mx_trt.export.shapes import onnx_tensors, static_dims
from mx_trt.export.spec import OpSpec
from mx_trt.export.subgraph import ExportedSubgraph

logger = logging.getLogger(__name__)

#: Float element types by ONNX number.
_FLOATS = {ONNX_DTYPE[d]: d for d in FLOAT_DTYPES}


def _roi_aligns(graph: Any) -> List[Any]:
    return [n for n in graph.node if n.op_type == "RoiAlign" and n.domain in ("", "ai.onnx")]


def _inferred(model: Any) -> Tuple[Dict[str, Tuple[Optional[int], ...]], Dict[str, int]]:
    """Every tensor's shape (``None`` for a symbolic dimension) and element type that ONNX shape inference finds."""
    shapes, types = onnx_tensors(model)
    return {k: static_dims(v) for k, v in shapes.items()}, types


def _zero_image_pads(g: Any) -> Dict[str, Any]:
    """Output name -> node of each ``Pad`` that appends one image of zeros along axis 0 of a 4-D tensor
    (:data:`~mx_trt.export.converters.vision.ZERO_IMAGE_PADS`, constant mode, no value or 0): the
    converter's image for ROIs of invalid images."""
    from onnx import helper, numpy_helper

    consts = {i.name: i for i in g.initializer}
    out: Dict[str, Any] = {}
    for n in g.node:
        if n.op_type != "Pad" or len(n.input) < 2 or n.input[1] not in consts:
            continue
        mode = next((helper.get_attribute_value(a) for a in n.attribute if a.name == "mode"), b"constant")
        value = n.input[2] if len(n.input) > 2 else ""
        if (mode.decode() if isinstance(mode, bytes) else mode) != "constant":
            continue
        if value and (value not in consts or np.any(numpy_helper.to_array(consts[value]) != 0)):
            continue
        if tuple(numpy_helper.to_array(consts[n.input[1]])) == ZERO_IMAGE_PADS:
            out[n.output[0]] = n
    return out


def _unpadded(g: Any) -> Dict[str, Tuple[str, Optional[int], List[str]]]:
    """Per ``RoiAlign`` feature map that is the export's zero-image ``Pad`` (or a ``Cast`` of it, as
    ``to_fp16`` leaves it): (the tensor before the ``Pad``, the ``Cast``'s type or ``None``, the outputs of
    those nodes, which nothing else reads, to drop)."""
    from onnx import helper

    pads = _zero_image_pads(g)
    producers = {o: n for n in g.node for o in n.output}
    consumers: Dict[str, int] = {}
    for n in g.node:
        for t in n.input:
            consumers[t] = consumers.get(t, 0) + 1
    out: Dict[str, Tuple[str, Optional[int], List[str]]] = {}
    for ra in _roi_aligns(g):
        x = ra.input[0]
        if x in pads:
            out[x] = (pads[x].input[0], None, [x] if consumers[x] == 1 else [])
            continue
        cast = producers.get(x)
        if cast is not None and cast.op_type == "Cast" and cast.input[0] in pads:
            padded = cast.input[0]
            to = next(helper.get_attribute_value(a) for a in cast.attribute if a.name == "to")
            gone = [x] if consumers[x] == 1 else []
            gone += [padded] if gone and consumers[padded] == 1 else []
            out[x] = (pads[padded].input[0], int(to), gone)
    return out


def lower_roi_align(exported: ExportedSubgraph) -> ExportedSubgraph:
    """``exported`` with each ``RoiAlign`` written with ``MatMul``; ``exported`` itself when it has none.

    The copy shares ``external`` (its weights) with ``exported``; the model is a new
    protobuf holding the rewritten nodes in the place of each ``RoiAlign``, and
    ``origin`` maps them to its MXNet node.

    Raises:
        EngineBuildError: a ``RoiAlign`` the export does not emit (``max`` mode, an
            adaptive sampling grid) or whose feature map has no static shape.

    Complexity: one ONNX shape inference, then O(nodes).
    """
    from onnx import helper, numpy_helper

    if not _roi_aligns(exported.model.graph):
        return exported
    model = type(exported.model)()
    model.CopyFrom(exported.model)
    g = model.graph
    shapes, types = _inferred(model)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    used: Set[str] = {t for n in g.node for t in (*n.input, *n.output)}
    used |= {i.name for i in g.initializer} | {n.name for n in g.node}
    origin = dict(exported.origin)

    def unique(base: str) -> str:
        cand, k = base, 1
        while cand in used:
            cand, k = f"{base}_{k}", k + 1
        used.add(cand)
        return cand

    sources = _unpadded(g)
    dropped = {t for _, _, gone in sources.values() for t in gone}
    nodes: List[Any] = []
    for node in g.node:
        if node.output and node.output[0] in dropped:
            continue
        if node.op_type != "RoiAlign" or node.domain not in ("", "ai.onnx"):
            nodes.append(node)
            continue
        where = f"{exported.model.graph.name}: RoiAlign node {node.name!r}"
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        mode = attrs.get("mode", b"avg")
        ratio = int(attrs.get("sampling_ratio", 0))
        if (mode.decode() if isinstance(mode, bytes) else mode) != "avg" or ratio <= 0:
            raise EngineBuildError(f"{where}: only mode 'avg' with a fixed sampling_ratio is written out for TensorRT "
                                   f"(got mode {mode!r}, sampling_ratio {ratio})")
        x, rois, index = node.input[:3]
        dtype = _FLOATS.get(types.get(x, 0))
        if dtype is None:
            raise EngineBuildError(f"{where}: its feature map {x!r} is not a float tensor")
        # The export's image of zeros for ROIs of invalid images: the feature map itself instead, whose batch
        # index the form below reads as invalid (zeros), rather than a copy of it gathered per ROI.
        x, cast_to, _ = sources.get(x, (x, None, []))
        found = shapes.get(x)
        if found is None or len(found) != 4 or any(d is None or d <= 0 for d in found):
            raise EngineBuildError(f"{where}: its feature map {x!r} has no static 4-D shape ({found}), which "
                                   "TensorRT's form of RoiAlign needs")
        xshape = tuple(int(d or 0) for d in found)
        ctm = attrs.get("coordinate_transformation_mode", b"half_pixel")
        aligned = (ctm.decode() if isinstance(ctm, bytes) else ctm) == "half_pixel"
        oh, ow = int(attrs.get("output_height", 1)), int(attrs.get("output_width", 1))
        nroi = (shapes.get(rois) or (None,))[0]
        spec = OpSpec(name=node.name, op="_contrib_ROIAlign",
                      attrs={"pooled_size": f"({oh}, {ow})", "spatial_scale": repr(float(attrs.get("spatial_scale", 1.0))),
                             "sample_ratio": str(ratio), "aligned": str(aligned)},
                      in_shapes=(xshape, (nroi or -1, 5)), in_dtypes=(dtype, dtype),
                      out_shapes=((nroi or -1, int(xshape[1]), oh, ow),), out_dtypes=(dtype,))
        mx_name = origin.get(node.name, node.name)

        def add_node(op_type: str, ins: Sequence[str], outs: Sequence[str], node_attrs: Dict[str, Any],
                     domain: str = "", _mx: str = mx_name, _base: str = node.name) -> None:
            name = unique(f"{_base}/{op_type}")
            clean = {k: v for k, v in node_attrs.items() if v is not None}
            clean.update({k: numpy_helper.from_array(np.asarray(v)) for k, v in clean.items() if isinstance(v, np.ndarray)})
            nodes.append(helper.make_node(op_type, list(ins), list(outs), name=name, doc_string=_mx,
                                          domain=domain or None, **clean))
            origin[name] = _mx

        def add_const(arr: np.ndarray, name: str) -> str:
            # A Constant node, not an initializer: the weights a stripped plan is refitted with are the
            # export's initializers, which these are not (TensorRT then keeps the plan's weights in it).
            nodes.append(helper.make_node("Constant", [], [name], name=unique(f"{name}/Constant"),
                                          value=numpy_helper.from_array(np.ascontiguousarray(arr), name)))
            return name

        ctx = ConvContext(spec, [x, ""], list(node.output[:1]), opset, add_node, add_const, unique, {})
        if cast_to is not None:
            ctx.inputs[0] = ctx.emit("Cast", [x], to=cast_to)[0]
        # MXNet's (R, 5) ROIs: the image index as the first column, in the feature map's type.
        column = ctx.emit("Unsqueeze", [cast(ctx, index, dtype), ctx.const(np.asarray([1], np.int64), "axes")])[0]
        ctx.inputs[1] = ctx.emit("Concat", [column, rois], axis=1)[0]
        roi_align_matmul(ctx)
        origin.pop(node.name, None)
    del g.node[:]
    g.node.extend(nodes)
    logger.debug("%s: %d RoiAlign node(s) written with MatMul for TensorRT", g.name,
                 len(_roi_aligns(exported.model.graph)))
    return dataclasses.replace(exported, model=model, origin=origin)

