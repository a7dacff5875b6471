"""One request cannot take ``mxtrt serve`` down, and a bad one gets a 400 that says why.

Before the HTTP front checked requests, a 5 KB JSON request declaring
``shape: [1, 3, 16, 1e12]`` aborted tritonserver (``std::bad_alloc``: its HTTP
front-end sizes a buffer from the declared shape before anything compares it
with the model), ``[1, 3, 16, 1e8]`` held the request for 30 s and grew the
server by gigabytes, and malformed JSON got a 500. Each case here sends the
request to a real server (one for the module), then checks that the server
still answers correctly and did not grow.
"""
from __future__ import annotations

import json
import time

import numpy as np
import pytest

from tests.serving.cli import CliServer, children, http, infer_json, rss_mb
from tests.serving.conftest import assert_close, native_outputs, needs_server, small_cnn, triton_client

tgrpc = triton_client("tritonclient.grpc")

#: A refusal must come this fast (seconds), on a shared 2-core machine.
FAST_S = 1.0
#: The server may not grow more than this (MB) over the whole module.
GROWTH_MB = 100.0


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    needs_server()
    root = tmp_path_factory.mktemp("serving_requests")
    prefix = str(root / "tiny")
    small_cnn(prefix)
    srv = CliServer([prefix, "--epoch", "0", "--shape", "data=1,3,16,16", "--max-batch", "8",
                     "--grace-period", "5"], str(root / "run"), str(root / "cache"))
    try:
        srv.wait_ready()
        srv.prefix = prefix
        srv.triton = children(srv.proc.pid)[0]
        srv.rss_before = rss_mb(srv.triton)
        yield srv
    finally:
        srv.stop()


def _still_serves(srv) -> None:
    """A good request right after gets the right answer, and readiness is 200."""
    assert srv.proc.poll() is None, srv.output()[1][-3000:]
    x = np.random.RandomState(7).uniform(-1, 1, (2, 3, 16, 16)).astype("float32")
    status, body = http(srv.base + "/v2/models/tiny/infer", infer_json(x.ravel(), x.shape))
    assert status == 200, body
    out = json.loads(body)["outputs"][0]
    got = np.asarray(out["data"], dtype="float32").reshape(out["shape"])
    assert_close(got, native_outputs(srv.prefix, {"data": x})[0])
    assert http(srv.base + "/v2/health/ready")[0] == 200


def _refused(srv, body: bytes, words: str, status: int = 400) -> float:
    t = time.perf_counter()
    got, text = http(srv.base + "/v2/models/tiny/infer", body, timeout_s=60)
    elapsed = time.perf_counter() - t
    assert got == status, (got, text[:300])
    assert words in json.loads(text)["error"], text[:300]
    return elapsed


@pytest.mark.parametrize("shape", [[1, 3, 16, 10**12], [1, 3, 16, 10**8], [10**9, 3, 16, 16], [1, 3, 16, 16, 10**6]],
                         ids=["1e12", "1e8", "batch-1e9", "extra-dim"])
def test_a_huge_declared_shape_is_refused_fast_and_the_server_keeps_serving(server, shape):
    body = infer_json(np.ones(1000), shape)  # about 5 KB
    assert len(body) < 8000
    elapsed = _refused(server, body, "shape" if shape[0] < 100 else "batch size")
    assert elapsed < FAST_S, f"{elapsed:.3f} s"
    _still_serves(server)
    assert rss_mb(server.triton) < server.rss_before + GROWTH_MB


def test_a_shape_written_as_a_float_or_a_wrong_value_count_is_refused(server):
    body = json.dumps({"inputs": [{"name": "data", "shape": [1, 3, 16, 1e12], "datatype": "FP32",
                                   "data": [1.0] * 10}]}).encode()
    assert _refused(server, body, "not a list of integers") < FAST_S
    assert _refused(server, infer_json(np.ones(10), [1, 3, 16, 16]), "value(s) in 'data'") < FAST_S
    _still_serves(server)


def test_a_binary_request_declaring_a_huge_shape_is_refused(server):
    header = json.dumps({"inputs": [{"name": "data", "shape": [1, 3, 16, 10**12], "datatype": "FP32",
                                     "parameters": {"binary_data_size": 16}}]}).encode()
    status, text = http(server.base + "/v2/models/tiny/infer", header + b"\0" * 16,
                        headers={"Inference-Header-Content-Length": str(len(header)),
                                 "Content-Type": "application/octet-stream"})
    assert status == 400 and b"shape" in text, text[:300]
    _still_serves(server)


def test_malformed_json_gets_400_not_500(server):
    for body in (b'{"inputs": [', b"[" * 100000 + b"]" * 100000, b"not json", b'"a string"'):
        _refused(server, body, "JSON")
    _still_serves(server)


def test_a_body_larger_than_any_valid_request_is_refused_before_it_is_read(server):
    import socket

    host, port = server.base[len("http://"):].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 50000000000\r\n\r\n{")
        reply = s.recv(4096).decode()
    assert reply.startswith("HTTP/1.1 413") or reply.startswith("HTTP/1.0 413"), reply[:200]
    _still_serves(server)


def test_grpc_refuses_a_huge_declared_shape_before_allocating(server):
    client = tgrpc.InferenceServerClient(server.grpc)
    x = tgrpc.InferInput("data", [1, 3, 16, 10**12], "FP32")
    x._raw_content = b"\0" * 16  # the declared shape, a few bytes of data
    t = time.perf_counter()
    with pytest.raises(tgrpc.InferenceServerException, match="unexpected shape"):
        client.infer("tiny", [x])
    assert time.perf_counter() - t < FAST_S
    client.close()
    _still_serves(server)
    assert rss_mb(server.triton) < server.rss_before + GROWTH_MB
