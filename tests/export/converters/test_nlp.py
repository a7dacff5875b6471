"""Per-converter tests of mx_trt/converters/nlp.py (and GELU/erf) against MXNet 1.9.1.

Each case builds a small symbol, exports it through the converters, runs it in
ONNX Runtime and compares with MXNet's own forward (``tests.harness.mxcheck``); the
TensorRT-RTX build gate (fp32 and fp16) runs on one graph per operator, and
asserts that the operator really went into an engine.
"""
from __future__ import annotations

import math
from typing import Any, Dict, Tuple

import mxnet as mx
import numpy as np
import pytest

from mx_trt.builder.backends.tensorrt import TensorRTRTXBackend
from mx_trt.pipeline.plan import analyze
from mx_trt.pipeline.request import BindRequest
from mx_trt.export.converters.registry import OpSpec, check
from mx_trt.graph.importer import symbol_to_graph
from mx_trt.export.spec import op_spec
from mx_trt.settings import Settings
from tests.harness.mxcheck import OP_TOL, check_symbol, random_inputs, random_params, run_native, run_onnx_whole, reason_of

D = mx.sym.Variable("data")
RNG = np.random.RandomState(7)


def _ids(cases):
    return [c[0] for c in cases]


def make_spec(op: str, attrs: Dict[str, Any], in_shapes, out_shapes, in_dtypes=None, out_dtypes=None) -> OpSpec:
    """A hand-built spec, for combinations MXNet's own shape or type inference refuses."""
    in_dtypes = in_dtypes or ("float32",) * len(in_shapes)
    out_dtypes = out_dtypes or ("float32",) * len(out_shapes)
    return OpSpec(name="n", op=op, attrs={k: str(v) for k, v in attrs.items()},
                  in_shapes=tuple(tuple(s) for s in in_shapes), in_dtypes=tuple(in_dtypes),
                  out_shapes=tuple(tuple(s) for s in out_shapes), out_dtypes=tuple(out_dtypes))


# -- interleaved attention matmuls --------------------------------------------------------

#: (seq, batch, heads, head_dim); BERT-base is (seq, batch, 12, 64).
ATT_CASES = [
    ("1head", 5, 2, 1, 4),
    ("2heads", 4, 3, 2, 3),
    ("bert_like", 6, 2, 12, 8),
    ("batch1_seq1", 1, 1, 4, 2),
]


@pytest.mark.parametrize("name,seq,batch,heads,hd", ATT_CASES, ids=_ids(ATT_CASES))
def test_selfatt_qk(name, seq, batch, heads, hd):
    sym = mx.sym.contrib.interleaved_matmul_selfatt_qk(D, heads=heads, name="qk")
    ref, _ = check_symbol(sym, {"data": (seq, batch, 3 * heads * hd)})
    assert ref[0].shape == (batch * heads, seq, seq)


@pytest.mark.parametrize("name,seq,batch,heads,hd", ATT_CASES, ids=_ids(ATT_CASES))
def test_selfatt_valatt(name, seq, batch, heads, hd):
    att = mx.sym.Variable("att")
    sym = mx.sym.contrib.interleaved_matmul_selfatt_valatt(D, att, heads=heads, name="va")
    check_symbol(sym, {"data": (seq, batch, 3 * heads * hd), "att": (batch * heads, seq, seq)})


@pytest.mark.parametrize("name,seq,batch,heads,hd", ATT_CASES, ids=_ids(ATT_CASES))
@pytest.mark.parametrize("kv_seq", [3, 7])
def test_encdec_qk(name, seq, batch, heads, hd, kv_seq):
    kv = mx.sym.Variable("kv")
    sym = mx.sym.contrib.interleaved_matmul_encdec_qk(D, kv, heads=heads, name="qk")
    ref, _ = check_symbol(sym, {"data": (seq, batch, heads * hd), "kv": (kv_seq, batch, 2 * heads * hd)})
    assert ref[0].shape == (batch * heads, seq, kv_seq)


