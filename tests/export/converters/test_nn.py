"""Per-converter tests of mx_trt/converters/nn.py against MXNet 1.9.1 (fp32, inference).

Each parametrized case builds one small symbol, exports it to ONNX, runs it in ONNX
Runtime and compares with MXNet's own forward (``tests.harness.mxcheck.check_symbol``,
tolerance ``OP_TOL`` unless a case says otherwise). Weights not named in ``shapes``
are initializers; naming one in ``shapes`` makes it a runtime input instead.
"""
from __future__ import annotations

from typing import Any, Dict

import mxnet as mx
import numpy as np
import pytest

from mx_trt.export.converters.registry import check
from mx_trt.graph.importer import symbol_to_graph
from mx_trt.export.spec import op_spec
from tests.harness.mxcheck import MODEL_TOL, OP_TOL, check_symbol, random_inputs, random_params, run_native, run_onnx_whole

D = mx.sym.Variable("data")


def _ids(cases):
    return [c[0] for c in cases]


# -- Convolution -----------------------------------------------------------------------

CONV_CASES = [
    ("1d", (2, 3, 9), dict(kernel=(3,), num_filter=4)),
    ("1d_stride_pad_dilate", (2, 3, 11), dict(kernel=(3,), num_filter=4, stride=(2,), pad=(2,), dilate=(2,))),
    ("1d_group_nobias", (1, 4, 8), dict(kernel=(2,), num_filter=6, num_group=2, no_bias=True)),
    ("2d", (2, 3, 7, 8), dict(kernel=(3, 3), num_filter=4)),
    ("2d_pad", (2, 3, 7, 8), dict(kernel=(3, 3), num_filter=4, pad=(1, 1))),
    ("2d_asym_stride_pad", (1, 3, 9, 8), dict(kernel=(3, 2), num_filter=5, stride=(2, 1), pad=(1, 0))),
    ("2d_dilate", (1, 2, 9, 9), dict(kernel=(3, 3), num_filter=3, dilate=(2, 3), pad=(2, 1))),
    ("2d_dilate_ones", (1, 2, 6, 6), dict(kernel=(3, 3), num_filter=3, dilate=(1, 1), pad=(1, 1))),
    ("2d_1x1_nobias", (2, 6, 5, 5), dict(kernel=(1, 1), num_filter=4, no_bias=True)),
    ("2d_group2", (1, 4, 6, 6), dict(kernel=(3, 3), num_filter=6, num_group=2, pad=(1, 1))),
    ("2d_depthwise", (1, 8, 6, 6), dict(kernel=(3, 3), num_filter=8, num_group=8, pad=(1, 1), stride=(2, 2))),
    ("2d_depthwise_720", (1, 720, 4, 4), dict(kernel=(3, 3), num_filter=720, num_group=720, pad=(1, 1), no_bias=True)),
    ("2d_layout", (1, 3, 5, 5), dict(kernel=(3, 3), num_filter=2, layout="NCHW")),
    ("2d_stride_gt_kernel", (1, 2, 9, 9), dict(kernel=(2, 2), num_filter=2, stride=(3, 3))),
    ("3d", (1, 2, 5, 6, 5), dict(kernel=(3, 3, 3), num_filter=3)),
    ("3d_stride_pad_group", (1, 4, 6, 6, 7), dict(kernel=(3, 2, 3), num_filter=4, stride=(2, 1, 2), pad=(1, 1, 0), num_group=2)),
    ("3d_dilate_nobias", (1, 2, 7, 7, 7), dict(kernel=(2, 2, 2), num_filter=2, dilate=(2, 2, 3), no_bias=True)),
]


@pytest.mark.parametrize("name,shape,kw", CONV_CASES, ids=_ids(CONV_CASES))
def test_convolution(name, shape, kw):
    check_symbol(mx.sym.Convolution(D, name="c", **kw), {"data": shape})


@pytest.mark.parametrize("no_bias", [False, True])
def test_convolution_runtime_weights(no_bias):
    sym = mx.sym.Convolution(D, kernel=(3, 3), num_filter=4, pad=(1, 1), no_bias=no_bias, name="c")
    shapes = {"data": (1, 3, 5, 5), "c_weight": (4, 3, 3, 3)}
    if not no_bias:
        shapes["c_bias"] = (4,)
    check_symbol(sym, shapes)


# -- Deconvolution ---------------------------------------------------------------------

