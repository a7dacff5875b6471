"""Whether an exported model computes each sample of its batch on its own: the condition for splitting a batch.

An engine may run a batch of ``B`` as several smaller batches, side by side on
separate CPU streams (:mod:`mx_trt.builder.backends.openvino`), only when
sample ``i`` of every output depends on sample ``i`` of the inputs alone. That
is not guessed from the MXNet operators: it is read off the exported ONNX
graph, whose operators have a fixed meaning, by propagating a state through it
in topological order:

* ``CONST``: computed from initializers and ``Constant`` nodes only;
* ``BATCHED`` at a position ``(axis, inner)``: dimension ``axis`` has the size
  ``B * inner``, and its index divided by ``inner`` is the sample, on which
  alone that slice depends. Graph inputs and outputs are at ``(0, 1)``; a
  ``Transpose`` moves the batch to another axis (BERT's time-major layers
  hold it at axis 1), a ``Reshape`` may fold it with the attention heads into
  one axis (``(T, B, 12 * 192)`` to ``(T, B * 12, 192)``: ``(1, 12)``);
* ``SHAPE`` at ``(index, inner)``: a shape computed from a batched tensor's
  ``Shape``, whose element ``index`` is ``B * inner`` and whose other elements
  do not depend on the batch. Sliced, gathered, cast and concatenated with
  constants, it may size a ``Resize``, a ``Reshape``, an ``Expand`` or a
  ``ConstantOfShape`` (GluonCV's bilinear upsampling and ``zeros_like``): a
  chunk computes it from its own batch.

Each operator has a rule (:data:`_RULES`) that gives its output's position from
its inputs', or says why its samples may mix: elementwise operators when their
batched inputs agree and their constants do not span the batch axis;
convolutions and pooling with the batch at axis 0 and constant weights;
reductions, softmax, sorting, concatenation, splits and slices along other
axes; matrix products whose contraction is not the batch axis; ``Reshape``
when the batch stays the outer factor of one axis; and so on. An operator
without a rule, or one whose rule fails, makes the model not separable, with
the reason. Conservative by construction: a ``False`` can only cost speed.

Constants must not spell out ``B`` either: a chunk is compiled at its own
batch. The exceptions are a ``Reshape`` or an ``Expand`` whose constant target
shape gives the batch axis's size (MXNet's exporter writes ``[96, 32]`` for a
mask of 8 samples and 12 heads, ``[8, 256, 13, 13, 2]`` for YOLOv3's
upsampling): :attr:`BatchSplit.reshapes` holds the shape to write instead, with
``-1`` (``Reshape``) or ``1`` (``Expand``) at the batch axis, and
:func:`without_batch_constants` writes it into a copy of the model.

Complexity: O(nodes + edges), plus one ONNX shape inference (ranks and constant
shapes; it reads no weight data).
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from mx_trt.export.shapes import onnx_tensors, static_dims

logger = logging.getLogger(__name__)

CONST, BATCHED, SHAPE = "const", "batched", "shape"
#: The state of a tensor that may mix samples, in a walk that goes on past such an operator (:func:`walk`).
MIXED = "mixed"
#: Where a batched tensor holds its batch: ``(axis, inner)``, dimension ``axis`` of size ``batch * inner``.
Pos = Tuple[int, int]

#: Operators applied element by element (several inputs broadcast as numpy does).
ELEMENTWISE = frozenset({
    "Abs", "Acos", "Acosh", "Add", "And", "Asin", "Asinh", "Atan", "Atanh", "BitShift", "Cast", "CastLike", "Ceil",
    "Celu", "Clip", "Cos", "Cosh", "Div", "Dropout", "Elu", "Equal", "Erf", "Exp", "Floor", "Gelu",
    "Greater", "GreaterOrEqual", "HardSigmoid", "HardSwish", "Identity", "IsInf", "IsNaN", "LeakyRelu", "Less",
    "LessOrEqual", "Log", "Max", "Mean", "Min", "Mish", "Mod", "Mul", "Neg", "Not", "Or", "Pow", "PRelu", "Reciprocal", "Relu", "Round", "Selu", "Shrink", "Sigmoid", "Sign", "Sin", "Sinh", "Softplus",
    "Softsign", "Sqrt", "Sub", "Sum", "Tan", "Tanh", "ThresholdedRelu", "Where", "Xor",
})
#: Operators over input 0's samples along its axis 0 (channels at axis 1), every other input (weights,
#: biases, statistics) a constant.
PER_SAMPLE = frozenset({
    "AveragePool", "BatchNormalization", "Conv", "ConvInteger", "ConvTranspose", "DepthToSpace", "GlobalAveragePool",
    "GlobalLpPool", "GroupNormalization", "GlobalMaxPool", "InstanceNormalization", "LpNormalization", "LpPool", "LRN", "MaxPool",
    "QLinearConv", "SpaceToDepth",
})
#: Operators along one axis (attribute ``axis``, with ONNX's default; CumSum's is its input 1): separable unless
#: it is the batch axis. Softmax, LogSoftmax and Hardmax before opset 13 work on every axis from ``axis`` on.
ALONG_AXIS = {"Softmax": -1, "LogSoftmax": -1, "Hardmax": -1, "ArgMax": 0, "ArgMin": 0, "CumSum": None,
              "Split": 0, "TopK": -1}
#: Operators over every axis from ``axis`` on (default): separable when the batch axis comes before it.
FROM_AXIS = {"LayerNormalization": -1}
#: Reductions: separable when their axes are given and exclude the batch axis.
REDUCE = frozenset({"ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean",
                    "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare"})


class _Mixes(Exception):
    """An operator may mix samples; the message says why."""


@dataclasses.dataclass(frozen=True)
class BatchSplit:
    """What :func:`batch_split` found.

    Attributes:
        reason: ``None`` when the model computes each sample on its own, else the first reason it may not.
        reshapes: Output name of each ``Reshape`` or ``Expand`` whose constant target shape spells out the
            batch -> the shape to give it instead (``-1`` or ``1`` at the batch axis); empty unless separable.
    """

    reason: Optional[str]
    reshapes: Mapping[str, Tuple[int, ...]] = dataclasses.field(default_factory=dict)


class _Graph:
    """What the rules read: each tensor's state, rank and (when known) shape; constant values of initializers."""

    def __init__(self, model: Any) -> None:
        from onnx import numpy_helper

        try:
            found, types = onnx_tensors(model)
        except Exception as exc:  # shape inference refuses some custom domains: the shapes the model declares
            logger.debug("separable: ONNX shape inference failed (%s); ranks from the graph alone", exc)
            found, types = onnx_tensors(model, infer=False)
        g = model.graph
        self.shapes: Dict[str, Tuple[Any, ...]] = {k: static_dims(v) for k, v in found.items()}
        #: Tensor name -> ONNX element type, where known.
        self.types: Dict[str, int] = dict(types)
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
        self.opset = next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), 17)
        #: Tensor name -> CONST or BATCHED, filled by :func:`batch_split`'s walk.
        self.state: Dict[str, str] = {}
        #: Batched tensor name -> its batch's position.
        self.pos: Dict[str, Pos] = {}
        self.batch = 0
        #: Reshape or Expand output -> the batch-free target shape to write (:attr:`BatchSplit.reshapes`).
        self.reshapes: Dict[str, Tuple[int, ...]] = {}

    def rank(self, name: str) -> Optional[int]:
        s = self.shapes.get(name)
        return len(s) if s is not None else None

    def value(self, name: str) -> Optional[List[int]]:
        v = self.values.get(name)
        return None if v is None else [int(x) for x in np.asarray(v).reshape(-1)]

    def batched(self, name: str) -> bool:
        return self.state.get(name) == BATCHED


