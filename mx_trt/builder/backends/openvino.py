"""OpenVINO on the CPU: a second CPU backend beside ONNX Runtime (``backend='openvino'``).

The exported ONNX subgraph is read by OpenVINO's ONNX front end and compiled
for its CPU plugin. The large initializers, which the exporter keeps out of the
protobuf as numpy arrays (views over the caller's NDArrays where used as they
are), never go through a file: the model is read with them declared as graph
inputs, and each of those parameters is then replaced by an OpenVINO constant
over the array's own memory (``shared_memory=True``). The CPU plugin makes its
own copies of what it reorders when it compiles.

Compiled for latency (one stream), with as many threads as the process may use
(CPU affinity and a cgroup CPU quota), ``float32`` inference precision for float
engines: OpenVINO's default on CPUs it believes have bf16 is ``bf16``, which
differs from MXNet by far more than float32 rounding, unless bf16 was asked for
(``precision='bf16'``, the float32 graph computed in bfloat16). An fp16 engine is the fp16
graph the exporter writes; it computes in float16 where the CPU has it, else in
float32 over the float16 weights. INT8 graphs (Q/DQ pairs) run as int8 by
OpenVINO's low-precision transformations.

Inputs and outputs are ``ov.Tensor`` s over the NDArrays' memory, so OpenVINO
reads MXNet's buffers and writes its results into them. A batch-dynamic export
is compiled with dimension 0 bounded by the batch profiles.

A static engine of batch 2 or more, with two threads or more, whose graph
computes each sample on its own (:func:`mx_trt.export.separable.batch_split`),
runs its batch as chunks on several one-thread streams, each stream taking the
next chunk when done (:class:`SplitRunner`). A latency engine splits each
operator's work evenly over its threads, so another process holding one core
makes every operator wait for the thread on that core; chunks go to whichever
stream is free. Measured on a 2-core AMD EPYC with AVX2, OpenVINO at two
threads, batch 8, quiet / one core busy: ResNet-50 739 / 1145 ms as one stream,
606 / 877 ms as two streams of batch-1 chunks; MobileNetV2 58 / 127 against
51 / 89 ms (``benchmarks/bench_cpu_backends.py --one-stream``).

Stored engines are OpenVINO's compiled model (``CompiledModel.export_model``),
weights included: a warm bind imports it and compiles nothing. The plan-cache
key holds the OpenVINO version and the CPU's model name and instruction sets.
"""
from __future__ import annotations

import ctypes
import logging
import os
import platform
import threading
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from mx_trt.builder.cpus import cpu_info, engine_threads
from mx_trt.errors import EngineBuildError, EngineRunError
from mx_trt.export.int8 import Int8Style
from mx_trt.export.spec import OpSpec
from mx_trt.passes.ir import BatchRange
from mx_trt.builder.backends.chain import FORMAT as CHAIN
from mx_trt.builder.backends.chain import build_chain, load_chain
from mx_trt.builder.backends.chunks import chunk_layout, run_chunks, split_plan, streams_at_load
from mx_trt.builder.backends.base import (
    Backend,
    Buffer,
    BuildOptions,
    Engine,
    TensorSpec,
    specs_json,
    tensor_specs,
    trim_heap,
)

logger = logging.getLogger(__name__)

#: The stored-engine format this version writes and reads.
FORMAT = "openvino-compiled"
#: The file of a stored engine.
BLOB = "model.blob"
#: MXNet operators whose results depend on the order of tied values: indices of a sort or of a maximum, and
#: the detection post-processing whose converters sort scores (TopK) and pick boxes (ArgMax). ONNX's TopK and
#: ArgMax/ArgMin give the lowest index first, as MXNet and ONNX Runtime do; OpenVINO 2024.6's CPU plugin does
#: not (seen: TopK over a row of zeros and ones, ArgMax over rows with repeated maxima, SSD's box_nms), and
#: random or quantized data tie often. They stay native (or with another backend). ``topk`` returning only
#: values is unaffected.
TIE_ORDER_OPS = frozenset({"argsort", "argmax", "argmax_channel", "argmin", "topk",
                           "_contrib_box_nms", "_contrib_box_non_maximum_suppression", "_contrib_MultiBoxDetection",
                           "_npx_multibox_detection", "_contrib_Proposal", "_contrib_MultiProposal"})

