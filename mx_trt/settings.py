"""Settings read from the environment at every bind.

Every variable is documented in README.md ("Environment variables").
"""
from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import operator
import os
import dataclasses
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, FrozenSet, Generic, Iterator, List, Mapping, Optional, Sequence, Set, Tuple, TypeVar

from mx_trt.errors import CalibrationError, MxTrtError, PrecisionConflictError

logger = logging.getLogger(__name__)

Profile = Dict[str, Tuple[Tuple[int, ...], Tuple[int, ...], Tuple[int, ...]]]

T = TypeVar("T")
_UNSET: Any = object()


class ScopedDefault(Generic[T]):
    """The value of a user-facing setter (``set_use_fp16``, ``set_optimization_profiles``, ``set_use_tensorrt``).

    Context-local (``contextvars``): what a thread (or an asyncio task) sets
    applies to its own binds, never to another thread's. What the main thread
    sets is also the process's default, which every context without a value of
    its own reads: MXNet's "set once, bind anywhere" (set in the main program,
    bind in worker threads) keeps working. ``None`` clears the value (the
    environment decides again).
    """

    def __init__(self, name: str) -> None:
        self._var: "contextvars.ContextVar[Any]" = contextvars.ContextVar(name)
        self._process: Optional[T] = None

    def set(self, value: Optional[T]) -> None:
        self._var.set(value)
        if threading.current_thread() is threading.main_thread():
            self._process = value

    def get(self) -> Optional[T]:
        value = self._var.get(_UNSET)
        return self._process if value is _UNSET else value  # type: ignore[no-any-return]


_fp16_override: ScopedDefault[bool] = ScopedDefault("mx_trt_use_fp16")
_profiles_override: ScopedDefault[List[Profile]] = ScopedDefault("mx_trt_profiles")

#: MXNet 1.9.1's shapes are 32-bit: no dimension (batch included) may be larger.
INT32_MAX = 2**31 - 1

#: The rules deciding which subgraphs become engines (``MXNET_TENSORRT_ENGINE_RULE``, option ``engine_rule``).
ENGINE_RULES = ("measured", "cost", "always")

#: The engine backends, as ``MXNET_TENSORRT_BACKEND`` and the ``backend`` option name them.
BACKEND_NAMES = ("onnxruntime", "openvino", "tensorrt", "tensorrt_rtx")

_warned: Set[Tuple[str, str]] = set()
_warned_lock = threading.Lock()


def warn_once(key: Tuple[str, str], message: str, *args: Any) -> None:
    """Log ``message`` as a warning the first time ``key`` (variable, value) is seen in this process."""
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    logger.warning(message, *args)


def set_optimization_profiles(profiles: Optional[Sequence[Mapping[str, Sequence[Sequence[int]]]]]) -> None:
    """Explicit optimization profiles for the next binds (overrides ``MXNET_TENSORRT_PROFILES``).

    This thread's binds; set in the main thread, every thread's default (:class:`ScopedDefault`).

    Args:
        profiles: One dict per profile, mapping data input names to
            ``(min_shape, opt_shape, max_shape)``. Only the batch dimension (0)
            may differ from the bound shape. ``None`` clears the override.

    Example::

        mx_trt.set_optimization_profiles([
            {"data": ((1, 3, 224, 224), (1, 3, 224, 224), (4, 3, 224, 224))},
            {"data": ((5, 3, 224, 224), (16, 3, 224, 224), (32, 3, 224, 224))},
        ])
    """
    _profiles_override.set(None if profiles is None else _parse_profiles(profiles, "set_optimization_profiles"))


