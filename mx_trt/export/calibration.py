"""The INT8 calibration table: per-tensor activation ranges, keyed by the graph's structure.

A table is written by :func:`mx_trt.calibrate` and read at bind time. It holds,
for every activation tensor the int8 export quantizes, the range seen on the
user's data. It is tied to one graph by :func:`graph_digest`, a sha256 over the
graph's operators, attributes and wiring (not its names, shapes or weights), so
the same model bound at another batch size takes the same table and a table of
another graph is refused with :class:`~mx_trt.errors.CalibrationError`.

Tensors are identified by ``(node index, output index)`` in the analysed graph
(the IR after inference-time identities are removed, as the bind sees it); the
name is kept for people reading the file.

The JSON form (``format`` 1)::

    {"format": "mx_trt.calibration/1", "graph_digest": "<64 hex>", "method": "entropy",
     "num_batches": 8, "tensors": [{"node": 12, "output": 0, "name": "relu0_output",
                                    "min": 0.0, "max": 5.1, "amax": 4.2}, ...]}

``min``/``max`` are the extremes seen; ``amax`` the clipping threshold chosen by
the method (``max(|min|, |max|)`` for ``minmax``).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple, Union

from mx_trt.errors import CalibrationError
from mx_trt.fsutil import write_atomic
from mx_trt.passes.ir import Entry, Graph
from mx_trt.passes.naming import entry_name

FORMAT = "mx_trt.calibration/1"
METHODS = ("entropy", "minmax", "percentile")
#: A non-zero ``amax`` outside these bounds is refused: its int8 scale (amax / 127) maps every
#: activation to one code (1e38: all to 0; 1e-30: all saturated), a constant output.
AMAX_MIN, AMAX_MAX = 1e-20, 1e20

logger = logging.getLogger(__name__)

#: MXNet operators whose inputs the int8 export quantizes, and which inputs are
#: activations (the others are weights, quantized per output channel).
QUANTIZABLE: Dict[str, Tuple[int, ...]] = {
    "Convolution": (0,), "_npx_convolution": (0,),
    "FullyConnected": (0,), "_npx_fully_connected": (0,),
    "dot": (0, 1), "batch_dot": (0, 1), "_npi_matmul": (0, 1), "linalg_gemm2": (0, 1),
    # residual adds: both inputs are activations (which one gets Q/DQ is the backend's style)
    "elemwise_add": (0, 1), "_Plus": (0, 1), "_plus": (0, 1), "_add": (0, 1), "broadcast_add": (0, 1),
    "broadcast_plus": (0, 1), "_npi_add": (0, 1),
}
#: Operators whose input ranges are recorded too, though they are not quantized operators:
#: a backend may quantize an average pooling's input so that the convolution before it
#: gets a quantized output (:class:`mx_trt.export.int8.Int8Style`, ``pool``).
RANGE_ONLY: Dict[str, Tuple[int, ...]] = {"Pooling": (0,), "_npx_pooling": (0,)}
#: Of :data:`QUANTIZABLE`, the element-wise adds (quantized only when both inputs are activations).
ADDS = frozenset({"elemwise_add", "_Plus", "_plus", "_add", "broadcast_add", "broadcast_plus", "_npi_add"})


@dataclass(frozen=True)
class TensorRange:
    """The calibrated range of one tensor.

    Attributes:
        min / max: Extremes seen on the calibration data.
        amax: Clipping threshold (> 0 unless the tensor was always zero); values
            beyond ``+-amax`` saturate.
    """

    min: float
    max: float
    amax: float


@dataclass
class CalibrationTable:
    """Activation ranges of one graph (see the module docstring for the JSON form).

    Attributes:
        graph_digest: :func:`graph_digest` of the graph calibrated.
        method: ``entropy``, ``minmax`` or ``percentile``.
        tensors: ``(node, output)`` -> range.
        names: ``(node, output)`` -> tensor name when calibrated (informative).
        num_batches / num_samples: How much data was seen.
        percentile: The percentile used (``percentile`` method only).
    """

    graph_digest: str
    method: str
    tensors: Dict[Tuple[int, int], TensorRange]
    names: Dict[Tuple[int, int], str] = field(default_factory=dict)
    num_batches: int = 0
    num_samples: int = 0
    percentile: Optional[float] = None

    @property
    def digest(self) -> str:
        """sha256 of the table's canonical JSON: what the plan cache keys int8 engines by."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()

    def to_json(self) -> str:
        rows = [{"node": k[0], "output": k[1], "name": self.names.get(k, ""), "min": r.min, "max": r.max,
                 "amax": r.amax} for k, r in sorted(self.tensors.items())]
        doc = {"format": FORMAT, "graph_digest": self.graph_digest, "method": self.method,
               "percentile": self.percentile, "num_batches": self.num_batches, "num_samples": self.num_samples,
               "tensors": rows}
        return json.dumps(doc, indent=1, sort_keys=True)

    def save(self, path: Union[str, "os.PathLike[str]"]) -> str:
        """Write the table as JSON (atomically: :func:`mx_trt.fsutil.write_atomic`). Returns the path.

        Raises:
            CalibrationError: the folder is missing or the file cannot be written (named; no file left behind).
        """
        path = os.fspath(path)
        check_writable_table(path)
        try:
            write_atomic(path, self.to_json())
        except OSError as exc:
            raise CalibrationError(f"cannot write the calibration table {path}: {exc.strerror or exc}") from None
        return path

    def check(self, graph: Graph) -> None:
        """Raise :class:`CalibrationError` unless the table was made for ``graph``'s structure."""
        mine = graph_digest(graph)
        if mine != self.graph_digest:
            raise CalibrationError(
                f"the calibration table was made for another graph (its graph digest {self.graph_digest[:12]}, "
                f"this graph's {mine[:12]}): calibrate this model with mx_trt.calibrate")

    def ranges(self, graph: Graph) -> Dict[str, TensorRange]:
        """The ranges by tensor name in ``graph`` (the exported ONNX names), after :meth:`check`.

        Raises:
            CalibrationError: another graph's table, or an entry outside the graph.
        """
        self.check(graph)
        out: Dict[str, TensorRange] = {}
        for (nid, k), r in self.tensors.items():
            if not (0 <= nid < len(graph.nodes) and 0 <= k < graph.nodes[nid].num_outputs):
                raise CalibrationError(f"the calibration table names output {k} of node {nid}, which this graph lacks")
            out[entry_name(graph, Entry(nid, k))] = r
        return out


