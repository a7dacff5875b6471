"""Analysis of one bind: import the graph once, drop identities, decide support, partition.

Two stages of the bind (:data:`mx_trt.pipeline.bind.STAGES`): :func:`import_graph`
(the first two steps below) and :func:`partition_graph` (the others); :func:`analyze`
runs both for the callers that need only the analysis (calibration, the
whole-model export, the CLI's report). In order (each names its module)::

    symbol_to_graph      MXNet symbol -> IR with MXNet's inferred shapes/dtypes (graph.importer)
    remove_identities    inference-time identities (Dropout, BlockGrad, ...) go (mx_trt.passes.simplify)
    support              per op: exclude list, backend's tensor types, converter validator,
                         backend's own limits -> reason it stays native (export.converters)
    partition            maximal cycle-free subgraphs (mx_trt.passes.partition)
    keep_worthwhile      subgraphs too small to pay for an engine stay native (mx_trt.passes.cost;
                         the cost and measured rules)
    check_acyclic        independent validator (mx_trt.passes.validate)
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, Mapping, Optional, Set, Tuple

import numpy as np

from mx_trt.builder.backends import Backend, TensorRTBackend
from mx_trt.errors import ShapeError
from mx_trt.export.converters import check as check_op
from mx_trt.export.spec import op_spec
from mx_trt.graph.importer import inference_identity, symbol_to_graph
from mx_trt.passes.cost import keep_worthwhile
from mx_trt.passes.ir import Entry, Graph
from mx_trt.passes.partition import PartitionResult, partition
from mx_trt.passes.simplify import remove_identities
from mx_trt.passes.validate import check_acyclic
from mx_trt.pipeline.request import BindRequest
from mx_trt.settings import Settings

logger = logging.getLogger(__name__)


@dataclass
class Plan:
    """The analysis of one graph: what converts, how it is partitioned.

    Attributes:
        graph: The IR with shapes and dtypes.
        weights: Names of variables whose values are known (``shared_buffer``).
        reasons: Operator node id -> why it stays native (only unsupported ones).
        partition: The partition.
    """

    graph: Graph
    weights: Set[str]
    reasons: Dict[int, str]
    partition: PartitionResult

    def absorbed_ids(self) -> Set[int]:
        return {n.id for n in self.graph.nodes if n.is_variable and n.name in self.weights}

    def op_counts(self) -> Tuple[int, int]:
        """(operators inside subgraphs, all operators)."""
        total = len(self.graph.op_nodes())
        inside = sum(len(s.nodes) for s in self.partition.subgraphs)
        return inside, total


def support(graph: Graph, weights: Mapping[str, Any], settings: Settings, backend: Optional[Backend]) -> Dict[int, str]:
    """Why each unsupported operator node cannot go to an engine, or (under the cost and measured rules) is
    left to MXNet because the backend runs it far slower (``Backend.slower_than_native``). O(V) validator calls."""
    reasons: Dict[int, str] = {}
    for n in graph.nodes:
        if n.is_variable:
            continue
        if n.op in settings.exclude_ops:
            reasons[n.id] = f"{n.op} is listed in MXNET_TENSORRT_EXCLUDE_OPS"
            continue
        spec = op_spec(graph, n.id, weights, backend.name if backend is not None else "")
        # The backend bounds which tensor types an engine may hold at all; within
        # that, each converter's validator decides the types it converts exactly.
        reason = backend.dtype_reason(spec) if backend is not None else _default_dtype_reason(spec)
        if reason is None:
            reason = check_op(spec)
        if reason is None and backend is not None:
            reason = backend.supports(spec)
        if reason is None and backend is not None and settings.engine_rule in ("cost", "measured"):
            reason = backend.slower_than_native(spec)
        if reason:
            reasons[n.id] = reason
    return reasons


def _default_dtype_reason(spec: Any) -> Optional[str]:
    """Without a backend (analysis only): the types that TensorRT engines hold (float64, int8, uint8 do not)."""
    for what, dts in (("input", spec.in_dtypes), ("output", spec.out_dtypes)):
        for i, dt in enumerate(dts):
            if dt not in TensorRTBackend.tensor_dtypes:
                return f"{what} {i} is {dt}, which engines do not hold"
    return None


@dataclass(frozen=True)
class Imported:
    """The graph of one bind, imported from MXNet once and simplified.

    Attributes:
        graph: The IR with MXNet's inferred shapes and dtypes, inference-time identities removed.
        weights: Names of variables whose values are known (in ``shared_buffer``, without a shape given).
    """

    graph: Graph
    weights: FrozenSet[str]


def import_graph(request: BindRequest) -> Imported:
    """MXNet symbol -> IR, with MXNet's own shape and type inference; identities dropped.

    This is the only import of the graph in a bind: every later stage reads
    :attr:`Imported.graph` (then :attr:`Plan.graph`). Cost: one MXNet shape/type
    inference, then O(V + E).

    Args:
        request: The bind (symbol, shapes, weights, dtypes).

    Raises:
        ShapeError: shapes are missing or contradictory.
    """
    sym, shapes, params = request.symbol, request.shapes, request.params
    type_dict = request.type_dict
    all_shapes = {k: tuple(int(d) for d in v.shape) for k, v in params.items()}
    all_shapes.update({k: tuple(v) for k, v in shapes.items()})
    # Types as simple_bind infers them: type_dict, variables' own __dtype__, float32
    # for the rest. The weights' own dtypes do not count (MXNet ignores them too).
    dtypes = {k: np.dtype(v).name for k, v in (type_dict or {}).items()}
    args = set(sym.list_arguments()) | set(sym.list_auxiliary_states())
    unknown = sorted(set(shapes) - args)
    if unknown:
        raise ShapeError(f"shapes given for {unknown}, which are not inputs of the symbol (inputs: {sorted(args)})")
    graph = symbol_to_graph(sym, {k: v for k, v in all_shapes.items() if k in args}, {k: v for k, v in dtypes.items() if k in args})
    simplified = remove_identities(graph, inference_identity)
    if simplified.removed:
        logger.info("removed %d inference-time identity node(s) before partitioning (%s)", len(simplified.removed),
                    ", ".join(simplified.removed[:5]) + (", ..." if len(simplified.removed) > 5 else ""))
    graph = simplified.graph
    missing = [n.name for n in graph.nodes if n.is_variable and Entry(n.id, 0) not in graph.shapes]
    if missing:
        raise ShapeError(f"cannot infer the shapes of {missing}: give their shapes to simple_bind or their values in shared_buffer")
    weights = frozenset(n.name for n in graph.nodes if n.is_variable and n.name in params and n.name not in shapes)
    unset = sorted(n.name for n in graph.nodes if n.is_variable and n.name not in params and n.name not in shapes)
    if unset:
        # Not a weight and not a declared input: it can only be an input of whatever consumes it.
        logger.warning("%s %s no value in shared_buffer and no shape given to simple_bind: kept as executor "
                       "argument(s) that engines read at run time; set them through arg_dict or copy_params_from",
                       ", ".join(unset), "has" if len(unset) == 1 else "have")
    return Imported(graph=graph, weights=weights)


def partition_graph(request: BindRequest, imported: Imported) -> Plan:
    """Support, partition, the engine rule's pruning and the independent check: the :class:`Plan`.

    Cost: O(V) validator calls plus the partitioner's (``mx_trt.passes.partition``).

    Args:
        request: The bind (weights, settings, backend). The backend's restrictions
            apply; ``None`` checks the converters against the tensor types TensorRT engines hold.
        imported: :func:`import_graph`'s result for ``request``.

    Raises:
        PartitionError: the partition fails the independent check (a bug).
    """
    graph, params, settings = imported.graph, request.params, request.settings
    weights = set(imported.weights)
    reasons = support(graph, {k: params[k] for k in weights}, settings, request.backend)
    part = partition(graph, reasons, settings.min_subgraph_size)
    if settings.engine_rule in ("cost", "measured"):
        # The measured rule times only the subgraphs the estimate does not already rule out: those
        # save less than an engine's hop costs, so no engine can win there, and timing them is not free.
        part = keep_worthwhile(graph, part)
    check_acyclic(graph, [s.nodes for s in part.subgraphs])
    return Plan(graph=graph, weights=weights, reasons=reasons, partition=part)


def analyze(request: BindRequest) -> Plan:
    """Run the analysis half of the pass (no export, no engine): :func:`import_graph`, then :func:`partition_graph`.

    Args:
        request: The bind (symbol, shapes, weights, dtypes, settings, backend).

    Raises:
        ShapeError: shapes are missing or contradictory.
    """
    return partition_graph(request, import_graph(request))
