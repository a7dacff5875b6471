"""MXNet symbol <-> IR, with shapes and dtypes from MXNet's own inference."""
from __future__ import annotations

import json
import logging
import operator
from typing import Any, Dict, List, Mapping, Optional, Tuple

from mx_trt.passes.ir import Entry, Graph, Node

from mx_trt.errors import GraphImportError, ShapeError

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


def _unique_names(jnodes: List[Dict[str, Any]]) -> Dict[int, str]:
    """Give every node of a symbol's JSON a distinct name, in place. O(V).

    MXNet binds graphs in which two nodes share a name (a Gluon block called
    twice) or a node has none, but MXNet's own per-output inference results can
    only be matched to nodes by name. The second and later holders of a name
    become ``<name>_dup<k>``; an empty name becomes ``<op>_<id>``.

    Returns:
        Node id -> its original name, for the renamed nodes only.

    Raises:
        GraphImportError: two *variables* share a name (MXNet itself cannot bind that).
    """
    seen = {str(jn.get("name", "")) for jn in jnodes}
    counts: Dict[str, int] = {}
    renamed: Dict[int, str] = {}
    for i, jn in enumerate(jnodes):
        name = str(jn.get("name", ""))
        counts[name] = counts.get(name, 0) + 1
        if name and counts[name] == 1:
            continue
        if name and jn["op"] == "null":
            raise GraphImportError(f"two variables are named {name!r}; MXNet cannot bind such a graph either")
        base = name or f"{str(jn['op']).lower()}_{i}"
        k = counts[name] - 1 if name else 0
        cand = f"{base}_dup{k}" if name else base
        while cand in seen:
            k += 1
            cand = f"{base}_dup{k}"
        seen.add(cand)
        jn["name"] = cand
        renamed[i] = name
    return renamed


def symbol_to_graph(
    sym: Any,
    shapes: Optional[Mapping[str, Tuple[int, ...]]] = None,
    dtypes: Optional[Mapping[str, Any]] = None,
) -> Graph:
    """Read an MXNet symbol into the IR and attach inferred shapes and dtypes.

    Node names are made unique (see :func:`_unique_names`); the IR keys nodes by id.

    Args:
        sym: An ``mx.sym.Symbol``.
        shapes: Shapes of (some) variables, as for ``infer_shape``.
        dtypes: Dtypes of (some) variables, as ``simple_bind``'s ``type_dict``;
            arguments whose type neither this nor inference gives are float32.

    Returns:
        The graph; ``shapes`` holds every visible output whose shape MXNet could
        infer (all of them when the given shapes suffice); ``dtypes`` holds every
        output's type, ``"unknown"`` where MXNet could not infer it.

    Raises:
        ShapeError: a given shape has a dimension that is not a positive integer
            (:func:`check_dims`), or MXNet's shape inference rejects the shapes.
        GraphImportError: the JSON cannot be read, or MXNet's type inference fails.

    Complexity: O(V + E) plus MXNet's inference.
    """
    import mxnet as mx
    import numpy as np

    sym, js, renamed = _with_unique_names(sym)
    jnodes = js["nodes"]
    if renamed:
        logger.info("%d node(s) share a name with another node or have none; renamed for the pass: %s",
                    len(renamed), ", ".join(f"{jnodes[i]['name']} (was {o!r})" for i, o in sorted(renamed.items())[:5]))
    internals = sym.get_internals()
    owner = _output_owners(internals)
    counts: Dict[str, int] = {}
    for nm in owner:
        counts[nm] = counts.get(nm, 0) + 1

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
    try:
        graph.validate()
    except ValueError as exc:
        raise GraphImportError(f"the symbol's graph is malformed: {exc}") from exc

    # Map internal output k -> Entry (names are unique now).
    by_name = {n.name: n.id for n in nodes}
    seen: Dict[str, int] = {}
    entries: List[Optional[Entry]] = []
    for nm in owner:
        k = seen.get(nm, 0)
        seen[nm] = k + 1
        entries.append(Entry(by_name[nm], k))

    if shapes:
        graph.shapes.update(_infer_shapes(internals, entries, shapes))
    type_dict = {k: np.dtype(v) for k, v in (dtypes or {}).items()}
    # As simple_bind: arguments left without a type (by the caller and by inference)
    # are float32. Inference runs with the given types first, so that a type the
    # graph forces on an argument wins over the default.
    out_types = None
    try:
        arg_types, out_types, _ = internals.infer_type_partial(**type_dict)
        untyped = [a for a, t in zip(sym.list_arguments(), arg_types or []) if t is None]
    except mx.base.MXNetError:
        untyped = [a for a in sym.list_arguments() if a not in type_dict]
    if untyped or out_types is None:
        type_dict.update({a: np.dtype("float32") for a in untyped})
        try:
            _, out_types, _ = internals.infer_type_partial(**type_dict)
        except mx.base.MXNetError as exc:
            raise GraphImportError(f"MXNet cannot infer the graph's dtypes: {_first_line(exc)}") from exc
    for e, t in zip(entries, out_types or [None] * len(entries)):
        assert e is not None
        graph.dtypes[e] = _DTYPE_NAMES.get(np.dtype(t).name, np.dtype(t).name) if t is not None else "unknown"
    return graph


def _with_unique_names(sym: Any) -> Tuple[Any, Dict[str, Any], Dict[int, str]]:
    """``(symbol, its JSON, renamed)`` where every node has a distinct name (see :func:`_unique_names`)."""
    import mxnet as mx

    try:
        js = json.loads(sym.tojson(remove_amp_cast=False))
        jnodes = js["nodes"]
    except (ValueError, KeyError, mx.base.MXNetError) as exc:
        raise GraphImportError(f"cannot read the symbol's JSON: {exc}") from exc
    renamed = _unique_names(jnodes)
    if renamed:
        sym = mx.sym.load_json(json.dumps(js))
    return sym, js, renamed