def _parse_profiles(raw: Any, where: str) -> List[Profile]:
    if not isinstance(raw, (list, tuple)) or not raw:
        raise MxTrtError(f"{where}: expected a non-empty list of profiles, got {raw!r}")
    out: List[Profile] = []
    for p in raw:
        if not isinstance(p, Mapping) or not p:
            raise MxTrtError(f"{where}: each profile is a dict of input name -> [min, opt, max] shapes, got {p!r}")
        prof: Profile = {}
        for name, triple in p.items():
            try:
                if isinstance(triple, (str, bytes)) or len(triple) != 3:
                    raise TypeError("not three shapes")
                mn, op, mx = (_dims(s) for s in triple)
            except (TypeError, ValueError):
                raise MxTrtError(f"{where}: input {name!r} needs [min_shape, opt_shape, max_shape], each a list of "
                                 f"integers from 1 to {INT32_MAX}, got {triple!r}") from None
            if not len(mn) == len(op) == len(mx) or not all(a <= b <= c for a, b, c in zip(mn, op, mx)):
                raise MxTrtError(f"{where}: input {name!r} needs min <= opt <= max in every dimension, with one rank, "
                                 f"got {triple!r}")
            prof[str(name)] = (mn, op, mx)
        out.append(prof)
    return out


def _dims(shape: Any) -> Tuple[int, ...]:
    """A shape of integers from 1 to :data:`INT32_MAX` (raises ``TypeError`` / ``ValueError`` otherwise)."""
    if isinstance(shape, (str, bytes)) or any(isinstance(d, bool) for d in shape):
        raise TypeError("not a list of integers")
    dims = tuple(operator.index(d) for d in shape)
    if not dims or not all(1 <= d <= INT32_MAX for d in dims):
        raise ValueError("dimensions must be from 1 to 2**31 - 1")
    return dims


def get_optimization_profiles() -> Optional[List[Profile]]:
    """The explicit profiles in force: :func:`set_optimization_profiles`, else ``MXNET_TENSORRT_PROFILES`` (JSON)."""
    override = _profiles_override.get()
    if override is not None:
        return override
    raw = os.environ.get("MXNET_TENSORRT_PROFILES", "").strip()
    if not raw:
        return None
    where = f"MXNET_TENSORRT_PROFILES={raw[:200]!r}" + ("..." if len(raw) > 200 else "")
    try:
        data = json.loads(raw)
    except RecursionError:
        raise MxTrtError(f"{where} is not valid JSON (nested too deeply); expected a list of profiles") from None
    except ValueError as exc:
        raise MxTrtError(f"{where} is not valid JSON ({exc}); expected a list of profiles, e.g. "
                         '[{"data": [[1,3,224,224], [8,3,224,224], [32,3,224,224]]}]') from None
    return _parse_profiles(data, where)


def set_use_fp16(status: Optional[bool]) -> None:
    """Ask for fp16 engines at the next binds (overrides ``MXNET_TENSORRT_USE_FP16``; ``None`` clears).

    This thread's binds; set in the main thread, every thread's default (:class:`ScopedDefault`).
    """
    _fp16_override.set(None if status is None else bool(status))


def get_use_fp16() -> bool:
    """Whether the next bind builds fp16 engines."""
    override = _fp16_override.get()
    if override is not None:
        return override
    return _env_bool("MXNET_TENSORRT_USE_FP16", False)


@contextlib.contextmanager
def env_override(values: Mapping[str, Optional[str]]) -> Iterator[None]:
    """Set environment variables for a block (``None`` unsets one), restoring them after.

    Settings are read from the environment at every bind, so this scopes a bind's
    settings. Not thread-safe: the environment is process-wide.
    """
    old = {k: os.environ.get(k) for k in values}

    def apply(vals: Mapping[str, Optional[str]]) -> None:
        for k, v in vals.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    apply(values)
    try:
        yield
    finally:
        apply(old)


#: MXNet's own variable naming a subgraph backend for every bind; ``TensorRT`` turns the pass on (MXNet 1.5 to 1.9).
SUBGRAPH_BACKEND_ENV = "MXNET_SUBGRAPH_BACKEND"
_mask_lock = threading.Lock()
_mask_depth = 0
_mask_saved: Optional[str] = None


def subgraph_backend_is_tensorrt() -> bool:
    """True when ``MXNET_SUBGRAPH_BACKEND`` names TensorRT (any case), as MXNet 1.5 to 1.9 users set it.

    While :func:`masked_subgraph_backend` hides it from MXNet, the value it hides is read.
    """
    raw = _mask_saved if _mask_saved is not None else os.environ.get(SUBGRAPH_BACKEND_ENV, "")
    return raw.strip().lower() == "tensorrt"


