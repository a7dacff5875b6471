"""The bind hook: ``Symbol.simple_bind`` runs the TensorRT pass when the switch is on.

The switch (:func:`set_use_tensorrt`, else ``MXNET_USE_TENSORRT``, read through
:mod:`mx_trt.settings`) is read at every bind (the design's promise), so one process can
bind the same symbol with the pass on, off and on again. Off or unset, MXNet's
own ``simple_bind`` runs untouched.

This module sits low in the plugin: it imports nothing of it but the errors.
The pass itself (:func:`mx_trt.bind.accelerated_simple_bind`) is handed in as
a callable by the package root (:func:`set_accelerated_bind`), so the hook and
the pass do not import each other.
"""
from __future__ import annotations

import contextlib
import logging
import sys
import threading
from typing import Any, Callable, Iterator, List, Optional, Tuple

from mx_trt import patches
from mx_trt.frontends import mxnet_import
from mx_trt.errors import MxTrtError
from mx_trt.settings import (
    SWITCH_ENV,
    ScopedDefault,
    masked_subgraph_backend,
    subgraph_backend_is_tensorrt,
    switch_from_env,
    switch_values,
)

logger = logging.getLogger(__name__)

#: Spellings accepted for the switch; the first one set wins.
ENV_SWITCH = SWITCH_ENV

_local = threading.local()
_patched = False
_lock = threading.RLock()  # install() may re-enter through the start-up hook
_original_simple_bind: Optional[Any] = None

#: ``accelerated(symbol, ctx, grad_req=..., type_dict=..., ..., **shapes) -> executor``:
#: the signature of ``Symbol.simple_bind`` with the symbol first.
AcceleratedBind = Callable[..., Any]
_accelerated: Optional[AcceleratedBind] = None
#: ``(is_deferred(symbol), bind)``: symbols that carry their TensorRT request (``get_backend_symbol``,
#: ``optimize_for`` without shapes) bind through ``bind``, whatever the switch says.
_deferred: Optional[Tuple[Callable[[Any], bool], AcceleratedBind]] = None
#: ``set_use_tensorrt``'s value (``None``: the environment decides): this thread's, the main thread's by default.
_use_override: ScopedDefault[Tuple[bool, Tuple[Optional[str], ...]]] = ScopedDefault("mx_trt_use_tensorrt")
#: Patches of the other front-ends (Module, Gluon, Symbol.optimize_for/bind), run once mxnet is hooked.
_installers: List[Callable[[], None]] = []


def set_accelerated_bind(fn: AcceleratedBind) -> None:
    """Install the bind the hook runs when the pass is on (the package root installs the pass's).

    Args:
        fn: Called as ``fn(symbol, ctx, grad_req=..., type_dict=..., stype_dict=...,
            group2ctx=..., shared_arg_names=..., shared_exec=..., shared_buffer=..., **shapes)``
            and returns the executor.
    """
    global _accelerated
    _accelerated = fn


def set_deferred_bind(is_deferred: Callable[[Any], bool], fn: AcceleratedBind) -> None:
    """Install the bind of symbols that carry their own TensorRT request (same signature as :func:`set_accelerated_bind`)."""
    global _deferred
    _deferred = (is_deferred, fn)


def set_use_tensorrt(status: Optional[bool]) -> None:
    """The switch over the environment (``None``: the environment decides again).

    For this thread's binds; set in the main thread, the default of every thread (:class:`ScopedDefault`).
    """
    # As MXNet's own (which wrote MXNET_USE_TENSORRT), the last word wins: a later change of the variable overrides it.
    _use_override.set(None if status is None else (bool(status), switch_values()))


def add_installer(fn: Callable[[], None]) -> None:
    """Run ``fn`` (another front-end's patch of MXNet) when the hook is installed, or now if it is.

    The package root registers each front-end's ``install``; this module imports none of them.
    """
    with _lock:
        if fn in _installers:
            return
        _installers.append(fn)
        patched = _patched
    if patched:
        fn()


def env_enabled() -> bool:
    """True when ``MXNET_USE_TENSORRT`` (or ``MXNet_USE_TENSORRT``) is on: :func:`mx_trt.settings.switch_from_env`."""
    return switch_from_env()


def pass_enabled() -> bool:
    """The effective switch: a :func:`disabled`/:func:`forced` block, else :func:`set_use_tensorrt`, else the environment.

    The environment turns the pass on with ``MXNET_USE_TENSORRT=1`` or, as in
    MXNet 1.5 to 1.9, ``MXNET_SUBGRAPH_BACKEND=TensorRT``.
    """
    forced = getattr(_local, "forced", None)
    if forced is not None:
        return bool(forced)
    override = _use_override.get()
    if override is not None and override[1] == switch_values():
        return bool(override[0])
    return env_enabled() or subgraph_backend_is_tensorrt()


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """Bind natively inside this block, whatever the environment says (this thread only)."""
    prev = getattr(_local, "forced", None)
    _local.forced = False
    try:
        yield
    finally:
        _local.forced = prev