DECONV_CASES = [
    ("1d", (1, 3, 5), dict(kernel=(3,), num_filter=2)),
    ("1d_stride_adj", (1, 3, 5), dict(kernel=(3,), num_filter=2, stride=(2,), pad=(1,), adj=(1,))),
    ("2d", (2, 3, 4, 5), dict(kernel=(3, 3), num_filter=4)),
    ("2d_bias", (2, 3, 4, 5), dict(kernel=(3, 3), num_filter=4, no_bias=False)),
    ("2d_stride_pad", (1, 3, 4, 4), dict(kernel=(4, 4), num_filter=2, stride=(2, 2), pad=(1, 1))),
    ("2d_adj_le_pad", (1, 3, 4, 4), dict(kernel=(3, 3), num_filter=2, stride=(2, 2), pad=(1, 1), adj=(1, 1))),
    ("2d_adj_gt_pad", (1, 3, 4, 4), dict(kernel=(3, 3), num_filter=2, stride=(2, 2), pad=(0, 0), adj=(1, 1), no_bias=False)),
    ("2d_adj_mixed", (1, 2, 4, 5), dict(kernel=(3, 3), num_filter=2, stride=(3, 2), pad=(0, 1), adj=(2, 0))),
    # MXNet's CPU (oneDNN) deconvolution takes the pad attribute, not the pad target_shape
    # implies, and fails otherwise: these set the attribute to the implied value.
    ("2d_target_even", (1, 3, 4, 4), dict(kernel=(3, 3), num_filter=2, stride=(2, 2), target_shape=(8, 8), pad=(1, 1))),
    ("2d_target_odd", (1, 3, 4, 4), dict(kernel=(3, 3), num_filter=2, stride=(2, 2), target_shape=(7, 8), pad=(1, 1))),
    ("2d_target_full", (1, 3, 4, 4), dict(kernel=(3, 3), num_filter=2, stride=(2, 2), target_shape=(9, 9))),
    ("2d_dilate", (1, 2, 4, 4), dict(kernel=(3, 3), num_filter=2, dilate=(2, 2), pad=(1, 1))),
    ("2d_group", (1, 4, 3, 3), dict(kernel=(3, 3), num_filter=6, num_group=2, stride=(2, 2), no_bias=False)),
    ("2d_depthwise", (1, 4, 3, 3), dict(kernel=(2, 2), num_filter=4, num_group=4, stride=(2, 2))),
    ("3d", (1, 2, 3, 3, 3), dict(kernel=(2, 2, 2), num_filter=2, stride=(2, 2, 2), no_bias=False)),
    ("3d_pad_adj", (1, 2, 3, 4, 3), dict(kernel=(3, 3, 3), num_filter=2, stride=(2, 2, 2), pad=(1, 1, 1), adj=(1, 0, 1))),
]


@pytest.mark.parametrize("name,shape,kw", DECONV_CASES, ids=_ids(DECONV_CASES))
def test_deconvolution(name, shape, kw):
    check_symbol(mx.sym.Deconvolution(D, name="d", **kw), {"data": shape})


def test_deconvolution_runtime_weights():
    sym = mx.sym.Deconvolution(D, kernel=(3, 3), num_filter=2, stride=(2, 2), pad=(1, 1), adj=(1, 1), no_bias=False, name="d")
    check_symbol(sym, {"data": (1, 3, 4, 4), "d_weight": (3, 2, 3, 3), "d_bias": (2,)})


# -- Pooling ---------------------------------------------------------------------------

def _pool(kernel=(), stride=None, pad=None, pool_type="max", full=False, **kw) -> Dict[str, Any]:
    """Pooling attributes; ``full`` selects pooling_convention='full' (MXNet's ceil mode)."""
    d: Dict[str, Any] = dict(kernel=kernel, pool_type=pool_type, **kw)
    if stride is not None:
        d["stride"] = stride
    if pad is not None:
        d["pad"] = pad
    if full:
        d["pooling_convention"] = "full"
    return d


