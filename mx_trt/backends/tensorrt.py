"""TensorRT 10+ and TensorRT-RTX engines: one implementation, parameterised by the Python module.

``tensorrt`` (TensorRT 10+) and ``tensorrt_rtx_bindings`` (TensorRT-RTX) expose
the same API; :class:`TensorRTBackend` is written against TensorRT's and
:class:`TensorRTRTXBackend` only names the other module and turns on RTX's
extras (kernel specialization strategy, runtime cache).

Build (no device needed for TensorRT-RTX)::

    ONNX bytes (or a file, for external weights) -> OnnxParser -> strongly typed
    network -> builder config (workspace cap, profiles, timing cache, progress)
    -> build_serialized_network -> plan bytes (TrtEngine.plan)

Run (device needed): the plan is deserialized once per engine, on first use;
each executor gets its own :class:`TrtRunner` (one ``IExecutionContext`` and one
CUDA stream) that binds MXNet's device pointers with ``set_tensor_address``.

``BuildOptions.extra`` keys:

========================  =================================================================
``profiles``              ``[{input: (min_shape, opt_shape, max_shape)}]``; none: static
``batch_ranges``          ``[(min, opt, max)]`` of dimension 0, when ``profiles`` is absent
``output_shape_rule``     ``"batch"`` / ``"static"`` / ``"engine"`` (default: inferred)
``progress``              ``callable(phase: str, step: int, total: int)``
``timing_cache_path``     timing cache file, loaded if present, saved after the build
``rtx_specialization``    ``lazy`` / ``eager`` / ``none`` (RTX; env ``MXNET_TENSORRT_RTX_SPECIALIZATION``)
``runtime_cache_path``    RTX runtime cache file, loaded at context creation, saved after runs
========================  =================================================================

Environment: ``MXNET_TENSORRT_WORKSPACE_MB`` caps the workspace pool (default:
no cap, TensorRT may use what the device has).
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib
import logging
import os
import tempfile
import threading
import time
import warnings
from typing import (TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple,
                    Type)

from ..errors import BackendUnavailableError, EngineBuildError, EngineRunError, MxTrtError, ShapeError
from . import cuda
from .base import Backend, Buffer, BuildOptions, Engine, Shape, TensorSpec

if TYPE_CHECKING:
    import tensorrt as trt

logger = logging.getLogger(__name__)

#: ``(min_shape, opt_shape, max_shape)`` per input name.
Profile = Dict[str, Tuple[Shape, Shape, Shape]]

META_FORMAT = 1
SPECIALIZATIONS = ("lazy", "eager", "none")
OUTPUT_SHAPE_RULES = ("batch", "static", "engine")

_NP_OF_TRT = {"FLOAT": "float32", "HALF": "float16", "BF16": "bfloat16", "INT8": "int8", "INT32": "int32",
              "INT64": "int64", "BOOL": "bool", "UINT8": "uint8"}


# --------------------------------------------------------------------------- settings


def workspace_limit(env: Optional[Mapping[str, str]] = None) -> Optional[int]:
    """Bytes for the WORKSPACE memory pool from ``MXNET_TENSORRT_WORKSPACE_MB``, or ``None`` (no cap).

    Raises:
        MxTrtError: the variable is not a positive whole number of MiB.
    """
    raw = (os.environ if env is None else env).get("MXNET_TENSORRT_WORKSPACE_MB", "").strip()
    if not raw:
        return None
    try:
        mb = int(raw)
    except ValueError:
        raise MxTrtError(f"MXNET_TENSORRT_WORKSPACE_MB={raw!r}: expected a whole number of MiB") from None
    if mb <= 0:
        raise MxTrtError(f"MXNET_TENSORRT_WORKSPACE_MB={raw!r}: must be > 0 (unset it for no limit)")
    return mb << 20


def rtx_specialization(extra: Mapping[str, Any], env: Optional[Mapping[str, str]] = None) -> str:
    """The RTX dynamic-shapes kernel specialization strategy: ``lazy`` (default), ``eager`` or ``none``.

    ``extra["rtx_specialization"]`` wins over ``MXNET_TENSORRT_RTX_SPECIALIZATION``.

    Raises:
        MxTrtError: an unknown value.
    """
    raw = extra.get("rtx_specialization")
    where = "BuildOptions.extra['rtx_specialization']"
    if raw is None:
        raw = (os.environ if env is None else env).get("MXNET_TENSORRT_RTX_SPECIALIZATION", "")
        where = "MXNET_TENSORRT_RTX_SPECIALIZATION"
    value = str(raw).strip().lower() or "lazy"
    if value not in SPECIALIZATIONS:
        raise MxTrtError(f"{where}={raw!r}: expected one of {', '.join(SPECIALIZATIONS)}")
    return value


# --------------------------------------------------------------------------- shapes and profiles


def dims_tuple(dims: Any) -> Optional[Shape]:
    """A TensorRT ``Dims`` as a tuple, or ``None`` when it has no valid rank (``nbDims == -1``).

    ``len()`` comes first: iterating a ``Dims`` whose ``nbDims`` is -1 yields an
    empty tuple, which would look like a scalar.
    """
    try:
        n = len(dims)
    except (ValueError, TypeError, OverflowError):
        return None
    if n < 0:
        return None
    return tuple(int(dims[i]) for i in range(n))


def _fmt(shape: Sequence[int]) -> str:
    return "(" + ", ".join("?" if d < 0 else str(d) for d in shape) + ")"


def _triple(raw: Any, where: str) -> Tuple[Shape, Shape, Shape]:
    try:
        lo, opt, hi = (tuple(int(d) for d in s) for s in raw)
    except (TypeError, ValueError):
        raise EngineBuildError(f"{where}: expected (min_shape, opt_shape, max_shape), got {raw!r}") from None
    return lo, opt, hi


def profiles_from_batch_ranges(dims: Mapping[str, Shape], ranges: Sequence[Sequence[int]], subgraph: str) -> List[Profile]:
    """Profiles over dimension 0 from ``[(min, opt, max)]``: every input whose dimension 0 is dynamic takes it.

    Raises:
        EngineBuildError: a range is malformed, or an input has other dynamic dimensions.
    """
    out: List[Profile] = []
    for r in ranges:
        try:
            lo, opt, hi = (int(v) for v in r)
        except (TypeError, ValueError):
            raise EngineBuildError(f"{subgraph}: batch range {r!r} is not (min, opt, max)") from None
        prof: Profile = {}
        for name, d in dims.items():
            if not d or d[0] >= 0:
                continue
            if any(x < 0 for x in d[1:]):
                raise EngineBuildError(f"{subgraph}: input {name!r} {_fmt(d)} has dynamic dimensions besides the batch: "
                                       "give BuildOptions.extra['profiles'] with full shapes")
            rest = tuple(d[1:])
            prof[name] = ((lo,) + rest, (opt,) + rest, (hi,) + rest)
        out.append(prof)
    return out


def make_profiles(
    dims: Mapping[str, Shape],
    given: Optional[Sequence[Mapping[str, Any]]],
    subgraph: str,
    dim_names: Optional[Mapping[str, Sequence[Optional[str]]]] = None,
) -> List[Profile]:
    """Complete and check optimization profiles for a network's inputs.

    Args:
        dims: Input name -> network dimensions (-1 for a dynamic one), in input order.
        given: ``[{input: (min, opt, max)}]`` or ``None``.
        subgraph: For messages.
        dim_names: Input name -> ONNX ``dim_param`` per axis, for messages.

    Returns:
        One profile per given one (or a single static profile), covering every input:
        static inputs get ``min = opt = max`` = their shape. An input a profile
        leaves out whose only dynamic dimension is 0 takes dimension 0's range
        from the profile's other inputs when they agree on it.

    Raises:
        EngineBuildError: dynamic inputs without profiles, unknown inputs, wrong
            ranks, ``min <= opt <= max`` violated, or a static dimension changed.
    """
    names = dim_names or {}

    def describe(name: str) -> str:
        d = dims[name]
        labels = names.get(name) or [None] * len(d)
        dyn = [f"axis {i}" + (f" ({labels[i]!r})" if i < len(labels) and labels[i] else "") for i, x in enumerate(d) if x < 0]
        return f"input {name!r} {_fmt(d)} has dynamic {', '.join(dyn)}"

    dynamic = [n for n, d in dims.items() if any(x < 0 for x in d)]
    if not given:
        if dynamic:
            raise EngineBuildError(
                f"{subgraph}: {'; '.join(describe(n) for n in dynamic)} and no optimization profile was given: "
                "pass BuildOptions.extra['profiles'] = [{input: (min_shape, opt_shape, max_shape)}] "
                "(or extra['batch_ranges'] = [(min, opt, max)])"
            )
        return [{n: (tuple(d), tuple(d), tuple(d)) for n, d in dims.items()}]

    out: List[Profile] = []
    for k, raw in enumerate(given):
        where = f"{subgraph}: optimization profile {k}"
        unknown = sorted(set(raw) - set(dims))
        if unknown:
            raise EngineBuildError(f"{where} names {unknown}, which are not inputs of the network (inputs: {list(dims)})")
        prof: Profile = {n: _triple(v, f"{where}, input {n!r}") for n, v in raw.items()}
        batch0 = {(t[0][0], t[1][0], t[2][0]) for n, t in prof.items() if t[0] and dims[n] and dims[n][0] < 0}
        for n, d in dims.items():
            if n in prof:
                continue
            if not any(x < 0 for x in d):
                prof[n] = (tuple(d), tuple(d), tuple(d))
            elif d and d[0] < 0 and all(x >= 0 for x in d[1:]) and len(batch0) == 1:
                lo, opt, hi = next(iter(batch0))
                rest = tuple(d[1:])
                prof[n] = ((lo,) + rest, (opt,) + rest, (hi,) + rest)
            else:
                raise EngineBuildError(f"{where} does not cover {describe(n)}")
        for n, (s_min, s_opt, s_max) in prof.items():
            d = dims[n]
            if not (len(s_min) == len(s_opt) == len(s_max) == len(d)):
                raise EngineBuildError(f"{where}, input {n!r}: shapes {s_min}, {s_opt}, {s_max} must have rank {len(d)} like {_fmt(d)}")
            for i, want in enumerate(d):
                if not 0 <= s_min[i] <= s_opt[i] <= s_max[i]:
                    raise EngineBuildError(f"{where}, input {n!r} axis {i}: need 0 <= min <= opt <= max, "
                                           f"got {s_min[i]}, {s_opt[i]}, {s_max[i]}")
                if want >= 0 and not s_min[i] == s_opt[i] == s_max[i] == want:
                    raise EngineBuildError(f"{where}, input {n!r} axis {i} is static ({want}) in the network, "
                                           f"the profile asks for {s_min[i]}..{s_max[i]}")
        out.append({n: prof[n] for n in dims})
    return out


def select_profile(profiles: Sequence[Profile], names: Sequence[str], shapes: Sequence[Shape], subgraph: str) -> int:
    """Index of the first profile whose ranges contain every input shape.

    Raises:
        ShapeError: no profile does.
    """
    got = [tuple(int(d) for d in s) for s in shapes]
    for k, prof in enumerate(profiles):
        ok = True
        for n, s in zip(names, got):
            lo, _, hi = prof[n]
            if len(s) != len(lo) or any(not a <= x <= b for a, x, b in zip(lo, s, hi)):
                ok = False
                break
        if ok:
            return k
    ranges = "; ".join(
        f"profile {k}: " + ", ".join(f"{n} {prof[n][0]}..{prof[n][2]}" for n in names) for k, prof in enumerate(profiles)
    )
    raise ShapeError(f"{subgraph}: input shapes {dict(zip(names, got))} are outside every optimization profile ({ranges}); "
                     "bind again with a profile that covers them")


def batch_rule_output_shapes(inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec], shapes: Sequence[Shape],
                             subgraph: str) -> List[Shape]:
    """Output shapes under the batch rule: dimension 0 of every output follows the inputs' common batch.

    Raises:
        ShapeError: the inputs disagree on dimension 0 or differ from the bound shapes elsewhere.
    """
    got = [tuple(int(d) for d in s) for s in shapes]
    batches = {s[0] for s in got if s}
    if len(batches) != 1:
        raise ShapeError(f"{subgraph}: inputs disagree on the batch size (dimension 0): {got}")
    for spec, s in zip(inputs, got):
        if len(s) != len(spec.shape) or s[1:] != spec.shape[1:]:
            raise ShapeError(f"{subgraph}: input {spec.name!r} must keep dimensions {spec.shape[1:]} after the batch, got {s}")
    b = batches.pop()
    return [(b,) + tuple(o.shape[1:]) for o in outputs]


def context_output_shapes(context: Any, in_names: Sequence[str], shapes: Sequence[Shape], out_names: Sequence[str],
                          subgraph: str) -> List[Shape]:
    """Set the input shapes on an execution context and read back the output shapes.

    Raises:
        ShapeError: an input shape is rejected, or an output's shape cannot be
            computed (``nbDims == -1``, or a -1 dimension: data-dependent).
    """
    for n, s in zip(in_names, shapes):
        if not context.set_input_shape(n, tuple(int(d) for d in s)):
            raise ShapeError(f"{subgraph}: TensorRT rejected shape {tuple(s)} for input {n!r} "
                             "(outside the active optimization profile, or inconsistent with the network)")
    out: List[Shape] = []
    for n in out_names:
        d = dims_tuple(context.get_tensor_shape(n))
        if d is None:
            raise ShapeError(f"{subgraph}: TensorRT cannot compute the shape of output {n!r} for input shapes "
                             f"{dict(zip(in_names, (tuple(s) for s in shapes)))} (nbDims == -1: the input shapes are "
                             "inconsistent with each other or with the network)")
        if any(x < 0 for x in d):
            raise ShapeError(f"{subgraph}: output {n!r} has shape {_fmt(d)}, which depends on the data; "
                             "mx_trt needs output shapes that follow from the input shapes")
        out.append(d)
    return out


# --------------------------------------------------------------------------- ONNX helpers


def _onnx_dims(value_info: Any) -> List[Any]:
    """Per axis: an int, a ``dim_param`` string, or ``None`` (unknown)."""
    out: List[Any] = []
    for d in value_info.type.tensor_type.shape.dim:
        if d.HasField("dim_value"):
            out.append(int(d.dim_value))
        elif d.HasField("dim_param"):
            out.append(str(d.dim_param))
        else:
            out.append(None)
    return out


def _onnx_dtype(value_info: Any) -> str:
    import numpy as np
    from onnx import helper

    return np.dtype(helper.tensor_dtype_to_np_dtype(value_info.type.tensor_type.elem_type)).name


def _node_label(model: Any, origin: Mapping[str, str], index: int, node_name: str, op: str) -> str:
    nodes = model.graph.node
    doc = ""
    if not node_name and 0 <= index < len(nodes):
        node_name = nodes[index].name
    if 0 <= index < len(nodes) and nodes[index].name == node_name:
        op = op or nodes[index].op_type
        doc = nodes[index].doc_string
    mx_node = origin.get(node_name) or doc
    label = f"ONNX node {node_name!r}" + (f" ({op})" if op else "")
    return label + (f" from MXNet node {mx_node!r}" if mx_node else " (no MXNet node recorded)")


def parser_error_messages(parser: Any, exported: Any) -> List[str]:
    """Every error of an ``OnnxParser``, each naming its ONNX node and the MXNet node it came from."""
    out: List[str] = []
    for i in range(int(parser.num_errors)):
        e = parser.get_error(i)
        code = e.code()
        code_name = getattr(code, "name", str(code))
        index = int(e.node())
        node_name = str(e.node_name() or "")
        if index < 0 and not node_name:
            out.append(f"model: {code_name}: {e.desc()}")
            continue
        label = _node_label(exported.model, exported.origin, index, node_name, str(e.node_operator() or ""))
        out.append(f"{label}: {code_name}: {e.desc()}")
    return out


def _mentioned_mx_nodes(messages: Sequence[str], origin: Mapping[str, str]) -> List[str]:
    """MXNet nodes whose ONNX node names appear in TensorRT's log lines (layer names derive from them)."""
    text = "\n".join(messages)
    return sorted({mx for onnx_name, mx in origin.items() if onnx_name and onnx_name in text})