def _attr(node: Any, name: str, default: Any = None) -> Any:
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _norm(axis: int, rank: Optional[int]) -> int:
    """``axis`` counted from the start (negative counts from the end)."""
    if axis >= 0:
        return axis
    if rank is None:
        raise _Mixes(f"axis {axis} of a tensor of unknown rank")
    return axis + rank


def _axes_of(node: Any, g: _Graph, input_index: int) -> Optional[List[int]]:
    """The ``axes`` of ``node``: its attribute, else its constant input ``input_index``; ``None`` if unknown."""
    axes = _attr(node, "axes")
    if axes is not None:
        return list(axes)
    if len(node.input) > input_index and node.input[input_index]:
        return g.value(node.input[input_index])  # a constant: the rules ask _data first
    return None


def _data(node: Any, g: _Graph) -> Pos:
    """Input 0's position, every other input a constant."""
    if not g.batched(node.input[0]) or any(g.batched(n) for n in node.input[1:] if n):
        raise _Mixes("batched weights or parameters")
    return g.pos[node.input[0]]


def _clamp(index: int, length: int) -> int:
    """A ``start`` or ``end`` index into ``length`` elements as ONNX's ``Shape`` and ``Slice`` read it."""
    return min(max(index + length if index < 0 else index, 0), length)


def _prod(dims: Sequence[Any]) -> int:
    if any(not isinstance(d, (int, np.integer)) or d < 0 for d in dims):
        raise _Mixes(f"dimensions {tuple(dims)} not known")
    return int(np.prod(dims, dtype=np.int64))


