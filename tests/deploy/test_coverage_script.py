"""``benchmarks/export_coverage.py``, the README's table of which models export whole, keeps running."""
from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_one_whole_model_and_one_refusal():
    env = {k: v for k, v in os.environ.items() if not k.startswith("MXNET_") and k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "export_coverage.py"),
                           "--only", "resnet18_v1,islands (synthetic)"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [ln for ln in proc.stdout.splitlines() if ln.startswith("| ")]
    whole = next(r for r in rows if r.startswith("| resnet18_v1 |")).split("|")
    assert whole[4].strip() == "yes" and whole[5].strip() == "yes" and float(whole[6]) < 1e-4
    islands = next(r for r in rows if r.startswith("| islands (synthetic) |")).split("|")
    assert islands[4].strip() == "no" and "24: Custom x24: no converter for custom operator user_square" in islands[7]
