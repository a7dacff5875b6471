"""Admission of an HTTP inference request before anything is allocated for it: pure checks, no I/O.

Triton's HTTP front-end sizes a buffer from a JSON input's declared ``shape``
before its core compares the shape with the model's configuration: a 5 KB
request declaring ``[1, 3, 16, 1e12]`` makes it allocate terabytes and abort.
mx_trt's HTTP front (:mod:`mx_trt.serving.front`) therefore reads each
inference request's JSON header and checks it here first: every input named
once and known, its datatype, its shape ``[batch, *dims]`` with ``1 <= batch
<= max_batch``, and the size of its data (the count of JSON values, or
``binary_data_size``) against that shape. A request that fails gets a 400 with
the reason; one that passes cannot make the server allocate more than
:func:`body_limit` allows for the body itself.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

#: numpy dtype name -> the datatype string of Triton's inference protocol.
PROTOCOL_TYPES = {
    "bool": "BOOL", "uint8": "UINT8", "int8": "INT8", "int16": "INT16", "int32": "INT32", "int64": "INT64",
    "float16": "FP16", "float32": "FP32", "float64": "FP64",
}
#: Bytes allowed for the JSON header itself (names, parameters, outputs) on top of the inputs' data.
HEADER_SLACK = 64 * 1024
#: Characters one value may take in a JSON body (``-1.2345678901234567e-05, `` is 25).
JSON_CHARS_PER_VALUE = 32


@dataclass(frozen=True)
class InputRule:
    """What one input of the model accepts: its name, protocol datatype and per-sample dims (batch excluded).

    ``dims`` are those of the model configuration: an input with one value per
    sample has ``(1,)``, as clients send it (``[batch, 1]``).
    """

    name: str
    datatype: str
    dims: Tuple[int, ...]
    itemsize: int

    @classmethod
    def of(cls, name: str, dtype: str, dims: Sequence[int]) -> "InputRule":
        """The rule for a served input (``dims`` as :class:`~mx_trt.serving.executors.TensorSpec` has them)."""
        return cls(name, PROTOCOL_TYPES[np.dtype(dtype).name], tuple(int(d) for d in dims) or (1,),
                   int(np.dtype(dtype).itemsize))

    @property
    def sample_elements(self) -> int:
        return int(math.prod(self.dims))


def body_limit(rules: Iterable[InputRule], max_batch: int) -> int:
    """The largest body a valid request can need: a full batch of every input as JSON text, plus the header."""
    per_value = max(JSON_CHARS_PER_VALUE, max((r.itemsize for r in rules), default=1))
    return HEADER_SLACK + max_batch * sum(r.sample_elements for r in rules) * per_value


def parse_header(data: bytes) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
    """The request's JSON header as a dict, or the reason it is not one (malformed JSON, too deep, not an object)."""
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as exc:
        return None, f"malformed JSON in the request: {' '.join(str(exc).split())[:200]}"
    if not isinstance(doc, dict):
        return None, f"the request must be a JSON object, got {type(doc).__name__}"
    return doc, None


def _count_values(data: Any, limit: int) -> int:
    """The number of scalar values in a nested JSON list, counting no further than ``limit + 1``."""
    count = 0
    stack = [data]
    while stack and count <= limit:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        else:
            count += 1
    return count


def _shape_problem(name: str, shape: Any, rule: InputRule, max_batch: int) -> Optional[str]:
    want = f"[batch, {', '.join(str(d) for d in rule.dims)}] with batch 1..{max_batch}"
    if not isinstance(shape, list) or not all(type(d) is int for d in shape):
        return f"input {name!r}: shape {json.dumps(shape)[:80]} is not a list of integers; the model takes {want}"
    if len(shape) != len(rule.dims) + 1 or tuple(shape[1:]) != rule.dims:
        return f"input {name!r} has shape {shape}; the model takes {want}"
    if not 1 <= shape[0] <= max_batch:
        return f"input {name!r}: batch size {shape[0]} is outside 1..{max_batch}"
    return None


def _input_problem(item: Any, rules: Mapping[str, InputRule], max_batch: int) -> Tuple[Optional[str], int]:
    """The reason one entry of ``inputs`` is refused (or ``None``), and its batch size."""
    if not isinstance(item, dict):
        return "each entry of 'inputs' must be an object", 0
    name = item.get("name")
    if not isinstance(name, str) or name not in rules:
        return f"unknown input {name!r}; the model's inputs are {', '.join(rules)}", 0
    rule = rules[name]
    if item.get("datatype") != rule.datatype:
        return f"input {name!r} has datatype {item.get('datatype')!r}; the model takes {rule.datatype}", 0
    shape: Any = item.get("shape")
    problem = _shape_problem(name, shape, rule, max_batch)
    if problem is not None:
        return problem, 0
    elements = shape[0] * rule.sample_elements
    params = item.get("parameters", {})
    if not isinstance(params, dict):
        return f"input {name!r}: 'parameters' must be an object", 0
    if "binary_data_size" in params:
        size = params["binary_data_size"]
        if type(size) is not int or size != elements * rule.itemsize:
            return (f"input {name!r}: binary_data_size {size!r} does not match shape {shape} "
                    f"({elements * rule.itemsize} bytes of {rule.datatype})"), 0
    elif "data" in item:
        count = _count_values(item["data"], elements)
        if count != elements:
            counted = f"more than {elements}" if count > elements else str(count)
            return f"input {name!r}: {counted} value(s) in 'data' for shape {shape} ({elements})", 0
    elif "shared_memory_region" not in params:
        return f"input {name!r} has no 'data' and no 'binary_data_size' or 'shared_memory_region' parameter", 0
    return None, int(shape[0])


def check_request(doc: Mapping[str, Any], rules: Sequence[InputRule], max_batch: int) -> Optional[str]:
    """Why an inference request's JSON header is refused (one line), or ``None``.

    O(number of values in ``data``), never more than the declared shape.
    """
    by_name = {r.name: r for r in rules}
    inputs = doc.get("inputs")
    if not isinstance(inputs, list):
        return "the request has no 'inputs' list"
    seen: List[str] = []
    batches = set()
    item: Any
    for item in inputs:
        problem, batch = _input_problem(item, by_name, max_batch)
        if problem is not None:
            return problem
        if item["name"] in seen:
            return f"input {item['name']!r} is given twice"
        seen.append(item["name"])
        batches.add(batch)
    missing = [r.name for r in rules if r.name not in seen]
    if missing:
        return f"input {missing[0]!r} is missing; the model's inputs are {', '.join(by_name)}"
    if len(batches) > 1:
        return f"the inputs disagree on the batch size ({', '.join(str(b) for b in sorted(batches))})"
    return None