def _broadcast(node: Any, g: _Graph, inputs: Sequence[str]) -> Pos:
    """Elementwise broadcasting: batched inputs at the output's rank and one position, constants that do not
    span the batch axis."""
    ranks = [g.rank(n) for n in inputs]
    if any(r is None for r in ranks):
        raise _Mixes("an input of unknown rank")
    out = max(r for r in ranks if r is not None)
    pos: Optional[Pos] = None
    for name, r in zip(inputs, ranks):
        if g.batched(name):
            if r != out:
                raise _Mixes(f"batched input {name} of rank {r} broadcast to rank {out}")
            if pos is not None and g.pos[name] != pos:
                raise _Mixes(f"inputs batched at {pos} and {g.pos[name]} (axis, inner)")
            pos = g.pos[name]
    assert pos is not None  # a node with no batched input is a constant
    for name, r in zip(inputs, ranks):
        at = pos[0] - (out - (r or 0))
        if not g.batched(name) and at >= 0 and g.shapes[name][at] != 1:
            raise _Mixes(f"constant {name} spans the batch axis {pos[0]} ({g.shapes[name][at]})")
    return pos


def _regroup(src: Sequence[Any], dst: Sequence[Any], pos: Pos, batch: int) -> Pos:
    """Where the batch at ``pos`` of a tensor of shape ``src`` lands when its elements are read as shape ``dst``
    (row-major, as ``Reshape`` and ``Flatten`` read them): the outer factor of one axis, or :class:`_Mixes`."""
    axis, inner = pos
    pre = _prod(src[:axis])  # the elements before one sample's, in each group
    if all(isinstance(d, (int, np.integer)) for d in src):
        post = inner * _prod(src[axis + 1:])  # one sample's elements in each group
    else:  # the same count from the target's size
        total = _prod(dst)
        if total % (pre * batch):
            raise _Mixes(f"shape {tuple(dst)} does not hold a whole batch")
        post = total // (pre * batch)
    acc = 1
    for k, d in enumerate(dst):
        if not isinstance(d, (int, np.integer)):
            break
        if acc == pre and d % batch == 0 and d // batch * _prod(dst[k + 1:]) == post:
            return k, d // batch
        acc *= int(d)
        if acc > pre:
            break
    raise _Mixes(f"the batch at {pos} of {tuple(src)} does not stay the outer factor of one axis of {tuple(dst)}")


def _reshape(node: Any, g: _Graph) -> Pos:
    if g.batched(node.input[1]):
        raise _Mixes("a batched shape")
    shape = g.value(node.input[1])
    src, dst = g.shapes.get(node.input[0]), g.shapes.get(node.output[0])
    if shape is None or src is None or dst is None or len(shape) != len(dst):
        raise _Mixes("a shape that is not a small constant, or unknown ranks")
    pos = _regroup(src, dst, g.pos[node.input[0]], g.batch)
    k, b = pos[0], g.pos[node.input[0]][0]
    zero_copies = not _attr(node, "allowzero", 0)
    # The target is free of the batch when its size at k is inferred (-1) or copied from the batch axis (0),
    # and no 0 copies the batch axis's size to another axis.
    free = shape[k] == -1 or (zero_copies and shape[k] == 0 and k == b)
    if zero_copies and b < len(shape) and shape[b] == 0 and k != b:
        free = False
    if not free:
        if any(not isinstance(d, (int, np.integer)) or d <= 0 for d in dst):
            raise _Mixes(f"a target shape {shape} that spells out the batch, and a result of unknown size")
        g.reshapes[node.output[0]] = tuple(-1 if j == k else int(d) for j, d in enumerate(dst))
    return pos


def _flatten(node: Any, g: _Graph) -> Pos:
    src, dst = g.shapes.get(node.input[0]), g.shapes.get(node.output[0])
    if src is None or dst is None:
        raise _Mixes("unknown shapes")
    return _regroup(src, dst, _data(node, g), g.batch)


def _transpose(node: Any, g: _Graph) -> Pos:
    axis, inner = _data(node, g)
    perm = _attr(node, "perm")
    if perm is None:
        rank = g.rank(node.input[0])
        if rank is None:
            raise _Mixes("no perm, and an unknown rank")
        perm = list(range(rank))[::-1]
    return list(perm).index(axis), inner


def _squeeze(node: Any, g: _Graph) -> Pos:
    axis, inner = _data(node, g)
    axes = _axes_of(node, g, 1)
    if axes is None:
        raise _Mixes("axes that are not constant" if node.op_type == "Unsqueeze" else "no axes (it may drop the batch)")
    if node.op_type == "Squeeze":
        dropped = {_norm(a, g.rank(node.input[0])) for a in axes}
        if axis in dropped:
            raise _Mixes(f"it drops the batch axis {axis}")
        return axis - sum(1 for a in dropped if a < axis), inner
    added = {_norm(a, g.rank(node.output[0])) for a in axes}
    kept = [j for j in range(len(added) + (g.rank(node.input[0]) or 0)) if j not in added]
    return kept[axis], inner