S2, S3 = (2, 2), (2, 2, 2)
POOL_CASES = [
    # max
    ("max_2d_valid", (2, 3, 7, 7), _pool((3, 3), S2)),
    ("max_2d_valid_pad", (2, 3, 8, 8), _pool((3, 3), S2, (1, 1))),
    ("max_2d_full", (1, 3, 8, 8), _pool((3, 3), S2, full=True)),
    ("max_2d_full_pad", (1, 3, 8, 9), _pool((3, 3), S2, (1, 1), full=True)),
    ("max_2d_full_exact", (1, 2, 7, 7), _pool((3, 3), S2, full=True)),
    ("max_2d_asym", (1, 2, 9, 7), _pool((3, 2), (2, 3), (1, 0), full=True)),
    ("max_1d", (2, 3, 9), _pool((3,), (2,))),
    ("max_1d_full_pad", (2, 3, 10), _pool((3,), (2,), (1,), full=True)),
    ("max_3d", (1, 2, 5, 6, 7), _pool((2, 2, 2), S3)),
    ("max_3d_full_pad", (1, 2, 6, 5, 6), _pool((3, 3, 3), S3, (1, 1, 1), full=True)),
    ("max_layout", (1, 2, 6, 6), _pool((2, 2), S2, layout="NCHW")),
    # avg, count_include_pad True (MXNet's default)
    ("avg_2d_valid", (2, 3, 7, 7), _pool((3, 3), S2, pool_type="avg")),
    ("avg_2d_valid_pad_incl", (1, 3, 7, 7), _pool((3, 3), (1, 1), (1, 1), "avg", count_include_pad=True)),
    ("avg_2d_valid_asym_pad", (1, 3, 7, 6), _pool((3, 3), (1, 2), (1, 0), "avg")),
    ("avg_2d_full_incl", (1, 3, 5, 5), _pool((2, 2), S2, pool_type="avg", full=True)),
    ("avg_2d_full_pad_incl", (1, 3, 6, 6), _pool((3, 3), S2, (1, 1), "avg", full=True)),
    ("avg_2d_full_pad_incl_exact", (1, 3, 7, 7), _pool((3, 3), S2, (1, 1), "avg", full=True)),
    ("avg_2d_full_incl_emptywin", (1, 2, 5, 5), _pool((2, 2), S2, (1, 1), "avg", full=True)),
    ("avg_1d_full_pad_incl", (2, 3, 8), _pool((3,), (2,), (1,), "avg", full=True)),
    ("avg_3d_full_pad_incl", (1, 2, 6, 5, 6), _pool((3, 3, 3), S3, (1, 1, 1), "avg", full=True)),
    # avg, count_include_pad False
    ("avg_2d_valid_pad_excl", (1, 3, 7, 7), _pool((3, 3), S2, (1, 1), "avg", count_include_pad=False)),
    ("avg_2d_full_excl", (1, 3, 6, 6), _pool((3, 3), S2, (1, 1), "avg", full=True, count_include_pad=False)),
    ("avg_1d_excl", (1, 2, 9), _pool((4,), (3,), (2,), "avg", full=True, count_include_pad=False)),
    ("avg_3d_excl", (1, 2, 5, 5, 5), _pool((2, 2, 2), S3, (1, 1, 1), "avg", count_include_pad=False)),
    # sum
    ("sum_2d", (1, 3, 6, 6), _pool((2, 2), S2, pool_type="sum")),
    ("sum_2d_full_pad", (1, 3, 6, 7), _pool((3, 3), S2, (1, 1), "sum", full=True)),
    ("sum_1d", (1, 3, 7), _pool((3,), (2,), (1,), "sum")),
    ("sum_2d_pad_ge_kernel", (1, 2, 4, 4), _pool((2, 2), S2, (2, 2), "sum")),
    ("sum_3d", (1, 2, 4, 5, 4), _pool((2, 3, 2), (1, 2, 2), pool_type="sum", full=True)),
    # lp
    ("lp1_2d", (1, 3, 6, 6), _pool((3, 3), S2, (1, 1), "lp", p_value=1)),
    ("lp2_2d", (1, 3, 6, 6), _pool((3, 3), S2, (1, 1), "lp", p_value=2)),
    ("lp3_2d", (1, 3, 6, 6), _pool((2, 2), S2, pool_type="lp", p_value=3)),
    ("lp2_2d_full", (1, 3, 6, 6), _pool((3, 3), S2, pool_type="lp", p_value=2, full=True)),
    ("lp2_1d", (1, 3, 8), _pool((3,), (2,), pool_type="lp", p_value=2)),
    ("lp2_3d", (1, 2, 4, 4, 4), _pool((2, 2, 2), S3, pool_type="lp", p_value=2)),
    # global (kernel, stride, pad and convention are ignored)
    ("global_max_2d", (2, 3, 5, 6), _pool((1, 1), global_pool=True)),
    ("global_avg_2d", (2, 3, 5, 6), _pool((3, 3), pool_type="avg", global_pool=True)),
    ("global_avg_2d_nokernel", (2, 3, 5, 6), dict(global_pool=True, pool_type="avg")),
    ("global_avg_full", (2, 3, 5, 6), _pool((1, 1), pool_type="avg", global_pool=True, full=True)),
    ("global_avg_excl_pad", (1, 3, 4, 4), _pool((2, 2), None, (1, 1), "avg", global_pool=True, count_include_pad=False)),
    ("global_sum_2d", (2, 3, 5, 6), _pool((1, 1), pool_type="sum", global_pool=True)),
    ("global_lp2_2d", (2, 3, 5, 6), _pool((1, 1), pool_type="lp", p_value=2, global_pool=True)),
    ("global_lp3_2d", (2, 3, 3, 3), _pool((1, 1), pool_type="lp", p_value=3, global_pool=True)),
    ("global_max_1d", (2, 3, 7), _pool((1,), global_pool=True)),
    ("global_avg_1d", (2, 3, 7), _pool((1,), pool_type="avg", global_pool=True)),
    ("global_avg_3d", (1, 3, 3, 4, 5), _pool((1, 1, 1), pool_type="avg", global_pool=True)),
    ("global_max_3d", (1, 3, 3, 4, 5), _pool((1, 1, 1), global_pool=True)),
]


@pytest.mark.parametrize("name,shape,kw", POOL_CASES, ids=_ids(POOL_CASES))
def test_pooling(name, shape, kw):
    check_symbol(mx.sym.Pooling(D, name="p", **kw), {"data": shape})


# -- BatchNorm -------------------------------------------------------------------------

BN_CASES = [
    ("4d_fixgamma", (2, 3, 4, 5), dict()),  # fix_gamma=True is MXNet's default; gamma is random, not 1
    ("4d_scale", (2, 3, 4, 5), dict(fix_gamma=False)),
    ("4d_eps", (2, 3, 4, 5), dict(fix_gamma=False, eps=1e-5)),
    ("4d_global_stats", (2, 3, 4, 5), dict(fix_gamma=False, use_global_stats=True)),
    ("4d_global_stats_fixgamma", (2, 3, 4, 5), dict(fix_gamma=True, use_global_stats=True, momentum=0.5)),
    ("2d", (4, 6), dict(fix_gamma=False)),
    ("3d", (2, 3, 7), dict(fix_gamma=False, eps=0.01)),
    ("5d", (1, 2, 3, 3, 3), dict(fix_gamma=True)),
    ("axis_last", (2, 4, 3), dict(axis=-1, fix_gamma=False)),
    ("axis_2", (2, 3, 4, 5), dict(axis=2, fix_gamma=False)),
    ("axis_0", (3, 2, 4), dict(axis=0, fix_gamma=True)),
    ("1d_axis0", (5,), dict(axis=0, fix_gamma=False)),
    ("mean_var_out", (2, 3, 4, 4), dict(fix_gamma=False, output_mean_var=True)),
    ("mean_var_out_axis_last", (2, 4, 3), dict(axis=-1, output_mean_var=True)),
]


@pytest.mark.parametrize("name,shape,kw", BN_CASES, ids=_ids(BN_CASES))
def test_batchnorm(name, shape, kw):
    check_symbol(mx.sym.BatchNorm(D, name="bn", **kw), {"data": shape})


