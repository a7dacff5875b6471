"""Dynamic batch: optimization profiles and batch-dynamic export.

Only dimension 0, the batch, may vary. Profiles come from
``MXNET_TENSORRT_MAX_BATCH_SIZE=N`` (one profile: min 1, opt the bound batch,
max N) or from explicit profiles (:func:`mx_trt.set_optimization_profiles` /
``MXNET_TENSORRT_PROFILES``).

Whether a subgraph's export is really batch-independent is not guessed from the
converters: the subgraph is exported at the bound batch ``B`` and again at
``B + 1`` (with MXNet's own shape inference at that batch), and the two ONNX
graphs must be identical but for dimension 0 of their inputs and outputs. Then
dimension 0 becomes the symbolic ``batch`` of every input and output (one name,
so parsers know they are equal). Otherwise the engine is static, with a log line.
"""
from __future__ import annotations

import logging
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from passes.ir import Entry, Graph

from .backends.base import BatchRange
from .errors import ShapeError
from .graph_import import infer_shapes
from .onnx_export import ExportedSubgraph, export_subgraph
from .precision import to_fp16
from .settings import Settings

logger = logging.getLogger(__name__)

BATCH_DIM = "batch"


def batch_ranges(settings: Settings, shapes: Mapping[str, Tuple[int, ...]]) -> List[BatchRange]:
    """The batch profiles a bind asks for; empty for static engines.

    Args:
        settings: The bind's settings.
        shapes: The data input shapes given to ``simple_bind``.

    Raises:
        ShapeError: a profile varies more than the batch, disagrees between inputs,
            does not contain the bound batch, or MAX_BATCH_SIZE is below it.
    """
    if not settings.profiles and not settings.max_batch_size:
        return []
    if not shapes:
        raise ShapeError("dynamic batch needs the data input shapes given to simple_bind")
    batches = {s[0] for s in shapes.values() if s}
    if len(batches) != 1:
        raise ShapeError(f"dynamic batch needs every data input to share dimension 0, got {dict(shapes)}")
    bound = batches.pop()
    if settings.profiles:
        out: List[BatchRange] = []
        for k, prof in enumerate(settings.profiles):
            triple: Optional[BatchRange] = None
            for name, (mn, opt, mx) in prof.items():
                if name not in shapes:
                    raise ShapeError(f"profile {k} names {name!r}, which is not a data input ({sorted(shapes)})")
                want = tuple(shapes[name])
                for s in (mn, opt, mx):
                    if len(s) != len(want) or tuple(s[1:]) != want[1:]:
                        raise ShapeError(f"profile {k}, input {name!r}: only the batch dimension may vary: "
                                         f"{tuple(s)} against the bound {want}")
                t = (int(mn[0]), int(opt[0]), int(mx[0]))
                if not 1 <= t[0] <= t[1] <= t[2]:
                    raise ShapeError(f"profile {k}, input {name!r}: batch needs 1 <= min <= opt <= max, got {t}")
                if triple is not None and triple != t:
                    raise ShapeError(f"profile {k}: inputs disagree on the batch range ({triple} and {t})")
                triple = t
            assert triple is not None
            out.append(triple)
        if not any(lo <= bound <= hi for lo, _, hi in out):
            raise ShapeError(f"the bound batch {bound} is in none of the profiles {out}")
        return out
    n = int(settings.max_batch_size or 0)
    if n < bound:
        raise ShapeError(f"MXNET_TENSORRT_MAX_BATCH_SIZE={n} is below the bound batch {bound}")
    return [(1, bound, n)]


def with_batch(shapes: Mapping[str, Tuple[int, ...]], batch: int) -> Dict[str, Tuple[int, ...]]:
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


class SubgraphExporter:
    """Exports subgraphs of one bind, batch-dynamic where the export allows it.

    Holds the symbol and the user's weight arrays (references, not copies) so
    that an engine can be rebuilt later for a batch outside its profiles.
    """

    def __init__(self, sym: Any, shapes: Mapping[str, Tuple[int, ...]], params: Mapping[str, Any], type_dict: Any,
                 graph: Graph, weights: Mapping[str, np.ndarray], fp16: bool, ranges: Sequence[BatchRange]) -> None:
        self.sym = sym
        self.shapes = dict(shapes)
        self.params = params
        self.type_dict = type_dict
        self.graph = graph
        self.weights = weights
        self.fp16 = fp16
        self.ranges = list(ranges)
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
            else:
                logger.info("%s: static engine at batch %s, not batch-dynamic: %s", name, batch, why)
        if self.fp16:
            ex = to_fp16(ex)
        return ex
