"""ONNX Runtime on the CPU: the embedded default backend for ``mx.cpu()`` contexts.

Inputs and outputs are bound with ``IOBinding`` to the NDArrays' own memory, so
ONNX Runtime reads MXNet's buffers and writes its results straight into them.
Batch profiles are honoured as on TensorRT: a batch-dynamic model runs any batch
inside its ranges and refuses the others, so behaviour is the same on the CPU.

Weights are held once. The model handed to ONNX Runtime refers to every
large initializer by its address in memory (ONNX Runtime's in-memory external
data tag): the caller's NDArrays for weights used as they are, the exporter's
arrays for converted ones. ONNX Runtime then keeps only what it makes itself:
prepacked MatMul/Gemm/Conv weights and values its optimizers derive (BatchNorm
folded into Conv, NCHWc-reordered Conv weights, folded constants).

Stored engines hold no weights either: the optimized model (ONNX format) keeps
the derived values in ``model.data`` beside it, because they depend on the weights (the plan cache
key holds every weight's digest), and names the others, which are fed again from
the caller's arrays at load (``SessionOptions.add_initializer``, no copy) with
the graph optimizations off, since they ran before the model was stored. A
build that stores its engine runs that stored form too, so the first bind of a
model holds what later ones hold.

A static engine of batch 2 or more, with two threads or more, whose graph
computes each sample on its own and holds no plugin, runs its batch in chunks
(:mod:`mx_trt.builder.backends.chunks`): the session is built at the chunk's
batch with one intra-op thread, and every stream calls it at once, each with its
own ``IOBinding`` over its slice of the caller's buffers (``Run`` is thread-safe
and releases the GIL). An intra-op pool splits every operator evenly over its
threads and waits for the slowest; the chunks go to whichever stream is free.
Measured on a 2-core AMD EPYC with AVX2, ResNet-50 at batch 8, two threads, quiet /
one core busy: 604 / 1111 ms as one session of two threads, 562 / 860 ms as two
streams of batch-1 chunks.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import platform
import re
import shutil
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from mx_trt.builder.cpus import engine_threads
from mx_trt.cache.locking import make_work_dir
from mx_trt.errors import EngineBuildError, EngineRunError
from mx_trt.export.converters.detection import suppression_candidates
from mx_trt.export.converters.suppression import ROW_LOOP_MIN_K
from mx_trt.export.int8 import Int8Style
from mx_trt.export.plugins import Plugin, hold_plugin, model_plugins
from mx_trt.export.shapes import PluginShape
from mx_trt.export.spec import OpSpec
from mx_trt.export.subgraph import EXTERNAL_MIN_BYTES
from mx_trt.passes.ir import BatchRange
from mx_trt.builder.backends.chain import FORMAT as CHAIN
from mx_trt.builder.backends.chain import build_chain, load_chain
from mx_trt.builder.backends.chunks import Split, chunk_layout, model_at_batch, run_chunks, split_plan, \
    streams_at_load
from mx_trt.builder.backends.ort_plugins import plugins_named, register_plugins
from mx_trt.builder.backends.plugin_runs import watching
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


def _threads(extra: Mapping[str, Any]) -> int:
    """Threads per engine: ``extra["ort_threads"]`` (the bind's ``MXNET_TENSORRT_ORT_THREADS``), or the CPUs
    this process may use.

    ONNX Runtime's own default counts the machine's cores, whatever the process's
    affinity mask or its container's CPU quota (:func:`mx_trt.builder.cpus.engine_threads`).
    """
    return int(extra.get("ort_threads") or 0) or engine_threads()


#: ONNX Runtime's tag for external data that lives in memory: ``offset`` is the address.
MEM_TAG = "*/_ORT_MEM_ADDR_/*"
#: The location stored models give the initializers fed at load.
FED = "mx_trt.fed"
#: Engines over this many weight bytes read their weights in place, unpacked (no prepacked copy).
PREPACK_MAX_BYTES = 1 << 30
#: Engines over this many weight bytes are not stored (ONNX Runtime writes the optimized model through protobuf).
STORE_MAX_BYTES = 1 << 30


def _session_options(optimize: bool = True, threads: int = 0) -> Any:
    """Session options; ``threads`` 0: the CPUs this process may use."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                   else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    so.intra_op_num_threads = threads or engine_threads()
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    # The arena keeps every block it ever grew to; without it, memory freed after
    # the build goes back (measured on ResNet-50: 60 MB less peak during a bind).
    so.enable_cpu_mem_arena = False
    # Threads that spin after a run take the cores from whatever runs next: MXNet's
    # native operators or the next engine. Measured on ResNet-50 split into 3 engines
    # by native pooling: 101 ms spinning, 55 ms not; one engine alone: 43.7 against 44.5 ms.
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return so


def _build_options(weight_bytes: int, plugins: Sequence[Any], threads: int = 0) -> Any:
    """Session options of a build over ``weight_bytes`` of weights, ``plugins`` registered.

    Raises:
        EngineBuildError: a plugin's implementation cannot be registered.
    """
    so = _session_options(threads=threads)
    register_plugins(so, plugins)
    if weight_bytes > PREPACK_MAX_BYTES:
        # Prepacking would copy every MatMul/Gemm weight once more; past this size
        # memory wins (batch-1 products are bound by memory bandwidth either way).
        so.add_session_config_entry("session.disable_prepacking", "1")
    return so


class OrtEngine(Engine):
    """One ONNX Runtime session bound to raw host buffers."""

    def __init__(self, session: Any, inputs: List[TensorSpec], outputs: List[TensorSpec], name: str,
                 batch_ranges: Sequence[BatchRange] = (), artifacts: Optional[str] = None,
                 artifact_format: str = "", held: Any = None) -> None:
        self.session = session
        # The arrays (and OrtValues) the session reads in place: alive as long as it is.
        self._held = held
        self.inputs = inputs
        self.outputs = outputs
        self.name = name
        self.batch_ranges = list(batch_ranges)
        self._artifacts = artifacts
        self._artifact_format = artifact_format
        self._binding: Any = None
        self._bound_key: Optional[Tuple[Any, ...]] = None
        self._fed: List[str] = []
        self._fed_arrays: Dict[str, np.ndarray] = {}
        self._fed_as_is: List[str] = []
        #: ``domain::op_type`` of the plugins the model holds; a stored copy registers them again at load.
        self.plugins: List[str] = []
        #: The engine's own references to its plugins' functions, and MXNet's shapes of their nodes.
        self.plugin_functions: Dict[str, Callable[..., Any]] = {}
        self.plugin_shapes: List[PluginShape] = []
        #: MXNet node name -> its operator (and user converter), to name them in run errors.
        self.node_ops: Dict[str, str] = {}
        self._inline_bytes = 0
        #: ``(sub-batch, streams)`` of an engine whose session runs chunks of its batch, else ``None``.
        self.split: Optional[Split] = None
        self._chunk_bindings: List[Any] = []

    def run(self, inputs: Sequence[Buffer], outputs: Sequence[Buffer]) -> None:
        key = tuple((b.ptr, b.shape) for b in inputs) + tuple((b.ptr, b.shape) for b in outputs)
        if key != self._bound_key:
            # Buffers of a bound executor are stable, so this runs once per executor.
            self.check_buffers(self.name, inputs, outputs)
            if self.split is not None:
                self._chunk_bindings = self._bind_chunks(inputs, outputs, self.split[0])
            else:
                self._binding = self._bind(inputs, outputs, 0, 0)
            self._bound_key = key
        if self.split is not None:
            self._run_chunks()
            return
        if not self.plugins:
            self._run_session()
            return
        with watching(self.plugin_shapes, self.plugin_functions) as watch:
            try:
                self._run_session()
            except EngineRunError:
                watch.raise_fault(self.name)  # what a plugin did comes first: it is why the run failed
                raise
        watch.raise_fault(self.name)

    def _bind(self, inputs: Sequence[Buffer], outputs: Sequence[Buffer], start: int, rows: int) -> Any:
        """An ``IOBinding`` over the buffers, or over their samples ``start .. start + rows`` (``rows`` > 0)."""
        binding = self.session.io_binding()
        for specs, bufs, bind in ((self.inputs, inputs, binding.bind_input), (self.outputs, outputs, binding.bind_output)):
            for spec, b in zip(specs, bufs):
                shape, ptr = list(b.shape), b.ptr
                if rows:
                    row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * np.dtype(b.dtype).itemsize
                    shape, ptr = [rows] + shape[1:], ptr + start * row_bytes
                bind(spec.name, "cpu", 0, np.dtype(b.dtype), shape, ptr)
        return binding

    def _bind_chunks(self, inputs: Sequence[Buffer], outputs: Sequence[Buffer], sub: int) -> List[Any]:
        """One ``IOBinding`` per chunk of ``sub`` samples (batch-major buffers: each chunk is contiguous)."""
        batch = int(self.inputs[0].shape[0])
        return [self._bind(inputs, outputs, i, sub) for i in range(0, batch, sub)]

    def _run_chunks(self) -> None:
        assert self.split is not None
        bindings, run = self._chunk_bindings, self.session.run_with_iobinding
        try:
            run_chunks([lambda k: run(bindings[k])] * self.split[1], len(bindings))
        except Exception as exc:  # onnxruntime raises its own exception types
            raise EngineRunError(f"{self.name}: ONNX Runtime failed on a chunk of the batch"
                                 f"{self._where(str(exc))}: {exc}") from exc

    def _run_session(self) -> None:
        try:
            self.session.run_with_iobinding(self._binding)
        except Exception as exc:  # onnxruntime raises its own exception types
            raise EngineRunError(f"{self.name}: ONNX Runtime failed{self._where(str(exc))}: {exc}") from exc

    def _where(self, message: str) -> str:
        """`` in node X (op, converter)``: the MXNet node of the ONNX node an ONNX Runtime message names."""
        found = re.search(r"Name:'([^']*)'", message)
        if not found:
            return ""
        node = found.group(1).split("/", 1)[0]
        op = self.node_ops.get(node)
        return f" in node {node!r} ({op})" if op else f" in node {node!r}"

    def hold_plugins(self, plugins: Sequence[Plugin], shapes: Sequence[PluginShape] = ()) -> None:
        """Keep this engine's own references to its plugins' functions (unregistering them cannot reach it)."""
        self.plugins = [p.name for p in plugins]
        self.plugin_functions = {p.name: p.python["onnxruntime"] for p in plugins if "onnxruntime" in p.python}
        self.plugin_shapes = list(shapes)
        for p in plugins:
            hold_plugin(p, self)

    def stored_weights(self) -> Dict[str, Any]:
        return dict(self._fed_arrays)

    def save(self, directory: str) -> Dict[str, Any]:
        art = self._artifacts
        if not art or not os.path.isdir(art):
            raise NotImplementedError("this engine was built without keeping its optimized model")
        stored = os.path.join(art, "stored.onnx")
        if not os.path.isfile(stored):
            raise NotImplementedError("ONNX Runtime did not write an optimized model to store")
        shutil.move(stored, os.path.join(directory, "model.onnx"))
        shutil.move(os.path.join(art, "model.data"), os.path.join(directory, "model.data"))
        shutil.rmtree(art, ignore_errors=True)
        self._artifacts = None
        return {
            "format": self._artifact_format,
            "file": "model.onnx",
            "data_file": "model.data",
            "fed": list(self._fed),
            "fed_as_is": list(self._fed_as_is),
            "plugins": list(self.plugins),
            "plugin_shapes": [[s.plugin, s.node, [list(x) for x in s.in_shapes], [list(x) for x in s.out_shapes]]
                              for s in self.plugin_shapes],
            "node_ops": dict(self.node_ops),
            "stored_bytes": self._inline_bytes,
            "inputs": specs_json(self.inputs),
            "outputs": specs_json(self.outputs),
            "batch_ranges": [list(r) for r in self.batch_ranges],
            "split": list(self.split) if self.split else None,
        }

    def __del__(self) -> None:
        art = getattr(self, "_artifacts", None)
        if art:
            shutil.rmtree(art, ignore_errors=True)


class OnnxRuntimeBackend(Backend):
    """Builds :class:`OrtEngine` s with the CPU execution provider."""

    name = "onnxruntime"
    #: ONNX Runtime fuses DQ -> Conv -> Q into QLinearConv and both-quantized adds into
    #: QLinearAdd; unsigned activations let it fold Relu/Clip into the quantized output,
    #: and 7-bit weights avoid the saturating 16-bit sums of AVX2 without VNNI. On
    #: ResNet-50 at batch 8 this ran every convolution as QLinearConv; symmetric int8
    #: activations left them float (FusedConv after DQ), slower than fp32. 8-bit weights
    #: lost accuracy to that saturation here (cosine to fp32 0.985 against 0.9997, small CNN).
    int8_style = Int8Style(activation="uint8", residual="both", bias="int32", reduce_range=True, pool=True)
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

    def slower_than_native(self, spec: OpSpec) -> Optional[str]:
        """Suppression of more than ``ROW_LOOP_MIN_K`` candidates: the ONNX form settles a block of them per
        ``Loop`` iteration against every candidate, O(k^2) elementwise work, where MXNet's kernel skips
        the suppressed ones (Faster R-CNN's RPN at 480x640, 6,000 candidates: 240 ms against 48 ms)."""
        k = suppression_candidates(spec)
        if k is None or k <= ROW_LOOP_MIN_K:
            return None
        return (f"suppressing {k} candidates per batch row runs about 5x slower in ONNX Runtime than in MXNet "
                f"(more than {ROW_LOOP_MIN_K}: an ONNX Loop over every candidate); MXNet runs it "
                "(MXNET_TENSORRT_ENGINE_RULE=always puts it in the engine)")

    def device_signature(self, device_id: int) -> str:
        # Stored optimized models may hold CPU-specific kernels (NCHWc layouts).
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

    def layout_for(self, shapes: Sequence[Tuple[int, ...]], dynamic: bool) -> str:
        return chunk_layout(shapes, dynamic)

    def build(self, exported: Any, options: BuildOptions) -> Engine:
        import onnxruntime as ort

        plugins = model_plugins(exported.model)
        ranges = list(options.extra.get("batch_ranges") or []) if exported.batch_dim else []
        inputs = [TensorSpec(*s) for s in exported.input_specs]
        outputs = [TensorSpec(*s) for s in exported.output_specs]
        split: Optional[Split] = None
        threads = _threads(options.extra)
        # extra "split": False keeps one session over the batch (benchmarks compare the two). Plugins' results
        # are checked against MXNet's shapes of the whole batch: an engine holding one is not split.
        batch = int(inputs[0].shape[0]) if inputs and inputs[0].shape else 0
        if options.extra.get("split", True) and not plugins:
            split, model = split_plan(exported.model, batch, ranges, threads, options.name)
            if split is not None:
                exported = dataclasses.replace(exported, model=model_at_batch(model, split[0]))
                threads = 1  # each stream is one thread: the session's own pool would only wait on them
        if split is None and options.extra.get("split", True) and not ranges and threads > 1 and batch > 1:
            # A model that mixes samples only near its end (a detector's suppression, plugins included).
            chained = build_chain(self, exported, options, batch, threads)
            if chained is not None:
                return chained
        so = _build_options(exported.weight_bytes, plugins, threads)
        # Stored engines need ONNX Runtime to write the optimized model and the values
        # it derived (through protobuf: only below its limit).
        keep = bool(options.extra.get("keep_artifacts")) and exported.weight_bytes < STORE_MAX_BYTES
        # Under the plan cache's tmp/ when given (swept if this process dies), else named by pid.
        art = make_work_dir("mx_trt_ort_", options.extra.get("work_dir"))
        held = {name: np.ascontiguousarray(arr) for name, arr in exported.external.items()}
        if keep:
            try:
                engine = self._build_stored(exported, so, art, held, inputs, outputs, ranges, options, plugins,
                                            threads)
                engine.split = split
                return engine
            except Exception as exc:  # storing is optional: build the engine in memory instead
                logger.info("%s: optimized model not stored (%s: %s); building in memory", options.name,
                            type(exc).__name__, exc)
                shutil.rmtree(art, ignore_errors=True)
                art = make_work_dir("mx_trt_ort_", options.extra.get("work_dir"))
                so = _build_options(exported.weight_bytes, plugins, threads)
        try:
            # A path, not bytes: ONNX Runtime's optimizers read in-memory initializers only from a model file.
            path = os.path.join(art, "model.onnx")
            with open(path, "wb") as f:
                f.write(_with_memory_refs(exported.model, held).SerializeToString())
            session = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        except Exception as exc:
            shutil.rmtree(art, ignore_errors=True)
            logger.error("ONNX Runtime could not build %s: %s", options.name, exc)
            raise EngineBuildError(f"{options.name}: ONNX Runtime could not build the engine: {exc}") from exc
        shutil.rmtree(art, ignore_errors=True)
        trim_heap()
        engine = OrtEngine(session, inputs, outputs, options.name, ranges, held=held)
        engine.hold_plugins(plugins, exported.plugin_shapes)
        engine.node_ops = dict(exported.node_ops)
        engine.split = split
        return engine

    def _build_stored(self, exported: Any, so: Any, art: str, held: Dict[str, np.ndarray],
                      inputs: List[TensorSpec], outputs: List[TensorSpec], ranges: List[BatchRange],
                      options: BuildOptions, plugins: Sequence[Any], threads: int) -> "OrtEngine":
        """Optimize into ``art``, strip the caller's weights, and run the stored form.

        The optimizing session only writes the optimized model and is dropped
        before that model is stripped, so the two never hold memory at once. The
        engine returned runs what a warm bind will load: the weights fed from the
        caller's arrays, the derived values mapped from ``model.data``.
        """
        import onnxruntime as ort

        name = options.name
        so.optimized_model_filepath = os.path.join(art, "optimized.onnx")
        so.add_session_config_entry("session.optimized_model_external_initializers_file_name", "optimized.data")
        so.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes",
                                    str(EXTERNAL_MIN_BYTES))
        # ONNX Runtime writes an optimized model from weights handed over as OrtValues
        # (not from in-memory external data references): no copy either.
        path = os.path.join(art, "source.onnx")
        model, names, values = _with_fed_initializers(exported.model, held)
        so.add_external_initializers(names, values)
        with open(path, "wb") as f:
            f.write(model.SerializeToString())
        del model
        ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])  # writes optimized.onnx/.data
        del so, values
        trim_heap()
        fed, inline_bytes = _strip_optimized(art, held)
        session, kept = _stored_session(os.path.join(art, "stored.onnx"), fed, held, name, plugins, threads)
        engine = OrtEngine(session, inputs, outputs, name, ranges, art, "onnx-fed", kept)
        engine._fed, engine._inline_bytes = fed, inline_bytes
        engine._fed_arrays = {n: held[n] for n in fed}
        engine._fed_as_is = _as_is(fed, held, options.extra.get("weight_views"))
        engine.hold_plugins(plugins, exported.plugin_shapes)
        engine.node_ops = dict(exported.node_ops)
        return engine

    def load(self, meta: Mapping[str, Any], directory: str, options: BuildOptions) -> Engine:
        if meta.get("format") == CHAIN:
            return load_chain(self, meta, directory, options)
        if meta.get("format") != "onnx-fed":
            raise EngineBuildError(f"{options.name}: stored engine format {meta.get('format')!r} is not this version's")
        inputs = tensor_specs(meta["inputs"])
        threads = _threads(options.extra)
        split: Optional[Split] = None
        if meta.get("split"):
            # The stored session computes the chunk's batch; as many streams as this process's threads.
            try:
                split = streams_at_load(meta["split"], int(inputs[0].shape[0]) if inputs else 0, threads)
            except (ValueError, IndexError) as exc:
                raise EngineBuildError(f"{options.name}: stored engine: {exc}") from exc
            threads = 1
        feed = options.extra.get("weights")
        fed = [str(n) for n in meta.get("fed", [])]
        if fed and feed is None:
            raise EngineBuildError(f"{options.name}: the stored model needs its weights fed and none were given")
        views = options.extra.get("weight_views")
        as_is = meta.get("fed_as_is")
        if fed and views is not None and isinstance(as_is, list) and set(fed) <= set(as_is):
            # Every fed weight is one of the caller's arrays as it is: no export needed
            # (the plan-cache key holds their digests, so they are the arrays stored).
            arrays = views(fed)
        else:
            arrays = feed() if fed and feed is not None else {}
        plugins = plugins_named([str(n) for n in meta.get("plugins", [])])
        session, held = _stored_session(os.path.join(directory, str(meta["file"])), fed, arrays, options.name,
                                        plugins, threads)
        ranges: List[BatchRange] = [(int(r[0]), int(r[1]), int(r[2])) for r in meta.get("batch_ranges", [])]
        engine = OrtEngine(session, inputs, tensor_specs(meta["outputs"]), options.name, ranges, held=held)
        engine.split = split
        engine._fed = fed  # what an export of this engine writes beside it (stored_weights)
        engine._fed_arrays = {name: arr for name, (arr, _) in zip(fed, held)}
        engine.hold_plugins(plugins, _stored_plugin_shapes(meta.get("plugin_shapes")))
        ops = meta.get("node_ops")
        engine.node_ops = {str(k): str(v) for k, v in ops.items()} if isinstance(ops, dict) else {}
        return engine