@pytest.mark.parametrize("axis", [1, -1])
@pytest.mark.parametrize("fix_gamma", [True, False])
def test_batchnorm_runtime_gamma_beta(axis, fix_gamma):
    """gamma/beta as runtime tensors: no folding (BatchNormalization or explicit arithmetic)."""
    shape = (2, 3, 4, 3)
    sym = mx.sym.BatchNorm(D, axis=axis, fix_gamma=fix_gamma, name="bn")
    c = shape[axis]
    check_symbol(sym, {"data": shape, "bn_gamma": (c,), "bn_beta": (c,)})


@pytest.mark.parametrize("axis", [1, 2])
def test_batchnorm_runtime_gamma_mean_var_outputs(axis):
    sym = mx.sym.BatchNorm(D, axis=axis, fix_gamma=False, output_mean_var=True, name="bn")
    check_symbol(sym, {"data": (2, 3, 3, 2), "bn_gamma": (3,), "bn_beta": (3,)})


def test_batchnorm_fix_gamma_ignores_stored_gamma():
    """fix_gamma=True must ignore gamma even when it is far from 1."""
    sym = mx.sym.BatchNorm(D, fix_gamma=True, name="bn")
    c = 3
    args = {"bn_gamma": mx.nd.array([5.0, -3.0, 0.1]), "bn_beta": mx.nd.array([0.5, -0.5, 1.0])}
    aux = {"bn_moving_mean": mx.nd.array([0.1, -0.2, 0.3]), "bn_moving_var": mx.nd.array([0.5, 2.0, 1.5])}
    ref, got = check_symbol(sym, {"data": (2, c, 3, 3)}, params=(args, aux))
    x = random_inputs({"data": (2, c, 3, 3)}, 1)["data"]
    m, v, b = (a.asnumpy().reshape(1, c, 1, 1) for a in (aux["bn_moving_mean"], aux["bn_moving_var"], args["bn_beta"]))
    np.testing.assert_allclose(got[0], (x - m) / np.sqrt(v + 1e-3) + b, rtol=1e-4, atol=1e-5)


# -- FullyConnected --------------------------------------------------------------------

FC_CASES = [
    ("2d_bias", (3, 5), dict(num_hidden=4)),
    ("2d_nobias", (3, 5), dict(num_hidden=4, no_bias=True)),
    ("4d_flatten_bias", (2, 3, 2, 2), dict(num_hidden=6)),
    ("4d_flatten_nobias", (2, 3, 2, 2), dict(num_hidden=6, no_bias=True)),
    ("3d_noflatten_bias", (2, 3, 5), dict(num_hidden=4, flatten=False)),
    ("3d_noflatten_nobias", (2, 3, 5), dict(num_hidden=4, flatten=False, no_bias=True)),
    ("4d_noflatten", (2, 2, 3, 5), dict(num_hidden=3, flatten=False)),
    ("2d_noflatten", (3, 5), dict(num_hidden=4, flatten=False)),
    ("1d_noflatten", (5,), dict(num_hidden=4, flatten=False)),
    ("1d_flatten", (5,), dict(num_hidden=4)),
]


@pytest.mark.parametrize("name,shape,kw", FC_CASES, ids=_ids(FC_CASES))
def test_fully_connected(name, shape, kw):
    check_symbol(mx.sym.FullyConnected(D, name="fc", **kw), {"data": shape})


@pytest.mark.parametrize("flatten,shape", [(True, (2, 3, 4)), (False, (2, 3, 4)), (True, (2, 12))])
@pytest.mark.parametrize("no_bias", [False, True])
def test_fully_connected_runtime_weight(flatten, shape, no_bias):
    k = int(np.prod(shape[1:])) if flatten else shape[-1]
    shapes = {"data": shape, "fc_weight": (5, k)}
    if not no_bias:
        shapes["fc_bias"] = (5,)
    check_symbol(mx.sym.FullyConnected(D, num_hidden=5, flatten=flatten, no_bias=no_bias, name="fc"), shapes)


# -- Activation / LeakyReLU ------------------------------------------------------------


@pytest.mark.parametrize("act", ["relu", "sigmoid", "tanh", "softrelu", "softsign"])
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (7,)])
def test_activation(act, shape):
    x = random_inputs({"data": shape}, 1)["data"] * 8  # also exercise the saturated ranges
    check_symbol(mx.sym.Activation(D, act_type=act, name="a"), {"data": shape}, inputs={"data": x})


LEAKY_CASES = [
    ("leaky_default", (2, 3, 4, 4), dict(act_type="leaky")),
    ("leaky_slope", (2, 3, 5), dict(act_type="leaky", slope=0.1)),
    ("elu", (2, 3, 4, 4), dict(act_type="elu")),
    ("elu_slope", (2, 6), dict(act_type="elu", slope=1.3)),
    ("selu", (2, 3, 4, 4), dict(act_type="selu")),
    ("gelu", (2, 3, 4, 4), dict(act_type="gelu")),
    ("gelu_1d", (9,), dict(act_type="gelu")),
]


@pytest.mark.parametrize("name,shape,kw", LEAKY_CASES, ids=_ids(LEAKY_CASES))
def test_leaky_relu(name, shape, kw):
    x = random_inputs({"data": shape}, 1)["data"] * 3
    check_symbol(mx.sym.LeakyReLU(D, name="l", **kw), {"data": shape}, inputs={"data": x})


PRELU_CASES = [
    ("4d_per_channel", (2, 3, 4, 4), (3,)),
    ("2d_per_channel", (4, 5), (5,)),
    ("3d_per_channel", (2, 3, 5), (3,)),
    ("4d_shared", (2, 3, 4, 4), (1,)),
]


