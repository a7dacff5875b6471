"""INT8 accuracy, measured on a trained model and on normalized model-zoo networks.

* The digits CNN (:mod:`tests.models.digits`, trained here in a few seconds, about
  98% top-1) is calibrated with :func:`mx_trt.calibrate` on its calibration split
  and bound with the pass at fp32, fp16 and int8 (``MXNET_TENSORRT_PRECISION``,
  ``MXNET_TENSORRT_CALIBRATION``). Top-1 on the held-out test split:

  - fp32 engine: equal to native MXNet's output (``rtol=1e-4, atol=1e-5``), so the same top-1;
  - fp16 engine: ``rtol=1e-2, atol=1e-2`` of native, top-1 within 0.5 point;
  - bf16 engine (OpenVINO, where the CPU has bfloat16 arithmetic): ``rtol=3e-2`` and ``atol``
    2% of the largest logit, top-1 within 0.5 point, and not float32's numbers;
  - int8 engine: top-1 at most :data:`MAX_INT8_DROP` (1 point) below fp32, for each
    calibration method; and its logits differ from fp32 by more than fp32 rounding
    (the engine really ran in int8).

* Model-zoo networks with random weights, BatchNorm statistics measured on image-like
  inputs (:mod:`tests.models.normalized`: with the zoo's own random statistics the
  logits do not depend on the input and any comparison passes): the cosine
  similarity of the int8 engine's logits to the fp32 engine's after removing their
  batch mean, and the top-1 agreement, above the thresholds in :data:`ZOO`. Such
  random networks amplify any rounding through their depth, unlike trained ones
  (measured at 64x64 on 32 images: the fp16 engine alone gives centred cosine
  0.998 and top-1 agreement 0.94 on MobileNetV2 0.5, MXNet's own oneDNN INT8 0.59 and
  0.38, this int8 engine about 0.5 and 0.3; ResNet-18: fp16 1.000, MXNet INT8 0.966,
  int8 0.98). So the bounds there catch a broken export (unrelated logits give about 0
  and 1/1000), while the accuracy of int8 is measured on the trained digits CNN.

The measured values are printed (``pytest -s``); ``benchmarks/run.py --only int8``
reports the same comparisons with timings.
"""
from __future__ import annotations

import contextlib
from typing import Any, Dict, Iterator, Optional, Tuple

import mxnet as mx
import numpy as np
import pytest

import mx_trt
from mx_trt.builder.backends.openvino import OpenVinoBackend
from mx_trt.frontends import hook
from tests.models.digits import trained_digits_cnn
from tests.models.normalized import centered_cosine, normalized_zoo_model, smooth_images
from tests.harness.mxcheck import OP_TOL

#: The largest top-1 drop of int8 against fp32 on the digits test split (a fraction: 1 point).
MAX_INT8_DROP = 0.01
#: The smallest change of the logits (max |int8 - fp32|) that shows the engine quantized:
#: fp32 engines match native within 1e-5 here, int8 ones differ by 1e-2 or more.
MIN_INT8_EFFECT = 1e-3
#: zoo network -> (input side, minimum centred cosine to fp32, minimum top-1 agreement with fp32).
#: Measured: ResNet-18 0.98 and 0.84-0.88, MobileNetV2 0.5 0.47-0.52 and 0.25-0.41 (see the module docstring).
ZOO = {"resnet18_v1": (64, 0.95, 0.75), "mobilenetv2_0.5": (64, 0.35, 0.1)}
ZOO_SAMPLES = 32


@contextlib.contextmanager
def _environment(values: Dict[str, Optional[str]]) -> Iterator[None]:
    """The environment variables ``values`` (``None``: unset) for a block, restored after (a test's own process)."""
    with pytest.MonkeyPatch.context() as mp:
        for k, v in values.items():
            if v is None:
                mp.delenv(k, raising=False)
            else:
                mp.setenv(k, v)
        yield

