"""The partition report: multiply-add estimates, the report's content, its table, JSON, SVG and HTML views.

Everything here runs on hand-built IR graphs (no MXNet bind, no engine).
"""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from mx_trt.tools import report as rpt
from mx_trt.tools.report.model import boundaries
from mx_trt.pipeline.plan import Plan
from mx_trt.passes.cost import estimate_macs
from mx_trt.passes.fuse import boundary
from mx_trt.passes.ir import Entry, build_graph
from mx_trt.passes.partition import partition
from tests.passes.graphs import UNSUPPORTED_OP, unsupported_of

SVG = "{http://www.w3.org/2000/svg}"


# -- multiply-adds --------------------------------------------------------------------


@pytest.mark.parametrize(
    "op, attrs, ins, outs, expected",
    [
        # out elements (1*8*6*6) x in_ch 3 x kernel 3*3
        ("Convolution", {"kernel": "(3, 3)", "num_filter": "8"}, [(1, 3, 8, 8)], [(1, 8, 6, 6)], 288 * 3 * 9),
        # grouped: in_ch / groups = 2
        ("Convolution", {"kernel": "(3, 3)", "num_group": "4"}, [(2, 8, 5, 5)], [(2, 8, 5, 5)], 400 * 2 * 9),
        # channels last
        ("Convolution", {"kernel": "(1, 1)", "layout": "NHWC"}, [(1, 4, 4, 6)], [(1, 4, 4, 2)], 32 * 6),
        # 1-D kernel
        ("Convolution", {"kernel": "(5,)"}, [(1, 2, 10)], [(1, 3, 6)], 18 * 2 * 5),
        # input elements (1*4*3*3) x (filters 6 / groups 2) x kernel 2*2
        ("Deconvolution", {"kernel": "(2, 2)", "num_filter": "6", "num_group": "2"}, [(1, 4, 3, 3)], [(1, 6, 6, 6)],
         36 * 3 * 4),
        # flatten: rows 2, features 3*4*4
        ("FullyConnected", {"num_hidden": "10"}, [(2, 3, 4, 4)], [(2, 10)], 2 * 48 * 10),
        ("FullyConnected", {"num_hidden": "10", "flatten": "False"}, [(2, 5, 7)], [(2, 5, 10)], 10 * 7 * 10),
        ("dot", {}, [(4, 6), (6, 3)], [(4, 3)], 12 * 6),
        ("dot", {"transpose_a": "True"}, [(6, 4), (6, 3)], [(4, 3)], 12 * 6),
        ("batch_dot", {}, [(2, 4, 6), (2, 6, 3)], [(2, 4, 3)], 24 * 6),
        ("Activation", {"act_type": "relu"}, [(1, 8)], [(1, 8)], 0),
        ("Convolution", {"kernel": "(3, 3)"}, [None], [None], 0),
    ],
)
def test_estimate_macs(op, attrs, ins, outs, expected):
    assert estimate_macs(op, attrs, ins, outs) == expected


def test_format_count():
    assert rpt.format_count(999) == "999"
    assert rpt.format_count(1234) == "1.23 K"
    assert rpt.format_count(4.1e9) == "4.1 G"


# -- a small graph -----------------------------------------------------------------------
#
#   data -> a_conv -> a_relu -> [sq] -> b_conv -> b_relu -> fc -> (output 0)
#                        |
#                        +-----> [sq2] -------------------------> (output 1)
#
# [x] = Custom (unsupported). Weights: a_w, b_w, fc_w.

SPEC = [
    ("data", "null", []),
    ("a_w", "null", []),
    ("a_conv", "Convolution", ["data", "a_w"]),
    ("a_relu", "Activation", ["a_conv"]),
    ("sq", UNSUPPORTED_OP, ["a_relu"]),
    ("b_w", "null", []),
    ("b_conv", "Convolution", ["sq", "b_w"]),
    ("b_relu", "Activation", ["b_conv"]),
    ("fc_w", "null", []),
    ("fc", "FullyConnected", ["b_relu", "fc_w"]),
    ("sq2", UNSUPPORTED_OP, ["a_relu"]),
]
SHAPES = {
    "data": (1, 3, 8, 8), "a_w": (4, 3, 3, 3), "a_conv": (1, 4, 8, 8), "a_relu": (1, 4, 8, 8), "sq": (1, 4, 8, 8),
    "b_w": (4, 4, 3, 3), "b_conv": (1, 4, 8, 8), "b_relu": (1, 4, 8, 8), "fc_w": (10, 256), "fc": (1, 10),
    "sq2": (1, 4, 8, 8),
}
ATTRS = {"a_conv": {"kernel": "(3, 3)", "pad": "(1, 1)", "num_filter": "4"},
         "b_conv": {"kernel": "(3, 3)", "pad": "(1, 1)", "num_filter": "4"},
         "fc": {"num_hidden": "10"}}