@contextlib.contextmanager
def masked_subgraph_backend(every: bool = False) -> Iterator[None]:
    """MXNet's own binds inside this block see ``MXNET_SUBGRAPH_BACKEND=NONE`` if it named TensorRT.

    MXNet reads the variable at every executor it creates and has no subgraph
    backend called TensorRT (it would raise "SubgraphProperty TensorRT is not
    found"): the pass is what answers to that name. Other values (MKLDNN, ...)
    are left alone, unless ``every`` (calibration turns MXNet's own fusion off,
    so that every tensor it reads is computed). The variable is process-wide, so
    nested and concurrent blocks share one masking, undone when the last one leaves.
    """
    global _mask_depth, _mask_saved
    with _mask_lock:
        if _mask_depth == 0:
            if not (subgraph_backend_is_tensorrt() or every):
                masked = False
            else:
                _mask_saved = os.environ.get(SUBGRAPH_BACKEND_ENV, "")
                os.environ[SUBGRAPH_BACKEND_ENV] = "NONE"
                masked = True
        else:
            masked = True
        if masked:
            _mask_depth += 1
    try:
        yield
    finally:
        if masked:
            with _mask_lock:
                _mask_depth -= 1
                if _mask_depth == 0 and _mask_saved is not None:
                    if _mask_saved:
                        os.environ[SUBGRAPH_BACKEND_ENV] = _mask_saved
                    else:
                        os.environ.pop(SUBGRAPH_BACKEND_ENV, None)
                    _mask_saved = None


def thread_settings() -> Dict[str, str]:
    """The thread counts this process was given (``OMP_NUM_THREADS`` for MXNet, ``MXNET_TENSORRT_ORT_THREADS``).

    What a timing of MXNet against an engine depends on besides the machine:
    part of the key of the measured rule's stored decisions.
    """
    return {k: os.environ.get(k, "").strip() for k in ("OMP_NUM_THREADS", "MXNET_TENSORRT_ORT_THREADS")}


def _env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    v = raw.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise MxTrtError(f"{name}={raw!r}: expected 1 or 0")


def env_int(name: str, default: int, minimum: int = 0, maximum: Optional[int] = None) -> int:
    """An integer environment variable; unset or empty gives ``default``.

    Raises:
        MxTrtError: not an integer, or outside ``[minimum, maximum]``; the message
            names the variable, the value and what is allowed.
    """
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        v = int(raw.strip())
    except ValueError:
        raise MxTrtError(f"{name}={raw!r}: expected an integer") from None
    if v < minimum or (maximum is not None and v > maximum):
        allowed = f">= {minimum}" if maximum is None else f"between {minimum} and {maximum}"
        raise MxTrtError(f"{name}={raw!r}: must be {allowed}")
    return v


def _env_choice(name: str, default: str, allowed: Sequence[str]) -> str:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    v = raw.strip().lower()
    if v not in allowed:
        raise MxTrtError(f"{name}={raw!r}: expected one of {', '.join(allowed)}")
    return v