# --------------------------------------------------------------------------- module glue


def _import_module(module_name: str) -> Tuple[Optional[Any], str]:
    try:
        mod = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or a broken install raising anything while loading its libraries
        return None, f"{type(exc).__name__}: {exc}"
    if not hasattr(mod, "Builder") or not hasattr(mod, "OnnxParser"):
        return None, f"{module_name} was imported from {getattr(mod, '__file__', '?')} but has no Builder/OnnxParser (an incomplete install)"
    return mod, ""


class _LogCapture:
    """TensorRT's log lines of WARNING or worse, collected while active.

    A ``quiet`` capture also logs them at DEBUG only: the caller reports the
    outcome itself (an expected failure, such as a stale cache file).
    """

    def __init__(self, quiet: bool = False) -> None:
        self.lines: List[str] = []
        self.quiet = quiet

    def errors(self) -> List[str]:
        return [line for line in self.lines if not line.startswith("[W]")]


_loggers: Dict[str, Any] = {}
_loggers_lock = threading.Lock()


def _logger_for(mod: Any) -> Any:
    """One ``ILogger`` per module for the whole process (TensorRT keeps the first logger it is given).

    It forwards to :mod:`logging` (``mx_trt.backends.tensorrt``) and feeds the
    active :meth:`capture` blocks, whose lines go into error messages.
    """
    key = mod.__name__
    with _loggers_lock:
        existing = _loggers.get(key)
        if existing is not None:
            return existing
        sev = mod.ILogger.Severity
        levels = {
            int(sev.INTERNAL_ERROR): (logging.ERROR, "[F]"),
            int(sev.ERROR): (logging.ERROR, "[E]"),
            int(sev.WARNING): (logging.WARNING, "[W]"),
            int(sev.INFO): (logging.DEBUG, "[I]"),
            int(sev.VERBOSE): (logging.DEBUG, "[V]"),
        }

        class _Forwarding(mod.ILogger):
            def __init__(self) -> None:
                mod.ILogger.__init__(self)
                self._captures: List[_LogCapture] = []
                self._lock = threading.Lock()

            def log(self, severity: Any, msg: str) -> None:
                level, tag = levels.get(int(severity), (logging.INFO, "[?]"))
                with self._lock:
                    captures = list(self._captures)
                if level >= logging.WARNING:
                    for c in captures:
                        c.lines.append(f"{tag} {msg}")
                quiet = any(c.quiet for c in captures)
                logger.log(logging.DEBUG if quiet else level, "%s %s", mod.__name__, msg)

            @contextlib.contextmanager
            def capture(self, quiet: bool = False) -> Iterator[_LogCapture]:
                c = _LogCapture(quiet)
                with self._lock:
                    self._captures.append(c)
                try:
                    yield c
                finally:
                    with self._lock:
                        self._captures.remove(c)

        inst = _Forwarding()
        _loggers[key] = inst
        return inst