WEIGHTS = {"a_w", "b_w", "fc_w"}


def small_plan(min_size: int = 2) -> Plan:
    g = build_graph(SPEC, heads=["fc", "sq2"])
    for n in g.nodes:
        n.attrs = ATTRS.get(n.name, {})
        g.shapes[Entry(n.id, 0)] = SHAPES[n.name]
    reasons = unsupported_of(g)
    return Plan(graph=g, weights=set(WEIGHTS), reasons=reasons, partition=partition(g, reasons, min_size))


def test_report_content():
    plan = small_plan()
    r = rpt.build_report(plan, model="m", backend="onnxruntime")
    assert [s.nodes for s in r.subgraphs] == [["a_conv", "a_relu"], ["b_conv", "b_relu", "fc"]]
    s0, s1 = r.subgraphs
    assert [t.name for t in s0.inputs] == ["data"] and [t.name for t in s0.outputs] == ["a_relu"]
    assert [t.name for t in s1.inputs] == ["sq"] and [t.name for t in s1.outputs] == ["fc"]
    assert s0.inputs[0].shape == (1, 3, 8, 8)
    assert s1.op_counts == {"Activation": 1, "Convolution": 1, "FullyConnected": 1}
    conv = 256 * 3 * 9
    assert s0.macs == conv and s1.macs == 256 * 4 * 9 + 256 * 10
    assert (r.total_ops, r.ops_in_engines) == (7, 5)
    assert r.total_macs == r.macs_in_engines == s0.macs + s1.macs
    assert r.inputs == {"data": (1, 3, 8, 8)}
    assert r.native_by_op() == {"Custom": {"Custom has no converter": ["sq", "sq2"]}}


def test_boundaries_agree_with_the_fuse_pass():
    plan = small_plan()
    g = plan.graph
    absorbed = plan.absorbed_ids()
    groups = [s.nodes for s in plan.partition.subgraphs]
    for (ins, outs), nodes in zip(boundaries(g, groups, absorbed), groups):
        assert (ins, outs) == tuple(boundary(g, nodes, absorbed))


def test_build_failures_count_as_native():
    plan = small_plan()
    r = rpt.build_report(plan, failures={"trt_subgraph_1": "boom"})
    assert [s.name for s in r.engine_subgraphs] == ["trt_subgraph_0"]
    assert r.ops_in_engines == 2
    reasons = {n.name: n.reason for n in r.native}
    assert reasons["fc"] == "its subgraph trt_subgraph_1 failed to build: boom"
    assert "trt_subgraph_1 (NATIVE: build failed)" in rpt.render_table(r)


def test_below_min_size_reason():
    plan = small_plan(min_size=3)
    r = rpt.build_report(plan)
    assert [s.nodes for s in r.subgraphs] == [["b_conv", "b_relu", "fc"]]
    by_op = r.native_by_op()
    assert list(by_op["Convolution"]) == ["in a compatible group of 2 ops, below MXNET_TENSORRT_MIN_SUBGRAPH_SIZE=3"]


def test_table():
    text = rpt.render_table(rpt.build_report(small_plan(), model="m", backend="onnxruntime"))
    lines = text.splitlines()
    assert lines[0] == "model: m  inputs: data (1, 3, 8, 8)  backend: onnxruntime"
    assert lines[1].startswith("operators: 5 of 7 in 2 engines (71.4%); multiply-adds (estimated): ")
    assert "(100.0%)" in lines[1]
    rows = [ln.split() for ln in lines if ln.lstrip().startswith(("0 ", "1 "))]
    assert rows[0][:7] == ["0", "trt_subgraph_0", "2", "1", "data", "1", "a_relu"]
    assert rows[1][:7] == ["1", "trt_subgraph_1", "3", "1", "sq", "1", "fc"]
    assert "native operators (2), by op type:" in lines
    assert "  Custom (2)" in lines
    assert "    Custom has no converter: sq, sq2" in lines


