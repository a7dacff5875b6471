"""CPU engines that run their batch in chunks on several one-thread streams (mx_trt.builder.backends.chunks): OpenVINO's
infer requests of a model compiled at the chunk's batch, ONNX Runtime's session at the chunk's batch called by every
stream at once."""
from __future__ import annotations

import json
import logging
import os

import mxnet as mx
import numpy as np
import pytest

import mx_trt
from mx_trt.builder import engines
from mx_trt.builder.backends import BACKENDS
from mx_trt.builder.backends import chunks
from mx_trt.builder.backends import onnxruntime as ort_backend
from mx_trt.builder.backends import openvino as ov_backend
from mx_trt.builder.backends.base import Buffer
from mx_trt.errors import EngineRunError
from mx_trt.frontends.hook import disabled
from tests.harness.mxcheck import OP_TOL, random_params

# As tests/builder/test_openvino_backend.py: OpenVINO's cases are skipped only in a build without OpenVINO; a build
# that should have it and cannot load it fails them.
NO_OPENVINO = BACKENDS["openvino"].unavailable_reason() is not None and os.environ.get("USE_OPENVINO", "1") == "0"
BACKEND_NAMES = [pytest.param("openvino", marks=pytest.mark.skipif(NO_OPENVINO, reason="built with USE_OPENVINO=0")),
                 "onnxruntime"]

RTOL, ATOL = OP_TOL["float32"]
B = 8


def conv_net():
    x = mx.sym.var("data")
    c = mx.sym.Convolution(x, num_filter=16, kernel=(3, 3), pad=(1, 1), name="conv")
    b = mx.sym.BatchNorm(c, fix_gamma=False, name="bn")
    p = mx.sym.Pooling(mx.sym.relu(b, name="relu"), kernel=(2, 2), stride=(2, 2), pool_type="max", name="pool")
    fc = mx.sym.FullyConnected(p, num_hidden=10, name="fc")
    return mx.sym.Group([mx.sym.softmax(fc, name="sm"), mx.sym.tanh(p, name="t")])


def batch_mixing_net():
    # Each sample minus the batch's mean, first: sample i of every later tensor reads every input sample.
    x = mx.sym.var("data")
    centred = mx.sym.broadcast_sub(x, mx.sym.mean(x, axis=0, keepdims=True, name="mean"), name="centre")
    return mx.sym.FullyConnected(centred, num_hidden=6, name="fc")


def late_mixing_net():
    # A CNN whose end mixes samples (each sample's scores minus the batch's mean), as a detector's suppression
    # does: the convolutions run in chunks, the end over the whole batch. Two outputs: one of the head's own,
    # one of the tail's.
    x = mx.sym.var("data")
    c = mx.sym.Convolution(x, num_filter=16, kernel=(3, 3), pad=(1, 1), name="conv")
    r = mx.sym.relu(mx.sym.BatchNorm(c, fix_gamma=False, name="bn"), name="relu")
    fc = mx.sym.FullyConnected(mx.sym.Pooling(r, kernel=(2, 2), stride=(2, 2), pool_type="max", name="pool"),
                               num_hidden=6, name="fc")
    centred = mx.sym.broadcast_sub(fc, mx.sym.mean(fc, axis=0, keepdims=True, name="mean"), name="centre")
    return mx.sym.Group([mx.sym.tanh(r, name="t"), mx.sym.softmax(centred, name="sm")])


@pytest.fixture(params=BACKEND_NAMES)
def backend(request, monkeypatch):
    """Each CPU backend in turn (``MXNET_TENSORRT_BACKEND``)."""
    monkeypatch.setenv("MXNET_TENSORRT_BACKEND", request.param)
    return request.param


def _cpus(monkeypatch, count):
    """Engines built as on a machine with ``count`` usable CPUs, whatever this one has."""
    for module in (ov_backend, ort_backend, chunks):
        monkeypatch.setattr(module, "engine_threads", lambda: count)


