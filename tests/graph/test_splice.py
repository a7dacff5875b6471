"""graph.splice: collapsing regions into placeholders and expanding them gives back the same graph.

The graphs are MXNet symbol JSON written by hand (no MXNet): random DAGs with
multi-output nodes, regions from the partitioner (cycle-free once contracted).
"""
from __future__ import annotations

import json
import random

import pytest

from mx_trt.graph import splice
from mx_trt.passes.ir import Entry, Graph, Node
from mx_trt.passes.partition import partition


def _random_json(rng: random.Random, n_ops: int):
    nodes = [{"op": "null", "name": "data", "inputs": []}]
    outs = {0: 1}
    for k in range(n_ops):
        nodes.append({"op": "null", "name": f"w{k}", "inputs": []})
        outs[len(nodes) - 1] = 1
        srcs = [i for i in range(len(nodes) - 1) if nodes[i]["op"] != "null" or i == 0]
        picks = rng.sample(srcs, min(len(srcs), rng.randint(1, 3)))
        inputs = [[p, rng.randrange(outs[p]), 0] for p in picks] + [[len(nodes) - 1, 0, 1 if k % 3 == 0 else 0]]
        nodes.append({"op": rng.choice(["A", "B", "U"]), "name": f"op{k}", "attrs": {"k": str(k)}, "inputs": inputs})
        outs[len(nodes) - 1] = rng.randint(1, 2)
    used = {e[0] for n in nodes for e in n["inputs"]}
    heads = [[i, 0, 0] for i, n in enumerate(nodes) if n["op"] != "null" and i not in used] or [[len(nodes) - 1, 0, 0]]
    return {"nodes": nodes, "arg_nodes": [i for i, n in enumerate(nodes) if n["op"] == "null"], "heads": heads,
            "attrs": {"mxnet_version": ["int", 10901]}}


def _regions(data):
    nodes = [Node(id=i, name=n["name"], op=n["op"], inputs=tuple(Entry(e[0], e[1]) for e in n["inputs"]),
                  num_outputs=2) for i, n in enumerate(data["nodes"])]
    g = Graph(nodes=nodes, heads=[Entry(h[0], h[1]) for h in data["heads"]])
    result = partition(g, {i: "U" for i, n in enumerate(data["nodes"]) if n["op"] == "U"}, 2)
    return [splice.Region(nodes=tuple(s.nodes), name=f"R{k}") for k, s in enumerate(result.subgraphs)]


def _edges(data):
    """Every edge by names: (consumer, position, producer, output, version), plus the heads."""
    names = [n["name"] for n in data["nodes"]]
    edges = {(names[i], p, names[e[0]], e[1], e[2] if len(e) > 2 else 0)
             for i, n in enumerate(data["nodes"]) for p, e in enumerate(n["inputs"])}
    return edges, [(names[h[0]], h[1]) for h in data["heads"]]


def _placeholder(region, bound, text):
    order = list(range(len(bound.inputs)))[::-1]  # any order the caller asks for is honoured
    names = [bound.input_names[i] for i in order]
    return {"op": "Custom", "name": region.name, "attrs": {"sub": text, "names": json.dumps(names)}}, order


def _sub_of(node):
    if node["op"] != "Custom":
        return None
    return node["attrs"]["sub"], json.loads(node["attrs"]["names"])


@pytest.mark.parametrize("seed", range(60))
def test_collapse_then_expand_is_the_identity(seed):
    rng = random.Random(seed)
    data = _random_json(rng, rng.randint(3, 25))
    regions = _regions(data)
    collapsed = splice.collapse(data, regions, _placeholder)
    # Topological order and one node per region.
    for i, n in enumerate(collapsed["nodes"]):
        assert all(e[0] < i for e in n["inputs"])
    assert sum(n["op"] == "Custom" for n in collapsed["nodes"]) == len(regions)
    assert len(collapsed["nodes"]) == len(data["nodes"]) - sum(len(r.nodes) for r in regions) + len(regions)
    back = splice.expand(json.loads(json.dumps(collapsed)), _sub_of)
    for i, n in enumerate(back["nodes"]):
        assert all(e[0] < i for e in n["inputs"])
    assert _edges(back) == _edges(data)
    assert sorted(n["name"] for n in back["nodes"]) == sorted(n["name"] for n in data["nodes"])
    assert {n["name"]: n.get("attrs") for n in back["nodes"]} == {n["name"]: n.get("attrs") for n in data["nodes"]}


def test_inner_inputs_get_fresh_names_and_variables_keep_theirs():
    #   data -> A(op0) -> U(op1) -> A(op2) ; w* variables feed each op
    data = {"nodes": [
        {"op": "null", "name": "data", "inputs": []},
        {"op": "null", "name": "w0", "inputs": []},
        {"op": "A", "name": "op0", "inputs": [[0, 0, 0], [1, 0, 0]]},
        {"op": "U", "name": "op1", "inputs": [[2, 0, 0]]},
        {"op": "null", "name": "w2", "inputs": []},
        {"op": "A", "name": "op2", "inputs": [[3, 0, 0], [4, 0, 1]]},
        {"op": "B", "name": "op3", "inputs": [[5, 0, 0]]},
    ], "heads": [[6, 0, 0]]}
    region = splice.Region(nodes=(5, 6), name="R")
    bound = splice.boundary(data, region)
    assert bound.inputs == ((3, 0), (4, 0)) and bound.input_names == ("R_input0", "w2")
    assert bound.outputs == ((6, 0),)
    sub = json.loads(splice.region_json(data, region, bound))
    assert [n["name"] for n in sub["nodes"]] == ["R_input0", "w2", "op2", "op3"]
    assert sub["nodes"][2]["inputs"] == [[0, 0, 0], [1, 0, 1]]  # the aux version survives


def test_a_cycle_is_refused():
    #   a -> b -> c with b outside a region {a, c}: contracting would make a cycle
    data = {"nodes": [
        {"op": "null", "name": "x", "inputs": []},
        {"op": "A", "name": "a", "inputs": [[0, 0, 0]]},
        {"op": "U", "name": "b", "inputs": [[1, 0, 0]]},
        {"op": "A", "name": "c", "inputs": [[2, 0, 0], [1, 0, 0]]},
    ], "heads": [[3, 0, 0]]}
    with pytest.raises(ValueError, match="cycle"):
        splice.collapse(data, [splice.Region(nodes=(1, 3), name="R")], _placeholder)