_monitor_classes: Dict[str, Any] = {}


def _progress_monitor(mod: Any, callback: Callable[[str, int, int], Any], subgraph: str) -> Any:
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


def _write_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, then rename it over ``path``."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _read(path: str) -> Optional[bytes]:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _load_timing_cache(config: "trt.IBuilderConfig", log: Any, path: str, subgraph: str,
                       level: int = logging.WARNING) -> "trt.ITimingCache":
    """The timing cache from ``path`` set on ``config``; an unreadable one is replaced by an empty cache.

    The replacement is logged at ``level`` (TensorRT-RTX, which does not use
    timing caches and cannot read one without a GPU, passes INFO).
    """
    data = b""
    try:
        data = _read(path) or b""
    except OSError as exc:
        logger.warning("%s: cannot read timing cache %s (%s); starting an empty one", subgraph, path, exc)
    cache: Optional[trt.ITimingCache] = None
    with log.capture(quiet=True) as cap, warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # TensorRT-RTX: timing caches are no-ops there
        try:
            cache = config.create_timing_cache(data)
        except Exception as exc:
            cap.lines.append(f"[E] {exc}")
    complaints = [line for line in cap.lines if "cache" in line.lower() or line.startswith("[E]")]
    if data and (cache is None or complaints):
        logger.log(level, "%s: timing cache %s is corrupt, from another TensorRT version or GPU, or needs a GPU "
                   "to be read; ignoring it (%s)", subgraph, path, "; ".join(complaints) or "not loaded")
        cache = None
    if cache is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            cache = config.create_timing_cache(b"")
    if not config.set_timing_cache(cache, False):
        logger.warning("%s: TensorRT did not accept the timing cache from %s", subgraph, path)
    return cache


