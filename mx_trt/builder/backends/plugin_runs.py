"""User plugin code inside an engine run: nothing it does may reach the backend's C++.

A plugin's Python function runs inside ONNX Runtime (``onnxruntime-extensions``)
or TensorRT (a host-function plugin). An exception that crosses into their C++
ends the process (``pybind11::error_already_set`` -> ``std::terminate``), and a
result of the wrong shape silently broadcasts through the next operator. So
every call goes through :func:`call_plugin`, which never raises: it catches
anything the function does (``SystemExit`` included), checks the results
against the plugin's declaration and the shapes MXNet inferred for the node,
records what went wrong in the run's side channel (:class:`PluginRun`, one per
engine run and thread), and returns placeholders of the right shape. The
engine raises after its run (:meth:`PluginRun.raise_fault`).

A run also carries the engine's own references to its plugins (taken at build
or load), so unregistering or replacing a plugin never pulls the function out
from under a live engine.
"""
from __future__ import annotations

import contextlib
import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from mx_trt.errors import EngineRunError
from mx_trt.export.shapes import PluginShape

__all__ = ["PluginRun", "call_plugin", "current", "first_line", "watching"]

logger = logging.getLogger(__name__)

Shape = Tuple[int, ...]


@dataclass
class PluginRun:
    """What the plugins did during one engine run (the side channel).

    Attributes:
        shapes: MXNet's shapes of the engine's plugin nodes (empty: nothing to check against).
        functions: ``domain::op_type`` -> the function the engine was built with.
        faults: One message per failed call, in call order.
    """

    shapes: Sequence[PluginShape] = ()
    functions: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    faults: List[str] = field(default_factory=list)

    def raise_fault(self, engine: str) -> None:
        """Raise the first recorded fault as an :class:`EngineRunError` naming ``engine`` (no-op without one)."""
        if not self.faults:
            return
        more = f" (and {len(self.faults) - 1} more fault(s) in this run)" if len(self.faults) > 1 else ""
        raise EngineRunError(f"{engine}: {self.faults[0]}{more}")


_LOCAL = threading.local()
#: Faults of calls made on a thread with no run open (a backend calling back from a thread of its own):
#: the next run to close takes them, so a fault is never silent.
_ORPHANS: List[str] = []
_ORPHANS_LOCK = threading.Lock()


@contextlib.contextmanager
def watching(shapes: Sequence[PluginShape] = (), functions: Optional[Mapping[str, Callable[..., Any]]] = None
             ) -> Iterator[PluginRun]:
    """Open the side channel of one engine run on this thread (backends call plugins on the caller's thread)."""
    run = PluginRun(shapes, dict(functions or {}))
    before = getattr(_LOCAL, "run", None)
    _LOCAL.run = run
    try:
        yield run
    finally:
        _LOCAL.run = before
        if _ORPHANS:
            with _ORPHANS_LOCK:
                run.faults.extend(_ORPHANS)
                _ORPHANS.clear()


def current() -> Optional[PluginRun]:
    """The run open on this thread, or ``None`` (a session run outside an mx_trt engine)."""
    run: Optional[PluginRun] = getattr(_LOCAL, "run", None)
    return run


def first_line(exc: BaseException) -> str:
    """``Type: first line of the message`` of an exception."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def _expected(name: str, shapes: Sequence[Shape], run: Optional[PluginRun]) -> Optional[List[Shape]]:
    """MXNet's output shapes for a call of plugin ``name`` on inputs of ``shapes``, or ``None`` if unknown."""
    if run is None:
        return None
    for s in run.shapes:
        if s.plugin == name and s.takes(shapes):
            return s.outputs_for(shapes)
    return None


def _checked(name: str, result: Any, out_dtypes: Sequence[str], want: Optional[Sequence[Shape]]) -> Tuple[np.ndarray, ...]:
    """The results as contiguous arrays of the declared types.

    Raises:
        EngineRunError: wrong count, a value that is no numeric array, a type that
            converts only by changing its kind (float -> int), or a shape other than MXNet's.
    """
    results = result if isinstance(result, tuple) else (result,)
    if len(results) != len(out_dtypes):
        raise EngineRunError(f"returned {len(results)} output(s), {len(out_dtypes)} declared")
    out: List[np.ndarray] = []
    for k, (r, dt) in enumerate(zip(results, out_dtypes)):
        arr = np.asarray(r)
        if arr.dtype.kind not in "biuf" or not np.can_cast(arr.dtype, np.dtype(dt), casting="same_kind"):
            raise EngineRunError(f"output {k} is {type(r).__name__} of type {arr.dtype}, declared {dt}")
        if want is not None and tuple(arr.shape) != tuple(want[k]):
            raise EngineRunError(f"output {k} has shape {tuple(arr.shape)}, MXNet infers {tuple(want[k])}")
        out.append(np.ascontiguousarray(arr, dtype=dt))
    return tuple(out)


def call_plugin(name: str, fn: Optional[Callable[..., Any]], inputs: Sequence[np.ndarray], attrs: Mapping[str, Any],
                out_dtypes: Sequence[str], out_shapes: Optional[Sequence[Shape]] = None) -> Tuple[np.ndarray, ...]:
    """Run a plugin's function as a backend's callback: never raises.

    Args:
        name: ``domain::op_type``.
        fn: The function (``None``: it is gone; a fault is recorded).
        inputs / attrs: What the function is called with.
        out_dtypes: The declared output types.
        out_shapes: The output shapes the backend fixed (TensorRT), else taken
            from MXNet's shapes of the node in the current run.

    Returns:
        One array per declared output: the function's results, or, after a fault
        (recorded in the current run; with none open on this thread, logged and
        handed to the next run that closes), zeros of the expected shapes
        (input 0's where none is known).
    """
    run = current()
    want = list(out_shapes) if out_shapes is not None else _expected(name, [tuple(a.shape) for a in inputs], run)
    try:
        if fn is None:
            raise EngineRunError("its function is no longer registered and the engine holds none")
        return _checked(name, fn(*inputs, **attrs), out_dtypes, want)
    except BaseException as exc:  # noqa: B036 - user code: SystemExit and KeyboardInterrupt must not unwind C++ either
        text = exc.args[0] if isinstance(exc, EngineRunError) and exc.args else first_line(exc)
        fault = f"plugin {name}: {text}" if isinstance(exc, EngineRunError) else f"plugin {name} raised {text}"
        if run is not None:
            run.faults.append(fault)
        else:
            logger.error("%s (on a thread with no mx_trt engine run open: zeros returned)", fault)
            with _ORPHANS_LOCK:
                _ORPHANS.append(fault)
    try:
        shapes = want or [tuple(inputs[0].shape) if inputs else (1,)] * len(out_dtypes)
        return tuple(np.zeros(s, dtype=dt) for s, dt in zip(shapes, out_dtypes))
    except BaseException:  # noqa: B036 - an absurd shape must not unwind C++ either
        return tuple(np.zeros((1,), dtype=dt) for dt in out_dtypes)