@pytest.fixture
def two_threads(monkeypatch, backend):
    """Engines built as on a machine with two usable CPUs; chunks of any size and shape split."""
    _cpus(monkeypatch, 2)
    monkeypatch.setattr(chunks, "SPLIT_MIN_CHUNK_MACS", 0)
    monkeypatch.setattr(chunks, "SPLIT_MIN_ROWS", 0)


def _compiled_batches(eng):
    """Dimension 0 of the inputs and outputs the engine's library compiled."""
    if isinstance(eng, ov_backend.OpenVinoEngine):
        return [tuple(t.shape)[0] for t in list(eng.compiled.inputs) + list(eng.compiled.outputs)]
    return [t.shape[0] for t in list(eng.session.get_inputs()) + list(eng.session.get_outputs())]


def _env(monkeypatch, cache_dir="", **extra):
    for k, v in {"MXNET_USE_TENSORRT": "1",
                 "MXNET_TENSORRT_CACHE_DIR": str(cache_dir), "MXNET_TENSORRT_RUNTIME_CHECK": "0", **extra}.items():
        monkeypatch.setenv(k, v)


def _data(shape, seed=1):
    return np.random.RandomState(seed).uniform(-1, 1, shape).astype("float32")


def _run(sym, shapes, x, accelerated):
    args, aux = random_params(sym, shapes, 0)
    if accelerated:
        exe = sym.simple_bind(mx.cpu(), grad_req="null", shared_buffer={**args, **aux}, **shapes)
    else:
        with disabled():
            exe = sym.simple_bind(mx.cpu(), grad_req="null", **shapes)
        exe.copy_params_from(args, aux)
    exe.arg_dict["data"][:] = x
    exe.forward(is_train=False)
    return exe, [o.asnumpy() for o in exe.outputs]


def _close(got, ref):
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, r, rtol=RTOL, atol=ATOL * max(1.0, float(np.abs(r).max())))


def test_a_separable_batch_runs_in_chunks_on_two_streams(monkeypatch, two_threads, backend):
    _env(monkeypatch)
    shapes = {"data": (B, 3, 12, 12)}
    x = _data(shapes["data"])
    _, ref = _run(conv_net(), shapes, x, False)
    exe, got = _run(conv_net(), shapes, x, True)
    eng = mx_trt.bind_info(exe).engines[0].engine
    assert type(eng).__module__.endswith(backend)
    assert eng.split == (1, 2) and _compiled_batches(eng) == [1, 1, 1]
    if backend == "openvino":
        assert eng.compiled.get_property("NUM_STREAMS") == 2
    _close(got, ref)
    # Every chunk reads the caller's arrays again: new data, new results in every sample.
    x2 = _data(shapes["data"], seed=7)
    exe.arg_dict["data"][:] = x2
    for _ in range(3):
        exe.forward(is_train=False)
    _close([o.asnumpy() for o in exe.outputs], _run(conv_net(), shapes, x2, False)[1])


@pytest.mark.parametrize("net, shape", [
    # GluonNLP's BERT layout: the batch at axis 1, folded with the heads, a mask reshaped with the batch
    # spelled out (rewritten for the chunk's batch).
    ("attention_net", (B, 6, 16)),
    # GluonCV's segmentation heads: sizes computed from the batch's Shape, which a chunk computes from its own.
    ("upsampling_net", (B, 3, 6, 5)),
])
def test_graphs_that_move_the_batch_or_read_its_size_run_in_chunks(monkeypatch, two_threads, net, shape):
    from tests.export import test_separable

    sym = getattr(test_separable, net)()
    _env(monkeypatch)
    shapes = {"data": shape}
    x = _data(shape)
    _, ref = _run(sym, shapes, x, False)
    exe, got = _run(sym, shapes, x, True)
    eng = mx_trt.bind_info(exe).engines[0].engine
    assert eng.split == (1, 2)
    assert _compiled_batches(eng) == [1, 1]
    _close(got, ref)


