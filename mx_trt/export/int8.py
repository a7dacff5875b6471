"""INT8 as explicit QuantizeLinear/DequantizeLinear in an exported subgraph.

TensorRT 10+, TensorRT-RTX (strongly typed networks) and ONNX Runtime's CPU
integer kernels all read INT8 from Q/DQ pairs in the graph. This pass, run on
the ONNX model of one subgraph after conversion, places them as TensorRT
recommends:

* **Weights** of ``Conv``, ``Gemm`` and ``MatMul`` (Convolution, FullyConnected,
  dot): an int8 initializer quantized symmetrically per output channel, and a
  ``DequantizeLinear`` with that axis (weight-only DQ).
* **Activations** entering those operators: one ``Q -> DQ`` pair per tensor,
  with the per-tensor scale of the calibration table. A tensor reached through
  operators that do not change values (``Flatten``, ``Reshape``, ``MaxPool``, ...)
  takes the range of the tensor before them.
* **Residual adds**: the input that is not a convolution's output (the one
  TensorRT cannot fuse into the convolution), or both with ``residual="both"``.

Nothing is placed around pooling, activations, concatenation or softmax. A
BatchNorm that follows a convolution (exported as ``Mul`` and ``Add`` by
per-channel constants) is first folded into the convolution's weights, so the
weights quantized are those that run.

Backends differ in the form they run fastest: :class:`Int8Style` says which.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Set, Tuple

import numpy as np

from mx_trt.errors import ConversionError
from mx_trt.export.calibration import TensorRange
from mx_trt.export.subgraph import ExportedSubgraph, initializer_protos

logger = logging.getLogger(__name__)

#: ONNX operators whose output holds the same values as their first input (rearranged or selected).
PASS_THROUGH = frozenset({"Flatten", "Reshape", "Transpose", "MaxPool", "Identity", "Squeeze", "Unsqueeze"})


@dataclass(frozen=True)
class Int8Style:
    """How a backend wants its INT8 graphs (the calibration table is the same for all).

    Attributes:
        activation: ``"int8"``: symmetric activations, zero point 0 (TensorRT's only
            form). ``"uint8"``: unsigned activations over the range seen (asymmetric;
            zero point 0 for tensors that are never negative): ONNX Runtime's fastest
            CPU kernels (U8S8) and its Relu/Clip folding into the quantized convolution.
        residual: ``"shortcut"``: Q/DQ on the add input that no convolution produces
            (TensorRT fuses the add into the other input's convolution). ``"both"``:
            on both inputs, so the producing convolution gets a quantized output
            (ONNX Runtime fuses ``DQ -> Conv -> Q`` into one integer convolution).
        bias: ``"float"`` (TensorRT) or ``"int32"``: quantized with the scale
            ``input scale x weight scale`` (what ONNX Runtime's fusion expects).
        reduce_range: Weights in 7 bits (``[-63, 63]``), so that CPUs without VNNI do
            not saturate the 16-bit sums of ``vpmaddubsw``.
        pool: Also quantize the input of average pooling, so that the convolution
            before a global pooling gets a quantized output (ONNX Runtime then runs it
            as an integer convolution).
    """

    activation: str = "int8"
    residual: str = "shortcut"
    bias: str = "float"
    reduce_range: bool = False
    pool: bool = False


TENSORRT_STYLE = Int8Style()


@dataclass
class Int8Report:
    """What the int8 pass did to one subgraph.

    Attributes:
        quantized: MXNet node names of the operators that run in int8.
        kept_float: MXNet node name -> why it stays in float.
    """

    quantized: List[str] = field(default_factory=list)
    kept_float: Dict[str, str] = field(default_factory=dict)

    def summary(self) -> str:
        text = f"{len(self.quantized)} operator(s) in int8"
        if self.kept_float:
            text += "; in float: " + ", ".join(f"{k} ({v})" for k, v in sorted(self.kept_float.items()))
        return text


class _Model:
    """The mutable graph of the pass: nodes, initializer arrays, producers and consumers."""

    def __init__(self, exported: ExportedSubgraph) -> None:
        import onnx
        from onnx import numpy_helper

        self.model = onnx.ModelProto()
        self.model.CopyFrom(exported.model)
        g = self.model.graph
        self.arrays: Dict[str, np.ndarray] = {}
        for t in g.initializer:
            arr = exported.external.get(t.name)
            self.arrays[t.name] = arr if arr is not None else numpy_helper.to_array(t)
        self.nodes: List[Any] = list(g.node)
        self.outputs = {o.name for o in g.output}
        self.used: Set[str] = set(self.arrays) | {i.name for i in g.input} | {t for n in self.nodes for t in n.output}

    def producer(self) -> Dict[str, Any]:
        return {t: n for n in self.nodes for t in n.output}

    def consumers(self) -> Dict[str, List[Any]]:
        out: Dict[str, List[Any]] = {}
        for n in self.nodes:
            for t in n.input:
                out.setdefault(t, []).append(n)
        return out

    def fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.used:
            name, k = f"{base}_{k}", k + 1
        self.used.add(name)
        return name

    def const(self, arr: np.ndarray, base: str) -> str:
        name = self.fresh(base)
        self.arrays[name] = np.array(arr, order="C")  # keeps 0-d scalars 0-d (ascontiguousarray would not)
        return name


def _attr(node: Any, name: str, default: Any) -> Any:
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _channel_vector(arr: Optional[np.ndarray], c: int, rank: int) -> Optional[np.ndarray]:
    """``arr`` as a length-``c`` vector if it broadcasts over an ``(N, c, ...)`` tensor of ``rank`` dims
    along the channel axis only (or is a scalar), else ``None``."""
    if arr is None or arr.dtype != np.float32 or arr.ndim > rank:
        return None
    if arr.size == 1:
        return np.full(c, float(arr.reshape(-1)[0]), np.float32)
    padded = (1,) * (rank - arr.ndim) + tuple(arr.shape)
    if padded[1] == c and all(d == 1 for k, d in enumerate(padded) if k != 1):
        return arr.reshape(c)
    return None


def fold_batchnorm(m: _Model) -> int:
    """Fold ``Conv -> Mul(c) [-> Add(c)]`` chains by per-channel constants into the convolution. Returns how many.

    The convolution's output must feed only the ``Mul`` (and the ``Mul`` only the
    ``Add``), and neither may be a graph output. Exact up to float rounding.
    """
    folded = 0
    changed = True
    while changed:
        changed = False
        cons = m.consumers()
        for conv in list(m.nodes):
            if conv.op_type != "Conv" or len(conv.input) < 2 or conv.input[1] not in m.arrays:
                continue
            w = m.arrays[conv.input[1]]
            if w.dtype != np.float32:
                continue
            c = w.shape[0]
            out = conv.output[0]
            nxt = cons.get(out, [])
            if len(nxt) != 1 or out in m.outputs or nxt[0].op_type not in ("Mul", "Add"):
                continue
            op = nxt[0]
            other = op.input[1] if op.input[0] == out else op.input[0]
            vec = _channel_vector(m.arrays.get(other), c, w.ndim)
            if vec is None or op.input[0] == op.input[1] or len(w.shape) < 3:
                continue
            bias = m.arrays[conv.input[2]] if len(conv.input) > 2 and conv.input[2] in m.arrays else np.zeros(c, np.float32)
            if op.op_type == "Mul":
                w = w * vec.reshape((c,) + (1,) * (w.ndim - 1))
                bias = bias * vec
            else:
                bias = bias + vec
            ins = [conv.input[0], m.const(w.astype(np.float32), f"{conv.input[1]}_folded"),
                   m.const(bias.astype(np.float32), f"{conv.name}_bias_folded")]
            del conv.input[:]
            conv.input.extend(ins)
            conv.output[0] = op.output[0]
            m.nodes.remove(op)
            folded += 1
            changed = True
            break
    return folded


def _act_qparams(r: TensorRange, style: Int8Style) -> Tuple[float, Any]:
    """(scale, zero point) of an activation tensor.

    int8: symmetric, ``scale = amax / 127``, zero point 0. uint8: the range seen,
    clipped to ``[-amax, amax]`` and widened to hold 0, over all 256 levels (a
    tensor that is never negative gets zero point 0, which lets ONNX Runtime drop
    a Relu before the quantization).
    """
    amax = r.amax if r.amax > 0 else 1.0
    if style.activation == "uint8":
        lo, hi = min(max(r.min, -amax), 0.0), max(min(r.max, amax), 0.0)
        if hi - lo <= 0:
            return amax / 255.0, np.uint8(0)
        scale = (hi - lo) / 255.0
        return scale, np.uint8(min(255, max(0, int(round(-lo / scale)))))
    return amax / 127.0, np.int8(0)


def quantize_weight(w: np.ndarray, axis: int, reduce_range: bool = False) -> Tuple[np.ndarray, np.ndarray]:
    """Symmetric per-channel int8 of ``w`` along ``axis``: ``(int8 values, float32 scales)``.

    A channel of zeros gets scale 1. Values lie in ``[-127, 127]`` (``[-63, 63]`` with ``reduce_range``).
    """
    qmax = 63.0 if reduce_range else 127.0
    moved = np.moveaxis(w.astype(np.float32), axis, 0)
    amax = np.abs(moved.reshape(moved.shape[0], -1)).max(axis=1) if moved.size else np.zeros(moved.shape[0])
    scale = np.where(amax > 0, amax / qmax, 1.0).astype(np.float32)
    q = np.clip(np.rint(moved / scale.reshape((-1,) + (1,) * (moved.ndim - 1))), -qmax, qmax).astype(np.int8)
    return np.ascontiguousarray(np.moveaxis(q, 0, axis)), scale


class _Placer:
    """Decides and inserts the Q/DQ pairs of one model (see :func:`quantize_int8`)."""

    def __init__(self, m: _Model, ranges: Mapping[str, TensorRange], style: Int8Style, exclude: Mapping[str, str]) -> None:
        self.m, self.ranges, self.style, self.exclude = m, ranges, style, exclude
        self.prod = m.producer()
        self.report = Int8Report()
        self.act: Dict[str, Tuple[str, float]] = {}  # tensor -> (dequantized tensor, scale)
        self.inserted: List[Tuple[str, List[Any]]] = []  # (tensor, [Q, DQ]) to place before first use

    def range_of(self, t: str) -> Optional[TensorRange]:
        """The calibrated range of ``t``, looking through operators that do not change values."""
        for _ in range(16):
            if t in self.ranges:
                return self.ranges[t]
            p = self.prod.get(t)
            if p is None or p.op_type not in PASS_THROUGH or not p.input:
                return None
            t = p.input[0]
        return None

    def quantize_act(self, t: str) -> Tuple[str, float]:
        if t in self.act:
            return self.act[t]
        from onnx import helper

        r = self.range_of(t)
        assert r is not None
        scale, zp = _act_qparams(r, self.style)
        s = self.m.const(np.array(scale, np.float32), f"{t}_scale")
        z = self.m.const(np.array(zp), f"{t}_zero_point")
        q, dq = self.m.fresh(f"{t}_quantized"), self.m.fresh(f"{t}_dequantized")
        nodes = [helper.make_node("QuantizeLinear", [t, s, z], [q], name=self.m.fresh(f"{t}/QuantizeLinear")),
                 helper.make_node("DequantizeLinear", [q, s, z], [dq], name=self.m.fresh(f"{t}/DequantizeLinear"))]
        self.inserted.append((t, nodes))
        self.act[t] = (dq, scale)
        return self.act[t]

    def weight_dq(self, name: str, axis: int) -> Tuple[str, np.ndarray]:
        from onnx import helper

        q, scale = quantize_weight(self.m.arrays[name], axis, self.style.reduce_range)
        qn = self.m.const(q, f"{name}_int8")
        sn = self.m.const(scale, f"{name}_scale")
        zn = self.m.const(np.zeros(scale.shape, np.int8), f"{name}_zero_point")
        out = self.m.fresh(f"{name}_dequantized")
        self.m.nodes.insert(0, helper.make_node("DequantizeLinear", [qn, sn, zn], [out], name=self.m.fresh(f"{name}/DequantizeLinear"),
                                                axis=axis))
        return out, scale

    def bias_dq(self, name: str, scale: np.ndarray) -> str:
        from onnx import helper

        b = self.m.arrays[name].astype(np.float64).reshape(-1)
        q = np.clip(np.rint(b / scale), -2**31 + 1, 2**31 - 1).astype(np.int32)
        qn = self.m.const(q, f"{name}_int32")
        sn = self.m.const(scale.astype(np.float32), f"{name}_scale")
        zn = self.m.const(np.zeros(scale.shape, np.int32), f"{name}_zero_point")
        out = self.m.fresh(f"{name}_dequantized")
        self.m.nodes.insert(0, helper.make_node("DequantizeLinear", [qn, sn, zn], [out], name=self.m.fresh(f"{name}/DequantizeLinear"),
                                                axis=0))
        return out

    def weighted(self, node: Any) -> Optional[Tuple[List[int], int, int]]:
        """(activation input slots, weight slot, weight axis) of a Conv/Gemm/MatMul, or ``None``."""
        ins = list(node.input)
        if node.op_type == "Conv" and len(ins) >= 2 and ins[1] in self.m.arrays:
            return [0], 1, 0
        if node.op_type == "Gemm" and len(ins) >= 2 and ins[1] in self.m.arrays and ins[0] not in self.m.arrays \
                and not _attr(node, "transA", 0) and self.m.arrays[ins[1]].ndim == 2:
            return [0], 1, 0 if _attr(node, "transB", 0) else 1
        if node.op_type == "MatMul" and len(ins) == 2:
            if ins[1] in self.m.arrays and ins[0] not in self.m.arrays and self.m.arrays[ins[1]].ndim == 2:
                return [0], 1, 1
            if ins[0] not in self.m.arrays and ins[1] not in self.m.arrays:
                return [0, 1], -1, -1
        return None

    def run(self) -> None:
        for node in list(self.m.nodes):
            mx_name = node.doc_string or node.name
            if node.op_type == "Add":
                self.add(node, mx_name)
                continue
            if node.op_type in ("GlobalAveragePool", "AveragePool") and self.style.pool and mx_name not in self.exclude \
                    and node.input and self.range_of(node.input[0]) is not None:
                node.input[0] = self.quantize_act(node.input[0])[0]
                continue
            plan = self.weighted(node)
            if plan is None:
                continue
            acts, wslot, axis = plan
            if mx_name in self.exclude:
                self.report.kept_float[mx_name] = self.exclude[mx_name]
                continue
            if wslot >= 0 and self.m.arrays[node.input[wslot]].dtype != np.float32:
                continue
            missing = [node.input[i] for i in acts if self.range_of(node.input[i]) is None]
            if missing:
                self.report.kept_float[mx_name] = f"no calibrated range for {', '.join(missing)}"
                continue
            scales = []
            for i in acts:
                dq, s = self.quantize_act(node.input[i])
                node.input[i] = dq
                scales.append(s)
            if wslot >= 0:
                wname = node.input[wslot]
                node.input[wslot], wscale = self.weight_dq(wname, axis)
                bias_slot = 2
                if self.style.bias == "int32" and len(node.input) > bias_slot and node.input[bias_slot] in self.m.arrays \
                        and self.m.arrays[node.input[bias_slot]].size == wscale.size \
                        and (node.op_type == "Conv" or (node.op_type == "Gemm" and axis == 0
                                                        and float(_attr(node, "alpha", 1.0)) == 1.0
                                                        and float(_attr(node, "beta", 1.0)) == 1.0)):
                    node.input[bias_slot] = self.bias_dq(node.input[bias_slot], wscale.astype(np.float64) * scales[0])
            self.report.quantized.append(mx_name)

    def add(self, node: Any, mx_name: str) -> None:
        """A residual add: both inputs activations with a calibrated range."""
        ins = list(node.input)
        if len(ins) != 2 or any(t in self.m.arrays for t in ins) or ins[0] == ins[1]:
            return
        if any(self.range_of(t) is None for t in ins):
            return
        if mx_name in self.exclude:
            self.report.kept_float[mx_name] = self.exclude[mx_name]
            return
        chosen = [0, 1]
        if self.style.residual == "shortcut":
            from_conv = [self.prod.get(t) is not None and self.prod[t].op_type == "Conv" for t in ins]
            if from_conv[0] != from_conv[1]:
                chosen = [0 if from_conv[1] else 1]
            elif from_conv[0]:
                # Both from convolutions: the one computed last takes the add; quantize the other.
                order = {id(n): k for k, n in enumerate(self.m.nodes)}
                chosen = [0 if order[id(self.prod[ins[0]])] < order[id(self.prod[ins[1]])] else 1]
        for i in chosen:
            node.input[i] = self.quantize_act(ins[i])[0]
        self.report.quantized.append(mx_name)

    def place(self) -> None:
        """Insert each activation's Q/DQ pair right before the first node that reads its output."""
        for t, pair in self.inserted:
            dq = pair[1].output[0]
            first = next(k for k, n in enumerate(self.m.nodes) if dq in n.input)
            self.m.nodes[first:first] = pair
            if t not in self.prod and t not in {i.name for i in self.m.model.graph.input} and t not in self.m.arrays:
                raise ConversionError(f"int8: tensor {t!r} has no producer")


def quantize_int8(exported: ExportedSubgraph, ranges: Mapping[str, TensorRange], style: Int8Style = TENSORRT_STYLE,
                  exclude: Optional[Mapping[str, str]] = None) -> Tuple[ExportedSubgraph, Int8Report]:
    """A copy of ``exported`` with INT8 Q/DQ pairs (see the module docstring), and what was quantized.

    Args:
        exported: The float32 subgraph.
        ranges: Calibrated range per tensor name (:meth:`CalibrationTable.ranges`).
        style: The backend's form (:class:`Int8Style`).
        exclude: MXNet node name -> reason, for operators kept in float.

    Contract: inputs, outputs and their types are unchanged; an operator whose
    activation input has no range stays in float and is reported.

    Complexity: O(nodes^2) in the worst case (folding restarts after each fold;
    subgraphs are small) plus the weight bytes.
    """
    m = _Model(exported)
    folded = fold_batchnorm(m)
    placer = _Placer(m, ranges, style, dict(exclude or {}))
    placer.run()
    placer.place()
    g = m.model.graph
    del g.node[:]
    g.node.extend(m.nodes)
    del g.value_info[:]
    referenced = {t for n in m.nodes for t in n.input}
    arrays = {k: v for k, v in m.arrays.items() if k in referenced}
    location = exported.external_location or f"{g.name}.onnx.data"
    external, weight_bytes = _set_initializers(m.model, arrays, location)
    opset = next((o for o in m.model.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is not None and opset.version < 13:
        opset.version = 13  # per-axis DequantizeLinear
    if folded:
        logger.debug("%s: folded %d BatchNorm(s) into convolutions before quantizing", g.name, folded)
    return ExportedSubgraph(
        model=m.model, input_names=list(exported.input_names), output_names=list(exported.output_names),
        origin=dict(exported.origin), weight_bytes=weight_bytes, external=external,
        external_location=location if external else "",
        input_specs=list(exported.input_specs), output_specs=list(exported.output_specs), batch_dim=exported.batch_dim,
        plugin_shapes=list(exported.plugin_shapes), node_ops=dict(exported.node_ops),
    ), placer.report


def _set_initializers(model: Any, arrays: Mapping[str, np.ndarray], location: str) -> Tuple[Dict[str, np.ndarray], int]:
    """Replace the model's initializers by ``arrays``: large ones as external data (as the exporter lays them out)."""
    g = model.graph
    del g.initializer[:]
    protos, external = initializer_protos(arrays, location)
    g.initializer.extend(protos)
    return external, sum(arr.nbytes for arr in arrays.values())