"""Building a TensorRT plan from an exported ONNX subgraph; one builder for both flavours.

::

    ONNX bytes (or a file, for external weights) -> OnnxParser -> strongly typed
    network -> interface checks -> builder config (workspace cap, profiles,
    timing cache, progress) -> build_serialized_network -> plan bytes + description

Plans are built weight-stripped (:mod:`.refit`) where the module has the
flags; where a device can run the engine, a fresh stripped plan is refitted
at once from the build's weights. A plan is built again with its weights
(``meta["stripped"] = False``, the reason in ``meta["unstripped_reason"]``)
when the stripped build fails, or when TensorRT needs a weight that is not
an ONNX initializer by name. Without a device, TensorRT-RTX 1.7 cannot build
stripped plans (its compiler needs CUDA for refittable weights): after the
first failure in a process it is not tried again until a device is present.

Precision: ``BuildOptions.fp16`` is already in the export's types (an fp16
graph); ``BuildOptions.bf16`` takes the float32 export, which a strongly typed
network gets as a bfloat16 graph (:func:`~mx_trt.export.precision.to_bf16`,
before ``RoiAlign`` is lowered, as for fp16 graphs; such a plan keeps its
weights, which are the builder's bfloat16 copies, not the initializers a refit
is given) and a weakly typed one through ``BuilderFlag.BF16``.

Failures name the ONNX node and the MXNet node they come from
(:mod:`.diagnostics`). The flavour decides what differs (:mod:`.flavours`).
"""
from __future__ import annotations

import logging
import os
import shutil
import time
import warnings
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Tuple

from mx_trt.cache.locking import make_work_dir
from mx_trt.errors import EngineBuildError, MxTrtError
from mx_trt.export.lowering import lower_roi_align
from mx_trt.export.plugins import model_plugins
from mx_trt.export.precision import to_bf16
from mx_trt.export.subgraph import save_model
from mx_trt.builder.backends.base import BuildOptions, Shape
from mx_trt.builder.backends.tensorrt import cuda
from mx_trt.builder.backends.tensorrt.caches import load_timing_cache, save_timing_cache
from mx_trt.builder.backends.tensorrt.diagnostics import mentioned_mx_nodes, parser_error_messages
from mx_trt.builder.backends.tensorrt.engine import TrtEngine
from mx_trt.builder.backends.tensorrt.flavours import TrtBackendInfo, flavour_of
from mx_trt.builder.backends.tensorrt.logs import logger_for
from mx_trt.builder.backends.tensorrt.meta import describe_engine, onnx_dims
from mx_trt.builder.backends.tensorrt.plugins import load_plugins
from mx_trt.builder.backends.tensorrt.refit import WeightsSource, missing_strip_flags, set_strip_flags, weights_source
from mx_trt.builder.backends.tensorrt.shapes import (
    Profile,
    dims_tuple,
    fmt_shape,
    make_profiles,
    profiles_from_batch_ranges,
)

if TYPE_CHECKING:
    import tensorrt as trt

logger = logging.getLogger(__name__)


def workspace_limit(extra: Mapping[str, Any]) -> Optional[int]:
    """Bytes for the WORKSPACE memory pool from ``extra["workspace_mb"]`` (the bind's
    ``MXNET_TENSORRT_WORKSPACE_MB``), or ``None`` (no cap).

    Raises:
        MxTrtError: not a positive whole number of MiB.
    """
    raw = extra.get("workspace_mb")
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int) or raw <= 0:
        raise MxTrtError(f"workspace_mb={raw!r}: expected a whole number of MiB > 0 (MXNET_TENSORRT_WORKSPACE_MB; "
                         "unset it for no limit)")
    return raw << 20


_monitor_classes: Dict[str, Any] = {}


