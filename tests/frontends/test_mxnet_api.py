"""MXNet's own TensorRT API generations, as their users wrote them, on the pass.

Each test runs a flow of MXNet 1.3/1.4 (``tensorrt_bind``), 1.5 to 1.8
(``get_backend_symbol`` + ``init_tensorrt_params``), 1.8/1.9.1 (``optimize_for``
without shapes, int8 with ``calibration_iters``) or the design's own snippet
after a forced fallback, and compares with native MXNet given the same weights.
The graph has a BatchNorm with non-trivial statistics, so an executor whose aux
states were never loaded cannot pass.

Tolerances: fp32 ``rtol=1e-4, atol=1e-5``; fp16 engines ``rtol=1e-2, atol=1e-2``;
int8 engines: relative error under 5% of the output's range, and not equal to fp32.
"""
from __future__ import annotations

import inspect
import logging
import os
import subprocess
import sys

import mxnet as mx
import numpy as np
import pytest

import mx_trt
from mx_trt.errors import TrainingNotSupportedError
from mx_trt.frontends import deferred
from mx_trt.frontends import gluon as gluon_front
from tests.harness.userops import register_doubling_op

SHAPE = (2, 3, 8, 8)
FP32 = dict(rtol=1e-4, atol=1e-5)
FP16 = dict(rtol=1e-2, atol=1e-2)


def _net(with_native_op: bool = False):
    """conv -> BN -> relu -> pool -> FC (optionally with an op no converter covers in the middle)."""
    data = mx.sym.var("data")
    x = mx.sym.Convolution(data, num_filter=8, kernel=(3, 3), pad=(1, 1), name="conv0")
    x = mx.sym.BatchNorm(x, name="bn0", fix_gamma=False)
    x = mx.sym.Activation(x, act_type="relu", name="relu0")
    if with_native_op:  # a Custom op stays native whatever the converters cover
        x = mx.sym.Custom(x, op_type="_test_api_scale", name="scale")
        x = mx.sym.Convolution(x, num_filter=8, kernel=(1, 1), name="conv1")  # alone: too small for a region
        x = mx.sym.Custom(x, op_type="_test_api_scale", name="scale2")
    x = mx.sym.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="max", name="pool0")
    return mx.sym.FullyConnected(x, num_hidden=10, name="fc0")


register_doubling_op("_test_api_scale")


def _params(sym, seed=0):
    arg_shapes, _, aux_shapes = sym.infer_shape(data=SHAPE)
    rs = np.random.RandomState(seed)
    args = {n: mx.nd.array(rs.uniform(-0.5, 0.5, s)) for n, s in zip(sym.list_arguments(), arg_shapes) if n != "data"}
    aux = {n: mx.nd.array(rs.uniform(0.5, 1.5, s) if "var" in n else rs.uniform(-0.5, 0.5, s))
           for n, s in zip(sym.list_auxiliary_states(), aux_shapes)}
    return args, aux


def _x(seed=1):
    return mx.nd.array(np.random.RandomState(seed).uniform(-1, 1, SHAPE))


def _native(sym, args, aux, x):
    exe = mx.sym.Symbol.simple_bind.__wrapped__(sym, mx.cpu(), grad_req="null", data=SHAPE)
    exe.copy_params_from(args, aux)
    return exe.forward(is_train=False, data=x)[0].asnumpy()


def _engines(exe):
    info = mx_trt.bind_info(exe)
    return 0 if info is None else len(info.engines)


# ------------------------------------------------------------------ 0. fallbacks keep the outputs right


def _break_pass(monkeypatch):
    from mx_trt.frontends import simple_bind

    def boom(request):
        raise RuntimeError("injected failure of the pass")

    monkeypatch.setattr(simple_bind, "bind", boom)


FALLBACKS = {
    "bad environment value": lambda mp: mp.setenv("MXNET_TENSORRT_ORT_THREADS", "lots"),
    "int8 and fp16 both asked": lambda mp: (mp.setenv("MXNET_TENSORRT_PRECISION", "int8"),
                                            mp.setenv("MXNET_TENSORRT_USE_FP16", "1")),
    "unknown backend option value": lambda mp: mp.setenv("MXNET_TENSORRT_ENGINE_RULE", "sometimes"),
    "the pass fails": _break_pass,
}


