"""Collapse groups of nodes of an MXNet symbol JSON into placeholder nodes, and expand them again.

MXNet 1.5 to 1.9 returned, from ``get_backend_symbol('TensorRT')`` and
``optimize_for('TensorRT', ...)`` without shapes, a symbol whose TensorRT
regions were already single nodes; the engines were built at the bind that
brought the shapes. mx_trt does the same with *placeholder* nodes: each holds
its region as a symbol JSON of its own (:func:`collapse`), and the bind puts
the regions back (:func:`expand`) before the pass partitions the graph with
shapes known.

Both functions work on the JSON text alone (no MXNet), keep node names and
attributes, and keep the graph topologically ordered. Complexity: linear in
the number of nodes and edges, plus a topological sort of the contracted graph.
"""
from __future__ import annotations

import heapq
import json
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple

#: An entry of MXNet's JSON: ``[node id, output index, version]``.
JsonEntry = List[int]


@dataclass(frozen=True)
class Region:
    """One region to collapse, with what its placeholder node needs.

    Attributes:
        nodes: Operator node ids of the region (cycle-free once contracted).
        name: The placeholder node's name.
    """

    nodes: Tuple[int, ...]
    name: str


@dataclass(frozen=True)
class Boundary:
    """What crosses a region's border.

    Attributes:
        inputs: ``(node id, output index)`` consumed from outside, in first-use order.
        input_names: The subgraph variable name of each input: the variable's own
            name when it is a variable of the outer graph, else ``<region>_input<k>``.
        outputs: ``(node id, output index)`` of region nodes used outside (or graph heads).
    """

    inputs: Tuple[Tuple[int, int], ...]
    input_names: Tuple[str, ...]
    outputs: Tuple[Tuple[int, int], ...]


def load(text: str) -> Dict[str, Any]:
    """The JSON of a symbol, with its nodes checked to have the fields the functions here read."""
    data = json.loads(text)
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list) or not isinstance(data.get("heads"), list):
        raise ValueError("not an MXNet symbol JSON (no nodes/heads)")
    return data


def boundary(data: Mapping[str, Any], region: Region) -> Boundary:
    """The inputs and outputs of ``region`` in the symbol JSON ``data``."""
    nodes = data["nodes"]
    inside = set(region.nodes)
    inputs: List[Tuple[int, int]] = []
    seen: Set[Tuple[int, int]] = set()
    for nid in sorted(inside):
        for e in nodes[nid]["inputs"]:
            key = (int(e[0]), int(e[1]))
            if key[0] not in inside and key not in seen:
                seen.add(key)
                inputs.append(key)
    names: List[str] = []
    taken = {n["name"] for n in nodes}
    for k, (src, idx) in enumerate(inputs):
        node = nodes[src]
        if node["op"] == "null":
            names.append(node["name"])
        else:
            name = f"{region.name}_input{k}"
            while name in taken:
                name += "_"
            taken.add(name)
            names.append(name)
    used: Set[Tuple[int, int]] = set()
    for nid, node in enumerate(nodes):
        if nid in inside:
            continue
        for e in node["inputs"]:
            if int(e[0]) in inside:
                used.add((int(e[0]), int(e[1])))
    for e in data["heads"]:
        if int(e[0]) in inside:
            used.add((int(e[0]), int(e[1])))
    return Boundary(tuple(inputs), tuple(names), tuple(sorted(used)))


def region_json(data: Mapping[str, Any], region: Region, bound: Boundary) -> str:
    """The region as a symbol JSON of its own: its inputs as variables, its outputs as heads."""
    nodes = data["nodes"]
    new_nodes: List[Dict[str, Any]] = []
    remap: Dict[Tuple[int, int], JsonEntry] = {}
    for (src, idx), name in zip(bound.inputs, bound.input_names):
        var: Dict[str, Any] = {"op": "null", "name": name, "inputs": []}
        if nodes[src]["op"] == "null" and nodes[src].get("attrs"):
            var["attrs"] = dict(nodes[src]["attrs"])
        remap[(src, idx)] = [len(new_nodes), 0, 0]
        new_nodes.append(var)
    ids: Dict[int, int] = {}
    for nid in sorted(region.nodes):
        node = dict(nodes[nid])
        node["inputs"] = [[remap[(int(e[0]), int(e[1]))][0], 0, int(e[2]) if len(e) > 2 else 0]
                          if int(e[0]) not in ids else [ids[int(e[0])], int(e[1]), 0] for e in node["inputs"]]
        ids[nid] = len(new_nodes)
        new_nodes.append(node)
    heads = [[ids[src], idx, 0] for src, idx in bound.outputs]
    out = {"nodes": new_nodes, "arg_nodes": [i for i, n in enumerate(new_nodes) if n["op"] == "null"],
           "heads": heads}
    if "attrs" in data:
        out["attrs"] = data["attrs"]
    return json.dumps(out)


