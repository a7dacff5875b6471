"""The options of a bind, and the only module that touches ``os.environ``.

:meth:`Settings.from_env` parses every variable once per bind; the front-ends
apply explicit options over it (:meth:`Settings.with_options`) and hand the
result to the pipeline inside the ``BindRequest``. Every stage reads its options
from there: the plan cache its folder and size, the engine builders their
workspace, kernel specialization and thread counts.

A few variables are not options of one bind and have functions of their own:
the switch (``MXNET_USE_TENSORRT``, read by the hook before any settings),
MXNet's ``MXNET_SUBGRAPH_BACKEND`` (hidden from MXNet's own binds), the CUDA
runtime's path (loaded once per process), ``MX_TRT_AUTOLOAD`` (read at
interpreter start by ``mx_trt_autoload``, which cannot import this package) and
the environment of a child process (:func:`child_environment`).

The user-facing setters (``set_use_fp16``, ``set_optimization_profiles``,
``set_use_tensorrt``) keep their values in a :class:`ScopedDefault`, never in
the environment. Every variable is documented in README.md ("Environment variables").
"""
from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import os
import dataclasses
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, FrozenSet, Generic, Iterator, List, Mapping, Optional, Sequence, Set, Tuple, TypeVar

from mx_trt.errors import CalibrationError, MxTrtError, PrecisionConflictError
# The option parsers, and the names other modules read from here (re-exported).
from mx_trt.options import ENGINE_RULES, INT32_MAX, OPTIONS, PRECISIONS, Profile, parse_profiles  # noqa: F401

logger = logging.getLogger(__name__)


T = TypeVar("T")
_UNSET: Any = object()


class ScopedDefault(Generic[T]):
    """The value of a user-facing setter (``set_use_fp16``, ``set_optimization_profiles``, ``set_use_tensorrt``).

    What the main thread sets is the process's default, which every thread
    without a value of its own reads: MXNet's "set once, bind anywhere" (set in
    the main program, bind in worker threads) keeps working. What another thread
    sets is context-local (``contextvars``): it applies to that thread's binds
    (and to the asyncio tasks and ``asyncio.to_thread`` calls it starts), never
    to another thread's. ``None`` clears the value: in the main thread the process
    default (the environment decides again), in another thread its own (the
    process default decides again).
    """

    def __init__(self, name: str) -> None:
        self._var: "contextvars.ContextVar[Any]" = contextvars.ContextVar(name)
        self._process: Optional[T] = None

    def set(self, value: Optional[T]) -> None:
        if threading.current_thread() is threading.main_thread():
            self._process = value  # the main thread's value is the process default, read by every context
        else:
            self._var.set(_UNSET if value is None else value)

    def get(self) -> Optional[T]:
        value = self._var.get(_UNSET)
        return self._process if value is _UNSET else value  # type: ignore[no-any-return]


_fp16_override: ScopedDefault[bool] = ScopedDefault("mx_trt_use_fp16")
_profiles_override: ScopedDefault[List[Profile]] = ScopedDefault("mx_trt_profiles")

#: TensorRT-RTX's kernel specialization strategies (``MXNET_TENSORRT_RTX_SPECIALIZATION``).
RTX_SPECIALIZATIONS = ("lazy", "eager", "none")

#: The inputs ``Symbol.bind`` and ``optimize_for`` treat as data, never as weights.
DATA_NAMES_ENV = "MXNET_TENSORRT_DATA_NAMES"

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
    _profiles_override.set(None if profiles is None else parse_profiles(profiles, "set_optimization_profiles"))


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
    return parse_profiles(data, where)


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


#: The switch of the simple_bind hook (``MXNET_USE_TENSORRT``; the design's spelling too).
SWITCH_ENV = ("MXNET_USE_TENSORRT", "MXNet_USE_TENSORRT")
_ON = ("1", "true", "yes", "on")
_OFF = ("0", "false", "no", "off")


def switch_values() -> Tuple[Optional[str], ...]:
    """The raw values of the switch's variables (``None``: unset), to tell whether they changed."""
    return tuple(os.environ.get(n) for n in SWITCH_ENV)