def _stored_plugin_shapes(raw: Any) -> List[PluginShape]:
    """The plugin shapes of a stored engine's meta (anything malformed: none, so no check)."""
    try:
        return [PluginShape(str(p), str(n), tuple(tuple(int(d) for d in s) for s in ins),
                            tuple(tuple(int(d) for d in s) for s in outs)) for p, n, ins, outs in raw or []]
    except (TypeError, ValueError):
        return []


def _as_is(fed: Sequence[str], held: Mapping[str, np.ndarray], views: Any) -> List[str]:
    """The fed names whose arrays are the caller's own weights (same memory, dtype and shape)."""
    if views is None or not fed:
        return []
    mine = views(list(fed))
    return [n for n in fed if n in mine and _same_memory(np.asarray(mine[n]), held[n])]


def _same_memory(a: np.ndarray, b: np.ndarray) -> bool:
    return (a.ctypes.data == b.ctypes.data and a.dtype == b.dtype and a.shape == b.shape
            and a.flags.c_contiguous and b.flags.c_contiguous)


def _stored_session(path: str, fed: Sequence[str], arrays: Mapping[str, Any], name: str,
                    plugins: Sequence[Any] = (), threads: int = 0) -> Tuple[Any, List[Tuple[np.ndarray, Any]]]:
    """A session over a stored (already optimized) model, ``fed`` weights taken from ``arrays`` in place.

    Returns the session and the (array, OrtValue) pairs it reads, to keep alive with it.
    """
    import onnxruntime as ort

    so = _session_options(optimize=False, threads=threads)  # the stored model is already optimized
    register_plugins(so, plugins)
    held: List[Tuple[np.ndarray, Any]] = []
    for w in fed:
        arr = arrays.get(w)
        if arr is None:
            raise EngineBuildError(f"{name}: the stored model needs weight {w!r}, which the subgraph lacks")
        arr = np.ascontiguousarray(arr)
        value = ort.OrtValue.ortvalue_from_numpy(arr)
        so.add_initializer(w, value)
        held.append((arr, value))
    try:
        # By path: the values derived at build time are read from model.data beside it.
        session = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise EngineBuildError(f"{name}: ONNX Runtime could not load the stored engine {path}: {exc}") from exc
    trim_heap()
    return session, held


