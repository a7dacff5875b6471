"""Converters of mx_trt/converters/indexing.py against MXNet 1.9.1's own output.

Every case runs the symbol natively and through the ONNX export in ONNX Runtime
(:func:`tests.harness.mxcheck.check_symbol`) after asserting that every node's validator
accepts it. Index-like inputs keep their own dtype (int32/int64 arrays stay
integers on both sides). Selection, gathers and creation must match bit for bit.
Sorting cases use distinct values unless a case is about ties.
"""
from __future__ import annotations

import json
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import mxnet as mx
import numpy as np
import pytest

from mx_trt.builder.backends.tensorrt import TensorRTRTXBackend
from mx_trt.pipeline.plan import analyze
from mx_trt.pipeline.request import BindRequest
from mx_trt.export.converters import registry
from mx_trt.graph.importer import symbol_to_graph
from mx_trt.export.spec import op_spec
from mx_trt.settings import Settings
from tests.harness.mxcheck import check_symbol, random_params, run_onnx_whole

X = mx.sym.Variable("x")
Y = mx.sym.Variable("y")
C = mx.sym.Variable("c")
IDX = mx.sym.Variable("i")
EXACT = (0.0, 0.0)

Shapes = Mapping[str, Tuple[int, ...]]
Feeds = Callable[[], Dict[str, np.ndarray]]
_TESTED_OPS: set = set()


def _var(name: str, dtype: str) -> Any:
    return mx.sym.Variable(name, dtype=dtype)


def _arrays(**arrays: Any) -> Feeds:
    """Fixed inputs; plain lists become float32, numpy arrays keep their dtype."""
    def conv(v: Any) -> np.ndarray:
        return v if isinstance(v, np.ndarray) and v.dtype.kind in "iub" else np.asarray(v, np.float32)

    return lambda: {k: conv(v) for k, v in arrays.items()}


def _distinct(shapes: Shapes, seed: int = 1) -> Feeds:
    """Random float32 values without ties (a permutation of a spread grid)."""

    def make() -> Dict[str, np.ndarray]:
        rng = np.random.RandomState(seed)
        return {k: (rng.permutation(int(np.prod(s))).reshape(s) * 0.37 - 5).astype(np.float32) for k, s in shapes.items()}

    return make


def _case(cid: str, sym: Any, shapes: Shapes, inputs: Optional[Feeds] = None, tol: Optional[Tuple[float, float]] = EXACT) -> Any:
    for n in json.loads(sym.tojson())["nodes"]:
        if n["op"] != "null":
            _TESTED_OPS.add(n["op"])
    return pytest.param(sym, shapes, inputs, tol, id=cid)


def _run(sym: Any, shapes: Shapes, inputs: Optional[Feeds], tol: Optional[Tuple[float, float]]) -> None:
    feeds = inputs() if inputs else {k: _distinct({k: s})()[k] for k, s in shapes.items()}
    dtypes = {k: str(v.dtype) for k, v in feeds.items()}
    graph = symbol_to_graph(sym, shapes, dtypes)
    for nid in graph.op_nodes():
        spec = op_spec(graph, nid, {})
        reason = registry.check(spec)
        assert reason is None, f"{spec.op}: {reason}"
    check_symbol(sym, shapes, inputs=feeds, tol=tol)


def _i32(*v: Any) -> np.ndarray:
    return np.array(v, np.int32)


