"""The executor's guarded forward: typed errors of fused nodes, the direct path, and the run-time check.

:func:`guard_forward` replaces an accelerated executor's ``forward`` and
``reshape`` (on the instance). It is the one place where a forward chooses
between the direct run of a whole-model engine, MXNet's own executor, and the
native twin of the run-time check.
"""
from __future__ import annotations

import weakref
from typing import Any, Dict, Optional, Sequence

from mx_trt.errors import MxTrtError
from mx_trt.runtime.direct import DirectForward
from mx_trt.runtime.fused_op import FusedEngine


def take_error(engines: Sequence[FusedEngine]) -> Optional[MxTrtError]:
    """The first recorded run error of ``engines``, cleared on every one of them."""
    found: Optional[MxTrtError] = None
    for f in engines:
        err, f.last_error = f.last_error, None
        found = found or err
    return found


def guard_forward(exe: Any, engines: Sequence[FusedEngine], check: Any = None) -> None:
    """Make ``exe.forward`` raise the typed error of a fused node that failed, instead of MXNet's check failure.

    MXNet runs a custom operator asynchronously and reports its failure later, at
    the first read of an output, as an ``MXNetError`` that has lost the
    operator's message. The guarded ``forward`` waits for the outputs (a caller
    reads them next anyway), and raises the node's :class:`EngineRunError` (or
    other typed error) from there. ``exe.reshape`` gives guarded executors too,
    and raises the typed error of a fused node that cannot take the new shapes
    (no engine can be made for them) instead of MXNet's failed shape inference.
    The executor keeps working: the next forward runs again.

    An executor whose symbol is one fused node runs its inference forwards on
    the calling thread (:class:`~mx_trt.runtime.direct.DirectForward`), without
    MXNet's engine; the typed error of a failed run is raised the same way.

    With ``check`` (a :class:`~mx_trt.runtime.twin.RuntimeCheck`), each inference
    forward (``is_train=False``) is served by the engines or by the executor's
    native twin, as the check decides from the forwards' own timings
    (``exe._mx_trt_check``); a reshaped executor gets the check's
    :meth:`~mx_trt.runtime.twin.RuntimeCheck.reshaped`.

    Without engines and ``check``, ``forward`` stays MXNet's own, asynchronous as
    natively; ``reshape`` still passes the bind's information on.
    """
    import mxnet as mx

    # The wrappers hold the executor weakly: a cycle through it would keep it, and its
    # engines, alive until a garbage collection.
    cls, ref, engines = type(exe), weakref.ref(exe), list(engines)

    direct = DirectForward.plan(exe, engines)

    def engines_forward(me: Any, is_train: bool, kwargs: Dict[str, Any]) -> Any:
        if direct is not None and not is_train and getattr(me, "_monitor_callback", None) is None:
            return direct.forward(me, kwargs)
        outs = cls.forward(me, is_train=is_train, **kwargs)
        for o in outs:
            o.wait_to_read()
        return outs

    def forward(is_train: bool = False, **kwargs: Any) -> Any:
        me = ref()
        if me is None:
            raise MxTrtError("the executor is gone")
        try:
            if check is not None and not is_train:
                return check.forward(me, lambda: engines_forward(me, False, kwargs), kwargs)
            return engines_forward(me, is_train, kwargs)
        except mx.base.MXNetError:
            err = take_error(engines)
            if err is None:
                raise
            raise err from None

    def reshape(*args: Any, **kwargs: Any) -> Any:
        me = ref()
        if me is None:
            raise MxTrtError("the executor is gone")
        try:
            new = cls.reshape(me, *args, **kwargs)
        except mx.base.MXNetError:
            err = take_error(engines)
            if err is None:
                raise
            raise err from None
        guard_forward(new, engines, check.reshaped(args, kwargs) if check is not None else None)
        info = getattr(me, "_mx_trt", None)
        if info is not None and getattr(new, "_mx_trt", None) is None:
            new._mx_trt = info
        return new

    forward.__doc__ = cls.forward.__doc__
    reshape.__doc__ = cls.reshape.__doc__
    if engines or check is not None:
        exe.forward = forward  # else MXNet's own: nothing to guard, and its forward stays asynchronous
    exe.reshape = reshape
    exe._mx_trt_check = check
