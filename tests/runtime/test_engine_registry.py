"""How fused nodes find their engines and let them go: keys, the weak table, pins, and MXNet's ``ref_holder``.

An engine lives as long as an executor (or a pin) uses it: the key table is
weak, and the operator objects MXNet keeps in ``mx.operator._registry.ref_holder``
drop their engine as soon as MXNet frees them, without waiting for a garbage
collection (checked here with the collector off).
"""
from __future__ import annotations

import gc
import json
import time
import weakref

import mxnet as mx
import numpy as np
import pytest

from mx_trt.errors import EngineRunError, MxTrtError, ShapeError
from mx_trt.runtime import fused_op
from mx_trt.runtime.forward import take_error
from tests.runtime.fake_engine import AffineEngine

SHAPE = (2, 3)


def register(name="sg"):
    return fused_op.register_engine(name, AffineEngine(SHAPE), ["data"], ["double", "rowsum"])


@pytest.fixture
def no_gc():
    """The garbage collector off: what is freed here is freed by reference counts alone."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def test_keys_are_unique_and_name_the_subgraph_and_the_process():
    a, b = register("sg0"), register("sg0")
    assert a.key != b.key
    name, process, n = a.key.split(":")
    assert name == "sg0" and process == fused_op._PROCESS and int(n) >= 0
    assert fused_op.lookup_engine(a.key) is a and fused_op.lookup_engine(b.key) is b


def test_the_table_holds_engines_weakly(no_gc):
    before = fused_op.registry_size()
    fused = register()
    key, ref = fused.key, weakref.ref(fused)
    assert fused_op.registry_size() == before + 1
    del fused
    assert ref() is None and fused_op.registry_size() == before
    with pytest.raises(MxTrtError, match=r"fused engine '.*' is gone: the executor that owned it was freed"):
        fused_op.lookup_engine(key)


def test_pins_keep_engines_without_an_owner(no_gc):
    fused = register()
    key, ref = fused.key, weakref.ref(fused)
    fused_op.pin([fused])
    del fused
    try:
        assert ref() is not None and key in fused_op.pinned_keys()
    finally:
        assert fused_op.unpin([key, "not:a:key"]) == 1
    assert ref() is None and key not in fused_op.pinned_keys()
    assert fused_op.unpin([key]) == 0


def test_keys_are_read_from_a_symbol_and_from_its_json():
    fused = register()
    sym = mx.sym.Custom(mx.sym.var("data"), op_type=fused_op.OP_TYPE, mx_trt_engine=fused.key, name="f")
    plain = mx.sym.relu(sym[0], name="r")
    assert fused_op.fused_engine_keys(plain) == [fused.key]
    assert fused_op.fused_engine_keys(plain.tojson()) == [fused.key]
    assert fused_op.holds_fused_nodes(plain) and fused_op.holds_fused_nodes(plain.tojson())
    other = mx.sym.relu(mx.sym.var("data"))
    assert fused_op.fused_engine_keys(other) == [] and not fused_op.holds_fused_nodes(other.tojson())
    # Older JSON spellings of the attributes ("attr", "param") are read too; other custom ops are not ours.
    nodes = [{"op": "null", "name": "data", "inputs": []},
             {"op": "Custom", "name": "a", "attr": {"op_type": fused_op.OP_TYPE, "mx_trt_engine": "k1"}},
             {"op": "Custom", "name": "b", "param": {"op_type": fused_op.OP_TYPE, "mx_trt_engine": "k2"}},
             {"op": "Custom", "name": "c", "attrs": {"op_type": "user_square", "mx_trt_engine": "k3"}}]
    assert fused_op.fused_engine_keys(json.dumps({"nodes": nodes})) == ["k1", "k2"]


def test_unreadable_json_naming_the_operator_is_a_typed_error():
    with pytest.raises(MxTrtError, match="not a symbol's JSON"):
        fused_op.fused_engine_keys('{"nodes": [' + fused_op.OP_TYPE)
    assert fused_op.fused_engine_keys("{not json at all}") == []  # cannot hold a fused node: not read


def test_mxnets_table_of_operators_is_replaced_once_and_releases_ours():
    fused_op.ensure_registered()
    table = mx.operator._registry.ref_holder
    assert isinstance(table, fused_op._ReleasingTable)
    fused_op.ensure_registered()
    assert mx.operator._registry.ref_holder is table

    released = []

    class Ours:
        def _mx_trt_release(self):
            released.append(self)

    class Broken:
        def _mx_trt_release(self):
            raise RuntimeError("called from C++: must not escape")

    t = fused_op._ReleasingTable({1: Ours(), 2: Broken(), 3: object()})
    del t[1]
    del t[2]  # logged, not raised
    del t[3]  # not ours: nothing to call
    assert len(released) == 1 and dict(t) == {}
    with pytest.raises(KeyError):
        del t[4]


def test_a_freed_executor_releases_its_engine_without_a_garbage_collection(no_gc):
    fused = register()
    engine_ref, fused_ref = weakref.ref(fused.engine), weakref.ref(fused)
    sym = mx.sym.Custom(mx.sym.var("data"), op_type=fused_op.OP_TYPE, mx_trt_engine=fused.key, name="f")
    exe = sym.simple_bind(mx.cpu(), grad_req="null", data=SHAPE)
    exe.arg_dict["data"][:] = np.ones(SHAPE, np.float32)
    np.testing.assert_allclose(exe.forward()[0].asnumpy(), np.full(SHAPE, 3.0))
    del fused
    assert fused_ref() is not None  # the executor's operator holds it
    del exe, sym
    # MXNet frees a custom operator from its own worker threads, shortly after the executor.
    deadline = time.monotonic() + 5
    while fused_ref() is not None and time.monotonic() < deadline:
        mx.nd.waitall()
        time.sleep(0.01)
    assert fused_ref() is None and engine_ref() is None


def test_take_error_returns_the_first_and_clears_all():
    a, b = register("a"), register("b")
    a.last_error, b.last_error = ShapeError("first"), EngineRunError("second")
    err = take_error([a, b])
    assert isinstance(err, ShapeError) and str(err) == "first"
    assert a.last_error is None and b.last_error is None and take_error([a, b]) is None


def test_errors_of_a_run_become_typed():
    typed = ShapeError("kept")
    assert fused_op._typed("sg", typed) is typed
    cause = ValueError("bad value")
    err = fused_op._typed("sg", cause)
    assert isinstance(err, EngineRunError) and str(err) == "sg: ValueError: bad value" and err.__cause__ is cause
