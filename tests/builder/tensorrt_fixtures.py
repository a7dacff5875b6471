"""What the TensorRT / TensorRT-RTX backend tests share: the RTX module, tiny graphs exported as a bind exports them.

``test_tensorrt_backend.py`` (selection, settings, profiles, shapes, parser
errors, RTX builds) and ``test_tensorrt_runner.py`` (the runner against fake
TensorRT objects, and the GPU) import from here.
"""
from __future__ import annotations

import mxnet as mx
import pytest

from mx_trt.builder.backends import BuildOptions
from mx_trt.builder.backends.tensorrt import TensorRTRTXBackend, cuda
from mx_trt.passes.fuse import boundary
from mx_trt.pipeline.plan import analyze
from mx_trt.pipeline.request import BindRequest
from mx_trt.export.subgraph import export_subgraph
from mx_trt.settings import Settings
from tests.harness.bindcheck import conv_relu
from tests.harness.mxcheck import random_params

#: fp32 on a GPU: TensorRT may use TF32 for fp32 convolutions and matrix products on Ampere and later.
GPU_RTOL, GPU_ATOL = 1e-3, 1e-4


@pytest.fixture
def rtx():
    """The TensorRT-RTX module; missing it fails the test (it is part of `make test`)."""
    reason = TensorRTRTXBackend.build_unavailable_reason()
    if reason is not None:
        pytest.fail(f"TensorRT-RTX is required by the test suite and is missing: {reason}. "
                    "`make test` installs it (USE_TENSORRT_RTX=1 in config.mk).")
    return TensorRTRTXBackend.module()


def export_all(sym, shapes, dynamic_batch=None):
    """Every subgraph of ``sym`` exported the way a bind would, weights from seeded random values."""
    args, aux = random_params(sym, shapes)
    params = {**args, **aux}
    plan = analyze(BindRequest(sym, shapes, params, Settings.from_env(), None))
    absorbed = plan.absorbed_ids()
    weights = {k: v.asnumpy() for k, v in params.items()}
    out = []
    for sg in plan.partition.subgraphs:
        ins, outs = boundary(plan.graph, sg.nodes, absorbed)
        out.append(export_subgraph(plan.graph, sg.nodes, ins, outs, weights, name=sg.name, dynamic_batch=dynamic_batch))
    return out


SHAPES = {"data": (2, 3, 8, 8)}


def tiny(dynamic=False):
    """data -> a_conv -> a_relu -> fc (one subgraph)."""
    s = mx.sym.FullyConnected(conv_relu(mx.sym.var("data"), "a"), num_hidden=5, name="fc")
    (ex,) = export_all(s, SHAPES, "batch" if dynamic else None)
    return ex


def build(ex, **extra):
    return TensorRTRTXBackend().build(ex, BuildOptions(name=ex.model.graph.name, extra=extra))


def no_gpu_here() -> bool:
    return cuda.unavailable_reason() is not None


class FakeDims:
    """A TensorRT Dims whose nbDims is -1 (its __len__ returns -1)."""

    def __len__(self):
        return -1

    def __getitem__(self, i):
        raise IndexError(i)