_core: Any = None
_core_lock = threading.Lock()


def _ov_core() -> Any:
    """The process's one ``ov.Core`` (creating one loads the plugins' registry)."""
    global _core
    with _core_lock:
        if _core is None:
            import openvino as ov

            _core = ov.Core()
        return _core


def compile_config(fp16: bool, threads: int, bf16: bool = False) -> Dict[str, Any]:
    """CPU plugin properties of an engine: latency, ``threads``, and the inference precision.

    float32, unless the engine is fp16 and the CPU computes in float16 (OpenVINO
    reports ``FP16`` among its optimization capabilities), or it is bf16 (asked for only
    when the CPU reports ``BF16``: :meth:`OpenVinoBackend.precision_reason`). OpenVINO's
    bf16 keeps the float32 graph and computes its convolutions and matrix products in
    bfloat16 (AVX512-BF16, AMX); inputs and outputs stay float32.
    """
    precision = "f32"
    if bf16:
        precision = "bf16"
    elif fp16 and "FP16" in _cpu_capabilities():
        precision = "f16"
    return {
        "PERFORMANCE_HINT": "LATENCY",
        "INFERENCE_NUM_THREADS": int(threads),
        "INFERENCE_PRECISION_HINT": precision,
        # Threads are not pinned to cores, so that on a busy machine a thread whose core is
        # taken may run on another. Measured with the machine loaded (load average about 5
        # on 2 cores), interleaved: ResNet-50 batch 1 99.2 ms unpinned against 100.7 ms
        # pinned, MobileNetV2 batch 8 83.7 against 90.6 ms.
        "ENABLE_CPU_PINNING": False,
    }


def _cpu_capabilities() -> List[str]:
    """OpenVINO's ``OPTIMIZATION_CAPABILITIES`` of this CPU (``FP32``, ``BF16``, ``FP16``, ``INT8``...)."""
    return [str(c) for c in _ov_core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")]


def split_config(config: Mapping[str, Any], streams: int) -> Dict[str, Any]:
    """``config`` for ``streams`` streams sharing its threads (a batch split into chunks)."""
    out = dict(config)
    out.update({"PERFORMANCE_HINT": "THROUGHPUT", "NUM_STREAMS": int(streams)})
    return out


class SplitRunner:
    """Runs a batch of ``batch`` samples as chunks of ``sub`` on ``streams`` infer requests.

    Each request takes the next chunk when it is done with its last
    (:func:`~mx_trt.builder.backends.chunks.run_chunks`). Chunks are ``ov.Tensor`` s
    over slices of the caller's buffers (batch-major, so each slice is contiguous):
    no copies. OpenVINO releases the GIL while it infers. Not reentrant:
    one call at a time per engine, as for a latency engine's request.
    """

    def __init__(self, compiled: Any, batch: int, sub: int, streams: int) -> None:
        self.batch, self.sub = batch, sub
        self.requests = [compiled.create_infer_request() for _ in range(max(1, streams))]
        self._chunks: List[Tuple[List[Any], List[Any]]] = []

    def bind(self, ins: Sequence[np.ndarray], outs: Sequence[np.ndarray]) -> None:
        """Tensors over every chunk of the arrays (once per set of buffers)."""
        import openvino as ov

        self._chunks = [([ov.Tensor(a[i:i + self.sub], shared_memory=True) for a in ins],
                         [ov.Tensor(a[i:i + self.sub], shared_memory=True) for a in outs])
                        for i in range(0, self.batch, self.sub)]

    def run(self) -> None:
        chunks = self._chunks

        def stream(request: Any) -> Callable[[int], None]:
            def run(k: int) -> None:
                ins, outs = chunks[k]
                for i, t in enumerate(ins):
                    request.set_input_tensor(i, t)
                for i, t in enumerate(outs):
                    request.set_output_tensor(i, t)
                request.infer()
            return run

        run_chunks([stream(r) for r in self.requests], len(chunks))


def array_at(ptr: int, shape: Sequence[int], dtype: Any) -> np.ndarray:
    """A writeable numpy array over the memory at ``ptr`` (no copy); the memory's owner must outlive it."""
    dt = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64)) if len(shape) else 1
    raw = (ctypes.c_byte * (count * dt.itemsize)).from_address(ptr)
    return np.frombuffer(memoryview(raw), dtype=dt, count=count).reshape(tuple(shape))


