"""``mxtrt export --triton`` on a mixed graph (a user's Python custom operator between two engines): the written
repository loads in the bundled tritonserver, and its outputs match native MXNet."""
from __future__ import annotations

import os

import mxnet as mx
import numpy as np
import pytest

from mx_trt.serving.process import TritonProcess
from mx_trt.serving.server import free_port
from mx_trt.tools.cli.main import main
from tests.harness import userops
from tests.serving.conftest import SERVER_ENV, assert_close, needs_server, small_cnn, triton_client

thttp = triton_client("tritonclient.http")

USEROPS = os.path.abspath(userops.__file__)


def _mixed(prefix):
    x = mx.sym.var("data")
    h = mx.sym.Activation(mx.sym.Convolution(x, num_filter=4, kernel=(3, 3), pad=(1, 1), name="a_conv"),
                          act_type="relu", name="a_relu")
    h = userops.square(h, "sq")
    h = mx.sym.Activation(mx.sym.Convolution(h, num_filter=4, kernel=(3, 3), pad=(1, 1), name="b_conv"),
                          act_type="relu", name="b_relu")
    sym = mx.sym.FullyConnected(h, num_hidden=5, name="fc")
    rng = np.random.RandomState(1)
    arg_shapes, _, _ = sym.infer_shape(data=(1, 3, 8, 8))
    args = {n: mx.nd.array(rng.uniform(-0.3, 0.3, s)) for n, s in zip(sym.list_arguments(), arg_shapes) if n != "data"}
    mx.model.save_checkpoint(prefix, 2, sym, args, {})


def test_exported_mixed_graph_serves(tmp_path, capsys):
    needs_server()
    prefix = str(tmp_path / "mixed")
    _mixed(prefix)
    repo = tmp_path / "repo"
    code = main(["export", prefix, str(repo), "--shape", "data=1,3,8,8", "--triton", "--import", USEROPS,
                 "--max-batch", "4", "--instances", "2", "--model-name", "mixed"])
    assert code == 0, capsys.readouterr().err
    assert "wrote the Triton model" in capsys.readouterr().out
    folder = repo / "mixed" / "1"
    assert (folder / "user_userops.py").is_file()
    with pytest.MonkeyPatch.context() as mp:
        for k, v in dict(SERVER_ENV, MXNET_TENSORRT_CACHE_DIR=str(tmp_path / "cache")).items():
            mp.setenv(k, v)
        ports = {"http": free_port(), "grpc": free_port(), "metrics": free_port()}
        server = TritonProcess(str(repo), "mixed", "127.0.0.1", ports, 5, str(tmp_path / "work"),
                               str(tmp_path / "server.log"))
    try:
        server.wait_ready(180)
        client = thttp.InferenceServerClient(server.http)
        x = np.random.RandomState(0).uniform(-1, 1, (3, 3, 8, 8)).astype("float32")
        t = thttp.InferInput("data", list(x.shape), "FP32")
        t.set_data_from_numpy(x)
        got = client.infer("mixed", [t]).as_numpy("fc_output")
        client.close()
    finally:
        assert server.stop() == 0, (tmp_path / "server.log").read_text()[-3000:]
    assert_close(got, _native(prefix, x))
    # The instances bound with the pass: one engine on each side of the native custom operator, built once.
    metas = [d for d, _, files in os.walk(tmp_path / "cache") if "meta.json" in files]
    assert len(metas) == 2, metas


def _native(prefix, x):
    sym, args, aux = mx.model.load_checkpoint(prefix, 2)
    exe = sym.simple_bind(mx.cpu(), grad_req="null", data=x.shape)
    exe.copy_params_from(args, aux)
    exe.arg_dict["data"][:] = x
    return exe.forward()[0].asnumpy()


def test_export_triton_refuses_bad_options(tmp_path, capsys):
    prefix = str(tmp_path / "tiny")
    small_cnn(prefix)
    for extra, words in ((["--model-name", "a b"], "model name"), (["--dtype", "data=complex64"], "Triton carries"),
                         (["--dtype", "nope=int32"], "unknown input"), (["--dtype", "data"], "NAME=TYPE"),
                         (["--instances", "0"], "instances")):
        code = main(["export", prefix, str(tmp_path / "repo"), "--shape", "data=1,3,16,16", "--triton", *extra])
        err = capsys.readouterr().err
        assert code == 2 and words in err and len(err.strip().splitlines()) == 1, err
