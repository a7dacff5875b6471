"""Whether an exported model computes each sample of its batch on its own: the condition for splitting a batch.

An engine may run a batch of ``B`` as several smaller batches, side by side on
separate CPU streams (:mod:`mx_trt.builder.backends.openvino`), only when
sample ``i`` of every output depends on sample ``i`` of the inputs alone, and
the graph holds no constant that spells out ``B``. That is not guessed from the
MXNet operators: it is read off the exported ONNX graph, whose operators have a
fixed meaning, by propagating one of two states through it in topological order:

* ``CONST``: computed from initializers and ``Constant`` nodes only;
* ``BATCHED``: axis 0 is the batch and sample ``i`` depends on input sample ``i`` only.

Every graph input and output must have dimension 0 equal to ``B``. Each
operator has a rule (:data:`_RULES`) that says when a batched input leaves its
output batched: elementwise operators when the other inputs are batched at the
same rank or constants that broadcast over the batch (dimension 0 of 1, or a
lower rank); convolutions and pooling with constant weights; reductions,
softmax, sorting, concatenation, splits and slices along an axis other than 0;
``Reshape`` to a constant shape that keeps dimension 0 (``0``, or ``-1`` with
the sample's size in the other dimensions); ``Transpose`` that keeps axis 0
first; and so on. An operator without a rule, or one whose rule fails, makes
the model not separable, with the reason. Conservative by construction: a
``False`` can only cost speed.

Complexity: O(nodes + edges), plus one ONNX shape inference (ranks and constant
shapes; it reads no weight data).
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from mx_trt.export.shapes import onnx_tensors, static_dims

logger = logging.getLogger(__name__)

CONST, BATCHED = "const", "batched"

#: Operators applied element by element (several inputs broadcast as numpy does).
ELEMENTWISE = frozenset({
    "Abs", "Acos", "Acosh", "Add", "And", "Asin", "Asinh", "Atan", "Atanh", "BitShift", "Cast", "CastLike", "Ceil",
    "Celu", "Clip", "Cos", "Cosh", "Div", "Dropout", "Elu", "Equal", "Erf", "Exp", "Floor", "Gelu",
    "Greater", "GreaterOrEqual", "HardSigmoid", "HardSwish", "Identity", "IsInf", "IsNaN", "LeakyRelu", "Less",
    "LessOrEqual", "Log", "Max", "Mean", "Min", "Mish", "Mod", "Mul", "Neg", "Not", "Or", "Pow", "PRelu", "Reciprocal", "Relu", "Round", "Selu", "Shrink", "Sigmoid", "Sign", "Sin", "Sinh", "Softplus",
    "Softsign", "Sqrt", "Sub", "Sum", "Tan", "Tanh", "ThresholdedRelu", "Where", "Xor",
})
#: Operators over input 0's samples, every other input (weights, biases, statistics) a constant.
PER_SAMPLE = frozenset({
    "AveragePool", "BatchNormalization", "Conv", "ConvInteger", "ConvTranspose", "DepthToSpace", "GlobalAveragePool",
    "GlobalLpPool", "GroupNormalization", "GlobalMaxPool", "InstanceNormalization", "LpNormalization", "LpPool", "LRN", "MaxPool",
    "QLinearConv", "SpaceToDepth",
})
#: Operators along one axis (attribute ``axis``, with ONNX's default; CumSum's is its input 1): separable unless
#: it is axis 0.
ALONG_AXIS = {"Softmax": -1, "LogSoftmax": -1, "Hardmax": -1, "ArgMax": 0, "ArgMin": 0, "CumSum": None,
              "Split": 0, "TopK": -1, "Flatten": 1, "LayerNormalization": -1}
#: Reductions: separable when their axes are given and exclude 0.
REDUCE = frozenset({"ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean",
                    "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare"})


class _Graph:
    """What the rules read: each tensor's state, rank and (when known) shape; constant values of initializers."""

    def __init__(self, model: Any) -> None:
        from onnx import numpy_helper

        try:
            found = onnx_tensors(model)[0]
        except Exception as exc:  # shape inference refuses some custom domains: the shapes the model declares
            logger.debug("separable: ONNX shape inference failed (%s); ranks from the graph alone", exc)
            found = onnx_tensors(model, infer=False)[0]
        g = model.graph
        self.shapes: Dict[str, Tuple[Any, ...]] = {k: static_dims(v) for k, v in found.items()}
        self.values: Dict[str, np.ndarray] = {}
        for t in g.initializer:
            self.shapes[t.name] = tuple(t.dims)
            if not t.external_data and int(np.prod(t.dims, dtype=np.int64)) <= 64:
                self.values[t.name] = numpy_helper.to_array(t)
        for n in g.node:
            if n.op_type == "Constant":
                for a in n.attribute:
                    if a.name == "value":
                        arr = numpy_helper.to_array(a.t)
                        self.shapes[n.output[0]] = tuple(arr.shape)
                        if arr.size <= 64:
                            self.values[n.output[0]] = arr
        #: Tensor name -> CONST or BATCHED, filled by :func:`batch_separable`'s walk.
        self.state: Dict[str, str] = {}

    def rank(self, name: str) -> Optional[int]:
        s = self.shapes.get(name)
        return len(s) if s is not None else None

    def value(self, name: str) -> Optional[List[int]]:
        v = self.values.get(name)
        return None if v is None else [int(x) for x in np.asarray(v).reshape(-1)]


