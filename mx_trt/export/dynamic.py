"""Batch-dynamic export: a subgraph whose ONNX graph does not depend on the batch size.

Only dimension 0, the batch, may vary; the profiles themselves come from
:mod:`mx_trt.builder.profiles`.

Whether a subgraph's export is really batch-independent is not guessed from the
converters: the subgraph is exported at the bound batch ``B`` and again at
``B + 1`` (with MXNet's own shape inference at that batch), and the two ONNX
graphs must be identical but for dimension 0 of their inputs and outputs. Then
dimension 0 becomes the symbolic ``batch`` of every input and output (one name,
so parsers know they are equal). Otherwise the engine is static, with a log line.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from mx_trt.export.int8 import Int8Report, Int8Style, quantize_int8
from mx_trt.export.calibration import TensorRange
from mx_trt.export.precision import to_fp16
from mx_trt.export.subgraph import ExportedSubgraph, export_subgraph, initializer_arrays
from mx_trt.graph.importer import infer_shapes
from mx_trt.passes.ir import BatchRange, Entry, Graph

logger = logging.getLogger(__name__)

BATCH_DIM = "batch"


def with_batch(shapes: Mapping[str, Tuple[int, ...]], batch: int) -> Dict[str, Tuple[int, ...]]:
    """The same shapes with dimension 0 set to ``batch``."""
    return {k: (batch,) + tuple(s[1:]) for k, s in shapes.items()}


def _same_export(a: ExportedSubgraph, b: ExportedSubgraph) -> Optional[str]:
    """``None`` if two exports differ only in I/O dimension 0, else where they differ."""
    ga, gb = a.model.graph, b.model.graph
    if len(ga.node) != len(gb.node):
        return "a different number of ONNX nodes"
    for na, nb in zip(ga.node, gb.node):
        if na.SerializeToString() != nb.SerializeToString():
            return f"ONNX node {na.name} (from MXNet node {na.doc_string!r}) depends on the batch size"
    if len(ga.initializer) != len(gb.initializer):
        return "a different set of constants"
    for ta, tb in zip(ga.initializer, gb.initializer):
        if ta.name != tb.name or list(ta.dims) != list(tb.dims) or ta.data_type != tb.data_type or ta.raw_data != tb.raw_data:
            return f"constant {ta.name} depends on the batch size"
        if ta.name in a.external and (ta.name not in b.external or not np.array_equal(a.external[ta.name], b.external[ta.name])):
            return f"constant {ta.name} depends on the batch size"
    for va, vb in zip(list(ga.input) + list(ga.output), list(gb.input) + list(gb.output)):
        da = [d.dim_value for d in va.type.tensor_type.shape.dim]
        db = [d.dim_value for d in vb.type.tensor_type.shape.dim]
        if va.name != vb.name or da[1:] != db[1:] or not da or db[0] != da[0] + 1:
            return f"tensor {va.name} is not batch-major ({da} at batch B, {db} at B+1)"
    return None


def make_batch_dynamic(exported: ExportedSubgraph, name: str = BATCH_DIM) -> None:
    """Name dimension 0 of every input and output ``name`` (in place)."""
    g = exported.model.graph
    for v in list(g.input) + list(g.output):
        d = v.type.tensor_type.shape.dim[0]
        d.ClearField("dim_value")
        d.dim_param = name
    exported.batch_dim = name


@dataclass(frozen=True)
class Int8Export:
    """What an int8 export needs besides the subgraph.

    Attributes:
        ranges: Calibrated range per tensor name (:meth:`CalibrationTable.ranges`).
        style: The backend's form of Q/DQ graphs.
        exclude: MXNet node name -> why it stays in float (the settings' exclusions).
    """

    ranges: Mapping[str, TensorRange]
    style: Int8Style
    exclude: Mapping[str, str] = field(default_factory=dict)


class SubgraphExporter:
    """Exports subgraphs of one bind, batch-dynamic where the export allows it.

    Holds the symbol and the user's weight arrays (references, not copies) so
    that an engine can be rebuilt later for a batch outside its profiles.
    """

    def __init__(self, sym: Any, shapes: Mapping[str, Tuple[int, ...]], params: Mapping[str, Any],
                 graph: Graph, weights: Mapping[str, np.ndarray], fp16: bool, ranges: Sequence[BatchRange],
                 int8: Optional[Int8Export] = None) -> None:
        """
        Args:
            sym: The bound MXNet symbol (shape inference at other batch sizes).
            shapes: The data input shapes of the bind.
            params: The caller's weight arrays (their shapes; references, not copies).
            graph: The bind's IR (imported once; never imported again here).
            weights: Weights by name as numpy arrays, read on export.
            fp16: Export in half precision.
            ranges: The batch profiles asked for; empty for static engines.
            int8: Export with INT8 Q/DQ (:mod:`mx_trt.export.int8`); ``None`` for float.
        """
        self.sym = sym
        self.shapes = dict(shapes)
        self.params = params
        self.graph = graph
        self.weights = weights
        self.fp16 = fp16
        self.ranges = list(ranges)
        self.int8 = int8
        #: Subgraph name -> what its last int8 export quantized.
        self.int8_reports: Dict[str, Int8Report] = {}
        #: Subgraph name -> why its last export asked for batch ranges yet is static.
        self.static_reasons: Dict[str, str] = {}
        self._graphs: Dict[int, Graph] = {}

    def graph_at(self, batch: int) -> Graph:
        """The bind's graph with MXNet's shapes inferred at another batch size (memoized).

        Only MXNet's shape inference runs again; its result goes into a copy of
        the same IR (same nodes, ids and dtypes), so every later step reads it.
        """
        if batch in self._graphs:
            return self._graphs[batch]
        all_shapes = {k: tuple(v.shape) for k, v in self.params.items() if k not in self.shapes}
        all_shapes.update(with_batch(self.shapes, batch))
        args = set(self.sym.list_arguments()) | set(self.sym.list_auxiliary_states())
        g = Graph(nodes=self.graph.nodes, heads=self.graph.heads, dtypes=self.graph.dtypes,
                  shapes=infer_shapes(self.sym, self.graph, {k: v for k, v in all_shapes.items() if k in args}))
        self._graphs[batch] = g
        return g

    def weight_views(self, names: Sequence[str]) -> Dict[str, np.ndarray]:
        """The caller's weights among ``names``, as the exporter sees them (views, no copy); O(len(names))."""
        return {n: self.weights[n] for n in names if n in self.weights}

    def initializers(self, name: str, nodes: Sequence[int], inputs: Sequence[Entry], outputs: Sequence[Entry],
                     graph: Optional[Graph] = None) -> Dict[str, np.ndarray]:
        """Every initializer of the subgraph's model by name, as :meth:`export` would give them.

        What a stored engine whose weights were stripped is fed at load; no batch
        check runs. Weights used as they are come back as views of the caller's
        arrays (no copy); converted ones (fp16, folded constants) are new arrays.
        """
        ex = export_subgraph(graph or self.graph, nodes, inputs, outputs, self.weights, name=name)
        return initializer_arrays(self._precision(name, ex))

    def export(self, name: str, nodes: Sequence[int], inputs: Sequence[Entry], outputs: Sequence[Entry],
               graph: Optional[Graph] = None, ranges: Optional[Sequence[BatchRange]] = None) -> ExportedSubgraph:
        """Export one subgraph; batch-dynamic when ranges are asked for and the export allows it."""
        graph = graph or self.graph
        ranges = self.ranges if ranges is None else ranges
        ex = export_subgraph(graph, nodes, inputs, outputs, self.weights, name=name)
        if ranges:
            batch = graph.shapes[inputs[0]][0] if inputs else None
            why: Optional[str] = "it has no inputs" if batch is None else None
            if why is None:
                try:
                    # MXNet may refuse another batch size (inputs that are not batch-major).
                    other = self.graph_at(int(batch) + 1)  # type: ignore[arg-type]
                    ex2 = export_subgraph(other, nodes, inputs, outputs, self.weights, name=name)
                    why = _same_export(ex, ex2)
                except Exception as exc:  # the other batch may not even convert
                    why = f"it does not export at batch {int(batch) + 1}: {exc}"  # type: ignore[arg-type]
            if why is None:
                make_batch_dynamic(ex)
                self.static_reasons.pop(name, None)
            else:
                self.static_reasons[name] = why
                logger.info("%s: static engine at batch %s, not batch-dynamic: %s", name, batch, why)
        return self._precision(name, ex)

    def _precision(self, name: str, ex: ExportedSubgraph) -> ExportedSubgraph:
        """The export in the precision asked for: fp16, int8 (Q/DQ), or as it is."""
        if self.fp16:
            return to_fp16(ex)
        if self.int8 is not None:
            ex, report = quantize_int8(ex, self.int8.ranges, self.int8.style, self.int8.exclude)
            if name not in self.int8_reports:
                # A range missing from the table means calibration saw other subgraphs (other options).
                uncovered = any(why.startswith("no calibrated range") for why in report.kept_float.values())
                (logger.warning if uncovered else logger.info)(
                    "%s: int8: %s%s", name, report.summary(),
                    "; calibrate with the options of this bind to quantize them" if uncovered else "")
            self.int8_reports[name] = report
        return ex
