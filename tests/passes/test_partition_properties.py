"""Property tests on seeded random DAGs: acyclic, maximal, deterministic, complete.

Every graph is drawn from ``random.Random(seed)``, so a failure names its seed
and replays exactly. Graph sizes go up to 300 operators, with fan-in 1-8,
local (layered) or global (long edges) wiring, 0-60% unsupported operators
and minimum sizes 1-5.
"""
from __future__ import annotations

import random
from typing import Dict, List, Tuple

import pytest

from mx_trt.passes.fuse import fuse
from mx_trt.passes.ir import Entry, Graph, Node
from mx_trt.passes.partition import _literal_partition_reference, _partition_core, partition, partition_dag
from mx_trt.passes.validate import PartitionError, check_acyclic, check_acyclic_dag, maximality_violations
from tests.passes.graphs import random_dag

GRAPHS = 4000
CHUNK = 100


def draw(seed: int) -> Tuple[List[List[int]], List[bool], int]:
    """One random DAG, support mask and min_size; sizes skew so every chunk reaches ~300."""
    rng = random.Random(seed)
    band = rng.random()
    n = rng.randint(1, 30) if band < 0.35 else rng.randint(30, 120) if band < 0.7 else rng.randint(120, 300)
    fan_in = rng.choice([1, 2, 3, 3, 5, 8])
    window = rng.choice([None, 2, 4, 10, 40])
    p_unsupported = rng.choice([0.0, 0.05, 0.1, 0.2, 0.35, 0.6])
    preds, supported = random_dag(rng, n, fan_in, window, p_unsupported)
    return preds, supported, rng.choice([1, 2, 2, 3, 5])


def as_graph(preds: List[List[int]], supported: List[bool], seed: int) -> Tuple[Graph, Dict[int, str], List[int]]:
    """Embed the DAG in a Graph with variables interleaved (a data input and weights)."""
    rng = random.Random(seed ^ 0x5EED)
    nodes: List[Node] = [Node(id=0, name="data", op="null")]
    op_id: List[int] = []
    unsupported: Dict[int, str] = {}
    for i, ps in enumerate(preds):
        inputs = [Entry(op_id[p]) for p in ps]
        if not ps or rng.random() < 0.3:
            w = len(nodes)
            nodes.append(Node(id=w, name=f"w{i}", op="null"))
            inputs.append(Entry(w))
        if rng.random() < 0.1:
            inputs.append(Entry(0))
        v = len(nodes)
        nodes.append(Node(id=v, name=f"op{i}", op="op" if supported[i] else "Custom", inputs=tuple(inputs)))
        op_id.append(v)
        if not supported[i]:
            unsupported[v] = f"op{i} is unsupported"
    consumed = {e.node for n in nodes for e in n.inputs}
    heads = [Entry(v) for v in op_id if v not in consumed or rng.random() < 0.05]
    g = Graph(nodes=nodes, heads=heads)
    g.validate()
    return g, unsupported, op_id


def check_seed(seed: int) -> int:
    preds, supported, min_size = draw(seed)
    graph, unsupported, op_id = as_graph(preds, supported, seed)
    result = partition(graph, unsupported, min_size)
    groups = [list(s.nodes) for s in result.subgraphs]
    ctx = f"seed={seed} n={len(preds)} min_size={min_size}"

    # acyclic (independent validator), on both forms
    check_acyclic(graph, groups)
    index = {v: i for i, v in enumerate(op_id)}
    plain_groups = [[index[v] for v in g] for g in groups]
    check_acyclic_dag(preds, plain_groups)
    # maximal
    node_supported = [False] * len(graph.nodes)
    for i, v in enumerate(op_id):
        node_supported[v] = supported[i]
    assert maximality_violations(graph, node_supported, groups, min_size) == [], ctx
    # deterministic, and the plain core agrees with the graph front end
    assert partition(graph, unsupported, min_size) == result, ctx
    assert partition_dag(preds, supported, min_size) == plain_groups, ctx
    # complete: every op once, unsupported ops native with their reason, the rest with a size reason
    in_sub = {v for g in groups for v in g}
    assert len(in_sub) == sum(len(g) for g in groups), ctx
    assert sorted(in_sub | set(result.native)) == op_id and not in_sub & set(result.native), ctx
    for v, why in result.native.items():
        if v in unsupported:
            assert why == unsupported[v], ctx
        else:
            assert "below MXNET_TENSORRT_MIN_SUBGRAPH_SIZE" in why, ctx
    assert all(len(g) >= min_size for g in groups), ctx
    assert [s.id for s in result.subgraphs] == list(range(len(groups)))
    assert [min(g) for g in groups] == sorted(min(g) for g in groups)
    return len(preds)


@pytest.mark.parametrize("chunk", range(GRAPHS // CHUNK))
def test_random_dags(chunk: int) -> None:
    sizes = [check_seed(seed) for seed in range(chunk * CHUNK, (chunk + 1) * CHUNK)]
    assert max(sizes) >= 250  # every chunk exercises the large end


@pytest.mark.parametrize("chunk", range(4))
def test_fuse_random_partitions(chunk: int) -> None:
    for seed in range(chunk * 50, (chunk + 1) * 50):
        preds, supported, min_size = draw(10_000 + seed)
        graph, unsupported, op_id = as_graph(preds, supported, seed)
        result = partition(graph, unsupported, min_size)
        weights = {n.id for n in graph.nodes if n.is_variable and n.name.startswith("w")}
        fused = fuse(graph, result.subgraphs, weights).graph
        fused.validate()
        assert sum(1 for n in fused.nodes if n.op == "_mx_trt_fused") == len(result.subgraphs)
        assert sum(1 for n in fused.nodes if not n.is_variable and n.op != "_mx_trt_fused") == len(result.native)
        assert len(fused.heads) == len(graph.heads)


def test_bitsets_are_only_a_pre_test_of_the_exact_check() -> None:
    """Skipping the bitsets (done on huge graphs to save memory) gives the same partition."""
    for seed in range(300):
        preds, supported, min_size = draw(40_000 + seed)
        with_bits = _partition_core(preds, supported, min_size, bitsets=True)
        assert _partition_core(preds, supported, min_size, bitsets=False) == with_bits, seed


def test_literal_method_matches_the_straightforward_reference() -> None:
    for seed in range(400):
        preds, supported, min_size = draw(20_000 + seed)
        if len(preds) > 150:
            continue
        assert partition_dag(preds, supported, min_size, exact=False) == _literal_partition_reference(
            preds, supported, min_size
        ), seed


def test_literal_method_leaves_cycles_that_the_validator_catches() -> None:
    """The design's method alone is not enough: some random DAGs end with a cycle."""
    cyclic = []
    for seed in range(3000):
        rng = random.Random(30_000 + seed)
        preds, supported = random_dag(rng, rng.randint(4, 40), rng.randint(1, 3), None, 0.2)
        literal = partition_dag(preds, supported, 1, exact=False)
        try:
            check_acyclic_dag(preds, literal)
        except PartitionError:
            cyclic.append(seed)
            check_acyclic_dag(preds, partition_dag(preds, supported, 1))  # the exact version is fine
    assert len(cyclic) >= 5, cyclic