def switch_from_env() -> bool:
    """True when ``MXNET_USE_TENSORRT`` (or the design's ``MXNet_USE_TENSORRT``) is on.

    ``1``/``true``/``yes``/``on`` mean on; ``0``, empty or unset mean off. Any
    other value is off, with a warning. Read at every bind, before its settings.
    """
    for name in SWITCH_ENV:
        raw = os.environ.get(name)
        if raw is None:
            continue
        v = raw.strip().lower()
        if v in _ON:
            return True
        if v not in _OFF + ("",):
            logger.warning("%s=%r is not understood; TensorRT pass is off (use 1 or 0)", name, raw)
        return False
    return False


def strict_from_env() -> bool:
    """``MXNET_TENSORRT_STRICT`` read on its own: for a bind whose settings could not be read."""
    return os.environ.get("MXNET_TENSORRT_STRICT", "").strip().lower() in _ON


def backend_forced_by_env() -> bool:
    """``MXNET_TENSORRT_BACKEND`` names a backend (read on its own, like :func:`strict_from_env`)."""
    return bool(os.environ.get("MXNET_TENSORRT_BACKEND", "").strip())


def cudart_path() -> str:
    """``MXNET_TENSORRT_CUDART``: the libcudart to load first (empty: search). Process-wide: it is loaded once."""
    return os.environ.get("MXNET_TENSORRT_CUDART", "").strip()


def child_environment(overrides: Optional[Mapping[str, Optional[str]]] = None,
                      base: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """The environment of a child process: ``base`` (default: this process's), with ``overrides`` applied.

    ``None`` as an override removes the variable. This process's own
    environment is never changed.
    """
    env = dict(os.environ if base is None else base)
    for k, v in (overrides or {}).items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


_quiet_lock = threading.Lock()
_quiet_depth = 0
SUBGRAPH_VERBOSE_ENV = "MXNET_SUBGRAPH_VERBOSE"


@contextlib.contextmanager
def quiet_mxnet_subgraph_log() -> Iterator[None]:
    """MXNet's native binds inside this block print no line about their subgraph backend.

    MXNet reads ``MXNET_SUBGRAPH_VERBOSE`` from the process's environment at
    every bind, so this is process-wide: it is for a command that owns its
    process (``mxtrt``). A value the user set is left alone; nested and
    concurrent blocks share one setting, removed when the last one leaves.
    """
    global _quiet_depth
    with _quiet_lock:
        if _quiet_depth == 0 and SUBGRAPH_VERBOSE_ENV in os.environ:
            owned = False
        else:
            owned = True
            if _quiet_depth == 0:
                os.environ[SUBGRAPH_VERBOSE_ENV] = "0"
            _quiet_depth += 1
    try:
        yield
    finally:
        if owned:
            with _quiet_lock:
                _quiet_depth -= 1
                if _quiet_depth == 0:
                    os.environ.pop(SUBGRAPH_VERBOSE_ENV, None)


#: The plan cache's folder and size limit (MiB) variables, and the default limit.
CACHE_DIR_ENV = "MXNET_TENSORRT_CACHE_DIR"
CACHE_MAX_MB_ENV = "MXNET_TENSORRT_CACHE_MAX_MB"
DEFAULT_CACHE_MAX_MB = 4096
# Values people write meaning "off" or "on": as a folder name they would put the
# cache in a folder of that name under the working directory.
_NOT_A_FOLDER = {"0", "1", "false", "true", "off", "on", "no", "yes", "none", "null", "disable", "disabled"}


def default_cache_dir() -> str:
    """``$XDG_CACHE_HOME/mx_trt``, or ``~/.cache/mx_trt`` when it is unset or relative.

    The XDG specification says a relative ``XDG_CACHE_HOME`` is invalid and must be ignored.
    """
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "mx_trt")