@pytest.mark.parametrize("name,shape,gshape", PRELU_CASES, ids=_ids(PRELU_CASES))
@pytest.mark.parametrize("runtime_gamma", [False, True])
def test_prelu(name, shape, gshape, runtime_gamma):
    gamma = mx.sym.Variable("l_gamma", shape=gshape)
    sym = mx.sym.LeakyReLU(D, gamma=gamma, act_type="prelu", name="l")
    shapes = {"data": shape}
    if runtime_gamma:
        shapes["l_gamma"] = gshape
    check_symbol(sym, shapes)


@pytest.mark.parametrize("bounds", [{}, dict(lower_bound=0.05, upper_bound=0.5)])
def test_rrelu_inference_slope(bounds):
    """rrelu at inference is leaky with slope (lower+upper)/2; its mask output is unwritten in MXNet."""
    sym = mx.sym.LeakyReLU(D, act_type="rrelu", name="l", **bounds)[0]
    check_symbol(sym, {"data": (2, 3, 4)})


def test_rrelu_mask_output():
    """The exported mask (unwritten by MXNet at inference) holds the slope actually used."""
    sym = mx.sym.LeakyReLU(D, act_type="rrelu", lower_bound=0.1, upper_bound=0.3, name="l")
    shapes = {"data": (2, 3, 4)}
    feeds = random_inputs(shapes, 1)
    ref = run_native(sym, shapes, {}, {}, feeds)
    got, _ = run_onnx_whole(sym, shapes, {}, {}, feeds)
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[1], np.full((2, 3, 4), 0.2, np.float32), rtol=1e-6)


# -- softmax family --------------------------------------------------------------------

SOFTMAX_CASES = [
    ("last", (2, 3, 5), dict()),
    ("axis1", (2, 3, 5), dict(axis=1)),
    ("axis0", (4, 3), dict(axis=0)),
    ("1d", (6,), dict()),
    ("temperature", (2, 3, 5), dict(temperature=2.5)),
    ("temperature_axis1", (2, 4, 3, 2), dict(axis=1, temperature=0.5)),
    ("dtype_same", (2, 5), dict(dtype="float32")),
]


@pytest.mark.parametrize("name,shape,kw", SOFTMAX_CASES, ids=_ids(SOFTMAX_CASES))
@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
def test_softmax(fn, name, shape, kw):
    x = random_inputs({"data": shape}, 1)["data"] * 4
    check_symbol(getattr(mx.sym, fn)(D, name="s", **kw), {"data": shape}, inputs={"data": x})


SOFTMAX_OUTPUT_CASES = [
    ("2d", (3, 5), dict()),
    ("multi_output_3d", (2, 4, 5), dict(multi_output=True)),
    ("multi_output_4d", (2, 3, 2, 2), dict(multi_output=True)),
    ("preserve_shape_3d", (2, 3, 4), dict(preserve_shape=True)),
    (
        "training_attrs_ignored",
        (3, 5),
        dict(grad_scale=2.0, ignore_label=1, use_ignore=True, normalization="valid", smooth_alpha=0.1),
    ),
]


@pytest.mark.parametrize("name,shape,kw", SOFTMAX_OUTPUT_CASES, ids=_ids(SOFTMAX_OUTPUT_CASES))
def test_softmax_output(name, shape, kw):
    check_symbol(mx.sym.SoftmaxOutput(D, name="so", **kw), {"data": shape})


@pytest.mark.parametrize(
    "mode,shape", [("instance", (2, 5)), ("instance", (2, 3, 4)), ("channel", (2, 3, 4)), ("channel", (2, 3, 2, 2))]
)
def test_softmax_activation(mode, shape):
    check_symbol(mx.sym.SoftmaxActivation(D, mode=mode, name="sa"), {"data": shape})


@pytest.mark.parametrize("op", ["LogisticRegressionOutput", "LinearRegressionOutput", "MAERegressionOutput"])
@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 4)])
def test_regression_outputs(op, shape):
    check_symbol(getattr(mx.sym, op)(D, name="r"), {"data": shape})


# -- Dropout / Flatten / Concat / Pad / clip ---------------------------------------------


@pytest.mark.parametrize("kw", [dict(p=0.5), dict(p=0.1, mode="training"), dict(p=0.3, axes=(2, 3)), dict(p=0.0, mode="always")])
def test_dropout(kw):
    check_symbol(mx.sym.Dropout(D, name="dr", **kw), {"data": (2, 3, 4, 4)})


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (2, 3), (3, 2, 4)])
@pytest.mark.parametrize("fn", ["Flatten", "flatten"])
def test_flatten(fn, shape):
    check_symbol(getattr(mx.sym, fn)(D, name="f"), {"data": shape})


CONCAT_CASES = [
    ("dim1", [(2, 3, 4), (2, 5, 4)], dict(dim=1)),
    ("dim0", [(2, 3), (4, 3)], dict(dim=0)),
    ("dim_last", [(2, 3, 4), (2, 3, 1), (2, 3, 2)], dict(dim=-1)),
    ("default_dim", [(1, 2, 3, 3), (1, 4, 3, 3)], dict()),
    ("dim2_4d", [(1, 2, 3, 3), (1, 2, 1, 3)], dict(dim=2)),
]


@pytest.mark.parametrize("name,shapes,kw", CONCAT_CASES, ids=_ids(CONCAT_CASES))
@pytest.mark.parametrize("fn", ["Concat", "concat"])
def test_concat(fn, name, shapes, kw):
    vs = [mx.sym.Variable(f"x{i}") for i in range(len(shapes))]
    sym = getattr(mx.sym, fn)(*vs, num_args=len(vs), name="cc", **kw)
    check_symbol(sym, {f"x{i}": s for i, s in enumerate(shapes)})


