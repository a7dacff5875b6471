"""The library type-checks with mypy, the TensorRT runtime path against tensorrt-stubs."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_mypy_is_clean():
    assert importlib.util.find_spec("mypy") is not None, "mypy is missing: run `make test`, which installs it"
    proc = subprocess.run([sys.executable, "-m", "mypy", "mx_trt", "passes"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]


def test_tensorrt_stubs_are_installed():
    # Without the stubs, mypy would treat every tensorrt name as Any and check nothing.
    import site

    dirs = site.getsitepackages()
    assert any(os.path.isdir(os.path.join(d, "tensorrt-stubs")) for d in dirs), (
        "tensorrt-stubs are not installed: run `make test` (requirements/typestubs.txt)")