@contextlib.contextmanager
def forced() -> Iterator[None]:
    """Run the pass inside this block, whatever the environment says (this thread only)."""
    prev = getattr(_local, "forced", None)
    _local.forced = True
    try:
        yield
    finally:
        _local.forced = prev


def original_simple_bind() -> Any:
    """MXNet's own ``Symbol.simple_bind`` (installs the hook if needed)."""
    install()
    assert _original_simple_bind is not None
    return _original_simple_bind


def install_when_mxnet_imported() -> None:
    """Install the hook now if ``mxnet`` is imported, else right after it is (without importing it).

    A finder waits for mxnet (:mod:`mx_trt.frontends.mxnet_import`): the start-up
    hook's when it is armed, else one armed here.
    """
    mxnet_import.call_when_imported(install)


def _uninstalled() -> None:
    """After :func:`mx_trt.patches.uninstall`: the next :func:`install` patches MXNet again."""
    global _patched, _original_simple_bind
    with _lock:
        _patched = False
        _original_simple_bind = None


def install() -> None:
    """Patch ``mxnet.symbol.Symbol.simple_bind`` and ``Executor.copy_params_from`` once (:mod:`mx_trt.patches`).

    Idempotent and thread-safe. Imports mxnet. With the pass on, the patched
    ``simple_bind`` runs the callable given to :func:`set_accelerated_bind`.
    """
    global _patched, _original_simple_bind
    if _patched:
        return
    with _lock:
        if _patched:
            return
        import mxnet as mx

        sym_cls = mx.symbol.Symbol
        exe_cls = mx.executor.Executor
        real_simple_bind = sym_cls.simple_bind

        def native_simple_bind(*args: Any, **kwargs: Any) -> Any:
            with masked_subgraph_backend():  # MXNet itself has no 'TensorRT' subgraph backend
                return real_simple_bind(*args, **kwargs)

        native_simple_bind.__wrapped__ = real_simple_bind  # type: ignore[attr-defined]
        _original_simple_bind = native_simple_bind

        def make_simple_bind(_: Any) -> Any:
            def simple_bind(self: Any, ctx: Any, grad_req: Any = "write", type_dict: Any = None, stype_dict: Any = None,
                            group2ctx: Any = None, shared_arg_names: Any = None, shared_exec: Any = None,
                            shared_buffer: Any = None, **kwargs: Any) -> Any:
                deferred = _deferred
                if deferred is not None and deferred[0](self):
                    return deferred[1](
                        self, ctx, grad_req=grad_req, type_dict=type_dict, stype_dict=stype_dict, group2ctx=group2ctx,
                        shared_arg_names=shared_arg_names, shared_exec=shared_exec, shared_buffer=shared_buffer,
                        **kwargs)
                if pass_enabled():
                    accelerated = _accelerated
                    if accelerated is None:
                        raise MxTrtError("the TensorRT pass is on but no accelerated bind is installed (import mx_trt)")
                    return accelerated(
                        self, ctx, grad_req=grad_req, type_dict=type_dict, stype_dict=stype_dict, group2ctx=group2ctx,
                        shared_arg_names=shared_arg_names, shared_exec=shared_exec, shared_buffer=shared_buffer,
                        **kwargs)
                return native_simple_bind(self, ctx, grad_req=grad_req, type_dict=type_dict, stype_dict=stype_dict,
                                          group2ctx=group2ctx, shared_arg_names=shared_arg_names,
                                          shared_exec=shared_exec, shared_buffer=shared_buffer, **kwargs)
            return simple_bind

        def make_copy_params_from(original: Any) -> Any:
            def copy_params_from(self: Any, arg_params: Any, aux_params: Any = None,
                                 allow_extra_params: bool = False) -> Any:
                info = getattr(self, "_mx_trt", None)
                if info is not None:
                    arg_params, aux_params = info.check_absorbed(arg_params, aux_params)
                return original(self, arg_params, aux_params, allow_extra_params)
            return copy_params_from

        patches.wrap(sym_cls, "simple_bind", make_simple_bind)
        patches.wrap(exe_cls, "copy_params_from", make_copy_params_from)
        patches.on_uninstall(_uninstalled)
        _patched = True
        logger.debug("mx_trt: Symbol.simple_bind hooked")
        for fn in list(_installers):
            fn()