def _reduce(node: Any, g: _Graph) -> Pos:
    axis, inner = _data(node, g)
    axes = _axes_of(node, g, 1)
    if not axes:
        raise _Mixes("no axes (it reduces over the batch)")
    axes = [_norm(a, g.rank(node.input[0])) for a in axes]
    if axis in axes:
        raise _Mixes(f"it reduces the batch axis {axis}")
    return (axis if _attr(node, "keepdims", 1) else axis - sum(1 for a in axes if a < axis)), inner


def _along_axis(node: Any, g: _Graph) -> Pos:
    axis, inner = _data(node, g)
    if node.op_type == "CumSum":
        v = g.value(node.input[1]) if len(node.input) > 1 else None
        along = v[0] if v else None
    else:
        along = _attr(node, "axis", ALONG_AXIS[node.op_type])
    if along is None:
        raise _Mixes("an axis that is not constant")
    a = _norm(int(along), g.rank(node.input[0]))
    if node.op_type in ("Softmax", "LogSoftmax", "Hardmax") and g.opset < 13:
        if axis >= a:  # before opset 13: over every axis from ``axis`` on
            raise _Mixes(f"axis {along} covers the batch axis {axis}")
    elif a == axis:
        raise _Mixes(f"axis {along} is the batch axis")
    if node.op_type in ("ArgMax", "ArgMin") and not _attr(node, "keepdims", 1) and a < axis:
        axis -= 1
    return axis, inner


def _from_axis(node: Any, g: _Graph) -> Pos:
    axis, inner = _data(node, g)
    a = _norm(int(_attr(node, "axis", FROM_AXIS[node.op_type])), g.rank(node.input[0]))
    if axis >= a:
        raise _Mixes(f"it normalizes from axis {a}, which covers the batch axis {axis}")
    return axis, inner


def _concat(node: Any, g: _Graph) -> Pos:
    """Batched parts at one position joined along another axis (a constant part would have to span the batch)."""
    if any(not g.batched(n) for n in node.input):
        raise _Mixes("constant parts")
    pos = {g.pos[n] for n in node.input}
    if len(pos) > 1:
        raise _Mixes(f"parts batched at {sorted(pos)}")
    (axis, inner), = pos
    if _norm(int(_attr(node, "axis", 0)), g.rank(node.input[0])) == axis:
        raise _Mixes(f"it joins along the batch axis {axis}")
    return axis, inner


def _gather(node: Any, g: _Graph) -> Pos:
    """Constant indices along another axis than the batch's, or batched indices into a constant table."""
    data, idx = node.input[0], node.input[1]
    along = _norm(int(_attr(node, "axis", 0)), g.rank(data))
    if g.batched(data) and not g.batched(idx):
        axis, inner = g.pos[data]
        if along == axis:
            raise _Mixes(f"it gathers along the batch axis {axis}")
        r = g.rank(idx)
        if r is None:
            raise _Mixes("indices of unknown rank")
        return (axis if axis < along else axis + r - 1), inner
    if idx and g.batched(idx) and not g.batched(data):
        axis, inner = g.pos[idx]
        return along + axis, inner
    raise _Mixes("batched data and indices")


def _quantize(node: Any, g: _Graph) -> Pos:
    """Q/DQ: a per-tensor scale, or per-channel along another axis than the batch's."""
    axis, inner = _data(node, g)
    scale = g.shapes.get(node.input[1])
    if scale is None or _prod(scale) != 1:
        if _norm(int(_attr(node, "axis", 1)), g.rank(node.input[0])) == axis:
            raise _Mixes(f"per-channel along the batch axis {axis}")
    return axis, inner


def _slice(node: Any, g: _Graph) -> Pos:
    axis, inner = _data(node, g)
    if len(node.input) < 4 or not node.input[3]:
        raise _Mixes("no axes (it may slice the batch)")
    axes = g.value(node.input[3])
    if axes is None:
        raise _Mixes("axes that are not constant")
    if axis in {_norm(a, g.rank(node.input[0])) for a in axes}:
        raise _Mixes(f"it slices the batch axis {axis}")
    return axis, inner


def _pad(node: Any, g: _Graph) -> Pos:
    axis, inner = _data(node, g)
    pads = g.value(node.input[1]) if len(node.input) > 1 else _attr(node, "pads")
    rank = g.rank(node.input[0])
    if pads is None or rank is None or len(pads) != 2 * rank or len(node.input) > 3 and node.input[3]:
        raise _Mixes("pads that are not constant, or axes")
    if pads[axis] or pads[axis + rank]:
        raise _Mixes(f"it pads the batch axis {axis}")
    return axis, inner


