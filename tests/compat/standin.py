"""What stands in, on a CPU machine with no network, for what MXNet's TensorRT tests downloaded or needed a GPU for.

- :func:`check_cpu_backend` for ``check_tensorrt_installation()`` (which looked for ``libnvinfer``):
  the engines here come from mx_trt's CPU backend (ONNX Runtime).
- :func:`get_mnist` for ``mx.test_utils.get_mnist()``: scikit-learn's digits (1,797 8x8 images, shipped
  with scikit-learn), upsampled 3x and padded to 28x28, in the same dictionary layout.
- :func:`seeded_net` for ``pretrained=True``: seeded Xavier weights, and every BatchNorm's moving mean and
  variance set to the statistics of its own input on image-like data (as :mod:`tests.models.normalized`
  explains, random weights with the default statistics give logits that hardly depend on the input, so
  top-1 comparisons could not fail; and deep networks blow up).
- :func:`cifar10_test_set` for ``gluon.data.vision.CIFAR10(train=False)`` and :func:`imagenet_batches`
  for ImageNet (the DALI pipeline of 1.9.1): seeded image-like random images of the right shape.
- :func:`with_seed` for ``with_seed`` of MXNet's ``tests/python/unittest/common.py`` (a fixed seed here).
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Dict, Iterator, List, Tuple

import numpy as np

from tests.models.normalized import smooth_images

#: Seed of every stand-in.
SEED = 0


def check_cpu_backend() -> None:
    """Fail unless mx_trt's CPU engine backend can be used."""
    from mx_trt.build.backends.onnxruntime import OnnxRuntimeBackend

    reason = OnnxRuntimeBackend.unavailable_reason()
    assert reason is None, f"mx_trt's CPU backend is not available: {reason}"


@functools.lru_cache(maxsize=1)
def _digits() -> Dict[str, np.ndarray]:
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.images.astype(np.float32) / 16.0).repeat(3, axis=1).repeat(3, axis=2)   # 24 x 24
    x = np.pad(x, ((0, 0), (2, 2), (2, 2)))[:, None]                                 # 1 x 28 x 28, as MNIST
    y = d.target.astype(np.float32)
    order = np.random.RandomState(SEED).permutation(len(y))
    x, y = x[order], y[order]
    n_train = 1437  # 80%; the remaining 360 images are the test set
    return {"train_data": x[:n_train], "train_label": y[:n_train],
            "test_data": x[n_train:], "test_label": y[n_train:]}


def get_mnist() -> Dict[str, np.ndarray]:
    """scikit-learn's digits laid out as ``mx.test_utils.get_mnist()``: float32 ``N x 1 x 28 x 28`` in [0, 1]."""
    return {k: v.copy() for k, v in _digits().items()}


_WEIGHTS: Dict[Tuple[str, Tuple[int, ...], int], List[np.ndarray]] = {}


def seeded_net(net: Any, key: str, input_shape: Tuple[int, ...], seed: int = SEED) -> Any:
    """Give a Gluon network built with ``pretrained=False`` seeded weights, in place, and return it.

    Weights are Xavier (magnitude 2) from ``mx.random.seed(seed)``; each BatchNorm's moving statistics are
    those of its input over 8 :func:`tests.models.normalized.smooth_images` of ``input_shape[1:]`` (one
    training forward and backward with momentum 0, as a trained network's BatchNorms hold the statistics of
    its data). The values are kept per ``(key, input_shape, seed)``: building the same network again in the
    process gives it the same weights, as a second ``pretrained=True`` download would.
    """
    import mxnet as mx
    from mxnet import autograd
    from mxnet.gluon import nn

    cache_key = (key, tuple(input_shape[1:]), seed)
    params = list(net.collect_params().values())
    if cache_key in _WEIGHTS:
        net.initialize(mx.init.Zero(), ctx=mx.cpu(), force_reinit=True)
        net(mx.nd.zeros((1,) + tuple(input_shape[1:])))  # finish deferred initialization
        for p, v in zip(params, _WEIGHTS[cache_key]):
            p.set_data(mx.nd.array(v, dtype=v.dtype))
        return net
    mx.random.seed(seed)
    net.initialize(mx.init.Xavier(magnitude=2.0), ctx=mx.cpu(), force_reinit=True)
    bns: List[Any] = []
    net.apply(lambda b: bns.append(b) if isinstance(b, nn.BatchNorm) else None)
    momenta = [bn._kwargs["momentum"] for bn in bns]
    for bn in bns:  # running = momentum * running + (1 - momentum) * batch statistics
        bn._kwargs["momentum"] = 0.0
    c, h, w = input_shape[1:]
    assert h == w, "square inputs only"
    x = mx.nd.array(smooth_images(8, h, seed + 1000)[:, :c])
    with autograd.record():  # MXNet updates the moving statistics in BatchNorm's backward
        y = net(x)
    y.backward()
    mx.nd.waitall()
    for bn, m in zip(bns, momenta):
        bn._kwargs["momentum"] = m
    _WEIGHTS[cache_key] = [p.data().asnumpy() for p in params]
    return net


def image_like_uint8(n: int, size: int, seed: int) -> np.ndarray:
    """``n`` uint8 ``size x size x 3`` images (HWC, as image datasets hold them) of smooth random content."""
    img = smooth_images(n, size, seed)
    return np.clip(128.0 + 48.0 * img, 0, 255).astype(np.uint8).transpose(0, 2, 3, 1)


def cifar10_test_set(n: int, seed: int = SEED) -> Any:
    """A Gluon dataset of ``n`` (image, label) pairs shaped as CIFAR-10's test set: uint8 32x32x3, labels 0-9."""
    import mxnet as mx

    labels = np.random.RandomState(seed + 1).randint(0, 10, n).astype(np.int32)
    return mx.gluon.data.ArrayDataset(mx.nd.array(image_like_uint8(n, 32, seed), dtype=np.uint8), labels)


def imagenet_batches(batch_shape: Tuple[int, ...], seed: int = SEED) -> Iterator[List[Tuple[Any, Any]]]:
    """An endless, stateful iterator of ``[(data, label)]`` as DALI's ``DALIGluonIterator`` yields them:
    image-like ``batch_shape`` float32 data normalized as ImageNet's (mean/std of 0-255 pixels) and labels 0-999."""
    import mxnet as mx

    rng = np.random.RandomState(seed)
    mean = np.array([0.485, 0.456, 0.406], np.float32)[:, None, None] * 255
    std = np.array([0.229, 0.224, 0.225], np.float32)[:, None, None] * 255
    i = 0
    while True:
        pixels = image_like_uint8(batch_shape[0], batch_shape[2], seed + 10 + i).transpose(0, 3, 1, 2)
        data = (pixels.astype(np.float32) - mean) / std
        yield [(mx.nd.array(data), mx.nd.array(rng.randint(0, 1000, (batch_shape[0], 1)).astype(np.float32)))]
        i += 1


def with_seed(seed: int = SEED) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Seed numpy, Python and MXNet before the test (MXNet's ``with_seed()`` picked a random seed and logged it)."""
    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            import random

            import mxnet as mx

            np.random.seed(seed)
            random.seed(seed)
            mx.random.seed(seed)
            return fn(*args, **kwargs)
        return wrapper
    return decorate


def assertRaises(expected_exception: type, func: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    """MXNet's ``tests/python/unittest/common.assertRaises``."""
    try:
        func(*args, **kwargs)
    except expected_exception:
        pass
    else:
        assert False, "%s did not raise %s" % (func.__name__, expected_exception.__name__)
