"""mx_trt.settings: the environment parsed once per bind, explicit options over it, the scoped setters."""
from __future__ import annotations

import os
import threading

import pytest

from mx_trt import settings
from mx_trt.errors import CalibrationError, MxTrtError
from mx_trt.settings import OPTIONS, Settings


def test_defaults_with_a_clean_environment(monkeypatch):
    for k in list(os.environ):
        if k.startswith("MXNET_TENSORRT_"):
            monkeypatch.delenv(k)
    s = Settings.from_env()
    assert (s.fp16, s.int8, s.engine_rule, s.min_subgraph_size, s.backend, s.max_batch_size) == (
        False, False, "measured", 1, None, None)
    assert s.precision == "fp32" and s.calibration_iters == 0


@pytest.mark.parametrize("var,value,words", [
    ("MXNET_TENSORRT_MIN_SUBGRAPH_SIZE", "0", "MXNET_TENSORRT_MIN_SUBGRAPH_SIZE='0'"),
    ("MXNET_TENSORRT_MAX_BATCH_SIZE", "big", "expected an integer"),
    ("MXNET_TENSORRT_ORT_THREADS", "lots", "MXNET_TENSORRT_ORT_THREADS"),
    ("MXNET_TENSORRT_STRICT", "maybe", "expected 1 or 0"),
    ("MXNET_TENSORRT_PRECISION", "int4", "fp32, fp16, int8"),
    ("MXNET_TENSORRT_RTX_SPECIALIZATION", "always", "lazy, eager, none"),
    ("MXNET_TENSORRT_PROFILES", "[{", "not valid JSON"),
    ("MXNET_TENSORRT_CALIBRATION_ITERS", "-1", "must be between 0 and"),
])
def test_a_bad_value_names_the_variable_and_what_is_allowed(monkeypatch, var, value, words):
    monkeypatch.setenv(var, value)
    with pytest.raises(MxTrtError, match=words.replace("(", r"\(").replace("[", r"\[")):
        Settings.from_env()


def test_explicit_options_win_and_unknown_ones_are_named(monkeypatch):
    monkeypatch.setenv("MXNET_TENSORRT_ENGINE_RULE", "always")
    s = Settings.from_env().with_options({"engine_rule": "cost", "max_batch_size": "8", "exclude_ops": "Pooling,FullyConnected"})
    assert s.engine_rule == "cost" and s.max_batch_size == 8 and s.exclude_ops == {"Pooling", "FullyConnected"}
    with pytest.raises(MxTrtError, match="unknown option 'nope'"):
        s.with_options({"nope": 1})
    with pytest.raises(MxTrtError, match="max_batch_size=0"):
        s.with_options({"max_batch_size": 0})
    assert set(OPTIONS) >= {"precision", "calibration", "calibration_iters", "fp16", "backend", "strict"}


def test_int8_needs_a_table_or_calibration_iters():
    with pytest.raises(CalibrationError):
        Settings().with_options({"precision": "int8"})
    s = Settings().with_options({"precision": "int8", "calibration_iters": 5})
    assert s.int8 and s.calibration is None and s.calibration_iters == 5


def test_scoped_default_is_per_thread_with_the_main_threads_value_as_default():
    v: settings.ScopedDefault[int] = settings.ScopedDefault("test_value")
    assert v.get() is None
    v.set(1)  # main thread: the process default too
    seen = {}

    def worker(name, value):
        if value is not None:
            v.set(value)
        seen[name] = v.get()

    threads = [threading.Thread(target=worker, args=("sets", 2)), threading.Thread(target=worker, args=("reads", None))]
    for t in threads:
        t.start()
        t.join()
    assert seen == {"sets": 2, "reads": 1} and v.get() == 1
    v.set(None)
    assert v.get() is None


def test_subgraph_backend_tensorrt_is_masked_from_mxnet_and_restored(monkeypatch):
    monkeypatch.setenv("MXNET_SUBGRAPH_BACKEND", "TensorRT")
    assert settings.subgraph_backend_is_tensorrt()
    with settings.masked_subgraph_backend():
        assert os.environ["MXNET_SUBGRAPH_BACKEND"] == "NONE"
        assert settings.subgraph_backend_is_tensorrt()  # the pass still sees what the user set
        with settings.masked_subgraph_backend():
            assert os.environ["MXNET_SUBGRAPH_BACKEND"] == "NONE"
        assert os.environ["MXNET_SUBGRAPH_BACKEND"] == "NONE"
    assert os.environ["MXNET_SUBGRAPH_BACKEND"] == "TensorRT"
    monkeypatch.setenv("MXNET_SUBGRAPH_BACKEND", "MKLDNN")
    with settings.masked_subgraph_backend():
        assert os.environ["MXNET_SUBGRAPH_BACKEND"] == "MKLDNN"  # other backends are MXNet's