def _per_axis(index: int, what: str, keeps: float) -> Callable[[Any, _Graph], Pos]:
    """A rule for operators whose constant input ``index`` has one value per axis (``keeps`` at the batch's)."""
    def rule(node: Any, g: _Graph) -> Pos:
        axis, inner = _data(node, g)
        v = g.values.get(node.input[index]) if len(node.input) > index and node.input[index] else None
        rank = g.rank(node.input[0])
        if v is None or rank is None or v.size < rank:
            raise _Mixes(f"{what} that are not constant at the input's rank or more")
        flat = np.asarray(v).reshape(-1)
        shift = flat.size - rank  # Expand may add leading axes
        if flat[axis + shift] != keeps:
            raise _Mixes(f"{what} {flat.tolist()} change the batch axis {axis}")
        return axis + shift, inner
    return rule


def _expand(node: Any, g: _Graph) -> Pos:
    """``Expand`` to a constant shape: ``1`` at the batch axis, or the batch axis's own size (the exporter writes
    ``[8, 256, 13, 13, 2]`` for YOLOv3's upsampling of 8 samples), which a chunk's model reads as ``1``
    (:attr:`BatchSplit.reshapes`)."""
    axis, inner = _data(node, g)
    v = g.values.get(node.input[1]) if len(node.input) > 1 and node.input[1] else None
    dims = g.shapes.get(node.input[0])
    if v is None or dims is None or v.size < len(dims):
        raise _Mixes("a shape that is not constant at the input's rank or more")
    flat = np.asarray(v).reshape(-1)
    at = axis + flat.size - len(dims)  # Expand may add leading axes
    if flat[at] != 1:
        if flat[at] != dims[axis]:
            raise _Mixes(f"shape {flat.tolist()} changes the batch axis {axis}")
        g.reshapes[node.output[0]] = tuple(int(d) if i != at else 1 for i, d in enumerate(flat))
    return at, inner


def _resize(node: Any, g: _Graph) -> Pos:
    if len(node.input) > 3 and node.input[3]:
        raise _Mixes("sizes (they spell out the batch)")
    if len(node.input) > 2 and node.input[2]:
        return _per_axis(2, "scales", 1.0)(node, g)
    raise _Mixes("no scales")


def _gemm(node: Any, g: _Graph) -> Pos:
    if _attr(node, "transA", 0):
        raise _Mixes("transA")
    axis, inner = _data(node, g)
    if axis != 0:
        raise _Mixes(f"the batch at axis {axis} of operand A")
    return axis, inner


def _matmul(node: Any, g: _Graph) -> Pos:
    a, b = node.input[0], node.input[1]
    ra, rb = g.rank(a), g.rank(b)
    if ra is None or rb is None:
        raise _Mixes("an operand of unknown rank")
    if g.batched(a) and g.batched(b):
        if ra != rb or g.pos[a] != g.pos[b] or g.pos[a][0] >= ra - 2:
            raise _Mixes("batched operands that are not batched alike along a stacking axis")
        return g.pos[a]
    (x, rx), (c, rc) = ((a, ra), (b, rb)) if g.batched(a) else ((b, rb), (a, ra))
    axis, inner = g.pos[x]
    # The batched operand's contraction axis: A's last, B's second to last. A's rows or B's columns are
    # computed apart; a stacking axis must meet the constant's 1 (or nothing) there.
    if rx < 2 or axis == (rx - 1 if x == a else rx - 2):
        raise _Mixes(f"the batch at the contraction axis {axis}")
    if rc > rx:
        raise _Mixes("a constant operand of higher rank")
    at = axis - (rx - rc)
    if axis < rx - 2 and rc > 2 and at >= 0 and g.shapes[c][at] != 1:
        raise _Mixes(f"constant {c} spans the batch axis {axis}")
    return axis, inner


_RULES: Dict[str, Callable[[Any, _Graph], Pos]] = {
    "Reshape": _reshape, "Flatten": _flatten, "Transpose": _transpose, "Squeeze": _squeeze, "Unsqueeze": _squeeze,
    "Slice": _slice, "Pad": _pad, "Resize": _resize, "Upsample": _per_axis(1, "scales", 1.0),
    "Expand": _expand, "Tile": _per_axis(1, "repeats", 1), "Gemm": _gemm, "MatMul": _matmul,
    "Gather": _gather, "QuantizeLinear": _quantize, "DequantizeLinear": _quantize, "Concat": _concat,
    **{op: _reduce for op in REDUCE}, **{op: _along_axis for op in ALONG_AXIS},
    **{op: _from_axis for op in FROM_AXIS},
}


