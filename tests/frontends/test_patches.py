"""mx_trt.patches: every change to MXNet is in one table, and mx_trt.uninstall() undoes it exactly."""
from __future__ import annotations

import sys

import mxnet as mx
import numpy as np

import mx_trt
from mx_trt import patches
from mx_trt.frontends import hook


def _targets():
    import mxnet.module.executor_group as eg
    from mxnet.gluon import block, parameter, trainer

    return [(mx.symbol.Symbol, "simple_bind"), (mx.symbol.Symbol, "bind"), (mx.symbol.Symbol, "optimize_for"),
            (mx.symbol.Symbol, "get_backend_symbol"), (mx.executor.Executor, "copy_params_from"),
            (mx.executor.Executor, "forward"), (mx.symbol, "load"), (mx.symbol, "load_json"),
            (eg.DataParallelExecutorGroup, "_bind_ith_exec"), (eg.DataParallelExecutorGroup, "forward"),
            (mx.mod.Module, "bind"), (block.HybridBlock, "_build_cache"), (parameter.Parameter, "set_data"),
            (trainer.Trainer, "step"), (mx.autograd, "set_training"), (mx.operator._registry, "ref_holder")]


def test_every_patch_is_in_the_table_and_uninstall_restores_mxnet_exactly(monkeypatch):
    from mx_trt.quantize import online
    from mx_trt.runtime import fused_op

    hook.install()
    online.install()
    fused_op.ensure_registered()
    table = patches.patched()
    recorded = {(id(p.owner), p.name) for p in table}
    for owner, name in _targets():
        assert (id(owner), name) in recorded, (owner, name)
    originals = {(id(p.owner), p.name): p.original for p in table}
    live_table = mx.operator._registry.ref_holder
    # Every private MXNet name patched is listed with the MXNet version it was checked against.
    private = {f"{getattr(p.owner, '__module__', None) or p.owner.__name__}.{getattr(p.owner, '__qualname__', '')}."
               f"{p.name}".replace("..", ".") for p in table if p.name.startswith("_") and not p.name.startswith("__")}
    assert private and all(any(n.endswith(q.split(".", 1)[-1]) for n in patches.PRIVATE) for q in private), private
    assert set(patches.PRIVATE.values()) == {mx.__version__}

    class Base:
        def f(self):
            return "base"

    class Child(Base):
        pass

    patches.wrap(Child, "f", lambda original: (lambda self: "patched " + original(self)))
    assert Child().f() == "patched base"
    try:
        assert mx_trt.uninstall() == len(table) + 1
        assert "f" not in Child.__dict__ and Child().f() == "base"  # an inherited attribute is inherited again
        for owner, name in _targets():
            want = originals[(id(owner), name)]
            assert getattr(owner, name) is want or (name == "ref_holder" and type(getattr(owner, name)) is dict)
        assert "mxnet.contrib.tensorrt" not in sys.modules and not hasattr(mx.contrib, "tensorrt")
        assert type(mx.operator._registry.ref_holder) is dict and live_table is not mx.operator._registry.ref_holder
        # Binding now is MXNet's own, even with the switch on.
        monkeypatch.setenv("MXNET_USE_TENSORRT", "1")
        data = mx.sym.var("data")
        sym = mx.sym.FullyConnected(mx.sym.Activation(mx.sym.FullyConnected(data, num_hidden=4, name="a"),
                                                      act_type="relu"), num_hidden=3, name="b")
        args = {"a_weight": mx.nd.ones((4, 5)), "a_bias": mx.nd.zeros(4), "b_weight": mx.nd.ones((3, 4)),
                "b_bias": mx.nd.zeros(3)}
        exe = sym.simple_bind(mx.cpu(), data=(2, 5), grad_req="null", shared_buffer=args)
        assert getattr(exe, "_mx_trt", None) is None
        np.testing.assert_allclose(exe.forward(data=mx.nd.ones((2, 5)))[0].asnumpy(), np.full((2, 3), 20.0))
    finally:
        hook.install()  # the rest of the suite runs with the patches
        online.install()
        fused_op.ensure_registered()
    assert {(id(p.owner), p.name) for p in patches.patched()} >= {(id(o), n) for o, n in _targets()}
    exe = sym.simple_bind(mx.cpu(), data=(2, 5), grad_req="null", shared_buffer=args)
    assert exe._mx_trt is not None