def test_a_graph_that_mixes_samples_runs_as_one_batch(monkeypatch, two_threads, caplog):
    _env(monkeypatch)
    shapes = {"data": (B, 5)}
    x = _data(shapes["data"])
    _, ref = _run(batch_mixing_net(), shapes, x, False)
    with caplog.at_level(logging.INFO, logger="mx_trt.builder.backends.chunks"):
        exe, got = _run(batch_mixing_net(), shapes, x, True)
    assert mx_trt.bind_info(exe).engines[0].engine.split is None
    assert "may mix samples" in caplog.text and "axis 0" in caplog.text
    _close(got, ref)


def test_a_graph_that_mixes_samples_at_its_end_runs_its_head_in_chunks(monkeypatch, two_threads, backend, tmp_path):
    from mx_trt.builder.backends.chain import ChainEngine

    _env(monkeypatch, tmp_path)
    shapes = {"data": (B, 3, 12, 12)}
    x = _data(shapes["data"])
    _, ref = _run(late_mixing_net(), shapes, x, False)
    exe, got = _run(late_mixing_net(), shapes, x, True)
    info = mx_trt.bind_info(exe)
    eng = info.engines[0].engine
    assert len(info.engines) == 1 and isinstance(eng, ChainEngine)
    assert eng.split == (1, 2) and eng.head.split == (1, 2) and getattr(eng.tail, "split", None) is None
    assert _compiled_batches(eng.head) == [1, 1, 1]  # data -> the head's output t and the FC's output
    assert [t.shape[0] for t in eng.tail.inputs + eng.tail.outputs] == [B, B]
    _close(got, ref)
    x2 = _data(shapes["data"], seed=5)
    exe.arg_dict["data"][:] = x2
    exe.forward(is_train=False)
    _close([o.asnumpy() for o in exe.outputs], _run(late_mixing_net(), shapes, x2, False)[1])
    # Stored as one entry, both parts in it; a warm bind loads them.
    (meta,) = [os.path.join(r, f) for r, _, fs in os.walk(tmp_path) for f in fs if f == "meta.json"]
    with open(meta, encoding="utf-8") as f:
        stored = json.load(f)["meta"]["engine"]
    assert stored["format"] == "chain" and stored["split"] == [1, 2] and len(stored["cut"]) == 1
    # The files its parts name must be the entry's own, as a single engine's are.
    import copy
    import types

    from mx_trt.builder.engines import stored_engine_problem

    files = {f: 0 for f in os.listdir(os.path.dirname(meta)) if f != "meta.json"}
    assert stored_engine_problem(types.SimpleNamespace(meta={"engine": stored}, files=files)) is None
    wrong = copy.deepcopy(stored)
    next(iter(wrong["parts"].values()))["file"] = "../../elsewhere"
    wrong_list = copy.deepcopy(stored)
    wrong_list["files"]["tail"].append("missing")
    for bad in (wrong, wrong_list, {**stored, "files": None}):
        assert stored_engine_problem(types.SimpleNamespace(meta={"engine": bad}, files=files)) is not None
    del exe
    engines.clear_pool()
    exe, warm = _run(late_mixing_net(), shapes, x, True)
    info = mx_trt.bind_info(exe)
    assert info.loads == 1 and isinstance(info.engines[0].engine, ChainEngine)
    _close(warm, ref)


@pytest.mark.parametrize("failure", ["cut", "tail"])
def test_a_model_that_cannot_be_chained_is_one_engine_with_a_warning(monkeypatch, two_threads, backend, caplog,
                                                                     failure):
    from mx_trt.builder.backends import chain
    from mx_trt.builder.backends.chain import ChainEngine
    from mx_trt.errors import EngineBuildError

    if failure == "cut":
        def broken(*args, **kwargs):
            raise KeyError("something the cut did not expect")

        monkeypatch.setattr(chain, "head_split", broken)
    else:
        build = BACKENDS[backend].build

        def failing_tail(self, exported, options):
            if options.name.endswith("(tail)"):
                raise EngineBuildError(f"{options.name}: refused")
            return build(self, exported, options)

        monkeypatch.setattr(BACKENDS[backend], "build", failing_tail)
    _env(monkeypatch)
    shapes = {"data": (B, 3, 12, 12)}
    x = _data(shapes["data"])
    with caplog.at_level(logging.WARNING, logger="mx_trt.builder.backends.chain"):
        exe, got = _run(late_mixing_net(), shapes, x, True)
    eng = mx_trt.bind_info(exe).engines[0].engine
    assert not isinstance(eng, ChainEngine) and eng.split is None
    assert "one engine over the batch" in caplog.text
    _close(got, _run(late_mixing_net(), shapes, x, False)[1])


