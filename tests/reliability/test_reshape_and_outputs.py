"""``executor.reshape`` as natively, and graphs whose outputs include a weight variable.

Every output is compared with MXNet's own executor for the same graph, weights
and inputs (native ``reshape`` for reshaped executors), fp32 ``rtol=1e-4,
atol=1e-5`` (tests.mxcheck.OP_TOL). Builds are counted twice: by the fused
node (``FusedEngine.build_count``) and by a spy on the backend's ``build``.
"""
from __future__ import annotations

import logging

import mxnet as mx
import numpy as np
import pytest

import mx_trt
from mx_trt.builder import engines
from mx_trt.builder.backends.onnxruntime import OnnxRuntimeBackend
from mx_trt.errors import ParamMismatchError, ShapeError
from mx_trt.frontends.hook import disabled
from tests.builder.test_profiles import cnn
from tests.mxcheck import OP_TOL, random_params

RTOL, ATOL = OP_TOL["float32"]
SHAPE = (2, 3, 8, 8)


@pytest.fixture
def builds(monkeypatch):
    """Every engine the ONNX Runtime backend builds in this test, by batch of its first input."""
    seen = []
    real = OnnxRuntimeBackend.build

    def spy(self, exported, options):
        eng = real(self, exported, options)
        seen.append(eng.inputs[0].shape[0])
        return eng

    monkeypatch.setattr(OnnxRuntimeBackend, "build", spy)
    return seen


def _bind(sym, args, aux, on, shape=SHAPE):
    if on:
        exe = sym.simple_bind(mx.cpu(), grad_req="null", data=shape, shared_buffer={**args, **aux})
        assert mx_trt.bind_info(exe) is not None and mx_trt.bind_info(exe).engines
        return exe
    with disabled():
        exe = sym.simple_bind(mx.cpu(), grad_req="null", data=shape)
    exe.copy_params_from(args, aux)
    return exe


def _run(exe, x):
    exe.arg_dict["data"][:] = x
    exe.forward(is_train=False)
    return [o.asnumpy() for o in exe.outputs]


def _close(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)


def _reshape_steps(monkeypatch, caplog, batches):
    """Bind at batch 2 natively and with the pass, reshape both through ``batches`` and compare each step.

    Returns (fused node, the accelerated executors, the rebuild log lines).
    """
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1")
    sym = cnn()
    args, aux = random_params(sym, {"data": SHAPE})
    rng = np.random.RandomState(3)
    nat, acc = _bind(sym, args, aux, False), _bind(sym, args, aux, True)
    fused = mx_trt.bind_info(acc).engines[0]
    kept = [acc]
    with caplog.at_level(logging.WARNING, logger="mx_trt"):
        for b in batches:
            x = rng.uniform(-1, 1, (b,) + SHAPE[1:]).astype("float32")
            n = nat.reshape(allow_up_sizing=True, data=(b,) + SHAPE[1:])
            a = acc.reshape(allow_up_sizing=True, data=(b,) + SHAPE[1:])
            _close(_run(a, x), _run(n, x))
            kept.append(a)
        # The executor bound first still runs its own engine, unchanged by the reshapes.
        x = rng.uniform(-1, 1, SHAPE).astype("float32")
        _close(_run(acc, x), _run(nat, x))
    lines = [r.getMessage() for r in caplog.records if "a new engine was" in r.getMessage()]
    return fused, kept, lines


def test_reshape_of_a_static_engine_rebuilds_once_per_new_batch(monkeypatch, caplog, builds):
    # No MXNET_TENSORRT_MAX_BATCH_SIZE: the bound engine is static at batch 2.
    fused, kept, lines = _reshape_steps(monkeypatch, caplog, [8, 1, 2, 8, 1])
    assert fused.engine.batch_ranges == []
    # Batch 8 and batch 1 are built once each; batch 2 is the bound engine, and the
    # second visits to 8 and 1 reuse the engines the earlier reshaped executors hold.
    assert builds == [2, 8, 1]
    assert fused.build_count == 1 + 2 and fused.rebuilds == 2
    assert len(lines) == 2 and "batch 8 is not the static engine's batch 2" in lines[0], lines
    assert len(kept) == 6


def test_reshape_to_a_smaller_batch_and_back(monkeypatch, caplog, builds):
    fused, _, lines = _reshape_steps(monkeypatch, caplog, [1, 2])
    assert builds == [2, 1] and fused.rebuilds == 1 and len(lines) == 1


def test_reshape_inside_the_profile_builds_nothing_and_outside_once(monkeypatch, caplog, builds):
    monkeypatch.setenv("MXNET_TENSORRT_MAX_BATCH_SIZE", "8")
    fused, first, lines = _reshape_steps(monkeypatch, caplog, [8, 1, 5, 2])
    assert builds == [2] and fused.build_count == 1 and fused.rebuilds == 0 and not lines
    caplog.clear()
    fused, _, lines = _reshape_steps(monkeypatch, caplog, [12, 3, 12])
    assert first[0] is not None
    # The second bind reuses the first one's engine (same subgraph, profile 1..8) from the pool.
    assert builds == [2, 12] and fused.rebuilds == 1 and len(lines) == 1
    assert "outside the engine's profiles [(1, 2, 8)]" in lines[0]
    assert fused.engine.batch_ranges == [(1, 12, 12)]


def test_reshape_loads_an_engine_from_the_plan_cache_when_one_is_stored(monkeypatch, caplog, builds):
    _reshape_steps(monkeypatch, caplog, [8])
    engines.clear_pool()
    caplog.clear()
    fused, _, lines = _reshape_steps(monkeypatch, caplog, [8])
    assert builds == [2, 8] and fused.build_count == 0 and fused.rebuilds == 1
    assert len(lines) == 1 and "loaded from the plan cache" in lines[0]