# --------------------------------------------------------------------------------------
# Shape queries, arange, creation
# --------------------------------------------------------------------------------------
S23 = {"x": (2, 3)}
CREATE = [
    _case("shape_array", mx.sym.shape_array(X), {"x": (2, 3, 4)}),
    _case("shape_array_int32", mx.sym.shape_array(_var("x", "int32")), {"x": (2, 5)}, _arrays(x=np.zeros((2, 5), np.int32))),
    _case("size_array", mx.sym.size_array(X), {"x": (2, 3, 4)}),
    # The SSD/YOLO form: arange(20) (stop None) and arange(0, 20), added to data.
    _case("_arange_stop_none", mx.sym.broadcast_add(X, mx.sym.arange(20)), {"x": (2, 20)}),
    _case("_arange_start_stop", mx.sym.broadcast_add(X, mx.sym.arange(0, 20)), {"x": (1, 20)}),
    _case("_arange_float_step", mx.sym.broadcast_add(X, mx.sym.arange(0.1, 2.3, 0.1)), {"x": (1, 22)}),
    _case("_arange_neg_step_repeat", mx.sym.broadcast_add(X, mx.sym.arange(3, -2, -0.7, repeat=2)), {"x": (2, 16)}),
    _case("_arange_int32", mx.sym.broadcast_add(_var("x", "int32"), mx.sym.arange(-3.7, 9, 2.5, dtype="int32")), {"x": (1, 6)},
          _arrays(x=np.zeros((1, 6), np.int32))),
    _case("_arange_int64", mx.sym.broadcast_mul(_var("x", "int64"), mx.sym.arange(5, dtype="int64")), {"x": (2, 5)},
          _arrays(x=np.full((2, 5), 3, np.int64))),
    _case("_arange_float16", mx.sym.Cast(mx.sym.arange(1000, 1010, 0.3, dtype="float16"), dtype="float32") + X, {"x": (34,)}),
    _case("_arange_infer_range", X + mx.sym.arange(start=1.5, step=0.25, infer_range=True), {"x": (7,)}),
    _case("arange_like_all", mx.sym.contrib.arange_like(X), {"x": (2, 3, 4)}),
    _case("arange_like_axis0", mx.sym.contrib.arange_like(X, axis=0), {"x": (32, 1, 8)}),
    _case("arange_like_neg_axis", mx.sym.contrib.arange_like(X, axis=-1, start=0.1, step=0.3, repeat=2), {"x": (2, 9)}),
    _case("arange_like_int32", mx.sym.contrib.arange_like(_var("x", "int32"), start=-2, step=3), {"x": (2, 4)},
          _arrays(x=np.zeros((2, 4), np.int32))),
    _case("zeros_like", mx.sym.zeros_like(X), S23),
    _case("ones_like_int64", mx.sym.ones_like(_var("x", "int64")), S23, _arrays(x=np.zeros((2, 3), np.int64))),
    _case("_zeros", X + mx.sym.zeros((2, 3)), S23),
    _case("_ones_int32", _var("x", "int32") + mx.sym.ones((2, 3), dtype="int32"), S23, _arrays(x=np.full((2, 3), 4, np.int32))),
    _case("_full", mx.sym.broadcast_mul(X, mx.sym.full((1, 3), 1.7)), S23),
    _case("_full_int32_trunc", _var("x", "int32") + mx.sym.full((2, 3), -2.9, dtype="int32"), S23, _arrays(x=np.zeros((2, 3), np.int32))),
    _case("_contrib_div_sqrt_dim", mx.sym.contrib.div_sqrt_dim(X), {"x": (2, 3, 7)}, None, (1e-6, 0)),
]


@pytest.mark.parametrize("sym,shapes,inputs,tol", CREATE)
def test_shapes_and_creation(sym, shapes, inputs, tol):
    _run(sym, shapes, inputs, tol)


# --------------------------------------------------------------------------------------
# where, broadcast_like
# --------------------------------------------------------------------------------------
SELECT = [
    _case("where_same_shape", mx.sym.where(C, X, Y), {"c": (2, 3), "x": (2, 3), "y": (2, 3)},
          _arrays(c=[[1, 0, -1], [0, 2, 0]], x=np.ones((2, 3)), y=np.zeros((2, 3)))),
    _case("where_rows", mx.sym.where(C, X, Y), {"c": (2,), "x": (2, 3, 4), "y": (2, 3, 4)},
          _arrays(c=[0.0, 0.5], x=np.ones((2, 3, 4)), y=np.full((2, 3, 4), 2.0))),
    _case("where_nan_cond", mx.sym.where(C, X, Y), {"c": (3,), "x": (3,), "y": (3,)},
          _arrays(c=[np.nan, 0.0, -0.0], x=[1, 2, 3], y=[4, 5, 6])),
    _case("where_int", mx.sym.where(_var("c", "int32"), _var("x", "int64"), _var("y", "int64")), {"c": (3,), "x": (3, 2), "y": (3, 2)},
          _arrays(c=_i32(0, 3, -1), x=np.arange(6, dtype=np.int64).reshape(3, 2), y=-np.ones((3, 2), np.int64))),
    _case("broadcast_like", mx.sym.broadcast_like(X, Y), {"x": (1, 3, 1), "y": (2, 3, 4)}),
    _case("broadcast_like_axes", mx.sym.broadcast_like(X, Y, lhs_axes=(0,), rhs_axes=(-1,)), {"x": (1, 3), "y": (2, 5)}),
    _case("broadcast_like_two_axes", mx.sym.broadcast_like(X, Y, lhs_axes=(0, 2), rhs_axes=(1, 0)), {"x": (1, 3, 1), "y": (4, 2)}),
    _case("broadcast_like_int32", mx.sym.broadcast_like(_var("x", "int32"), Y), {"x": (1, 3), "y": (2, 3)},
          _arrays(x=_i32(7, -8, 9).reshape(1, 3), y=np.zeros((2, 3)))),
]