def graph_digest(graph: Graph) -> str:
    """sha256 over the graph's structure: per node its operator, attributes and inputs
    (as ``(node index, output)``), and the outputs. Names, shapes and weights do not count.

    Complexity: O(V + E + attribute text).
    """
    rows: List[Any] = [[n.op, sorted((str(k), str(v)) for k, v in n.attrs.items()),
                        [[e.node, e.index] for e in n.inputs], n.num_outputs] for n in graph.nodes]
    text = json.dumps({"nodes": rows, "heads": [[e.node, e.index] for e in graph.heads]}, separators=(",", ":"))
    return hashlib.sha256(b"mx_trt.graph_digest/1\n" + text.encode()).hexdigest()


def activation_inputs(graph: Graph, node_ids: Iterable[int], weights: Set[str],
                      with_ranges_only: bool = False) -> Dict[int, List[Entry]]:
    """Per quantizable operator among ``node_ids``, the activation entries the int8 export quantizes.

    An operator of :data:`QUANTIZABLE` qualifies when its activation inputs are
    float32 tensors that are not weights (names in ``weights``); an add needs two
    such inputs. ``with_ranges_only`` adds the operators of :data:`RANGE_ONLY`
    (what calibration records). O(nodes).
    """
    out: Dict[int, List[Entry]] = {}
    for nid in node_ids:
        node = graph.nodes[nid]
        slots = QUANTIZABLE.get(node.op) or (RANGE_ONLY.get(node.op) if with_ranges_only else None)
        if slots is None:
            continue
        acts = []
        for i in slots:
            if i >= len(node.inputs):
                continue
            e = node.inputs[i]
            src = graph.nodes[e.node]
            if (src.is_variable and src.name in weights) or graph.dtypes.get(e, "float32") != "float32":
                continue
            acts.append(e)
        if node.op in ADDS and len(acts) != 2:
            continue
        if acts:
            out[nid] = acts
    return out


def output_layers(graph: Graph) -> Set[int]:
    """Quantizable operators from which a graph output is reached through no other quantizable
    operator: the last classifier layer(s). O(V + E)."""
    succ = graph.successors()
    quant = {n.id for n in graph.nodes if n.op in QUANTIZABLE and n.op not in ADDS}
    reaches_head_cleanly = [False] * len(graph.nodes)
    heads = {e.node for e in graph.heads}
    for nid in range(len(graph.nodes) - 1, -1, -1):
        clean = nid in heads or any(reaches_head_cleanly[s] and s not in quant for s in succ[nid])
        reaches_head_cleanly[nid] = clean
    return {nid for nid in quant if reaches_head_cleanly[nid]}


def int8_exclusions(graph: Graph, node_ids: Iterable[int], exclude_ops: Iterable[str], exclude_nodes: Iterable[str],
                    keep_output_layer: bool) -> Dict[int, str]:
    """Quantizable operators among ``node_ids`` kept in float by the settings, with the reason."""
    ops, names = set(exclude_ops), set(exclude_nodes)
    last = output_layers(graph) if keep_output_layer else set()
    out: Dict[int, str] = {}
    for nid in node_ids:
        n = graph.nodes[nid]
        if n.op not in QUANTIZABLE:
            continue
        if n.op in ops:
            out[nid] = f"{n.op} is listed in int8_exclude_ops"
        elif n.name in names:
            out[nid] = "listed in int8_exclude_nodes"
        elif nid in last:
            out[nid] = "the output layer is kept in float (int8_keep_output_layer)"
    return out


