"""A small CNN trained in MXNet on scikit-learn's digits (offline), for precision studies.

``load_digits`` ships inside scikit-learn: 1,797 8x8 grey images of the digits
0-9. :func:`trained_digits_cnn` splits them (seeded) into train, calibration and
test sets, trains a small CNN (three conv + BatchNorm + ReLU blocks, pooling, two
dense layers) with Gluon for a few epochs, and returns its symbol and weights as
a user would load them from a checkpoint. Training takes a few seconds on two
cores and reaches about 98% top-1 on the test split.

The images are upsampled to 16x16 so that the convolutions see more than a few
pixels; values are scaled to [0, 1].
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Dict, Tuple

import numpy as np

#: Input side after upsampling.
SIDE = 16


@dataclass(frozen=True)
class DigitsModel:
    """A trained classifier and its data splits (float32 NCHW images, int labels)."""

    symbol: Any
    arg_params: Dict[str, Any]
    aux_params: Dict[str, Any]
    calib_x: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray

    def top1(self, logits: np.ndarray) -> float:
        """Top-1 accuracy (fraction) of ``logits`` for the test split."""
        return float(np.mean(np.argmax(logits, axis=1) == self.test_y))


def _splits(seed: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.images.astype(np.float32) / 16.0).repeat(SIDE // 8, axis=1).repeat(SIDE // 8, axis=2)[:, None]
    y = d.target.astype(np.int64)
    order = np.random.RandomState(seed).permutation(len(y))
    x, y = x[order], y[order]
    n_train, n_calib = 1100, 300
    return (x[:n_train], y[:n_train], x[n_train:n_train + n_calib], x[n_train + n_calib:],
            y[n_train + n_calib:])


@functools.lru_cache(maxsize=2)
def trained_digits_cnn(seed: int = 0, epochs: int = 8) -> DigitsModel:
    """Train (once per process and seed) and return the digits CNN with its splits."""
    import mxnet as mx
    from mxnet import autograd, gluon

    train_x, train_y, calib_x, test_x, test_y = _splits(seed)
    mx.random.seed(seed)
    np.random.seed(seed)
    net = gluon.nn.HybridSequential(prefix="digits_")
    with net.name_scope():
        net.add(gluon.nn.Conv2D(16, 3, padding=1, use_bias=False), gluon.nn.BatchNorm(), gluon.nn.Activation("relu"),
                gluon.nn.Conv2D(16, 3, padding=1, use_bias=False), gluon.nn.BatchNorm(), gluon.nn.Activation("relu"),
                gluon.nn.MaxPool2D(2),
                gluon.nn.Conv2D(32, 3, padding=1, use_bias=False), gluon.nn.BatchNorm(), gluon.nn.Activation("relu"),
                gluon.nn.MaxPool2D(2), gluon.nn.Flatten(), gluon.nn.Dense(64, activation="relu"), gluon.nn.Dense(10))
    net.initialize(mx.init.Xavier(magnitude=2.0), ctx=mx.cpu())
    net.hybridize()
    trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 3e-3})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    batch = 64
    rng = np.random.RandomState(seed)
    for _ in range(epochs):
        order = rng.permutation(len(train_y))
        for i in range(0, len(order), batch):
            idx = order[i:i + batch]
            xb, yb = mx.nd.array(train_x[idx]), mx.nd.array(train_y[idx])
            with autograd.record():
                loss = loss_fn(net(xb), yb)
            loss.backward()
            trainer.step(len(idx))
    mx.nd.waitall()
    data = mx.sym.var("data")
    sym = net(data)
    params = {p.name: p.data() for p in net.collect_params().values()}
    aux_names = set(sym.list_auxiliary_states())
    args = {k: v.copy() for k, v in params.items() if k not in aux_names}
    aux = {k: v.copy() for k, v in params.items() if k in aux_names}
    return DigitsModel(sym, args, aux, calib_x, test_x, test_y)