@pytest.mark.parametrize("cause", sorted(FALLBACKS))
def test_every_fallback_of_the_design_snippet_loads_weights_and_aux_states(cause, monkeypatch, caplog):
    sym = _net()
    args, aux = _params(sym)
    x = _x()
    want = _native(sym, args, aux, x)
    FALLBACKS[cause](monkeypatch)
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1")
    with caplog.at_level(logging.WARNING):
        exe = sym.simple_bind(mx.cpu(), data=SHAPE, shared_buffer={**args, **aux}, grad_req="null", force_rebind=True)
    assert [r for r in caplog.records if r.levelno == logging.WARNING and "natively" in r.getMessage()]
    assert _engines(exe) == 0
    np.testing.assert_allclose(exe.forward(is_train=False, data=x)[0].asnumpy(), want, **FP32)


def test_fallback_of_optimize_for_keeps_the_weights_with_the_symbol(caplog):
    sym = _net()
    args, aux = _params(sym)
    x = _x()
    with caplog.at_level(logging.WARNING):
        out = sym.optimize_for("TensorRT", args=dict(args), aux=dict(aux), ctx=mx.cpu(), no_such_option=3)
    assert any("no_such_option" in r.getMessage() for r in caplog.records)
    exe = out.simple_bind(mx.cpu(), data=SHAPE, grad_req="null", force_rebind=True)  # no copy_params_from
    assert _engines(exe) == 0
    np.testing.assert_allclose(exe.forward(is_train=False, data=x)[0].asnumpy(), _native(sym, args, aux, x), **FP32)


# ------------------------------------------------------------------ 1. mxnet.contrib.tensorrt


def test_contrib_module_exists_once_mxnet_is_imported_without_importing_mx_trt():
    code = ("import inspect, mxnet as mx\n"
            "from mxnet.contrib import tensorrt\n"
            "import mxnet.contrib.tensorrt as t2\n"
            "assert tensorrt is t2 is mx.contrib.tensorrt\n"
            "names = ['tensorrt_bind', 'set_use_tensorrt', 'get_use_tensorrt', 'set_use_fp16', 'get_use_fp16',\n"
            "         'init_tensorrt_params', 'get_optimized_symbol']\n"
            "assert all(callable(getattr(tensorrt, n)) for n in names)\n"
            "print(list(inspect.signature(tensorrt.tensorrt_bind).parameters))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MXNET_")}
    env["PYTHONPATH"] = os.getcwd()
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "['symbol', 'ctx', 'all_params', 'type_dict', 'stype_dict', 'group2ctx', 'kwargs']" in out.stdout


def test_contrib_signatures_are_mxnets():
    t = mx.contrib.tensorrt
    want = {"set_use_tensorrt": ["status"], "get_use_tensorrt": [], "set_use_fp16": ["status"], "get_use_fp16": [],
            "init_tensorrt_params": ["sym", "arg_params", "aux_params"], "get_optimized_symbol": ["executor"]}
    for name, params in want.items():
        assert list(inspect.signature(getattr(t, name)).parameters) == params, name


# ------------------------------------------------------------------ 2. MXNet 1.3 / 1.4


def test_tensorrt_bind_as_mxnet_14_wrote_it():
    sym = _net()
    args, aux = _params(sym)
    x = _x()
    exe = mx.contrib.tensorrt.tensorrt_bind(sym, ctx=mx.cpu(), all_params={**args, **aux}, data=SHAPE,
                                            grad_req="null", force_rebind=True)
    assert _engines(exe) >= 1
    exe.arg_dict["data"][:] = x
    exe.forward(is_train=False)
    np.testing.assert_allclose(exe.outputs[0].asnumpy(), _native(sym, args, aux, x), **FP32)
    opt = mx.contrib.tensorrt.get_optimized_symbol(exe)
    assert opt.list_arguments() == ["data"]


@pytest.mark.parametrize("grad_req", ["write", "add", {"data": "write"}])
def test_tensorrt_bind_for_training_raises_a_runtime_error(grad_req):
    sym = _net()
    args, aux = _params(sym)
    mx.contrib.tensorrt.set_use_tensorrt(True)
    with pytest.raises(RuntimeError, match="grad_req") as err:
        mx.contrib.tensorrt.tensorrt_bind(sym, ctx=mx.cpu(), all_params={**args, **aux}, data=SHAPE,
                                          force_rebind=True, grad_req=grad_req)
    assert isinstance(err.value, TrainingNotSupportedError)


def test_the_switch_with_gradients_warns_once_and_binds_natively(monkeypatch, caplog):
    sym = _net()
    args, aux = _params(sym)
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1")
    with caplog.at_level(logging.WARNING):
        exe = sym.simple_bind(mx.cpu(), data=SHAPE, shared_buffer={**args, **aux}, grad_req="write")
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1 and _engines(exe) == 0


