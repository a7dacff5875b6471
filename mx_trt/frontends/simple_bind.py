"""``Symbol.simple_bind`` with the pass: the user's call becomes one :class:`BindRequest`.

Everything MXNet's ``simple_bind`` accepts is accepted here, read as MXNet 1.9.1
reads it. Whatever stops the pass (gradients asked for, no weights, a bad
environment value, no backend for the context, any failure on this graph)
costs one warning and MXNet's own bind; ``MXNET_TENSORRT_STRICT=1`` raises instead.
"""
from __future__ import annotations

import contextlib
import contextvars
import logging
from typing import Any, Dict, Iterator, Mapping, Optional, Tuple

from mx_trt.frontends import hook
from mx_trt.frontends.common import (
    call_backend,
    call_settings,
    calibrates_on_forwards,
    calibrating_bind,
    grad_requests,
    guarded,
)
from mx_trt.pipeline.bind import bind
from mx_trt.pipeline.request import BindRequest
from mx_trt.pipeline.weights import load_weights
from mx_trt.runtime.fused_op import holds_fused_nodes

logger = logging.getLogger(__name__)


def _why_native(sym: Any, grad_req: Any, shared_buffer: Any, group2ctx: Any, stype_dict: Any,
                kwargs: Mapping[str, Any]) -> Optional[str]:
    if any(r != "null" for r in grad_requests(grad_req)):
        return f"grad_req={grad_req!r} asks for gradients and engines are inference-only (use grad_req='null')"
    if shared_buffer is None:
        return "no weights were given: pass the merged arg_params and aux_params as shared_buffer"
    shaped = {k for k, v in kwargs.items() if isinstance(v, tuple)}
    unshaped = [n for n in list(sym.list_arguments()) + list(sym.list_auxiliary_states()) if n not in shaped]
    if unshaped and not _carried.get() and not any(n in shared_buffer for n in unshaped):
        # Module binds this way before any weight exists (shared_buffer={} holds data arrays only),
        # then copies weights in by position: an executor without them would break it.
        return ("shared_buffer holds none of the weights (" + ", ".join(unshaped[:3])
                + (", ..." if len(unshaped) > 3 else "") + "): pass the merged arg_params and aux_params")
    if group2ctx:
        return "group2ctx (model parallelism) is not supported by the pass"
    if stype_dict and any(v != "default" for v in stype_dict.values()):
        return "sparse storage types are not supported by the pass"
    return None


_carried: "contextvars.ContextVar[bool]" = contextvars.ContextVar("mx_trt_weights_carried", default=False)


@contextlib.contextmanager
def weights_carried() -> Iterator[None]:
    """Binds inside this block bring every weight they have (a TensorRT symbol's): none missing is not a Module's bind."""
    token = _carried.set(True)
    try:
        yield
    finally:
        _carried.reset(token)


def shape_keywords(sym: Any, kwargs: Mapping[str, Any]) -> Dict[str, Tuple[int, ...]]:
    """The input shapes among ``simple_bind``'s keyword arguments, read as MXNet 1.9.1 reads them.

    MXNet takes a keyword as a shape only when its value is a tuple, and ignores
    the others (the design's example passes ``force_rebind=True``). It also
    ignores shapes of names that are neither arguments nor aux states.
    """
    names = set(sym.list_arguments()) | set(sym.list_auxiliary_states())
    shapes: Dict[str, Tuple[int, ...]] = {}
    for k, v in kwargs.items():
        if not isinstance(v, tuple):
            logger.debug("simple_bind keyword %s=%r is not a shape (MXNet ignores it)", k, v)
        elif k not in names:
            logger.info("simple_bind was given a shape for %r, which is not an input of the symbol; ignored as MXNet does", k)
        else:
            shapes[k] = v
    return shapes


def accelerated_simple_bind(
    sym: Any,
    ctx: Any,
    grad_req: Any = "write",
    type_dict: Any = None,
    stype_dict: Any = None,
    group2ctx: Any = None,
    shared_arg_names: Any = None,
    shared_exec: Any = None,
    shared_buffer: Any = None,
    **kwargs: Any,
) -> Any:
    """``Symbol.simple_bind`` with the TensorRT pass (same arguments, same result type).

    Falls back to MXNet's own bind, with one warning saying why, when gradients
    are requested, the weights are missing, no backend serves ``ctx``, or the
    pass fails on this graph for any reason: a graph MXNet binds never fails to
    bind because of the pass. ``MXNET_TENSORRT_STRICT=1`` raises instead.

    Raises:
        BackendUnavailableError: the backend forced by ``MXNET_TENSORRT_BACKEND`` is missing.
        MxTrtError: only with ``MXNET_TENSORRT_STRICT=1``, whatever stopped the pass.
    """
    original = hook.original_simple_bind()

    def native() -> Any:
        exe = original(sym, ctx, grad_req=grad_req, type_dict=type_dict, stype_dict=stype_dict, group2ctx=group2ctx,
                       shared_arg_names=shared_arg_names, shared_exec=shared_exec, shared_buffer=shared_buffer, **kwargs)
        if shared_buffer:  # as the accelerated bind does: arguments and aux states from shared_buffer
            load_weights(exe, shared_buffer)
        return exe

    if holds_fused_nodes(sym):  # already optimized (Symbol.optimize_for): its fused nodes are the engines
        logger.debug("simple_bind: the symbol already holds fused nodes; bound natively")
        return native()
    why = _why_native(sym, grad_req, shared_buffer, group2ctx, stype_dict, kwargs)
    if why:
        logger.warning("MXNET_USE_TENSORRT=1 but %s: binding natively", why)
        return native()

    def accelerated() -> Any:
        settings = call_settings()
        request = BindRequest(symbol=sym, shapes=shape_keywords(sym, kwargs), params=dict(shared_buffer),
                              settings=settings, backend=call_backend(ctx, settings), ctx=ctx, type_dict=type_dict,
                              native_bind=original, shared_arg_names=shared_arg_names, shared_exec=shared_exec)
        if calibrates_on_forwards(settings):
            return calibrating_bind(request)
        return bind(request)[0]

    return guarded("simple_bind", accelerated, native, fallback="binding natively")