@dataclass(frozen=True)
class Settings:
    """The knobs of one bind.

    Attributes:
        exclude_ops: Operator names kept native (``MXNET_TENSORRT_EXCLUDE_OPS``).
        min_subgraph_size: Smallest subgraph turned into an engine
            (``MXNET_TENSORRT_MIN_SUBGRAPH_SIZE``).
        backend: Forced backend name or ``None`` for the context's default
            (``MXNET_TENSORRT_BACKEND``).
        fp16: Build fp16 engines (``MXNET_TENSORRT_USE_FP16`` / :func:`set_use_fp16`).
        max_batch_size: Dynamic batch up to this size (``MXNET_TENSORRT_MAX_BATCH_SIZE``).
        profiles: Explicit optimization profiles (:func:`set_optimization_profiles`).
        engine_rule: Which subgraphs become engines (``MXNET_TENSORRT_ENGINE_RULE``):
            ``measured`` (default) each engine of a subgraph the cost estimate does not
            rule out is timed at build against MXNet running the same subgraph,
            and kept only when faster; the decision is
            stored in the plan cache (:mod:`mx_trt.pipeline.measure`; without a
            plan cache the bind uses ``cost``). ``cost``: those whose estimated
            saving beats an engine's run cost (:mod:`mx_trt.passes.cost`).
            ``always``: every one of at least ``min_subgraph_size`` operators.
        strict: Raise when the pass fails on a graph instead of binding natively
            with a warning (``MXNET_TENSORRT_STRICT``; for tests and debugging).
        cache_dir: The plan cache folder; ``None`` reads ``MXNET_TENSORRT_CACHE_DIR``,
            ``""`` disables the cache.
        int8: Build INT8 engines (``MXNET_TENSORRT_PRECISION=int8``): explicit Q/DQ
            from a calibration table; never together with ``fp16``.
        calibration: The calibration table of int8 binds: a path (``MXNET_TENSORRT_CALIBRATION``)
            or a :class:`~mx_trt.export.calibration.CalibrationTable`; ``None`` with ``int8``
            is a :class:`~mx_trt.errors.CalibrationError` at bind.
        int8_exclude_ops / int8_exclude_nodes: MXNet operator names / node names kept in
            float inside int8 engines (``MXNET_TENSORRT_INT8_EXCLUDE_OPS`` / ``_NODES``).
        int8_keep_output_layer: Keep the last classifier layer(s) in float
            (``MXNET_TENSORRT_INT8_KEEP_OUTPUT_LAYER``).
        cache_max_mb: Size limit of the plan cache in MiB (0: none); ``None`` reads
            ``MXNET_TENSORRT_CACHE_MAX_MB``. An export's private cache sets 0.
        calibration_iters: With ``int8`` and no table, MXNet 1.9.1's way: the executor's
            first N forwards run natively and calibrate, then the int8 engines are built
            (``MXNET_TENSORRT_CALIBRATION_ITERS``, the ``calibration_iters`` option).
    """

    exclude_ops: FrozenSet[str] = field(default_factory=frozenset)
    min_subgraph_size: int = 1
    backend: Optional[str] = None
    fp16: bool = False
    max_batch_size: Optional[int] = None
    profiles: Optional[List[Profile]] = None
    strict: bool = False
    engine_rule: str = "measured"
    cache_dir: Optional[str] = None
    int8: bool = False
    calibration: Any = None
    int8_exclude_ops: FrozenSet[str] = field(default_factory=frozenset)
    int8_exclude_nodes: FrozenSet[str] = field(default_factory=frozenset)
    int8_keep_output_layer: bool = False
    calibration_iters: int = 0
    cache_max_mb: Optional[int] = None

    @property
    def precision(self) -> str:
        """``int8``, ``fp16`` or ``fp32``."""
        return "int8" if self.int8 else "fp16" if self.fp16 else "fp32"

    @classmethod
    def from_env(cls) -> "Settings":
        """The settings of one bind, from the environment.

        Every variable is checked here, including those a backend or the exporter
        reads later, so that a bad value stops the bind before any work. Whether
        int8 has its calibration table is checked once explicit options are applied
        (:meth:`check_int8`, called by :meth:`with_options` and the front-ends).

        Raises:
            MxTrtError: a variable has a bad value (the message names it and what is allowed).
        """
        env_int("MXNET_TENSORRT_ORT_THREADS", 0, 0, 1024)
        env_int("MXNET_TENSORRT_WORKSPACE_MB", 0, 1, 2**43 - 1)  # read by the TensorRT builder
        _env_choice("MXNET_TENSORRT_RTX_SPECIALIZATION", "lazy", ("lazy", "eager", "none"))  # TensorRT-RTX builds
        _check_advisory()
        excl = os.environ.get("MXNET_TENSORRT_EXCLUDE_OPS", "")
        # An unknown name is the backend selection's error (BackendUnavailableError, raised at bind).
        backend = os.environ.get("MXNET_TENSORRT_BACKEND", "").strip().lower() or None
        precision = _env_choice("MXNET_TENSORRT_PRECISION", "", ("fp32", "fp16", "int8"))
        fp16 = get_use_fp16()
        if precision == "int8" and fp16:
            # A bad environment: one warning and a native bind, like any other (a typed error under strict).
            raise MxTrtError("MXNET_TENSORRT_PRECISION=int8 and fp16 (MXNET_TENSORRT_USE_FP16 or set_use_fp16) are "
                             "both set: int8 engines keep their float layers in fp32; ask for one precision")
        if precision:
            fp16 = precision == "fp16"
        return cls(
            exclude_ops=frozenset(x.strip() for x in excl.split(",") if x.strip()),
            min_subgraph_size=env_int("MXNET_TENSORRT_MIN_SUBGRAPH_SIZE", 1, 1, INT32_MAX),
            backend=backend,
            fp16=fp16,
            max_batch_size=env_int("MXNET_TENSORRT_MAX_BATCH_SIZE", 0, 0, INT32_MAX) or None,
            profiles=get_optimization_profiles(),
            strict=_env_bool("MXNET_TENSORRT_STRICT", False),
            engine_rule=_env_choice("MXNET_TENSORRT_ENGINE_RULE", "measured", ENGINE_RULES),
            int8=precision == "int8",
            calibration=os.environ.get("MXNET_TENSORRT_CALIBRATION", "").strip() or None,
            int8_exclude_ops=_env_names("MXNET_TENSORRT_INT8_EXCLUDE_OPS"),
            int8_exclude_nodes=_env_names("MXNET_TENSORRT_INT8_EXCLUDE_NODES"),
            int8_keep_output_layer=_env_bool("MXNET_TENSORRT_INT8_KEEP_OUTPUT_LAYER", False),
            calibration_iters=env_int("MXNET_TENSORRT_CALIBRATION_ITERS", 0, 0, INT32_MAX),
        )

    def check_int8(self) -> None:
        """Raise :class:`~mx_trt.errors.CalibrationError` when int8 is asked for without a calibration table."""
        if self.int8 and self.calibration is None and not self.calibration_iters:
            raise CalibrationError("int8 engines need a calibration table: set MXNET_TENSORRT_CALIBRATION (or the "
                                   "calibration option) to a table written by mx_trt.calibrate, or calibrate on the "
                                   "first forwards with calibration_iters=N")

    def with_options(self, options: Mapping[str, Any], where: str = "backend options") -> "Settings":
        """These settings with explicit options applied (an explicit option wins over the environment).

        The options are those of ``Symbol.optimize_for('TensorRT', ..., **options)``,
        ``HybridBlock.hybridize(backend='TensorRT', **options)`` (or ``backend_opts=``)
        and ``optimize_for`` of Gluon: :data:`OPTIONS` lists them.

        Raises:
            MxTrtError: an unknown option, or a value that is not allowed (the message names both).
            PrecisionConflictError: int8 and fp16 asked for together (see :func:`_check_one_precision`).
        """
        changes: Dict[str, Any] = {}
        precision: Optional[str] = None
        fp16: Optional[bool] = None
        for name, value in options.items():
            parse = OPTIONS.get(name)
            if parse is None:
                raise MxTrtError(f"{where}: unknown option {name!r}; the options are {', '.join(sorted(OPTIONS))}")
            try:
                field_name, parsed = parse(value)
            except (TypeError, ValueError) as exc:
                raise MxTrtError(f"{where}: {name}={value!r}: {exc}") from None
            if field_name == "precision":  # one precision: int8, fp16 or fp32
                precision = parsed
                changes.update(int8=parsed == "int8", fp16=parsed == "fp16")
            elif field_name == "fp16":
                fp16 = bool(parsed)
                if parsed:
                    changes.update(fp16=True, int8=False)
            else:
                changes[field_name] = parsed
        _check_one_precision(precision, fp16, where)
        out = dataclasses.replace(self, **changes)
        out.check_int8()
        return out