def test_json():
    data = rpt.report_to_json(rpt.build_report(small_plan(), model="m"))
    data = json.loads(json.dumps(data))
    assert data["ops"] == {"total": 7, "in_engines": 5, "share": 5 / 7}
    assert data["macs"]["share"] == 1.0
    assert [s["nodes"] for s in data["subgraphs"]] == [["a_conv", "a_relu"], ["b_conv", "b_relu", "fc"]]
    assert data["subgraphs"][1]["inputs"] == [{"name": "sq", "shape": [1, 4, 8, 8]}]
    assert data["native"] == {"Custom": [{"node": "sq", "reason": "Custom has no converter"},
                                         {"node": "sq2", "reason": "Custom has no converter"}]}


def _groups(root, cls):
    return [g for g in root.iter(f"{SVG}g") if g.get("class") == cls]


def test_svg_detailed():
    plan = small_plan()
    r = rpt.build_report(plan, model="m")
    root = ET.fromstring(rpt.render_svg(r, plan))
    ops = _groups(root, "op")
    assert sorted(g.get("data-subgraph") for g in ops) == ["trt_subgraph_0"] * 2 + ["trt_subgraph_1"] * 3
    fills = {}
    for g in ops:
        fills.setdefault(g.get("data-subgraph"), set()).add(g.find(f"{SVG}rect").get("fill"))
    assert all(len(f) == 1 for f in fills.values())  # one colour per subgraph
    assert len(set.union(*fills.values())) == 2  # and a different one for each
    native = _groups(root, "native")
    assert {g.get("data-reason") for g in native} == {"Custom has no converter"}
    for g in native:
        texts = " ".join(t.text or "" for t in g.iter(f"{SVG}text"))
        assert "Custom has no converter" in texts
    assert len(_groups(root, "input")) == 1 and len(_groups(root, "output")) == 2
    assert len([p for p in root.iter(f"{SVG}path") if p.get("class") == "edge"]) == 9
    # Every box lies inside the canvas.
    w, h = float(root.get("width")), float(root.get("height"))
    for rect in root.iter(f"{SVG}rect"):
        assert 0 <= float(rect.get("x")) and float(rect.get("x")) + float(rect.get("width")) <= w
        assert 0 <= float(rect.get("y")) and float(rect.get("y")) + float(rect.get("height")) <= h


def synthetic_plan(num_ops: int, every: int = 20) -> Plan:
    """A chain with skips and side branches; every ``every``-th op unsupported."""
    spec = [("data", "null", [])]
    prev = "data"
    for i in range(num_ops):
        op = UNSUPPORTED_OP if i % every == every - 1 else ("Convolution", "Activation", "BatchNorm")[i % 3]
        inputs = [prev] + ([f"op{i - 3}"] if i >= 3 and i % 5 == 0 else [])
        spec.append((f"op{i}", op, inputs))
        prev = f"op{i}"
    g = build_graph(spec, heads=[prev])
    reasons = unsupported_of(g)
    return Plan(graph=g, weights=set(), reasons=reasons, partition=partition(g, reasons, 2))


def test_svg_collapses_large_graphs():
    plan = synthetic_plan(1200)
    r = rpt.build_report(plan)
    assert r.total_ops >= rpt.COLLAPSE_THRESHOLD
    root = ET.fromstring(rpt.render_svg(r, plan))
    boxes = _groups(root, "subgraph")
    assert not _groups(root, "op")
    assert [g.get("data-subgraph") for g in boxes] == [s.name for s in r.subgraphs]
    first = " ".join(t.text or "" for t in boxes[0].iter(f"{SVG}text"))
    assert f"{r.subgraphs[0].ops} ops" in first and "Convolution" in first
    assert len(_groups(root, "native")) == len(r.native)
    assert len({g.find(f"{SVG}rect").get("fill") for g in boxes}) == len(boxes)
    # Small graphs collapse on request, large ones expand on request.
    small = small_plan()
    assert len(_groups(ET.fromstring(rpt.render_svg(rpt.build_report(small), small, collapse=True)), "subgraph")) == 2


def test_html():
    plan = small_plan()
    page = rpt.render_html(rpt.build_report(plan, model="m<1>"), plan)
    assert page.startswith("<!DOCTYPE html>") and "m&lt;1&gt;" in page
    svg = page[page.index("<svg"): page.index("</svg>") + len("</svg>")]
    ET.fromstring(svg)
    assert "<td>Custom has no converter</td>" in page


def test_colors_are_distinct():
    colors = rpt.subgraph_colors(600)
    assert len(set(colors)) == 600
    assert all(len(c) == 7 and c.startswith("#") for c in colors)