def _native(sym: Any, args: Dict[str, Any], aux: Dict[str, Any], x: np.ndarray) -> np.ndarray:
    with hook.disabled():
        exe = sym.simple_bind(mx.cpu(), data=x.shape, grad_req="null")
    exe.copy_params_from(args, aux)
    exe.forward(is_train=False, data=mx.nd.array(x))
    return exe.outputs[0].asnumpy()


def _accelerated(sym: Any, args: Dict[str, Any], aux: Dict[str, Any], x: np.ndarray, precision: str,
                 table: str = "", backend: Optional[str] = None) -> Tuple[np.ndarray, Any]:
    """The output with the pass at ``precision`` (environment settings, every subgraph an engine, no plan cache)."""
    env = {"MXNET_TENSORRT_PRECISION": precision, "MXNET_TENSORRT_CALIBRATION": table or None,
           "MXNET_TENSORRT_ENGINE_RULE": "always", "MXNET_TENSORRT_CACHE_DIR": "", "MXNET_TENSORRT_USE_FP16": None,
           "MXNET_TENSORRT_BACKEND": backend}
    with _environment(env):
        exe = mx_trt.tensorrt_bind(sym, mx.cpu(), {**args, **aux}, data=x.shape)
    info = mx_trt.bind_info(exe)
    assert info is not None and info.engines, f"{precision}: no engine was built"
    exe.forward(is_train=False, data=mx.nd.array(x))
    return exe.outputs[0].asnumpy(), info


@pytest.fixture(scope="module")
def digits() -> Any:
    return trained_digits_cnn()


@pytest.fixture(scope="module")
def native(digits: Any) -> np.ndarray:
    out = _native(digits.symbol, digits.arg_params, digits.aux_params, digits.test_x)
    assert digits.top1(out) >= 0.95, "the digits CNN did not train"
    return out


@pytest.fixture(scope="module")
def fp32(digits: Any) -> np.ndarray:
    return _accelerated(digits.symbol, digits.arg_params, digits.aux_params, digits.test_x, "fp32")[0]


def _calibrate(digits: Any, method: str, path: str) -> Any:
    batches = [digits.calib_x[i:i + 50] for i in range(0, len(digits.calib_x), 50)]
    return mx_trt.calibrate(digits.symbol, (digits.arg_params, digits.aux_params), batches, method=method,
                            engine_rule="always", out=path, progress=False)


def test_fp32_engine_equals_native(digits, native, fp32):
    rtol, atol = OP_TOL["float32"]
    np.testing.assert_allclose(fp32, native, rtol=rtol, atol=atol)
    assert digits.top1(fp32) == digits.top1(native)
    print(f"\ndigits top-1: native {digits.top1(native):.4f}, fp32 engine {digits.top1(fp32):.4f}")


def test_fp16_engine_top1(digits, native):
    out, _ = _accelerated(digits.symbol, digits.arg_params, digits.aux_params, digits.test_x, "fp16")
    rtol, atol = OP_TOL["float16"]
    np.testing.assert_allclose(out, native, rtol=rtol, atol=atol)
    assert abs(digits.top1(out) - digits.top1(native)) <= 0.005
    print(f"\ndigits top-1: fp16 engine {digits.top1(out):.4f} (native {digits.top1(native):.4f})")


_NO_BF16 = OpenVinoBackend.unavailable_reason() or OpenVinoBackend().precision_reason("bf16")


@pytest.mark.skipif(bool(_NO_BF16), reason=f"no bf16 engines here: {_NO_BF16}")
def test_bf16_engine_top1(digits, native):
    out, info = _accelerated(digits.symbol, digits.arg_params, digits.aux_params, digits.test_x, "bf16",
                             backend="openvino")
    assert all(str(f.engine.compiled.get_property("INFERENCE_PRECISION_HINT")) == "<Type: 'bfloat16'>"
               for f in info.engines)
    rtol, atol = OP_TOL["bfloat16"]
    np.testing.assert_allclose(out, native, rtol=rtol, atol=atol * max(1.0, float(np.abs(native).max())))
    assert np.abs(out - native).max() > 1e-4 * np.abs(native).max()  # bfloat16 numbers, not float32 ones
    assert abs(digits.top1(out) - digits.top1(native)) <= 0.005
    print(f"\ndigits top-1: bf16 engine {digits.top1(out):.4f} (native {digits.top1(native):.4f})")


