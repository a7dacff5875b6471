"""What every front-end does the same way: settings for one call, the backend, and the fallback rule.

The rule of every front-end: whatever stops the pass costs one warning naming
the cause, and the user's call then runs natively. With
``MXNET_TENSORRT_STRICT=1`` (or the ``strict`` option) the error is raised instead.
A backend forced by name (``MXNET_TENSORRT_BACKEND`` or the ``backend``
option) that is missing is always an error, and so is INT8 asked for without a
usable calibration table (:class:`~mx_trt.errors.CalibrationError`): an explicit
request that cannot be honoured is never answered in another precision.
"""
from __future__ import annotations

import contextlib
import contextvars
import logging
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, TypeVar

from mx_trt.builder.backends import Backend, select_backend
from mx_trt.errors import BackendUnavailableError, CalibrationError, MxTrtError, PrecisionConflictError
from mx_trt.settings import Settings, backend_forced_by_env, strict_from_env

logger = logging.getLogger(__name__)

T = TypeVar("T")


class NativeFallback(Exception):
    """Raised inside :func:`guarded` to leave the pass for a native run (the message is the cause)."""


_scoped: "contextvars.ContextVar[Optional[Dict[str, Any]]]" = contextvars.ContextVar("mx_trt_scoped_options", default=None)

#: ``request -> executor`` for int8 binds that calibrate on their first forwards
#: (:func:`mx_trt.quantize.online.calibrating_bind`, handed in by the package root).
_calibrating_bind: Optional[Callable[[Any], Any]] = None


def set_calibrating_bind(fn: Callable[[Any], Any]) -> None:
    """Install the bind used for ``precision='int8'`` with ``calibration_iters`` and no table."""
    global _calibrating_bind
    _calibrating_bind = fn


def calibrates_on_forwards(settings: Settings) -> bool:
    """True when a bind with these settings calibrates on its first forwards (int8, no table, ``calibration_iters``)."""
    return settings.int8 and settings.calibration is None and settings.calibration_iters > 0


def calibrating_bind(request: Any) -> Any:
    """The executor that calibrates on its first forwards, then runs int8 engines.

    Raises:
        MxTrtError: no calibrating bind is installed (import mx_trt).
    """
    if _calibrating_bind is None:
        raise MxTrtError("calibration_iters needs mx_trt's calibrating bind (import mx_trt)")
    return _calibrating_bind(request)


@contextlib.contextmanager
def scoped_options(options: Mapping[str, Any]) -> Iterator[None]:
    """Explicit options for the binds inside this block, in this thread (``tensorrt_bind``'s keywords).

    Options given to a call itself win over these.
    """
    token = _scoped.set({**(_scoped.get() or {}), **options})
    try:
        yield
    finally:
        _scoped.reset(token)


def call_settings(options: Optional[Mapping[str, Any]] = None, where: str = "backend options") -> Settings:
    """The settings of one call: the environment, then scoped options, then explicit options (which win).

    Raises:
        CalibrationError: int8 asked for without a calibration table.
        MxTrtError: an environment value or an option is not allowed (the message names it).
    """
    settings = Settings.from_env()
    merged = {**(_scoped.get() or {}), **(options or {})}
    settings = settings.with_options(merged, where) if merged else settings
    settings.check_int8()
    return settings


def call_backend(ctx: Any, settings: Settings) -> Backend:
    """The backend for ``ctx``.

    Raises:
        BackendUnavailableError: none serves ``ctx`` (a :class:`NativeFallback` case unless forced by name).
    """
    return select_backend(ctx.device_type, settings.backend)


def grad_requests(grad_req: Any) -> List[Any]:
    """The gradient requests of a bind, whether given as one value, a list or a dict."""
    if isinstance(grad_req, dict):
        return list(grad_req.values())
    if isinstance(grad_req, (list, tuple)):
        return list(grad_req)
    return [grad_req]


def one_line(exc: BaseException) -> str:
    """The exception's message on one line, at most 400 characters."""
    text = " ".join(str(exc).split())
    return text if len(text) <= 400 else text[:400] + "..."


def guarded(what: str, accelerated: Callable[[], T], native: Callable[[], T],
            options: Optional[Mapping[str, Any]] = None, fallback: Optional[str] = None,
            prefix: str = "MXNET_USE_TENSORRT=1 but") -> T:
    """Run ``accelerated()``; on any failure log one warning and run ``native()`` instead.

    The warning reads ``"<prefix> <cause>: <fallback>"``, e.g. ``"MXNET_USE_TENSORRT=1
    but <cause>: Module.forward runs natively"``.

    Args:
        what: The user's call (``"Module.forward"``, ``"the Gluon block 'net'"``).
        accelerated: The call with the pass.
        native: The same call without it.
        options: The call's explicit options, whose ``strict`` and ``backend`` win over the environment's.
        fallback: What happens instead; default ``"<what> runs natively"``.
        prefix: What asked for the pass (the switch, or an explicit backend name).

    Raises:
        BackendUnavailableError: a backend forced by name is missing.
        CalibrationError: int8 was asked for without a usable calibration table.
        PrecisionConflictError: int8 and fp16 were asked for together.
        Exception: whatever ``accelerated`` raised, when strict (a :class:`NativeFallback` never).
    """
    tail = fallback or f"{what} runs natively"
    try:
        return accelerated()
    except NativeFallback as exc:
        logger.warning("%s %s: %s", prefix, exc, tail)
    except (CalibrationError, PrecisionConflictError):
        raise  # explicit requests that cannot be honoured as asked: never replaced by a native run
    except BackendUnavailableError as exc:
        if _forced_backend(options) or _strict(options):
            raise
        logger.warning("%s %s: %s", prefix, exc, tail)
    except MxTrtError as exc:
        if _strict(options):
            raise
        logger.warning("%s %s: %s", prefix, one_line(exc), tail)
    except Exception as exc:  # noqa: BLE001 - any failure of the pass means a native run, never a crash
        if _strict(options):
            raise
        logger.warning("%s the pass failed on this graph (%s: %s): %s", prefix, type(exc).__name__, one_line(exc), tail)
        logger.debug("the pass failed", exc_info=True)
    return native()


def _strict(options: Optional[Mapping[str, Any]]) -> bool:
    if options and "strict" in options:
        try:
            return Settings().with_options({"strict": options["strict"]}).strict
        except MxTrtError:
            return False
    return strict_from_env()


def _forced_backend(options: Optional[Mapping[str, Any]]) -> bool:
    return bool((options or {}).get("backend")) or backend_forced_by_env()