def test_reshape_that_changes_more_than_the_batch_is_refused_with_the_reason(monkeypatch, caplog):
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1")
    x = mx.sym.var("data")
    s = mx.sym.Activation(mx.sym.Activation(x, act_type="relu", name="r"), act_type="tanh", name="t")
    exe = s.simple_bind(mx.cpu(), grad_req="null", data=(2, 6), shared_buffer={"unused": mx.nd.zeros(1)})
    assert mx_trt.bind_info(exe).engines
    # The fused node's typed error, not MXNet's failed shape inference.
    with caplog.at_level(logging.ERROR, logger="mx_trt"), pytest.raises(ShapeError, match=r"\[\(2, 6\)\], got"):
        exe.reshape(allow_up_sizing=True, data=(2, 7))
    assert any("engine was built for input shapes [(2, 6)]" in r.getMessage() for r in caplog.records)


# --------------------------------------------------------------------------- weights among the outputs


def _fc_net():
    x = mx.sym.var("data")
    w = mx.sym.var("fc_weight")
    c = mx.sym.Convolution(x, weight=mx.sym.var("conv_weight"), num_filter=4, kernel=(3, 3), pad=(1, 1), name="conv")
    out = mx.sym.FullyConnected(mx.sym.Activation(c, act_type="relu", name="relu"), weight=w,
                                bias=mx.sym.var("fc_bias"), num_hidden=5, name="fc")
    return out, w


def _compare_both(sym, monkeypatch, strict=True):
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1")
    if strict:  # a failure of the pass raises instead of binding natively
        monkeypatch.setenv("MXNET_TENSORRT_STRICT", "1")
    args, aux = random_params(sym, {"data": SHAPE})
    x = np.random.RandomState(5).uniform(-1, 1, SHAPE).astype("float32")
    want = _run(_bind(sym, args, aux, False), x)
    exe = _bind(sym, args, aux, True)
    _close(_run(exe, x), want)
    _close(_run(exe, -x), _run(_bind(sym, args, aux, False), -x))
    return exe, args, aux


def test_a_weight_that_is_also_an_output_and_feeds_an_engine(monkeypatch):
    out, w = _fc_net()
    exe, args, aux = _compare_both(mx.sym.Group([out, w]), monkeypatch)
    info = mx_trt.bind_info(exe)
    inside = {info.plan.graph.nodes[n].name for sg in info.plan.partition.subgraphs for n in sg.nodes}
    assert {"conv", "relu", "fc"} <= inside  # the FullyConnected reading the weight is in an engine
    assert "fc_weight" in exe.arg_dict and "fc_weight" in info.absorbed  # still an argument, and checked
    np.testing.assert_array_equal(exe.outputs[1].asnumpy(), args["fc_weight"].asnumpy())
    # The engine holds its own copy: the same value is accepted, another one is refused, never ignored.
    exe.copy_params_from(args, aux)
    with pytest.raises(ParamMismatchError, match="fc_weight"):
        exe.copy_params_from({**args, "fc_weight": args["fc_weight"] * 2}, aux)


def test_weights_as_outputs_before_and_among_other_outputs(monkeypatch):
    out, w = _fc_net()
    internals = out.get_internals()
    exe, _, _ = _compare_both(mx.sym.Group([w, out, internals["fc_bias"], internals["conv_weight"]]), monkeypatch)
    assert set(mx_trt.bind_info(exe).absorbed) >= {"fc_weight", "fc_bias", "conv_weight"}


def test_a_weight_output_whose_consumers_stay_native(monkeypatch):
    monkeypatch.setenv("MXNET_TENSORRT_EXCLUDE_OPS", "FullyConnected")
    out, w = _fc_net()
    exe, _, _ = _compare_both(mx.sym.Group([out, w]), monkeypatch)
    assert "fc_weight" not in mx_trt.bind_info(exe).absorbed


def test_a_batchnorm_statistic_as_an_output(monkeypatch):
    x = mx.sym.var("data")
    mean = mx.sym.var("bn_moving_mean")
    c = mx.sym.Convolution(x, num_filter=4, kernel=(3, 3), pad=(1, 1), name="conv")
    bn = mx.sym.BatchNorm(c, moving_mean=mean, fix_gamma=False, name="bn")
    out = mx.sym.Activation(bn, act_type="relu", name="relu")
    _compare_both(mx.sym.Group([out, mean]), monkeypatch)


def test_a_weight_output_without_strict_mode_binds_with_the_pass_and_no_warning(monkeypatch, caplog):
    out, w = _fc_net()
    with caplog.at_level(logging.WARNING, logger="mx_trt"):
        exe, _, _ = _compare_both(mx.sym.Group([out, w]), monkeypatch, strict=False)
    assert mx_trt.bind_info(exe) is not None
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.records


def test_reshape_refuses_to_build_from_weights_changed_since_the_bind(monkeypatch, caplog):
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1")
    sym = cnn()
    args, aux = random_params(sym, {"data": SHAPE})
    exe = _bind(sym, args, aux, True)
    args["fc_weight"][:] = args["fc_weight"] * 2  # the caller's array, changed in place after the bind
    with caplog.at_level(logging.ERROR, logger="mx_trt"), pytest.raises(ParamMismatchError, match="fc_weight"):
        exe.reshape(allow_up_sizing=True, data=(4,) + SHAPE[1:])
    assert any("weight 'fc_weight' changed since the bind" in r.getMessage() for r in caplog.records)
