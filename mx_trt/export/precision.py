"""Reduced precision carried by the graph itself (strongly typed networks): float16 and bfloat16.

TensorRT-RTX and recent TensorRT build only strongly typed networks: the types
in the ONNX graph decide the precision, there is no fp16 or bf16 builder flag. So
a reduced-precision engine is a reduced-precision *graph*: float32 weights and
constants become float16 (:func:`to_fp16`) or bfloat16 (:func:`to_bf16`), every
internal ``Cast`` to float32 casts to that type instead, and casts at the
subgraph's edges keep the fused node's inputs and outputs in MXNet's dtypes.

numpy has no bfloat16: :func:`to_bfloat16_bits` rounds float32 values to the
uint16 bit patterns of bfloat16, which the graph stores as ``BFLOAT16`` tensors
(external weights as uint16 arrays, which the writer dumps as bytes).
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Dict, List, NamedTuple, Set

import numpy as np

from mx_trt.export.plugins import plugin_for_node
from mx_trt.export.subgraph import ExportedSubgraph

logger = logging.getLogger(__name__)

#: Inputs that ONNX requires to be float32 whatever the data type (by op, index).
_FLOAT32_ONLY_INPUTS = {"Resize": {1, 2}, "Upsample": {1}}


class _Target(NamedTuple):
    """A reduced float type a graph is converted to.

    Attributes:
        type_name: Its ``onnx.TensorProto`` member (``FLOAT16``, ``BFLOAT16``).
        tag: Its short name in the names of inserted casts and tensors (``fp16``, ``bf16``).
        convert: float32 values -> the array stored for them (2 bytes per value).
    """

    type_name: str
    tag: str
    convert: Callable[[np.ndarray], np.ndarray]


def to_fp16(exported: ExportedSubgraph) -> ExportedSubgraph:
    """Return a copy of ``exported`` computing in float16, with float32 I/O unchanged.

    Contract: graph inputs and outputs keep their declared types (casts are
    inserted at the edges); float32 initializers, ``Constant``/``ConstantOfShape``
    values and ``Cast(to=FLOAT)`` become float16 (finite values past its range
    saturate at +-65504), except inputs ONNX requires in float32 (Resize scales).
    Non-float tensors are untouched. Plugin nodes keep the float32 their
    implementation declares, and ``RoiAlign`` computes in float32 (casts around them).

    Complexity: O(nodes + initializer bytes).
    """
    return _to_reduced(exported, _FP16)


def to_bf16(exported: ExportedSubgraph) -> ExportedSubgraph:
    """Return a copy of ``exported`` computing in bfloat16, with float32 I/O unchanged.

    Contract: as :func:`to_fp16`, with ``BFLOAT16`` for ``FLOAT16``: initializers
    and ``Constant``/``ConstantOfShape`` values are rounded to nearest even
    (:func:`to_bfloat16_bits`) and stored as ``BFLOAT16`` raw data, external
    weights as uint16 arrays (their ``length`` updated, offsets kept); edge casts
    are named ``<tensor>__bf16`` / ``<tensor>/to_bf16``.

    Complexity: O(nodes + initializer bytes).
    """
    return _to_reduced(exported, _BF16)


def _to_reduced(exported: ExportedSubgraph, target: _Target) -> ExportedSubgraph:
    """:func:`to_fp16` / :func:`to_bf16` for ``target``. O(nodes + initializer bytes)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.ModelProto()
    model.CopyFrom(exported.model)
    g = model.graph
    F32, LOW = TensorProto.FLOAT, int(getattr(TensorProto, target.type_name))
    tag = target.tag

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
                low = target.convert(external[t.name])
                external[t.name] = low
                t.data_type = LOW
                # Offsets stay valid: 2-byte data is smaller than the slot reserved for float32.
                for kv in t.external_data:
                    if kv.key == "length":
                        kv.value = str(low.nbytes)
                weight_bytes += low.nbytes
            else:
                low = target.convert(numpy_helper.to_array(t))
                t.CopyFrom(_tensor(low, t.name, LOW))
                weight_bytes += low.nbytes
        else:
            weight_bytes += external[t.name].nbytes if t.name in external else len(t.raw_data)

    for n in g.node:
        for a in n.attribute:
            if n.op_type == "Cast" and a.name == "to" and a.i == F32:
                a.i = LOW
            elif a.type == onnx.AttributeProto.TENSOR and a.t.data_type == F32 and n.op_type in ("Constant", "ConstantOfShape"):
                a.t.CopyFrom(_tensor(target.convert(numpy_helper.to_array(a.t)), a.t.name, LOW))

    _keep_float32_nodes(g, LOW, tag)

    # Edges: cast float32 inputs down once, float32 outputs up once.
    renamed: Dict[str, str] = {}
    head: List[Any] = []
    for vi in g.input:
        if vi.type.tensor_type.elem_type == F32:
            inner = f"{vi.name}__{tag}"
            renamed[vi.name] = inner
            head.append(helper.make_node("Cast", [vi.name], [inner], name=f"{vi.name}/to_{tag}", to=LOW))
    for n in g.node:
        for i, x in enumerate(n.input):
            if x in renamed and not (n.op_type in _FLOAT32_ONLY_INPUTS and i in _FLOAT32_ONLY_INPUTS[n.op_type]):
                n.input[i] = renamed[x]
    tail: List[Any] = []
    for vo in g.output:
        if vo.type.tensor_type.elem_type == F32:
            inner = f"{vo.name}__{tag}"
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