@pytest.mark.parametrize("method", ["entropy", "percentile", "minmax"])
def test_int8_top1_drop_at_most_one_point(digits, fp32, method, tmp_path):
    table = _calibrate(digits, method, str(tmp_path / "digits-calib.json"))
    assert table.num_samples == len(digits.calib_x) and table.tensors
    out, info = _accelerated(digits.symbol, digits.arg_params, digits.aux_params, digits.test_x, "int8",
                             str(tmp_path / "digits-calib.json"))
    assert np.abs(out - fp32).max() > MIN_INT8_EFFECT, "the int8 engine's output equals fp32's: nothing was quantized"
    drop = digits.top1(fp32) - digits.top1(out)
    print(f"\ndigits top-1 int8 ({method}): {digits.top1(out):.4f}, fp32 {digits.top1(fp32):.4f}, "
          f"drop {100 * drop:.2f} point(s)")
    assert drop <= MAX_INT8_DROP, f"int8 ({method}) lost {100 * drop:.2f} points of top-1 against fp32"


def test_int8_options_match_environment(digits, tmp_path):
    """``optimize_for(..., precision='int8', calibration=table)`` builds the same engine as the environment."""
    path = str(tmp_path / "digits-calib.json")
    table = _calibrate(digits, "entropy", path)
    by_env, _ = _accelerated(digits.symbol, digits.arg_params, digits.aux_params, digits.test_x, "int8", path)
    with _environment({"MXNET_TENSORRT_CACHE_DIR": "", "MXNET_TENSORRT_PRECISION": None,
                       "MXNET_TENSORRT_CALIBRATION": None}):
        opt = digits.symbol.optimize_for("TensorRT", digits.arg_params, digits.aux_params, mx.cpu(),
                                         shape_dict={"data": digits.test_x.shape}, precision="int8", calibration=table,
                                         engine_rule="always")
        with hook.disabled():
            exe = opt.simple_bind(mx.cpu(), data=digits.test_x.shape, grad_req="null")
    exe.copy_params_from(digits.arg_params, digits.aux_params, allow_extra_params=True)
    exe.forward(is_train=False, data=mx.nd.array(digits.test_x))
    np.testing.assert_allclose(exe.outputs[0].asnumpy(), by_env, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_int8_agrees_with_fp32(name, tmp_path):
    size, min_cos, min_top1 = ZOO[name]
    sym, args, aux = normalized_zoo_model(name, size)
    calib = [smooth_images(8, size, seed) for seed in range(4)]
    path = str(tmp_path / f"{name}-calib.json")
    mx_trt.calibrate(sym, (args, aux), calib, method="entropy", engine_rule="always", out=path, progress=False)
    x = smooth_images(ZOO_SAMPLES, size, 99)
    native = _native(sym, args, aux, x)
    fp32, _ = _accelerated(sym, args, aux, x, "fp32")
    int8, _ = _accelerated(sym, args, aux, x, "int8", path)
    assert centered_cosine(fp32, native) > 0.9999, "the fp32 engine differs from native MXNet"
    spread = float(native.std(axis=0).mean() / native.std())
    assert spread > 0.05, f"{name}: the logits hardly depend on the input ({spread:.2g}); the comparison would be void"
    cos = centered_cosine(int8, fp32)
    agree = float(np.mean(int8.argmax(axis=1) == fp32.argmax(axis=1)))
    print(f"\n{name} {size}x{size}, {ZOO_SAMPLES} images: int8 vs fp32 centred cosine {cos:.4f}, top-1 agreement "
          f"{agree:.3f}")
    assert cos > min_cos and agree >= min_top1, (name, cos, agree)