@pytest.mark.parametrize("sym,shapes,inputs,tol", SELECT)
def test_selection(sym, shapes, inputs, tol):
    _run(sym, shapes, inputs, tol)


# --------------------------------------------------------------------------------------
# Gathers: take, pick, gather_nd, one_hot
# --------------------------------------------------------------------------------------
T53 = np.arange(15, dtype=np.float32).reshape(5, 3)
P34 = np.arange(12, dtype=np.float32).reshape(3, 4)
# Fractional, negative, out-of-range and non-finite indices: MXNet's C conversions.
ODD = [0, 4, 7, -2, 1.7, -0.5, 3.999, -1.5, 1e10, -1e10, 3e9, np.nan]
GATHER = [
    _case("take_axis0", mx.sym.take(X, IDX), {"x": (5, 3), "i": (2, 4)},
          _arrays(x=T53, i=[[0, 4, 7, -2], [1.7, -0.5, 3.999, 2]])),
    _case("take_axis1", mx.sym.take(X, IDX, axis=1), {"x": (2, 5, 3), "i": (3,)},
          _arrays(x=np.arange(30).reshape(2, 5, 3), i=[4.5, -1, 2])),
    _case("take_neg_axis", mx.sym.take(X, IDX, axis=-1, mode="clip"), {"x": (2, 5), "i": (2, 2)},
          _arrays(x=np.arange(10).reshape(2, 5), i=[[0, 9], [3, 1]])),
    _case("take_odd_clip", mx.sym.take(X, IDX), {"x": (5, 3), "i": (len(ODD),)}, _arrays(x=T53, i=ODD)),
    _case("take_odd_wrap", mx.sym.take(X, IDX, mode="wrap"), {"x": (5, 3), "i": (len(ODD),)}, _arrays(x=T53, i=ODD)),
    _case("take_wrap_neg", mx.sym.take(X, IDX, mode="wrap", axis=1), {"x": (2, 5), "i": (6,)},
          _arrays(x=np.arange(10).reshape(2, 5), i=[-0.5, -1, 5, 7.9, -6, -1.5])),
    _case("take_int32", mx.sym.take(X, _var("i", "int32")), {"x": (5, 3), "i": (4,)}, _arrays(x=T53, i=_i32(0, 4, 7, -2))),
    _case("take_int64_wrap", mx.sym.take(X, _var("i", "int64"), mode="wrap"), {"x": (5, 3), "i": (4,)},
          _arrays(x=T53, i=np.array([0, -4, 7, -11], np.int64))),
    _case("take_int32_data", mx.sym.take(_var("x", "int32"), IDX), {"x": (4,), "i": (3,)}, _arrays(x=_i32(5, 6, 7, 8), i=[3, 0, 9])),
    _case("pick_clip", mx.sym.pick(X, IDX, axis=1), {"x": (3, 4), "i": (3,)}, _arrays(x=P34, i=[0, 3.9, -1])),
    _case("pick_wrap", mx.sym.pick(X, IDX, axis=1, mode="wrap"), {"x": (3, 4), "i": (3,)}, _arrays(x=P34, i=[0, 5, -1])),
    _case("pick_odd_clip", mx.sym.pick(X, IDX, axis=0), {"x": (3, 12), "i": (12,)}, _arrays(x=np.arange(36).reshape(3, 12), i=ODD)),
    _case("pick_odd_wrap", mx.sym.pick(X, IDX, axis=0, mode="wrap"), {"x": (3, 12), "i": (12,)},
          _arrays(x=np.arange(36).reshape(3, 12), i=ODD)),
    _case("pick_keepdims", mx.sym.pick(X, IDX, axis=-1, keepdims=True), {"x": (3, 4), "i": (3, 1)}, _arrays(x=P34, i=[[0], [3], [1]])),
    _case("pick_keepdims_flat_index", mx.sym.pick(X, IDX, axis=1, keepdims=True), {"x": (3, 4), "i": (3,)}, _arrays(x=P34, i=[2, 3, 1])),
    _case("pick_3d_mid_axis", mx.sym.pick(X, IDX, axis=1), {"x": (2, 4, 3), "i": (2, 3)},
          _arrays(x=np.arange(24).reshape(2, 4, 3), i=[[0, 1, 2], [3, 2, 1]])),
    _case("pick_int32", mx.sym.pick(X, _var("i", "int32"), axis=1), {"x": (3, 4), "i": (3,)}, _arrays(x=P34, i=_i32(2, -5, 9))),
    _case("gather_nd_2d", mx.sym.gather_nd(X, IDX), {"x": (5, 3), "i": (2, 3)}, _arrays(x=T53, i=[[-1, 0, 4], [0, -1, 2]])),
    _case("gather_nd_rows", mx.sym.gather_nd(X, IDX), {"x": (5, 3), "i": (1, 4)}, _arrays(x=T53, i=[[4, 0, -5, 2]])),
    _case("gather_nd_float", mx.sym.gather_nd(X, IDX), {"x": (5, 3), "i": (2, 2)}, _arrays(x=T53, i=[[1.7, -0.5], [0.9, 2.0]])),
    _case("gather_nd_3d_index", mx.sym.gather_nd(X, _var("i", "int32")), {"x": (4, 3, 2), "i": (2, 2, 2)},
          _arrays(x=np.arange(24).reshape(4, 3, 2), i=_i32(0, 3, 1, -4, 2, 0, -1, 1).reshape(2, 2, 2))),
    _case("one_hot_odd", mx.sym.one_hot(IDX, 3), {"i": (len(ODD),)}, _arrays(i=ODD)),
    _case("one_hot_on_off_int32", mx.sym.one_hot(IDX, 4, on_value=7.9, off_value=-1.2, dtype="int32"), {"i": (2, 3)},
          _arrays(i=[[0, 1, 3], [2, -1, 4]])),
    _case("one_hot_int_indices", mx.sym.one_hot(_var("i", "int64"), 5, on_value=0.5, off_value=0.25), {"i": (4,)},
          _arrays(i=np.array([4, 0, -1, 5], np.int64))),
]