def test_set_use_tensorrt_and_the_environment_last_word_wins(monkeypatch):
    t = mx.contrib.tensorrt
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1")
    t.set_use_tensorrt(False)
    assert not t.get_use_tensorrt()
    assert os.environ["MXNET_USE_TENSORRT"] == "1"  # the environment is not written
    t.set_use_tensorrt(True)
    assert t.get_use_tensorrt()
    monkeypatch.setenv("MXNET_USE_TENSORRT", "0")  # as with MXNet 1.4, a later change of the variable wins
    assert not t.get_use_tensorrt()
    t.set_use_tensorrt(True)
    assert t.get_use_tensorrt()


# ------------------------------------------------------------------ 3. MXNet 1.5 to 1.8


@pytest.mark.parametrize("name", ["TensorRT", "tensorrt"])
def test_get_backend_symbol_and_init_tensorrt_params_as_mxnets_tutorial(name):
    sym = _net(with_native_op=True)
    args, aux = _params(sym)
    x = _x()
    want = _native(sym, args, aux, x)
    trt_sym = sym.get_backend_symbol(name)
    assert len(trt_sym.get_internals()) < len(sym.get_internals())
    assert sorted(trt_sym.list_arguments()) == sorted(sym.list_arguments())
    a2, x2 = mx.contrib.tensorrt.init_tensorrt_params(trt_sym, args, aux)
    assert set(a2) == {"conv1_weight", "conv1_bias"} and x2 == {}  # the weights of the op outside the regions
    assert set(args) == set(_params(sym)[0])  # the caller's dicts are not changed
    mx.contrib.tensorrt.set_use_fp16(False)
    exe = trt_sym.simple_bind(ctx=mx.cpu(), data=SHAPE, grad_req="null", force_rebind=True)
    exe.copy_params_from(a2, x2)
    assert _engines(exe) >= 1
    np.testing.assert_allclose(exe.forward(is_train=False, data=x)[0].asnumpy(), want, **FP32)


def test_set_use_fp16_is_honoured_at_each_bind_of_the_same_symbol():
    sym = _net()
    args, aux = _params(sym)
    x = _x()
    want = _native(sym, args, aux, x)
    trt_sym = sym.get_backend_symbol("TensorRT")
    a2, x2 = mx.contrib.tensorrt.init_tensorrt_params(trt_sym, args, aux)
    outs = {}
    for fp16 in (True, False):
        mx.contrib.tensorrt.set_use_fp16(fp16)
        assert mx.contrib.tensorrt.get_use_fp16() is fp16
        exe = trt_sym.simple_bind(ctx=mx.cpu(), data=SHAPE, grad_req="null", force_rebind=True)
        exe.copy_params_from(a2, x2)
        assert _engines(exe) >= 1
        outs[fp16] = exe.forward(is_train=False, data=x)[0].asnumpy()
        np.testing.assert_allclose(outs[fp16], want, **(FP16 if fp16 else FP32))
    assert not np.array_equal(outs[True], outs[False])  # the first engine really ran in fp16


def test_subgraph_backend_variable_takes_the_same_path(monkeypatch):
    sym = _net()
    args, aux = _params(sym)
    x = _x()
    want = _native(sym, args, aux, x)
    monkeypatch.setenv("MXNET_SUBGRAPH_BACKEND", "TensorRT")
    exe = sym.simple_bind(mx.cpu(), data=SHAPE, grad_req="null", shared_buffer={**args, **aux})
    assert _engines(exe) >= 1 and os.environ["MXNET_SUBGRAPH_BACKEND"] == "TensorRT"
    np.testing.assert_allclose(exe.forward(is_train=False, data=x)[0].asnumpy(), want, **FP32)
    # Without weights the bind is native (one warning) and MXNet never sees the name it lacks.
    plain = sym.simple_bind(mx.cpu(), data=SHAPE, grad_req="null")
    plain.copy_params_from(args, aux)
    np.testing.assert_allclose(plain.forward(is_train=False, data=x)[0].asnumpy(), want, **FP32)


def test_other_subgraph_backends_are_mxnets():
    sym = _net()
    got = sym.get_backend_symbol("MKLDNN")
    assert not deferred.is_deferred(got) and "_mx_trt" not in got.tojson()


# ------------------------------------------------------------------ 4. MXNet 1.8 / 1.9.1


