"""``Symbol.optimize_for('TensorRT')`` and ``Symbol.bind`` with the pass (mx_trt.frontends.symbol).

Every accelerated result is compared with MXNet's own output for the same graph
and weights at the fp32 tolerance ``rtol=1e-4, atol=1e-5``, and the engines are
shown to have run (``run_count``). Two models: a small CNN
(conv+BN+relu+pool+FC) and a model with two data inputs.
"""
from __future__ import annotations

import gc
import logging
import os
import subprocess
import sys
import weakref

import numpy as np
import pytest

import mxnet as mx

from mx_trt.errors import MxTrtError  # noqa: E402
from mx_trt.frontends import hook, symbol as symfront  # noqa: E402
from mx_trt.runtime import fused_op  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHAPE = (2, 3, 8, 8)


@pytest.fixture(autouse=True)
def _installed():
    symfront.install()
    yield


@pytest.fixture
def switch_on(monkeypatch):
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1")


def _cnn():
    data = mx.sym.var("data")
    x = mx.sym.Convolution(data, num_filter=8, kernel=(3, 3), pad=(1, 1), name="conv0")
    x = mx.sym.BatchNorm(x, name="bn0", fix_gamma=False)
    x = mx.sym.Activation(x, act_type="relu", name="relu0")
    x = mx.sym.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="max", name="pool0")
    return mx.sym.FullyConnected(x, num_hidden=10, name="fc0")


def _two_inputs(second="b"):
    a, b = mx.sym.var("a"), mx.sym.var(second)
    x = mx.sym.concat(mx.sym.FullyConnected(a, num_hidden=6, name="fa"),
                      mx.sym.FullyConnected(b, num_hidden=6, name="fb"), dim=1)
    x = mx.sym.Activation(x, act_type="relu", name="r")
    return mx.sym.FullyConnected(x, num_hidden=4, name="out")


def _same_graph(got, want):
    """The same graph, once any placeholder is expanded and the weights' token taken off."""
    import json

    from mx_trt.frontends import deferred

    full = deferred.expand_symbol(got)[0]
    strip = lambda j: [(n["op"], n["name"], n.get("attrs", {}), n["inputs"]) for n in json.loads(j)["nodes"]]  # noqa: E731
    return strip(full.tojson()) == strip(want.tojson())


def _check_native_outputs(out, sym, args, aux):
    """``out.simple_bind`` with no weights given computes what native MXNet does with them; returns the executor."""
    x = mx.nd.array(np.random.RandomState(5).uniform(-1, 1, SHAPE))
    ref = sym.simple_bind(mx.cpu(), grad_req="null", data=SHAPE)
    ref.copy_params_from(args, aux)
    want = ref.forward(is_train=False, data=x)[0].asnumpy()
    exe = out.simple_bind(mx.cpu(), data=SHAPE, grad_req="null", force_rebind=True)
    np.testing.assert_allclose(exe.forward(is_train=False, data=x)[0].asnumpy(), want, rtol=1e-4, atol=1e-5)
    return exe


def _params(sym, shapes, seed=0):
    rng = np.random.RandomState(seed)
    arg_shapes, _, aux_shapes = sym.infer_shape(**shapes)
    args = {n: mx.nd.array(rng.uniform(-0.5, 0.5, s)) for n, s in zip(sym.list_arguments(), arg_shapes) if n not in shapes}
    aux = {n: mx.nd.array(rng.uniform(0.5, 1.5, s)) for n, s in zip(sym.list_auxiliary_states(), aux_shapes)}
    return args, aux


def _inputs(shapes, seed=1):
    rng = np.random.RandomState(seed)
    return {k: mx.nd.array(rng.uniform(-1, 1, s)) for k, s in shapes.items()}


def _native(sym, args, aux, inputs):
    with hook.disabled():
        exe = sym.bind(mx.cpu(), dict(args, **inputs), aux_states=dict(aux), grad_req="null")
    return exe.forward(is_train=False)[0].asnumpy()


def _close(got, ref):
    np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL)


def _ops(sym):
    return {sym.get_internals()[i].attr("op_type") or "" for i in range(len(sym.get_internals().list_outputs()))}


def _warnings(caplog):
    return [r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("mx_trt")]


# ------------------------------------------------------------------ optimize_for