def _save_timing_cache(config: "trt.IBuilderConfig", path: str, subgraph: str) -> None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            data = bytes(config.get_timing_cache().serialize())
        _write_atomic(path, data)
        logger.debug("%s: timing cache saved to %s (%d bytes)", subgraph, path, len(data))
    except Exception as exc:  # a cache is an optimisation: never fail a good build for it
        logger.warning("%s: could not save the timing cache to %s: %s", subgraph, path, exc)


# --------------------------------------------------------------------------- engine


def _specs(items: Sequence[Mapping[str, Any]]) -> List[TensorSpec]:
    return [TensorSpec(str(m["name"]), tuple(int(d) for d in m["shape"]), str(m["dtype"])) for m in items]


def _profiles_from_meta(raw: Sequence[Mapping[str, Any]]) -> List[Profile]:
    return [{str(n): _triple(t, "meta profiles") for n, t in p.items()} for p in raw]


class TrtEngine(Engine):
    """A serialized TensorRT / TensorRT-RTX engine and what running it needs.

    Attributes:
        plan: The serialized engine (what a plan cache stores).
        inputs / outputs: Specs at the bound shapes, in the fused node's order.
        profiles: The optimization profiles, ``[{input: (min, opt, max)}]``.
        batch_ranges: ``(min, opt, max)`` of dimension 0 per profile when the
            engine follows the batch rule, else empty.
        output_shape_rule: ``"static"``, ``"batch"`` (output dimension 0 follows
            the input batch) or ``"engine"`` (ask a deserialized engine).
        device_id: The device it was built for (-1: none given; runs on the current one).
    """

    def __init__(self, backend: Type["TensorRTBackend"], plan: bytes, meta: Mapping[str, Any], options: BuildOptions) -> None:
        self.backend = backend
        self.plan = bytes(plan)
        self._meta = dict(meta)
        self.name = str(meta.get("name") or options.name)
        self.inputs = _specs(meta["inputs"])
        self.outputs = _specs(meta["outputs"])
        self.input_dims: Dict[str, Shape] = {str(m["name"]): tuple(int(d) for d in m["dims"]) for m in meta["inputs"]}
        self.profiles = _profiles_from_meta(meta["profiles"])
        self.batch_ranges = [(int(r[0]), int(r[1]), int(r[2])) for r in meta.get("batch_ranges", [])]
        self.output_shape_rule = str(meta.get("output_shape_rule", "engine"))
        self.device_id = int(options.device_id if options.device_id >= 0 else meta.get("device_id", -1))
        extra = options.extra
        # The strategy is a run-time choice: the options given at load time win over the build's.
        explicit = "rtx_specialization" in extra or os.environ.get("MXNET_TENSORRT_RTX_SPECIALIZATION", "").strip()
        self.specialization = rtx_specialization(extra) if explicit else str(meta.get("rtx_specialization") or "lazy")
        self.runtime_cache_path: Optional[str] = extra.get("runtime_cache_path")
        self.dynamic = any(any(d < 0 for d in dims) for dims in self.input_dims.values())
        #: Held while a context of this engine enqueues and waits: contexts sharing
        #: an optimization profile must not run concurrently.
        self.run_lock = threading.RLock()
        self._load_lock = threading.Lock()
        self._runtime: Optional[trt.Runtime] = None
        self._cuda_engine: Optional[trt.ICudaEngine] = None
        self._shape_context: Optional[trt.IExecutionContext] = None
        self._default_runner: Optional[TrtRunner] = None

    # -- description

    def meta(self) -> Dict[str, Any]:
        """JSON-serialisable description; with :attr:`plan`, all :func:`load_engine` needs."""
        return dict(self._meta)

    def save(self, directory: str) -> Dict[str, Any]:
        """Write the plan as ``engine.plan`` into ``directory``; return :meth:`meta` (with ``plan_file``)."""
        _write_atomic(os.path.join(directory, "engine.plan"), self.plan)
        meta = self.meta()
        meta["plan_file"] = "engine.plan"
        return meta

    # -- shapes

    def select_profile(self, shapes: Sequence[Shape]) -> int:
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
        """The ``ICudaEngine``, deserialized on first use on the build's device (or the current one)."""
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
            log = _logger_for(mod)
            with log.capture() as cap:
                runtime: trt.Runtime = mod.Runtime(log)
                engine: Optional[trt.ICudaEngine] = runtime.deserialize_cuda_engine(self.plan)
            if engine is None:
                detail = "; ".join(cap.lines) or "no message"
                check = getattr(runtime, "get_engine_validity", None)
                if check is not None:
                    with contextlib.suppress(Exception):
                        validity, diagnostics = check(self.plan)
                        detail += f"; engine validity: {getattr(validity, 'name', validity)} (diagnostics flags {int(diagnostics)})"
                raise EngineRunError(f"{self.name}: {self.backend.label} could not deserialize the engine on device "
                                     f"{self.device_id} (built for another GPU or version?): {detail}")
            self._check_io(engine)
            self._runtime = runtime
            self._cuda_engine = engine
            return engine

    def _check_io(self, engine: "trt.ICudaEngine") -> None:
        mod = self.backend.module()
        io: Dict[str, Tuple[Any, str]] = {}
        for i in range(engine.num_io_tensors):
            n = engine.get_tensor_name(i)
            io[n] = (engine.get_tensor_mode(n), _NP_OF_TRT.get(engine.get_tensor_dtype(n).name, engine.get_tensor_dtype(n).name))
        for specs, mode in ((self.inputs, mod.TensorIOMode.INPUT), (self.outputs, mod.TensorIOMode.OUTPUT)):
            for t in specs:
                got = io.get(t.name)
                if got is None or got[0] != mode:
                    raise EngineRunError(f"{self.name}: the deserialized engine has no {mode.name.lower()} tensor {t.name!r} "
                                         f"(it has {sorted(io)})")
                if got[1] != t.dtype:
                    raise EngineRunError(f"{self.name}: tensor {t.name!r} is {got[1]} in the engine, {t.dtype} in its description")

    def create_runner(self) -> "TrtRunner":
        """A new execution context + stream for one executor (the fused GPU operator calls this)."""
        return TrtRunner(self)

    def run(self, inputs: Sequence[Buffer], outputs: Sequence[Buffer]) -> None:
        if self._default_runner is None:
            self._default_runner = self.create_runner()
        self._default_runner.run(inputs, outputs)