def _host_array(b: Buffer) -> np.ndarray:
    """A numpy array over ``b``'s memory (no copy)."""
    return array_at(b.ptr, b.shape, b.dtype)


class OpenVinoEngine(Engine):
    """One compiled OpenVINO model and its infer request, bound to raw host buffers."""

    def __init__(self, compiled: Any, inputs: List[TensorSpec], outputs: List[TensorSpec], name: str,
                 batch_ranges: Sequence[BatchRange] = (), held: Any = None, config: Optional[Dict[str, Any]] = None,
                 split: Optional[Tuple[int, int]] = None) -> None:
        self.compiled = compiled
        #: ``(sub-batch, streams)`` of an engine that runs its batch in chunks (:class:`SplitRunner`), else ``None``.
        self.split = split
        self._split = SplitRunner(compiled, inputs[0].shape[0], *split) if split else None
        self.request = compiled.create_infer_request() if split is None else None
        # The arrays the compiled model may still read (weights it did not copy).
        self._held = held
        self.inputs = inputs
        self.outputs = outputs
        self.name = name
        self.batch_ranges = list(batch_ranges)
        self.config = dict(config or {})
        self._bound_key: Optional[Tuple[Any, ...]] = None
        self._out_arrays: List[np.ndarray] = []

    def run(self, inputs: Sequence[Buffer], outputs: Sequence[Buffer]) -> None:
        import openvino as ov

        key = tuple((b.ptr, b.shape) for b in inputs) + tuple((b.ptr, b.shape) for b in outputs)
        if key != self._bound_key:
            # Buffers of a bound executor are stable, so this runs once per executor.
            self.check_buffers(self.name, inputs, outputs)
            try:
                self._out_arrays = [_host_array(b) for b in outputs]
                if self._split is not None:
                    self._split.bind([_host_array(b) for b in inputs], self._out_arrays)
                else:
                    for i, b in enumerate(inputs):
                        self.request.set_input_tensor(i, ov.Tensor(_host_array(b), shared_memory=True))
                    for i, arr in enumerate(self._out_arrays):
                        self.request.set_output_tensor(i, ov.Tensor(arr, shared_memory=True))
            except Exception as exc:  # openvino raises RuntimeError for any refusal
                self._bound_key = None
                raise EngineRunError(f"{self.name}: OpenVINO refused the buffers: {exc}") from exc
            self._bound_key = key
        if self._split is not None:
            try:
                self._split.run()
            except Exception as exc:
                raise EngineRunError(f"{self.name}: OpenVINO failed on a chunk of the batch: {exc}") from exc
            return
        try:
            self.request.infer()
        except Exception as exc:
            raise EngineRunError(f"{self.name}: OpenVINO failed: {exc}") from exc
        for i, arr in enumerate(self._out_arrays):
            # The CPU plugin writes into the tensors set; should it have replaced one
            # (a dynamic output it reallocated), its result is copied over.
            got = self.request.get_output_tensor(i).data
            if got.ctypes.data != arr.ctypes.data:
                np.copyto(arr, got.reshape(arr.shape))

    def save(self, directory: str) -> Dict[str, Any]:
        try:
            blob = self.compiled.export_model()
        except Exception as exc:
            raise NotImplementedError(f"OpenVINO could not export the compiled model: {exc}") from exc
        with open(os.path.join(directory, BLOB), "wb") as f:
            f.write(blob)
        return {
            "format": FORMAT,
            "file": BLOB,
            "config": {k: v for k, v in self.config.items() if k != "INFERENCE_NUM_THREADS"},
            "inputs": specs_json(self.inputs),
            "outputs": specs_json(self.outputs),
            "batch_ranges": [list(r) for r in self.batch_ranges],
            "split": list(self.split) if self.split else None,
        }


