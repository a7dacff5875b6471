"""What the export tests share: native MXNet outputs, and ONNX Runtime in a process without MXNet."""
from __future__ import annotations

import os
import subprocess
import sys
from typing import Any, Dict, Mapping, Optional

import mxnet as mx
import numpy as np

from mx_trt.frontends.hook import disabled

RUNNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mxfree_run.py")
#: fp32: the ONNX file against native MXNet.
RTOL, ATOL = 1e-4, 1e-5


def native(sym: Any, params: Mapping[str, Any], feeds: Mapping[str, np.ndarray],
           dtypes: Optional[Mapping[str, str]] = None) -> Dict[str, np.ndarray]:
    """MXNet's own outputs (the pass off), keyed by ``sym.list_outputs()``."""
    args = set(sym.list_arguments())
    params = {k: v if isinstance(v, mx.nd.NDArray) else mx.nd.array(v, dtype=v.dtype) for k, v in params.items()}
    with disabled():
        exe = sym.simple_bind(mx.cpu(), grad_req="null", type_dict=dict(dtypes) if dtypes else None,
                              **{k: v.shape for k, v in feeds.items()})
    exe.copy_params_from({k: v for k, v in params.items() if k in args},
                         {k: v for k, v in params.items() if k not in args}, allow_extra_params=True)
    for k, v in feeds.items():
        exe.arg_dict[k][:] = v
    exe.forward(is_train=False)
    return {n: o.asnumpy() for n, o in zip(sym.list_outputs(), exe.outputs)}


def run_without_mxnet(model: str, feeds: Mapping[str, np.ndarray], workdir: str) -> Dict[str, np.ndarray]:
    """Run ``model`` with ONNX Runtime in a child process that cannot import mxnet or mx_trt; outputs by name."""
    tag = str(len(os.listdir(workdir)))
    ins, outs = os.path.join(workdir, f"in{tag}.npz"), os.path.join(workdir, f"out{tag}.npz")
    np.savez(ins, **feeds)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, RUNNER, model, ins, outs], env=env, cwd=workdir, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, f"ONNX Runtime alone failed:\n{proc.stdout}\n{proc.stderr}"
    assert proc.stdout.startswith("ran "), proc.stdout
    with np.load(outs) as npz:
        return {k: npz[k] for k in npz.files}


def assert_close(got: np.ndarray, want: np.ndarray, rtol: float = RTOL, atol: float = ATOL) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