def _check_one_precision(precision: Optional[str], fp16: Optional[bool], where: str) -> None:
    """Refuse two precisions asked for together: ``precision='int8'`` (or ``'fp32'``) with ``fp16=True``
    in one call's options (any order), or ``precision='int8'`` with ``set_use_fp16(True)`` /
    ``MXNET_TENSORRT_USE_FP16``. An option over another precision of the environment's
    (``MXNET_TENSORRT_PRECISION``) or of earlier options wins, as every option does.

    Raises:
        PrecisionConflictError: naming both requests.
    """
    other = ""
    if precision in ("int8", "fp32") and fp16:
        other = "fp16=True"
    elif precision == "int8" and fp16 is None and get_use_fp16():
        other = "fp16 from set_use_fp16(True) or MXNET_TENSORRT_USE_FP16"
    if other:
        asked = f"precision={precision!r}"
        why = " (int8 engines keep their float layers in fp32, not fp16)" if "int8" in asked + other else ""
        raise PrecisionConflictError(f"{where}: {asked} and {other} ask for two precisions{why}; ask for one")


def _check_advisory() -> None:
    """Variables whose bad value costs one warning per process, the default being used.

    ``MX_TRT_AUTOLOAD`` (read at interpreter start by ``mx_trt_autoload``: any
    value but 0/false/no/off keeps the hook), ``MXNET_TENSORRT_CUDART`` (a path
    that does not exist: the library path is searched instead) and operator
    names in ``MXNET_TENSORRT_EXCLUDE_OPS`` that MXNet does not know.
    """
    raw = os.environ.get("MX_TRT_AUTOLOAD")
    if raw is not None and raw.strip().lower() not in ("", "1", "true", "yes", "on", "0", "false", "no", "off"):
        warn_once(("MX_TRT_AUTOLOAD", raw), "MX_TRT_AUTOLOAD=%r is not understood: the start-up hook stays on "
                  "(the default); use 0 to opt out, 1 to opt in", raw)
    raw = os.environ.get("MXNET_TENSORRT_CUDART", "").strip()
    if os.sep in raw and not os.path.exists(raw):
        warn_once(("MXNET_TENSORRT_CUDART", raw), "MXNET_TENSORRT_CUDART=%r: no such file; the TensorRT backends "
                  "look for libcudart on the library path instead (the default)", raw)
    value = os.environ.get("MXNET_TENSORRT_EXCLUDE_OPS", "")
    excl = [x.strip() for x in value.split(",") if x.strip()]
    if excl and ("MXNET_TENSORRT_EXCLUDE_OPS", value) not in _warned:
        known = _mxnet_op_names()
        unknown = [x for x in excl if known and x not in known]
        if unknown:
            warn_once(("MXNET_TENSORRT_EXCLUDE_OPS", value), "MXNET_TENSORRT_EXCLUDE_OPS=%r: %s %s not an MXNet "
                      "operator name; it matches the op names of the symbol's JSON (e.g. Convolution, Activation)",
                      value, ", ".join(unknown), "is" if len(unknown) == 1 else "are")