def _external_copy(model: Any, arrays: Mapping[str, np.ndarray], where: Callable[[np.ndarray], Tuple[str, str]]) -> Any:
    """A copy of ``model`` whose initializers in ``arrays`` are external data at ``where(array)`` (location, offset)."""
    from onnx import ModelProto, TensorProto

    out = ModelProto()
    out.CopyFrom(model)
    for t in out.graph.initializer:
        arr = arrays.get(t.name)
        if arr is None:
            continue
        t.data_location = TensorProto.EXTERNAL
        del t.external_data[:]
        location, offset = where(arr)
        for k, v in (("location", location), ("offset", offset), ("length", str(arr.nbytes))):
            kv = t.external_data.add()
            kv.key, kv.value = k, v
    return out


def _with_memory_refs(model: Any, arrays: Mapping[str, np.ndarray]) -> Any:
    """A copy of ``model`` whose initializers in ``arrays`` refer to those arrays' memory (no bytes copied)."""
    return _external_copy(model, arrays, lambda arr: (MEM_TAG, str(arr.ctypes.data)))


def _with_fed_initializers(model: Any, arrays: Mapping[str, np.ndarray]) -> Tuple[Any, List[str], List[Any]]:
    """A copy of ``model`` whose initializers in ``arrays`` are to be fed as OrtValues over their memory.

    Those initializers name an external file that does not exist: ONNX Runtime
    replaces them by the OrtValues (``SessionOptions.add_external_initializers``)
    before it would read it. Returns (the model, the names, the OrtValues).
    """
    import onnxruntime as ort

    out = _external_copy(model, arrays, lambda arr: (FED, "0"))
    names = [t.name for t in out.graph.initializer if t.name in arrays]
    return out, names, [ort.OrtValue.ortvalue_from_numpy(arrays[n]) for n in names]