def test_optimize_for_cnn_updates_args_and_runs_engines():
    sym = _cnn()
    args, aux = _params(sym, {"data": SHAPE})
    x = _inputs({"data": SHAPE})
    ref = _native(sym, args, aux, x)
    a, b = dict(args), dict(aux)
    trt = sym.optimize_for("TensorRT", a, b, mx.cpu(), shape_dict={"data": SHAPE})
    keys = symfront.fused_engine_keys(trt)
    assert keys and symfront.holds_fused_nodes(trt)
    assert set(keys) <= set(fused_op.pinned_keys())
    # absorbed weights left the caller's dicts, as MXNet's own optimize_for does
    assert "conv0_weight" not in a and "bn0_moving_mean" not in b
    assert set(a) <= set(trt.list_arguments()) and set(b) <= set(trt.list_auxiliary_states())
    assert not sym.list_arguments() == trt.list_arguments()

    # simple_bind + copy_params_from (the documented MXNet flow)
    exe = trt.simple_bind(mx.cpu(), data=SHAPE, grad_req="null")
    exe.copy_params_from(a, b)
    exe.arg_dict["data"][:] = x["data"]
    _close(exe.forward(is_train=False)[0].asnumpy(), ref)
    runs = [e.run_count for e in symfront.engines(trt)]
    assert runs and all(r > 0 for r in runs)

    # bind on the caller's arrays
    exe2 = trt.bind(mx.cpu(), dict(a, data=x["data"]), aux_states=dict(b), grad_req="null")
    _close(exe2.forward(is_train=False)[0].asnumpy(), ref)
    assert all(e.run_count > r for e, r in zip(symfront.engines(trt), runs))
    assert symfront.release(trt) == len(keys)


@pytest.mark.parametrize("name", ["tensorrt", "mx_trt"])
def test_backend_names(name):
    sym = _cnn()
    args, aux = _params(sym, {"data": SHAPE})
    trt = sym.optimize_for(name, dict(args), dict(aux), shape_dict={"data": SHAPE})  # ctx: the current context
    assert symfront.holds_fused_nodes(trt)
    symfront.release(trt)


def test_optimize_for_two_inputs_named_by_data_names():
    sym = _two_inputs()
    shapes = {"a": (3, 5), "b": (3, 7)}
    args, aux = _params(sym, shapes)
    x = _inputs(shapes)
    ref = _native(sym, args, aux, x)
    a = dict(args, **x)  # data arrays in args, named as data by the option; shapes come from them
    trt = sym.optimize_for("TensorRT", a, {}, mx.cpu(), data_names=["a", "b"])
    assert set(trt.list_arguments()) == {"a", "b"}
    assert set(a) == {"a", "b"}
    exe = trt.bind(mx.cpu(), {"a": x["a"], "b": x["b"]}, grad_req="null")
    _close(exe.forward(is_train=False)[0].asnumpy(), ref)
    # new values for the inputs reach the engine (they were not baked in)
    y = _inputs(shapes, seed=7)
    exe.arg_dict["a"][:] = y["a"]
    exe.arg_dict["b"][:] = y["b"]
    _close(exe.forward(is_train=False)[0].asnumpy(), _native(sym, args, aux, y))
    assert all(e.run_count == 2 for e in symfront.engines(trt))
    symfront.release(trt)


def test_data_in_args_and_shape_dict_stays_an_input():
    # Gluon's own _build_cache passes the data both in args and in shape_dict: it must not be baked in.
    sym = _cnn()
    args, aux = _params(sym, {"data": SHAPE})
    x = _inputs({"data": SHAPE})
    a = dict(args, data=x["data"])
    trt = sym.optimize_for("TensorRT", a, dict(aux), mx.cpu(), shape_dict={"data": SHAPE})
    assert "data" in trt.list_arguments() and "data" in a
    y = _inputs({"data": SHAPE}, seed=3)
    exe = trt.bind(mx.cpu(), {"data": y["data"]}, grad_req="null")
    _close(exe.forward(is_train=False)[0].asnumpy(), _native(sym, args, aux, y))
    symfront.release(trt)


def test_other_backends_go_to_mxnet():
    sym = _cnn()
    args, aux = _params(sym, {"data": SHAPE})
    original = mx.sym.Symbol.optimize_for.__wrapped__
    got = sym.optimize_for("MKLDNN", dict(args), dict(aux), mx.cpu())
    want = original(sym, "MKLDNN", dict(args), dict(aux), mx.cpu())
    assert got.tojson() == want.tojson() and not symfront.holds_fused_nodes(got)
    a = dict(args)
    unknown = sym.optimize_for("NoSuchBackend", a, dict(aux), mx.cpu())  # MXNet logs and returns a copy
    assert unknown.tojson() == sym.tojson() and a.keys() == args.keys()