PAD_CASES = [
    ("constant_zero", (1, 2, 3, 4), dict(mode="constant", pad_width=(0, 0, 0, 0, 1, 2, 2, 1))),
    ("constant_value", (1, 2, 3, 4), dict(mode="constant", pad_width=(0, 0, 0, 0, 1, 1, 0, 3), constant_value=1.5)),
    ("edge", (2, 2, 3, 4), dict(mode="edge", pad_width=(0, 0, 0, 0, 2, 1, 1, 3))),
    ("reflect", (2, 2, 4, 5), dict(mode="reflect", pad_width=(0, 0, 0, 0, 3, 1, 2, 4))),
    ("constant_5d", (1, 2, 3, 3, 3), dict(mode="constant", pad_width=(0, 0, 0, 0, 1, 0, 0, 1, 2, 2), constant_value=-2.0)),
    ("edge_5d", (1, 2, 3, 3, 3), dict(mode="edge", pad_width=(0, 0, 0, 0, 1, 2, 0, 1, 2, 0))),
    ("reflect_5d", (1, 2, 4, 3, 5), dict(mode="reflect", pad_width=(0, 0, 0, 0, 2, 1, 1, 2, 3, 4))),
]


@pytest.mark.parametrize("name,shape,kw", PAD_CASES, ids=_ids(PAD_CASES))
@pytest.mark.parametrize("fn", ["Pad", "pad"])
def test_pad(fn, name, shape, kw):
    check_symbol(getattr(mx.sym, fn)(D, name="pd", **kw), {"data": shape})


@pytest.mark.parametrize("lo,hi", [(0.0, 6.0), (-0.3, 0.4), (0.2, 0.2), (-5.0, -0.5)])
def test_clip(lo, hi):
    x = random_inputs({"data": (2, 3, 4)}, 1)["data"] * 7
    check_symbol(mx.sym.clip(D, a_min=lo, a_max=hi, name="cl"), {"data": (2, 3, 4)}, inputs={"data": x})


# -- LRN / InstanceNorm / LayerNorm / L2Normalization -----------------------------------

LRN_CASES = [
    ("default", (2, 7, 3, 3), dict(nsize=5)),
    ("n3", (1, 4, 3, 3), dict(nsize=3, alpha=0.01, beta=0.5, knorm=1.0)),
    ("n1", (1, 4, 3, 3), dict(nsize=1, alpha=0.3, beta=0.9, knorm=2.5)),
    ("big_alpha", (1, 6, 2, 2), dict(nsize=5, alpha=0.5, beta=0.75, knorm=2.0)),
]


@pytest.mark.parametrize("name,shape,kw", LRN_CASES, ids=_ids(LRN_CASES))
def test_lrn(name, shape, kw):
    x = random_inputs({"data": shape}, 1)["data"] * 3
    check_symbol(mx.sym.LRN(D, name="lrn", **kw), {"data": shape}, inputs={"data": x})


@pytest.mark.parametrize("shape", [(2, 3, 5), (2, 3, 4, 4), (1, 2, 2, 3, 3)])
@pytest.mark.parametrize("eps", [1e-3, 1e-5])
def test_instance_norm(shape, eps):
    check_symbol(mx.sym.InstanceNorm(D, eps=eps, name="inorm"), {"data": shape})


def test_instance_norm_runtime_params():
    check_symbol(mx.sym.InstanceNorm(D, name="inorm"), {"data": (2, 3, 4, 4), "inorm_gamma": (3,), "inorm_beta": (3,)})


LN_CASES = [
    ("last", (2, 3, 6), dict()),
    ("last_eps", (4, 6), dict(eps=1e-3)),
    ("axis1", (2, 5, 3), dict(axis=1)),
    ("axis0", (4, 3), dict(axis=0)),
    ("axis1_4d", (2, 3, 2, 4), dict(axis=1)),
    ("neg_axis", (2, 3, 4), dict(axis=-2)),
]


@pytest.mark.parametrize("name,shape,kw", LN_CASES, ids=_ids(LN_CASES))
@pytest.mark.parametrize("runtime_params", [False, True])
def test_layer_norm(name, shape, kw, runtime_params):
    shapes = {"data": shape}
    if runtime_params:
        c = shape[kw.get("axis", -1)]
        shapes.update(ln_gamma=(c,), ln_beta=(c,))
    check_symbol(mx.sym.LayerNorm(D, name="ln", **kw), shapes)


L2N_CASES = [
    ("instance_2d", (3, 5), dict()),
    ("instance_4d", (2, 3, 2, 2), dict(mode="instance")),
    ("instance_eps", (2, 4), dict(eps=0.5)),
    ("channel_3d", (2, 3, 4), dict(mode="channel")),
    ("channel_4d", (2, 3, 2, 2), dict(mode="channel", eps=1e-3)),
    ("spatial_3d", (2, 3, 4), dict(mode="spatial")),
    ("spatial_4d", (2, 3, 2, 3), dict(mode="spatial")),
]


@pytest.mark.parametrize("name,shape,kw", L2N_CASES, ids=_ids(L2N_CASES))
def test_l2_normalization(name, shape, kw):
    check_symbol(mx.sym.L2Normalization(D, name="l2", **kw), {"data": shape})


# -- UpSampling / Embedding ------------------------------------------------------------