@pytest.mark.parametrize("extra, batch", [({"MXNET_TENSORRT_MAX_BATCH_SIZE": "16"}, B), ({}, 1)])
def test_batch_dynamic_engines_and_batch_one_are_not_split(monkeypatch, two_threads, extra, batch):
    _env(monkeypatch, **extra)
    shapes = {"data": (batch, 3, 12, 12)}
    x = _data(shapes["data"])
    exe, got = _run(conv_net(), shapes, x, True)
    assert mx_trt.bind_info(exe).engines[0].engine.split is None
    _close(got, _run(conv_net(), shapes, x, False)[1])


def test_a_batch_of_small_samples_is_not_split(monkeypatch, backend):
    # 62 k multiply-adds a sample: handing chunks to streams would cost more than it saves.
    _cpus(monkeypatch, 2)
    from mx_trt.export.separable import model_macs
    from tests.export.test_separable import _exported

    assert model_macs(_exported(conv_net(), (1, 3, 12, 12)).model) == 16 * 27 * 144 + 10 * 16 * 36
    _env(monkeypatch)
    exe, _ = _run(conv_net(), {"data": (B, 3, 12, 12)}, _data((B, 3, 12, 12)), True)
    assert mx_trt.bind_info(exe).engines[0].engine.split is None


def test_chunks_whose_products_are_short_are_not_split(monkeypatch, backend):
    # The convolution's output, 4x4 pixels a sample, is a product of 16 rows in a chunk of 1: the chunks would
    # compute more slowly than the batch does. Chunks of 2 (32 rows) are still short, and chunks of 4 would
    # leave one per stream.
    _cpus(monkeypatch, 2)
    monkeypatch.setattr(chunks, "SPLIT_MIN_CHUNK_MACS", 0)
    _env(monkeypatch)
    shapes = {"data": (B, 3, 4, 4)}
    exe, _ = _run(conv_net(), shapes, _data(shapes["data"]), True)
    assert mx_trt.bind_info(exe).engines[0].engine.split is None
    # 16x16 pixels a sample (256 rows; the classifier's one row a sample holds 8% of the work): chunks of 1.
    shapes = {"data": (B, 3, 16, 16)}
    exe, got = _run(conv_net(), shapes, _data(shapes["data"]), True)
    assert mx_trt.bind_info(exe).engines[0].engine.split == (1, 2)
    _close(got, _run(conv_net(), shapes, _data(shapes["data"]), False)[1])


def test_one_thread_is_not_split(monkeypatch, backend):
    _cpus(monkeypatch, 1)
    _env(monkeypatch)
    exe, _ = _run(conv_net(), {"data": (B, 3, 12, 12)}, _data((B, 3, 12, 12)), True)
    assert mx_trt.bind_info(exe).engines[0].engine.split is None