@pytest.mark.parametrize("name,seq,batch,heads,hd", ATT_CASES, ids=_ids(ATT_CASES))
@pytest.mark.parametrize("kv_seq", [3, 7])
def test_encdec_valatt(name, seq, batch, heads, hd, kv_seq):
    att = mx.sym.Variable("att")
    sym = mx.sym.contrib.interleaved_matmul_encdec_valatt(D, att, heads=heads, name="va")
    ref, _ = check_symbol(sym, {"data": (kv_seq, batch, 2 * heads * hd), "att": (batch * heads, seq, kv_seq)})
    assert ref[0].shape == (seq, batch, heads * hd)


def _bert_attention(heads: int = 2, units: int = 8):
    """GluonNLP's BERT self-attention: packed projection, scores, length-masked softmax, values."""
    length = mx.sym.Variable("length", dtype="int32")
    qkv = mx.sym.FullyConnected(D, num_hidden=3 * units, flatten=False, name="proj")
    scores = mx.sym.contrib.interleaved_matmul_selfatt_qk(qkv, heads=heads, name="qk")
    att = mx.sym.softmax(scores, length, axis=-1, use_length=True, name="sm")
    return mx.sym.contrib.interleaved_matmul_selfatt_valatt(qkv, att, heads=heads, name="va")


def test_bert_attention_block():
    """Layouts agree end to end: rows of different lengths, including an empty one."""
    seq, batch, heads = 5, 3, 2
    sym = _bert_attention(heads)
    lengths = np.repeat(np.array([5, 2, 0], np.int32), heads).reshape(batch * heads, 1)
    lengths = np.broadcast_to(lengths, (batch * heads, seq)).copy()
    feeds = {"data": random_inputs({"d": (seq, batch, 8)})["d"], "length": lengths}
    check_symbol(sym, {"data": (seq, batch, 8), "length": (batch * heads, seq)}, inputs=feeds)


def test_encdec_attention_block():
    """Queries against a packed k|v memory, scores to softmax to values."""
    q, kv = mx.sym.Variable("q"), mx.sym.Variable("kv")
    scores = mx.sym.contrib.interleaved_matmul_encdec_qk(q, kv, heads=2, name="qk")
    sym = mx.sym.contrib.interleaved_matmul_encdec_valatt(kv, mx.sym.softmax(scores, name="sm"), heads=2, name="va")
    check_symbol(sym, {"q": (4, 2, 6), "kv": (5, 2, 12)})


# -- softmax / log_softmax: length mask, temperature, dtype -----------------------------------


def _lengths(shape: Tuple[int, ...], m: int, dtype: str, seed: int = 3) -> np.ndarray:
    """Lengths in [0, m] with both ends present (MXNet reads out of bounds outside that range)."""
    rng = np.random.RandomState(seed)
    v = rng.randint(0, m + 1, shape)
    flat = v.reshape(-1)
    if flat.size == 1:
        flat[0] = m // 2
    else:
        flat[0], flat[-1] = 0, m
    return v.astype(dtype)


SOFTMAX_LENGTH_CASES = [
    ("last", (2, 3, 5), dict()),
    ("last_explicit", (2, 3, 5), dict(axis=2)),
    ("axis1", (2, 4, 3), dict(axis=1)),
    ("axis0", (4, 3), dict(axis=0)),
    ("axis0_3d", (5, 2, 3), dict(axis=0)),
    ("2d", (6, 7), dict()),
    ("1d", (6,), dict()),
    ("temperature", (3, 6), dict(temperature=0.3)),
    ("temperature_axis1", (2, 5, 3), dict(axis=1, temperature=2.5)),
    ("bert_scores", (24, 8, 8), dict(axis=-1)),
]