@pytest.mark.parametrize("scale", [1, 2, 3])
def test_upsampling_nearest(scale):
    check_symbol(mx.sym.UpSampling(D, scale=scale, sample_type="nearest", name="up"), {"data": (2, 3, 3, 4)})


@pytest.mark.parametrize("mode", ["concat", "sum"])
@pytest.mark.parametrize("b_shape", [(1, 2, 2, 2), (1, 2, 6, 6), (1, 2, 1, 1)])
def test_upsampling_nearest_multi_input(mode, b_shape):
    """Every input is upsampled to scale * the first input's size, then concatenated or summed."""
    a, b = mx.sym.Variable("a"), mx.sym.Variable("b")
    sym = mx.sym.UpSampling(a, b, scale=2, sample_type="nearest", num_args=2, multi_input_mode=mode, name="up")
    check_symbol(sym, {"a": (1, 2, 3, 3), "b": b_shape})


@pytest.mark.parametrize("scale", [2, 3, 4])
def test_upsampling_bilinear(scale):
    sym = mx.sym.UpSampling(D, scale=scale, sample_type="bilinear", num_filter=3, name="up")
    check_symbol(sym, {"data": (1, 3, 3, 4)})


@pytest.mark.parametrize("runtime_weight", [False, True])
@pytest.mark.parametrize("shape", [(7,), (2, 5)])
def test_embedding(shape, runtime_weight):
    sym = mx.sym.Embedding(D, input_dim=6, output_dim=4, name="emb")
    # Fractions truncate; negative and too large ids clip to the first/last row.
    vals = np.array([0, 1.7, 5, 5.9, -0.8, -3, 6, 11.2, 2.2, 3], dtype=np.float32)
    x = vals[: int(np.prod(shape))].reshape(shape)
    shapes = {"data": shape}
    feeds = {"data": x}
    if runtime_weight:
        shapes["emb_weight"] = (6, 4)
        feeds["emb_weight"] = random_inputs({"w": (6, 4)})["w"]
    check_symbol(sym, shapes, inputs=feeds)


@pytest.mark.parametrize("dtype", ["int32", "int64", "float16"])
def test_embedding_index_dtypes(dtype):
    """Integer and float16 index tensors (MXNet's reference runs them as float32 ids)."""
    sym = mx.sym.Embedding(D, input_dim=3000, output_dim=3, name="emb")
    shapes = {"data": (2, 4)}
    ids = np.array([[0, 5, 2999, 4000], [-2, 1, 2048, 2049]])
    args, aux = random_params(sym, shapes)
    ref = run_native(sym, shapes, args, aux, {"data": ids.astype(np.float32)})
    feeds = {"data": ids.astype(dtype)}
    got, _ = run_onnx_whole(sym, shapes, args, aux, feeds, dtypes={"data": dtype})
    if dtype == "float16":
        # float16 has no 2049: MXNet itself would read row 2048 for it.
        ref = run_native(sym, shapes, args, aux, {"data": ids.astype(np.float16).astype(np.float32)})
    np.testing.assert_array_equal(got[0], ref[0])


# -- operator/attribute combinations of mxnet.gluon.model_zoo.vision -----------------------


def test_model_zoo_combinations():
    """Every operator/attribute combination the vision model zoo uses, chained in one network.

    (Listed by test_model_zoo_validators_accept_every_node's models: ReLU; BatchNorm axis=1,
    eps 1e-3/1e-5, fix_gamma True/False, use_global_stats False; Concat dim=1 of 2-4 inputs;
    Convolution NCHW, dilate (1, 1), symmetric and 1x7/7x1 asymmetric pads, groups, no_bias
    True/False; Dropout p=0.5; Flatten; FullyConnected flatten=True with bias; Pooling max
    valid/full, avg valid count_include_pad=True (k=s and 3x3/s1/p1), global avg; clip 0..6.)
    Tolerance: MODEL_TOL, since a dozen layers (one summing 720 channels) accumulate rounding.
    """
    x = mx.sym.Convolution(D, kernel=(3, 3), pad=(1, 1), num_filter=24, no_bias=True, name="c1")
    x = mx.sym.BatchNorm(x, fix_gamma=True, use_global_stats=False, axis=1, eps=1e-5, momentum=0.9, name="bn1")
    x = mx.sym.Activation(x, act_type="relu", name="r1")
    x = mx.sym.Pooling(x, kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="max", pooling_convention="valid", name="p1")
    x = mx.sym.Convolution(x, kernel=(1, 1), num_filter=720, no_bias=True, name="c2")
    x = mx.sym.BatchNorm(x, fix_gamma=False, use_global_stats=False, axis=1, eps=1e-3, name="bn2")
    x = mx.sym.clip(x, a_min=0, a_max=6, name="relu6")
    dw = mx.sym.Convolution(
        x, kernel=(3, 3), pad=(1, 1), dilate=(1, 1), num_filter=720, num_group=720, no_bias=False, layout="NCHW", name="dw"
    )
    avg = mx.sym.Pooling(dw, kernel=(3, 3), stride=(1, 1), pad=(1, 1), pool_type="avg", count_include_pad=True, name="p2")
    r17 = mx.sym.Convolution(dw, kernel=(1, 7), pad=(0, 3), num_filter=8, no_bias=True, name="c17")
    r71 = mx.sym.Convolution(r17, kernel=(7, 1), pad=(3, 0), num_filter=8, no_bias=False, name="c71")
    x = mx.sym.Concat(dw, avg, r71, dim=1, num_args=3, name="cat")
    x = mx.sym.Pooling(x, kernel=(3, 3), stride=(2, 2), pool_type="max", pooling_convention="full", name="p3")
    a = mx.sym.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="avg", count_include_pad=True, name="p4")
    m = mx.sym.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="max", name="p5")
    x = mx.sym.Concat(a, m, dim=1, name="cat2")
    x = mx.sym.Pooling(x, kernel=(1, 1), global_pool=True, pool_type="avg", pooling_convention="full", name="gap")
    x = mx.sym.Flatten(x, name="flat")
    x = mx.sym.Dropout(x, p=0.5, name="drop")
    x = mx.sym.FullyConnected(x, num_hidden=10, flatten=True, no_bias=False, name="fc")
    check_symbol(x, {"data": (1, 3, 16, 16)}, tol=MODEL_TOL["float32"])


