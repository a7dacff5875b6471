"""Models without Python: the whole graph as one ONNX model (checked with ONNX Runtime against native MXNet at
several batches) or one TensorRT plan (built here with TensorRT-RTX's builder, which needs no GPU)."""
from __future__ import annotations

import json
import os

import mxnet as mx
import numpy as np
import onnxruntime as ort

from mx_trt.builder.backends import BACKENDS
from mx_trt.serving.engine_models import PLAN_FILE, PLAN_INFO, whole_model_export, write_onnx_model, write_plan_model
from mx_trt.serving.executors import TensorSpec, output_specs
from mx_trt.tools.cli.main import main
from tests.harness import userops
from tests.serving.conftest import assert_close, native_outputs

INPUTS = [TensorSpec("data", "float32", (3, 16, 16))]


def _outputs(prefix):
    sym, args, aux = mx.model.load_checkpoint(prefix, 0)
    return sym, {**args, **aux}, output_specs(sym, {**args, **aux}, INPUTS)


def test_onnx_model_runs_every_batch_like_mxnet(tiny_cnn, tmp_path):
    sym, params, outputs = _outputs(tiny_cnn)
    exported, why = whole_model_export(sym, params, INPUTS, outputs, 8, BACKENDS["onnxruntime"]())
    assert exported is not None, why
    folder = write_onnx_model(str(tmp_path), "tiny_onnx", exported, INPUTS, outputs, 8, 100, 2)
    config = open(os.path.join(folder, "config.pbtxt")).read()
    assert 'platform: "onnxruntime_onnx"' in config and "max_batch_size: 8" in config and "count: 2" in config
    session = ort.InferenceSession(os.path.join(folder, "1", "model.onnx"), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["data"] and [o.name for o in session.get_outputs()] == ["fc_output"]
    for batch in (1, 3, 8):
        x = np.random.RandomState(batch).uniform(-1, 1, (batch, 3, 16, 16)).astype("float32")
        assert_close(session.run(None, {"data": x})[0], native_outputs(tiny_cnn, {"data": x})[0])


def test_a_graph_with_native_operators_gets_no_engine_model(tmp_path):
    x = mx.sym.var("data")
    c = mx.sym.Convolution(x, num_filter=3, kernel=(3, 3), pad=(1, 1), name="conv")
    sym = mx.sym.FullyConnected(userops.square(c, "sq"), num_hidden=4, name="fc")
    arg_shapes, _, _ = sym.infer_shape(data=(1, 3, 16, 16))
    params = {n: mx.nd.ones(s) for n, s in zip(sym.list_arguments(), arg_shapes) if n != "data"}
    outputs = output_specs(sym, params, INPUTS)
    exported, why = whole_model_export(sym, params, INPUTS, outputs, 4, BACKENDS["onnxruntime"]())
    assert exported is None and "stay native" in why


def test_tensorrt_plan_model(tiny_cnn, tmp_path):
    rtx = BACKENDS["tensorrt_rtx"]
    reason = rtx.build_unavailable_reason()
    # As the build gate: TensorRT-RTX's builder is part of `make test` (USE_TENSORRT_RTX=1), never skipped.
    assert reason is None, f"the plan writer needs TensorRT-RTX's builder, which is missing: {reason}"
    sym, params, outputs = _outputs(tiny_cnn)
    backend = rtx()
    exported, why = whole_model_export(sym, params, INPUTS, outputs, 4, backend)
    assert exported is not None, why
    folder = write_plan_model(str(tmp_path), "tiny_trt", exported, INPUTS, outputs, 4, 0, 1, backend)
    assert os.path.getsize(os.path.join(folder, "1", PLAN_FILE)) > 1000
    info = json.load(open(os.path.join(folder, "1", PLAN_INFO)))
    assert info["backend"].startswith("tensorrt_rtx") and info["max_batch"] == 4
    config = open(os.path.join(folder, "config.pbtxt")).read()
    assert 'platform: "tensorrt_plan"' in config and "kind: KIND_GPU" in config


def test_cli_export_triton_writes_the_onnx_variant(tiny_cnn, tmp_path, capsys):
    code = main(["export", tiny_cnn, str(tmp_path / "repo"), "--shape", "data=1,3,16,16", "--triton",
                 "--max-batch", "4", "--json"])
    out = capsys.readouterr().out
    assert code == 0
    doc = json.loads(out)
    assert doc["variants"] == [str(tmp_path / "repo" / "tiny_onnx")]
    assert sorted(os.listdir(tmp_path / "repo")) == ["tiny", "tiny_onnx"] + (["tiny_trt"] if not doc[
        "variants_not_written"] else [])
    if BACKENDS["tensorrt"].build_unavailable_reason() is not None:
        assert doc["variants_not_written"] and "tensorrt_plan" in doc["variants_not_written"][0]