def _env_cache() -> Tuple[str, Optional[int], Tuple[str, ...]]:
    """(folder, limit in MiB, errors) of the plan cache from the environment.

    The folder is ``""`` when the cache is off: ``MXNET_TENSORRT_CACHE_DIR`` set
    to a blank string, or to a value that is not a folder (then with an error,
    as for a bad ``MXNET_TENSORRT_CACHE_MAX_MB``: a bad cache value costs the
    bind its cache and one warning, never the bind).
    """
    errors: List[str] = []
    raw_dir = os.environ.get(CACHE_DIR_ENV)
    if raw_dir is None:
        directory = default_cache_dir()
    elif not raw_dir.strip():
        directory = ""
    elif raw_dir.strip().lower() in _NOT_A_FOLDER:
        directory = ""
        errors.append(f"{CACHE_DIR_ENV}={raw_dir!r}: expected the path of a folder, or the empty string to disable "
                      "the plan cache (unset: the default folder)")
    else:
        directory = raw_dir
    raw_mb = os.environ.get(CACHE_MAX_MB_ENV, "")
    mb: Optional[int] = None
    if raw_mb.strip():
        try:
            mb = int(raw_mb)
        except ValueError:
            mb = -1
        if mb < 0:
            errors.append(f"{CACHE_MAX_MB_ENV}={raw_mb!r}: expected a whole number of MiB >= 0 (0 = no limit), "
                          f"or empty for the default {DEFAULT_CACHE_MAX_MB}")
            mb = None
    return directory, mb, tuple(errors)


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


