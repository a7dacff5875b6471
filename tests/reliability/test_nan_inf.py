"""NaN and Inf through the pass (ONNX Runtime engines) and through native MXNet 1.9.1, as README.md documents.

Where both give the same result, the outputs are compared with
``np.testing.assert_allclose(equal_nan=True)`` at fp32, ``rtol=1e-4, atol=1e-5``
(tests.harness.mxcheck.OP_TOL). Where they differ, each side is checked against what
README.md ("NaN and Inf") says it gives:

* The engines propagate NaN through ``Activation(relu)``, ``softmax`` and
  ``log_softmax`` (a NaN or +Inf in a row makes the whole row NaN), and through
  every arithmetic operator, as ``numpy`` does.
* Native MXNet's oneDNN kernels map NaN to 0 in ``Activation(relu)`` (and the
  relu fused after a convolution) and keep the other entries of a softmax row
  finite; MXNet's max pooling skips NaN, and an all-NaN window gives
  -3.4028235e+38 (``-FLT_MAX``). So a NaN input pixel yields finite outputs
  natively and NaN outputs with the pass.
* ONNX Runtime's ``MaxPool`` and ``ReduceMax`` neither always propagate nor always
  skip a NaN: the result is NaN or the maximum of the other values, depending on
  where the NaN sits in the window.
* ONNX Runtime 1.19's ``Sqrt`` gives NaN for +Inf (so ``rsqrt(+Inf)`` is NaN, not
  0) and its ``Erf`` gives 1 for NaN; MXNet follows IEEE 754 there. MXNet's
  ``sign(NaN)`` is 0, the engines' NaN.
"""
from __future__ import annotations

import os

import mxnet as mx
import numpy as np
import pytest

import mx_trt
from tests.harness.mxcheck import OP_TOL

RTOL, ATOL = OP_TOL["float32"]
FLT_MAX = float(np.finfo(np.float32).max)


def _onednn() -> bool:
    """Whether native MXNet runs its oneDNN (MKLDNN) kernels here."""
    return bool(mx.runtime.Features().is_enabled("MKLDNN")) and os.environ.get("MXNET_MKLDNN_ENABLED", "1") != "0"


@pytest.fixture(autouse=True)
def _one_op_engines(monkeypatch):
    """Every operator, even alone, becomes an engine; a failing engine fails the test."""
    monkeypatch.setenv("MXNET_TENSORRT_MIN_SUBGRAPH_SIZE", "1")
    monkeypatch.setenv("MXNET_TENSORRT_STRICT", "1")


def _run(monkeypatch, sym, inputs, params=None, on=True):
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1" if on else "0")
    params = params or {}
    args = {k: mx.nd.array(v) for k, v in params.items() if k in sym.list_arguments()}
    aux = {k: mx.nd.array(v) for k, v in params.items() if k in sym.list_auxiliary_states()}
    exe = sym.simple_bind(mx.cpu(), grad_req="null", shared_buffer={**args, **aux},
                          **{k: v.shape for k, v in inputs.items()})
    exe.copy_params_from(args, aux)  # native simple_bind leaves aux states at zero
    if on:
        info = mx_trt.bind_info(exe)
        assert info is not None and len(info.engines) == 1
    for k, v in inputs.items():
        exe.arg_dict[k][:] = v
    return exe.forward(is_train=False)[0].asnumpy()


def _both(monkeypatch, sym, inputs, params=None):
    return _run(monkeypatch, sym, inputs, params, False), _run(monkeypatch, sym, inputs, params, True)


def _agree(a, b):
    np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL, equal_nan=True)


# --- a small CNN: conv + BN + relu + max pool + FC --------------------------------------------------------------

def _cnn():
    d = mx.sym.var("data")
    net = mx.sym.Convolution(d, num_filter=8, kernel=(3, 3), pad=(1, 1), name="conv")
    net = mx.sym.BatchNorm(net, fix_gamma=False, name="bn")
    net = mx.sym.Activation(net, act_type="relu", name="relu")
    net = mx.sym.Pooling(net, kernel=(2, 2), stride=(2, 2), pool_type="max", name="pool")
    return mx.sym.FullyConnected(net, num_hidden=10, name="fc")


def _cnn_params():
    rng = np.random.RandomState(0)
    return {"conv_weight": rng.randn(8, 3, 3, 3) * .3, "conv_bias": rng.randn(8) * .1,
            "bn_gamma": rng.uniform(.5, 1.5, 8), "bn_beta": rng.randn(8) * .1,
            "bn_moving_mean": rng.randn(8) * .1, "bn_moving_var": rng.uniform(.5, 1.5, 8),
            "fc_weight": rng.randn(10, 8 * 8 * 8) * .05, "fc_bias": rng.randn(10) * .1}


