"""Running TensorRT plans: deserialization on a device, execution contexts, and the runner of one executor.

A :class:`TrtRunner` owns one ``IExecutionContext`` (made by the backend's
flavour: plain, or with TensorRT-RTX's runtime config) and one CUDA stream.
A run selects the optimization profile, sets input shapes and checks the
output shapes the context computes against MXNet's buffers, binds the
buffers' device pointers, and enqueues with ``execute_async_v3``; profile,
shapes and addresses are set again only when they change.
"""
from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any, ContextManager, Dict, List, Optional, Protocol, Sequence, Tuple

from mx_trt.errors import EngineRunError, ShapeError
from mx_trt.builder.backends.base import Buffer, Shape, TensorSpec
from mx_trt.builder.backends.plugin_runs import watching
from mx_trt.builder.backends.tensorrt import cuda
from mx_trt.builder.backends.tensorrt.caches import RuntimeCache
from mx_trt.builder.backends.tensorrt.flavours import TrtBackendInfo, flavour_of
from mx_trt.builder.backends.tensorrt.logs import logger_for
from mx_trt.builder.backends.tensorrt.shapes import context_output_shapes

if TYPE_CHECKING:
    import tensorrt as trt

logger = logging.getLogger(__name__)

_NP_OF_TRT = {"FLOAT": "float32", "HALF": "float16", "BF16": "bfloat16", "INT8": "int8", "INT32": "int32",
              "INT64": "int64", "BOOL": "bool", "UINT8": "uint8"}


def deserialize_plan(mod: Any, label: str, plan: bytes, device_id: int,
                     subgraph: str) -> Tuple["trt.Runtime", "trt.ICudaEngine"]:
    """A ``Runtime`` and the ``ICudaEngine`` of ``plan`` on the current device (``device_id`` for messages).

    Raises:
        EngineRunError: TensorRT cannot deserialize it (the message carries its
            log and, where the module has it, the engine validity diagnostics).
    """
    log = logger_for(mod)
    with log.capture() as cap:
        runtime: trt.Runtime = mod.Runtime(log)
        engine: Optional[trt.ICudaEngine] = runtime.deserialize_cuda_engine(plan)
    if engine is None:
        detail = "; ".join(cap.lines) or "no message"
        check = getattr(runtime, "get_engine_validity", None)
        if check is not None:
            with contextlib.suppress(Exception):
                validity, diagnostics = check(plan)
                detail += f"; engine validity: {getattr(validity, 'name', validity)} (diagnostics flags {int(diagnostics)})"
        raise EngineRunError(f"{subgraph}: {label} could not deserialize the engine on device "
                             f"{device_id} (built for another GPU or version?): {detail}")
    return runtime, engine


def check_io(mod: Any, engine: "trt.ICudaEngine", inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec],
             subgraph: str) -> None:
    """The deserialized engine has the described input and output tensors, with their dtypes.

    Raises:
        EngineRunError: a tensor is missing, of the other kind, or of another dtype.
    """
    io: Dict[str, Tuple[Any, str]] = {}
    for i in range(engine.num_io_tensors):
        n = engine.get_tensor_name(i)
        io[n] = (engine.get_tensor_mode(n), _NP_OF_TRT.get(engine.get_tensor_dtype(n).name, engine.get_tensor_dtype(n).name))
    for specs, mode in ((inputs, mod.TensorIOMode.INPUT), (outputs, mod.TensorIOMode.OUTPUT)):
        for t in specs:
            got = io.get(t.name)
            if got is None or got[0] != mode:
                raise EngineRunError(f"{subgraph}: the deserialized engine has no {mode.name.lower()} tensor {t.name!r} "
                                     f"(it has {sorted(io)})")
            if got[1] != t.dtype:
                raise EngineRunError(f"{subgraph}: tensor {t.name!r} is {got[1]} in the engine, {t.dtype} in its description")


class RunnableEngine(Protocol):
    """What a runner needs of its engine (:class:`~.engine.TrtEngine`)."""

    @property
    def name(self) -> str: ...

    @property
    def backend(self) -> TrtBackendInfo: ...

    @property
    def inputs(self) -> List[TensorSpec]: ...

    @property
    def outputs(self) -> List[TensorSpec]: ...

    @property
    def dynamic(self) -> bool: ...

    @property
    def device_id(self) -> int: ...

    @property
    def specialization(self) -> str: ...

    @property
    def runtime_cache_path(self) -> Optional[str]: ...

    @property
    def run_lock(self) -> ContextManager[Any]: ...

    def select_profile(self, shapes: Sequence[Shape]) -> int: ...

    def _deserialized(self) -> "trt.ICudaEngine": ...


