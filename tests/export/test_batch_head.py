"""The head of a model that mixes samples near its end (mx_trt.export.batch_head): where the cut falls, and that head
and tail together compute what the whole model does."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from mx_trt.export.batch_head import head_split
from mx_trt.export.subgraph import ExportedSubgraph

B = 4
X = (B, 3, 8, 8)


def exported(nodes, inits, outputs):
    """An ExportedSubgraph of one input ``x`` (``X``) and the float ``outputs`` ``{name: shape}``."""
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(X))],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in outputs.items()],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in dict(inits).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    return ExportedSubgraph(m, ["x"], list(outputs), input_specs=[("x", X, "float32")],
                            output_specs=[(n, tuple(s), "float32") for n, s in outputs.items()])


CONV = helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1])
WEIGHTS = {"w": np.random.RandomState(0).uniform(-1, 1, (6, 3, 3, 3)).astype("f4")}


def mixing(src, out):
    """Each sample's values reordered by another sample's order: GatherElements with indices of a sort along
    the batch axis (an operator the check does not follow, as a detector's suppression)."""
    return [helper.make_node("TopK", [src, "k"], [f"{out}_v", f"{out}_i"], axis=0),
            helper.make_node("GatherElements", [src, f"{out}_i"], [out], axis=0)]


def _run(ex, feeds):
    import onnxruntime as ort

    sess = ort.InferenceSession(ex.model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip(ex.output_names, sess.run(ex.output_names, {n: feeds[n] for n in ex.input_names})))


def _same_as_whole(ex):
    found, reason = head_split(ex, B)
    assert found is not None, reason
    x = np.random.RandomState(1).uniform(-1, 1, X).astype("f4")
    whole = _run(ex, {"x": x})
    values = {"x": x, **_run(found.head, {"x": x})}
    values.update(_run(found.tail, values))
    for name in ex.output_names:
        np.testing.assert_allclose(values[name], whole[name], rtol=1e-6, atol=1e-6)
    return found


def test_a_cnn_whose_end_mixes_samples_is_cut_before_it():
    nodes = [CONV, helper.make_node("Relu", ["c"], ["r"]), *mixing("r", "y")]
    found = _same_as_whole(exported(nodes, {**WEIGHTS, "k": np.array([B], "i8")}, {"y": (B, 6, 8, 8)}))
    assert [n.op_type for n in found.head.model.graph.node] == ["Conv", "Relu"]
    assert found.cut == [("r", (B, 6, 8, 8), "float32")] and found.share == 1.0
    assert found.head.input_names == ["x"] and found.head.output_names == ["r"]
    assert found.tail.input_names == ["r"] and found.tail.output_names == ["y"]
    assert {t.name for t in found.head.model.graph.initializer} == {"w"}
    assert {t.name for t in found.tail.model.graph.initializer} == {"k"}


def test_an_output_of_the_head_read_by_the_tail_is_written_once():
    nodes = [CONV, helper.make_node("Relu", ["c"], ["r"]), *mixing("r", "y")]
    found = _same_as_whole(exported(nodes, {**WEIGHTS, "k": np.array([B], "i8")}, {"r": (B, 6, 8, 8), "y": (B, 6, 8, 8)}))
    assert found.head.output_names == ["r"] and found.cut == []  # a model output: the caller's buffer
    assert found.tail.input_names == ["r"]


def test_a_tensor_crossing_with_its_batch_elsewhere_moves_to_the_tail():
    # The transpose puts the batch at axis 1; the tail would read it in chunks that are not slices of axis 0.
    nodes = [CONV, helper.make_node("Transpose", ["c"], ["t"], perm=[1, 0, 2, 3]),
             helper.make_node("TopK", ["t", "k"], ["v", "i"], axis=1),
             helper.make_node("GatherElements", ["t", "i"], ["y"], axis=1)]
    found = _same_as_whole(exported(nodes, {**WEIGHTS, "k": np.array([B], "i8")}, {"y": (6, B, 8, 8)}))
    assert found.cut == [("c", (B, 6, 8, 8), "float32")]
    assert [n.op_type for n in found.tail.model.graph.node] == ["Transpose", "TopK", "GatherElements"]


def test_a_shape_crossing_moves_to_the_tail_and_its_tensor_crosses_instead():
    # Shape(c) read by an operator the check does not follow for shapes (ReduceProd): the Shape runs in the
    # tail, which reads c.
    nodes = [CONV, helper.make_node("Shape", ["c"], ["s"]), helper.make_node("ReduceProd", ["s"], ["n"], keepdims=1),
             helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT), helper.make_node("Div", ["c", "nf"], ["y"])]
    found = _same_as_whole(exported(nodes, WEIGHTS, {"y": (B, 6, 8, 8)}))
    assert found.cut == [("c", (B, 6, 8, 8), "float32")]
    assert [n.op_type for n in found.head.model.graph.node] == ["Conv"]


def test_a_tail_that_reads_the_input_gets_it_whole():
    nodes = [CONV, helper.make_node("ReduceMean", ["x"], ["m"], axes=[0, 1], keepdims=1),
             helper.make_node("Add", ["c", "m"], ["y"])]
    found = _same_as_whole(exported(nodes, WEIGHTS, {"y": (B, 6, 8, 8)}))
    assert found.tail.input_names == ["x", "c"] and found.head.output_names == ["c"]


@pytest.mark.parametrize("case, reason", [
    ("separable", "the whole model computes each sample on its own"),
    ("mixes first", ""),
    ("small head", "holds"),
])
def test_no_head_worth_it(case, reason):
    if case == "separable":
        nodes, inits = [CONV, helper.make_node("Relu", ["c"], ["y"])], WEIGHTS
    elif case == "mixes first":
        nodes, inits = [*mixing("x", "g"), helper.make_node("Conv", ["g", "w"], ["y"], pads=[1, 1, 1, 1])], \
            {**WEIGHTS, "k": np.array([B], "i8")}
    else:  # the convolution after the mixing holds most of the work
        nodes = [helper.make_node("Conv", ["x", "w1"], ["c"]), *mixing("c", "g"),
                 helper.make_node("Conv", ["g", "w"], ["y"], pads=[1, 1, 1, 1])]
        inits = {"w1": np.ones((3, 3, 1, 1), "f4"), **WEIGHTS, "k": np.array([B], "i8")}
    found, why = head_split(exported(nodes, inits, {"y": (B, 6, 8, 8)}), B)
    assert found is None and reason in why
    if case == "mixes first":
        assert "GatherElements" in why or "TopK" in why