def _cnn_input():
    return np.random.RandomState(1).uniform(-1, 1, (2, 3, 16, 16)).astype("float32")


def test_cnn_clean_input_agrees(monkeypatch):
    native, acc = _both(monkeypatch, _cnn(), {"data": _cnn_input()}, _cnn_params())
    assert np.isfinite(native).all()
    _agree(native, acc)


def test_cnn_one_nan_pixel_is_nan_with_the_pass_and_finite_natively(monkeypatch):
    """The issue's case: 10 NaN outputs with the pass; native MXNet's relu or max pool drops the NaN."""
    x = _cnn_input()
    x[0, 1, 5, 7] = np.nan
    native, acc = _both(monkeypatch, _cnn(), {"data": x}, _cnn_params())
    assert np.isnan(acc[0]).all()  # every output of the sample holding the NaN
    assert np.isfinite(native[0]).all()  # oneDNN relu: NaN -> 0; else max pool: the window's other values
    _agree(native[1], acc[1])  # the other sample of the batch is untouched


def test_cnn_all_nan_sample(monkeypatch):
    x = _cnn_input()
    x[0] = np.nan
    native, acc = _both(monkeypatch, _cnn(), {"data": x}, _cnn_params())
    assert np.isnan(acc[0]).all()
    assert not np.isnan(native[0]).any()  # oneDNN: relu gives 0s; otherwise -FLT_MAX windows, finite or +-Inf
    _agree(native[1], acc[1])


@pytest.mark.parametrize("value", [np.inf, -np.inf], ids=["+inf", "-inf"])
def test_cnn_inf_pixel_is_nan_both_ways(monkeypatch, value):
    """+-Inf times weights of both signs meets Inf - Inf = NaN in the convolution, natively too."""
    x = _cnn_input()
    x[0, 1, 5, 7] = value
    native, acc = _both(monkeypatch, _cnn(), {"data": x}, _cnn_params())
    assert np.isnan(acc[0]).all() and np.isnan(native[0]).all()
    _agree(native, acc)


def test_cnn_huge_finite_input_agrees(monkeypatch):
    x = _cnn_input()
    x[0, 0, 0, 0] = 3e38
    native, acc = _both(monkeypatch, _cnn(), {"data": x}, _cnn_params())
    assert np.isfinite(native).all() and np.isfinite(acc).all()
    _agree(native, acc)


@pytest.mark.parametrize("name,index", [("conv_weight", (2, 0, 1, 1)), ("bn_gamma", (1,))])
def test_cnn_nan_weight_is_nan_with_the_pass_and_finite_natively(monkeypatch, name, index):
    params = _cnn_params()
    params[name] = params[name].copy()
    params[name][index] = np.nan
    native, acc = _both(monkeypatch, _cnn(), {"data": _cnn_input()}, params)
    assert np.isnan(acc).all()
    assert np.isfinite(native).all()


def test_cnn_nan_fc_weight_agrees(monkeypatch):
    params = _cnn_params()
    params["fc_weight"] = params["fc_weight"].copy()
    params["fc_weight"][3, 17] = np.nan
    native, acc = _both(monkeypatch, _cnn(), {"data": _cnn_input()}, params)
    assert np.isnan(acc[:, 3]).all() and np.isfinite(np.delete(acc, 3, axis=1)).all()
    _agree(native, acc)


# --- one operator at a time -------------------------------------------------------------------------------------

def _specials(shape=(1, 2, 4, 4)):
    a = np.linspace(-2, 2, int(np.prod(shape))).astype("float32").reshape(shape)
    f = a.reshape(-1)
    f[0], f[5], f[10], f[-3] = np.nan, np.inf, -np.inf, np.nan
    return a


D = mx.sym.var("data")


def test_activation_relu(monkeypatch):
    x = _specials()
    native, acc = _both(monkeypatch, mx.sym.Activation(D, act_type="relu"), {"data": x})
    _agree(acc, np.maximum(x, 0))  # NaN stays NaN, as numpy's maximum
    if _onednn():
        _agree(native, np.where(np.isnan(x), 0, np.maximum(x, 0)))  # oneDNN: relu(NaN) = 0
    else:
        _agree(native, acc)


@pytest.mark.parametrize("op", ["relu", "sigmoid", "tanh", "exp", "log", "abs"])
def test_elementwise_agree(monkeypatch, op):
    x = _specials()
    if op == "relu":
        sym = mx.sym.relu(D)
    elif op in ("sigmoid", "tanh"):
        sym = mx.sym.Activation(D, act_type=op)
    else:
        sym = getattr(mx.sym, op)(D)
    native, acc = _both(monkeypatch, sym, {"data": x})
    assert np.isnan(acc).sum() >= 2
    _agree(native, acc)


