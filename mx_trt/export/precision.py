"""Reduced precision carried by the graph itself (strongly typed networks).

TensorRT-RTX and recent TensorRT build only strongly typed networks: the types
in the ONNX graph decide the precision, there is no fp16 builder flag. So an
fp16 engine is an fp16 *graph*: float32 weights and constants become float16,
every internal ``Cast`` to float32 casts to float16 instead, and casts at the
subgraph's edges keep the fused node's inputs and outputs in MXNet's dtypes.
"""
from __future__ import annotations

import logging
from typing import Any, Dict, List, Set

import numpy as np

from mx_trt.export.plugins import plugin_for_node
from mx_trt.export.subgraph import ExportedSubgraph

logger = logging.getLogger(__name__)

#: Inputs that ONNX requires to be float32 whatever the data type (by op, index).
_FLOAT32_ONLY_INPUTS = {"Resize": {1, 2}, "Upsample": {1}}


def to_fp16(exported: ExportedSubgraph) -> ExportedSubgraph:
    """Return a copy of ``exported`` computing in float16, with float32 I/O unchanged.

    Contract: graph inputs and outputs keep their declared types (casts are
    inserted at the edges); float32 initializers, ``Constant``/``ConstantOfShape``
    values and ``Cast(to=FLOAT)`` become float16, except inputs ONNX requires in
    float32 (Resize scales). Non-float tensors are untouched. Plugin nodes keep the
    float32 their implementation declares, and ``RoiAlign`` computes in float32 (casts around them).

    Complexity: O(nodes + initializer bytes).
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.ModelProto()
    model.CopyFrom(exported.model)
    g = model.graph
    F32, F16 = TensorProto.FLOAT, TensorProto.FLOAT16

    keep32: Set[str] = set()
    for n in g.node:
        for i in _FLOAT32_ONLY_INPUTS.get(n.op_type, ()):
            if i < len(n.input) and n.input[i]:
                keep32.add(n.input[i])

    external: Dict[str, np.ndarray] = dict(exported.external)
    weight_bytes = 0
    for t in g.initializer:
        if t.data_type == F32 and t.name not in keep32:
            if t.name in external:
                arr16 = _to_half(external[t.name])
                external[t.name] = arr16
                t.data_type = F16
                # Offsets stay valid: fp16 data is smaller than the slot reserved for it.
                for kv in t.external_data:
                    if kv.key == "length":
                        kv.value = str(arr16.nbytes)
                weight_bytes += arr16.nbytes
            else:
                t.CopyFrom(numpy_helper.from_array(_to_half(numpy_helper.to_array(t)), t.name))
                weight_bytes += int(np.prod(t.dims)) * 2
        else:
            weight_bytes += external[t.name].nbytes if t.name in external else len(t.raw_data)

    for n in g.node:
        for a in n.attribute:
            if n.op_type == "Cast" and a.name == "to" and a.i == F32:
                a.i = F16
            elif a.type == onnx.AttributeProto.TENSOR and a.t.data_type == F32 and n.op_type in ("Constant", "ConstantOfShape"):
                a.t.CopyFrom(numpy_helper.from_array(_to_half(numpy_helper.to_array(a.t)), a.t.name))

    _keep_float32_nodes(g)

    # Edges: cast float32 inputs down once, float32 outputs up once.
    renamed: Dict[str, str] = {}
    head: List[Any] = []
    for vi in g.input:
        if vi.type.tensor_type.elem_type == F32:
            inner = f"{vi.name}__fp16"
            renamed[vi.name] = inner
            head.append(helper.make_node("Cast", [vi.name], [inner], name=f"{vi.name}/to_fp16", to=F16))
    for n in g.node:
        for i, x in enumerate(n.input):
            if x in renamed and not (n.op_type in _FLOAT32_ONLY_INPUTS and i in _FLOAT32_ONLY_INPUTS[n.op_type]):
                n.input[i] = renamed[x]
    tail: List[Any] = []
    for vo in g.output:
        if vo.type.tensor_type.elem_type == F32:
            inner = f"{vo.name}__fp16"
            for n in g.node:
                for i, x in enumerate(n.output):
                    if x == vo.name:
                        n.output[i] = inner
            for n in g.node:
                for i, x in enumerate(n.input):
                    if x == vo.name:
                        n.input[i] = inner
            src = renamed.get(vo.name, inner)
            tail.append(helper.make_node("Cast", [src], [vo.name], name=f"{vo.name}/to_fp32", to=F32))
    nodes = head + list(g.node) + tail
    del g.node[:]
    g.node.extend(nodes)
    del g.value_info[:]
    return ExportedSubgraph(
        model=model,
        input_names=list(exported.input_names),
        output_names=list(exported.output_names),
        origin=dict(exported.origin),
        weight_bytes=weight_bytes,
        external=external,
        external_location=exported.external_location,
        input_specs=list(exported.input_specs),
        output_specs=list(exported.output_specs),
        batch_dim=exported.batch_dim,
        plugin_shapes=list(exported.plugin_shapes), node_ops=dict(exported.node_ops),
    )


#: Standard nodes that stay float32 in a float16 graph: op type -> (float inputs, float outputs).
#: ONNX Runtime's CPU ``RoiAlign`` has no float16 kernel (TensorRT's lowered form is float32 there too).
_FLOAT32_NODES = {"RoiAlign": (("float32", "float32"), ("float32",))}


def _keep_float32_nodes(g: Any) -> None:
    """Plugin nodes compute in the types their implementation declares, and :data:`_FLOAT32_NODES` in
    float32: they read their float inputs through a ``Cast`` to float32 and give float16 back. O(nodes)."""
    from onnx import TensorProto, helper

    nodes: List[Any] = []
    for n in g.node:
        if n.domain:
            p = plugin_for_node(n.domain, n.op_type)
            types = (p.in_dtypes, p.out_dtypes) if p is not None else None
        else:
            types = _FLOAT32_NODES.get(n.op_type)
        if types is None:
            nodes.append(n)
            continue
        in_dtypes, out_dtypes = types
        for i, x in enumerate(n.input):
            if x and i < len(in_dtypes) and in_dtypes[i] == "float32":
                up = f"{x}__to_fp32_{n.name}"
                nodes.append(helper.make_node("Cast", [x], [up], name=f"{up}/Cast", to=TensorProto.FLOAT))
                n.input[i] = up
        tail = []
        for j, y in enumerate(n.output):
            if y and j < len(out_dtypes) and out_dtypes[j] == "float32":
                wide = f"{y}__fp32"
                n.output[j] = wide
                tail.append(helper.make_node("Cast", [wide], [y], name=f"{y}/to_fp16", to=TensorProto.FLOAT16))
        nodes.append(n)
        nodes.extend(tail)
    del g.node[:]
    g.node.extend(nodes)


_HALF_MAX = float(np.finfo(np.float16).max)


def _to_half(arr: np.ndarray) -> np.ndarray:
    """float16 copy of a float32 constant; finite values past fp16's range saturate at +-65504
    (a mask value of -1e30 must stay a very negative number, not become -inf)."""
    finite = np.isfinite(arr)
    return np.where(finite, np.clip(arr, -_HALF_MAX, _HALF_MAX), arr).astype(np.float16)