class TrtRunner:
    """One execution context and one CUDA stream of an engine (one per executor).

    Not thread-safe by itself; the fused operator runs one forward at a time.
    Contexts of one engine exclude each other through the engine's ``run_lock``.

    Attributes:
        engine: The engine it runs.
        device_id: The device of the context (-1 until the first run).
        run_count: Completed runs.
    """

    def __init__(self, engine: RunnableEngine) -> None:
        self.engine = engine
        self.device_id = -1
        self._context: Optional[trt.IExecutionContext] = None
        self._stream: Optional[cuda.Stream] = None
        self._runtime_config: Any = None
        self._runtime_cache: Optional[RuntimeCache] = None
        self._profile = -1
        self._shapes: Optional[List[Shape]] = None
        self._out_shapes: List[Shape] = []
        self._addresses: Optional[Tuple[int, ...]] = None
        self._cache_dirty = False
        self.run_count = 0

    def _ensure(self) -> Tuple["trt.IExecutionContext", cuda.Stream]:
        """The context and stream, created on the engine's device at the first run."""
        if self._context is not None and self._stream is not None:
            return self._context, self._stream
        eng = self.engine
        engine = eng._deserialized()
        self.device_id = eng.device_id
        cuda.set_device(self.device_id)
        mod = eng.backend.module()
        with logger_for(mod).capture() as cap:
            parts = flavour_of(eng.backend.rtx).create_context(mod, engine, eng.specialization, eng.runtime_cache_path,
                                                               eng.name)
        if parts.context is None:
            raise EngineRunError(f"{eng.name}: could not create an execution context: {'; '.join(cap.lines) or 'no message'}")
        self._runtime_config = parts.runtime_config  # the context refers to it: kept alive as long
        self._runtime_cache = parts.runtime_cache
        self._stream = cuda.Stream(self.device_id)
        self._context = parts.context
        return parts.context, self._stream

    def save_runtime_cache(self) -> None:
        """Write the RTX runtime cache to ``runtime_cache_path`` (after new shapes compiled kernels)."""
        if self._runtime_cache is not None and self._runtime_cache.save():
            self._cache_dirty = False

    def _check_buffers(self, inputs: Sequence[Buffer], outputs: Sequence[Buffer]) -> None:
        eng = self.engine
        if len(inputs) != len(eng.inputs) or len(outputs) != len(eng.outputs):
            raise ShapeError(f"{eng.name}: engine takes {len(eng.inputs)} inputs / {len(eng.outputs)} outputs, "
                             f"got {len(inputs)} / {len(outputs)}")
        for spec, b in zip(list(eng.inputs) + list(eng.outputs), list(inputs) + list(outputs)):
            if b.dtype != spec.dtype:
                raise ShapeError(f"{eng.name}: tensor {spec.name!r} is {spec.dtype}, got a {b.dtype} buffer")

    def run(self, inputs: Sequence[Buffer], outputs: Sequence[Buffer]) -> None:
        """Run the engine on device buffers, synchronously.

        Raises:
            ShapeError: counts, shapes or dtypes do not fit the engine.
            EngineRunError: a host buffer, a wrong device, or TensorRT failed.
            BackendUnavailableError: no CUDA device.
        """
        eng = self.engine
        self._check_buffers(inputs, outputs)
        shapes = [tuple(int(d) for d in b.shape) for b in inputs]
        profile = eng.select_profile(shapes)
        with eng.run_lock:
            context, stream = self._ensure()
            for spec, b in zip(list(eng.inputs) + list(eng.outputs), list(inputs) + list(outputs)):
                if b.device_id != self.device_id:
                    where = "host memory" if b.device_id < 0 else f"device {b.device_id}"
                    raise EngineRunError(f"{eng.name}: tensor {spec.name!r} is in {where}; the engine runs on device {self.device_id}")
            cuda.set_device(self.device_id)  # MXNet's worker threads may have another device current
            self._bind(context, stream, profile, shapes, inputs, outputs)
            # MXNet computed the inputs with kernels on its own streams, and its
            # engine may call this operator before those kernels have finished;
            # our stream is not ordered after MXNet's (and a custom operator is
            # given no handle to MXNet's stream). Waiting for the whole device
            # is the one ordering that is always right.
            cuda.device_synchronize()
            with logger_for(eng.backend.module()).capture() as cap, watching() as plugins:
                ok = context.execute_async_v3(stream.handle)
            if plugins.faults:
                stream.synchronize()
                plugins.raise_fault(eng.name)  # a host-function plugin failed: its message, not TensorRT's
            if not ok:
                raise EngineRunError(f"{eng.name}: execute_async_v3 failed: {'; '.join(cap.lines) or 'no message'}")
            # Outputs must be complete before MXNet's next kernels read them.
            stream.synchronize()
            self.run_count += 1
        if self._cache_dirty:
            self.save_runtime_cache()

    def _bind(self, context: "trt.IExecutionContext", stream: cuda.Stream, profile: int, shapes: List[Shape],
              inputs: Sequence[Buffer], outputs: Sequence[Buffer]) -> None:
        """Set what changed since the last run: profile, input shapes (output shapes checked), addresses.

        Raises:
            ShapeError: an output buffer's shape is not what the engine computes.
            EngineRunError: TensorRT refused the profile or an address.
        """
        eng = self.engine
        if eng.dynamic and profile != self._profile:
            if not context.set_optimization_profile_async(profile, stream.handle):
                raise EngineRunError(f"{eng.name}: TensorRT refused optimization profile {profile}")
            self._profile = profile
            self._shapes = None
            self._addresses = None
        if shapes != self._shapes:
            in_names = [t.name for t in eng.inputs]
            out_names = [t.name for t in eng.outputs]
            self._out_shapes = context_output_shapes(context, in_names, shapes, out_names, eng.name)
            self._shapes = shapes
            self._cache_dirty = True
        for spec, b, want in zip(eng.outputs, outputs, self._out_shapes):
            if tuple(b.shape) != tuple(want):
                raise ShapeError(f"{eng.name}: output {spec.name!r} has shape {want} for these inputs, "
                                 f"the MXNet buffer is {tuple(b.shape)}")
        addresses = tuple(b.ptr for b in inputs) + tuple(b.ptr for b in outputs)
        if addresses != self._addresses:
            for spec, b in zip(list(eng.inputs) + list(eng.outputs), list(inputs) + list(outputs)):
                if not context.set_tensor_address(spec.name, b.ptr):
                    raise EngineRunError(f"{eng.name}: TensorRT refused the address of tensor {spec.name!r}")
            self._addresses = addresses

    def close(self) -> None:
        """Save the runtime cache, drop the context and destroy the stream."""
        if self._context is not None:
            self.save_runtime_cache()
        self._context = None
        self._runtime_config = None
        self._runtime_cache = None
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()