def progress_monitor(mod: Any, callback: Callable[[str, int, int], Any], subgraph: str) -> Any:
    """An ``IProgressMonitor`` forwarding to ``callback(phase, steps_done, total)``, or ``None`` if the module has none.

    ``phase_start`` reports ``(phase, 0, total)``, each ``step_complete`` the steps
    done so far, ``phase_finish`` ``(phase, total, total)``. The callback returning
    ``False`` cancels the build; its exceptions are logged, never raised into TensorRT.
    """
    if not hasattr(mod, "IProgressMonitor"):
        logger.debug("%s has no IProgressMonitor: no build progress for %s", mod.__name__, subgraph)
        return None
    cls = _monitor_classes.get(mod.__name__)
    if cls is None:

        class _Forward(mod.IProgressMonitor):
            def __init__(self, fn: Callable[[str, int, int], Any], name: str) -> None:
                mod.IProgressMonitor.__init__(self)
                self._fn = fn
                self._name = name
                self._totals: Dict[str, int] = {}

            def _emit(self, phase: str, step: int, total: int) -> bool:
                try:
                    return self._fn(phase, step, total) is not False
                except Exception:  # a drawing bug must not abort or crash the build
                    logger.exception("%s: progress callback failed", self._name)
                    return True

            def phase_start(self, phase_name: str, parent_phase: Optional[str], num_steps: int) -> None:
                self._totals[phase_name] = int(num_steps)
                self._emit(phase_name, 0, int(num_steps))

            def step_complete(self, phase_name: str, step: int) -> bool:
                return self._emit(phase_name, int(step) + 1, self._totals.get(phase_name, 0))

            def phase_finish(self, phase_name: str) -> None:
                total = self._totals.pop(phase_name, 0)
                self._emit(phase_name, total, total)

        cls = _monitor_classes[mod.__name__] = _Forward
    return cls(callback, subgraph)


def build_engine(backend: TrtBackendInfo, exported: Any, options: BuildOptions) -> TrtEngine:
    """Parse the exported ONNX model and build a serialized engine.

    Args:
        backend: The backend class (its module, label and flavour).
        exported: The exported subgraph (``model``, ``input_names``,
            ``output_names``, ``origin``, ``external``...).
        options: ``name``, ``fp16``, ``bf16``, ``device_id`` and the ``extra`` keys of
            :mod:`mx_trt.builder.backends.tensorrt`.

    Raises:
        EngineBuildError: parse or build failed (each parser error names its
            ONNX node and MXNet node), or the options are inconsistent (fp16
            and bf16 together; bf16 where this TensorRT has none).
        BackendUnavailableError: the module is not installed.
    """
    mod = backend.module()
    flavour = flavour_of(backend.rtx)
    name = options.name
    extra = options.extra
    strongly_typed = hasattr(mod.NetworkDefinitionCreationFlag, "STRONGLY_TYPED")
    exported = _in_precision(mod, exported, options, strongly_typed, backend.label)
    # RoiAlign is NVIDIA's plugin in TensorRT's parser, absent from TensorRT-RTX: written with MatMul.
    exported = lower_roi_align(exported)
    try:
        specialization = flavour.build_specialization(extra)
        ws = workspace_limit(extra)
    except MxTrtError as exc:
        raise EngineBuildError(f"{name}: {exc}") from exc
    if options.device_id >= 0 and cuda.unavailable_reason() is None:
        cuda.set_device(options.device_id)
    log = logger_for(mod)
    t0 = time.perf_counter()
    builder: trt.Builder = mod.Builder(log)
    if not strongly_typed and flavour.requires_strongly_typed:
        raise EngineBuildError(f"{name}: this {backend.label} has no strongly typed networks, which it requires")
    flags = 1 << int(mod.NetworkDefinitionCreationFlag.STRONGLY_TYPED) if strongly_typed else 0
    network: trt.INetworkDefinition = builder.create_network(flags)
    load_plugins(mod, backend.name, backend.label, model_plugins(exported.model))
    _parse(mod, network, log, exported, options, backend.label)
    in_dims, dim_names = _interface(exported, network, name, backend.label)

    dynamic = any(any(x < 0 for x in d) for d in in_dims.values())
    given = extra.get("profiles")
    if not given and extra.get("batch_ranges") and dynamic:
        # Batch ranges apply to a batch-dynamic export; a static one keeps its shapes.
        given = profiles_from_batch_ranges(in_dims, extra["batch_ranges"], name)
    profiles = make_profiles(in_dims, given, name, dim_names)

    config = _config(mod, builder, options, profiles if dynamic else [], strongly_typed, ws, backend.label)
    cache_path = extra.get("timing_cache_path")
    if cache_path:
        load_timing_cache(config, log, str(cache_path), name, flavour.timing_cache_level)
    source = weights_source(extra, exported)
    reason = _strip_unavailable(mod, backend, extra)
    if reason is None and options.bf16 and strongly_typed:
        # A refit is given the float32 initializers; this plan's weights are the bfloat16 copies of to_bf16.
        reason = "a bf16 graph's weights are the builder's bfloat16 copies of the initializers"
    engine: Optional[TrtEngine] = None
    tried = reason is None
    if tried:
        engine, reason = _build_stripped(backend, builder, network, config, log, exported, options, source,
                                         (in_dims, profiles, strongly_typed, specialization))
    if engine is None:
        if tried:
            set_strip_flags(mod, config, False)
        plan = _serialize(builder, network, config, log, exported, name, backend.label)
        meta = describe_engine(backend, exported, options, in_dims, profiles, plan, strongly_typed, specialization)
        meta.update(stripped=False, unstripped_reason=reason, onnx_weight_bytes=_weight_bytes(exported))
        engine = TrtEngine(backend, plan, meta, options)
    if cache_path:
        save_timing_cache(config, str(cache_path), name)
    logger.info("%s: %s engine built in %.2f s (%d bytes%s, %d profile(s))", name, backend.label,
                time.perf_counter() - t0, len(engine.plan), ", weight-stripped" if engine.stripped else "",
                len(profiles) if dynamic else 0)
    return engine


