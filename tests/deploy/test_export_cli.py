"""``mxtrt export PREFIX --onnx OUT.onnx`` and ``mxtrt export --triton``'s model without Python, run where MXNet
cannot be imported (fp32: ``rtol=1e-4, atol=1e-5`` against native MXNet)."""
from __future__ import annotations

import json
import os

import mxnet as mx
import numpy as np
import onnx

import mx_trt
from mx_trt.tools.cli.main import main
from tests.harness import userops
from tests.deploy.helpers import assert_close, native, run_without_mxnet


def _checkpoint(prefix: str, with_custom: bool = False) -> None:
    """conv-BN-relu, FullyConnected, SoftmaxOutput (a label input no operator reads at inference)."""
    h = mx.sym.Activation(mx.sym.BatchNorm(mx.sym.Convolution(mx.sym.var("data"), num_filter=4, kernel=(3, 3),
                                                              pad=(1, 1), name="conv"), name="bn"),
                          act_type="relu", name="relu")
    if with_custom:
        h = userops.square(h, "sq")
    sym = mx.sym.SoftmaxOutput(mx.sym.FullyConnected(h, num_hidden=5, name="fc"), name="softmax")
    arg_shapes, _, aux_shapes = sym.infer_shape(data=(1, 3, 8, 8))
    rng = np.random.RandomState(0)
    args = {n: mx.nd.array(rng.uniform(-0.5, 0.5, s)) for n, s in zip(sym.list_arguments(), arg_shapes)
            if n not in ("data", "softmax_label")}
    aux = {n: mx.nd.array(rng.uniform(0.5, 1.5, s)) for n, s in zip(sym.list_auxiliary_states(), aux_shapes)}
    mx.model.save_checkpoint(prefix, 0, sym, args, aux)


def _native(prefix: str, x: np.ndarray) -> np.ndarray:
    sym, args, aux = mx.model.load_checkpoint(prefix, 0)
    label = np.zeros((x.shape[0],), "float32")
    return native(sym, {**args, **aux}, {"data": x, "softmax_label": label})["softmax_output"]


def test_cli_onnx_file_runs_without_mxnet(tmp_path, capsys):
    prefix = str(tmp_path / "net")
    _checkpoint(prefix)
    out = str(tmp_path / "net.onnx")
    code = main(["export", prefix, "--onnx", out, "--shape", "data=2,3,8,8", "--opset", "19", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    assert doc["path"] == out and doc["opset"] == 19 and doc["batch_dynamic"] and doc["precision"] == "fp32"
    # The training label is read by no operator at inference: the file does not ask for it.
    assert [i["name"] for i in doc["inputs"]] == ["data"] and [o["name"] for o in doc["outputs"]] == ["softmax_output"]
    assert [o.version for o in onnx.load(out).opset_import if o.domain in ("", "ai.onnx")] == [19]
    for batch in (1, 3):
        x = np.random.RandomState(batch).uniform(-1, 1, (batch, 3, 8, 8)).astype("float32")
        got = run_without_mxnet(out, {"data": x}, str(tmp_path))
        assert_close(got["softmax_output"], _native(prefix, x))


def test_cli_int8_and_external_data(tmp_path, capsys):
    prefix = str(tmp_path / "net")
    _checkpoint(prefix)
    sym, args, aux = mx.model.load_checkpoint(prefix, 0)
    rng = np.random.RandomState(5)
    table = str(tmp_path / "calib.json")
    mx_trt.calibrate(sym, (args, aux), [{"data": rng.uniform(-1, 1, (2, 3, 8, 8)).astype("float32")} for _ in range(4)],
                     method="minmax", out=table, progress=False)
    out = str(tmp_path / "q" / "net-int8.onnx")
    code = main(["export", prefix, "--onnx", out, "--shape", "data=2,3,8,8", "--precision", "int8",
                 "--calibration", table, "--external-threshold", "0"])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "int8, batch-dynamic" in text and "int8: 2 operator(s) quantized" in text and "net-int8.onnx.data" in text
    assert sorted(os.listdir(tmp_path / "q")) == ["net-int8.onnx", "net-int8.onnx.data"]
    x = rng.uniform(-1, 1, (3, 3, 8, 8)).astype("float32")
    got = run_without_mxnet(out, {"data": x}, str(tmp_path))["softmax_output"]
    want = _native(prefix, x)
    assert got.shape == want.shape and np.abs(got - want).max() < 0.05  # probabilities, int8 activations


def test_cli_refusal_lists_each_operator(tmp_path, capsys):
    prefix = str(tmp_path / "net")
    _checkpoint(prefix, with_custom=True)
    code = main(["export", prefix, "--onnx", str(tmp_path / "net.onnx"), "--shape", "data=1,3,8,8"])
    err = capsys.readouterr().err
    assert code == 1
    assert "1 of 6 operators do not convert" in err
    assert "  sq (Custom): no converter for custom operator user_square" in err
    assert not os.path.exists(tmp_path / "net.onnx")


def test_cli_usage(tmp_path, capsys):
    prefix = str(tmp_path / "net")
    _checkpoint(prefix)
    assert main(["export", prefix, "--shape", "data=1,3,8,8"]) == 2
    assert "OUTDIR (or --onnx OUT.onnx)" in capsys.readouterr().err
    assert main(["export", prefix, str(tmp_path / "dir"), "--onnx", str(tmp_path / "m.onnx"),
                 "--shape", "data=1,3,8,8"]) == 2
    assert "give no OUTDIR" in capsys.readouterr().err
    assert main(["export", prefix, "--onnx", str(tmp_path / "m.onnx"), "--opset", "16"]) == 2
    assert "from 17 to 21" in capsys.readouterr().err
    assert main(["export", prefix, "--onnx", str(tmp_path / "m.onnx"), "--fp16", "--precision", "int8",
                 "--shape", "data=1,3,8,8"]) == 2
    assert "two precisions" in capsys.readouterr().err


def test_triton_onnx_model_needs_no_python_and_runs_without_mxnet(tmp_path, capsys):
    prefix = str(tmp_path / "net")
    _checkpoint(prefix)
    repo = tmp_path / "repo"
    code = main(["export", prefix, str(repo), "--shape", "data=1,3,8,8", "--triton", "--max-batch", "4", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    folder = repo / "net_onnx"
    assert str(folder) in doc["variants"]
    config = (folder / "config.pbtxt").read_text()
    assert 'backend: "onnxruntime"' in config and 'platform: "onnxruntime_onnx"' in config
    assert "python" not in config and "max_batch_size: 4" in config
    files = sorted(os.path.relpath(os.path.join(d, f), folder) for d, _, fs in os.walk(folder) for f in fs)
    # no model.py, no checkpoint: nothing for Python (mx_trt_model.json only marks the folder as mx_trt's)
    assert files == ["1/model.onnx", "config.pbtxt", "mx_trt_model.json"], files
    for batch in (1, 4):
        x = np.random.RandomState(batch).uniform(-1, 1, (batch, 3, 8, 8)).astype("float32")
        got = run_without_mxnet(str(folder / "1" / "model.onnx"), {"data": x}, str(tmp_path))
        assert_close(got["softmax_output"], _native(prefix, x))