def collapse(data: Mapping[str, Any], regions: Sequence[Region],
             placeholder: Callable[[Region, Boundary, str], Tuple[Dict[str, Any], List[int]]]) -> Dict[str, Any]:
    """Replace each region by one placeholder node.

    Args:
        data: The symbol JSON (:func:`load`).
        regions: Disjoint regions of operator nodes; contracting all of them must
            leave the graph acyclic (the partitioner's guarantee).
        placeholder: ``(region, boundary, region_json) -> (node, order)``: the
            placeholder node (``op``, ``name``, ``attrs``; its ``inputs`` are set
            here) and the order of the boundary inputs it takes (indices into
            ``boundary.inputs``: MXNet wants arguments before aux states).

    Returns:
        A new symbol JSON; the placeholders' outputs are the region outputs in
        :attr:`Boundary.outputs` order.

    Raises:
        ValueError: the contracted graph has a cycle.
    """
    nodes = data["nodes"]
    version: Dict[Tuple[int, int], int] = {}  # MXNet's JSON marks mutated inputs (aux states) with a version
    for node in nodes:
        for e in node["inputs"]:
            if len(e) > 2 and int(e[2]):
                version[(int(e[0]), int(e[1]))] = int(e[2])
    owner: Dict[int, int] = {}
    for r, region in enumerate(regions):
        for nid in region.nodes:
            owner[nid] = r
    # Units of the contracted graph: ("n", id) for a node outside every region, ("r", k) for region k.
    made: List[Tuple[Dict[str, Any], Dict[Tuple[int, int], int], List[Tuple[int, int]]]] = []
    for region in regions:
        bound = boundary(data, region)
        node, order = placeholder(region, bound, region_json(data, region, bound))
        out_index = {entry: k for k, entry in enumerate(bound.outputs)}
        made.append((node, out_index, [bound.inputs[i] for i in order]))

    def unit(nid: int) -> Tuple[str, int]:
        return ("r", owner[nid]) if nid in owner else ("n", nid)

    units: List[Tuple[str, int]] = []
    deps: Dict[Tuple[str, int], Set[Tuple[str, int]]] = {}
    first: Dict[Tuple[str, int], int] = {}
    for nid, node in enumerate(nodes):
        u = unit(nid)
        if u not in deps:
            deps[u] = set()
            units.append(u)
            first[u] = nid
        ins = made[u[1]][2] if u[0] == "r" else [(int(e[0]), int(e[1])) for e in node["inputs"]]
        for src, _ in ins:
            v = unit(src)
            if v != u:
                deps[u].add(v)
    users: Dict[Tuple[str, int], List[Tuple[str, int]]] = {u: [] for u in units}
    indegree = {u: len(d) for u, d in deps.items()}
    for u, d in deps.items():
        for v in d:
            users[v].append(u)
    ready = [(first[u], u) for u in units if indegree[u] == 0]
    heapq.heapify(ready)
    ordered: List[Tuple[str, int]] = []
    while ready:
        _, u = heapq.heappop(ready)
        ordered.append(u)
        for w in users[u]:
            indegree[w] -= 1
            if indegree[w] == 0:
                heapq.heappush(ready, (first[w], w))
    if len(ordered) != len(units):
        raise ValueError("collapsing these regions would make a cycle")

    new_id: Dict[Tuple[str, int], int] = {u: k for k, u in enumerate(ordered)}

    def entry(src: int, idx: int) -> JsonEntry:
        if src in owner:
            r = owner[src]
            return [new_id[("r", r)], made[r][1][(src, idx)], 0]
        return [new_id[("n", src)], idx, version.get((src, idx), 0)]

    out_nodes: List[Dict[str, Any]] = []
    for u in ordered:
        if u[0] == "r":
            node = dict(made[u[1]][0])
            node["inputs"] = [entry(s, i) for s, i in made[u[1]][2]]
        else:
            node = dict(nodes[u[1]])
            node["inputs"] = [entry(int(e[0]), int(e[1])) for e in node["inputs"]]
        out_nodes.append(node)
    out = {k: v for k, v in data.items() if k not in ("nodes", "arg_nodes", "heads", "node_row_ptr")}
    out["nodes"] = out_nodes
    out["arg_nodes"] = [i for i, n in enumerate(out_nodes) if n["op"] == "null"]
    out["heads"] = [entry(int(e[0]), int(e[1])) for e in data["heads"]]
    return out


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
