"""The Triton model repository: config.pbtxt, the model folder, its spec file, and damaged folders."""
from __future__ import annotations

import json
import os

import mxnet as mx
import pytest

from mx_trt.errors import ServeError
from mx_trt.serving.executors import TensorSpec
from mx_trt.serving.repository import check_model_name, config_text, write_python_model
from mx_trt.serving.spec import SPEC_FILE, load_checkpoint_files, read_spec
from tests.serving.conftest import two_in_two_out


def test_config_text_holds_names_dims_batching_and_instances():
    text = config_text("bert-tiny", "python", [TensorSpec("tokens", "int32", (128,)), TensorSpec("mask", "float32", (128,))],
                       [TensorSpec("score", "float32", ()), TensorSpec("feats", "float16", (128, 6))], 16, 500, 3)
    assert 'name: "bert-tiny"' in text and 'backend: "python"' in text and "max_batch_size: 16" in text
    assert '{ name: "tokens" data_type: TYPE_INT32 dims: [ 128 ] }' in text
    assert '{ name: "score" data_type: TYPE_FP32 dims: [ 1 ] reshape: { shape: [ ] } }' in text
    assert '{ name: "feats" data_type: TYPE_FP16 dims: [ 128, 6 ] }' in text
    assert "dynamic_batching { max_queue_delay_microseconds: 500 }" in text
    assert "{ count: 3 kind: KIND_CPU }" in text
    gpu = config_text("m", "", [TensorSpec("x", "float32", (2,))], [TensorSpec("y", "float32", (2,))], 4, 0, 1,
                      "KIND_GPU", platform="tensorrt_plan", gpus=[0])
    assert 'platform: "tensorrt_plan"' in gpu and "backend:" not in gpu and "gpus: [ 0 ]" in gpu


@pytest.mark.parametrize("name", ["", "a/b", "..", "with space", "ü"])
def test_bad_model_names(name):
    with pytest.raises(ServeError, match="model name"):
        check_model_name(name)


def test_bad_counts_and_dtypes():
    t = [TensorSpec("x", "float32", (2,))]
    with pytest.raises(ServeError, match="instances"):
        config_text("m", "python", t, t, 4, 0, 0)
    with pytest.raises(ServeError, match="complex64"):
        config_text("m", "python", [TensorSpec("x", "complex64", (2,))], t, 4, 0, 1)


def test_python_model_folder_round_trips(tmp_path):
    prefix = str(tmp_path / "tagger")
    two_in_two_out(prefix)
    sym, args, aux = mx.model.load_checkpoint(prefix, 0)
    inputs = [TensorSpec("tokens", "int32", (7,)), TensorSpec("mask", "float32", (7,)),
              TensorSpec("length", "float32", ())]
    spec = write_python_model(str(tmp_path / "repo"), "tagger", sym, args, aux, inputs, 4, 100, 2)
    folder = tmp_path / "repo" / "tagger" / "1"
    assert sorted(os.listdir(folder)) == ["model-0000.params", "model-symbol.json", "model.py", SPEC_FILE]
    assert "from mx_trt.serving.backend import TritonPythonModel" in (folder / "model.py").read_text()
    again = read_spec(str(folder))
    assert again.inputs == inputs and again.outputs == spec.outputs and again.max_batch == 4
    sym2, args2, aux2 = load_checkpoint_files(str(folder))
    assert sym2.tojson() == sym.tojson() and sorted(args2) == sorted(args)
    config = (tmp_path / "repo" / "tagger" / "config.pbtxt").read_text()
    assert "count: 2" in config and "TYPE_INT32" in config
    # One value per sample: declared as dims [1], handed to the model as [batch].
    assert 'name: "length" data_type: TYPE_FP32 dims: [ 1 ] reshape: { shape: [ ] }' in config


def test_damaged_spec_files(tmp_path):
    with pytest.raises(ServeError, match="no mx_trt_serve.json"):
        read_spec(str(tmp_path))
    path = tmp_path / SPEC_FILE
    for doc, words in (("{", "damaged"), (json.dumps({"format": 9}), "format 9"),
                       (json.dumps({"format": 1, "max_batch": 0, "inputs": [], "outputs": []}), "max_batch"),
                       (json.dumps({"format": 1, "max_batch": 2, "inputs": [{"name": "x"}], "outputs": []}),
                        "damaged")):
        path.write_text(doc)
        with pytest.raises(ServeError, match=words):
            read_spec(str(tmp_path))
