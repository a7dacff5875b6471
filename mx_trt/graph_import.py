"""MXNet symbol <-> IR, with shapes and dtypes from MXNet's own inference."""
from __future__ import annotations

import json
import logging
from typing import Any, Dict, List, Mapping, Optional, Tuple

from passes.ir import Entry, Graph, Node

from .errors import ShapeError

logger = logging.getLogger(__name__)

_DTYPE_NAMES = {
    "float32": "float32",
    "float16": "float16",
    "float64": "float64",
    "uint8": "uint8",
    "int8": "int8",
    "int32": "int32",
    "int64": "int64",
    "bool": "bool",
}


def _node_attrs(jn: Mapping[str, Any]) -> Dict[str, str]:
    # MXNet 1.x writes "attrs"; older files use "param" / "attr".
    attrs = jn.get("attrs") or jn.get("param") or jn.get("attr") or {}
    return {str(k): str(v) for k, v in attrs.items()}


def symbol_to_graph(
    sym: Any,
    shapes: Optional[Mapping[str, Tuple[int, ...]]] = None,
    dtypes: Optional[Mapping[str, Any]] = None,
) -> Graph:
    """Read an MXNet symbol into the IR and attach inferred shapes and dtypes.

    Args:
        sym: An ``mx.sym.Symbol``.
        shapes: Shapes of (some) variables, as for ``infer_shape``.
        dtypes: Dtypes of (some) variables, as for ``infer_type``.

    Returns:
        The graph; ``shapes``/``dtypes`` hold every visible output whose shape
        MXNet could infer (all of them when the given shapes suffice).

    Raises:
        ShapeError: MXNet's shape inference rejects the given shapes.

    Complexity: O(V + E) plus MXNet's inference.
    """
    import mxnet as mx
    import numpy as np

    js = json.loads(sym.tojson())
    jnodes = js["nodes"]
    internals = sym.get_internals()
    out_names = internals.list_outputs()
    # Count the visible outputs of each node from the internals, which list them
    # node by node in the same topological order as the JSON.
    counts: Dict[str, int] = {}
    owner: List[str] = []
    for i in range(len(out_names)):
        nm = internals[i].name
        counts[nm] = counts.get(nm, 0) + 1
        owner.append(nm)

    nodes: List[Node] = []
    for i, jn in enumerate(jnodes):
        op = jn["op"]
        nodes.append(
            Node(
                id=i,
                name=jn["name"],
                op=op,
                attrs=_node_attrs(jn),
                inputs=tuple(Entry(int(x[0]), int(x[1])) for x in jn["inputs"]),
                num_outputs=max(1, counts.get(jn["name"], 1)),
            )
        )
    heads = [Entry(int(h[0]), int(h[1])) for h in js["heads"]]
    graph = Graph(nodes=nodes, heads=heads)
    graph.validate()

    # Map internal output k -> Entry.
    by_name = {n.name: n.id for n in nodes}
    seen: Dict[str, int] = {}
    entries: List[Entry] = []
    for nm in owner:
        k = seen.get(nm, 0)
        seen[nm] = k + 1
        entries.append(Entry(by_name[nm], k))

    shapes = dict(shapes or {})
    if shapes:
        try:
            _, out_shapes, _ = internals.infer_shape_partial(**shapes)
        except mx.base.MXNetError as exc:
            raise ShapeError(f"MXNet cannot infer shapes from {shapes}: {str(exc).splitlines()[0]}") from exc
        for e, s in zip(entries, out_shapes or []):
            # MXNet 1.x has no rank-0 tensors: () and zeros mean "unknown".
            if s is not None and len(s) > 0 and all(d > 0 for d in s):
                graph.shapes[e] = tuple(int(d) for d in s)
    type_dict = {k: np.dtype(v) for k, v in (dtypes or {}).items()}
    # Variables without a dtype default to float32, as simple_bind does.
    try:
        _, out_types, _ = internals.infer_type_partial(**type_dict)
    except (mx.base.MXNetError, AttributeError):
        out_types = None
    if out_types is None:
        out_types = [np.float32] * len(entries)
    for e, t in zip(entries, out_types):
        graph.dtypes[e] = _DTYPE_NAMES.get(np.dtype(t).name, np.dtype(t).name) if t is not None else "float32"
    return graph


def graph_to_json(graph: Graph, extra_attrs: Optional[Mapping[int, Mapping[str, str]]] = None) -> str:
    """Write the IR back as MXNet symbol JSON (loadable with ``mx.sym.load_json``)."""
    jnodes = []
    for n in graph.nodes:
        attrs = dict(n.attrs)
        if extra_attrs and n.id in extra_attrs:
            attrs.update(extra_attrs[n.id])
        jn: Dict[str, Any] = {"op": n.op, "name": n.name, "inputs": [[e.node, e.index, 0] for e in n.inputs]}
        if attrs:
            jn["attrs"] = attrs
        jnodes.append(jn)
    arg_nodes = [n.id for n in graph.nodes if n.is_variable]
    # node_row_ptr: prefix sums of output counts, as NNVM writes it.
    row = [0]
    for n in graph.nodes:
        row.append(row[-1] + n.num_outputs)
    doc = {
        "nodes": jnodes,
        "arg_nodes": arg_nodes,
        "node_row_ptr": row,
        "heads": [[e.node, e.index, 0] for e in graph.heads],
        "attrs": {"mxnet_version": ["int", 10901]},
    }
    return json.dumps(doc)