class OpenVinoBackend(Backend):
    """Builds :class:`OpenVinoEngine` s with OpenVINO's CPU plugin."""

    name = "openvino"
    #: Unsigned activations and 7-bit weights, as for ONNX Runtime (on CPUs without VNNI,
    #: AVX2's ``vpmaddubsw`` saturates 16-bit sums); float biases, which OpenVINO's
    #: low-precision transformations fold themselves.
    int8_style = Int8Style(activation="uint8", residual="both", bias="float", reduce_range=True, pool=True)
    #: The CPU plugin computes float64 in float32 and int64 in int32: tensors of
    #: those types stay native rather than lose range or precision.
    tensor_dtypes = ("float32", "float16", "int8", "uint8", "int32", "bool")

    def supports(self, spec: OpSpec) -> Optional[str]:
        if spec.op in TIE_ORDER_OPS and not (spec.op == "topk" and spec.attrs.get("ret_typ", "indices") == "value"):
            return (f"{spec.op} sorts or picks by index, and OpenVINO's CPU plugin orders tied values otherwise "
                    "than MXNet (ONNX asks for the lowest index first)")
        return None

    @classmethod
    def unavailable_reason(cls) -> Optional[str]:
        try:
            import openvino  # noqa: F401
        except ImportError as exc:
            return f"openvino is not installed ({exc}); install with USE_OPENVINO=1 or pip install 'mx_trt[openvino]'"
        try:
            devices = _ov_core().available_devices
        except Exception as exc:  # a broken install: the plugins cannot be listed
            return f"openvino cannot list its devices: {exc}"
        if "CPU" not in devices:
            return f"openvino has no CPU device here (devices: {', '.join(devices) or 'none'})"
        return None

    def version(self) -> str:
        import openvino as ov

        # "2024.6.0-17404-4c0f47d2335-releases/2024/6": the build, without the slashes paths cannot hold.
        return "openvino-" + ov.get_version().replace("/", "_")

    def device_signature(self, device_id: int) -> str:
        # Compiled models hold kernels and weight layouts chosen for this CPU.
        model, isa = cpu_info()
        return f"{platform.system()}-{platform.machine()}-{model}-{isa}"

    def layout_for(self, shapes: Sequence[Tuple[int, ...]], dynamic: bool) -> str:
        return chunk_layout(shapes, dynamic)

    def precision_reason(self, precision: str) -> Optional[str]:
        """bf16 where OpenVINO's CPU plugin reports ``BF16`` (AVX512-BF16 or AMX), else why not."""
        if precision != "bf16":
            return None
        try:
            caps = _cpu_capabilities()
        except Exception as exc:  # an OpenVINO that cannot query its CPU plugin
            return f"OpenVINO cannot tell this CPU's capabilities: {exc}"
        if "BF16" not in caps:
            return f"this CPU has no bfloat16 arithmetic OpenVINO uses (its capabilities: {', '.join(caps)})"
        return None

    def build(self, exported: Any, options: BuildOptions) -> Engine:
        threads = int(options.extra.get("threads") or engine_threads())
        config = compile_config(options.fp16, threads, options.bf16)
        inputs = [TensorSpec(*s) for s in exported.input_specs]
        outputs = [TensorSpec(*s) for s in exported.output_specs]
        ranges = list(options.extra.get("batch_ranges") or []) if exported.batch_dim else []
        held = {n: np.ascontiguousarray(a) for n, a in exported.external.items()}
        # extra "split": False keeps one stream (benchmarks compare the two).
        split, onnx_model = split_plan(exported.model, _batch(inputs), ranges, threads, options.name) \
            if options.extra.get("split", True) else (None, exported.model)
        if split is None and options.extra.get("split", True) and not ranges and threads > 1 and _batch(inputs) > 1:
            chained = build_chain(self, exported, options, _batch(inputs), threads)
            if chained is not None:
                return chained
        if split is not None:
            config = split_config(config, split[1])
        try:
            model = read_model(onnx_model, held)
            _set_batch(model, [TensorSpec(s.name, (split[0],) + tuple(s.shape[1:]), s.dtype) if split else s
                               for s in inputs], ranges)
            compiled = _ov_core().compile_model(model, "CPU", config)
        except Exception as exc:  # openvino raises RuntimeError (and others) for what it cannot read
            # Logged by the caller with what follows (native, or another candidate of the measured rule).
            logger.info("OpenVINO could not build %s: %s", options.name, exc)
            raise EngineBuildError(f"{options.name}: OpenVINO could not build the engine: {exc}") from exc
        del model, onnx_model
        trim_heap()
        logger.debug("%s: OpenVINO engine compiled (%s)", options.name, config)
        return OpenVinoEngine(compiled, inputs, outputs, options.name, ranges, held, config, split)

    def load(self, meta: Mapping[str, Any], directory: str, options: BuildOptions) -> Engine:
        if meta.get("format") == CHAIN:
            return load_chain(self, meta, directory, options)
        if meta.get("format") != FORMAT:
            raise EngineBuildError(f"{options.name}: stored engine format {meta.get('format')!r} is not this version's")
        config = dict(meta.get("config") or {})
        # Threads follow this process, not the one that built the engine; so do a split engine's streams.
        threads = int(options.extra.get("threads") or engine_threads())
        config["INFERENCE_NUM_THREADS"] = threads
        inputs = tensor_specs(meta["inputs"])
        split: Optional[Tuple[int, int]] = None
        if meta.get("split"):
            try:
                split = streams_at_load(meta["split"], _batch(inputs), threads)
            except ValueError as exc:
                raise EngineBuildError(f"{options.name}: stored engine: {exc}") from exc
            config["NUM_STREAMS"] = split[1]
        path = os.path.join(directory, str(meta.get("file", BLOB)))
        try:
            with open(path, "rb") as f:
                blob = f.read()
            compiled = _ov_core().import_model(blob, "CPU", config)
        except Exception as exc:
            raise EngineBuildError(f"{options.name}: OpenVINO could not import the stored engine {path}: {exc}") from exc
        del blob
        ranges: List[BatchRange] = [(int(r[0]), int(r[1]), int(r[2])) for r in meta.get("batch_ranges", [])]
        return OpenVinoEngine(compiled, inputs, tensor_specs(meta["outputs"]), options.name, ranges, config=config,
                              split=split)