def _tensor(values: np.ndarray, name: str, data_type: int) -> Any:
    """A ``TensorProto`` of ONNX type ``data_type`` whose little-endian raw data are ``values``'s bytes
    (for float16 what ``numpy_helper.from_array`` writes; bfloat16 has no numpy type). O(values)."""
    from onnx import TensorProto

    t = TensorProto()
    if name:
        t.name = name
    t.data_type = data_type
    t.dims.extend(values.shape)
    t.raw_data = np.ascontiguousarray(values, dtype=values.dtype.newbyteorder("<")).tobytes()
    return t


#: Standard nodes that stay float32 in a reduced-precision graph: op type -> (float inputs, float outputs).
#: ONNX Runtime's CPU ``RoiAlign`` has no float16 kernel (TensorRT's lowered form is float32 there too).
_FLOAT32_NODES = {"RoiAlign": (("float32", "float32"), ("float32",))}


def _keep_float32_nodes(g: Any, low: int, tag: str) -> None:
    """Plugin nodes compute in the types their implementation declares, and :data:`_FLOAT32_NODES` in
    float32: they read their float inputs through a ``Cast`` to float32 and give ``low`` (the graph's
    ONNX element type, named ``tag`` in the casts) back. O(nodes)."""
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
                tail.append(helper.make_node("Cast", [wide], [y], name=f"{y}/to_{tag}", to=low))
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


#: The largest finite bfloat16 (bits 0x7F7F), as float32.
BFLOAT16_MAX = float(np.array([0x7F7F0000], np.uint32).view(np.float32)[0])


def to_bfloat16_bits(values: np.ndarray) -> np.ndarray:
    """The bfloat16 bit patterns (uint16, same shape) of ``values`` taken as float32.

    Rounds to nearest, ties to even (the upper 16 bits of the float32, plus one
    where the dropped half is past 0x8000 or exactly 0x8000 with an odd kept
    part); +-inf stay +-inf, NaN stays a NaN of its sign with the quiet bit set,
    and finite values past bfloat16's range saturate at +-:data:`BFLOAT16_MAX`
    (as :func:`to_fp16` saturates: a mask value of -3.4e38 must not become -inf).
    Decoding: ``(bits.astype(np.uint32) << 16).view(np.float32)``.

    Complexity: O(values), a few temporary arrays of its size.
    """
    a = np.array(values, dtype=np.float32).reshape(-1)  # a copy: changed in place below
    nan = np.isnan(a)
    over = np.isfinite(a) & (np.abs(a) > np.float32(BFLOAT16_MAX))
    a[over] = np.copysign(np.float32(BFLOAT16_MAX), a[over])
    bits = a.view(np.uint32)
    quiet = (bits[nan] >> 16) | 0x0040
    bits[nan] = 0  # no carry out of a NaN's mantissa
    bits += (0x7FFF + ((bits >> 16) & 1)).astype(np.uint32)
    bits >>= 16
    out = bits.astype(np.uint16)
    out[nan] = quiet
    return out.reshape(np.shape(values))


_FP16 = _Target("FLOAT16", "fp16", _to_half)
_BF16 = _Target("BFLOAT16", "bf16", to_bfloat16_bits)