def check_writable_table(path: Union[str, "os.PathLike[str]"]) -> None:
    """Raise :class:`CalibrationError` naming the folder when a table cannot be written at ``path``: the folder
    is missing or not a folder, or ``path`` itself is a folder."""
    path = os.path.abspath(os.fspath(path))
    folder = os.path.dirname(path)
    if not os.path.isdir(folder):
        raise CalibrationError(f"cannot write the calibration table {path}: the folder {folder} does not exist")
    if os.path.isdir(path):
        raise CalibrationError(f"cannot write the calibration table {path}: it is a folder")


def load_table(source: Union[str, "os.PathLike[str]", CalibrationTable]) -> CalibrationTable:
    """A table from a path (JSON) or a table itself.

    Raises:
        CalibrationError: the file is missing, unreadable, not JSON, of another
            format, or holds a bad range (the message names the file and what is wrong).
    """
    if isinstance(source, CalibrationTable):
        return source
    path = os.fspath(source)
    try:
        with open(path, "r", encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError:
        raise CalibrationError(f"calibration table {path!r} does not exist; make one with mx_trt.calibrate") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CalibrationError(f"calibration table {path!r} cannot be read: {exc}") from None
    except ValueError as exc:
        raise CalibrationError(f"calibration table {path!r} is not valid JSON ({exc})") from None
    except RecursionError:
        raise CalibrationError(f"calibration table {path!r} is not valid JSON (nested too deeply)") from None
    try:
        return table_from_json(doc)
    except CalibrationError as exc:
        raise CalibrationError(f"calibration table {path!r}: {exc}") from None


def table_from_json(doc: Any) -> CalibrationTable:
    """A table from its parsed JSON form (see the module docstring).

    Raises:
        CalibrationError: a field is missing or has a bad value.
    """
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        got = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise CalibrationError(f"not a calibration table of format {FORMAT!r} (format: {got!r})")
    digest, method, rows = doc.get("graph_digest"), doc.get("method"), doc.get("tensors")
    if not isinstance(digest, str) or len(digest) != 64:
        raise CalibrationError(f"graph_digest {digest!r} is not a sha256 hex digest")
    if method not in METHODS:
        raise CalibrationError(f"method {method!r} is not one of {', '.join(METHODS)}")
    if not isinstance(rows, list):
        raise CalibrationError("'tensors' is not a list")
    tensors: Dict[Tuple[int, int], TensorRange] = {}
    names: Dict[Tuple[int, int], str] = {}
    for row in rows:
        try:
            key = (int(row["node"]), int(row["output"]))
            r = TensorRange(float(row["min"]), float(row["max"]), float(row["amax"]))
        except (KeyError, TypeError, ValueError):
            raise CalibrationError(f"tensor entry {row!r} needs integer node/output and numeric min/max/amax") from None
        if not all(math.isfinite(v) for v in dataclasses.astuple(r)) or r.amax < 0 or r.min > r.max or key[0] < 0:
            raise CalibrationError(f"tensor entry {row!r} has a bad range (finite, min <= max, amax >= 0)")
        name = str(row.get("name", "")) or f"node {key[0]} output {key[1]}"
        if r.amax and not AMAX_MIN <= r.amax <= AMAX_MAX:
            raise CalibrationError(f"tensor {name}: amax {r.amax:g} is outside [{AMAX_MIN:g}, {AMAX_MAX:g}]: its int8 "
                                   "scale would turn every value into one code (a constant output); calibrate again")
        if key in tensors and tensors[key] != r:
            raise CalibrationError(f"tensor {name} has two entries with different ranges ({tensors[key]} and {r})")
        tensors[key] = r
        names[key] = str(row.get("name", ""))
    pct = doc.get("percentile")
    zero = [names[k] or f"node {k[0]} output {k[1]}" for k, r in sorted(tensors.items()) if r.amax == 0]
    if zero:
        logger.warning("calibration table: %s had a zero range (%s): %s int8 values are all zero",
                       ", ".join(zero[:5]) + (f" and {len(zero) - 5} more" if len(zero) > 5 else ""),
                       "all-zero calibration data?", "its" if len(zero) == 1 else "their")
    return CalibrationTable(graph_digest=digest, method=method, tensors=tensors, names=names,
                            num_batches=int(doc.get("num_batches") or 0), num_samples=int(doc.get("num_samples") or 0),
                            percentile=float(pct) if isinstance(pct, (int, float)) else None)


def ranges_by_entry(graph: Graph, ranges: Mapping[str, TensorRange], entries: Sequence[Entry]) -> List[Optional[TensorRange]]:
    """The range of each entry by its tensor name, ``None`` where the table has none."""
    return [ranges.get(entry_name(graph, e)) for e in entries]