def read_model(model: Any, arrays: Mapping[str, np.ndarray]) -> Any:
    """An ``ov.Model`` of the ONNX ``model`` whose initializers in ``arrays`` are constants over those arrays.

    OpenVINO 2024's ONNX reader takes external data only from files, so those
    initializers become graph inputs for the reader, then each parameter is
    replaced by a constant sharing the array's memory (no copy). Where the
    reader does not accept that (it needs a value at conversion, or it makes no
    parameter of one), the model is read again with the initializers concerned
    embedded: a copy of those arrays, only then.

    Raises:
        RuntimeError: OpenVINO cannot read or convert the model.
    """
    try:
        ov_model, missing = _read(model, arrays, {})
    except RuntimeError as exc:
        logger.info("OpenVINO did not read the model with its weights as parameters (%s); embedding them",
                    str(exc).splitlines()[-1] if str(exc) else type(exc).__name__)
        ov_model, missing = _read(model, {}, arrays)
    if missing:
        logger.info("OpenVINO made no parameter of %d weight(s) (%s); embedding them", len(missing),
                    ", ".join(sorted(missing)[:3]))
        ov_model, missing = _read(model, {k: v for k, v in arrays.items() if k not in missing},
                                  {k: arrays[k] for k in missing})
        if missing:
            raise RuntimeError(f"initializers {sorted(missing)} did not become parameters of the OpenVINO model")
    return ov_model