def _attr(node: Any, name: str, default: Any = None) -> Any:
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _is_axis0(axis: int, rank: Optional[int]) -> Optional[bool]:
    """Whether ``axis`` (negative counts from the end) is axis 0; ``None`` if that needs the unknown rank."""
    if axis >= 0:
        return axis == 0
    return None if rank is None else axis + rank == 0


def _axes_of(node: Any, g: _Graph, input_index: int) -> Optional[List[int]]:
    """The ``axes`` of ``node``: its attribute, else its constant input ``input_index``; ``None`` if unknown."""
    axes = _attr(node, "axes")
    if axes is not None:
        return list(axes)
    if len(node.input) > input_index and node.input[input_index]:
        return g.value(node.input[input_index])
    return None


def _broadcast(node: Any, g: _Graph, inputs: Sequence[str]) -> Optional[str]:
    """Elementwise broadcasting: batched inputs at the output's rank, constants that do not span the batch."""
    ranks = [g.rank(n) for n in inputs]
    if any(r is None for r in ranks):
        return "an input of unknown rank"
    out = max(r for r in ranks if r is not None)
    for name, r in zip(inputs, ranks):
        if g.state[name] == BATCHED and r != out:
            return f"batched input {name} of rank {r} broadcast to rank {out}"
        if g.state[name] == CONST and r == out and out > 0 and g.shapes[name][0] != 1:
            return f"constant {name} spans dimension 0 ({g.shapes[name][0]})"
    return None


def _reshape(node: Any, g: _Graph) -> Optional[str]:
    shape = g.value(node.input[1]) if len(node.input) > 1 and g.state.get(node.input[1]) == CONST else None
    if shape is None:
        return "a shape that is not a small constant"
    if not shape or shape[0] == 0:
        return None if shape else "a scalar result"
    src = g.shapes.get(node.input[0])
    if shape[0] == -1 and src is not None and all(d for d in src[1:]) and all(d > 0 for d in shape[1:]):
        if int(np.prod(shape[1:], dtype=np.int64)) == int(np.prod(src[1:], dtype=np.int64)):
            return None
    return f"shape {shape} does not keep dimension 0"


def _transpose(node: Any, g: _Graph) -> Optional[str]:
    perm = _attr(node, "perm")
    return None if perm is not None and list(perm)[0] == 0 else f"perm {perm} moves axis 0"


def _squeeze(node: Any, g: _Graph) -> Optional[str]:
    axes = _axes_of(node, g, 1)
    if axes is None:
        return "axes that are not constant" if node.op_type == "Unsqueeze" else "no axes (it may drop axis 0)"
    return _axes_reason(axes, g.rank(node.output[0] if node.op_type == "Unsqueeze" else node.input[0]))


def _reduce(node: Any, g: _Graph) -> Optional[str]:
    axes = _axes_of(node, g, 1)
    if not axes:
        return "no axes (it reduces over the batch)"
    return _axes_reason(axes, g.rank(node.input[0]))


def _along_axis(node: Any, g: _Graph) -> Optional[str]:
    if node.op_type == "CumSum":
        v = g.value(node.input[1]) if len(node.input) > 1 else None
        axis = v[0] if v else None
    else:
        axis = _attr(node, "axis", ALONG_AXIS[node.op_type])
    if axis is None:
        return "an axis that is not constant"
    why = _axes_reason([int(axis)], g.rank(node.input[0]))
    if why is None and any(g.state[n] != CONST for n in node.input[1:] if n):
        return "a batched second input"
    return why


def _concat(node: Any, g: _Graph) -> Optional[str]:
    """Batched parts joined along an axis other than 0 (a constant part would have to span the batch)."""
    if any(g.state[n] != BATCHED for n in node.input):
        return "constant parts"
    return _axes_reason([int(_attr(node, "axis", 0))], g.rank(node.input[0]))


