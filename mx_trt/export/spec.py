"""What a converter's validator sees of one MXNet node: :class:`OpSpec`, made by :func:`op_spec`.

A leaf of the export stage (it imports only the standard library, :mod:`mx_trt.errors`
and the IR of :mod:`mx_trt.passes.ir`), so that the analysis, the registry, the
converters and the backends (which refuse ops for their own limits) share the type
without importing each other.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Tuple

from mx_trt.errors import ConversionError
from mx_trt.passes.ir import Entry, Graph

__all__ = ["OpSpec", "Shape", "op_spec", "parse_tuple"]

Shape = Tuple[int, ...]


@dataclass(frozen=True)
class OpSpec:
    """Everything a validator may look at, known at bind time.

    Attributes:
        name: MXNet node name.
        op: MXNet operator name.
        attrs: Attributes as MXNet spells them (strings).
        in_shapes / in_dtypes: Per input, from MXNet's own shape/type inference.
        out_shapes / out_dtypes: Per (visible) output.
        const_inputs: Indices of inputs whose values are known at bind time
            (weights from ``shared_buffer``); converters may fold them.
        backend: Name of the backend the engine is for (``onnxruntime``,
            ``tensorrt``, ``tensorrt_rtx``), or ``""`` when unknown. A validator
            uses it only for a limit of one backend (TensorRT's TopK k), so that
            the others are not held to it; the export itself never differs.
    """

    name: str
    op: str
    attrs: Mapping[str, str]
    in_shapes: Tuple[Shape, ...]
    in_dtypes: Tuple[str, ...]
    out_shapes: Tuple[Shape, ...]
    out_dtypes: Tuple[str, ...]
    const_inputs: frozenset = frozenset()
    backend: str = ""

    @property
    def for_tensorrt(self) -> bool:
        """Whether the engine is built by TensorRT or TensorRT-RTX."""
        return self.backend.startswith("tensorrt")

    # -- attribute parsing, MXNet style -------------------------------------------------
    def has(self, key: str) -> bool:
        return key in self.attrs

    def str_(self, key: str, default: Optional[str] = None) -> Optional[str]:
        v = self.attrs.get(key)
        return default if v is None else str(v)

    def int_(self, key: str, default: Optional[int] = None) -> Optional[int]:
        v = self.attrs.get(key)
        if v is None or v == "None":
            return default
        return int(float(v)) if isinstance(v, str) and "." in v else int(v)

    def float_(self, key: str, default: Optional[float] = None) -> Optional[float]:
        v = self.attrs.get(key)
        if v is None or v == "None":
            return default
        return float(v)

    def bool_(self, key: str, default: bool = False) -> bool:
        v = self.attrs.get(key)
        if v is None:
            return default
        s = str(v).strip().lower()
        if s in ("true", "1"):
            return True
        if s in ("false", "0"):
            return False
        raise ConversionError(f"{self.op} {self.name!r}: attribute {key}={v!r} is not a boolean")

    def tuple_(self, key: str, default: Optional[Tuple[Any, ...]] = None) -> Optional[Tuple[Any, ...]]:
        """Parse ``"(1, 2)"``, ``"[1,2]"``, ``"3"``, ``"None"`` or ``"(None, 2)"``."""
        v = self.attrs.get(key)
        if v is None:
            return default
        return parse_tuple(v)

    def ints(self, key: str, default: Optional[Tuple[int, ...]] = None) -> Optional[Tuple[int, ...]]:
        t = self.tuple_(key, None)
        if t is None:
            return default
        return tuple(int(x) for x in t)


def parse_tuple(v: str) -> Optional[Tuple[Any, ...]]:
    """Parse an MXNet tuple attribute. ``"None"`` gives ``None``; a scalar gives a 1-tuple."""
    s = str(v).strip()
    if s in ("None", ""):
        return None if s == "None" else ()
    try:
        val = ast.literal_eval(s)
    except (ValueError, SyntaxError) as exc:
        raise ConversionError(f"cannot parse tuple attribute {v!r}") from exc
    if isinstance(val, (list, tuple)):
        return tuple(val)
    return (val,)


def op_spec(graph: Graph, nid: int, const_vars: Mapping[str, Any], backend: str = "") -> OpSpec:
    """Build the :class:`OpSpec` of node ``nid`` from the graph's inferred shapes/dtypes.

    Args:
        graph: The graph, with ``shapes`` and ``dtypes`` filled.
        nid: An operator node.
        const_vars: Names of variables whose values are known at bind time.
        backend: The backend's name, for validators with a backend's own limit.
    """
    node = graph.nodes[nid]
    outs = [Entry(nid, k) for k in range(node.num_outputs)]
    const_idx = frozenset(
        i for i, e in enumerate(node.inputs) if graph.nodes[e.node].is_variable and graph.nodes[e.node].name in const_vars
    )
    return OpSpec(
        name=node.name,
        op=node.op,
        attrs=dict(node.attrs),
        in_shapes=tuple(tuple(graph.shapes[e]) if e in graph.shapes else None for e in node.inputs),  # type: ignore[misc]
        in_dtypes=tuple(graph.dtypes.get(e, "float32") for e in node.inputs),
        out_shapes=tuple(tuple(graph.shapes[e]) if e in graph.shapes else None for e in outs),  # type: ignore[misc]
        out_dtypes=tuple(graph.dtypes.get(e, "float32") for e in outs),
        const_inputs=const_idx,
        backend=backend,
    )