def test_exp_overflow_and_log_domain_agree(monkeypatch):
    x = np.array([[88., 89., 100., 1000., -1000., np.nan]], "float32")
    native, acc = _both(monkeypatch, mx.sym.exp(D), {"data": x})
    with np.errstate(over="ignore"):
        _agree(acc, np.exp(x))
    _agree(native, acc)
    x = np.array([[0., -1., 1., np.inf, np.nan, -np.inf]], "float32")
    native, acc = _both(monkeypatch, mx.sym.log(D), {"data": x})
    with np.errstate(divide="ignore", invalid="ignore"):
        _agree(acc, np.log(x))
    _agree(native, acc)


# op -> [(input, native MXNet's output, the pass's output)] where they differ; elsewhere they agree
UNARY_DIFFERENCES = {
    "sqrt": [(np.inf, np.inf, np.nan)],  # IEEE 754: sqrt(+Inf) = +Inf; ONNX Runtime 1.19's Sqrt gives NaN
    "rsqrt": [(np.inf, 0.0, np.nan),  # exported as Reciprocal(Sqrt(x)): 1 / NaN
              (-0.0, -np.inf, np.inf)],  # IEEE 754: sqrt(-0) = -0, 1 / -0 = -Inf; the engine's Sqrt gives +0
    "sign": [(np.nan, 0.0, np.nan)],  # numpy: sign(NaN) = NaN; MXNet gives 0
    "erf": [(np.nan, np.nan, 1.0)],  # ONNX Runtime 1.19's Erf gives 1 for NaN
}


@pytest.mark.parametrize("op", sorted(UNARY_DIFFERENCES))
def test_unary_differences(monkeypatch, op):
    x = np.array([[0., -1., 1., 4., np.inf, -np.inf, np.nan, 1e30, -1e30, 100., -100., -0.]], "float32")
    native, acc = _both(monkeypatch, getattr(mx.sym, op)(D), {"data": x})
    differ = np.zeros(x.shape, bool)
    for where, want_native, want_pass in UNARY_DIFFERENCES[op]:
        at = np.isnan(x) if np.isnan(where) else (x == where) & (np.signbit(x) == np.signbit(where))
        assert at.any()
        np.testing.assert_array_equal(native[at], np.float32(want_native))
        np.testing.assert_array_equal(acc[at], np.float32(want_pass))
        differ |= at
    _agree(native[~differ], acc[~differ])