def _gather(node: Any, g: _Graph) -> Optional[str]:
    """Constant indices along a sample's axis, or batched indices into a constant table along its axis 0."""
    data, idx = g.state[node.input[0]], g.state[node.input[1]]
    zero = _is_axis0(int(_attr(node, "axis", 0)), g.rank(node.input[0]))
    if data == BATCHED and idx == CONST:
        return None if zero is False else "it may gather along axis 0"
    if data == CONST and idx == BATCHED:
        return None if zero else "batched indices along another axis than 0"
    return "batched data and indices"


def _quantize(node: Any, g: _Graph) -> Optional[str]:
    """Q/DQ: a per-tensor scale, or per-channel along an axis other than 0."""
    why = _broadcast(node, g, [n for n in node.input if n])
    if why is not None:
        return why
    scale = g.shapes.get(node.input[1])
    if scale and int(np.prod([d or 0 for d in scale])) != 1:
        zero = _is_axis0(int(_attr(node, "axis", 1)), g.rank(node.input[0]))
        if zero is None or zero:
            return "per-channel along axis 0"
    return None


def _slice(node: Any, g: _Graph) -> Optional[str]:
    if len(node.input) < 4 or not node.input[3]:
        return "no axes (it may slice the batch)"
    return _axes_reason(g.value(node.input[3]), g.rank(node.input[0]))


def _axes_reason(axes: Optional[List[int]], rank: Optional[int]) -> Optional[str]:
    """``None`` when none of ``axes`` (of a tensor of ``rank``) is axis 0, else why it may be."""
    if axes is None:
        return "axes that are not constant"
    for a in axes:
        zero = _is_axis0(a, rank)
        if zero is None or zero:
            return f"axis {a} may be axis 0"
    return None


def _pad(node: Any, g: _Graph) -> Optional[str]:
    pads = g.value(node.input[1]) if len(node.input) > 1 else _attr(node, "pads")
    rank = g.rank(node.input[0])
    if pads is None or rank is None or len(node.input) > 3 and node.input[3]:
        return "pads that are not constant, or axes"
    return None if pads[0] == 0 and pads[rank] == 0 else "it pads the batch"


def _first_dim_one(index: int, what: str) -> Callable[[Any, _Graph], Optional[str]]:
    def rule(node: Any, g: _Graph) -> Optional[str]:
        v = g.value(node.input[index]) if len(node.input) > index and node.input[index] else None
        rank = g.rank(node.input[0])
        if v is None or rank is None or len(v) != rank:
            return f"{what} that are not constant at the input's rank"
        return None if v[0] == 1 else f"{what} {v} change the batch"
    return rule


def _resize(node: Any, g: _Graph) -> Optional[str]:
    if len(node.input) > 3 and node.input[3]:
        return "sizes (they spell out the batch)"
    return _first_dim_one(2, "scales")(node, g) if len(node.input) > 2 and node.input[2] else "no scales"


def _gemm(node: Any, g: _Graph) -> Optional[str]:
    if _attr(node, "transA", 0):
        return "transA"
    return None if g.state[node.input[0]] == BATCHED and all(g.state[n] == CONST for n in node.input[1:]) else \
        "operand B or C batched"


def _matmul(node: Any, g: _Graph) -> Optional[str]:
    a, b = node.input[0], node.input[1]
    ra, rb = g.rank(a), g.rank(b)
    if ra is None or rb is None:
        return "an operand of unknown rank"
    if g.state[a] == BATCHED and g.state[b] == CONST:
        return None if ra >= 2 and rb <= ra and (rb < ra or g.shapes[b][0] == 1 or ra == 2) else "operands that mix samples"
    if g.state[b] == BATCHED and g.state[a] == CONST:
        return None if rb >= 3 and ra < rb else "a batched right operand of rank 2"
    return None if ra == rb and ra >= 3 else "batched operands of different ranks"


_RULES: Dict[str, Callable[[Any, _Graph], Optional[str]]] = {
    "Reshape": _reshape, "Transpose": _transpose, "Squeeze": _squeeze, "Unsqueeze": _squeeze, "Slice": _slice,
    "Pad": _pad, "Resize": _resize, "Upsample": _first_dim_one(1, "scales"), "Expand": _first_dim_one(1, "shape"),
    "Tile": _first_dim_one(1, "repeats"), "Gemm": _gemm, "MatMul": _matmul, "Gather": _gather,
    "QuantizeLinear": _quantize, "DequantizeLinear": _quantize, "Concat": _concat,
    **{op: _reduce for op in REDUCE}, **{op: _along_axis for op in ALONG_AXIS},
}


