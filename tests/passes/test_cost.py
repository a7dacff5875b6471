"""mx_trt.passes.cost: which subgraphs pay for an engine, by the work they do rather than their size."""
from __future__ import annotations

from mx_trt.passes.cost import CostModel, estimate_macs, graph_macs, keep_worthwhile, worth_an_engine
from mx_trt.passes.ir import Entry
from tests.passes.graphs import by_name, make, run


def _shaped(g, shape):
    for n in g.nodes:
        for k in range(n.num_outputs):
            g.shapes[Entry(n.id, k)] = shape
    return g


def test_shape_arithmetic_is_not_worth_an_engine():
    # six tiny integer ops: far less than one engine hop
    spec = [("x", "null", [])] + [(f"s{i}", "slice_axis", [f"s{i - 1}" if i else "x"]) for i in range(6)]
    g = _shaped(make(spec), (1, 4))
    why = worth_an_engine(g, [n.id for n in g.nodes if not n.is_variable], graph_macs(g))
    assert why is not None and "6 ops" in why and "less than the 50 us" in why


def test_one_large_convolution_is_worth_an_engine():
    g = make([("x", "null", []), ("w", "null", []), ("conv", "Convolution", ["x", "w"])])
    g.nodes[2].attrs = {"kernel": "(3, 3)", "num_filter": "64"}
    g.shapes = {Entry(0, 0): (1, 64, 56, 56), Entry(1, 0): (64, 64, 3, 3), Entry(2, 0): (1, 64, 56, 56)}
    macs = graph_macs(g)
    assert macs[2] == 64 * 56 * 56 * 64 * 9
    assert worth_an_engine(g, [2], macs) is None


def test_elementwise_chains_on_large_tensors_pay_through_fusion():
    spec = [("x", "null", [])] + [(f"r{i}", "relu", [f"r{i - 1}" if i else "x"]) for i in range(3)]
    big = _shaped(make(spec), (1, 64, 56, 56))
    small = _shaped(make(spec), (1, 8))
    ops = [1, 2, 3]
    assert worth_an_engine(big, ops, graph_macs(big)) is None
    assert worth_an_engine(small, ops, graph_macs(small)) is not None


def test_keep_worthwhile_drops_whole_subgraphs_and_renumbers():
    # x -> a -> [u] -> b ; a is tiny, b is a big conv
    g = make([("x", "null", []), ("a", "relu", ["x"]), ("u", "Custom", ["a"]), ("w", "null", []),
              ("b", "Convolution", ["u", "w"])])
    g.nodes[4].attrs = {"kernel": "(3, 3)"}
    g.shapes = {Entry(0, 0): (1, 4), Entry(1, 0): (1, 4), Entry(2, 0): (1, 64, 56, 56),
                Entry(3, 0): (64, 64, 3, 3), Entry(4, 0): (1, 64, 56, 56)}
    r = keep_worthwhile(g, run(g))
    assert by_name(g, r) == [{"b"}]
    assert r.subgraphs[0].name == "trt_subgraph_0"
    assert "would save about" in r.native[1]


def test_interleaved_attention_counts_its_multiply_adds():
    # qk of BERT-base at sequence 128: (128, 1, 3*768) -> (12, 128, 128), 64 per head
    assert estimate_macs("_contrib_interleaved_matmul_selfatt_qk", {"heads": "12"}, [(128, 1, 2304)],
                         [(12, 128, 128)]) == 12 * 128 * 128 * 64
    assert estimate_macs("_contrib_interleaved_matmul_selfatt_valatt", {"heads": "12"},
                         [(128, 1, 2304), (12, 128, 128)], [(128, 1, 768)]) == 128 * 768 * 128


def test_a_cheaper_hop_makes_more_engines():
    spec = [("x", "null", [])] + [(f"s{i}", "slice_axis", [f"s{i - 1}" if i else "x"]) for i in range(6)]
    g = _shaped(make(spec), (1, 4))
    assert worth_an_engine(g, [1, 2, 3, 4, 5, 6], graph_macs(g), CostModel(hop_us=1.0)) is None


def test_measured_choice_keeps_the_faster_side():
    from mx_trt.passes.cost import Timed, choose_measured

    best, why = choose_measured(3.2, [Timed("onnxruntime", "fp32", 4.1)])
    assert best is None and why == "kept native: engine 1.28x slower, measured 4.10 vs 3.20 ms (onnxruntime fp32)"
    best, why = choose_measured(4.0, [Timed("onnxruntime", "fp32", 2.0), Timed("other", "fp32", 1.0)])
    assert best == Timed("other", "fp32", 1.0) and "4.00x faster" in why
    # a tie goes to MXNet, and so does an engine less than about 5% faster
    assert choose_measured(2.0, [Timed("onnxruntime", "fp32", 2.0)])[0] is None
    best, why = choose_measured(2.0, [Timed("onnxruntime", "fp32", 1.94)])
    assert best is None and why.startswith("kept native: engine only 1.03x faster (below 1.05x)")
    assert choose_measured(2.0, [Timed("onnxruntime", "fp32", 1.88)])[0] is not None
    assert choose_measured(2.0, [Timed("onnxruntime", "fp32", 1.94)], keep_below=1.0)[0] is not None


def test_a_decision_says_which_ratio_decided_when_the_two_disagree():
    """Load that came and went during the timing: the rounds' ratios (1.42) decide, the medians (5.49 against
    5.64 ms) would say otherwise, and the text names both instead of reading as a contradiction."""
    from mx_trt.passes.cost import Timed, choose_measured

    best, why = choose_measured(5.64, [Timed("onnxruntime", "fp32", 5.49, 1.42)])
    assert best is None and why == ("kept native: engine 1.42x slower, measured 5.49 vs 5.64 ms (onnxruntime fp32); "
                                    "1.42 is the median of the rounds' ratios, the medians' ratio 0.97")
    # Within 10% of each other, the text is as before.
    _, why = choose_measured(4.0, [Timed("onnxruntime", "fp32", 2.0, 0.52)])
    assert why == "engine kept (onnxruntime fp32): 1.92x faster, measured 2.00 vs 4.00 ms"


def test_measured_choice_drops_reduced_precision_slower_than_fp32():
    from mx_trt.passes.cost import Timed, choose_measured

    int8, fp32 = Timed("onnxruntime", "int8", 6.0), Timed("onnxruntime", "fp32", 5.0)
    best, why = choose_measured(10.0, [int8, fp32])
    assert best == fp32 and "int8 1.20x slower than fp32" in why
    best, _ = choose_measured(10.0, [Timed("onnxruntime", "int8", 2.0), fp32])
    assert best is not None and best.precision == "int8"
    # int8 beats fp32 yet both lose to MXNet: native
    assert choose_measured(1.0, [Timed("onnxruntime", "int8", 2.0), fp32])[0] is None