def _node_rule(node: Any, g: _Graph) -> Pos:
    """The position of ``node``'s outputs' batch, or :class:`_Mixes` with why its samples may mix."""
    op = node.op_type
    if node.domain not in ("", "ai.onnx"):
        raise _Mixes(f"operator {node.domain}.{op}")
    if op == "Size":  # Shape is :func:`_shape_of`'s
        raise _Mixes("operator Size of a batched tensor (its value is the batch)")
    if op in ELEMENTWISE:
        return _broadcast(node, g, [n for n in node.input if n])
    if op in PER_SAMPLE:
        axis, inner = _data(node, g)
        if axis != 0:
            raise _Mixes(f"the batch at axis {axis}, where the operator reads channels or positions")
        return axis, inner
    rule = _RULES.get(op)
    if rule is None:
        raise _Mixes(f"no rule for operator {op}")
    return rule(node, g)


def _step(node: Any, g: _Graph) -> Tuple[str, Optional[Pos]]:
    """The state of the outputs of ``node``, some input of which is not constant, and where their batch is."""
    if node.op_type == "Shape" and node.domain in ("", "ai.onnx"):
        return _shape_of(node, g)
    if any(g.state[n] == SHAPE for n in node.input if n):
        return _from_shape(node, g)
    return BATCHED, _node_rule(node, g)


def _shape_of(node: Any, g: _Graph) -> Tuple[str, Optional[Pos]]:
    """``Shape`` of a batched tensor (``start`` and ``end`` as ONNX clamps them): the batch's size at the batch
    axis's index, or a constant when the range leaves that axis out."""
    axis, inner = _data(node, g)
    rank = g.rank(node.input[0])
    if rank is None:
        raise _Mixes("a tensor of unknown rank")
    start, end = _clamp(int(_attr(node, "start", 0)), rank), _clamp(int(_attr(node, "end", rank)), rank)
    return (SHAPE, (axis - start, inner)) if start <= axis < end else (CONST, None)


def _from_shape(node: Any, g: _Graph) -> Tuple[str, Optional[Pos]]:
    """An operator reading a :data:`SHAPE` value: it stays one while sliced, gathered, cast or concatenated
    with constants, and sizes a batched result in ``Resize``, ``Reshape``, ``Expand`` and ``ConstantOfShape``."""
    op = node.op_type
    ins = list(node.input)
    first = ins[0]
    if node.domain not in ("", "ai.onnx"):
        raise _Mixes(f"operator {node.domain}.{op} reads the batch's size")
    if op in ("Cast", "Identity"):
        return SHAPE, g.pos[first]
    if op == "Concat":
        offset, found = 0, None
        for part in ins:
            size = (g.shapes.get(part) or (None,))[0]
            if g.state[part] == BATCHED or not isinstance(size, (int, np.integer)):
                raise _Mixes("a shape joined with a batched or unsized part")
            if g.state[part] == SHAPE:
                if found is not None:
                    raise _Mixes("two parts hold the batch's size")
                found = (offset + g.pos[part][0], g.pos[part][1])
            offset += int(size)
        return SHAPE, found
    if g.state[first] == SHAPE and op in ("Slice", "Gather"):
        if any(g.state[n] != CONST for n in ins[1:] if n):
            raise _Mixes("indices that are not constant")
        k, inner = g.pos[first]
        length = (g.shapes.get(first) or (None,))[0]
        if not isinstance(length, (int, np.integer)) or g.rank(first) != 1:
            raise _Mixes("a shape of unknown length")
        if op == "Slice":
            starts, ends = g.value(ins[1]), g.value(ins[2])
            axes = g.value(ins[3]) if len(ins) > 3 and ins[3] else [0]
            steps = g.value(ins[4]) if len(ins) > 4 and ins[4] else [1]
            if not starts or not ends or len(starts) != 1 or axes not in ([0], [-1]) or steps != [1]:
                raise _Mixes("a slice of the shape that is not one constant range")
            lo, hi = _clamp(starts[0], int(length)), _clamp(ends[0], int(length))
            return (SHAPE, (k - lo, inner)) if lo <= k < hi else (CONST, None)
        idx = g.value(ins[1])
        if idx is None or g.rank(ins[1]) != 1 or _attr(node, "axis", 0) not in (0, -1):
            raise _Mixes("indices into the shape that are not a constant vector")
        hits = [i for i, v in enumerate(idx) if (v + int(length) if v < 0 else v) == k]
        if len(hits) > 1:
            raise _Mixes("the batch's size gathered twice")
        return (SHAPE, (hits[0], inner)) if hits else (CONST, None)
    if op == "ConstantOfShape":
        return BATCHED, g.pos[first]
    sized = {"Resize": 3, "Reshape": 1, "Expand": 1}.get(op)
    if sized is None or len(ins) <= sized or g.state[ins[sized]] != SHAPE or \
            any(g.state[n] == SHAPE for i, n in enumerate(ins) if n and i != sized) or \
            any(g.state[n] != CONST for i, n in enumerate(ins) if n and i not in (0, sized)):
        raise _Mixes(f"the batch's size read by {op}")
    k, inner = g.pos[ins[sized]]
    if op == "Resize":
        if not g.batched(first) or g.pos[first] != (k, inner):
            raise _Mixes(f"sizes that give the batch axis {k} another size than its input's")
        return BATCHED, (k, inner)
    if op == "Reshape":
        src, dst = g.shapes.get(first), g.shapes.get(node.output[0])
        if not g.batched(first) or src is None or dst is None or \
                _regroup(src, dst, g.pos[first], g.batch) != (k, inner):
            raise _Mixes("a computed shape that does not keep the batch where it is")
        return BATCHED, (k, inner)
    # Expand: a constant, or the batched tensor at the same position, broadcast to the computed shape.
    rank, r = (g.shapes.get(ins[1]) or (None,))[0], g.rank(first)
    if not isinstance(rank, (int, np.integer)) or r is None:
        raise _Mixes("unknown ranks")
    out_rank = max(int(rank), r)
    axis = k + out_rank - int(rank)
    if g.batched(first):
        if (g.pos[first][0] + out_rank - r, g.pos[first][1]) != (axis, inner):
            raise _Mixes("a batched input expanded along another axis than its batch's")
    else:
        at = axis - (out_rank - r)
        if at >= 0 and g.shapes[first][at] != 1:
            raise _Mixes(f"constant {first} spans the batch axis")
    return BATCHED, (axis, inner)


