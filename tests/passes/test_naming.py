"""mx_trt.passes.naming: one tensor name per IR entry, as MXNet names outputs."""
from __future__ import annotations

from mx_trt.passes.ir import Entry
from mx_trt.passes.naming import entry_name
from tests.passes.graphs import make


def test_variables_keep_their_name_and_outputs_are_numbered_only_when_several():
    # x -> split (2 outputs) -> a(split:0), b(split:1)
    g = make([("x", "null", []), ("split", "SliceChannel", ["x"]), ("a", "relu", [("split", 0)]),
              ("b", "relu", [("split", 1)])])
    assert entry_name(g, Entry(0, 0)) == "x"
    assert [entry_name(g, Entry(1, k)) for k in range(2)] == ["split_output0", "split_output1"]
    assert entry_name(g, Entry(2, 0)) == "a_output"
    assert entry_name(g, Entry(3, 0)) == "b_output"


def test_names_are_distinct_across_a_graph():
    g = make([("x", "null", []), ("split", "SliceChannel", ["x"]), ("a", "relu", [("split", 0)]),
              ("b", "add", [("split", 1), "a"])])
    names = [entry_name(g, Entry(n.id, k)) for n in g.nodes for k in range(n.num_outputs)]
    assert len(set(names)) == len(names) == 5
