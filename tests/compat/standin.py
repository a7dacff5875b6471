"""What stands in, on a CPU machine with no network, for what MXNet's TensorRT tests downloaded or needed a GPU for.

- :func:`check_cpu_backend` for ``check_tensorrt_installation()`` (which looked for ``libnvinfer``):
  the engines here come from mx_trt's CPU backend (ONNX Runtime).
- :func:`get_mnist` for ``mx.test_utils.get_mnist()``: scikit-learn's digits (1,797 8x8 images, shipped
  with scikit-learn), upsampled 3x and padded to 28x28, in the same dictionary layout.
- :func:`cifar10_test_set` for ``gluon.data.vision.CIFAR10(train=False)`` and :func:`imagenet_batches`
  for ImageNet (the DALI pipeline of 1.9.1): seeded image-like images of the right shape, in 10 classes.
  Each class is one random smooth picture (:func:`tests.models.normalized.smooth_images`); an image is
  its class's picture plus finer random detail (:data:`DETAIL` of its amplitude), and its label is the class.
- :func:`seeded_net` for ``pretrained=True``: seeded Xavier weights, every BatchNorm's moving mean and
  variance set to the statistics of its own input on image-like data (as :mod:`tests.models.normalized`
  explains, random weights with the default statistics give logits that hardly depend on the input;
  and deep networks blow up), and, for a classifier evaluated on one of the stand-in datasets, its last
  layer fitted to that dataset's classes (ridge regression of its features on 8 training images a
  class, none of them among the test images). What the originals compare are top-1 predictions and
  accuracies of pretrained networks on real data: with purely random weights the top two logits are
  close, so any rounding flips predictions (random-weight ResNet-50 v1: fp32 and int8 agreed on the
  top-1 class of 76% of 50 stand-in images, with 4 distinct classes predicted), and with random labels
  every accuracy is about chance. With the fitted layer the network separates the stand-in classes
  as a trained one separates real ones (ResNet-50 v1: 98% top-1 on 50 test images, fp32 and mx_trt's
  int8 engines agreeing on 94% of them), and both checks measure something.
- :func:`with_seed` for ``with_seed`` of MXNet's ``tests/python/unittest/common.py`` (a fixed seed here).
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Dict, Iterator, List, Tuple

import numpy as np
import pytest

from tests.models.normalized import smooth_images

#: Seed of every stand-in.
SEED = 0


def check_cpu_backend() -> None:
    """Fail unless mx_trt's CPU engine backend can be used."""
    from mx_trt.builder.backends.onnxruntime import OnnxRuntimeBackend

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


#: Classes of the stand-in image datasets.
CLASSES = 10
#: Amplitude of the random detail added to a class picture (the class pictures have about unit amplitude).
#: At 0.5 a random ResNet-50 v1 with its last layer fitted was right on 45% of the test images, at 0.15
#: on 100%: its features separate the classes only when the detail is small.
DETAIL = 0.15
#: Seeds of the class pictures, of the images a last layer is fitted on, and of the test images.
_TEMPLATE_SEED, _FIT_SEED, _TEST_SEED = 2000, 3000, 4000
#: ImageNet's normalization of 0-255 pixels (the DALI pipeline of MXNet 1.9.1's test).
_IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)[:, None, None] * 255
_IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32)[:, None, None] * 255
#: CIFAR-10's normalization of [0, 1] pixels (transforms.Normalize in the cvnets tests).
_CIFAR_MEAN = np.array([0.4914, 0.4822, 0.4465], np.float32)[:, None, None]
_CIFAR_STD = np.array([0.2023, 0.1994, 0.2010], np.float32)[:, None, None]


def class_images(n: int, size: int, seed: int) -> Tuple[np.ndarray, np.ndarray]:
    """``n`` uint8 ``size x size x 3`` images (HWC) of the :data:`CLASSES` stand-in classes, and their labels."""
    templates = smooth_images(CLASSES, size, _TEMPLATE_SEED)
    labels = np.random.RandomState(seed).randint(0, CLASSES, n)
    img = templates[labels] + DETAIL * smooth_images(n, size, seed + 1, cells=16)
    pixels = np.clip(128.0 + 40.0 * img, 0, 255).astype(np.uint8).transpose(0, 2, 3, 1)
    return pixels, labels.astype(np.int32)


def _normalized(pixels: np.ndarray, dataset: str) -> np.ndarray:
    """NCHW float32 network inputs from HWC uint8 ``pixels``, as the dataset's test pipeline prepares them."""
    x = pixels.transpose(0, 3, 1, 2).astype(np.float32)
    if dataset == "imagenet":
        return (x - _IMAGENET_MEAN) / _IMAGENET_STD
    return (x / 255.0 - _CIFAR_MEAN) / _CIFAR_STD