def tensor_shapes(model: Any) -> "_Graph":
    """What :func:`batch_split` and :func:`model_macs` read of ``model`` (one ONNX shape inference), to
    give both when both are asked."""
    return _Graph(model)


def batch_split(model: Any, batch: int, shapes: Optional["_Graph"] = None) -> BatchSplit:
    """Whether ``model`` computes each of its ``batch`` samples on its own, and the ``Reshape`` targets to
    rewrite for a chunk (:class:`BatchSplit`).

    Args:
        model: An ONNX ``ModelProto`` (initializers may be external: only their dims are read).
        batch: Dimension 0 of every input and output.
        shapes: :func:`tensor_shapes` of ``model``, if already read (its walk state is reset here).
    """
    if batch < 2:
        return BatchSplit(f"batch {batch}")
    g = shapes if shapes is not None else _Graph(model)
    graph = model.graph
    inits = {t.name for t in graph.initializer}
    for v in graph.output:
        dims = g.shapes.get(v.name)
        if v.name not in inits and (not dims or dims[0] != batch):
            return BatchSplit(f"tensor {v.name} is not batch-major ({dims})")
    reason = walk(model, batch, g)
    if reason is not None:
        return BatchSplit(reason)
    for v in graph.output:
        if g.state.get(v.name) != BATCHED:
            return BatchSplit(f"output {v.name} does not depend on the batch")
        if g.pos[v.name] != (0, 1):
            return BatchSplit(f"output {v.name} holds the batch at {g.pos[v.name]} (axis, inner), not at axis 0")
    return BatchSplit(None, dict(g.reshapes))


def reads(node: Any) -> List[str]:
    """The tensors ``node`` reads: its inputs, and the outer tensors its subgraphs (a ``Loop``'s or an ``If``'s
    bodies) name, which ONNX lets them read without listing them."""
    out = [t for t in node.input if t]
    for a in node.attribute:
        for body in ([a.g] if a.HasField("g") else []) + list(a.graphs):
            made = {v.name for v in body.input} | {t.name for t in body.initializer}
            made.update(o for n in body.node for o in n.output)
            out.extend(t for n in body.node for t in reads(n) if t not in made)
    return list(dict.fromkeys(out))


def walk(model: Any, batch: int, g: "_Graph", keep_going: bool = False) -> Optional[str]:
    """Give every tensor of ``model`` its state in ``g`` (``g.state``, ``g.pos``, ``g.reshapes``), in topological
    order; the first reason a node may mix samples, or ``None``.

    The walk stops at that node, unless ``keep_going``: then its outputs, and everything computed from them,
    are :data:`MIXED`, and the walk goes on. Graph inputs must be batch-major (else that is the reason, and
    nothing is walked). O(nodes + edges).
    """
    g.state = {t.name: CONST for t in model.graph.initializer}
    g.state[""] = CONST  # an omitted optional input
    g.pos, g.reshapes, g.batch = {}, {}, int(batch)
    graph = model.graph
    inits = {t.name for t in graph.initializer}
    for v in graph.input:
        dims = g.shapes.get(v.name)
        if v.name not in inits and (not dims or dims[0] != batch):
            return f"tensor {v.name} is not batch-major ({dims})"
    for v in graph.input:
        if v.name not in inits:
            g.state[v.name], g.pos[v.name] = BATCHED, (0, 1)
    first: Optional[str] = None
    for node in graph.node:
        read = reads(node)
        if any(n not in g.state for n in read):
            return f"ONNX node {node.name} reads a tensor defined later"
        state: str
        pos: Optional[Pos] = None
        if any(g.state[n] == MIXED for n in read):
            state = MIXED
        elif all(g.state[n] == CONST for n in read) and not node.op_type.startswith("Random"):
            state = CONST
        else:
            try:
                if node.op_type.startswith("Random"):
                    raise _Mixes(f"operator {node.op_type}")
                state, pos = _step(node, g)
            except _Mixes as exc:
                first = first or f"ONNX node {node.name or node.op_type} ({node.op_type}): {exc}"
                if not keep_going:
                    return first
                state = MIXED
        for out in node.output:
            if out:
                g.state[out] = state
                if pos is not None:
                    g.pos[out] = pos
    return first