def mxnet_op_names() -> FrozenSet[str]:
    """Every operator name MXNet has registered now (aliases included); empty if MXNet cannot say."""
    return _mxnet_op_names()


def _mxnet_op_names() -> FrozenSet[str]:
    """See :func:`mxnet_op_names`."""
    try:
        import mxnet as mx

        return frozenset(mx.operator.get_all_registered_operators())
    except Exception:  # no MXNet, or one without the list: nothing to compare with
        return frozenset()


def _opt_bool(field_name: str) -> Callable[[Any], Tuple[str, bool]]:
    def parse(v: Any) -> Tuple[str, bool]:
        if isinstance(v, str) and v.strip().lower() in ("1", "true", "yes", "on", "0", "false", "no", "off"):
            return field_name, v.strip().lower() in ("1", "true", "yes", "on")
        if isinstance(v, (bool, int)) and v in (0, 1):
            return field_name, bool(v)
        raise ValueError("expected True or False")
    return parse


def _opt_int(field_name: str, minimum: int) -> Callable[[Any], Tuple[str, Optional[int]]]:
    def parse(v: Any) -> Tuple[str, Optional[int]]:
        if isinstance(v, bool) or not isinstance(v, (int, str)) or not str(v).strip().lstrip("-").isdigit():
            raise ValueError("expected an integer")
        n = int(v)
        if n < minimum:
            raise ValueError(f"must be >= {minimum}")
        return field_name, n
    return parse