class TrtRunner:
    """One execution context and one CUDA stream of a :class:`TrtEngine` (one per executor).

    Not thread-safe by itself; the fused operator runs one forward at a time.
    """

    def __init__(self, engine: TrtEngine) -> None:
        self.engine = engine
        self.device_id = -1
        self._context: Optional[trt.IExecutionContext] = None
        self._stream: Optional[cuda.Stream] = None
        self._runtime_config: Any = None
        self._runtime_cache: Any = None
        self._profile = -1
        self._shapes: Optional[List[Shape]] = None
        self._out_shapes: List[Shape] = []
        self._addresses: Optional[Tuple[int, ...]] = None
        self._cache_dirty = False
        self.run_count = 0

    def _ensure(self) -> Tuple["trt.IExecutionContext", cuda.Stream]:
        if self._context is not None and self._stream is not None:
            return self._context, self._stream
        eng = self.engine
        engine = eng._deserialized()
        self.device_id = eng.device_id
        cuda.set_device(self.device_id)
        mod = eng.backend.module()
        log = _logger_for(mod)
        with log.capture() as cap:
            if eng.backend.rtx:
                context = self._rtx_context(mod, engine)
            else:
                context = engine.create_execution_context()
        if context is None:
            raise EngineRunError(f"{eng.name}: could not create an execution context: {'; '.join(cap.lines) or 'no message'}")
        self._stream = cuda.Stream(self.device_id)
        self._context = context
        return context, self._stream

    def _rtx_context(self, mod: Any, engine: "trt.ICudaEngine") -> Optional["trt.IExecutionContext"]:
        """A context with RTX's runtime config: specialization strategy and runtime cache."""
        eng = self.engine
        config: Any = engine.create_runtime_config()
        strategy = getattr(mod, "DynamicShapesKernelSpecializationStrategy", None)
        if strategy is not None:
            config.dynamic_shapes_kernel_specialization_strategy = getattr(strategy, eng.specialization.upper())
        path = eng.runtime_cache_path
        if path and hasattr(config, "create_runtime_cache"):
            cache = config.create_runtime_cache()
            data = None
            try:
                data = _read(path)
            except OSError as exc:
                logger.warning("%s: cannot read runtime cache %s: %s", eng.name, path, exc)
            if data and not cache.deserialize(data):
                logger.warning("%s: runtime cache %s does not match this GPU, driver or TensorRT-RTX version "
                               "(or is corrupt); starting an empty one", eng.name, path)
            config.set_runtime_cache(cache)
            self._runtime_cache = cache
        self._runtime_config = config  # the context refers to it: keep it alive as long
        return engine.create_execution_context(config)

    def save_runtime_cache(self) -> None:
        """Write the RTX runtime cache to ``runtime_cache_path`` (after new shapes compiled kernels)."""
        path = self.engine.runtime_cache_path
        if not path or self._runtime_cache is None:
            return
        try:
            _write_atomic(path, bytes(self._runtime_cache.serialize()))
            self._cache_dirty = False
        except Exception as exc:  # an optimisation only
            logger.warning("%s: could not save the runtime cache to %s: %s", self.engine.name, path, exc)

    def run(self, inputs: Sequence[Buffer], outputs: Sequence[Buffer]) -> None:
        """Run the engine on device buffers, synchronously.

        Raises:
            ShapeError: counts, shapes or dtypes do not fit the engine.
            EngineRunError: a host buffer, a wrong device, or TensorRT failed.
            BackendUnavailableError: no CUDA device.
        """
        eng = self.engine
        if len(inputs) != len(eng.inputs) or len(outputs) != len(eng.outputs):
            raise ShapeError(f"{eng.name}: engine takes {len(eng.inputs)} inputs / {len(eng.outputs)} outputs, "
                             f"got {len(inputs)} / {len(outputs)}")
        for spec, b in zip(list(eng.inputs) + list(eng.outputs), list(inputs) + list(outputs)):
            if b.dtype != spec.dtype:
                raise ShapeError(f"{eng.name}: tensor {spec.name!r} is {spec.dtype}, got a {b.dtype} buffer")
        shapes = [tuple(int(d) for d in b.shape) for b in inputs]
        profile = eng.select_profile(shapes)
        with eng.run_lock:
            context, stream = self._ensure()
            for spec, b in zip(list(eng.inputs) + list(eng.outputs), list(inputs) + list(outputs)):
                if b.device_id != self.device_id:
                    where = "host memory" if b.device_id < 0 else f"device {b.device_id}"
                    raise EngineRunError(f"{eng.name}: tensor {spec.name!r} is in {where}; the engine runs on device {self.device_id}")
            cuda.set_device(self.device_id)  # MXNet's worker threads may have another device current
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
            # MXNet computed the inputs with kernels on its own streams, and its
            # engine may call this operator before those kernels have finished;
            # our stream is not ordered after MXNet's (and a custom operator is
            # given no handle to MXNet's stream). Waiting for the whole device
            # is the one ordering that is always right.
            cuda.device_synchronize()
            mod = eng.backend.module()
            with _logger_for(mod).capture() as cap:
                ok = context.execute_async_v3(stream.handle)
            if not ok:
                raise EngineRunError(f"{eng.name}: execute_async_v3 failed: {'; '.join(cap.lines) or 'no message'}")
            # Outputs must be complete before MXNet's next kernels read them.
            stream.synchronize()
            self.run_count += 1
        if self._cache_dirty:
            self.save_runtime_cache()

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


