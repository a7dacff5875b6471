"""Test isolation: every test starts with an empty plan cache of its own and no
engines kept from earlier tests, and with the pass switched off."""
from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _isolated_engines(monkeypatch, tmp_path):
    monkeypatch.setenv("MXNET_TENSORRT_CACHE_DIR", str(tmp_path / "plan_cache"))
    for var in ("MXNET_USE_TENSORRT", "MXNet_USE_TENSORRT", "MXNET_TENSORRT_MAX_BATCH_SIZE", "MXNET_TENSORRT_PROFILES",
                "MXNET_TENSORRT_USE_FP16", "MXNET_TENSORRT_EXCLUDE_OPS", "MXNET_TENSORRT_BACKEND",
                "MXNET_TENSORRT_MIN_SUBGRAPH_SIZE"):
        monkeypatch.delenv(var, raising=False)
    try:
        from mx_trt import engines
    except ImportError:  # tests of passes/ alone do not need mx_trt
        yield
        return
    from mx_trt import settings

    engines.clear_pool()
    settings.set_use_fp16(None)
    settings.set_optimization_profiles(None)
    yield
    engines.clear_pool()
    settings.set_use_fp16(None)
    settings.set_optimization_profiles(None)
