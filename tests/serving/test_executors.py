"""One served instance in process (no server): batches of every size within the engines' profile, no rebuild,
outputs against native MXNet, and the reasons a request is refused."""
from __future__ import annotations

import mxnet as mx
import numpy as np
import pytest

from mx_trt.errors import ServeError, ShapeError
from mx_trt.serving.executors import RequestFailure, ServedModel, TensorSpec, output_specs
from tests.serving.conftest import assert_close, native_outputs, two_in_two_out

SPEC = [TensorSpec("data", "float32", (3, 16, 16))]


@pytest.fixture(scope="module")
def served(tiny_cnn):
    sym, args, aux = mx.model.load_checkpoint(tiny_cnn, 0)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MXNET_TENSORRT_ENGINE_RULE", "always")
        mp.setenv("MXNET_TENSORRT_MIN_SUBGRAPH_SIZE", "2")
        mp.setenv("MXNET_TENSORRT_CACHE_DIR", "")
        return ServedModel(sym, args, aux, SPEC, 6, mx.cpu())


def test_every_batch_size_reuses_the_bound_engine(served, tiny_cnn):
    assert served.info is not None and len(served.info.engines) == 1
    fused = served.info.engines[0]
    assert fused.engine.batch_ranges == [(1, 6, 6)]
    for b in (1, 2, 5, 6, 3):
        x = np.random.RandomState(b).uniform(-1, 1, (b, 3, 16, 16)).astype("float32")
        assert_close(served.run({"data": x})[0], native_outputs(tiny_cnn, {"data": x})[0])
    assert fused.rebuilds == 0 and fused.build_count == 1


def test_requests_are_joined_split_and_checked_one_by_one(served, tiny_cnn):
    rng = np.random.RandomState(0)
    reqs = [{"data": rng.uniform(-1, 1, (n, 3, 16, 16)).astype("float32")} for n in (2, 3, 1, 4)]
    reqs.insert(2, {"data": np.full((1, 3, 16, 16), np.inf, "float32")})
    before = served.batches_run
    results = served.run_requests(reqs)
    assert isinstance(results[2], str) and "NaN or Inf" in results[2]
    for i in (0, 1, 3, 4):
        assert_close(results[i][0], native_outputs(tiny_cnn, reqs[i])[0])
    assert served.batches_run - before == 2  # 2+3+1 = 6 samples, then 4


def test_a_forward_that_raises_fails_only_the_request_that_made_it(served, tiny_cnn, monkeypatch):
    real = served.run

    def run(arrays):  # a forward that raises on one marked sample, as a plugin's exception would
        if (arrays["data"] == 13.0).any():
            raise RuntimeError("plugin p: marker")
        return real(arrays)

    monkeypatch.setattr(served, "run", run)
    rng = np.random.RandomState(1)
    reqs = [{"data": rng.uniform(-1, 1, (n, 3, 16, 16)).astype("float32")} for n in (1, 2, 2)]
    reqs[1]["data"][1, 0, 0, 0] = 13.0
    results = served.run_requests(reqs)
    assert isinstance(results[1], RequestFailure) and "RuntimeError: plugin p: marker" in results[1].message
    for i in (0, 2):
        assert_close(results[i][0], native_outputs(tiny_cnn, reqs[i])[0])
    assert isinstance(served.run_requests([reqs[1]])[0], RequestFailure)
    assert_close(served.run_requests([reqs[0]])[0][0], native_outputs(tiny_cnn, reqs[0])[0])


@pytest.mark.parametrize("arrays,words", [
    ({}, "missing"),
    ({"data": np.zeros((1, 3, 16, 16), "float32"), "x": np.zeros(1, "float32")}, "unknown input 'x'"),
    ({"data": np.zeros((1, 3, 16, 16), "float16")}, "dtype float16"),
    ({"data": np.zeros((1, 3, 16, 15), "float32")}, "shape (1, 3, 16, 15)"),
    ({"data": np.zeros((3, 16, 16), "float32")}, "shape (3, 16, 16)"),
    ({"data": np.zeros((7, 3, 16, 16), "float32")}, "outside 1..6"),
    ({"data": np.zeros((0, 3, 16, 16), "float32")}, "outside 1..6"),
    ({"data": np.full((1, 3, 16, 16), np.nan, "float32")}, "768 NaN or Inf"),
])
def test_refusal_reasons(served, arrays, words):
    reason = served.check(arrays)
    assert reason is not None and words in reason, reason
    with pytest.raises(ShapeError, match="."):
        served.run(arrays)


def test_nonfinite_allowed_when_asked(tiny_cnn):
    sym, args, aux = mx.model.load_checkpoint(tiny_cnn, 0)
    model = ServedModel(sym, args, aux, SPEC, 2, mx.cpu(), accelerate=False, allow_nonfinite=True)
    assert model.info is None
    x = np.zeros((1, 3, 16, 16), "float32")
    x[0, 0, 0, 0] = np.nan
    assert model.check({"data": x}) is None


def test_multi_input_outputs_and_int_dtypes(tmp_path):
    prefix = str(tmp_path / "tagger")
    two_in_two_out(prefix)
    sym, args, aux = mx.model.load_checkpoint(prefix, 0)
    specs = [TensorSpec("tokens", "int32", (7,)), TensorSpec("mask", "float32", (7,)),
             TensorSpec("length", "float32", ())]
    outs = output_specs(sym, {**args, **aux}, specs)
    assert [(o.dtype, o.dims) for o in outs] == [("float32", (7, 6)), ("float32", (3,))]
    model = ServedModel(sym, args, aux, specs, 4, mx.cpu())
    rng = np.random.RandomState(3)
    feeds = {"tokens": rng.randint(0, 50, (3, 7)).astype("int32"), "mask": np.ones((3, 7), "float32"),
             "length": np.array([7, 3, 5], "float32")}
    for got, want in zip(model.run(feeds), native_outputs(prefix, feeds)):
        assert_close(got, want)


def test_an_output_without_batch_dimension_is_refused():
    data = mx.sym.var("data")
    sym = mx.sym.sum(data, name="total")  # a scalar: nothing to split between requests
    with pytest.raises(ServeError, match="no batch dimension"):
        output_specs(sym, {}, [TensorSpec("data", "float32", (4,))])
