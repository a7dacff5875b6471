"""pipeline.weights: digests over the caller's memory and views without copies."""
from __future__ import annotations

import mxnet as mx
import numpy as np

from mx_trt.cache import fs as cache_fs
from mx_trt.pipeline import weights
from mx_trt.runtime.fused_op import data_ptr


def test_digest_tells_values_dtypes_and_shapes_apart():
    a = mx.nd.array(np.arange(12, dtype="float32").reshape(3, 4))
    assert weights.digest(a) == weights.digest(a.asnumpy()) == weights.digest(mx.nd.array(a.asnumpy()))
    assert weights.digest(a).startswith("xxh3_128:")
    b = a.copy()
    b[0, 0] = 1.0
    assert weights.digest(b) != weights.digest(a)
    assert weights.digest(a.reshape((4, 3))) != weights.digest(a)
    assert weights.digest(a.astype("float16")) != weights.digest(a)
    assert weights.digest(np.zeros((0, 4), "float32")) != weights.digest(np.zeros((4, 0), "float32"))


def test_digest_falls_back_to_sha256_without_xxhash(monkeypatch):
    a = mx.nd.array(np.arange(6, dtype="float32"))
    fast = weights.digest(a)
    monkeypatch.setattr(cache_fs, "_xxhash", None)
    slow = weights.digest(a)
    assert slow.startswith("sha256:") and slow != fast  # never equal across algorithms
    assert weights.digest(a.asnumpy()) == slow


def test_view_is_the_ndarrays_memory_and_read_only():
    a = mx.nd.array(np.arange(6, dtype="float32"))
    v = weights.view(a)
    assert v.ctypes.data == data_ptr(a) and not v.flags.writeable
    np.testing.assert_array_equal(v, a.asnumpy())


def test_lazy_weights_make_views_on_first_use_only():
    params = {"w": mx.nd.ones((2, 2)), "other": mx.nd.ones((1,))}
    lazy = weights.LazyWeights(params, {"w"})
    assert list(lazy) == ["w"] and len(lazy) == 1
    assert lazy["w"].ctypes.data == data_ptr(params["w"])
    try:
        lazy["other"]
    except KeyError:
        pass
    else:
        raise AssertionError("a name outside the set must be a KeyError")
