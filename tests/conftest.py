"""Test isolation: every test starts with an empty plan cache of its own and no
engines kept from earlier tests, and with the pass switched off."""
from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _isolated_engines(monkeypatch, tmp_path):
    monkeypatch.setenv("MXNET_TENSORRT_CACHE_DIR", str(tmp_path / "plan_cache"))
    for var in ("MXNET_USE_TENSORRT", "MXNet_USE_TENSORRT", "MXNET_TENSORRT_MAX_BATCH_SIZE", "MXNET_TENSORRT_PROFILES",
                "MXNET_TENSORRT_USE_FP16", "MXNET_TENSORRT_EXCLUDE_OPS", "MXNET_TENSORRT_BACKEND",
                "MXNET_TENSORRT_MIN_SUBGRAPH_SIZE", "MXNET_TENSORRT_ENGINE_RULE", "MXNET_TENSORRT_STRICT",
                "MXNET_SUBGRAPH_BACKEND", "MXNET_TENSORRT_CALIBRATION_ITERS", "MXNET_TENSORRT_RUNTIME_CHECK"):
        monkeypatch.delenv(var, raising=False)
    # The tests of the pass's mechanics bind graphs of a few tiny operators, which the
    # default cost rule (mx_trt.passes.cost) rightly leaves native: they run with every
    # subgraph of two or more operators made an engine. Tests of the rule itself and
    # of real models use the defaults (the `default_engine_rule` fixture).
    monkeypatch.setenv("MXNET_TENSORRT_ENGINE_RULE", "always")
    monkeypatch.setenv("MXNET_TENSORRT_MIN_SUBGRAPH_SIZE", "2")
    try:
        from mx_trt.builder import engines
    except ImportError:  # tests of passes/ alone do not need mx_trt
        yield
        return
    from mx_trt import settings
    from mx_trt.frontends import hook

    engines.clear_pool()
    settings.set_use_fp16(None)
    settings.set_optimization_profiles(None)
    hook.set_use_tensorrt(None)
    yield
    engines.clear_pool()
    settings.set_use_fp16(None)
    settings.set_optimization_profiles(None)
    hook.set_use_tensorrt(None)


@pytest.fixture
def default_engine_rule(monkeypatch):
    """The cost rule decides which subgraphs become engines, every subgraph size counts: the shipped
    rule without a plan cache, and the deterministic one (the measured rule, the default with a plan
    cache, times engines on this machine; tests/pipeline/test_measured.py tests it)."""
    monkeypatch.setenv("MXNET_TENSORRT_ENGINE_RULE", "cost")
    monkeypatch.delenv("MXNET_TENSORRT_MIN_SUBGRAPH_SIZE", raising=False)


@pytest.fixture
def shipped_defaults(monkeypatch):
    """No engine rule and no minimum subgraph size set: what a user gets (the measured rule, with the plan cache)."""
    monkeypatch.delenv("MXNET_TENSORRT_ENGINE_RULE", raising=False)
    monkeypatch.delenv("MXNET_TENSORRT_MIN_SUBGRAPH_SIZE", raising=False)


@pytest.fixture
def quick_probes(monkeypatch):
    """The run-time check holds back no forward time at the start of a run, only its first forward (tests of
    other things than that: the probes then come after the forwards counted in ``mx_trt.runtime.arbiter``'s
    constants, at any model speed)."""
    from mx_trt.runtime import arbiter

    monkeypatch.setattr(arbiter, "SETTLE_S", 0.0)


@pytest.fixture
def check_clock(monkeypatch):
    """The run-time checks bound in the test run on a virtual clock (tests/harness/checkclock.py)."""
    from tests.harness import checkclock

    return checkclock.install(monkeypatch)