@pytest.mark.parametrize("ldtype", ["int32", "int64"])
@pytest.mark.parametrize("name,shape,kw", SOFTMAX_LENGTH_CASES, ids=_ids(SOFTMAX_LENGTH_CASES))
def test_softmax_length(name, shape, kw, ldtype):
    """Masked positions (j >= length) are 0; a zero length gives a zero row."""
    axis = kw.get("axis", -1) % len(shape)
    lshape = tuple(d for i, d in enumerate(shape) if i != axis) or (1,)
    length = mx.sym.Variable("length")
    sym = mx.sym.softmax(D, length, use_length=True, name="s", **kw)
    feeds = {"data": random_inputs({"d": shape})["d"] * 6, "length": _lengths(lshape, shape[axis], ldtype)}
    ref, _ = check_symbol(sym, {"data": shape, "length": lshape}, inputs=feeds)
    assert (ref[0] == 0).any()


def test_softmax_length_fp16_data_keeps_large_scores_apart():
    """Masked scores weigh nothing even next to scores near float16's limits."""
    shapes = {"data": (2, 4), "length": (2,)}
    sym = mx.sym.softmax(D, mx.sym.Variable("length"), use_length=True, name="s")
    feeds = {"data": np.array([[-60000, -60010, 3, 0], [20000, -65000, 65000, 1]], np.float16),
             "length": np.array([2, 3], np.int32)}
    ref = run_native(sym, shapes, {}, {}, feeds, type_dict={"data": "float16", "length": "int32"})
    got, model = run_onnx_whole(sym, shapes, {}, {}, feeds, dtypes={"data": "float16", "length": "int32"})
    assert got[0].dtype == np.float16
    np.testing.assert_allclose(got[0].astype(np.float32), ref[0].astype(np.float32), rtol=1e-2, atol=1e-3)


def test_softmax_length_ignores_masked_values():
    """MXNet never reads positions past the length: NaN and inf there change nothing."""
    shapes = {"data": (3, 5), "length": (3,)}
    sym = mx.sym.softmax(D, mx.sym.Variable("length"), use_length=True, name="s")
    x = random_inputs({"d": (3, 5)})["d"] * 4
    x[0, 2:] = np.nan
    x[1, 3:] = [np.inf, -np.inf]
    x[2, :] = [1e30, -1e30, np.nan, 3, 4]
    ref, got = check_symbol(sym, shapes, inputs={"data": x, "length": np.array([2, 3, 0], np.int32)})
    assert np.isfinite(got[0]).all()


# (log_softmax takes no length input in MXNet 1.9.1.)
DTYPE_CASES = [(fn, use_length, dts) for fn, use_length in [("softmax", False), ("softmax", True), ("log_softmax", False)]
               for dts in [("float16", "float32"), ("float32", "float16"), ("float16", "float16")]]


@pytest.mark.parametrize("fn,use_length,dtypes", DTYPE_CASES,
                         ids=[f"{c[0]}-{'length-' if c[1] else ''}{c[2][0]}-{c[2][1]}" for c in DTYPE_CASES])
def test_softmax_dtype(fn, use_length, dtypes):
    """``dtype`` picks the output type; MXNet computes in float32 when either side is float32."""
    in_dt, out_dt = dtypes
    kw = dict(dtype=out_dt) if out_dt != in_dt else {}
    shapes = {"data": (3, 5)}
    feeds = {"data": (random_inputs({"d": (3, 5)})["d"] * 4).astype(in_dt)}
    types = {"data": in_dt}
    args = [D]
    if use_length:
        args.append(mx.sym.Variable("length"))
        shapes["length"] = (3,)
        feeds["length"] = np.array([0, 2, 5], np.int32)
        types["length"] = "int32"
    sym = getattr(mx.sym, fn)(*args, use_length=use_length, temperature=0.7, name="s", **kw)
    ref = run_native(sym, shapes, {}, {}, feeds, type_dict=types)
    got, _ = run_onnx_whole(sym, shapes, {}, {}, feeds, dtypes=types)
    assert got[0].dtype == ref[0].dtype == np.dtype(out_dt)
    rtol, atol = OP_TOL["float16" if "float16" in dtypes else "float32"]
    np.testing.assert_allclose(got[0].astype(np.float32), ref[0].astype(np.float32), rtol=rtol, atol=atol)