def _strip_optimized(art: str, arrays: Mapping[str, np.ndarray]) -> Tuple[List[str], int]:
    """Turn ONNX Runtime's optimized model into a stored one without the caller's weights.

    ``optimized.onnx`` refers to ``optimized.data`` for every large initializer.
    Those equal, byte for byte, to a weight the exporter handed in (same name)
    become references fed again at load; the others are values the optimizers
    derived, copied into ``model.data``. Writes ``stored.onnx`` and ``model.data``.

    Returns:
        (the names fed at load, the bytes of derived values stored).
    """
    import onnx

    model = onnx.load(os.path.join(art, "optimized.onnx"), load_external_data=False)
    source = os.path.join(art, "optimized.data")
    data = np.memmap(source, dtype=np.uint8, mode="r") if os.path.isfile(source) and os.path.getsize(source) else None
    fed: List[str] = []
    stored = 0
    with open(os.path.join(art, "model.data"), "wb") as out:
        for t in model.graph.initializer:
            if t.data_location != onnx.TensorProto.EXTERNAL:
                continue
            loc = {kv.key: kv.value for kv in t.external_data}
            if loc.get("location") != "optimized.data" or data is None:
                raise EngineBuildError(f"optimized initializer {t.name!r} is stored in {loc.get('location')!r}")
            start, length = int(loc.get("offset", "0")), int(loc["length"])
            region = data[start:start + length]
            mine = arrays.get(t.name)
            # Same bytes is not enough: ONNX Runtime may store a value under its name in another shape
            # (a BatchNorm scale (C, 1, 1) kept as (1, 1, 1, C) by the layout optimizer of int8 graphs).
            if (mine is not None and mine.nbytes == length and tuple(mine.shape) == tuple(t.dims)
                    and np.array_equal(mine.reshape(-1).view(np.uint8), region)):
                where = (FED, 0, length)
                fed.append(t.name)
            else:
                pad = (-out.tell()) % 4096  # page-aligned, so ONNX Runtime may map it
                out.write(b"\0" * pad)
                where = ("model.data", out.tell(), length)
                out.write(region.tobytes())
                stored += length
            del t.external_data[:]
            for k, v in zip(("location", "offset", "length"), where):
                kv = t.external_data.add()
                kv.key, kv.value = k, str(v)
    del data
    with open(os.path.join(art, "stored.onnx"), "wb") as f:
        f.write(model.SerializeToString())
    for leftover in os.listdir(art):  # ONNX Runtime's output and the source model with its weights
        if leftover not in ("stored.onnx", "model.data"):
            os.unlink(os.path.join(art, leftover))
    return fed, stored
