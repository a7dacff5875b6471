"""Expand the placeholder nodes of an MXNet symbol JSON back into the regions they hold.

MXNet 1.5 to 1.9 returned, from ``get_backend_symbol('TensorRT')`` and
``optimize_for('TensorRT', ...)`` without shapes, a symbol whose TensorRT
regions were already single nodes; the engines were built at the bind that
brought the shapes. mx_trt does the same with *placeholder* nodes, made by the
pass's own contraction (:func:`mx_trt.passes.fuse.fuse`, in
:func:`mx_trt.frontends.deferred.defer`): each holds its region as a symbol
JSON of its own. The bind puts the regions back (:func:`expand`) before the
pass partitions the graph with shapes known.

Works on the JSON alone (no MXNet), keeps node names and attributes and the
topological order. Complexity: linear in the number of nodes and edges.
"""
from __future__ import annotations

import json
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

#: An entry of MXNet's JSON: ``[node id, output index, version]``.
JsonEntry = List[int]


def load(text: str) -> Dict[str, Any]:
    """The JSON of a symbol, with its nodes checked to have the fields the functions here read."""
    data = json.loads(text)
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list) or not isinstance(data.get("heads"), list):
        raise ValueError("not an MXNet symbol JSON (no nodes/heads)")
    return data


def expand(data: Mapping[str, Any], subgraph_of: Callable[[Mapping[str, Any]], Optional[Tuple[str, Sequence[str]]]]) -> Dict[str, Any]:
    """Put every placeholder's region back in place.

    Args:
        data: A symbol JSON holding placeholder nodes.
        subgraph_of: ``node -> (region JSON, input names in the node's input order)``
            for a placeholder node, ``None`` for any other node.

    Returns:
        The symbol JSON without placeholders (node names and attributes as before collapsing).

    Raises:
        ValueError: a placeholder's region JSON does not match its inputs.
    """
    out_nodes: List[Dict[str, Any]] = []
    plain: Dict[int, int] = {}  # old node id -> new node id, for nodes kept as they are
    placed: Dict[Tuple[int, int], JsonEntry] = {}  # (placeholder id, output) -> entry in the new graph

    def entry(e: Sequence[int]) -> JsonEntry:
        src, idx = int(e[0]), int(e[1])
        if src in plain:
            return [plain[src], idx, int(e[2]) if len(e) > 2 else 0]
        if (src, idx) not in placed:
            raise ValueError(f"node {src} output {idx} is used but not produced")
        return list(placed[(src, idx)])

    for nid, node in enumerate(data["nodes"]):
        found = subgraph_of(node)
        if found is None:
            copy = dict(node)
            copy["inputs"] = [entry(e) for e in node["inputs"]]
            plain[nid] = len(out_nodes)
            out_nodes.append(copy)
            continue
        text, input_names = found
        sub = load(text)
        if len(input_names) != len(node["inputs"]):
            raise ValueError(f"placeholder {node.get('name')!r}: {len(node['inputs'])} inputs, region has "
                             f"{len(input_names)}")
        by_name = {name: entry(e) for name, e in zip(input_names, node["inputs"])}
        variables: Dict[int, JsonEntry] = {}
        ops: Dict[int, int] = {}

        def local(e: Sequence[int]) -> JsonEntry:
            sid, k = int(e[0]), int(e[1])
            if sid in variables:
                outer = variables[sid]
                return [outer[0], outer[1], max(int(outer[2]), int(e[2]) if len(e) > 2 else 0)]
            if sid not in ops:
                raise ValueError(f"placeholder {node.get('name')!r}: region entry {sid} is not produced")
            return [ops[sid], k, 0]

        for sid, snode in enumerate(sub["nodes"]):
            if snode["op"] == "null":
                if snode["name"] not in by_name:
                    raise ValueError(f"placeholder {node.get('name')!r}: region variable {snode['name']!r} is not "
                                     "one of its inputs")
                variables[sid] = by_name[snode["name"]]
                continue
            copy = dict(snode)
            copy["inputs"] = [local(e) for e in snode["inputs"]]
            ops[sid] = len(out_nodes)
            out_nodes.append(copy)
        for k, h in enumerate(sub["heads"]):
            placed[(nid, k)] = local(h)
    out = {k: v for k, v in data.items() if k not in ("nodes", "arg_nodes", "heads", "node_row_ptr")}
    out["nodes"] = out_nodes
    out["arg_nodes"] = [i for i, n in enumerate(out_nodes) if n["op"] == "null"]
    out["heads"] = [entry(h) for h in data["heads"]]
    return out
