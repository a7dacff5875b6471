"""mx_trt.calibrate: the tensors it records, the data forms it takes, its table and its errors.

minmax ranges are compared exactly with the values native MXNet computes for
the same tensors.
"""
from __future__ import annotations

import io
import json

import mxnet as mx
import numpy as np
import pytest

import mx_trt
from mx_trt.errors import CalibrationError, ShapeError
from mx_trt.export.calibration import graph_digest, load_table
from mx_trt.quantize.calibrate import _Progress
from tests.harness.int8check import cnn_symbol
from tests.harness.mxcheck import random_params, run_native

SHAPE = (4, 3, 8, 8)


@pytest.fixture(scope="module")
def cnn():
    sym = cnn_symbol()
    args, aux = random_params(sym, {"data": SHAPE}, seed=0)
    rng = np.random.RandomState(5)
    batches = [rng.uniform(-1, 1, SHAPE).astype(np.float32) for _ in range(3)]
    return sym, args, aux, batches


#: The tensors the int8 export quantizes in cnn_symbol (inputs of convolutions, the add,
#: pooling and the classifier), by the name of the node producing them.
RECORDED = ["b1_relu", "b1a_relu", "b1b_bn", "b2_relu", "data", "flat", "pool", "stem_relu"]


def test_minmax_ranges_are_native_mxnets_extremes(cnn, monkeypatch):
    """Exact, against MXNet's unfused operators (oneDNN's conv+bn+relu fusion rounds differently)."""
    sym, args, aux, batches = cnn
    monkeypatch.setenv("MXNET_SUBGRAPH_BACKEND", "NONE")
    table = mx_trt.calibrate(sym, (args, aux), batches, method="minmax", progress=False)
    names = {k: v for k, v in table.names.items()}
    assert sorted(n[: -len("_output")] if n.endswith("_output") else n for n in names.values()) == RECORDED
    internals = sym.get_internals()
    for key, name in names.items():
        if name == "data":
            values = np.stack(batches)
        else:
            values = np.stack([run_native(internals[name], {"data": SHAPE}, args, aux, {"data": b})[0] for b in batches])
        r = table.tensors[key]
        assert (r.min, r.max) == (float(values.min()), float(values.max())), name
        assert r.amax == max(-r.min, r.max)
    assert table.num_batches == 3 and table.num_samples == 12 and table.method == "minmax"


def test_data_forms_give_the_same_table(cnn):
    sym, args, aux, batches = cnn
    want = mx_trt.calibrate(sym, {**args, **aux}, batches, method="minmax", progress=False).tensors
    forms = {
        "dicts": [{"data": b} for b in batches],
        "ndarrays": [mx.nd.array(b) for b in batches],
        "generator": (b for b in batches),
        # a DataIter pads the last batch: the padding is not calibration data
        "dataiter": mx.io.NDArrayIter(np.concatenate(batches + [batches[0][:1]]), batch_size=4, last_batch_handle="pad"),
    }
    for form, data in forms.items():
        got = mx_trt.calibrate(sym, (args, aux), data, method="minmax", progress=False)
        if form == "dataiter":
            assert got.num_samples == 13 and got.num_batches == 4
        else:
            assert got.tensors == want, form


def test_num_batches_stops_early(cnn):
    sym, args, aux, batches = cnn
    t1 = mx_trt.calibrate(sym, (args, aux), batches, num_batches=1, method="minmax", progress=False)
    t0 = mx_trt.calibrate(sym, (args, aux), batches[:1], method="minmax", progress=False)
    assert t1.num_batches == 1 and t1.tensors == t0.tensors


def test_smaller_last_batch_is_rebound(cnn):
    sym, args, aux, batches = cnn
    table = mx_trt.calibrate(sym, (args, aux), [batches[0], batches[1][:1]], method="minmax", progress=False)
    assert table.num_samples == 5


def test_table_is_saved_and_keyed_by_the_graph(cnn, tmp_path):
    sym, args, aux, batches = cnn
    path = tmp_path / "cal.json"
    table = mx_trt.calibrate(sym, (args, aux), batches, method="percentile", percentile=99.0, out=path, progress=False)
    doc = json.loads(path.read_text())
    assert doc["method"] == "percentile" and doc["percentile"] == 99.0
    back = load_table(path)
    assert back.tensors == table.tensors
    from mx_trt.graph.importer import symbol_to_graph
    from mx_trt.passes.simplify import remove_identities
    from mx_trt.graph.importer import inference_identity

    g = remove_identities(symbol_to_graph(sym, {"data": (1, 3, 8, 8)}, {}), inference_identity).graph
    assert back.graph_digest == graph_digest(g)


def test_entropy_and_percentile_clip_within_minmax(cnn):
    sym, args, aux, batches = cnn
    mm = mx_trt.calibrate(sym, (args, aux), batches, method="minmax", progress=False)
    for method in ("entropy", "percentile"):
        t = mx_trt.calibrate(sym, (args, aux), batches, method=method, progress=False)
        for k, r in t.tensors.items():
            assert 0 < r.amax <= mm.tensors[k].amax * (1 + 1e-6), (method, t.names[k])


@pytest.mark.parametrize("kwargs,match", [
    ({"method": "kl"}, "not one of"),
    ({"percentile": 0}, "percentile"),
    ({"num_batches": 0}, "num_batches"),
    ({"data": []}, "no batch"),
    ({"data": {"data": np.zeros(SHAPE, np.float32)}}, "not one batch"),
    ({"data": [np.zeros(SHAPE, np.float32), np.zeros((4, 5, 8, 8), np.float32)]}, "does not fit"),
    ({"data": ["text"]}, "neither a dict nor an array"),
    ({"data": [{"data": np.zeros(SHAPE, np.float32)}, {"x": np.zeros(SHAPE, np.float32)}]}, "batch 2 has inputs"),
    ({"params": [1, 2]}, "params must be"),
], ids=["method", "percentile", "num_batches", "empty", "one-dict", "bad-shape", "bad-batch", "other-inputs", "params"])
def test_bad_calls_raise_calibration_errors(cnn, kwargs, match):
    sym, args, aux, batches = cnn
    call = {"params": (args, aux), "data": batches, "progress": False}
    call.update(kwargs)
    with pytest.raises(CalibrationError, match=match):
        mx_trt.calibrate(sym, call.pop("params"), call.pop("data"), **call)


def test_a_first_batch_that_does_not_fit_is_a_shape_error(cnn):
    sym, args, aux, _ = cnn
    with pytest.raises(ShapeError, match="cannot infer shapes"):
        mx_trt.calibrate(sym, (args, aux), [np.zeros((4, 5, 8, 8), np.float32)], progress=False)


def test_precision_in_the_environment_does_not_stop_calibration(cnn, monkeypatch):
    """MXNET_TENSORRT_PRECISION=int8 without a table is the state before calibrating."""
    sym, args, aux, batches = cnn
    monkeypatch.setenv("MXNET_TENSORRT_PRECISION", "int8")
    monkeypatch.delenv("MXNET_TENSORRT_CALIBRATION", raising=False)
    assert mx_trt.calibrate(sym, (args, aux), batches[:1], method="minmax", progress=False, precision="int8").tensors


def test_progress_bar_on_a_terminal():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    out = Tty()
    bar = _Progress(4, True, out)
    bar.step(1)
    bar.step(4)
    bar.done()
    text = out.getvalue()
    assert "calibrating [#####...............] 1/4 batches" in text and "[####################] 4/4" in text
    quiet = Tty()
    _Progress(4, False, quiet).step(1)
    assert quiet.getvalue() == ""
