"""A serialized TensorRT / TensorRT-RTX engine: its plan, its description, its shapes, and its runners.

The plan is deserialized once per engine, on first use and on the device it
was built for (or the current one); a weight-stripped plan is refitted then
from its weights source (:mod:`.refit`). Each executor runs it through its own
:class:`~.runtime.TrtRunner`.
"""
from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence

from mx_trt.errors import BackendUnavailableError, EngineBuildError, EngineRunError, ShapeError
from mx_trt.builder.backends.base import Buffer, BuildOptions, Engine, Shape, tensor_specs
from mx_trt.builder.backends.tensorrt import cuda
from mx_trt.builder.backends.tensorrt.caches import replace_file
from mx_trt.builder.backends.tensorrt.flavours import TrtBackendInfo, rtx_specialization
from mx_trt.builder.backends.tensorrt.logs import logger_for
from mx_trt.builder.backends.tensorrt.meta import profiles_from_meta
from mx_trt.builder.backends.tensorrt.plugins import load_registered
from mx_trt.builder.backends.tensorrt.refit import WeightsSource, refit_engine, weight_stats
from mx_trt.builder.backends.tensorrt.runtime import TrtRunner, check_io, deserialize_plan
from mx_trt.builder.backends.tensorrt.shapes import batch_rule_output_shapes, context_output_shapes, select_profile

if TYPE_CHECKING:
    import tensorrt as trt