def _env_auto_bool(name: str) -> Optional[bool]:
    """``None`` for ``auto`` or unset, else the variable as a boolean (:func:`_env_bool`'s values)."""
    raw = os.environ.get(name)
    if raw is None or raw.strip().lower() in ("", "auto"):
        return None
    try:
        return _env_bool(name, False)
    except MxTrtError:
        raise MxTrtError(f"{name}={raw!r}: expected auto, 1 or 0") from None


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
        cache_dir: The plan cache folder (``MXNET_TENSORRT_CACHE_DIR``, unset: :func:`default_cache_dir`);
            ``None`` or ``""``: no plan cache.
        int8: Build INT8 engines (``MXNET_TENSORRT_PRECISION=int8``): explicit Q/DQ
            from a calibration table; never together with ``fp16``.
        bf16: Build bfloat16 engines (``MXNET_TENSORRT_PRECISION=bf16``, ``precision='bf16'``):
            the float32 export computed in bfloat16 by backends that can (OpenVINO on a CPU
            with AVX512-BF16 or AMX, TensorRT on GPUs with bf16); others build float32 engines,
            with a log line. Never together with ``fp16`` or ``int8``.
        calibration: The calibration table of int8 binds: a path (``MXNET_TENSORRT_CALIBRATION``)
            or a :class:`~mx_trt.export.calibration.CalibrationTable`; ``None`` with ``int8``
            is a :class:`~mx_trt.errors.CalibrationError` at bind.
        int8_exclude_ops / int8_exclude_nodes: MXNet operator names / node names kept in
            float inside int8 engines (``MXNET_TENSORRT_INT8_EXCLUDE_OPS`` / ``_NODES``).
        int8_keep_output_layer: Keep the last classifier layer(s) in float
            (``MXNET_TENSORRT_INT8_KEEP_OUTPUT_LAYER``).
        cache_max_mb: Size limit of the plan cache in MiB (0: none; ``MXNET_TENSORRT_CACHE_MAX_MB``);
            ``None``: :data:`DEFAULT_CACHE_MAX_MB`. An export's private cache sets 0.
        cache_errors: Bad values of the cache variables: the bind runs without its plan
            cache, with one warning (``mxtrt build`` refuses them).
        workspace_mb: The TensorRT builders' workspace cap in MiB (``MXNET_TENSORRT_WORKSPACE_MB``;
            ``None``: no cap).
        rtx_specialization: TensorRT-RTX's kernel specialization for dynamic shapes
            (``MXNET_TENSORRT_RTX_SPECIALIZATION``: ``lazy``, ``eager``, ``none``; ``None``:
            the engine's own, ``lazy`` at build).
        ort_threads: Threads of each ONNX Runtime engine (``MXNET_TENSORRT_ORT_THREADS``; 0:
            the CPUs this process may use).
        omp_threads: ``OMP_NUM_THREADS`` as MXNet read it at start (``None``: unset); reported,
            and part of the measured rule's stored decisions.
        data_names: Inputs that are data, never weights, at ``Symbol.bind`` and
            ``optimize_for`` (``MXNET_TENSORRT_DATA_NAMES``, plus the ``data_names`` option).
        calibration_iters: With ``int8`` and no table, MXNet 1.9.1's way: the executor's
            first N forwards run natively and calibrate, then the int8 engines are built
            (``MXNET_TENSORRT_CALIBRATION_ITERS``, the ``calibration_iters`` option).
        runtime_check: Whether an accelerated executor keeps comparing its engines with
            native MXNet on its own forwards and lets the faster serve
            (``MXNET_TENSORRT_RUNTIME_CHECK``: ``auto``, ``1``, ``0``; the ``runtime_check``
            option; :mod:`mx_trt.runtime.arbiter`). ``None`` (auto): on for CPU binds
            under the measured engine rule that kept an engine.
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
    bf16: bool = False
    calibration: Any = None
    int8_exclude_ops: FrozenSet[str] = field(default_factory=frozenset)
    int8_exclude_nodes: FrozenSet[str] = field(default_factory=frozenset)
    int8_keep_output_layer: bool = False
    calibration_iters: int = 0
    cache_max_mb: Optional[int] = None
    cache_errors: Tuple[str, ...] = ()
    workspace_mb: Optional[int] = None
    rtx_specialization: Optional[str] = None
    ort_threads: int = 0
    omp_threads: Optional[str] = None
    data_names: FrozenSet[str] = field(default_factory=frozenset)
    runtime_check: Optional[bool] = None

    @property
    def precision(self) -> str:
        """``int8``, ``fp16``, ``bf16`` or ``fp32`` (:data:`PRECISIONS`)."""
        return "int8" if self.int8 else "fp16" if self.fp16 else "bf16" if self.bf16 else "fp32"

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
        engine = _env_engine()
        _check_advisory()
        cache_dir, cache_max_mb, cache_errors = _env_cache()
        excl = os.environ.get("MXNET_TENSORRT_EXCLUDE_OPS", "")
        # An unknown name is the backend selection's error (BackendUnavailableError, raised at bind).
        backend = os.environ.get("MXNET_TENSORRT_BACKEND", "").strip().lower() or None
        precision = _env_choice("MXNET_TENSORRT_PRECISION", "", PRECISIONS)
        fp16 = get_use_fp16()
        if precision in ("int8", "bf16") and fp16:
            # A bad environment: one warning and a native bind, like any other (a typed error under strict).
            why = "int8 engines keep their float layers in fp32" if precision == "int8" else "bf16 is not fp16"
            raise MxTrtError(f"MXNET_TENSORRT_PRECISION={precision} and fp16 (MXNET_TENSORRT_USE_FP16 or "
                             f"set_use_fp16) are both set: {why}; ask for one precision")
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
            bf16=precision == "bf16",
            calibration=os.environ.get("MXNET_TENSORRT_CALIBRATION", "").strip() or None,
            int8_exclude_ops=_env_names("MXNET_TENSORRT_INT8_EXCLUDE_OPS"),
            int8_exclude_nodes=_env_names("MXNET_TENSORRT_INT8_EXCLUDE_NODES"),
            int8_keep_output_layer=_env_bool("MXNET_TENSORRT_INT8_KEEP_OUTPUT_LAYER", False),
            calibration_iters=env_int("MXNET_TENSORRT_CALIBRATION_ITERS", 0, 0, INT32_MAX),
            cache_dir=cache_dir,
            cache_max_mb=cache_max_mb,
            cache_errors=cache_errors,
            omp_threads=os.environ.get("OMP_NUM_THREADS"),
            data_names=_env_names(DATA_NAMES_ENV),
            runtime_check=_env_auto_bool("MXNET_TENSORRT_RUNTIME_CHECK"),
            **engine,
        )

    def thread_counts(self) -> Dict[str, str]:
        """The thread counts of this bind (``OMP_NUM_THREADS`` for MXNet, ``MXNET_TENSORRT_ORT_THREADS``).

        What a timing of MXNet against an engine depends on besides the machine:
        part of the key of the measured rule's stored decisions.
        """
        return {"OMP_NUM_THREADS": (self.omp_threads or "").strip(),
                "MXNET_TENSORRT_ORT_THREADS": str(self.ort_threads) if self.ort_threads else ""}

    def engine_options(self) -> Dict[str, Any]:
        """What the engine builders read from these settings (``BuildOptions.extra`` keys, see the backends).

        ``ort_threads`` (ONNX Runtime), ``workspace_mb`` and ``rtx_specialization``
        (TensorRT); a key is present only when its value was given.
        """
        out: Dict[str, Any] = {}
        if self.ort_threads:
            out["ort_threads"] = self.ort_threads
        if self.workspace_mb is not None:
            out["workspace_mb"] = self.workspace_mb
        if self.rtx_specialization is not None:
            out["rtx_specialization"] = self.rtx_specialization
        return out

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
            if field_name == "precision":  # one precision: int8, fp16, bf16 or fp32
                precision = parsed
                changes.update(int8=parsed == "int8", fp16=parsed == "fp16", bf16=parsed == "bf16")
            elif field_name == "fp16":
                fp16 = bool(parsed)
                if parsed:
                    changes.update(fp16=True, int8=False, bf16=False)
            else:
                changes[field_name] = parsed
        _check_one_precision(precision, fp16, where)
        out = dataclasses.replace(self, **changes)
        if "cache_dir" in changes:
            out = out.with_cache_dir(changes["cache_dir"])
        out.check_int8()
        return out

    def with_cache_dir(self, folder: str) -> "Settings":
        """These settings with ``folder`` as the plan cache, whatever the environment named (bad or not)."""
        kept = tuple(e for e in self.cache_errors if not e.startswith(CACHE_DIR_ENV + "="))
        return dataclasses.replace(self, cache_dir=folder, cache_errors=kept)