ZOO_MODELS = [
    "alexnet", "densenet121", "densenet161", "inceptionv3", "mobilenet1.0", "mobilenet0.25",
    "mobilenetv2_1.0", "mobilenetv2_0.25", "resnet18_v1", "resnet50_v1", "resnet18_v2", "resnet50_v2",
    "squeezenet1.0", "squeezenet1.1", "vgg11", "vgg16_bn",
]


def test_model_zoo_validators_accept_every_node():
    """Each node of the zoo's vision models that an nn.py converter handles is accepted."""
    from mxnet.gluon.model_zoo.vision import get_model

    from mx_trt.export.converters import nn
    from mx_trt.export.converters.registry import lookup

    refused = []
    for model in ZOO_MODELS:
        sym = get_model(model)(mx.sym.var("data"))
        size = 299 if model.startswith("inception") else 224
        g = symbol_to_graph(sym, {"data": (1, 3, size, size)})
        consts = {n.name: None for n in g.nodes if n.is_variable and n.name != "data"}
        for nid in g.op_nodes():
            entry = lookup(g.nodes[nid].op)
            if entry is None or entry.converter.__module__ != nn.__name__:
                continue
            reason = check(op_spec(g, nid, consts))
            if reason:
                refused.append((model, g.nodes[nid].name, reason))
    assert not refused, refused[:5]


# -- float16 graphs -----------------------------------------------------------------------

FP16_CASES = [
    ("conv", mx.sym.Convolution(D, kernel=(3, 3), num_filter=4, pad=(1, 1), name="c"), (1, 3, 5, 5)),
    ("deconv", mx.sym.Deconvolution(D, kernel=(3, 3), num_filter=2, stride=(2, 2), pad=(1, 1), adj=(1, 1), name="d"), (1, 3, 4, 4)),
    ("avg_full_incl", mx.sym.Pooling(D, **_pool((3, 3), S2, (1, 1), "avg", full=True)), (1, 3, 6, 6)),
    ("lp2", mx.sym.Pooling(D, kernel=(2, 2), stride=(2, 2), pool_type="lp", p_value=2), (1, 3, 6, 6)),
    ("max_1d", mx.sym.Pooling(D, kernel=(3,), stride=(2,), pool_type="max", pooling_convention="full"), (1, 3, 8)),
    ("fc_noflatten", mx.sym.FullyConnected(D, num_hidden=4, flatten=False, name="fc"), (2, 3, 5)),
    ("gelu", mx.sym.LeakyReLU(D, act_type="gelu"), (2, 3, 4)),
    ("rrelu", mx.sym.LeakyReLU(D, act_type="rrelu", name="rr")[0], (2, 3, 4)),
    ("softmax_t", mx.sym.softmax(D, temperature=2.0), (2, 5)),
    ("clip", mx.sym.clip(D, a_min=-0.5, a_max=0.5), (2, 5)),
    ("pad", mx.sym.pad(D, mode="constant", pad_width=(0, 0, 0, 0, 1, 1, 1, 1), constant_value=0.5), (1, 2, 3, 3)),
    ("l2norm", mx.sym.L2Normalization(D, mode="channel"), (2, 3, 4)),
    ("layernorm_axis1", mx.sym.LayerNorm(D, axis=1, name="ln"), (2, 4, 3)),
    ("upsampling_bilinear", mx.sym.UpSampling(D, scale=2, sample_type="bilinear", num_filter=2, name="up"), (1, 2, 3, 3)),
]


@pytest.mark.parametrize("name,sym,shape", FP16_CASES, ids=_ids(FP16_CASES))
def test_float16_graph(name, sym, shape):
    """Constants the converters create follow the input dtype.

    The reference is MXNet in fp32 on the same fp16-representable values; tolerance OP_TOL fp16.
    """
    shapes = {"data": shape}
    args, aux = random_params(sym, shapes, 0, "float16")
    feeds = random_inputs(shapes, 1, "float16")
    ref = run_native(sym, shapes, args, aux, feeds)
    got, model = run_onnx_whole(sym, shapes, args, aux, feeds, dtypes={"data": "float16"})
    assert model.graph.output[0].type.tensor_type.elem_type == 10  # FLOAT16
    rtol, atol = OP_TOL["float16"]
    for r, g in zip(ref, got):
        np.testing.assert_allclose(g.astype(np.float32), r, rtol=rtol, atol=atol)


def test_softmax_float16_to_float32():
    """softmax(dtype='float32') on float16 data computes and returns float32."""
    sym = mx.sym.softmax(D, dtype="float32", temperature=3.0, name="s")
    shapes = {"data": (2, 7)}
    feeds = random_inputs(shapes, 1, "float16")
    ref = run_native(sym, shapes, {}, {}, feeds)
    got, model = run_onnx_whole(sym, shapes, {}, {}, feeds, dtypes={"data": "float16"})
    assert got[0].dtype == np.float32
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-4, atol=1e-5)