def _in_precision(mod: Any, exported: Any, options: BuildOptions, strongly_typed: bool, label: str) -> Any:
    """The export in the precision the network computes in: with ``options.bf16``, a bfloat16 graph for
    a strongly typed network (:func:`~mx_trt.export.precision.to_bf16`), else ``exported`` itself (a weakly
    typed one gets ``BuilderFlag.BF16`` in :func:`_config`). O(nodes + initializer bytes) for bf16.

    Raises:
        EngineBuildError: fp16 and bf16 together, or bf16 where the module has no ``DataType.BF16``
            (strongly typed) / ``BuilderFlag.BF16`` (weakly typed).
    """
    name = options.name
    if options.fp16 and options.bf16:
        raise EngineBuildError(f"{name}: fp16 and bf16 were both asked for; an engine is built in one precision")
    if not options.bf16:
        return exported
    if strongly_typed:
        if not hasattr(mod.DataType, "BF16"):
            raise EngineBuildError(f"{name}: this {label} has no bf16 (no DataType.BF16 for a bfloat16 graph)")
        return to_bf16(exported)
    if not hasattr(mod.BuilderFlag, "BF16"):
        raise EngineBuildError(f"{name}: this {label} has no bf16 (no BuilderFlag.BF16)")
    return exported


#: Module name -> why its stripped builds fail on a machine without a CUDA device (learned once per process).
_strip_needs_device: Dict[str, str] = {}


def _strip_unavailable(mod: Any, backend: TrtBackendInfo, extra: Mapping[str, Any]) -> Optional[str]:
    """Why this build keeps the weights in the plan, or ``None`` to build it weight-stripped."""
    if extra.get("strip_weights", True) is False:
        return "BuildOptions.extra['strip_weights'] is False"
    missing = missing_strip_flags(mod)
    if missing:
        return f"this {backend.label} has no BuilderFlag.{' / '.join(missing)}"
    known = _strip_needs_device.get(mod.__name__)
    if known is not None and cuda.unavailable_reason() is not None:
        return known
    return None