def test_division_by_zero_agrees(monkeypatch):
    x = np.array([[1., -1., 0., np.nan]], "float32")
    y = np.zeros((1, 4), "float32")
    sym = mx.sym.broadcast_div(D, mx.sym.var("y"))
    native = _run(monkeypatch, sym, {"data": x, "y": y}, on=False)
    acc = _run(monkeypatch, sym, {"data": x, "y": y}, on=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        _agree(acc, x / y)
    _agree(native, acc)


def test_elementwise_maximum_propagates_both_ways(monkeypatch):
    x = np.array([[np.nan, 1., np.nan, -np.inf]], "float32")
    y = np.array([[0., np.nan, np.nan, 0.]], "float32")
    sym = mx.sym.broadcast_maximum(D, mx.sym.var("y"))
    native = _run(monkeypatch, sym, {"data": x, "y": y}, on=False)
    acc = _run(monkeypatch, sym, {"data": x, "y": y}, on=True)
    _agree(acc, np.maximum(x, y))
    _agree(native, acc)


def _softmax_ref(x, log=False):
    with np.errstate(invalid="ignore", over="ignore"):
        z = x - x.max(axis=-1, keepdims=True)  # numpy's max propagates NaN: the whole row
        if log:
            return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
        e = np.exp(z)
        return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_softmax_rows(monkeypatch, log):
    x = np.array([[np.nan, 1, 2, 3], [1, np.inf, 2, 3], [1, 2, 3, -np.inf], [1e30, 1, 3e38, -3e38]], "float32")
    sym = (mx.sym.log_softmax if log else mx.sym.softmax)(D, axis=-1)
    native, acc = _both(monkeypatch, sym, {"data": x})
    _agree(acc, _softmax_ref(x, log))
    assert np.isnan(acc[:2]).all()  # a NaN or +Inf makes the whole row NaN
    _agree(native[2:], acc[2:])  # rows without NaN or +Inf agree
    if _onednn():
        assert np.isnan(native[0, 0]) and np.isfinite(native[0, 1:]).all()  # oneDNN: only the NaN entry
    else:
        _agree(native, acc)


def test_max_pooling(monkeypatch):
    x = np.random.RandomState(2).uniform(-1, 1, (1, 8, 8, 8)).astype("float32")
    x[0, :, 0:2, 0:2] = np.nan  # window (0, 0): all NaN
    for pos, (r, c) in enumerate([(0, 2), (0, 5), (3, 2), (3, 5)]):  # one NaN in four other windows, at 4 places
        x[0, :, r + (pos % 2), c] = np.nan
    sym = mx.sym.Pooling(D, kernel=(2, 2), stride=(2, 2), pool_type="max")
    native, acc = _both(monkeypatch, sym, {"data": x})
    windows = x.reshape(1, 8, 4, 2, 4, 2).transpose(0, 1, 2, 4, 3, 5).reshape(1, 8, 4, 4, 4)
    has_nan = np.isnan(windows).any(-1)
    all_nan = np.isnan(windows).all(-1)
    with np.errstate(invalid="ignore"):
        others = np.nanmax(np.where(np.isnan(windows), -np.inf, windows), axis=-1)
    _agree(native[~has_nan], acc[~has_nan])
    assert np.isnan(acc[all_nan]).all()
    assert (native[all_nan] == -FLT_MAX).all()  # MXNet: -FLT_MAX for a window of NaN only
    some = has_nan & ~all_nan
    assert (native[some] == others[some]).all()  # MXNet skips NaN
    # ONNX Runtime: NaN, or one of the window's other values, not always their maximum (it depends on where
    # the NaN sits: measured with 1.19.2, the maximum of the values scanned after it)
    in_window = (windows[some] == acc[some][:, None]).any(-1)
    assert (np.isnan(acc[some]) | in_window).all()
    assert (acc[some] < others[some]).any()  # a finite value below the window's maximum: not NaN-propagating


def test_max_reduction(monkeypatch):
    x = np.array([[np.nan, 1, 2, 3], [1, np.nan, 5, 3], [1, 2, 3, np.nan], [1, 2, 7, 3]], "float32")
    native, acc = _both(monkeypatch, mx.sym.max(D, axis=-1), {"data": x})
    _agree(native, np.max(x, axis=-1))  # MXNet: NaN, as numpy
    others = np.array([3, 5, 3, 7], "float32")
    assert (np.isnan(acc) | (acc == others)).all() and acc[3] == 7  # ONNX Runtime: NaN or the others' max
    assert np.isfinite(acc[1:3]).all()  # a NaN that is not first in the row is skipped (measured: 1.19.2)


@pytest.mark.parametrize("op", ["FullyConnected", "Convolution", "BatchNorm", "avg_pool"])
def test_arithmetic_layers_agree(monkeypatch, op):
    rng = np.random.RandomState(4)
    x = _specials((2, 2, 4, 4))
    if op == "FullyConnected":
        sym, params = (mx.sym.FullyConnected(D, num_hidden=3, name="fc"),
                       {"fc_weight": rng.randn(3, 32), "fc_bias": rng.randn(3)})
    elif op == "Convolution":
        sym, params = (mx.sym.Convolution(D, num_filter=2, kernel=(3, 3), pad=(1, 1), name="cv"),
                       {"cv_weight": rng.randn(2, 2, 3, 3), "cv_bias": rng.randn(2)})
    elif op == "BatchNorm":
        sym, params = (mx.sym.BatchNorm(D, fix_gamma=False, name="bn"),
                       {"bn_gamma": rng.uniform(.5, 1.5, 2), "bn_beta": rng.randn(2),
                        "bn_moving_mean": rng.randn(2), "bn_moving_var": rng.uniform(.5, 1.5, 2)})
    else:
        sym, params = mx.sym.Pooling(D, kernel=(2, 2), stride=(2, 2), pool_type="avg"), {}
    native, acc = _both(monkeypatch, sym, {"data": x}, params)
    assert np.isnan(acc).any()
    _agree(native, acc)


# --- mxtrt verify on inputs holding NaN or Inf ------------------------------------------------------------------

@pytest.mark.parametrize("value,code,verdict", [(np.inf, 0, "PASS"), (np.nan, 1, "FAIL")], ids=["inf", "nan"])
def test_verify_compares_non_finite_values_by_place(tmp_path, capsys, monkeypatch, value, code, verdict):
    """Same NaN/Inf at the same place passes; a NaN natively dropped but propagated by the pass fails."""
    from mx_trt.tools.cli.main import main

    monkeypatch.setenv("MXNET_TENSORRT_MIN_SUBGRAPH_SIZE", "2")
    params = {k: mx.nd.array(v) for k, v in _cnn_params().items()}
    args = {k: v for k, v in params.items() if not k.startswith("bn_moving")}
    aux = {k: v for k, v in params.items() if k.startswith("bn_moving")}
    mx.model.save_checkpoint(str(tmp_path / "cnn"), 0, _cnn(), args, aux)
    x = _cnn_input()
    x[0, 1, 5, 7] = value
    np.save(tmp_path / "x.npy", x)
    got = main(["verify", str(tmp_path / "cnn"), "--input", str(tmp_path / "x.npy")])
    out = capsys.readouterr().out
    assert got == code and f"{verdict}: {1 - code} of 1 outputs" in out, out