def test_a_split_engine_round_trips_through_the_plan_cache(monkeypatch, two_threads, backend, tmp_path):
    _env(monkeypatch, tmp_path)
    shapes = {"data": (B, 3, 12, 12)}
    x = _data(shapes["data"])
    exe, cold = _run(conv_net(), shapes, x, True)
    (meta,) = [os.path.join(r, f) for r, _, fs in os.walk(tmp_path) for f in fs if f == "meta.json"]
    with open(meta, encoding="utf-8") as f:
        assert json.load(f)["meta"]["engine"]["split"] == [1, 2]
    del exe
    engines.clear_pool()
    exe, warm = _run(conv_net(), shapes, x, True)
    info = mx_trt.bind_info(exe)
    assert info.loads == 1 and info.engines[0].engine.split == (1, 2)
    np.testing.assert_array_equal(warm[0], cold[0])
    weights = dict(info.engines[0].engine.stored_weights())  # what a stored ONNX Runtime engine is fed
    # A process with one usable CPU has an entry of its own, one stream (the key holds the chunks' layout).
    del exe
    engines.clear_pool()
    _cpus(monkeypatch, 1)
    exe, one = _run(conv_net(), shapes, x, True)
    info = mx_trt.bind_info(exe)
    assert info.loads == 0 and info.builds == 1 and info.engines[0].engine.split is None
    _close(one, cold)
    assert len([f for _, _, fs in os.walk(tmp_path) for f in fs if f == "meta.json"]) == 2
    # An engine loaded from the entry of two CPUs (an exported model's folder is read by its key) runs its
    # chunks one after another on one stream.
    from mx_trt.builder.backends import BuildOptions

    with open(meta, encoding="utf-8") as f:
        stored = json.load(f)["meta"]["engine"]
    eng = BACKENDS[backend]().load(stored, os.path.dirname(meta),
                                   BuildOptions(device_id=-1, name="conv", extra={"weights": lambda: weights}))
    assert eng.split == (1, 1)
    x_nd = np.ascontiguousarray(x)
    out = [np.zeros(t.shape, t.dtype) for t in eng.outputs]
    eng.run([Buffer(x_nd.ctypes.data, x_nd.shape, "float32")],
            [Buffer(a.ctypes.data, a.shape, str(a.dtype)) for a in out])
    _close(out, cold)


def test_a_failing_chunk_is_an_engine_run_error(monkeypatch, two_threads, backend):
    _env(monkeypatch)
    shapes = {"data": (B, 3, 12, 12)}
    exe, _ = _run(conv_net(), shapes, _data(shapes["data"]), True)
    eng = mx_trt.bind_info(exe).engines[0].engine

    class Broken:
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def infer(self):  # an OpenVINO infer request
            raise RuntimeError("chunk refused")

        def run_with_iobinding(self, binding):  # an ONNX Runtime session
            raise RuntimeError("chunk refused")

    # Whichever stream takes a chunk fails (which one takes the chunks first is the threads' race).
    if backend == "openvino":
        eng._split.requests = [Broken(r) for r in eng._split.requests]
    else:
        eng.session = Broken(eng.session)
    with pytest.raises(EngineRunError, match="chunk refused"):
        mx_trt.bind_info(exe).engines[0].engine.run(*_buffers(exe))


def _buffers(exe):
    from mx_trt.builder.backends.base import Buffer

    eng = mx_trt.bind_info(exe).engines[0].engine
    ins = [np.zeros(t.shape, t.dtype) for t in eng.inputs]
    outs = [np.zeros(t.shape, t.dtype) for t in eng.outputs]
    _buffers.keep = (ins, outs)
    return ([Buffer(a.ctypes.data, tuple(a.shape), str(a.dtype)) for a in ins],
            [Buffer(a.ctypes.data, tuple(a.shape), str(a.dtype)) for a in outs])


@pytest.mark.parametrize("net, bad, match", [
    # A split: [3] has chunks that do not divide the batch of 8.
    (conv_net, [{"split": v} for v in (["x"], [0], [None], 3, [3])], "split"),
    (late_mixing_net, [{"parts": None}, {"files": {"head": ["../x"], "tail": []}}, {"cut": 3}], "chained engine"),
])
def test_malformed_stored_metadata_is_a_build_error(monkeypatch, two_threads, backend, tmp_path, net, bad, match):
    from mx_trt.builder.backends.base import BuildOptions
    from mx_trt.errors import EngineBuildError

    _env(monkeypatch, tmp_path)
    _run(net(), {"data": (B, 3, 12, 12)}, _data((B, 3, 12, 12)), True)
    (meta,) = [os.path.join(r, f) for r, _, fs in os.walk(tmp_path) for f in fs if f == "meta.json"]
    with open(meta, encoding="utf-8") as f:
        stored = json.load(f)["meta"]["engine"]
    for change in bad:
        with pytest.raises(EngineBuildError, match=match):
            BACKENDS[backend]().load({**stored, **change}, os.path.dirname(meta), BuildOptions(name="stored"))