@pytest.mark.parametrize("sym,shapes,inputs,tol", GATHER)
def test_gathers(sym, shapes, inputs, tol):
    _run(sym, shapes, inputs, tol)


def test_take_weight_table():
    """Embedding-like: a weight table gathered by data indices."""
    sym = mx.sym.take(mx.sym.Variable("w", shape=(4, 2)), IDX)
    params = ({"w": mx.nd.array(np.arange(8, dtype=np.float32).reshape(4, 2))}, {})
    check_symbol(sym, {"i": (2, 3)}, inputs={"i": np.array([[0, 1, 2], [3, 3, 0]], np.float32)}, params=params, tol=EXACT)


# --------------------------------------------------------------------------------------
# Search and sort
# --------------------------------------------------------------------------------------
A = {"x": (3, 4, 5)}
SORT = [
    _case("argmax_axis", mx.sym.argmax(X, axis=1), A),
    _case("argmax_keepdims", mx.sym.argmax(X, axis=-1, keepdims=True), A),
    _case("argmax_global", mx.sym.argmax(X), A),
    _case("argmax_global_keepdims", mx.sym.argmax(X, keepdims=True), A),
    _case("argmax_1d", mx.sym.argmax(X, axis=0), {"x": (7,)}),
    _case("argmax_first_of_ties", mx.sym.argmax(X, axis=1), {"x": (2, 4)}, _arrays(x=[[1, 3, 3, 0], [2, 2, 2, 2]])),
    _case("argmin_axis", mx.sym.argmin(X, axis=0), A),
    _case("argmin_global", mx.sym.argmin(X), A),
    _case("argmax_channel", mx.sym.argmax_channel(X), {"x": (3, 6)}),
    _case("topk_indices", mx.sym.topk(X, k=2), A),
    _case("topk_value_axis0", mx.sym.topk(X, axis=0, k=2, ret_typ="value"), A),
    _case("topk_both_ascend", mx.sym.topk(X, axis=1, k=3, ret_typ="both", is_ascend=True), A),
    _case("topk_flat", mx.sym.topk(X, axis=None, k=4, ret_typ="both"), A),
    _case("topk_sort_all", mx.sym.topk(X, k=0, ret_typ="value"), A),
    _case("topk_int32_indices", mx.sym.topk(X, k=2, dtype="int32"), A),
    _case("topk_int64_indices", mx.sym.topk(X, k=3, axis=0, dtype="int64", is_ascend=True), A),
    _case("topk_mask", mx.sym.topk(X, k=2, ret_typ="mask"), A),
    _case("topk_mask_axis1_ascend", mx.sym.topk(X, k=3, axis=1, ret_typ="mask", is_ascend=True), A),
    _case("topk_mask_flat", mx.sym.topk(X, k=5, axis=None, ret_typ="mask"), A),
    _case("sort", mx.sym.sort(X), A),
    _case("sort_axis0_descend", mx.sym.sort(X, axis=0, is_ascend=False), A),
    _case("sort_flat", mx.sym.sort(X, axis=None), A),
    _case("argsort", mx.sym.argsort(X), A),
    _case("argsort_descend_int32", mx.sym.argsort(X, axis=1, is_ascend=False, dtype="int32"), A),
    _case("argsort_int64", mx.sym.argsort(X, axis=-3, dtype="int64"), A),
    # Ties: MXNet's CPU sort (std::sort on a short row, insertion sort) and ONNX TopK
    # both put the lower index first here; longer rows are not guaranteed to agree.
    _case("argsort_short_row_ties", mx.sym.argsort(X), {"x": (1, 6)}, _arrays(x=[[3, 1, 3, 2, 1, 3]])),
]