def _output_owners(internals: Any) -> List[str]:
    """The node name of every visible output of ``sym.get_internals()``, in order.

    The internals list each node's visible outputs together, in the same
    topological order as the JSON.
    """
    return [internals[i].name for i in range(len(internals.list_outputs()))]


def check_dims(shapes: Mapping[str, Any]) -> None:
    """Raise :class:`ShapeError` naming every shape with a dimension that is not a positive integer.

    MXNet 1.9.1 reads a 0 as "unknown" and rejects negative dimensions deep in
    its inference; a shape given with one is reported here as such, not as a
    shape that cannot be inferred.
    """
    bad = []
    for name, shape in shapes.items():
        try:
            ok = len(shape) > 0 and all(not isinstance(d, bool) and operator.index(d) > 0 for d in shape)
        except TypeError:
            ok = False
        if not ok:
            bad.append(f"{name}={tuple(shape) if isinstance(shape, (list, tuple)) else shape!r}")
    if bad:
        raise ShapeError(f"shape {', '.join(bad)}: every dimension must be a positive integer (MXNet reads 0 as "
                         "unknown and rejects negative dimensions)")


def _infer_shapes(internals: Any, entries: List[Optional[Entry]], shapes: Mapping[str, Tuple[int, ...]]) -> Dict[Entry, Tuple[int, ...]]:
    import mxnet as mx

    check_dims(shapes)
    try:
        _, out_shapes, _ = internals.infer_shape_partial(**dict(shapes))
    except mx.base.MXNetError as exc:
        given = list(dict(shapes).items())
        given.sort(key=lambda kv: kv[0] != "data")  # the data input first, then as given
        shown = ", ".join(f"{k}={v}" for k, v in given[:3])
        more = f" and {len(given) - 3} more" if len(given) > 3 else ""
        raise ShapeError(f"MXNet cannot infer shapes from {shown}{more}: {_first_line(exc)}") from exc
    out: Dict[Entry, Tuple[int, ...]] = {}
    for e, s in zip(entries, out_shapes or []):
        # MXNet 1.x has no rank-0 tensors: () and zeros mean "unknown".
        if e is not None and s is not None and len(s) > 0 and all(d > 0 for d in s):
            out[e] = tuple(int(d) for d in s)
    return out


def infer_shapes(sym: Any, graph: Graph, shapes: Mapping[str, Tuple[int, ...]]) -> Dict[Entry, Tuple[int, ...]]:
    """MXNet's shape inference for ``sym`` at other input shapes, keyed by the entries of ``graph``.

    ``graph`` is :func:`symbol_to_graph`'s import of ``sym``, possibly simplified
    since (nodes removed, ids renumbered): entries are matched by the node names
    the import gave, so only the inference runs again, not the import.

    Raises:
        ShapeError: MXNet rejects the shapes.

    Complexity: O(V + E) plus MXNet's inference.
    """
    sym, _, _ = _with_unique_names(sym)
    internals = sym.get_internals()
    ids = {n.name: n.id for n in graph.nodes}
    seen: Dict[str, int] = {}
    entries: List[Optional[Entry]] = []
    for nm in _output_owners(internals):
        k = seen.get(nm, 0)
        seen[nm] = k + 1
        entries.append(Entry(ids[nm], k) if nm in ids else None)
    return _infer_shapes(internals, entries, shapes)


def _first_line(exc: BaseException) -> str:
    lines = [ln for ln in str(exc).splitlines() if ln.strip() and not ln.startswith("Stack trace")]
    msg = [ln for ln in lines if "Error" in ln or "Check failed" in ln]
    return (msg[-1] if msg else lines[0] if lines else type(exc).__name__).strip()


#: Operators that return their input unchanged at inference.
_IDENTITY_OPS = frozenset({"Dropout", "_npx_dropout", "BlockGrad", "stop_gradient", "identity", "_copy", "_npi_copy"})


def inference_identity(node: Node) -> bool:
    """Whether ``node`` returns its first input unchanged in an inference forward.

    ``Dropout`` with ``mode='always'`` drops at inference too, so it is not one.
    """
    if node.op not in _IDENTITY_OPS:
        return False
    if node.op in ("Dropout", "_npx_dropout"):
        return str(node.attrs.get("mode", "training")) != "always"
    return True


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


def entries_symbol(sym: Any, graph: Graph, entries: List[Entry]) -> Any:
    """One MXNet symbol whose outputs are the values of ``entries`` of ``graph`` (the import of ``sym``), in order.

    Binding it runs MXNet's own operators up to those tensors (calibration, checks
    against native values). Nodes are matched by the unique names the import gave
    them, so graphs with repeated node names work too. O(V).

    Raises:
        GraphImportError: an entry is a variable, or not an output of ``sym``.
    """
    import mxnet as mx

    usym, _, _ = _with_unique_names(sym)
    internals = usym.get_internals()
    index: Dict[Tuple[str, int], int] = {}
    seen: Dict[str, int] = {}
    for i, nm in enumerate(_output_owners(internals)):
        k = seen.get(nm, 0)
        seen[nm] = k + 1
        index[(nm, k)] = i
    picked = []
    for e in entries:
        node = graph.nodes[e.node]
        pos = index.get((node.name, e.index))
        if node.is_variable or pos is None:
            raise GraphImportError(f"output {e.index} of node {node.name!r} is not an operator output of the symbol")
        picked.append(internals[pos])
    return mx.sym.Group(picked)
