"""Model-zoo networks with random weights that behave numerically like trained ones, and image-like inputs.

With random weights and the zoo's own BatchNorm statistics, a deep network's
logits hardly depend on its input: on noise images the logits of MobileNetV2 vary
across samples by about 1e-7 of their size, so the cosine similarity of two runs'
logits and their top-1 agreement are near 1 whatever the precision, and a check
built on them cannot fail. :func:`normalized_zoo_model` sets every BatchNorm's
moving mean and variance to the statistics of its own input on a batch of
:func:`smooth_images` (one training forward and backward with momentum 0: each
BatchNorm normalizes with exactly those statistics, and MXNet writes them to the
moving statistics in the backward), as a trained network's
BatchNorms hold the statistics of its data. Each layer's activations then have
unit scale on such images and the logits depend on the input.

Use :func:`centered_cosine` (the cosine of the logits after removing their mean
over the batch, the input-independent part) to compare precisions.
"""
from __future__ import annotations

from typing import Any, Dict, Tuple

import numpy as np


def smooth_images(n: int, size: int, seed: int, cells: int = 8) -> np.ndarray:
    """``n`` float32 ``3 x size x size`` images of ``cells x cells`` random blocks (values about N(0, 1)) plus
    a little pixel noise: low-frequency content that survives the networks' pooling, as in photographs."""
    rng = np.random.RandomState(seed)
    rep = -(-size // cells)
    coarse = rng.normal(0.0, 1.0, (n, 3, cells, cells)).astype(np.float32)
    img = coarse.repeat(rep, axis=2).repeat(rep, axis=3)[:, :, :size, :size]
    return (img + rng.normal(0.0, 0.1, img.shape)).astype(np.float32)


def normalized_zoo_model(name: str, size: int, seed: int = 0,
                         stats_images: int = 16) -> Tuple[Any, Dict[str, Any], Dict[str, Any]]:
    """``(symbol, arg_params, aux_params)`` of ``mxnet.gluon.model_zoo.vision.get_model(name)`` with seeded
    Xavier weights and BatchNorm statistics measured on ``stats_images`` :func:`smooth_images` of side ``size``
    (seed ``seed + 1000``, apart from any data a caller evaluates on).

    Cost: one training forward and backward of the network over ``stats_images`` images.
    """
    import mxnet as mx
    from mxnet import autograd
    from mxnet.gluon import nn
    from mxnet.gluon.model_zoo import vision

    mx.random.seed(seed)
    net = vision.get_model(name, pretrained=False)
    net.initialize(mx.init.Xavier(magnitude=2.0), ctx=mx.cpu())
    bns = []

    def collect(block: Any) -> None:
        if isinstance(block, nn.BatchNorm):
            bns.append(block)

    net.apply(collect)
    for bn in bns:  # running = momentum * running + (1 - momentum) * batch statistics
        bn._kwargs["momentum"] = 0.0
    x = mx.nd.array(smooth_images(stats_images, size, seed + 1000))
    # MXNet updates the moving statistics in BatchNorm's backward, not in its forward.
    with autograd.record():
        y = net(x)
    y.backward()
    mx.nd.waitall()
    sym = net(mx.sym.var("data"))
    aux_names = set(sym.list_auxiliary_states())
    args: Dict[str, Any] = {}
    aux: Dict[str, Any] = {}
    for pname, p in net.collect_params().items():
        (aux if pname in aux_names else args)[pname] = p.data().copy()
    return sym, args, aux


def centered_cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity of two ``(batch, classes)`` logit arrays after removing each one's mean over the batch."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    a, b = (a - a.mean(axis=0)).ravel(), (b - b.mean(axis=0)).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Plain cosine similarity of two arrays (flattened)."""
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