def test_softmax_out_of_range_lengths_clamp():
    """Lengths MXNet would read out of bounds for: negative is an empty row, > M a full one."""
    length = mx.sym.Variable("length")
    sym = mx.sym.softmax(D, length, use_length=True, name="s")
    shapes = {"data": (4, 3), "length": (4,)}
    x = random_inputs({"d": (4, 3)})["d"]
    for ldtype in ("int32", "int64"):
        lens = np.array([-1, 4, 2**31 + 1 if ldtype == "int64" else 2**31 - 1, -(2**31)], dtype=ldtype)
        got, _ = run_onnx_whole(sym, shapes, {}, {}, {"data": x, "length": lens}, dtypes={"length": ldtype})
        e = np.exp(x - x.max(axis=1, keepdims=True))
        full = e / e.sum(axis=1, keepdims=True)
        want = np.stack([np.zeros(3), full[1], full[2], np.zeros(3)]).astype(np.float32)
        np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-6)


# -- GELU and erf -------------------------------------------------------------------------


def test_gelu_is_mxnets_erf_form():
    """MXNet 1.9.1's gelu is 0.5 x (1 + erf(x / sqrt 2)), not the tanh approximation."""
    x = np.linspace(-4, 4, 41).astype(np.float32)
    ref = run_native(mx.sym.LeakyReLU(D, act_type="gelu", name="g"), {"data": (41,)}, {}, {}, {"data": x})[0]
    erf_form = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x.astype(np.float64)])
    tanh_form = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    np.testing.assert_allclose(ref, erf_form, rtol=0, atol=1e-6)  # float32 rounding of 1 + erf
    assert np.abs(ref - tanh_form).max() > 1e-4


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("shape", [(2, 3, 16), (9,)])
def test_gelu(shape, dtype):
    sym = mx.sym.LeakyReLU(D, act_type="gelu", name="g")
    x = (random_inputs({"d": shape})["d"] * 5).astype(dtype)
    ref = run_native(sym, {"data": shape}, {}, {}, {"data": x}, type_dict={"data": dtype})
    got, _ = run_onnx_whole(sym, {"data": shape}, {}, {}, {"data": x}, dtypes={"data": dtype})
    assert got[0].dtype == np.dtype(dtype)
    rtol, atol = OP_TOL[dtype]
    np.testing.assert_allclose(got[0].astype(np.float32), ref[0].astype(np.float32), rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_erf(dtype):
    sym = mx.sym.erf(D, name="e")
    x = np.concatenate([np.linspace(-5, 5, 50), [0.0, 1e-4, -1e-4, 30.0]]).astype(dtype).reshape(6, 9)
    ref = run_native(sym, {"data": x.shape}, {}, {}, {"data": x}, type_dict={"data": dtype})
    got, _ = run_onnx_whole(sym, {"data": x.shape}, {}, {}, {"data": x}, dtypes={"data": dtype})
    rtol, atol = OP_TOL[dtype]
    np.testing.assert_allclose(got[0].astype(np.float32), ref[0].astype(np.float32), rtol=rtol, atol=atol)


# -- Embedding ----------------------------------------------------------------------------


EMB_IDS = np.array([[0, 1, 5, 2999], [3000, 4000, -1, -7], [2048, 2049, 7, 1]])


@pytest.mark.parametrize("dtype", ["int32", "int64", "float32", "float16"])
@pytest.mark.parametrize("runtime_weight", [False, True])
def test_embedding_indices(dtype, runtime_weight):
    """Integer ids clip to [0, input_dim - 1]; float ids are read as MXNet reads them."""
    sym = mx.sym.Embedding(D, input_dim=3000, output_dim=4, name="emb")
    shapes = {"data": EMB_IDS.shape}
    feeds = {"data": EMB_IDS.astype(dtype)}
    params = random_params(sym, shapes)
    if runtime_weight:
        shapes["emb_weight"] = (3000, 4)
        feeds["emb_weight"] = params[0].pop("emb_weight").asnumpy()
    ref = run_native(sym, shapes, *params, feeds, type_dict={"data": dtype, "emb_weight": "float32"})
    got, _ = run_onnx_whole(sym, shapes, *params, feeds, dtypes={"data": dtype})
    np.testing.assert_array_equal(got[0], ref[0])


def test_embedding_float_ids_truncate():
    """Fractional ids truncate toward zero (-0.9 reads row 0), then clip."""
    sym = mx.sym.Embedding(D, input_dim=6, output_dim=3, name="emb")
    x = np.array([[0.2, 0.99, 1.5, 4.999], [-0.9, -1.5, 5.5, 6.0], [2.5, 3.5, 1e9, -1e9]], np.float32)
    check_symbol(sym, {"data": x.shape}, inputs={"data": x})


def test_embedding_int64_ids_beyond_int32():
    """int64 ids outside the int32 range clip like any other (no wrap-around)."""
    sym = mx.sym.Embedding(D, input_dim=10, output_dim=2, name="emb")
    ids = np.array([2**32 + 3, -(2**32) + 3, 2**31, 5], np.int64)
    check_symbol(sym, {"data": ids.shape}, inputs={"data": ids})


def test_embedding_float16_weight():
    sym = mx.sym.Embedding(D, input_dim=7, output_dim=3, dtype="float16", name="emb")
    ids = np.array([[0, 6, 9], [-2, 3, 1]], np.int32)
    shapes = {"data": ids.shape}
    args, aux = random_params(sym, shapes, dtype="float16")
    ref = run_native(sym, shapes, args, aux, {"data": ids}, type_dict={"data": "int32", "emb_weight": "float16"})
    got, _ = run_onnx_whole(sym, shapes, args, aux, {"data": ids}, dtypes={"data": "int32", "emb_weight": "float16"})
    assert got[0].dtype == np.float16
    np.testing.assert_array_equal(got[0], ref[0])


# -- LayerNorm ----------------------------------------------------------------------------


@pytest.mark.parametrize("kw", [dict(), dict(axis=1), dict(eps=1e-12)], ids=["last", "axis1", "bert_eps"])
def test_layer_norm_float16(kw):
    sym = mx.sym.LayerNorm(D, name="ln", **kw)
    shapes = {"data": (2, 4, 6)}
    args, aux = random_params(sym, shapes, dtype="float16")
    x = (random_inputs(shapes)["data"] * 3).astype(np.float16)
    types = {"data": "float16", "ln_gamma": "float16", "ln_beta": "float16"}
    ref = run_native(sym, shapes, args, aux, {"data": x}, type_dict=types)
    got, _ = run_onnx_whole(sym, shapes, args, aux, {"data": x}, dtypes=types)
    assert got[0].dtype == np.float16
    np.testing.assert_allclose(got[0].astype(np.float32), ref[0].astype(np.float32), rtol=1e-2, atol=1e-2)


# -- validators: what is refused, and why --------------------------------------------------

REJECT_CASES = [
    ("softmax_float_length",
     lambda: (mx.sym.softmax(D, mx.sym.Variable("len"), use_length=True, name="s"), {"data": (2, 5), "len": (2,)}, None),
     "MXNet reads int32 or int64 lengths only"),
    ("softmax_zero_temperature",
     lambda: (mx.sym.softmax(D, temperature=0.0, name="s"), {"data": (2, 5)}, None), "temperature=0.0 is not supported"),
    ("softmax_negative_temperature",
     lambda: (mx.sym.log_softmax(D, temperature=-1.0, name="s"), {"data": (2, 5)}, None), "T <= 0"),
    ("softmax_float64_output",
     lambda: (mx.sym.softmax(D, dtype="float64", name="s"), {"data": (2, 5)}, None), "has dtype float64"),
    ("selfatt_qk_float64",
     lambda: (mx.sym.contrib.interleaved_matmul_selfatt_qk(D, heads=2, name="qk"), {"data": (3, 1, 12)}, {"data": "float64"}),
     "input 0 has dtype float64"),
    ("embedding_uint8_ids",
     lambda: (mx.sym.Embedding(D, input_dim=4, output_dim=2, name="emb"), {"data": (3,)}, {"data": "uint8"}),
     "indices of dtype uint8"),
    ("layer_norm_mean_var",
     lambda: (mx.sym.LayerNorm(D, output_mean_var=True, name="ln"), {"data": (2, 4)}, None), "output_mean_var=True"),
]


@pytest.mark.parametrize("name,build,expected", REJECT_CASES, ids=_ids(REJECT_CASES))
def test_validator_rejects(name, build, expected):
    sym, shapes, dtypes = build()
    reason = reason_of(sym, shapes, dtypes)
    assert reason is not None and expected in reason, reason


SPEC_REJECT_CASES = [
    # Combinations MXNet's own shape inference refuses or gets wrong, on hand-built specs.
    ("selfatt_qk_heads_do_not_divide",
     make_spec("_contrib_interleaved_matmul_selfatt_qk", dict(heads=5), [(3, 2, 12)], [(10, 3, 3)]),
     "not a multiple of 3 x heads=5"),
    ("selfatt_valatt_attention_of_other_heads",
     make_spec("_contrib_interleaved_matmul_selfatt_valatt", dict(heads=2), [(3, 2, 12), (2, 3, 3)], [(3, 2, 4)]),
     "expected (4, 3, 3)"),
    ("encdec_qk_kv_width",
     make_spec("_contrib_interleaved_matmul_encdec_qk", dict(heads=2), [(3, 2, 4), (5, 2, 6)], [(4, 3, 5)]),
     "not a multiple of 2 x heads=2"),
    ("encdec_valatt_attention_batch",
     make_spec("_contrib_interleaved_matmul_encdec_valatt", dict(heads=2), [(5, 2, 8), (2, 3, 5)], [(3, 2, 4)]),
     "expected (4, 5)"),
    ("selfatt_qk_no_heads",
     make_spec("_contrib_interleaved_matmul_selfatt_qk", dict(heads=0), [(3, 2, 12)], [(2, 3, 3)]), "heads=0"),
    ("log_softmax_length_without_input",
     make_spec("log_softmax", dict(use_length=True), [(2, 5)], [(2, 5)]), "needs 2 input(s)"),
    ("softmax_length_wrong_shape",
     make_spec("softmax", dict(use_length=True, axis=1), [(2, 5, 3), (2, 5)], [(2, 5, 3)], ("float32", "int32")),
     "expected (2, 3)"),
    ("embedding_output_dtype",
     make_spec("Embedding", dict(input_dim=4, output_dim=2), [(3,), (4, 2)], [(3, 2)], ("int32", "float32"), ("float16",)),
     "differs from the weight's float32"),
    ("layer_norm_gamma_shape",
     make_spec("LayerNorm", dict(axis=1), [(2, 4, 3), (3,), (3,)], [(2, 4, 3)]), "expected (4,)"),
]


@pytest.mark.parametrize("name,spec,expected", SPEC_REJECT_CASES, ids=_ids(SPEC_REJECT_CASES))
def test_validator_rejects_spec(name, spec, expected):
    reason = check(spec)
    assert reason is not None and expected in reason, reason


# -- TensorRT-RTX build gate (fp32 and fp16) ----------------------------------------------------


def _var_int(name: str, dtype: str = "int32"):
    return mx.sym.Variable(name, dtype=dtype)


def _seq_first(x):
    return mx.sym.transpose(x, axes=(1, 0, 2))


def _gate_selfatt(length: bool = False, heads: int = 2):
    """Batch-major in and out (the gate also builds batch-dynamic engines): (batch, seq, units)."""
    qkv = mx.sym.FullyConnected(_seq_first(D), num_hidden=24, flatten=False, name="proj")
    scores = mx.sym.contrib.interleaved_matmul_selfatt_qk(qkv, heads=heads, name="qk")
    if length:
        # GluonNLP's BERT: per-sequence lengths repeated for every head.
        lens = mx.sym.broadcast_axis(mx.sym.reshape(_var_int("length"), shape=(-1, 1, 1)), axis=1, size=heads)
        lens = mx.sym.broadcast_like(lens, mx.sym.reshape(scores, shape=(-1, heads, 0), reverse=True),
                                     lhs_axes=(2,), rhs_axes=(2,))
        att = mx.sym.softmax(scores, mx.sym.reshape(lens, shape=(-1, 0), reverse=True), use_length=True, name="sm")
    else:
        att = mx.sym.softmax(scores, name="sm")
    return _seq_first(mx.sym.contrib.interleaved_matmul_selfatt_valatt(qkv, att, heads=heads, name="va"))


def _gate_encdec(heads: int = 2):
    q, kv = _seq_first(D), _seq_first(mx.sym.Variable("kv"))
    scores = mx.sym.contrib.interleaved_matmul_encdec_qk(q, kv, heads=heads, name="qk")
    att = mx.sym.softmax(scores, name="sm")
    return _seq_first(mx.sym.contrib.interleaved_matmul_encdec_valatt(kv, att, heads=heads, name="va"))


GATE_CASES = [
    ("selfatt", lambda: (_gate_selfatt(), {"data": (2, 5, 8)})),
    ("selfatt_length", lambda: (_gate_selfatt(length=True), {"data": (2, 5, 8), "length": (2,)})),
    ("encdec", lambda: (_gate_encdec(), {"data": (2, 4, 8), "kv": (2, 6, 16)})),
    ("softmax_length_int64_axis1", lambda: (mx.sym.softmax(D, _var_int("length", "int64"), axis=1, use_length=True,
                                                           temperature=2.0, name="s"), {"data": (2, 5, 3), "length": (2, 3)})),
    ("softmax_length_axis0", lambda: (mx.sym.softmax(D, _var_int("length"), axis=0, use_length=True, name="s"),
                                      {"data": (4, 5), "length": (5,)})),
    ("log_softmax_temperature", lambda: (mx.sym.log_softmax(D, temperature=0.5, name="s"), {"data": (3, 6)})),
    ("softmax_to_float16", lambda: (mx.sym.softmax(D, dtype="float16", name="s"), {"data": (3, 6)})),
    ("softmax_output", lambda: (mx.sym.SoftmaxOutput(D, multi_output=True, name="so"),
                                {"data": (2, 4, 5), "so_label": (2, 5)})),
    ("softmax_activation", lambda: (mx.sym.SoftmaxActivation(D, mode="channel", name="sa"), {"data": (2, 3, 4)})),
    ("gelu", lambda: (mx.sym.LeakyReLU(D, act_type="gelu", name="g"), {"data": (2, 3, 8)})),
    ("erf", lambda: (mx.sym.erf(D, name="e"), {"data": (2, 9)})),
    ("embedding_float_ids", lambda: (mx.sym.Embedding(D, input_dim=30, output_dim=4, name="emb"), {"data": (2, 5)})),
    ("embedding_int32_ids", lambda: (mx.sym.Embedding(_var_int("data"), input_dim=30, output_dim=4, name="emb"),
                                     {"data": (2, 5)})),
    ("embedding_int64_ids", lambda: (mx.sym.Embedding(_var_int("data", "int64"), input_dim=30, output_dim=4, name="emb"),
                                     {"data": (2, 5)})),
    ("layer_norm_last", lambda: (mx.sym.LayerNorm(D, eps=1e-12, name="ln"), {"data": (2, 5, 8)})),
    ("layer_norm_axis1", lambda: (mx.sym.LayerNorm(D, axis=1, name="ln"), {"data": (2, 5, 8)})),
]


@pytest.fixture(scope="module")
def rtx() -> TensorRTRTXBackend:
    reason = TensorRTRTXBackend.build_unavailable_reason()
    if reason is not None:
        pytest.fail(f"the TensorRT build gate needs TensorRT-RTX, which is missing: {reason}")
    return TensorRTRTXBackend()


@pytest.mark.parametrize("fp16", [False, True], ids=["fp32", "fp16"])
@pytest.mark.parametrize("name,build", GATE_CASES, ids=_ids(GATE_CASES))
def test_trt_rtx_gate(name, build, fp16, rtx, monkeypatch):
    """Every operator of the graph goes into an engine, which TensorRT-RTX parses and builds."""
    from tests.builder.test_trt_rtx_gate import gate

    monkeypatch.setenv("MXNET_TENSORRT_MIN_SUBGRAPH_SIZE", "1")
    sym, shapes = build()
    args, aux = random_params(sym, shapes)
    params = {**args, **aux}
    plan = analyze(BindRequest(sym, shapes, params, Settings.from_env(), rtx))
    native = {plan.graph.nodes[i].op: why for i, why in plan.reasons.items()}
    assert not native, native
    inside = sum(len(sg.nodes) for sg in plan.partition.subgraphs)
    assert inside == len(plan.graph.op_nodes()) > 0
    assert gate(name, sym, shapes, params, rtx, fp16)["subgraphs"] >= 1


# -- GluonNLP models: every operator of this module converts ------------------------------------


def _small_bert():
    """GluonNLP's BERT at 2 layers, 64 units, 4 heads (the structure of bert_12_768_12), seq 16."""
    import gluonnlp as nlp

    from tests.models import thirdparty

    vocab = nlp.Vocab({f"w{i}": 1 for i in range(96)})
    net, _ = nlp.model.get_model("bert_12_768_12", dataset_name=None, vocab=vocab, pretrained=False, use_pooler=True,
                                 use_decoder=False, use_classifier=False, hparam_allow_override=True,
                                 num_layers=2, units=64, hidden_size=128, num_heads=4, embed_size=64, max_length=64)
    thirdparty._init(net, 0)
    rng = np.random.RandomState(1)
    inputs = {"data0": rng.randint(0, len(vocab), (2, 16)).astype("float32"),
              "data1": rng.randint(0, 2, (2, 16)).astype("float32"),
              "data2": np.array([13, 5], dtype="float32")}
    sym, args, aux = thirdparty._export(net, [mx.nd.array(v) for v in inputs.values()], 0)
    return sym, {**args, **aux}, {k: v.shape for k, v in inputs.items()}


def _transformer():
    from tests.models.thirdparty import MODELS

    m = MODELS["transformer"]()
    return m.sym, m.params, m.shapes


@pytest.mark.parametrize("build", [_small_bert, _transformer], ids=["bert", "transformer"])
def test_gluonnlp_model_operators_convert(build):
    """The attention, softmax, GELU, Embedding and LayerNorm nodes of GluonNLP's models all convert."""
    from mx_trt.export.converters import nlp
    from mx_trt.export.converters.registry import lookup

    sym, params, shapes = build()
    g = symbol_to_graph(sym, {**{k: tuple(v.shape) for k, v in params.items()}, **shapes})
    weights = {k: v.asnumpy() for k, v in params.items()}
    seen, refused = set(), []
    for nid in g.op_nodes():
        node = g.nodes[nid]
        entry = lookup(node.op)
        if entry is None or (entry.converter.__module__ != nlp.__name__ and node.op != "LeakyReLU"):
            continue
        seen.add(node.op)
        reason = check(op_spec(g, nid, weights))
        if reason:
            refused.append((node.name, node.op, reason))
    assert not refused, refused[:5]
    want = {"Embedding", "LayerNorm", "softmax"}
    if build is _small_bert:
        want |= {"LeakyReLU", "_contrib_interleaved_matmul_selfatt_qk", "_contrib_interleaved_matmul_selfatt_valatt"}
    assert want <= seen, seen
