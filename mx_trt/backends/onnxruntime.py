"""ONNX Runtime on the CPU: the embedded default backend for ``mx.cpu()`` contexts.

Inputs and outputs are bound with ``IOBinding`` to the NDArrays' own memory, so
ONNX Runtime reads MXNet's buffers and writes its results straight into them.
"""
from __future__ import annotations

import logging
import os
import tempfile
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import EngineBuildError, EngineRunError, ShapeError
from .base import Backend, Buffer, BuildOptions, Engine, TensorSpec

logger = logging.getLogger(__name__)


def _threads() -> int:
    raw = os.environ.get("MXNET_TENSORRT_ORT_THREADS", "").strip()
    return int(raw) if raw else 0


class OrtEngine(Engine):
    """One ONNX Runtime session bound to raw host buffers."""

    def __init__(self, session: Any, inputs: List[TensorSpec], outputs: List[TensorSpec], name: str) -> None:
        self.session = session
        self.inputs = inputs
        self.outputs = outputs
        self.name = name
        self._binding: Any = None
        self._bound_key: Optional[Tuple[Any, ...]] = None

    def run(self, inputs: Sequence[Buffer], outputs: Sequence[Buffer]) -> None:
        if len(inputs) != len(self.inputs) or len(outputs) != len(self.outputs):
            raise ShapeError(
                f"{self.name}: engine takes {len(self.inputs)} inputs / {len(self.outputs)} outputs, "
                f"got {len(inputs)} / {len(outputs)}"
            )
        key = tuple((b.ptr, b.shape) for b in inputs) + tuple((b.ptr, b.shape) for b in outputs)
        if key != self._bound_key:
            # Buffers of a bound executor are stable, so this runs once per executor.
            for spec, b in zip(self.inputs, inputs):
                if b.shape != spec.shape or b.dtype != spec.dtype:
                    raise ShapeError(f"{self.name}: input {spec.name!r} expects {spec.shape} {spec.dtype}, got {b.shape} {b.dtype}")
            for spec, b in zip(self.outputs, outputs):
                if b.shape != spec.shape or b.dtype != spec.dtype:
                    raise ShapeError(f"{self.name}: output {spec.name!r} expects {spec.shape} {spec.dtype}, got {b.shape} {b.dtype}")
            binding = self.session.io_binding()
            for spec, b in zip(self.inputs, inputs):
                binding.bind_input(spec.name, "cpu", 0, np.dtype(b.dtype), list(b.shape), b.ptr)
            for spec, b in zip(self.outputs, outputs):
                binding.bind_output(spec.name, "cpu", 0, np.dtype(b.dtype), list(b.shape), b.ptr)
            self._binding = binding
            self._bound_key = key
        try:
            self.session.run_with_iobinding(self._binding)
        except Exception as exc:  # onnxruntime raises its own exception types
            raise EngineRunError(f"{self.name}: ONNX Runtime failed: {exc}") from exc


class OnnxRuntimeBackend(Backend):
    """Builds :class:`OrtEngine` s with the CPU execution provider."""

    name = "onnxruntime"

    @classmethod
    def unavailable_reason(cls) -> Optional[str]:
        try:
            import onnxruntime  # noqa: F401
        except ImportError as exc:
            return f"onnxruntime is not installed ({exc}); install with USE_ONNXRUNTIME=1"
        return None

    def version(self) -> str:
        import onnxruntime

        return f"onnxruntime-{onnxruntime.__version__}"

    def build(self, exported: Any, options: BuildOptions) -> Engine:
        import onnxruntime as ort
        from onnx import helper

        from ..onnx_export import save_model

        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.intra_op_num_threads = _threads()
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        model = exported.model
        try:
            if exported.external:
                with tempfile.TemporaryDirectory(prefix="mx_trt_") as tmp:
                    path = save_model(exported, os.path.join(tmp, f"{options.name}.onnx"))
                    session = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
            else:
                session = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        except Exception as exc:
            logger.error("ONNX Runtime could not build %s: %s", options.name, exc)
            raise EngineBuildError(f"{options.name}: ONNX Runtime could not build the engine: {exc}") from exc

        def specs(values: Sequence[Any]) -> List[TensorSpec]:
            out = []
            for v in values:
                t = v.type.tensor_type
                shape = tuple(int(d.dim_value) for d in t.shape.dim)
                out.append(TensorSpec(v.name, shape, np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type)).name))
            return out

        return OrtEngine(session, specs(model.graph.input), specs(model.graph.output), options.name)