def _node_rule(node: Any, g: _Graph) -> Optional[str]:
    """``None`` when ``node`` keeps its batched inputs' samples apart, else why not."""
    op = node.op_type
    if node.domain not in ("", "ai.onnx"):
        return f"operator {node.domain}.{op}"
    if op in ELEMENTWISE:
        return _broadcast(node, g, [n for n in node.input if n])
    if op in PER_SAMPLE:
        if g.state[node.input[0]] != BATCHED or any(g.state[n] != CONST for n in node.input[1:] if n):
            return "batched weights"
        return None
    rule = _RULES.get(op)
    if rule is None:
        return f"no rule for operator {op}"
    return rule(node, g)


def tensor_shapes(model: Any) -> "_Graph":
    """What :func:`batch_separable` and :func:`model_macs` read of ``model`` (one ONNX shape inference), to
    give both when both are asked."""
    return _Graph(model)


def batch_separable(model: Any, batch: int, shapes: Optional["_Graph"] = None) -> Optional[str]:
    """``None`` when ``model`` computes each of its ``batch`` samples on its own, else the first reason it may not.

    Args:
        model: An ONNX ``ModelProto`` (initializers may be external: only their dims are read).
        batch: Dimension 0 of every input and output.
        shapes: :func:`tensor_shapes` of ``model``, if already read.
    """
    if batch < 2:
        return f"batch {batch}"
    g = shapes if shapes is not None else _Graph(model)
    g.state = {t.name: CONST for t in model.graph.initializer}
    g.state[""] = CONST  # an omitted optional input
    graph = model.graph
    inits = {t.name for t in graph.initializer}
    for v in list(graph.input) + list(graph.output):
        if v.name in inits:
            continue
        dims = g.shapes.get(v.name)
        if not dims or dims[0] != batch:
            return f"tensor {v.name} is not batch-major ({dims})"
    for v in graph.input:
        if v.name not in inits:
            g.state[v.name] = BATCHED
    for node in graph.node:
        if any(n not in g.state for n in node.input):
            return f"ONNX node {node.name} reads a tensor defined later"
        if all(g.state[n] == CONST for n in node.input):
            if node.op_type.startswith("Random"):
                return f"operator {node.op_type}"
            for out in node.output:
                g.state[out] = CONST
            continue
        if node.op_type in ("Shape", "Size"):
            return f"operator {node.op_type} of a batched tensor (its value is the batch)"
        why = _node_rule(node, g)
        if why is not None:
            return f"ONNX node {node.name or node.op_type} ({node.op_type}): {why}"
        for out in node.output:
            if out:
                g.state[out] = BATCHED
    for v in graph.output:
        if g.state.get(v.name) != BATCHED:
            return f"output {v.name} does not depend on the batch"
    return None


def model_macs(model: Any, shapes: Optional["_Graph"] = None) -> int:
    """Multiply-adds of ``model``'s convolutions and matrix products (``Conv``, ``ConvTranspose``, ``Gemm``,
    ``MatMul``), from ONNX shape inference (``shapes``: :func:`tensor_shapes`, if already read); nodes of
    unknown shapes count 0. O(nodes)."""
    g = shapes if shapes is not None else _Graph(model)
    total = 0
    for node in model.graph.node:
        try:
            if node.op_type in ("Conv", "ConvTranspose"):
                # Conv: each output element reads Cin/group x kernel; ConvTranspose: each input element
                # writes Cout/group x kernel. Both are dimensions 1: of the weight.
                w, y = g.shapes[node.input[1]], g.shapes[node.output[0] if node.op_type == "Conv" else node.input[0]]
                total += int(np.prod(y, dtype=np.int64)) * int(np.prod(w[1:], dtype=np.int64))
            elif node.op_type in ("Gemm", "MatMul"):
                a, y = g.shapes[node.input[0]], g.shapes[node.output[0]]
                k = a[0] if node.op_type == "Gemm" and _attr(node, "transA", 0) else a[-1]
                total += int(np.prod(y, dtype=np.int64)) * int(k)
        except (KeyError, TypeError, IndexError):  # a shape ONNX could not infer
            continue
    return total


def split_sizes(batch: int, streams: int) -> Tuple[int, int]:
    """``(sub-batch, streams)`` for running ``batch`` samples on ``streams`` CPU streams.

    Chunks small enough that each stream takes about four of them, so one stream
    slowed by another process's load hands its share to the others; the sub-batch
    divides ``batch`` so that every chunk has the compiled shape. ``(batch, 1)``:
    no split.
    """
    streams = max(1, min(streams, batch))
    if streams < 2:
        return batch, 1
    target = max(1, batch // (4 * streams))
    sub = max(d for d in range(1, target + 1) if batch % d == 0)
    return sub, min(streams, batch // sub)
