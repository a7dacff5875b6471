"""The head of an exported model that mixes samples only near its end: the part of it a batch may run in chunks.

A detector computes each image on its own through its backbone and heads, then
decodes and suppresses boxes in operators the separability check cannot follow
(``GatherElements``, ``Loop``, plugins). :func:`head_split` cuts such a model in
two ONNX models: the *head*, every operator the check follows from the inputs
(:func:`mx_trt.export.separable.walk` with ``keep_going``), which computes each
sample on its own and so may run in chunks; and the *tail*, the rest, which runs
over the whole batch and reads the head's results (the *cut*).

Every tensor of the cut must hold the batch at axis 0 (the chunks' results are
then slices of it); an operator whose result would cross the cut otherwise (the
batch at another axis, or a shape computed from the batch) moves to the tail,
and what it reads becomes the cut instead, until every crossing tensor is
batch-major. Constants are computed in whichever part reads them, in both if
both do.

Complexity: O(nodes + edges) per round of moving operators, rounds bounded by
the number of nodes (in practice one or two), plus one ONNX shape inference.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np

from mx_trt.export.separable import BATCHED, CONST, MIXED, SHAPE, products, reads, tensor_shapes, walk
from mx_trt.export.subgraph import ExportedSubgraph

logger = logging.getLogger(__name__)

#: The smallest share of the model's multiply-adds the head must hold to be worth a second engine.
HEAD_MIN_SHARE = 0.5


@dataclasses.dataclass
class HeadSplit:
    """What :func:`head_split` made of an exported model.

    Attributes:
        head: The part that computes each sample on its own: the model's inputs it reads -> the cut, and the
            model's outputs it computes.
        tail: The rest: the cut and the model's inputs it reads -> the model's other outputs.
        cut: ``(name, shape, dtype)`` of each tensor the head computes and the tail reads (not a model
            output: those the head writes where the caller wants them).
        share: The head's share of the model's multiply-adds.
    """

    head: ExportedSubgraph
    tail: ExportedSubgraph
    cut: List[Tuple[str, Tuple[int, ...], str]]
    share: float


def head_split(exported: ExportedSubgraph, batch: int,
               min_share: float = HEAD_MIN_SHARE) -> Tuple[Optional[HeadSplit], str]:
    """Cut ``exported`` (a static model of batch ``batch``) into a head that computes each sample on its own and
    a tail; ``(None, why not)`` when there is no such head worth it (:data:`HEAD_MIN_SHARE` of the work, or
    ``min_share``), or when the whole model is separable (no tail: split it whole).
    """
    model = exported.model
    if exported.batch_dim is not None or batch < 2:
        return None, "a batch-dynamic model, or a batch of one"
    g = tensor_shapes(model)
    first = walk(model, batch, g, keep_going=True)
    if first is None:
        return None, "the whole model computes each sample on its own"
    if any(g.state.get(n) is None for n in exported.input_names):
        return None, first  # the walk stopped before the nodes (inputs not batch-major)
    graph = model.graph
    producer = {o: i for i, n in enumerate(graph.node) for o in n.output if o}
    outputs = [v.name for v in graph.output]
    inputs = set(exported.input_names)
    if any(g.state.get(o) == CONST or o in inputs for o in outputs):
        return None, "an output that is constant or an input"
    mixed: Set[int] = {i for i, n in enumerate(graph.node) if any(g.state.get(o) == MIXED for o in n.output if o)}
    while True:
        cut = _read_by(graph, mixed, g)
        head_outputs = [o for o in outputs if producer.get(o) not in mixed]
        bad = [t for t in dict.fromkeys(cut + head_outputs)
               if t not in inputs and not (g.state[t] == BATCHED and g.pos.get(t) == (0, 1))]
        if not bad:
            break
        # A tensor crossing with its batch elsewhere (or a shape of it): its producer runs in the tail, and
        # every node after it.
        mixed = _downstream(graph, mixed | {producer[t] for t in bad})
    cut_only = [t for t in cut if t not in inputs and t not in outputs]
    head_outputs = list(dict.fromkeys([t for t in cut if t not in inputs] + head_outputs))
    tail_outputs = [o for o in outputs if producer.get(o) in mixed]
    if not head_outputs or not tail_outputs:
        return None, first
    macs = {i: m for i, m, _ in products(model, g, batch)}
    total = sum(macs.values())
    share = sum(m for i, m in macs.items() if i not in mixed) / total if total else 0.0
    if share < min_share:
        return None, f"{first}; the part before it holds {share:.0%} of the work"
    specs: Dict[str, Tuple[str, Tuple[int, ...], str]] = {s[0]: s for s in exported.input_specs}
    specs.update((s[0], s) for s in exported.output_specs)
    for t in cut_only:
        dims, dtype = g.shapes.get(t), _np_dtype(g.types.get(t))
        if not dims or any(not isinstance(d, (int, np.integer)) for d in dims) or dtype is None:
            return None, f"the shape or type of {t} between the two parts is not known"
        specs[t] = (t, tuple(int(d) for d in dims), dtype)
    head_nodes = _nodes_between(graph, producer, head_outputs, inputs)
    head_reads = {t for i in head_nodes for t in reads(graph.node[i])} | set(head_outputs)
    head_inputs = [n for n in exported.input_names if n in head_reads]
    tail_inputs = [n for n in exported.input_names if n in cut] + [t for t in cut if t not in inputs]
    tail_nodes = _nodes_between(graph, producer, tail_outputs, set(tail_inputs))
    head = _part(exported, head_nodes, head_inputs, head_outputs, specs, "head", plugins=False)
    tail = _part(exported, tail_nodes, tail_inputs, tail_outputs, specs, "tail", plugins=True)
    return HeadSplit(head, tail, [specs[t] for t in cut_only], share), ""


def _read_by(graph: Any, mixed: Set[int], g: Any) -> List[str]:
    """The tensors, not constant, that the nodes of ``mixed`` read and other nodes (or the inputs) compute, in
    a stable order."""
    seen: Dict[str, None] = {}
    made = {o for i in mixed for o in graph.node[i].output if o}
    for i in sorted(mixed):
        for t in reads(graph.node[i]):
            if t not in made and g.state.get(t) in (BATCHED, SHAPE):
                seen.setdefault(t)
    return list(seen)


def _downstream(graph: Any, mixed: Set[int]) -> Set[int]:
    """``mixed`` and every node that reads, directly or not, what one of them computes (topological order)."""
    tainted = {o for i in mixed for o in graph.node[i].output if o}
    out = set(mixed)
    for i, node in enumerate(graph.node):
        if i in out or any(t in tainted for t in reads(node)):
            out.add(i)
            tainted.update(o for o in node.output if o)
    return out


def _nodes_between(graph: Any, producer: Dict[str, int], outputs: Sequence[str], stops: Set[str]) -> List[int]:
    """Indices of the nodes that compute ``outputs`` from initializers and ``stops`` (backward from them;
    ``producer``: tensor -> index of the node computing it)."""
    found: Set[int] = set()
    todo = [t for t in outputs if t not in stops]
    while todo:
        i = producer.get(todo.pop())
        if i is None or i in found:
            continue
        found.add(i)
        todo.extend(t for t in reads(graph.node[i]) if t not in stops)
    return sorted(found)


def _part(exported: ExportedSubgraph, node_ids: Sequence[int], inputs: Sequence[str], outputs: Sequence[str],
          specs: Dict[str, Tuple[str, Tuple[int, ...], str]], label: str, plugins: bool) -> ExportedSubgraph:
    """The ``ExportedSubgraph`` of the nodes ``node_ids`` (in the model's order), computing ``outputs`` from
    ``inputs``."""
    from onnx import helper

    model = exported.model
    graph = model.graph
    nodes = [graph.node[i] for i in node_ids]
    read = {t for n in nodes for t in reads(n)} | set(outputs)
    inits = [t for t in graph.initializer if t.name in read]

    def info(name: str) -> Any:
        _, shape, dtype = specs[name]
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), list(shape))

    part = helper.make_graph(nodes, f"{graph.name}_{label}", [info(n) for n in inputs], [info(n) for n in outputs],
                             initializer=inits)
    out = helper.make_model(part, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    out.functions.extend(f for f in model.functions if any(n.op_type == f.name and n.domain == f.domain
                                                           for n in nodes))
    names = {t.name for t in inits}
    external = {k: v for k, v in exported.external.items() if k in names}
    weight_bytes = sum(int(np.prod(t.dims, dtype=np.int64)) * helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
                       for t in inits)
    return dataclasses.replace(
        exported, model=out, input_names=list(inputs), output_names=list(outputs), weight_bytes=int(weight_bytes),
        external=external, input_specs=[specs[n] for n in inputs], output_specs=[specs[n] for n in outputs],
        plugin_shapes=list(exported.plugin_shapes) if plugins else [])


def _np_dtype(onnx_type: Optional[int]) -> Optional[str]:
    if not onnx_type:
        return None
    from onnx import helper

    try:
        return str(np.dtype(helper.tensor_dtype_to_np_dtype(onnx_type)))
    except (KeyError, TypeError, ValueError):
        return None
