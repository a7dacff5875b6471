"""A small CNN served by Triton (one server for the module, two instances): outputs against native MXNet over
HTTP and gRPC, dynamic batching seen in Triton's metrics, bad requests refused without harming the others."""
from __future__ import annotations

import concurrent.futures
import os
import urllib.request

import numpy as np
import pytest

from tests.serving.conftest import assert_close, metric, native_outputs, server_for, triton_client

tgrpc = triton_client("tritonclient.grpc")
thttp = triton_client("tritonclient.http")
InferenceServerException = triton_client("tritonclient.utils").InferenceServerException

MAX_BATCH = 8
SAMPLE = (3, 16, 16)


@pytest.fixture(scope="module")
def server(tiny_cnn, tmp_path_factory):
    cache = str(tmp_path_factory.mktemp("plan_cache"))
    with server_for(tiny_cnn, {"data": (1,) + SAMPLE}, cache, max_batch=MAX_BATCH, instances=2,
                    max_queue_delay_us=20000) as endpoints:
        yield endpoints, cache


def _client(kind, endpoints):
    return (thttp.InferenceServerClient(endpoints.http, concurrency=16) if kind == "http"
            else tgrpc.InferenceServerClient(endpoints.grpc))


def _infer(kind, client, model, arrays, triton_types=None):
    mod = thttp if kind == "http" else tgrpc
    inputs = []
    for name, arr in arrays.items():
        t = mod.InferInput(name, list(arr.shape), (triton_types or {}).get(name, "FP32"))
        t.set_data_from_numpy(arr)
        inputs.append(t)
    return client.infer(model, inputs).as_numpy("fc_output")


def _batch(n, seed):
    return np.random.RandomState(seed).uniform(-1, 1, (n,) + SAMPLE).astype("float32")


@pytest.mark.parametrize("kind", ["http", "grpc"])
@pytest.mark.parametrize("batch", [1, 3, MAX_BATCH])
def test_outputs_match_native(server, tiny_cnn, kind, batch):
    endpoints, _ = server
    x = _batch(batch, batch)
    got = _infer(kind, _client(kind, endpoints), endpoints.model, {"data": x})
    assert_close(got, native_outputs(tiny_cnn, {"data": x})[0])


def test_instances_bound_with_the_pass_share_one_plan_cache(server):
    _, cache = server
    entries = [d for d, _, files in os.walk(cache) if "meta.json" in files]
    assert len(entries) == 1, f"{entries}: the two instances should share one engine (the pass: one subgraph)"


def test_health_ready_and_metrics(server):
    endpoints, _ = server
    for path in ("/v2/health/live", "/v2/health/ready", f"/v2/models/{endpoints.model}/ready"):
        with urllib.request.urlopen(f"http://{endpoints.http}{path}", timeout=10) as resp:
            assert resp.status == 200, path
    client = thttp.InferenceServerClient(endpoints.http)
    config = client.get_model_config(endpoints.model)
    assert config["max_batch_size"] == MAX_BATCH
    assert config["instance_group"][0]["count"] == 2
    assert [i["name"] for i in config["input"]] == ["data"]
    with urllib.request.urlopen(endpoints.metrics, timeout=10) as resp:
        assert "nv_inference_request_success" in resp.read().decode()


def _send_all(client, model, xs):
    """Send each batch in ``xs`` at once over HTTP; the pending results, in order."""
    pending = []
    for x in xs:
        t = thttp.InferInput("data", list(x.shape), "FP32")
        t.set_data_from_numpy(x)
        pending.append(client.async_infer(model, [t]))
    return pending


def test_concurrent_requests_are_batched(server, tiny_cnn):
    endpoints, _ = server
    with urllib.request.urlopen(endpoints.metrics, timeout=10) as resp:
        before = resp.read().decode()
    xs = [_batch(1, 100 + i) for i in range(32)]
    want = native_outputs(tiny_cnn, {"data": np.concatenate(xs)})[0]
    client = thttp.InferenceServerClient(endpoints.http, concurrency=32)
    pending = _send_all(client, endpoints.model, xs)
    got = np.concatenate([p.get_result().as_numpy("fc_output") for p in pending])
    assert_close(got, want)
    with urllib.request.urlopen(endpoints.metrics, timeout=10) as resp:
        after = resp.read().decode()
    requests = metric(after, "nv_inference_request_success") - metric(before, "nv_inference_request_success")
    executions = metric(after, "nv_inference_exec_count") - metric(before, "nv_inference_exec_count")
    assert requests == 32
    assert 1 <= executions < requests, f"{requests} requests ran in {executions} executions: no batch was formed"


BAD = {
    "wrong shape": ({"data": np.zeros((1, 3, 8, 8), "float32")}, None, "data"),
    "wrong dtype": ({"data": np.zeros((1,) + SAMPLE, "float64")}, {"data": "FP64"}, "data"),
    "batch over max": ({"data": np.zeros((MAX_BATCH + 1,) + SAMPLE, "float32")}, None, "batch"),
    "missing input": ({}, None, "data"),
    "unknown input": ({"data": np.zeros((1,) + SAMPLE, "float32"), "extra": np.zeros((1, 2), "float32")}, None,
                      "extra"),
    "NaN input": ({"data": np.full((2,) + SAMPLE, np.nan, "float32")}, None, "NaN"),
}


@pytest.mark.parametrize("kind", ["http", "grpc"])
@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_request_is_refused_and_the_others_are_unharmed(server, tiny_cnn, kind, case):
    endpoints, _ = server
    client = _client(kind, endpoints)
    good = _batch(2, 7)
    want = native_outputs(tiny_cnn, {"data": good})[0]
    assert_close(_infer(kind, client, endpoints.model, {"data": good}), want)
    arrays, types, words = BAD[case]
    with pytest.raises(InferenceServerException) as info:
        _infer(kind, client, endpoints.model, arrays, types)
    message = info.value.message()
    assert words in message and len(message) < 1000, message
    status = str(info.value.status())
    assert status in ("400", "StatusCode.INVALID_ARGUMENT"), (status, message)
    assert_close(_infer(kind, client, endpoints.model, {"data": good}), want)


def test_a_nan_request_batched_with_good_ones_fails_alone(server, tiny_cnn):
    endpoints, _ = server
    xs = [_batch(1, 300 + i) for i in range(8)]
    xs[3] = np.full_like(xs[3], np.nan)
    client = thttp.InferenceServerClient(endpoints.http, concurrency=8)
    pending = _send_all(client, endpoints.model, xs)
    for i, p in enumerate(pending):
        if i == 3:
            with pytest.raises(InferenceServerException, match="NaN"):
                p.get_result()
        else:
            assert_close(p.get_result().as_numpy("fc_output"), native_outputs(tiny_cnn, {"data": xs[i]})[0])


def test_concurrent_grpc_clients(server, tiny_cnn):
    endpoints, _ = server
    xs = [_batch(1 + i % 3, 500 + i) for i in range(12)]

    def one(x):
        return _infer("grpc", tgrpc.InferenceServerClient(endpoints.grpc), endpoints.model, {"data": x})

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        got = list(pool.map(one, xs))
    for x, g in zip(xs, got):
        assert_close(g, native_outputs(tiny_cnn, {"data": x})[0])
