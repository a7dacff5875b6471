"""The checks of an HTTP inference request's JSON header (pure: no server)."""
from __future__ import annotations

import json

import pytest

from mx_trt.serving.admission import InputRule, body_limit, check_request, parse_header

RULES = [InputRule.of("data", "float32", (3, 4)), InputRule.of("length", "int32", ())]


def _req(**over):
    data = {"name": "data", "shape": [2, 3, 4], "datatype": "FP32", "data": [0.0] * 24}
    length = {"name": "length", "shape": [2, 1], "datatype": "INT32", "data": [[1], [2]]}
    data.update(over)
    return {"inputs": [data, length]}


def test_a_valid_request_passes_with_json_or_binary_data():
    assert check_request(_req(), RULES, 4) is None
    binary = _req(parameters={"binary_data_size": 96})
    del binary["inputs"][0]["data"]
    assert check_request(binary, RULES, 4) is None
    shm = _req(parameters={"shared_memory_region": "r", "shared_memory_byte_size": 96})
    del shm["inputs"][0]["data"]
    assert check_request(shm, RULES, 4) is None


@pytest.mark.parametrize("over,words", [
    ({"shape": [1, 3, 4, 10**12]}, "has shape [1, 3, 4, 1000000000000]"),
    ({"shape": [1, 3, 10**12]}, "has shape"),
    ({"shape": [10**9, 3, 4]}, "batch size 1000000000 is outside 1..4"),
    ({"shape": [0, 3, 4], "data": []}, "batch size 0"),
    ({"shape": [1, 3, 4.0]}, "not a list of integers"),
    ({"shape": [1, 3, True]}, "not a list of integers"),
    ({"shape": "1,3,4"}, "not a list of integers"),
    ({"datatype": "FP64"}, "datatype 'FP64'; the model takes FP32"),
    ({"name": "other"}, "unknown input 'other'"),
    ({"data": [0.0] * 23}, "23 value(s) in 'data' for shape [2, 3, 4] (24)"),
    ({"data": [[0.0] * 24] * 2}, "more than 24 value(s)"),
    ({"data": None, "parameters": {"binary_data_size": 95}}, "binary_data_size 95 does not match"),
    ({"parameters": []}, "'parameters' must be an object"),
])
def test_a_bad_input_is_refused_with_the_reason(over, words):
    req = _req(**over)
    if over.get("data", 0) is None:
        del req["inputs"][0]["data"]
    problem = check_request(req, RULES, 4)
    assert problem is not None and words in problem, problem


def test_the_request_as_a_whole_is_checked():
    assert "missing" in check_request({"inputs": []}, RULES, 4)
    assert "no 'inputs' list" in check_request({"inputs": {}}, RULES, 4)
    twice = _req()
    twice["inputs"].append(dict(twice["inputs"][0]))
    assert "given twice" in check_request(twice, RULES, 4)
    disagree = _req()
    disagree["inputs"][1].update(shape=[1, 1], data=[1])
    assert "disagree on the batch size" in check_request(disagree, RULES, 4)


def test_counting_values_stops_past_the_declared_size():
    # A long list is counted only up to one past the declared shape.
    req = _req(data=[0.0] * 10**6)
    assert "more than 24" in check_request(req, RULES, 4)


@pytest.mark.parametrize("text,words", [(b'{"inputs": [', "malformed JSON"), (b"[" * 100000 + b"]" * 100000,
                                        "malformed JSON"), (b"[]", "must be a JSON object"), (b"\xff", "malformed")])
def test_a_header_that_is_not_a_json_object_is_refused(text, words):
    doc, problem = parse_header(text)
    assert doc is None and words in problem


def test_the_body_limit_fits_a_full_batch_as_json_text():
    limit = body_limit(RULES, 4)
    full = json.dumps({"inputs": [{"name": "data", "shape": [4, 3, 4], "datatype": "FP32",
                                   "data": [-1.2345678901234567e-05] * 48},
                                  {"name": "length", "shape": [4, 1], "datatype": "INT32",
                                   "data": [2147483647] * 4}]}).encode()
    assert len(full) < limit < 70 * 1024 + 64 * 1024
