"""Isolation of the ported tests: each runs in a directory of its own (MXNet's tests write their exported
models and checkpoints to the working directory) and leaves the TensorRT switch to the environment."""
from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _in_own_directory(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)


@pytest.fixture(autouse=True)
def _switch_back_to_the_environment():
    """MXNet 1.3/1.4's set_use_tensorrt is process-wide here, and several originals call it: each ported
    test leaves the switch to the environment again, so that no test depends on the one before it."""
    from mx_trt.frontends import hook

    hook.set_use_tensorrt(None)
    yield
    hook.set_use_tensorrt(None)