def _build_stripped(backend: TrtBackendInfo, builder: "trt.Builder", network: "trt.INetworkDefinition",
                    config: "trt.IBuilderConfig", log: Any, exported: Any, options: BuildOptions,
                    source: Optional[WeightsSource], described: Tuple[Any, ...]) -> Tuple[Optional[TrtEngine], Optional[str]]:
    """A weight-stripped engine, refitted at once where a device can run it; or ``None`` and why not.

    Args:
        described: ``(in_dims, profiles, strongly_typed, specialization)`` for :func:`.meta.describe_engine`.
    """
    mod = backend.module()
    name = options.name
    set_strip_flags(mod, config, True)
    try:
        plan = _serialize(builder, network, config, log, exported, name, backend.label, quiet=True)
    except EngineBuildError as exc:
        first = str(exc).split("\n")[-1].strip()[:300]
        no_device = cuda.unavailable_reason()
        if no_device is not None and flavour_of(backend.rtx).builds_without_device:
            why = f"{backend.label} builds weight-stripped plans only on a CUDA device ({no_device}; it said: {first})"
            if mod.__name__ not in _strip_needs_device:
                logger.info("%s: %s; plans are built with their weights", name, why)
            _strip_needs_device[mod.__name__] = why
            return None, why
        logger.warning("%s: the weight-stripped build failed (%s); building the plan with its weights", name, first)
        return None, f"the weight-stripped build failed: {first}"
    in_dims, profiles, strongly_typed, specialization = described
    meta = describe_engine(backend, exported, options, in_dims, profiles, plan, strongly_typed, specialization)
    meta.update(stripped=True, onnx_weight_bytes=_weight_bytes(exported))
    engine = TrtEngine(backend, plan, meta, options, weights=source)
    if backend.unavailable_reason() is not None:
        return engine, None  # refitted where it runs; a weight found missing there costs a rebuild (load_engine)
    try:
        engine.refit_now()
    except EngineBuildError as exc:
        logger.warning("%s: the weight-stripped plan cannot be refitted from the subgraph's initializers (%s); "
                       "building the plan with its weights", name, exc)
        return None, f"refit from the initializers failed: {exc}"
    return engine, None


def _weight_bytes(exported: Any) -> int:
    """Bytes of the exported model's initializers (what a stripped plan leaves out, at most)."""
    return int(getattr(exported, "weight_bytes", 0) or 0)


def _parse(mod: Any, network: "trt.INetworkDefinition", log: Any, exported: Any, options: BuildOptions,
           label: str) -> None:
    """Fill ``network`` from the ONNX model, from memory or, with external weights, from a file.

    Past protobuf's 2 GB the weights live in a file beside the model, which the
    parser resolves relative to the model's path: both go to a work directory
    under ``extra['work_dir']`` (the plan cache's ``tmp/``) or named by pid in
    the system temporary folder (swept once this process is gone), removed after.

    Raises:
        EngineBuildError: the parser rejected the model (every error, naming its nodes).
    """
    name = options.name
    parser: trt.OnnxParser = mod.OnnxParser(network, log)
    with log.capture() as cap:
        if exported.external:
            work = make_work_dir("mx_trt_trt_", options.extra.get("work_dir"))
            try:
                ok = bool(parser.parse_from_file(save_model(exported, os.path.join(work, f"{name}.onnx"))))
            finally:
                shutil.rmtree(work, ignore_errors=True)
        else:
            ok = bool(parser.parse(exported.model.SerializeToString()))
    if not ok:
        errors = parser_error_messages(parser, exported) or [f"model: {line}" for line in cap.errors()] or ["no error reported"]
        for e in errors:
            logger.error("%s: %s ONNX parser: %s", name, label, e)
        raise EngineBuildError(f"{name}: {label}'s ONNX parser rejected the subgraph ({len(errors)} error(s)):\n  "
                               + "\n  ".join(errors))


def _interface(exported: Any, network: "trt.INetworkDefinition", name: str,
               label: str) -> Tuple[Dict[str, Shape], Dict[str, List[Optional[str]]]]:
    """The parsed network's input dimensions and ONNX dimension names, after checking its interface.

    Raises:
        EngineBuildError: a tensor of the subgraph's interface is missing, an
            input has no rank, or an output shape differs from the declared one
            (naming the ONNX and MXNet node that produce it).
    """
    model = exported.model
    onnx_in = {vi.name: vi for vi in model.graph.input}
    onnx_out = {vi.name: vi for vi in model.graph.output}
    net_in = {network.get_input(i).name: network.get_input(i) for i in range(network.num_inputs)}
    net_out = {network.get_output(i).name: network.get_output(i) for i in range(network.num_outputs)}
    missing = [n for n in exported.input_names if n not in net_in] + [n for n in exported.output_names if n not in net_out]
    if missing:
        raise EngineBuildError(f"{name}: the parsed network lacks tensors {missing} of the subgraph's interface "
                               f"(network inputs {sorted(net_in)}, outputs {sorted(net_out)})")
    in_dims: Dict[str, Shape] = {}
    for n in exported.input_names:
        d = dims_tuple(net_in[n].shape)
        if d is None:
            raise EngineBuildError(f"{name}: input {n!r} has no rank in the parsed network")
        in_dims[n] = d
    producers = {o: node.name for node in model.graph.node for o in node.output}
    for n in exported.output_names:
        got = dims_tuple(net_out[n].shape)
        declared = onnx_dims(onnx_out[n])
        if got is None or len(got) != len(declared):
            bad = True
        else:
            bad = any(isinstance(w, int) and g >= 0 and g != w for g, w in zip(got, declared))
        if bad:
            onnx_node = producers.get(n, "")
            mx_node = exported.origin.get(onnx_node, "?")
            raise EngineBuildError(
                f"{name}: output {n!r} (ONNX node {onnx_node!r} from MXNet node {mx_node!r}) is declared "
                f"{tuple('?' if not isinstance(w, int) else w for w in declared)} by the exporter but {label} "
                f"computes {fmt_shape(got) if got is not None else 'no shape'}"
            )
    dim_names = {n: [x if isinstance(x, str) else None for x in onnx_dims(onnx_in[n])] for n in exported.input_names}
    return in_dims, dim_names