@pytest.mark.parametrize("sym,shapes,inputs,tol", SORT)
def test_search_and_sort(sym, shapes, inputs, tol):
    _run(sym, shapes, inputs, tol)


# --------------------------------------------------------------------------------------
# Sequences
# --------------------------------------------------------------------------------------
L = mx.sym.Variable("l")
SEQ4x3 = np.arange(24, dtype=np.float32).reshape(4, 3, 2) + 1
LENS = [2.5, 0, 5]  # fractional (truncated), empty, longer than T (SequenceMask keeps all)
SEQ = [
    _case("SequenceMask_axis0", mx.sym.SequenceMask(X, L, use_sequence_length=True, value=-1), {"x": (4, 3, 2), "l": (3,)},
          _arrays(x=SEQ4x3, l=LENS)),
    _case("SequenceMask_axis1", mx.sym.SequenceMask(X, L, use_sequence_length=True, value=-1e4, axis=1), {"x": (3, 4), "l": (3,)},
          _arrays(x=np.arange(12).reshape(3, 4), l=LENS)),
    _case("SequenceMask_int32_lengths", mx.sym.SequenceMask(X, _var("l", "int32"), use_sequence_length=True), {"x": (4, 2, 3), "l": (2,)},
          _arrays(x=np.ones((4, 2, 3)), l=_i32(3, 1))),
    _case("SequenceMask_bert", mx.sym.SequenceMask(X, L, use_sequence_length=True, axis=0), {"x": (6, 1, 8), "l": (1,)},
          _arrays(x=np.arange(48).reshape(6, 1, 8), l=[4])),
    _case("SequenceMask_off", mx.sym.SequenceMask(X, use_sequence_length=False), {"x": (4, 3)}),
    _case("SequenceLast_axis0", mx.sym.SequenceLast(X, L, use_sequence_length=True), {"x": (4, 3, 2), "l": (3,)},
          _arrays(x=SEQ4x3, l=[2.5, 1, 4])),
    _case("SequenceLast_axis1_int", mx.sym.SequenceLast(X, _var("l", "int32"), use_sequence_length=True, axis=1), {"x": (3, 4), "l": (3,)},
          _arrays(x=np.arange(12).reshape(3, 4), l=_i32(1, 4, 2))),
    _case("SequenceLast_off", mx.sym.SequenceLast(X), {"x": (4, 3, 2)}),
    _case("SequenceLast_off_axis1", mx.sym.SequenceLast(X, axis=1), {"x": (3, 4)}),
    _case("SequenceReverse", mx.sym.SequenceReverse(X, L, use_sequence_length=True), {"x": (4, 3, 2), "l": (3,)},
          _arrays(x=SEQ4x3, l=[2.5, 1, 4])),
    _case("SequenceReverse_int_empty", mx.sym.SequenceReverse(X, _var("l", "int64"), use_sequence_length=True), {"x": (4, 3), "l": (3,)},
          _arrays(x=np.arange(12).reshape(4, 3), l=np.array([0, 3, 4], np.int64))),
    _case("SequenceReverse_off", mx.sym.SequenceReverse(X), {"x": (4, 3, 2)}),
]