def test_explicit_option_wins_over_environment(monkeypatch):
    monkeypatch.setenv("MXNET_TENSORRT_EXCLUDE_OPS", "Convolution")
    sym = _cnn()
    args, aux = _params(sym, {"data": SHAPE})
    x = _inputs({"data": SHAPE})
    a, b = dict(args), dict(aux)
    trt = sym.optimize_for("TensorRT", a, b, mx.cpu(), shape_dict={"data": SHAPE}, exclude_ops="FullyConnected")
    assert "conv0_weight" not in a and "fc0_weight" in a  # the option's exclusion, not the environment's
    exe = trt.bind(mx.cpu(), dict(a, data=x["data"]), aux_states=b, grad_req="null")
    _close(exe.forward(is_train=False)[0].asnumpy(), _native(sym, args, aux, x))
    symfront.release(trt)


def test_unknown_option_warns_once_and_returns_the_symbol_unchanged(caplog):
    sym = _cnn()
    args, aux = _params(sym, {"data": SHAPE})
    a, b = dict(args), dict(aux)
    with caplog.at_level(logging.WARNING):
        out = sym.optimize_for("TensorRT", a, b, mx.cpu(), shape_dict={"data": SHAPE}, no_such_option=1)
    warned = _warnings(caplog)
    assert len(warned) == 1 and "no_such_option" in warned[0].getMessage()
    assert _same_graph(out, sym) and a.keys() == args.keys() and b.keys() == aux.keys()
    # The weights ride along: a bind without copy_params_from computes native MXNet's outputs.
    _check_native_outputs(out, sym, args, aux)
    with pytest.raises(MxTrtError, match="no_such_option"):
        sym.optimize_for("TensorRT", a, b, mx.cpu(), shape_dict={"data": SHAPE}, no_such_option=1, strict=True)


def test_no_shapes_builds_the_engines_at_simple_bind(caplog):
    # MXNet 1.9.1's way: no shapes at optimize_for; the engines come with the bind that brings them.
    sym = _cnn()
    args, aux = _params(sym, {"data": SHAPE})
    a = dict(args)
    with caplog.at_level(logging.WARNING):
        out = sym.optimize_for("TensorRT", a, dict(aux), mx.cpu())
    assert not _warnings(caplog) and a.keys() == args.keys()
    assert len(out.get_internals()) < len(sym.get_internals())  # the regions show as single nodes
    exe = _check_native_outputs(out, sym, args, aux)
    assert exe._mx_trt is not None and exe._mx_trt.engines


def test_missing_aux_states_warn_once_and_keep_the_symbol(caplog):
    # Without their values the aux states would become arguments, out of copy_params_from's reach.
    sym = _cnn()
    args, _ = _params(sym, {"data": SHAPE})
    a = dict(args)
    with caplog.at_level(logging.WARNING):
        out = sym.optimize_for("TensorRT", a, None, mx.cpu(), shape_dict={"data": SHAPE})
    warned = _warnings(caplog)
    assert len(warned) == 1 and "bn0_moving_mean" in warned[0].getMessage()
    assert _same_graph(out, sym) and a.keys() == args.keys()


def test_release_unpins_and_frees_the_engines():
    sym = _cnn()
    args, aux = _params(sym, {"data": SHAPE})
    trt = sym.optimize_for("TensorRT", dict(args), dict(aux), mx.cpu(), shape_dict={"data": SHAPE})
    keys = symfront.fused_engine_keys(trt)
    refs = [weakref.ref(e) for e in symfront.engines(trt)]
    assert refs and set(keys) <= set(fused_op.pinned_keys())
    assert symfront.release(trt) == len(keys)
    assert not set(keys) & set(fused_op.pinned_keys())
    assert symfront.release(trt) == 0
    del trt
    gc.collect()
    assert all(r() is None for r in refs)


def test_stale_symbol_is_a_typed_error(tmp_path):
    sym = _cnn()
    args, aux = _params(sym, {"data": SHAPE})
    trt = sym.optimize_for("TensorRT", dict(args), dict(aux), mx.cpu(), shape_dict={"data": SHAPE})
    keys = symfront.fused_engine_keys(trt)
    path = tmp_path / "trt-symbol.json"
    trt.save(str(path))
    assert symfront.fused_engine_keys(mx.sym.load(str(path))) == keys  # engines alive: same process loads it
    stale = path.read_text()
    for k in keys:  # engines this process never had (released, or made by another process)
        stale = stale.replace(f'"{k}"', f'"gone-{k}"')
    path.write_text(stale)
    with pytest.raises(MxTrtError, match="process-local"):
        mx.sym.load(str(path))
    with pytest.raises(MxTrtError, match="mx_trt.export_model"):
        mx.sym.load_json(stale)
    symfront.release(trt)