def batch_separable(model: Any, batch: int, shapes: Optional["_Graph"] = None) -> Optional[str]:
    """``None`` when ``model`` computes each of its ``batch`` samples on its own, else the first reason it may
    not (:func:`batch_split`'s reason)."""
    return batch_split(model, batch, shapes).reason


def without_batch_constants(model: Any, reshapes: Mapping[str, Sequence[int]]) -> Any:
    """A copy of ``model`` whose ``Reshape`` and ``Expand`` nodes named in ``reshapes`` (by output) read the shapes
    given there: :attr:`BatchSplit.reshapes`, so that the model may be compiled at another batch.
    ``model`` itself is unchanged; O(model proto size) (external weights are not copied)."""
    from onnx import ModelProto, numpy_helper

    out = ModelProto()
    out.CopyFrom(model)
    if not reshapes:
        return out
    taken = {t.name for t in out.graph.initializer} | {o for n in out.graph.node for o in n.output}
    for node in out.graph.node:
        if node.op_type in ("Reshape", "Expand") and node.output[0] in reshapes:
            name, i = f"{node.output[0]}__batch_free_shape", 0
            while name in taken:
                i += 1
                name = f"{node.output[0]}__batch_free_shape{i}"
            taken.add(name)
            out.graph.initializer.append(numpy_helper.from_array(np.asarray(reshapes[node.output[0]], np.int64),
                                                                 name))
            node.input[1] = name
    return out


def products(model: Any, g: "_Graph", batch: int) -> List[Tuple[int, int, int]]:
    """``(node index, multiply-adds, rows a sample)`` of each convolution and matrix product whose shapes ONNX
    inferred: rows are the matrix product's ``M`` (a convolution's output pixels: ``M`` of its im2col form)."""
    out = []
    for i, node in enumerate(model.graph.node):
        try:
            if node.op_type in ("Conv", "ConvTranspose"):
                # Conv: each output element reads Cin/group x kernel; ConvTranspose: each input element
                # writes Cout/group x kernel. Both are dimensions 1: of the weight.
                w, y = g.shapes[node.input[1]], g.shapes[node.output[0] if node.op_type == "Conv" else node.input[0]]
                out.append((i, int(np.prod(y, dtype=np.int64)) * int(np.prod(w[1:], dtype=np.int64)),
                            int(np.prod(y[2:], dtype=np.int64))))
            elif node.op_type in ("Gemm", "MatMul"):
                a, y = g.shapes[node.input[0]], g.shapes[node.output[0]]
                k = a[0] if node.op_type == "Gemm" and _attr(node, "transA", 0) else a[-1]
                out.append((i, int(np.prod(y, dtype=np.int64)) * int(k),
                            int(np.prod(y[:-1], dtype=np.int64)) // max(1, batch)))
        except (KeyError, TypeError, IndexError):  # a shape ONNX could not infer
            continue
    return out


def model_macs(model: Any, shapes: Optional["_Graph"] = None) -> int:
    """Multiply-adds of ``model``'s convolutions and matrix products (``Conv``, ``ConvTranspose``, ``Gemm``,
    ``MatMul``), from ONNX shape inference (``shapes``: :func:`tensor_shapes`, if already read); nodes of
    unknown shapes count 0. O(nodes)."""
    g = shapes if shapes is not None else _Graph(model)
    return sum(m for _, m, _ in products(model, g, 1))


def short_product_share(model: Any, batch: int, sub: int, min_rows: int, shapes: Optional["_Graph"] = None) -> float:
    """The share of ``model``'s multiply-adds (:func:`model_macs`) in products of fewer than ``min_rows`` rows
    when the model runs ``sub`` of its ``batch`` samples: the work that a chunk computes with short, slow matrix
    products (a convolution's last stage at 2x2 pixels: 4 rows a sample). O(nodes)."""
    g = shapes if shapes is not None else _Graph(model)
    found = products(model, g, batch)
    total = sum(m for _, m, _ in found)
    return sum(m for _, m, rows in found if rows * sub < min_rows) / total if total else 0.0


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