@pytest.mark.parametrize("sym,shapes,inputs,tol", SEQ)
def test_sequences(sym, shapes, inputs, tol):
    _run(sym, shapes, inputs, tol)


# --------------------------------------------------------------------------------------
# float16 (between two Casts: MXNet's simple_bind is fp32)
# --------------------------------------------------------------------------------------
def _half(sym_fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
    return mx.sym.Cast(sym_fn(*[mx.sym.Cast(a, dtype="float16") for a in args], **kw), dtype="float32")


HALF = [
    _case("fp16-take_wrap", _half(mx.sym.take, X, IDX, mode="wrap"), {"x": (5, 3), "i": (5,)}, _arrays(x=T53, i=[0, 4, 7, -2, -0.5])),
    _case("fp16-pick", _half(mx.sym.pick, X, IDX, axis=1), {"x": (3, 4), "i": (3,)}, _arrays(x=P34, i=[0, 3.9, -1])),
    _case("fp16-one_hot", _half(lambda i: mx.sym.one_hot(i, 4, dtype="float16"), IDX), {"i": (4,)}, _arrays(i=[0, 3.5, -0.5, 4])),
    _case("fp16-topk_mask", _half(mx.sym.topk, X, k=2, ret_typ="mask"), {"x": (2, 5)}, _arrays(x=[[1, 5, 2, 4, 3], [9, 8, 7, 6, 5]])),
    _case("fp16-topk_both", _half(lambda a: mx.sym.topk(a, k=3, ret_typ="both", dtype="float16")[0], X), {"x": (2, 5)},
          _arrays(x=[[1, 5, 2, 4, 3], [9, 8, 7, 6, 5]])),
    _case("fp16-SequenceMask", _half(mx.sym.SequenceMask, X, L, use_sequence_length=True, value=-2.5), {"x": (4, 3, 2), "l": (3,)},
          _arrays(x=SEQ4x3, l=LENS)),
    # MXNet's half range truncates start and step to integers (see indexing._range_values).
    _case("fp16-arange_like", _half(mx.sym.contrib.arange_like, X, start=0.1, step=0.7), {"x": (5, 7)}),
    _case("fp16-arange_like_int_part", _half(mx.sym.contrib.arange_like, X, start=2.5, step=-1.5, axis=1), {"x": (5, 7)}),
]


@pytest.mark.parametrize("sym,shapes,inputs,tol", HALF)
def test_float16(sym, shapes, inputs, tol):
    _run(sym, shapes, inputs, tol)


# --------------------------------------------------------------------------------------
# Validators: unsupported variants are rejected with a reason
# --------------------------------------------------------------------------------------
def _spec(sym: Any, shapes: Shapes, dtypes: Optional[Mapping[str, str]] = None) -> registry.OpSpec:
    graph = symbol_to_graph(sym, shapes, dtypes)
    return op_spec(graph, graph.heads[0].node, {})


REJECT = [
    pytest.param(mx.sym.take(X, IDX, mode="raise"), {"x": (4, 3), "i": (2,)}, None, "mode='raise'", id="take_raise"),
    pytest.param(mx.sym.topk(X, k=2, dtype="float64"), {"x": (2, 5)}, None, "index dtype float64", id="topk_index_float64"),
    pytest.param(mx.sym.topk(X, k=2), {"x": (2, 5)}, {"x": "int32"}, "input 0 has dtype int32", id="topk_int_data"),
    pytest.param(mx.sym.one_hot(IDX, 3, dtype="uint8"), {"i": (2,)}, None, "dtype uint8", id="one_hot_uint8"),
    pytest.param(mx.sym.where(C, X, Y), {"c": (2,), "x": (2, 3), "y": (2, 3)}, {"c": "float32", "x": "float32", "y": "float16"},
                 "different dtypes", id="where_mixed"),
]


@pytest.mark.parametrize("sym,shapes,dtypes,reason", REJECT)
def test_validator_rejects(sym, shapes, dtypes, reason):
    got = registry.check(_spec(sym, shapes, dtypes))
    assert got is not None and reason in got, got


def _with(spec: registry.OpSpec, **attrs: str) -> registry.OpSpec:
    return registry.OpSpec(spec.name, spec.op, {**spec.attrs, **attrs}, spec.in_shapes, spec.in_dtypes, spec.out_shapes, spec.out_dtypes)


def test_validator_rejects_hand_made_specs():
    """Attributes MXNet's own inference would refuse, checked one level down."""
    rev = _spec(mx.sym.SequenceReverse(X, L, use_sequence_length=True), {"x": (4, 3), "l": (3,)})
    assert "axis=1 is not supported" in (registry.check(_with(rev, axis="1")) or "")
    pick = _spec(mx.sym.pick(X, IDX, axis=1), {"x": (3, 4), "i": (3,)})
    assert "axis=None" in (registry.check(_with(pick, axis="None")) or "")
    ar = registry.OpSpec("ar", "_arange", {"start": "0", "stop": "4", "step": "1.0", "repeat": "1", "infer_range": "False",
                                           "dtype": "float32"}, (), (), ((4,),), ("float32",))
    assert registry.check(ar) is None
    assert "step != 0" in (registry.check(_with(ar, step="0")) or "")
    assert "differs from MXNet's" in (registry.check(_with(ar, stop="6")) or "")
    f64 = registry.OpSpec(ar.name, ar.op, ar.attrs, ar.in_shapes, ar.in_dtypes, ar.out_shapes, ("float64",))
    assert "dtype float64" in (registry.check(f64) or "")


def test_cast_free_index_rounding():
    """Float indices are rounded by Floor/Ceil in the graph, never by a Cast of a fractional value."""
    sym = mx.sym.take(X, IDX, mode="wrap")
    shapes = {"x": (5, 3), "i": (4,)}
    args, aux = random_params(sym, shapes)
    _, model = run_onnx_whole(sym, shapes, args, aux, _arrays(x=T53, i=[0, 1, 2, 3])())
    producers = {o: n.op_type for n in model.graph.node for o in n.output}
    for n in model.graph.node:
        if n.op_type == "Cast" and producers.get(n.input[0]) not in (None, "Floor", "Clip", "Where"):
            pytest.fail(f"Cast of {producers.get(n.input[0])} output")


def test_every_indexing_converter_is_exercised():
    """Each converter of indexing.py runs in at least one numerical case above."""
    registry.registered_ops()
    by_fn: Dict[Any, List[str]] = {}
    for name, entry in ((k, v[0]) for k, v in registry.entries().items()):
        if entry.converter.__module__.endswith("converters.indexing"):
            by_fn.setdefault(entry.converter, []).append(name)
    missing = [names for names in by_fn.values() if not set(names) & _TESTED_OPS]
    assert not missing, f"converters without a numerical test: {missing}"


# --------------------------------------------------------------------------------------
# TensorRT-RTX build gate (fp32 and fp16): the ops really go into engines and build
# --------------------------------------------------------------------------------------
def _gate_graphs() -> Dict[str, Tuple[Any, Shapes]]:
    x, i32, ln = mx.sym.var("data"), mx.sym.var("idx", dtype="int32"), mx.sym.var("len")
    a = x * 2.0
    shape_chain = mx.sym.Cast(mx.sym.reshape(mx.sym.tile(mx.sym.reverse(mx.sym.expand_dims(
        mx.sym.slice_axis(mx.sym.shape_array(a), axis=0, begin=1, end=None), axis=0), axis=1), reps=(2,)),
        shape=(0, -4, 1, -1)), dtype="float32")
    gathers = mx.sym.Group([
        mx.sym.take(a, mx.sym.Cast(i32, dtype="float32"), mode="wrap"),
        mx.sym.take(a, i32, axis=1),
        mx.sym.pick(a, mx.sym.slice_axis(mx.sym.Cast(i32, dtype="float32"), axis=0, begin=0, end=2), axis=1, mode="wrap"),
        mx.sym.gather_nd(a, mx.sym.reshape(i32, shape=(2, 2))),
        mx.sym.one_hot(i32, 5, on_value=2.0) * 3.0,
        mx.sym.where(mx.sym.slice_axis(i32, axis=0, begin=0, end=2), a, a * -1.0),
        mx.sym.broadcast_like(mx.sym.slice_axis(a, axis=1, begin=0, end=1), a),
        shape_chain,
        mx.sym.broadcast_add(a, mx.sym.arange(6)),
        mx.sym.broadcast_add(mx.sym.contrib.arange_like(a, axis=1), mx.sym.Cast(mx.sym.size_array(a), dtype="float32")),
        mx.sym.Cast(mx.sym.broadcast_add(mx.sym.Cast(a, dtype="int32") * 3, i32.reshape((4, 1)).slice_axis(axis=0, begin=0, end=2)),
                    dtype="float32"),
        a + mx.sym.full((2, 6), 0.5) + mx.sym.zeros_like(a),
        mx.sym.Cast(mx.sym.broadcast_logical_or(mx.sym.broadcast_lesser(mx.sym.Cast(a, dtype="int64"), mx.sym.Cast(a * 2.0, dtype="int64")),
                                                mx.sym.maximum(mx.sym.Cast(a, dtype="int64") - 1, 0)), dtype="float32"),
    ])
    sorts = mx.sym.Group(list(mx.sym.topk(a, k=3, ret_typ="both", dtype="int32")) + [
        mx.sym.topk(a, k=2, ret_typ="mask"), mx.sym.sort(a, axis=0), mx.sym.argsort(a, is_ascend=False, dtype="int64"),
    ])
    seq = mx.sym.Group([
        mx.sym.SequenceMask(a, ln, use_sequence_length=True, value=-1e4),
        mx.sym.SequenceLast(a, ln, use_sequence_length=True),
        mx.sym.SequenceReverse(a, ln, use_sequence_length=True),
        mx.sym.batch_dot(a.reshape((3, 2, 2)), a.reshape((3, 2, 2)), transpose_a=True, transpose_b=True),
    ])
    return {
        "gathers": (gathers, {"data": (2, 6), "idx": (4,)}),
        "sorts": (sorts, {"data": (2, 6)}),
        "sequences": (seq, {"data": (6, 2), "len": (2,)}),
    }


@pytest.fixture(scope="module")
def trt_rtx() -> TensorRTRTXBackend:
    reason = TensorRTRTXBackend.build_unavailable_reason()
    if reason is not None:
        pytest.fail(f"the TensorRT build gate needs TensorRT-RTX: {reason}")
    return TensorRTRTXBackend()


@pytest.mark.parametrize("fp16", [False, True], ids=["fp32", "fp16"])
@pytest.mark.parametrize("name", ["gathers", "sorts", "sequences"])
def test_trt_rtx_builds(name, fp16, trt_rtx):
    from tests.builder.test_trt_rtx_gate import gate

    sym, shapes = _gate_graphs()[name]
    args, aux = random_params(sym, shapes)
    plan = analyze(BindRequest(sym, shapes, {**args, **aux}, Settings.from_env(), trt_rtx))
    native = {plan.graph.nodes[n].op: why for n, why in plan.reasons.items()}
    assert not native, f"left native for TensorRT: {native}"
    inside, total = plan.op_counts()
    assert inside == total, f"only {inside} of {total} operators are inside subgraphs"
    stats = gate(name, sym, shapes, {**args, **aux}, trt_rtx, fp16)
    assert stats["subgraphs"] >= 1


@pytest.mark.parametrize("make", [lambda x: mx.sym.argsort(x, axis=-1, name="s"),
                                  lambda x: mx.sym.sort(x, name="s"),
                                  lambda x: mx.sym.topk(x, k=4000, ret_typ="value", name="s")],
                         ids=["argsort", "sort", "topk"])
def test_topk_limit_is_tensorrts_alone(make):
    """k above TensorRT's TopK limit keeps the op native for the TensorRT backends only."""
    from mx_trt.builder.backends.onnxruntime import OnnxRuntimeBackend
    from mx_trt.builder.backends.tensorrt import TensorRTRTXBackend
    from mx_trt.pipeline.plan import support
    from mx_trt.graph.importer import symbol_to_graph
    from mx_trt.settings import Settings

    sym = make(mx.sym.var("data"))
    g = symbol_to_graph(sym, {"data": (2, 5000)})
    nid = g.by_name("s").id
    assert support(g, {}, Settings(), OnnxRuntimeBackend()) == {}
    why = support(g, {}, Settings(), TensorRTRTXBackend())[nid]
    assert "TensorRT's TopK limit of 3840" in why