def test_stale_symbol_in_a_fresh_process(tmp_path):
    sym = _cnn()
    args, aux = _params(sym, {"data": SHAPE})
    trt = sym.optimize_for("TensorRT", dict(args), dict(aux), mx.cpu(), shape_dict={"data": SHAPE})
    path = str(tmp_path / "trt-symbol.json")
    trt.save(path)
    symfront.release(trt)
    code = ("import sys; sys.path.insert(0, %r)\n"
            "import mxnet as mx\n"
            "from mx_trt.errors import MxTrtError\n"
            "from mx_trt.frontends import symbol\n"
            "symbol.install()\n"
            "try:\n"
            "    mx.sym.load(%r)\n"
            "except MxTrtError as exc:\n"
            "    print('typed:', exc)\n") % (ROOT, path)
    env = dict(os.environ, MX_TRT_AUTOLOAD="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "typed:" in out.stdout and "process-local" in out.stdout


def test_optimized_symbol_is_not_optimized_again(switch_on, caplog):
    sym = _cnn()
    args, aux = _params(sym, {"data": SHAPE})
    x = _inputs({"data": SHAPE})
    ref = _native(sym, args, aux, x)
    a, b = dict(args), dict(aux)
    trt = sym.optimize_for("TensorRT", a, b, mx.cpu(), shape_dict={"data": SHAPE})
    keys = set(fused_op._ENGINES.keys())
    with caplog.at_level(logging.WARNING):
        exe = trt.simple_bind(mx.cpu(), data=SHAPE, grad_req="null", shared_buffer=dict(a, **b))
        exe.copy_params_from(a, b)
        exe.arg_dict["data"][:] = x["data"]
        _close(exe.forward(is_train=False)[0].asnumpy(), ref)
        exe2 = trt.bind(mx.cpu(), dict(a, data=x["data"]), aux_states=b)
        _close(exe2.forward(is_train=False)[0].asnumpy(), ref)
        again = trt.optimize_for("TensorRT", dict(a), dict(b), mx.cpu(), shape_dict={"data": SHAPE})
    assert not _warnings(caplog)
    assert getattr(exe, "_mx_trt", None) is None and getattr(exe2, "_mx_trt", None) is None
    assert set(fused_op._ENGINES.keys()) == keys  # no new engine
    assert again.tojson() == trt.tojson()
    assert all(e.run_count == 2 for e in symfront.engines(trt))
    symfront.release(trt)


# ------------------------------------------------------------------ Symbol.bind


def test_bind_dict_args_accelerated_and_caller_writes_reach_executor(switch_on):
    sym = _cnn()
    args, aux = _params(sym, {"data": SHAPE})
    x = _inputs({"data": SHAPE})
    data = x["data"].copy()
    exe = sym.bind(mx.cpu(), dict(args, data=data), aux_states=dict(aux))  # grad_req='write', no args_grad
    info = exe._mx_trt
    assert info.engines and exe._symbol.list_arguments() == ["data"]
    assert "conv0_weight" in info.absorbed and "bn0_moving_var" in info.absorbed
    _close(exe.forward(is_train=False)[0].asnumpy(), _native(sym, args, aux, x))
    y = _inputs({"data": SHAPE}, seed=5)
    data[:] = y["data"]  # the caller's own array is the executor's input
    _close(exe.forward(is_train=False)[0].asnumpy(), _native(sym, args, aux, y))
    assert all(e.run_count == 2 for e in info.engines)


def test_bind_list_args_two_inputs(switch_on):
    sym = _two_inputs()
    shapes = {"a": (3, 5), "b": (3, 7)}
    args, aux = _params(sym, shapes)
    x = _inputs(shapes)
    arrays = dict(args, **x)
    exe = sym.bind(mx.cpu(), [arrays[n] for n in sym.list_arguments()], grad_req="null")
    info = exe._mx_trt
    assert info.engines and set(exe._symbol.list_arguments()) == {"a", "b"}
    _close(exe.forward(is_train=False)[0].asnumpy(), _native(sym, args, aux, x))
    assert all(e.run_count > 0 for e in info.engines)


def test_bind_data_names_from_environment(switch_on, monkeypatch):
    # A data input named like a parameter would be baked in; the environment names it data.
    sym = _two_inputs(second="mask_bias")
    shapes = {"a": (3, 5), "mask_bias": (3, 7)}
    args, aux = _params(sym, shapes)
    x = _inputs(shapes)
    monkeypatch.setenv("MXNET_TENSORRT_DATA_NAMES", "mask_bias")
    arrays = dict(args, **x)
    exe = sym.bind(mx.cpu(), arrays, grad_req="null")
    assert "mask_bias" in exe._symbol.list_arguments() and "mask_bias" not in exe._mx_trt.absorbed
    y = _inputs(shapes, seed=9)
    arrays["a"][:] = y["a"]
    arrays["mask_bias"][:] = y["mask_bias"]
    _close(exe.forward(is_train=False)[0].asnumpy(), _native(sym, args, aux, y))
    assert all(e.run_count == 1 for e in exe._mx_trt.engines)


def test_bind_with_gradients_stays_native(switch_on, caplog):
    sym = _cnn()
    args, aux = _params(sym, {"data": SHAPE})
    x = _inputs({"data": SHAPE})
    grads = {n: mx.nd.zeros_like(v) for n, v in args.items()}
    with caplog.at_level(logging.WARNING):
        exe = sym.bind(mx.cpu(), dict(args, data=x["data"]), args_grad=grads, aux_states=dict(aux))
    assert getattr(exe, "_mx_trt", None) is None
    warned = _warnings(caplog)
    assert len(warned) == 1 and "args_grad" in warned[0].getMessage()
    _close(exe.forward(is_train=False)[0].asnumpy(), _native(sym, args, aux, x))


def test_bind_switch_off_is_mxnets_own(caplog):
    sym = _cnn()
    args, aux = _params(sym, {"data": SHAPE})
    x = _inputs({"data": SHAPE})
    with caplog.at_level(logging.WARNING):
        exe = sym.bind(mx.cpu(), dict(args, data=x["data"]), args_grad={n: mx.nd.zeros_like(v) for n, v in args.items()},
                       aux_states=dict(aux))
    assert getattr(exe, "_mx_trt", None) is None and not _warnings(caplog)
    assert exe._symbol.list_arguments() == sym.list_arguments()


@pytest.mark.slow
def test_resnet18_optimize_for_and_bind(switch_on):
    net = mx.gluon.model_zoo.vision.get_model("resnet18_v1", classes=10)
    net.initialize(mx.init.Xavier(), ctx=mx.cpu())
    shape = (2, 3, 32, 32)
    net(mx.nd.zeros(shape))  # finishes the deferred initialization
    sym = net(mx.sym.var("data"))
    for p in net.collect_params().values():  # BatchNorm statistics away from their 0/1 defaults
        if p.name.endswith(("running_mean", "running_var", "gamma", "beta")):
            v = np.random.RandomState(len(p.name)).uniform(0.5, 1.5, p.shape)
            p.set_data(mx.nd.array(v - 1.0 if p.name.endswith(("running_mean", "beta")) else v))
    params = {p.name: p.data() for p in net.collect_params().values()}
    args = {k: v for k, v in params.items() if k in sym.list_arguments()}
    aux = {k: v for k, v in params.items() if k in sym.list_auxiliary_states()}
    x = _inputs({"data": shape})
    ref = _native(sym, args, aux, x)

    # Symbol.bind: Gluon's parameter names are taken for weights, the data stays an input
    exe = sym.bind(mx.cpu(), dict(args, data=x["data"]), aux_states=dict(aux), grad_req="null")
    assert exe._symbol.list_arguments() == ["data"] and exe._mx_trt.engines
    np.testing.assert_allclose(exe.forward(is_train=False)[0].asnumpy(), ref, rtol=RTOL, atol=ATOL)
    assert all(e.run_count == 1 for e in exe._mx_trt.engines)

    # optimize_for, then simple_bind + copy_params_from
    a, b = dict(args), dict(aux)
    trt = sym.optimize_for("TensorRT", a, b, mx.cpu(), shape_dict={"data": shape})
    assert not a and not b
    exe = trt.simple_bind(mx.cpu(), data=shape, grad_req="null")
    exe.copy_params_from(a, b)
    exe.arg_dict["data"][:] = x["data"]
    np.testing.assert_allclose(exe.forward(is_train=False)[0].asnumpy(), ref, rtol=RTOL, atol=ATOL)
    assert all(e.run_count >= 1 for e in symfront.engines(trt))
    symfront.release(trt)
