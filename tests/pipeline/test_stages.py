"""pipeline.bind's stage list: run in the listed order, each timed at DEBUG, errors passed on unchanged.

Binds compare with MXNet's own output (fp32: ``rtol=1e-4, atol=1e-5``, tests.harness.bindcheck).
"""
from __future__ import annotations

import logging
import os
import re

import mxnet as mx
import numpy as np
import pytest

import mx_trt
from mx_trt.errors import ShapeError, UnsupportedOpError
from mx_trt.pipeline import bind as pipeline_bind
from mx_trt.pipeline.bind import STAGES, BindState, Stage, run_stages
from tests.harness.bindcheck import ATOL, RTOL, SHAPES, bind, compare, conv_relu
from tests.harness.mxcheck import random_inputs, random_params

LOGGER = "mx_trt.pipeline.bind"
TOOK = re.compile(r"^stage (\S+) took (\d+\.\d) ms$")


def _took(caplog) -> list:
    """Stage names of the DEBUG ``stage <name> took <ms> ms`` lines, in log order."""
    out = []
    for r in caplog.records:
        m = TOOK.match(r.getMessage())
        if m and r.name == LOGGER and r.levelno == logging.DEBUG:
            out.append(m.group(1))
    return out


def test_run_stages_runs_the_list_in_order_and_times_each_stage(caplog):
    ran = []

    def step(name):
        def run(state: BindState) -> BindState:
            ran.append(name)
            return state
        return Stage(name, run)

    stages = [step("b"), step("a"), step("c")]
    start = BindState(request=None)  # type: ignore[arg-type]
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        state, timings = run_stages(start, stages)
    assert ran == ["b", "a", "c"]
    assert state is start
    assert list(timings) == ["b", "a", "c"] and all(t >= 0 for t in timings.values())
    assert _took(caplog) == ["b", "a", "c"]


def test_a_stage_error_propagates_unchanged_and_later_stages_do_not_run(caplog):
    ran = []
    error = UnsupportedOpError("simulated: no converter")

    def ok(state):
        ran.append("ok")
        return state

    def fail(state):
        raise error

    def later(state):  # pragma: no cover - must not run
        ran.append("later")
        return state

    with caplog.at_level(logging.DEBUG, logger=LOGGER), pytest.raises(UnsupportedOpError) as info:
        run_stages(BindState(request=None), [Stage("ok", ok), Stage("fail", fail), Stage("later", later)])  # type: ignore[arg-type]
    assert info.value is error
    assert ran == ["ok"]
    assert _took(caplog) == ["ok"]
    assert any(r.getMessage().startswith("stage fail failed after") for r in caplog.records)


def test_stages_are_named_once_and_listed_in_architecture_md():
    names = [s.name for s in STAGES]
    assert len(set(names)) == len(names)
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                        "ARCHITECTURE.md")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^The stages of a bind \(`STAGES`\): (.+)$", text, re.M)
    assert m, "ARCHITECTURE.md lists the bind's stages on a line 'The stages of a bind (`STAGES`): ...'"
    assert re.findall(r"`([a-z_0-9]+)`", m.group(1)) == names


def test_a_bind_runs_every_stage_in_order_and_times_it(monkeypatch, caplog):
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        exe = compare(conv_relu(conv_relu(mx.sym.var("data"), "a"), "b"), SHAPES, monkeypatch)
    names = [s.name for s in STAGES]
    assert _took(caplog) == names
    info = mx_trt.bind_info(exe)
    assert len(info.engines) == 1
    assert set(names) | {"bind"} <= set(info.timings)
    assert all(info.timings[n] >= 0 for n in names)


@pytest.mark.parametrize("strict", [False, True])
def test_a_typed_error_in_a_stage_falls_back_or_raises_as_before(monkeypatch, caplog, strict):
    def bad_partition(state):
        raise ShapeError("simulated: contradictory shapes")

    stages = tuple(Stage(s.name, bad_partition) if s.name == "partition" else s for s in STAGES)
    monkeypatch.setattr(pipeline_bind, "STAGES", stages)
    if strict:
        monkeypatch.setenv("MXNET_TENSORRT_STRICT", "1")
    sym = conv_relu(mx.sym.var("data"), "a")
    args, aux = random_params(sym, SHAPES)
    inputs = random_inputs(SHAPES, 1)
    if strict:
        with pytest.raises(ShapeError, match="simulated: contradictory shapes"):
            bind(sym, SHAPES, args, aux, inputs, True, monkeypatch)
        return
    with caplog.at_level(logging.DEBUG, logger="mx_trt"):
        exe, got = bind(sym, SHAPES, args, aux, inputs, True, monkeypatch)
    assert mx_trt.bind_info(exe) is None  # MXNet's own bind
    assert _took(caplog) == ["plan_cache", "import"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "simulated: contradictory shapes" in warnings[0]
    _, ref = bind(sym, SHAPES, args, aux, inputs, False, monkeypatch)
    np.testing.assert_allclose(got[0], ref[0], rtol=RTOL, atol=ATOL)