def _env_engine() -> Dict[str, Any]:
    """The engine builders' fields of :class:`Settings` from the environment (raises ``MxTrtError``)."""
    return {"ort_threads": env_int("MXNET_TENSORRT_ORT_THREADS", 0, 0, 1024),
            "workspace_mb": env_int("MXNET_TENSORRT_WORKSPACE_MB", 0, 1, 2**43 - 1) or None,
            "rtx_specialization": _env_choice("MXNET_TENSORRT_RTX_SPECIALIZATION", "", RTX_SPECIALIZATIONS) or None}


def engine_options_from_env() -> Dict[str, Any]:
    """:meth:`Settings.engine_options` of the environment alone, for engines loaded outside a bind (``mx_trt.load``).

    Raises:
        MxTrtError: one of their variables has a bad value.
    """
    return Settings(**_env_engine()).engine_options()


def _check_one_precision(precision: Optional[str], fp16: Optional[bool], where: str) -> None:
    """Refuse two precisions asked for together: ``precision='int8'`` (or ``'fp32'``, ``'bf16'``) with ``fp16=True``
    in one call's options (any order), or ``precision='int8'`` / ``'bf16'`` with ``set_use_fp16(True)`` /
    ``MXNET_TENSORRT_USE_FP16``. An option over another precision of the environment's
    (``MXNET_TENSORRT_PRECISION``) or of earlier options wins, as every option does.

    Raises:
        PrecisionConflictError: naming both requests.
    """
    other = ""
    if precision in ("int8", "fp32", "bf16") and fp16:
        other = "fp16=True"
    elif precision in ("int8", "bf16") and fp16 is None and get_use_fp16():
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
        known = mxnet_op_names()
        unknown = [x for x in excl if known and x not in known]
        if unknown:
            warn_once(("MXNET_TENSORRT_EXCLUDE_OPS", value), "MXNET_TENSORRT_EXCLUDE_OPS=%r: %s %s not an MXNet "
                      "operator name; it matches the op names of the symbol's JSON (e.g. Convolution, Activation)",
                      value, ", ".join(unknown), "is" if len(unknown) == 1 else "are")


def mxnet_op_names() -> FrozenSet[str]:
    """Every operator name MXNet has registered now (aliases included); empty if MXNet cannot say."""
    try:
        import mxnet as mx

        return frozenset(mx.operator.get_all_registered_operators())
    except Exception:  # no MXNet, or one without the list: nothing to compare with
        return frozenset()


def _env_names(name: str) -> FrozenSet[str]:
    return frozenset(x.strip() for x in os.environ.get(name, "").split(",") if x.strip())