@pytest.mark.parametrize("precision,tol", [("fp32", FP32), ("fp16", FP16)])
def test_optimize_for_without_shapes_as_mxnet_191_test(precision, tol):
    sym = _net()
    args, aux = _params(sym)
    x = _x()
    want = _native(sym, args, aux, x)
    trt_sym = sym.optimize_for("TensorRT", args=args, aux=aux, ctx=mx.cpu(), precision=precision)
    exe = trt_sym.simple_bind(ctx=mx.cpu(), data=SHAPE, grad_req="null", force_rebind=True)
    assert _engines(exe) >= 1
    assert exe._mx_trt.engines[0].engine is not None
    np.testing.assert_allclose(exe.forward(is_train=False, data=x)[0].asnumpy(), want, **tol)
    exe.copy_params_from(args, aux)  # allowed afterwards, and changes nothing
    np.testing.assert_allclose(exe.forward(is_train=False, data=x)[0].asnumpy(), want, **tol)


def test_placeholder_symbol_binds_natively_through_mxnet_too():
    """A placeholder symbol run by MXNet itself (no simple_bind hook): slow, but right."""
    sym = _net()
    args, aux = _params(sym)
    x = _x()
    trt_sym = sym.get_backend_symbol("TensorRT")
    arg_shapes, out_shapes, aux_shapes = trt_sym.infer_shape(data=SHAPE)
    assert out_shapes == [(2, 10)]
    exe = mx.sym.Symbol.simple_bind.__wrapped__(trt_sym, mx.cpu(), grad_req="null", data=SHAPE)
    exe.copy_params_from(args, aux)
    np.testing.assert_allclose(exe.forward(is_train=False, data=x)[0].asnumpy(), _native(sym, args, aux, x), **FP32)


def test_gluon_takes_mxnet_19_option_names():
    from mxnet.gluon import nn

    net = nn.HybridSequential()
    net.add(nn.Conv2D(8, 3, padding=1), nn.BatchNorm(), nn.Activation("relu"), nn.Dense(10))
    net.initialize(mx.init.Xavier())
    x = mx.nd.array(np.random.RandomState(2).uniform(-1, 1, SHAPE))
    want = net(x).asnumpy()
    net.hybridize(backend="TensorRT", backend_opts={"precision": "fp16"})
    got = net(x).asnumpy()
    np.testing.assert_allclose(got, want, **FP16)
    assert not np.array_equal(got, want)
    assert sum(len(i.engines) for i in gluon_front.bind_infos(net)) >= 1
    net.hybridize(backend="TensorRT", backend_opts={"precision": "int8", "calibration_iters": 2})
    outs = [net(x).asnumpy() for _ in range(3)]
    np.testing.assert_allclose(outs[0], want, **FP32)  # calibrating: native
    assert 0 < np.abs(outs[2] - want).max() / (want.max() - want.min()) < 0.05


# ------------------------------------------------------------------ 5. int8 with calibration_iters


def test_int8_calibrates_on_the_first_forwards_then_runs_int8_engines(tmp_path, caplog):
    sym = _net()
    args, aux = _params(sym)
    rs = np.random.RandomState(7)
    batches = [mx.nd.array(rs.uniform(-1, 1, SHAPE)) for _ in range(5)]
    trt_sym = sym.optimize_for("TensorRT", args=args, aux=aux, ctx=mx.cpu(), precision="int8", calibration_iters=3)
    with caplog.at_level(logging.INFO, logger="mx_trt.quantize.online"):
        exe = trt_sym.simple_bind(ctx=mx.cpu(), data=SHAPE, grad_req="null", force_rebind=True)
        outs = [exe.forward(is_train=False, data=b)[0].asnumpy() for b in batches]
    wants = [_native(sym, args, aux, b) for b in batches]
    for k in range(3):  # calibrating: native MXNet's own outputs
        np.testing.assert_array_equal(outs[k], wants[k])
        assert k < 2 or _engines(exe) >= 1
    for k in (3, 4):  # int8 engines: close, and not the float result
        err = np.abs(outs[k] - wants[k]).max() / (wants[k].max() - wants[k].min())
        assert 0 < err < 0.05, err
    msgs = " | ".join(r.getMessage() for r in caplog.records)
    assert "calibrates on its first 3 forwards" in msgs and "int8 engine(s) run from the next forward" in msgs
    path = mx_trt.calibration_table(exe).save(tmp_path / "table.json")
    # A later bind reuses the table: int8 engines from the first forward.
    again = sym.optimize_for("TensorRT", args=args, aux=aux, ctx=mx.cpu(), precision="int8", calibration=path)
    exe2 = again.simple_bind(ctx=mx.cpu(), data=SHAPE, grad_req="null")
    assert _engines(exe2) >= 1
    np.testing.assert_allclose(exe2.forward(is_train=False, data=batches[3])[0].asnumpy(), outs[3], rtol=1e-5, atol=1e-6)


