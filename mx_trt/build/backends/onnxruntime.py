"""ONNX Runtime on the CPU: the embedded default backend for ``mx.cpu()`` contexts.

Inputs and outputs are bound with ``IOBinding`` to the NDArrays' own memory, so
ONNX Runtime reads MXNet's buffers and writes its results straight into them.
Batch profiles are honoured as on TensorRT: a batch-dynamic model runs any batch
inside its ranges and refuses the others, so behaviour is the same on the CPU.

Stored engines are ONNX Runtime's own optimized model (ORT format), which loads
without re-running the graph optimizations; models with external data (over
protobuf's limit) are stored as ONNX plus their data file.
"""
from __future__ import annotations

import logging
import os
import platform
import shutil
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from mx_trt.cache.locking import make_work_dir
from mx_trt.errors import EngineBuildError, EngineRunError
from mx_trt.export.subgraph import save_model
from mx_trt.settings import env_int
from mx_trt.build.backends.base import (
    Backend,
    BatchRange,
    Buffer,
    BuildOptions,
    Engine,
    TensorSpec,
    specs_json,
    tensor_specs,
)

logger = logging.getLogger(__name__)


def _threads() -> int:
    """``MXNET_TENSORRT_ORT_THREADS``: threads per engine, 0 (default) for ONNX Runtime's own choice."""
    return env_int("MXNET_TENSORRT_ORT_THREADS", 0, 0, 1024)


def _session_options() -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = _threads()
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return so


class OrtEngine(Engine):
    """One ONNX Runtime session bound to raw host buffers."""

    def __init__(self, session: Any, inputs: List[TensorSpec], outputs: List[TensorSpec], name: str,
                 batch_ranges: Sequence[BatchRange] = (), artifacts: Optional[str] = None,
                 artifact_format: str = "") -> None:
        self.session = session
        self.inputs = inputs
        self.outputs = outputs
        self.name = name
        self.batch_ranges = list(batch_ranges)
        self._artifacts = artifacts
        self._artifact_format = artifact_format
        self._binding: Any = None
        self._bound_key: Optional[Tuple[Any, ...]] = None

    def run(self, inputs: Sequence[Buffer], outputs: Sequence[Buffer]) -> None:
        key = tuple((b.ptr, b.shape) for b in inputs) + tuple((b.ptr, b.shape) for b in outputs)
        if key != self._bound_key:
            # Buffers of a bound executor are stable, so this runs once per executor.
            self.check_buffers(self.name, inputs, outputs)
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

    def save(self, directory: str) -> Dict[str, Any]:
        art = self._artifacts
        if not art or not os.path.isdir(art):
            raise NotImplementedError("this engine was built without keeping its optimized model")
        for f in os.listdir(art):
            shutil.move(os.path.join(art, f), os.path.join(directory, f))
        shutil.rmtree(art, ignore_errors=True)
        self._artifacts = None
        return {
            "format": self._artifact_format,
            "file": "model.ort" if self._artifact_format == "ort" else "model.onnx",
            "inputs": specs_json(self.inputs),
            "outputs": specs_json(self.outputs),
            "batch_ranges": [list(r) for r in self.batch_ranges],
        }

    def __del__(self) -> None:
        art = getattr(self, "_artifacts", None)
        if art:
            shutil.rmtree(art, ignore_errors=True)


class OnnxRuntimeBackend(Backend):
    """Builds :class:`OrtEngine` s with the CPU execution provider."""

    name = "onnxruntime"
    tensor_dtypes = ("float32", "float16", "float64", "int8", "uint8", "int32", "int64", "bool")

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

    def device_signature(self, device_id: int) -> str:
        # Optimized ORT-format models may hold CPU-specific kernels (NCHWc layouts).
        model = ""
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                for line in f:
                    if line.startswith("model name"):
                        model = line.split(":", 1)[1].strip()
                        break
        except OSError:
            pass
        return f"{platform.system()}-{platform.machine()}-{model}"

    def build(self, exported: Any, options: BuildOptions) -> Engine:
        import onnxruntime as ort

        so = _session_options()
        keep = bool(options.extra.get("keep_artifacts"))
        # Under the plan cache's tmp/ when given (swept if this process dies), else named by pid.
        art = make_work_dir("mx_trt_ort_", options.extra.get("work_dir"))
        fmt = ""
        try:
            if exported.external:
                # Past protobuf's limit: ORT reads the model and its data from files.
                path = save_model(exported, os.path.join(art, "model.onnx"))
                session = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
                fmt = "onnx"
            else:
                if keep:
                    so.optimized_model_filepath = os.path.join(art, "model.ort")
                    so.add_session_config_entry("session.save_model_format", "ORT")
                    fmt = "ort"
                session = ort.InferenceSession(exported.model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        except Exception as exc:
            shutil.rmtree(art, ignore_errors=True)
            logger.error("ONNX Runtime could not build %s: %s", options.name, exc)
            raise EngineBuildError(f"{options.name}: ONNX Runtime could not build the engine: {exc}") from exc
        if not keep:  # the session holds everything it needs
            shutil.rmtree(art, ignore_errors=True)
            art, fmt = "", ""
        ranges = list(options.extra.get("batch_ranges") or []) if exported.batch_dim else []
        return OrtEngine(session, [TensorSpec(*s) for s in exported.input_specs],
                         [TensorSpec(*s) for s in exported.output_specs], options.name, ranges, art or None, fmt)

    def load(self, meta: Mapping[str, Any], directory: str, options: BuildOptions) -> Engine:
        import onnxruntime as ort

        path = os.path.join(directory, str(meta["file"]))
        try:
            session = ort.InferenceSession(path, _session_options(), providers=["CPUExecutionProvider"])
        except Exception as exc:
            raise EngineBuildError(f"{options.name}: ONNX Runtime could not load the stored engine {path}: {exc}") from exc
        ranges = [tuple(int(x) for x in r) for r in meta.get("batch_ranges", [])]
        return OrtEngine(session, tensor_specs(meta["inputs"]), tensor_specs(meta["outputs"]), options.name,
                         ranges)  # type: ignore[arg-type]