# --------------------------------------------------------------------------- backend

class TensorRTBackend(Backend):
    """TensorRT 10+ (``import tensorrt``). Subclasses name another module with the same API."""

    name = "tensorrt"
    # TensorRT 10 has no float64; int8/uint8 tensors need quantization scales, so they stay native.
    tensor_dtypes = ("float32", "float16", "int32", "int64", "bool")
    module_name = "tensorrt"
    label = "TensorRT"
    install_hint = "install it with `make venv USE_TENSORRT=1` (requirements/tensorrt.txt; needs NVIDIA's package index)"
    #: TensorRT-RTX: runtime config with specialization strategy and runtime cache; builds without a device.
    rtx = False

    # -- availability

    @classmethod
    def module(cls) -> Any:
        """The Python module (imported on first use).

        Raises:
            BackendUnavailableError: it cannot be imported.
        """
        mod, why = _import_module(cls.module_name)
        if mod is None:
            raise BackendUnavailableError(f"{cls.label} is not installed: import {cls.module_name} failed ({why}); {cls.install_hint}")
        return mod

    @classmethod
    def build_unavailable_reason(cls) -> Optional[str]:
        """``None`` if engines can be built here, else why not."""
        mod, why = _import_module(cls.module_name)
        if mod is None:
            return f"{cls.label} is not installed: import {cls.module_name} failed ({why}); {cls.install_hint}"
        if not cls.rtx:
            reason = cuda.unavailable_reason()
            if reason is not None:
                return f"{cls.label} builds engines on a CUDA device: {reason}"
        return None

    @classmethod
    def unavailable_reason(cls) -> Optional[str]:
        """``None`` if engines can be built and run here, else what is missing."""
        reason = cls.build_unavailable_reason()
        if reason is not None:
            return reason
        reason = cuda.unavailable_reason()
        if reason is not None:
            return f"{cls.label} engines need a CUDA device to run: {reason}"
        return cls._device_reason(cls.module())

    @classmethod
    def _device_reason(cls, mod: Any) -> Optional[str]:
        return None

    def version(self) -> str:
        return f"{self.module_name}-{getattr(self.module(), '__version__', '?')}"

    def device_signature(self, device_id: int) -> str:
        """Compute capability of the device (engines are specific to it), or ``no-device``."""
        if cuda.unavailable_reason() is not None:
            return "no-device"
        major, minor = cuda.compute_capability(device_id if device_id >= 0 else cuda.current_device())
        return f"sm{major}{minor}"

    # -- build

    def build(self, exported: Any, options: BuildOptions) -> TrtEngine:
        """Parse the exported ONNX model and build a serialized engine.

        Raises:
            EngineBuildError: parse or build failed (each parser error names its
                ONNX node and MXNet node), or the options are inconsistent.
            BackendUnavailableError: the module is not installed.
        """
        mod = self.module()
        name = options.name
        extra = options.extra
        try:
            specialization = rtx_specialization(extra) if self.rtx else None
            ws = workspace_limit()
        except MxTrtError as exc:
            raise EngineBuildError(f"{name}: {exc}") from exc
        if options.device_id >= 0 and cuda.unavailable_reason() is None:
            cuda.set_device(options.device_id)
        log = _logger_for(mod)
        t0 = time.perf_counter()
        builder: trt.Builder = mod.Builder(log)
        strongly_typed = hasattr(mod.NetworkDefinitionCreationFlag, "STRONGLY_TYPED")
        if not strongly_typed and self.rtx:
            raise EngineBuildError(f"{name}: this {self.label} has no strongly typed networks, which it requires")
        flags = 1 << int(mod.NetworkDefinitionCreationFlag.STRONGLY_TYPED) if strongly_typed else 0
        network: trt.INetworkDefinition = builder.create_network(flags)
        parser: trt.OnnxParser = mod.OnnxParser(network, log)
        with log.capture() as cap:
            ok = self._parse(parser, exported, name)
        if not ok:
            errors = parser_error_messages(parser, exported) or [f"model: {line}" for line in cap.errors()] or ["no error reported"]
            for e in errors:
                logger.error("%s: %s ONNX parser: %s", name, self.label, e)
            raise EngineBuildError(f"{name}: {self.label}'s ONNX parser rejected the subgraph ({len(errors)} error(s)):\n  "
                                   + "\n  ".join(errors))

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
        dim_names = {n: [x if isinstance(x, str) else None for x in _onnx_dims(onnx_in[n])] for n in exported.input_names}
        self._check_outputs(exported, network, net_out, onnx_out, name)

        dynamic = any(any(x < 0 for x in d) for d in in_dims.values())
        given = extra.get("profiles")
        if not given and extra.get("batch_ranges") and dynamic:
            # Batch ranges apply to a batch-dynamic export; a static one keeps its shapes.
            given = profiles_from_batch_ranges(in_dims, extra["batch_ranges"], name)
        profiles = make_profiles(in_dims, given, name, dim_names)

        config: trt.IBuilderConfig = builder.create_builder_config()
        if ws is not None:
            config.set_memory_pool_limit(mod.MemoryPoolType.WORKSPACE, ws)
        if options.fp16 and not strongly_typed:
            config.set_flag(mod.BuilderFlag.FP16)
        elif options.fp16:
            logger.debug("%s: strongly typed network: precision comes from the exported graph's types", name)
        if dynamic:
            for k, prof in enumerate(profiles):
                p: trt.IOptimizationProfile = builder.create_optimization_profile()
                for n, (lo, opt, hi) in prof.items():
                    p.set_shape(n, mod.Dims(list(lo)), mod.Dims(list(opt)), mod.Dims(list(hi)))
                if config.add_optimization_profile(p) < 0:
                    raise EngineBuildError(f"{name}: {self.label} rejected optimization profile {k}: {prof}")
        progress = extra.get("progress")
        monitor = _progress_monitor(mod, progress, name) if callable(progress) else None
        if monitor is not None:
            config.progress_monitor = monitor
        cache_path = extra.get("timing_cache_path")
        if cache_path:
            _load_timing_cache(config, log, str(cache_path), name, logging.INFO if self.rtx else logging.WARNING)

        with log.capture() as cap, warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            try:
                host: Optional[trt.IHostMemory] = builder.build_serialized_network(network, config)
            except Exception as exc:
                cap.lines.append(f"[E] {type(exc).__name__}: {exc}")
                host = None
        if host is None:
            lines = cap.errors() or cap.lines or ["no message"]
            nodes = _mentioned_mx_nodes(cap.lines, exported.origin)
            for line in lines:
                logger.error("%s: %s build: %s", name, self.label, line)
            raise EngineBuildError(f"{name}: {self.label} could not build the engine"
                                   + (f" (MXNet nodes named in the log: {', '.join(nodes)})" if nodes else "")
                                   + ":\n  " + "\n  ".join(lines))
        plan = bytes(host)
        if cache_path:
            _save_timing_cache(config, str(cache_path), name)
        seconds = time.perf_counter() - t0
        logger.info("%s: %s engine built in %.2f s (%d bytes, %d profile(s))", name, self.label, seconds, len(plan),
                    len(profiles) if dynamic else 0)

        meta = self._meta(exported, options, in_dims, profiles, onnx_in, onnx_out, plan, strongly_typed, specialization)
        return TrtEngine(type(self), plan, meta, options)

    @staticmethod
    def _parse(parser: "trt.OnnxParser", exported: Any, name: str) -> bool:
        if exported.external:
            from ..onnx_export import save_model

            # Past protobuf's 2 GB the weights live in a file beside the model,
            # which the parser resolves relative to the model's path.
            with tempfile.TemporaryDirectory(prefix=f"mx_trt_trt_{os.getpid()}_") as tmp:  # swept by pid
                path = save_model(exported, os.path.join(tmp, f"{name}.onnx"))
                return bool(parser.parse_from_file(path))
        return bool(parser.parse(exported.model.SerializeToString()))

    def _check_outputs(self, exported: Any, network: "trt.INetworkDefinition", net_out: Mapping[str, Any],
                       onnx_out: Mapping[str, Any], name: str) -> None:
        """TensorRT's inferred output shapes must agree with the converters' declared ones."""
        producers = {o: n.name for n in exported.model.graph.node for o in n.output}
        for n in exported.output_names:
            got = dims_tuple(net_out[n].shape)
            declared = _onnx_dims(onnx_out[n])
            if got is None or len(got) != len(declared):
                bad = True
            else:
                bad = any(isinstance(w, int) and g >= 0 and g != w for g, w in zip(got, declared))
            if bad:
                onnx_node = producers.get(n, "")
                mx_node = exported.origin.get(onnx_node, "?")
                raise EngineBuildError(
                    f"{name}: output {n!r} (ONNX node {onnx_node!r} from MXNet node {mx_node!r}) is declared "
                    f"{tuple('?' if not isinstance(w, int) else w for w in declared)} by the exporter but {self.label} "
                    f"computes {_fmt(got) if got is not None else 'no shape'}"
                )

    def _meta(self, exported: Any, options: BuildOptions, in_dims: Mapping[str, Shape], profiles: Sequence[Profile],
              onnx_in: Mapping[str, Any], onnx_out: Mapping[str, Any], plan: bytes, strongly_typed: bool,
              specialization: Optional[str]) -> Dict[str, Any]:
        """The JSON description of an engine (see :meth:`TrtEngine.meta`)."""
        mod = self.module()
        dynamic = any(any(x < 0 for x in d) for d in in_dims.values())
        opt0 = profiles[0]
        bound_in = {n: s for n, s, _ in getattr(exported, "input_specs", None) or []}
        bound_out = {n: s for n, s, _ in getattr(exported, "output_specs", None) or []}
        inputs = []
        for n in exported.input_names:
            shape = tuple(bound_in.get(n) or opt0[n][1])
            inputs.append({"name": n, "shape": list(shape), "dtype": _onnx_dtype(onnx_in[n]), "dims": list(in_dims[n])})
        batch_names = {dims[0] for dims in (_onnx_dims(onnx_in[n]) for n in exported.input_names) if dims and isinstance(dims[0], str)}
        batch_name = getattr(exported, "batch_dim", None) or (next(iter(batch_names)) if len(batch_names) == 1 else None)
        bound_batch = {s["shape"][0] for s in inputs if s["shape"]}
        outputs = []
        out_dims_all = []
        for n in exported.output_names:
            dims = _onnx_dims(onnx_out[n])
            out_dims_all.append(dims)
            if n in bound_out:
                shape = tuple(bound_out[n])
            elif all(isinstance(x, int) for x in dims):
                shape = tuple(dims)
            elif dims and dims[0] == batch_name and all(isinstance(x, int) for x in dims[1:]) and len(bound_batch) == 1:
                shape = (next(iter(bound_batch)),) + tuple(dims[1:])
            else:
                shape = tuple(x if isinstance(x, int) else -1 for x in dims)
            outputs.append({"name": n, "shape": list(shape), "dtype": _onnx_dtype(onnx_out[n]),
                            "dims": [x if isinstance(x, int) else -1 for x in dims]})

        def batch_rule() -> bool:
            if not batch_name or len(bound_batch) != 1:
                return False
            b = next(iter(bound_batch))
            for n in exported.input_names:
                d = in_dims[n]
                if not d or d[0] >= 0 or any(x < 0 for x in d[1:]):
                    return False
            for dims, o in zip(out_dims_all, outputs):
                if not dims or dims[0] != batch_name or not all(isinstance(x, int) for x in dims[1:]) or o["shape"][0] != b:
                    return False
            ranges = {tuple((t[0][0], t[1][0], t[2][0]) for t in prof.values()) for prof in profiles}
            return all(len(set(r)) == 1 for r in ranges)

        rule = extra_rule = options.extra.get("output_shape_rule")
        if extra_rule is not None and extra_rule not in OUTPUT_SHAPE_RULES:
            raise EngineBuildError(f"{options.name}: output_shape_rule={extra_rule!r}: expected one of {OUTPUT_SHAPE_RULES}")
        if not dynamic:
            rule = "static"
        elif rule is None:
            rule = "batch" if batch_rule() else "engine"
        elif rule == "batch" and not batch_rule():
            raise EngineBuildError(f"{options.name}: output_shape_rule='batch' but the exported model does not keep "
                                   "dimension 0 as a shared batch on every input and output")
        batch_ranges = []
        if rule == "batch":
            for prof in profiles:
                lo, opt, hi = next(iter(prof.values()))
                batch_ranges.append([lo[0], opt[0], hi[0]])
        return {
            "format": META_FORMAT,
            "backend": self.name,
            "module": self.module_name,
            "version": str(getattr(mod, "__version__", "?")),
            "name": options.name,
            "device_id": int(options.device_id),
            "inputs": inputs,
            "outputs": outputs,
            "profiles": [{n: [list(lo), list(opt), list(hi)] for n, (lo, opt, hi) in p.items()} for p in profiles],
            "batch_ranges": batch_ranges,
            "output_shape_rule": rule,
            "strongly_typed": strongly_typed,
            "rtx_specialization": specialization,
            "plan_bytes": len(plan),
            "plan_sha256": hashlib.sha256(plan).hexdigest(),
        }

    # -- stored engines

    @classmethod
    def load_engine(cls, plan: bytes, meta: Mapping[str, Any], options: BuildOptions) -> TrtEngine:
        """An engine from stored plan bytes and :meth:`TrtEngine.meta`, without rebuilding.

        Deserialization happens at the first run, on a device.

        Raises:
            EngineBuildError: the metadata is from another backend, module or
                version, or the plan does not match its recorded digest.
        """
        if int(meta.get("format", -1)) != META_FORMAT:
            raise EngineBuildError(f"stored engine metadata format {meta.get('format')!r} is not {META_FORMAT}")
        if meta.get("backend") != cls.name:
            raise EngineBuildError(f"stored engine is for backend {meta.get('backend')!r}, not {cls.name!r}")
        mod = cls.module()
        version = str(getattr(mod, "__version__", "?"))
        if meta.get("version") != version:
            raise EngineBuildError(f"stored engine was built by {cls.label} {meta.get('version')}, this is {version}")
        digest = meta.get("plan_sha256")
        if digest and hashlib.sha256(bytes(plan)).hexdigest() != digest:
            raise EngineBuildError(f"stored engine {meta.get('name')!r}: the plan does not match its recorded sha256")
        try:
            return TrtEngine(cls, plan, meta, options)
        except (KeyError, TypeError, ValueError) as exc:
            raise EngineBuildError(f"stored engine {meta.get('name')!r}: malformed metadata ({type(exc).__name__}: {exc})") from exc

    def load(self, meta: Mapping[str, Any], directory: str, options: BuildOptions) -> TrtEngine:
        """:meth:`load_engine` from what :meth:`TrtEngine.save` wrote into ``directory``."""
        path = os.path.join(directory, str(meta.get("plan_file", "engine.plan")))
        try:
            with open(path, "rb") as f:
                plan = f.read()
        except OSError as exc:
            raise EngineBuildError(f"cannot read stored engine {path}: {exc}") from exc
        return self.load_engine(plan, meta, options)