def _fit_last_layer(net: Any, dataset: str, size: int) -> None:
    """Fit ``net.output`` (a Dense layer) to the stand-in classes: ridge regression of the features of
    8 images a class on one-hot targets of height 10. Outputs beyond the classes get zero weights."""
    import mxnet as mx

    pixels, labels = class_images(8 * CLASSES, size, _FIT_SEED)
    x = _normalized(pixels, dataset)
    feats = np.concatenate([net.features(mx.nd.array(x[i:i + 16])).asnumpy().reshape(min(16, len(x) - i), -1)
                            for i in range(0, len(x), 16)]).astype(np.float64)
    mean = feats.mean(axis=0)
    f = feats - mean
    target = np.full((len(labels), CLASSES), -1.0)
    target[np.arange(len(labels)), labels] = 9.0
    # Ridge in the dual form (fewer images than features): W = F^T (F F^T + lam I)^-1 T.
    gram = f @ f.T
    lam = 1e-3 * np.trace(gram) / len(gram)
    w = f.T @ np.linalg.solve(gram + lam * np.eye(len(gram)), target)          # features x classes
    weight = net.output.weight.data().asnumpy()
    bias = net.output.bias.data().asnumpy()
    weight[:] = 0.0
    bias[:] = 0.0
    weight[:CLASSES] = w.T
    bias[:CLASSES] = -(mean @ w)
    net.output.weight.set_data(mx.nd.array(weight))
    net.output.bias.set_data(mx.nd.array(bias))


_WEIGHTS: Dict[Tuple[Any, ...], List[np.ndarray]] = {}


def seeded_net(net: Any, key: str, input_shape: Tuple[int, ...], seed: int = SEED, dataset: str = "") -> Any:
    """Give a Gluon network built with ``pretrained=False`` seeded weights, in place, and return it.

    Weights are Xavier (magnitude 2) from ``mx.random.seed(seed)``; each BatchNorm's moving statistics are
    those of its input over 8 :func:`tests.models.normalized.smooth_images` of ``input_shape[1:]`` (one
    training forward and backward with momentum 0, as a trained network's BatchNorms hold the statistics of
    its data). With ``dataset`` (``"cifar10"`` or ``"imagenet"``), the last layer is then fitted to that
    stand-in dataset's classes (see the module's docstring). The values are kept per
    ``(key, input_shape, seed, dataset)``: building the same network again in the process gives it the
    same weights, as a second ``pretrained=True`` download would.
    """
    import mxnet as mx
    from mxnet import autograd
    from mxnet.gluon import nn

    cache_key = (key, tuple(input_shape[1:]), seed, dataset)
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
    if dataset:
        _fit_last_layer(net, dataset, h)
    _WEIGHTS[cache_key] = [p.data().asnumpy() for p in params]
    return net


def image_like_uint8(n: int, size: int, seed: int) -> np.ndarray:
    """``n`` uint8 ``size x size x 3`` images (HWC, as image datasets hold them) of smooth random content."""
    img = smooth_images(n, size, seed)
    return np.clip(128.0 + 48.0 * img, 0, 255).astype(np.uint8).transpose(0, 2, 3, 1)


def cifar10_test_set(n: int, seed: int = _TEST_SEED) -> Any:
    """A Gluon dataset of ``n`` (image, label) pairs shaped as CIFAR-10's test set: uint8 32x32x3, labels 0-9."""
    import mxnet as mx

    pixels, labels = class_images(n, 32, seed)
    return mx.gluon.data.ArrayDataset(mx.nd.array(pixels, dtype=np.uint8), labels)


def imagenet_batches(batch_shape: Tuple[int, ...], seed: int = _TEST_SEED) -> Iterator[List[Tuple[Any, Any]]]:
    """An endless, stateful iterator of ``[(data, label)]`` as DALI's ``DALIGluonIterator`` yields them:
    ``batch_shape`` float32 images of the stand-in classes normalized as ImageNet's, and float32 labels."""
    import mxnet as mx

    i = 0
    while True:
        pixels, labels = class_images(batch_shape[0], batch_shape[2], seed + 10 * i)
        yield [(mx.nd.array(_normalized(pixels, "imagenet")), mx.nd.array(labels.astype(np.float32)[:, None]))]
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
    with pytest.raises(expected_exception):
        func(*args, **kwargs)
