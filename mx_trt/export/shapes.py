"""Output shapes of user code against MXNet's: user converters at export, plugins at run time.

MXNet infers the shape of every tensor of the graph. A user converter or a
plugin whose output has another shape gives wrong answers without an error when
the next operator broadcasts it (an ``(N, C, 1, 1)`` output through an ``Add``
with ``(N, C, H, W)``). So the exporter runs ONNX shape inference over a
subgraph that holds user converters and refuses it when a user converter's
output disagrees (:func:`check_user_shapes`; the subgraph then stays native
with that reason), and records MXNet's shapes of every plugin node
(:class:`PluginShape`) for the backends to check the plugin's results at run time.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from mx_trt.errors import ConversionError

__all__ = ["PluginShape", "check_user_shapes", "onnx_tensors", "plugin_shapes_of", "shape_text", "static_dims"]

logger = logging.getLogger(__name__)

Shape = Tuple[int, ...]


def shape_text(shape: Sequence[Any]) -> str:
    """``(2, 8, 1, 1)``, symbolic dimensions by name."""
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


@dataclass(frozen=True)
class PluginShape:
    """MXNet's shapes of one plugin node: input and output shapes, ``-1`` for the batch of a batch-dynamic model.

    Attributes:
        plugin: ``domain::op_type``.
        node: The ONNX node's name.
        in_shapes / out_shapes: Per input / output.
    """

    plugin: str
    node: str
    in_shapes: Tuple[Shape, ...]
    out_shapes: Tuple[Shape, ...]

    def takes(self, shapes: Sequence[Shape]) -> bool:
        """Whether the node's inputs have ``shapes`` (``-1`` matches any size)."""
        return len(shapes) == len(self.in_shapes) and all(
            len(s) == len(w) and all(x < 0 or int(d) == x for d, x in zip(s, w)) for s, w in zip(shapes, self.in_shapes))

    def outputs_for(self, shapes: Sequence[Shape]) -> List[Shape]:
        """The output shapes MXNet infers for inputs of ``shapes`` (the batch is input 0's)."""
        batch = int(shapes[0][0]) if shapes and shapes[0] else -1
        return [tuple(batch if d < 0 else d for d in s) for s in self.out_shapes]


def plugin_shapes_of(nodes: Sequence[Any], known: Mapping[str, Optional[Sequence[int]]],
                     batch: Optional[int]) -> List[PluginShape]:
    """The :class:`PluginShape` of each plugin node (custom domain) among ``nodes``.

    Args:
        nodes: ONNX nodes a converter emitted.
        known: ONNX tensor name -> MXNet's shape (the MXNet node's inputs and outputs).
        batch: The bound batch of a batch-dynamic model (dimension 0 of that size
            becomes ``-1``), else ``None``.

    A node reading or writing a tensor of no known shape (one a converter made)
    is left out: its results are not checked. O(nodes).
    """
    def dims(name: str) -> Optional[Shape]:
        s = known.get(name)
        if s is None:
            return None
        out = tuple(int(d) for d in s)
        return (-1,) + out[1:] if batch is not None and out and out[0] == batch else out

    found: List[PluginShape] = []
    for n in nodes:
        if not n.domain:
            continue
        ins = [dims(t) for t in n.input]
        outs = [dims(t) for t in n.output]
        if all(s is not None for s in ins + outs):
            found.append(PluginShape(f"{n.domain}::{n.op_type}", n.name, tuple(s for s in ins if s is not None),
                                     tuple(s for s in outs if s is not None)))
    return found


def onnx_tensors(model: Any, strict: bool = False, infer: bool = True) -> Tuple[Dict[str, Tuple[Any, ...]], Dict[str, int]]:
    """Each tensor's dimensions and element type after ONNX shape inference (``infer`` False: as the model
    declares them), for the graph's inputs, inferred values and outputs. A dimension is an int, the name of a
    symbolic one, or ``None`` if unknown.

    Raises:
        Exception: what ONNX's shape inference raises for a model it cannot read (``strict``: also for an
            operator it cannot infer).
    """
    from onnx import shape_inference

    g = shape_inference.infer_shapes(model, strict_mode=strict).graph if infer else model.graph
    shapes: Dict[str, Tuple[Any, ...]] = {}
    types: Dict[str, int] = {}
    for vi in [*g.input, *g.value_info, *g.output]:
        t = vi.type.tensor_type
        types[vi.name] = t.elem_type
        if t.HasField("shape"):
            shapes[vi.name] = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim)
    return shapes, types


def static_dims(shape: Sequence[Any]) -> Tuple[Optional[int], ...]:
    """``shape`` (from :func:`onnx_tensors`) with symbolic dimensions as ``None``."""
    return tuple(d if isinstance(d, int) else None for d in shape)


def _inferred(model: Any) -> Dict[str, Tuple[Any, ...]]:
    """Tensor name -> shape after ONNX shape inference; empty if it fails (then nothing is checked)."""
    try:
        return onnx_tensors(model)[0]
    except Exception as exc:  # noqa: BLE001 - onnx raises its own types; no inference means no check
        logger.debug("ONNX shape inference failed (%s): user converter shapes not checked", exc)
        return {}


def check_user_shapes(model: Any, outputs: Sequence[Tuple[str, str, Sequence[str], Sequence[Any]]],
                      batch_dim: Optional[str]) -> None:
    """Compare the shapes ONNX infers for user converters' outputs with MXNet's.

    Args:
        model: The exported model (its initializers may be external: only their dims are read).
        outputs: ``(label, MXNet node, ONNX output names, MXNet shapes)`` per user converter node.
        batch_dim: The symbolic batch dimension of a batch-dynamic model.

    Raises:
        ConversionError: a rank or a known dimension differs, naming the
            converter, the node, the output and both shapes.

    An output ONNX cannot infer (after a plugin node, for example) is not checked.
    """
    inferred = _inferred(model)
    for label, node, names, mx_shapes in outputs:
        for k, (name, want) in enumerate(zip(names, mx_shapes)):
            got = inferred.get(name)
            if got is None or want is None:
                continue
            want_t = tuple(int(d) for d in want)
            same = len(got) == len(want_t) and all(
                g is None or isinstance(g, str) or int(g) == w for g, w in zip(got, want_t))
            if not same:
                shown = [w if isinstance(g, str) and g == batch_dim else g if g is not None else "?"
                         for g, w in zip(got, want_t)] if len(got) == len(want_t) else got
                raise ConversionError(f"{label}: output {k} of node {node!r} has shape {shape_text(shown)}, "
                                      f"MXNet infers {shape_text(want_t)}")