def _read(model: Any, fed: Mapping[str, np.ndarray], embedded: Mapping[str, np.ndarray]) -> Tuple[Any, List[str]]:
    """Read ``model`` with the initializers in ``fed`` as shared constants, those in ``embedded`` copied in.

    Returns the model and the names of ``fed`` that did not become parameters (left in the model as inputs).
    """
    from onnx import ModelProto, helper, numpy_helper
    from openvino.runtime import opset13

    proto = ModelProto()
    proto.CopyFrom(model)
    inits = list(model.graph.initializer)  # the caller's protos, read only (external ones hold no bytes)
    del proto.graph.initializer[:]
    proto.graph.initializer.extend(numpy_helper.from_array(np.ascontiguousarray(embedded[t.name]), t.name)
                                   if t.name in embedded else t for t in inits if t.name not in fed)
    feeds = [t for t in inits if t.name in fed]
    proto.graph.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in feeds)
    ov_model = _ov_core().read_model(proto.SerializeToString())
    del proto
    # By tensor name too: the reader renames a parameter it folds a chain of Identity nodes into.
    params = {n: p for p in ov_model.get_parameters() for n in p.output(0).get_names()}
    params.update((p.get_friendly_name(), p) for p in ov_model.get_parameters())
    missing = [t.name for t in feeds if t.name not in params]
    if missing:
        return ov_model, missing
    for t in feeds:
        param = params[t.name]
        const = opset13.constant(_writeable(fed[t.name]), shared_memory=True)
        for target in list(param.output(0).get_target_inputs()):
            target.replace_source_output(const.output(0))
        ov_model.remove_parameter(param)
    ov_model.validate_nodes_and_infer_types()
    return ov_model, []


def _batch(inputs: Sequence[TensorSpec]) -> int:
    """Dimension 0 of the first input (0 without one)."""
    return int(inputs[0].shape[0]) if inputs and inputs[0].shape else 0


def _writeable(arr: np.ndarray) -> np.ndarray:
    """``arr``, or a writeable array over the same memory (OpenVINO shares only writeable arrays; it never writes
    to constants). The caller keeps ``arr`` alive as long as the result."""
    return arr if arr.flags.writeable else array_at(arr.ctypes.data, arr.shape, arr.dtype)


def _set_batch(model: Any, inputs: Sequence[TensorSpec], ranges: Sequence[BatchRange]) -> None:
    """Bound dimension 0 of every input by the profiles (dynamic) or fix the bound shapes (static)."""
    from openvino.runtime import Dimension, PartialShape

    ports = {name: port for port in model.inputs for name in port.get_names()}
    shapes = {}
    for spec in inputs:
        port = ports.get(spec.name)
        if port is None:
            raise RuntimeError(f"input {spec.name!r} is not an input of the OpenVINO model")
        dims = [Dimension(int(d)) for d in spec.shape]
        if ranges and dims:
            dims[0] = Dimension(min(r[0] for r in ranges), max(r[2] for r in ranges))
        shapes[port] = PartialShape(dims)
    if shapes:
        model.reshape(shapes)
