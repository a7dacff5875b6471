"""graph.splice: placeholder nodes expand back into their regions.

Collapsing is the pass's own contraction (passes.fuse, through frontends.deferred.defer);
these tests check that defer followed by expand gives back the same graph, on random DAGs
of real MXNet operators (one of them a custom operator no converter covers, so regions are
cut around it), and expand alone on a hand-written placeholder.
"""
from __future__ import annotations

import json
import random

import mxnet as mx
import pytest

from mx_trt.frontends import deferred
from mx_trt.graph import splice
from tests.harness.userops import register_doubling_op

NATIVE_OP = register_doubling_op("splice_native")


def _random_symbol(rng: random.Random, n_ops: int):
    outs = [mx.sym.var("data")]
    for k in range(n_ops):
        kind = rng.choice(["relu", "sigmoid", "add", "bn", "native"])
        a = rng.choice(outs)
        if kind == "relu":
            y = mx.sym.relu(a, name=f"op{k}")
        elif kind == "sigmoid":
            y = mx.sym.sigmoid(a, name=f"op{k}")
        elif kind == "add":
            y = mx.sym.elemwise_add(a, rng.choice(outs), name=f"op{k}")
        elif kind == "bn":
            y = mx.sym.BatchNorm(a, fix_gamma=False, name=f"op{k}")
        else:
            y = mx.sym.Custom(a, op_type=NATIVE_OP, name=f"op{k}")
        outs.append(y)
    consumed = set()
    for s in outs:
        kids = s.get_children()
        consumed |= set(kids.list_outputs()) if kids is not None else set()
    heads = [s for s in outs[1:] if s.list_outputs()[0] not in consumed] or [outs[-1]]
    return mx.sym.Group(heads) if len(heads) > 1 else heads[0]


def _edges(sym):
    """Every edge by names (consumer, position, producer, output), the heads, and each node's attributes."""
    data = json.loads(sym.tojson())
    names = [n["name"] for n in data["nodes"]]
    edges = {(names[i], p, names[e[0]], e[1]) for i, n in enumerate(data["nodes"]) for p, e in enumerate(n["inputs"])}
    attrs = {n["name"]: {k: v for k, v in (n.get("attrs") or {}).items()} for n in data["nodes"]}
    return edges, [(names[h[0]], h[1]) for h in data["heads"]], attrs


@pytest.mark.parametrize("seed", range(30))
def test_defer_then_expand_gives_the_same_graph(seed):
    rng = random.Random(seed)
    sym = _random_symbol(rng, rng.randint(3, 16))
    placeholder_sym = deferred.defer(sym)
    data = json.loads(placeholder_sym.tojson())
    for i, n in enumerate(data["nodes"]):
        assert all(e[0] < i for e in n["inputs"])
    assert sorted(placeholder_sym.list_arguments()) == sorted(sym.list_arguments())
    assert sorted(placeholder_sym.list_auxiliary_states()) == sorted(sym.list_auxiliary_states())
    back, _ = deferred.expand_symbol(placeholder_sym)
    assert _edges(back) == _edges(sym)


def test_expand_puts_a_region_in_place():
    #   data -> [R: a(relu) -> b(sigmoid)] -> c(Custom)
    region = {"nodes": [{"op": "null", "name": "x", "inputs": []},
                        {"op": "relu", "name": "a", "inputs": [[0, 0, 0]]},
                        {"op": "sigmoid", "name": "b", "inputs": [[1, 0, 0]]}], "heads": [[2, 0, 0]]}
    outer = {"nodes": [{"op": "null", "name": "data", "inputs": []},
                       {"op": "Custom", "name": "R", "attrs": {"sub": json.dumps(region)}, "inputs": [[0, 0, 0]]},
                       {"op": "Custom", "name": "c", "attrs": {"op_type": "native"}, "inputs": [[1, 0, 0]]}],
             "heads": [[2, 0, 0]]}

    def sub_of(node):
        return (node["attrs"]["sub"], ["x"]) if node["name"] == "R" else None

    out = splice.expand(outer, sub_of)
    assert [n["name"] for n in out["nodes"]] == ["data", "a", "b", "c"]
    assert [n["inputs"] for n in out["nodes"]] == [[], [[0, 0, 0]], [[1, 0, 0]], [[2, 0, 0]]]
    assert out["heads"] == [[3, 0, 0]] and out["arg_nodes"] == [0]


def test_expand_refuses_a_region_that_does_not_fit_its_node():
    region = {"nodes": [{"op": "null", "name": "y", "inputs": []},
                        {"op": "relu", "name": "a", "inputs": [[0, 0, 0]]}], "heads": [[1, 0, 0]]}
    outer = {"nodes": [{"op": "null", "name": "data", "inputs": []},
                       {"op": "Custom", "name": "R", "inputs": [[0, 0, 0]]}], "heads": [[1, 0, 0]]}
    with pytest.raises(ValueError, match="region variable 'y' is not one of its inputs"):
        splice.expand(outer, lambda n: (json.dumps(region), ["x"]) if n["name"] == "R" else None)