def test_calibration_table_before_the_end_says_how_far_it_is():
    sym = _net()
    args, aux = _params(sym)
    trt_sym = sym.optimize_for("TensorRT", args=args, aux=aux, ctx=mx.cpu(), precision="int8", calibration_iters=4)
    exe = trt_sym.simple_bind(ctx=mx.cpu(), data=SHAPE, grad_req="null")
    exe.forward(is_train=False, data=_x())
    with pytest.raises(mx_trt.MxTrtError, match="1 of 4 forwards"):
        mx_trt.calibration_table(exe)


def test_tensorrt_symbol_through_symbol_bind_and_module():
    sym = _net()
    args, aux = _params(sym)
    x = _x()
    want = _native(sym, args, aux, x)
    trt_sym = sym.get_backend_symbol("TensorRT")
    mx.contrib.tensorrt.init_tensorrt_params(trt_sym, args, aux)
    exe = trt_sym.bind(mx.cpu(), {**args, "data": x}, aux_states=dict(aux), grad_req="null")
    assert _engines(exe) >= 1
    np.testing.assert_allclose(exe.forward()[0].asnumpy(), want, **FP32)
    mod = mx.mod.Module(trt_sym, data_names=["data"], label_names=None, context=mx.cpu())
    mod.bind(data_shapes=[("data", SHAPE)], for_training=False)
    mod.set_params(args, aux)
    mod.forward(mx.io.DataBatch([x]), is_train=False)
    np.testing.assert_allclose(mod.get_outputs()[0].asnumpy(), want, **FP32)


def test_release_lets_the_kept_weights_go():
    sym = _net()
    args, aux = _params(sym)
    trt_sym = sym.optimize_for("TensorRT", args=args, aux=aux, ctx=mx.cpu())
    tokens = deferred.tokens_of(__import__("json").loads(trt_sym.tojson()))
    assert tokens and all(t in deferred._captured for t in tokens)
    mx_trt.release(trt_sym)
    assert not any(t in deferred._captured for t in tokens)


def test_checking_for_tensorrt_symbols_keeps_no_engine_alive():
    import gc
    import weakref

    from mx_trt.frontends import symbol as symfront

    sym = _net()
    args, aux = _params(sym)
    sym.get_backend_symbol("TensorRT")  # from now on every bind asks whether its symbol is one
    opt = sym.optimize_for("TensorRT", dict(args), dict(aux), mx.cpu(), shape_dict={"data": SHAPE})
    refs = [weakref.ref(e) for e in symfront.engines(opt)]
    exe = opt.simple_bind(mx.cpu(), data=SHAPE, grad_req="null")
    exe.forward(data=_x())[0].asnumpy()  # the forward has finished: MXNet holds nothing for it any more
    assert refs and not deferred.is_deferred(opt)
    symfront.release(opt)
    del exe, opt
    gc.collect()
    assert all(r() is None for r in refs)


def test_setters_are_per_thread_with_the_main_threads_value_as_default():
    import threading

    from mx_trt import settings

    sym = _net()
    args, aux = _params(sym)
    x = _x()
    want = _native(sym, args, aux, x)
    mx.contrib.tensorrt.set_use_fp16(False)  # main thread: every thread's default
    results = {}
    barrier = threading.Barrier(2)

    def run(name, fp16):
        if fp16 is not None:
            mx.contrib.tensorrt.set_use_fp16(fp16)
        barrier.wait()  # both threads have set (or not) before either binds
        seen = settings.get_use_fp16()
        trt_sym = sym.optimize_for("TensorRT", args=args, aux=aux, ctx=mx.cpu())
        exe = trt_sym.simple_bind(mx.cpu(), data=SHAPE, grad_req="null")
        results[name] = (seen, exe.forward(is_train=False, data=x)[0].asnumpy(), _engines(exe))

    threads = [threading.Thread(target=run, args=("fp16", True)), threading.Thread(target=run, args=("default", None))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results["fp16"][0] is True and results["default"][0] is False
    assert results["fp16"][2] >= 1 and results["default"][2] >= 1
    np.testing.assert_allclose(results["default"][1], want, **FP32)
    np.testing.assert_allclose(results["fp16"][1], want, **FP16)
    assert not np.allclose(results["fp16"][1], want, rtol=1e-6, atol=1e-7)
    assert settings.get_use_fp16() is False  # the fp16 thread did not change the main thread