class TrtEngine(Engine):
    """A serialized TensorRT / TensorRT-RTX engine and what running it needs.

    Attributes:
        backend: The backend class that built it.
        plan: The serialized engine (what a plan cache stores).
        inputs / outputs: Specs at the bound shapes, in the fused node's order.
        profiles: The optimization profiles, ``[{input: (min, opt, max)}]``.
        batch_ranges: ``(min, opt, max)`` of dimension 0 per profile when the
            engine follows the batch rule, else empty.
        output_shape_rule: ``"static"``, ``"batch"`` (output dimension 0 follows
            the input batch) or ``"engine"`` (ask a deserialized engine).
        device_id: The device it was built for (-1: none given; runs on the current one).
        specialization: TensorRT-RTX's kernel specialization strategy at run time.
        runtime_cache_path: TensorRT-RTX's runtime cache file, or ``None``.
        run_lock: Held while a context of this engine enqueues and waits: contexts
            sharing an optimization profile must not run concurrently.
        stripped: The plan holds no weights: deserializing it refits them.
        refitted: Names of the weights the last refit set (empty before it).
    """

    def __init__(self, backend: TrtBackendInfo, plan: bytes, meta: Mapping[str, Any], options: BuildOptions,
                 weights: Optional[WeightsSource] = None) -> None:
        """An engine from its plan and description; ``weights`` feeds the refit of a stripped plan.

        The weights source is dropped once the refit has copied the weights to
        the device. Raises ``KeyError`` / ``TypeError`` / ``ValueError`` on malformed ``meta``.
        """
        self.backend = backend
        self.plan = bytes(plan)
        self._meta = dict(meta)
        self.name = str(meta.get("name") or options.name)
        self.stripped = bool(meta.get("stripped", False))
        self._weights = weights if self.stripped else None
        self.refitted: List[str] = []
        self.inputs = tensor_specs(meta["inputs"])
        self.outputs = tensor_specs(meta["outputs"])
        self.input_dims: Dict[str, Shape] = {str(m["name"]): tuple(int(d) for d in m["dims"]) for m in meta["inputs"]}
        self.profiles = profiles_from_meta(meta["profiles"])
        self.batch_ranges = [(int(r[0]), int(r[1]), int(r[2])) for r in meta.get("batch_ranges", [])]
        self.output_shape_rule = str(meta.get("output_shape_rule", "engine"))
        self.device_id = int(options.device_id if options.device_id >= 0 else meta.get("device_id", -1))
        extra = options.extra
        # The strategy is a run-time choice: the options given at load time win over the build's.
        explicit = bool(extra.get("rtx_specialization"))
        self.specialization = rtx_specialization(extra) if explicit else str(meta.get("rtx_specialization") or "lazy")
        self.runtime_cache_path: Optional[str] = extra.get("runtime_cache_path")
        self.dynamic = any(any(d < 0 for d in dims) for dims in self.input_dims.values())
        self.run_lock = threading.RLock()
        self._load_lock = threading.Lock()
        self._runtime: Optional[trt.Runtime] = None
        self._cuda_engine: Optional[trt.ICudaEngine] = None
        self._shape_context: Optional[trt.IExecutionContext] = None
        self._default_runner: Optional[TrtRunner] = None

    # -- description

    def meta(self) -> Dict[str, Any]:
        """JSON-serialisable description (:mod:`.meta`); with :attr:`plan`, all loading it needs."""
        return dict(self._meta)

    def save(self, directory: str) -> Dict[str, Any]:
        """Write the plan as ``engine.plan`` into ``directory``; return :meth:`meta` (with ``plan_file``)."""
        replace_file(os.path.join(directory, "engine.plan"), self.plan)
        meta = self.meta()
        meta["plan_file"] = "engine.plan"
        return meta

    # -- shapes

    def select_profile(self, shapes: Sequence[Shape]) -> int:
        """Index of the first optimization profile containing ``shapes`` (raises ``ShapeError``)."""
        return select_profile(self.profiles, [t.name for t in self.inputs], shapes, self.name)

    def covers(self, batch: int) -> bool:
        if not self.batch_ranges:
            return bool(self.inputs) and all(bool(t.shape) and t.shape[0] == batch for t in self.inputs)
        return any(lo <= batch <= hi for lo, _, hi in self.batch_ranges)

    def output_shapes(self, input_shapes: Sequence[Shape]) -> List[Shape]:
        """Output shapes for input shapes inside a profile (from the batch rule, or from the engine).

        Raises:
            ShapeError: no profile contains the shapes, or the output shapes
                cannot be known without a device.
        """
        got = [tuple(int(d) for d in s) for s in input_shapes]
        if len(got) != len(self.inputs):
            raise ShapeError(f"{self.name}: engine takes {len(self.inputs)} inputs, got {len(got)} shapes")
        profile = self.select_profile(got)
        if got == [t.shape for t in self.inputs]:
            return [t.shape for t in self.outputs]
        if self.output_shape_rule == "batch":
            return batch_rule_output_shapes(self.inputs, self.outputs, got, self.name)
        reason = cuda.unavailable_reason()
        if reason is not None:
            raise ShapeError(f"{self.name}: the output shapes for input shapes {got} come from the engine, "
                             f"which cannot be loaded here ({reason})")
        engine = self._deserialized()
        with self.run_lock:
            if self._shape_context is None:
                mod = self.backend.module()
                # Shape queries need no activation memory.
                self._shape_context = engine.create_execution_context(mod.ExecutionContextAllocationStrategy.USER_MANAGED)
            ctx = self._shape_context
            if self.dynamic and not ctx.set_optimization_profile_async(profile, 0):
                raise ShapeError(f"{self.name}: TensorRT refused optimization profile {profile}")
            return context_output_shapes(ctx, [t.name for t in self.inputs], got, [t.name for t in self.outputs], self.name)

    # -- running

    def _deserialized(self) -> "trt.ICudaEngine":
        """The ``ICudaEngine``, deserialized on first use on the build's device (or the current one).

        A stripped plan is refitted before it is used (:meth:`_refit`).

        Raises:
            BackendUnavailableError: no CUDA device.
            EngineRunError: TensorRT cannot deserialize the plan, its tensors
                differ from the description, or a stripped plan cannot be refitted.
        """
        with self._load_lock:
            if self._cuda_engine is not None:
                return self._cuda_engine
            reason = cuda.unavailable_reason()
            if reason is not None:
                raise BackendUnavailableError(f"{self.name}: a {self.backend.label} engine needs a CUDA device to run: {reason}")
            mod = self.backend.module()
            if self.device_id >= 0:
                cuda.set_device(self.device_id)
            else:
                self.device_id = cuda.current_device()
            load_registered(mod, self.backend.name, self.backend.label)  # plugin layers need their creators
            runtime, engine = deserialize_plan(mod, self.backend.label, self.plan, self.device_id, self.name)
            check_io(mod, engine, self.inputs, self.outputs, self.name)
            if self.stripped:
                self._refit(mod, engine)
            self._runtime = runtime
            self._cuda_engine = engine
            return engine

    def _refit(self, mod: Any, engine: "trt.ICudaEngine") -> None:
        """Give the deserialized stripped ``engine`` its weights from the weights source, then drop the source.

        Raises:
            EngineRunError: no weights source, it failed, or the refit failed (:func:`.refit.refit_engine`).
        """
        source = self._weights
        if source is None:
            raise EngineRunError(f"{self.name}: the stripped plan needs the weights to refit, and none were given "
                                 "(BuildOptions.extra['weights'])")
        try:
            weights = source()
        except Exception as exc:  # the caller's source: any failure means no weights, never a crash here
            raise EngineRunError(f"{self.name}: the weights source of the stripped plan failed: "
                                 f"{type(exc).__name__}: {exc}") from exc
        try:
            self.refitted = refit_engine(mod, engine, weights, logger_for(mod), self.name, self.backend.label)
        except EngineBuildError as exc:
            raise EngineRunError(str(exc)) from exc
        except Exception as exc:  # an API this TensorRT spells otherwise: a typed error (a rebuild at load), not a crash
            raise EngineRunError(f"{self.name}: {self.backend.label} could not refit the stripped plan: "
                                 f"{type(exc).__name__}: {exc}") from exc
        finally:
            del weights
        self._weights = None  # on the device now: the host arrays are the caller's again
        self._meta.update(weight_stats(mod, engine), refit_weights=sorted(self.refitted))

    def refit_now(self) -> None:
        """Deserialize (and refit) now, where a device can run the engine, so failures come before any forward.

        The builder calls it on a fresh stripped plan, :meth:`TensorRTBackend.load_engine`
        on a stored one: a plan that cannot be refitted is rebuilt rather than failing a forward.

        Raises:
            EngineBuildError: deserialization or refit failed.
            BackendUnavailableError: no CUDA device.
        """
        try:
            self._deserialized()
        except EngineRunError as exc:
            raise EngineBuildError(str(exc)) from exc

    def create_runner(self) -> TrtRunner:
        """A new execution context + stream for one executor (the fused GPU operator calls this)."""
        return TrtRunner(self)

    def run(self, inputs: Sequence[Buffer], outputs: Sequence[Buffer]) -> None:
        """Run once through a runner of its own (see :meth:`TrtRunner.run`)."""
        if self._default_runner is None:
            self._default_runner = self.create_runner()
        self._default_runner.run(inputs, outputs)
