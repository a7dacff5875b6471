"""int8 and fp16 asked for together are refused with one clear error, whatever the order or the front-end.

Before, ``precision='int8'`` with ``fp16=True`` gave fp16 engines silently, or
int8 in the other order, and ``set_use_fp16(True)`` with ``precision='int8'``
gave int8 without a word. Graph: ``data (2, 4) -> FullyConnected(3)``.
"""
from __future__ import annotations

import mxnet as mx
import pytest

import mx_trt
from mx_trt.errors import PrecisionConflictError
from mx_trt.settings import Settings, set_use_fp16

MESSAGE = r"ask for two precisions \(int8 engines keep their float layers in fp32, not fp16\); ask for one"


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    for k in ("MXNET_TENSORRT_PRECISION", "MXNET_TENSORRT_USE_FP16", "MXNET_TENSORRT_CALIBRATION",
              "MXNET_TENSORRT_STRICT"):
        monkeypatch.delenv(k, raising=False)
    yield
    set_use_fp16(None)


@pytest.mark.parametrize("options", [
    {"precision": "int8", "fp16": True, "calibration": "t.json"},
    {"fp16": True, "precision": "int8", "calibration": "t.json"},
    {"fp16": "true", "precision": "INT8", "calibration": "t.json"},
])
def test_int8_and_fp16_in_one_call_are_refused_in_any_order(options):
    with pytest.raises(PrecisionConflictError, match=r"^backend options: precision='int8' and fp16=True " + MESSAGE):
        Settings.from_env().with_options(options)


def test_set_use_fp16_then_precision_int8_is_refused():
    set_use_fp16(True)
    with pytest.raises(PrecisionConflictError, match="precision='int8' and fp16 from set_use_fp16"):
        Settings.from_env().with_options({"precision": "int8", "calibration": "t.json"})
    # Explicit options that agree, or leave the precision alone, are fine.
    assert Settings.from_env().with_options({"precision": "fp32"}).precision == "fp32"
    assert Settings.from_env().with_options({"precision": "fp16", "fp16": True}).precision == "fp16"


def test_an_option_over_the_environments_precision_still_wins(monkeypatch):
    monkeypatch.setenv("MXNET_TENSORRT_PRECISION", "int8")
    monkeypatch.setenv("MXNET_TENSORRT_CALIBRATION", "t.json")
    assert Settings.from_env().with_options({"fp16": True}).precision == "fp16"


def test_fp32_with_fp16_true_is_refused_too():
    with pytest.raises(PrecisionConflictError, match=r"precision='fp32' and fp16=True ask for two precisions; ask"):
        Settings.from_env().with_options({"fp16": True, "precision": "fp32"})


def test_the_front_ends_raise_it_instead_of_a_native_run(monkeypatch):
    """Not a warning and a native run: what was asked for explicitly is never silently replaced."""
    sym = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=3, name="fc")
    args = {"fc_weight": mx.nd.ones((3, 4)), "fc_bias": mx.nd.zeros((3,))}
    with pytest.raises(PrecisionConflictError, match=MESSAGE):
        sym.optimize_for("TensorRT", args=args, aux={}, ctx=mx.cpu(), precision="int8", fp16=True,
                         calibration="t.json")
    net = mx.gluon.nn.Dense(3, in_units=4)
    net.initialize()
    net.hybridize(backend="TensorRT", fp16=True, precision="int8", calibration="t.json", static_alloc=True,
                  static_shape=True)
    with pytest.raises(PrecisionConflictError, match=MESSAGE):
        net(mx.nd.ones((2, 4)))


@pytest.mark.parametrize("options", [
    {"precision": "bf16", "fp16": True},
    {"fp16": True, "precision": "bfloat16"},
])
def test_bf16_and_fp16_in_one_call_are_refused_in_any_order(options):
    with pytest.raises(PrecisionConflictError, match=r"^backend options: precision='bf16' and fp16=True ask for two"):
        Settings.from_env().with_options(options)


def test_bf16_from_the_environment_with_fp16_is_refused(monkeypatch):
    monkeypatch.setenv("MXNET_TENSORRT_PRECISION", "bf16")
    set_use_fp16(True)
    with pytest.raises(mx_trt.MxTrtError, match="MXNET_TENSORRT_PRECISION=bf16 and fp16 .* bf16 is not fp16"):
        Settings.from_env()
    set_use_fp16(None)
    s = Settings.from_env()
    assert (s.bf16, s.fp16, s.int8, s.precision) == (True, False, False, "bf16")
    # An option over the environment's precision wins, as every option does.
    assert Settings.from_env().with_options({"fp16": True}).precision == "fp16"
    assert Settings.from_env().with_options({"precision": "fp32"}).precision == "fp32"