def _config(mod: Any, builder: "trt.Builder", options: BuildOptions, profiles: List[Profile], strongly_typed: bool,
            ws: Optional[int], label: str) -> "trt.IBuilderConfig":
    """The builder config: workspace cap, fp16, bf16 and int8 flags (weakly typed networks only), profiles,
    progress monitor.

    A strongly typed network takes its precision from the graph (fp16 or bf16 types,
    INT8 Q/DQ pairs); a weakly typed one needs the INT8 flag for its Q/DQ layers to run
    in int8 (and :func:`_in_precision` has checked that ``BuilderFlag.BF16`` exists).

    Raises:
        EngineBuildError: TensorRT rejected an optimization profile.
    """
    name = options.name
    config: trt.IBuilderConfig = builder.create_builder_config()
    if ws is not None:
        config.set_memory_pool_limit(mod.MemoryPoolType.WORKSPACE, ws)
    if options.fp16 and not strongly_typed:
        config.set_flag(mod.BuilderFlag.FP16)
    if options.bf16 and not strongly_typed:
        config.set_flag(mod.BuilderFlag.BF16)
    if (options.fp16 or options.bf16) and strongly_typed:
        logger.debug("%s: strongly typed network: precision comes from the exported graph's types", name)
    if options.extra.get("int8") and not strongly_typed:
        config.set_flag(mod.BuilderFlag.INT8)
    for k, prof in enumerate(profiles):
        p: trt.IOptimizationProfile = builder.create_optimization_profile()
        for n, (lo, opt, hi) in prof.items():
            p.set_shape(n, mod.Dims(list(lo)), mod.Dims(list(opt)), mod.Dims(list(hi)))
        if config.add_optimization_profile(p) < 0:
            raise EngineBuildError(f"{name}: {label} rejected optimization profile {k}: {prof}")
    progress = options.extra.get("progress")
    monitor = progress_monitor(mod, progress, name) if callable(progress) else None
    if monitor is not None:
        config.progress_monitor = monitor
    return config


def _serialize(builder: "trt.Builder", network: "trt.INetworkDefinition", config: "trt.IBuilderConfig", log: Any,
               exported: Any, name: str, label: str, quiet: bool = False) -> bytes:
    """The plan bytes.

    Args:
        quiet: A failure is expected and handled by the caller: TensorRT's
            messages are logged at DEBUG only (they are in the error).

    Raises:
        EngineBuildError: the build failed (TensorRT's errors, and the MXNet
            nodes its log names).
    """
    with log.capture(quiet=quiet) as cap, warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            host: Optional[trt.IHostMemory] = builder.build_serialized_network(network, config)
        except Exception as exc:
            cap.lines.append(f"[E] {type(exc).__name__}: {exc}")
            host = None
    if host is None:
        lines = cap.errors() or cap.lines or ["no message"]
        nodes = mentioned_mx_nodes(cap.lines, exported.origin)
        for line in lines:
            logger.log(logging.DEBUG if quiet else logging.ERROR, "%s: %s build: %s", name, label, line)
        raise EngineBuildError(f"{name}: {label} could not build the engine"
                               + (f" (MXNet nodes named in the log: {', '.join(nodes)})" if nodes else "")
                               + ":\n  " + "\n  ".join(lines))
    return bytes(host)
