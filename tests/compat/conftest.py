"""MXNet's TensorRT tests write their exported models and checkpoints to the working directory:
each ported test runs in a directory of its own."""
from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _in_own_directory(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
