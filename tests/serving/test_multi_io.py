"""Three inputs of two dtypes (int32 token ids, a float mask, one float per sample) and two outputs, by name,
served over HTTP and gRPC."""
from __future__ import annotations

import numpy as np
import pytest

from tests.serving.conftest import assert_close, native_outputs, server_for, triton_client, two_in_two_out

tgrpc = triton_client("tritonclient.grpc")
thttp = triton_client("tritonclient.http")
InferenceServerException = triton_client("tritonclient.utils").InferenceServerException

SEQ = 7


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    prefix = str(tmp_path_factory.mktemp("ckpt") / "tagger")
    two_in_two_out(prefix)
    with server_for(prefix, {"tokens": (1, SEQ), "mask": (1, SEQ), "length": (1,)},
                    str(tmp_path_factory.mktemp("plan_cache")),
                    dtypes={"tokens": "int32"}, max_batch=4, model_name="tagger") as endpoints:
        yield prefix, endpoints


def _feeds(batch, seed):
    rng = np.random.RandomState(seed)
    return {"tokens": rng.randint(0, 50, (batch, SEQ)).astype("int32"),
            "mask": (rng.uniform(0, 1, (batch, SEQ)) > 0.3).astype("float32"),
            "length": rng.randint(1, SEQ + 1, (batch,)).astype("float32")}


def _sent(arr):
    """As a Triton client sends it: one value per sample travels as dims [1] (the model gets [batch])."""
    return arr.reshape(arr.shape + (1,)) if arr.ndim == 1 else arr


@pytest.mark.parametrize("kind", ["http", "grpc"])
def test_named_inputs_and_outputs_with_their_dtypes(model, kind):
    prefix, endpoints = model
    mod = thttp if kind == "http" else tgrpc
    client = mod.InferenceServerClient(endpoints.http if kind == "http" else endpoints.grpc)
    meta = client.get_model_metadata(endpoints.model)
    meta = meta if isinstance(meta, dict) else {"inputs": [{"name": i.name, "datatype": i.datatype}
                                                            for i in meta.inputs],
                                                "outputs": [{"name": o.name} for o in meta.outputs]}
    assert {i["name"]: i["datatype"] for i in meta["inputs"]} == {"tokens": "INT32", "mask": "FP32", "length": "FP32"}
    names = [o["name"] for o in meta["outputs"]]
    assert len(names) == 2
    feeds = _feeds(3, 1)
    inputs = []
    for name, arr in feeds.items():
        t = mod.InferInput(name, list(_sent(arr).shape), "INT32" if arr.dtype == np.int32 else "FP32")
        t.set_data_from_numpy(_sent(arr))
        inputs.append(t)
    result = client.infer(endpoints.model, inputs)
    client.close()
    for name, want in zip(names, native_outputs(prefix, feeds)):
        assert_close(result.as_numpy(name), want)


def test_float_token_ids_are_refused(model):
    _, endpoints = model
    client = thttp.InferenceServerClient(endpoints.http)
    feeds = _feeds(1, 2)
    inputs = []
    for name, arr in feeds.items():
        arr = _sent(arr).astype("float32")
        t = thttp.InferInput(name, list(arr.shape), "FP32")
        t.set_data_from_numpy(arr)
        inputs.append(t)
    with pytest.raises(InferenceServerException, match="tokens"):
        client.infer(endpoints.model, inputs)
    client.close()