_PRECISIONS = {"fp16": "fp16", "float16": "fp16", "fp32": "fp32", "float32": "fp32", "int8": "int8"}


def _opt_precision(v: Any) -> Tuple[str, str]:
    if not isinstance(v, str) or v.strip().lower() not in _PRECISIONS:
        raise ValueError("expected 'fp32', 'fp16' or 'int8'")
    return "precision", _PRECISIONS[v.strip().lower()]


def _opt_names(field_name: str) -> Callable[[Any], Tuple[str, FrozenSet[str]]]:
    def parse(v: Any) -> Tuple[str, FrozenSet[str]]:
        items = v.split(",") if isinstance(v, str) else list(v)
        if not all(isinstance(x, str) for x in items):
            raise ValueError("expected names (a list, or one comma-separated string)")
        return field_name, frozenset(x.strip() for x in items if x.strip())
    return parse


def _opt_calibration(v: Any) -> Tuple[str, Any]:
    """A path, or a calibration table object (anything with ``graph_digest`` and ``ranges``)."""
    if isinstance(v, (str, os.PathLike)) and os.fspath(v).strip():
        return "calibration", os.fspath(v)
    if hasattr(v, "graph_digest") and hasattr(v, "ranges"):
        return "calibration", v
    raise ValueError("expected the path of a calibration table or a CalibrationTable")


def _env_names(name: str) -> FrozenSet[str]:
    return frozenset(x.strip() for x in os.environ.get(name, "").split(",") if x.strip())


def _opt_ops(v: Any) -> Tuple[str, FrozenSet[str]]:
    items = v.split(",") if isinstance(v, str) else list(v)
    if not all(isinstance(x, str) for x in items):
        raise ValueError("expected operator names (a list, or one comma-separated string)")
    return "exclude_ops", frozenset(x.strip() for x in items if x.strip())


def _opt_choice(field_name: str, allowed: Sequence[str]) -> Callable[[Any], Tuple[str, str]]:
    def parse(v: Any) -> Tuple[str, str]:
        if not isinstance(v, str) or v.strip().lower() not in allowed:
            raise ValueError(f"expected one of {', '.join(allowed)}")
        return field_name, v.strip().lower()
    return parse


def _opt_str(field_name: str) -> Callable[[Any], Tuple[str, str]]:
    def parse(v: Any) -> Tuple[str, str]:
        if not isinstance(v, (str, os.PathLike)):
            raise ValueError("expected a string")
        return field_name, os.fspath(v)
    return parse


def _opt_profiles(v: Any) -> Tuple[str, List[Profile]]:
    try:
        return "profiles", _parse_profiles(v, "profiles")
    except MxTrtError as exc:
        raise ValueError(str(exc)) from None


#: Option name -> parser giving (Settings field, value). The environment variable of each is in README.md.
OPTIONS: Dict[str, Callable[[Any], Tuple[str, Any]]] = {
    "fp16": _opt_bool("fp16"),
    "precision": _opt_precision,
    "max_batch_size": _opt_int("max_batch_size", 1),
    "profiles": _opt_profiles,
    "exclude_ops": _opt_ops,
    "min_subgraph_size": _opt_int("min_subgraph_size", 1),
    "engine_rule": _opt_choice("engine_rule", ENGINE_RULES),
    "backend": _opt_choice("backend", ("onnxruntime", "openvino", "tensorrt", "tensorrt_rtx")),
    "strict": _opt_bool("strict"),
    "cache_dir": _opt_str("cache_dir"),
    "calibration": _opt_calibration,
    "int8_exclude_ops": _opt_names("int8_exclude_ops"),
    "int8_exclude_nodes": _opt_names("int8_exclude_nodes"),
    "int8_keep_output_layer": _opt_bool("int8_keep_output_layer"),
    "calibration_iters": _opt_int("calibration_iters", 0),
}