class TensorRTRTXBackend(TensorRTBackend):
    """TensorRT-RTX (``import tensorrt_rtx_bindings``): same API, builds without a device, JIT at run time."""

    name = "tensorrt_rtx"
    module_name = "tensorrt_rtx_bindings"
    label = "TensorRT-RTX"
    install_hint = "install it with `make venv USE_TENSORRT_RTX=1` (requirements/trt-rtx.txt)"
    rtx = True

    @classmethod
    def _device_reason(cls, mod: Any) -> Optional[str]:
        """RTX engines run only on the compute capabilities its ``ComputeCapability`` enum lists."""
        cc_enum = getattr(mod, "ComputeCapability", None)
        if cc_enum is None:
            return None
        supported = sorted(
            (int(n[2:-1]), int(n[-1])) for n in getattr(cc_enum, "__members__", {}) if n.startswith("SM") and n[2:].isdigit()
        )
        if not supported:
            return None
        devices = [cuda.compute_capability(i) for i in range(cuda.device_count())]
        if any(cc in supported for cc in devices):
            return None
        have = ", ".join(f"{a}.{b}" for a, b in devices)
        want = ", ".join(f"{a}.{b}" for a, b in supported)
        return f"{cls.label} cannot run on compute capability {have} (it supports {want})"


def backend_for(meta: Mapping[str, Any]) -> Type[TensorRTBackend]:
    """The backend class that wrote ``meta``."""
    for cls in (TensorRTBackend, TensorRTRTXBackend):
        if meta.get("backend") == cls.name:
            return cls
    raise EngineBuildError(f"stored engine is for backend {meta.get('backend')!r}, not a TensorRT one")


def load_engine(plan: bytes, meta: Mapping[str, Any], options: BuildOptions) -> TrtEngine:
    """:meth:`TensorRTBackend.load_engine` on the backend named in ``meta``."""
    return backend_for(meta).load_engine(plan, meta, options)
