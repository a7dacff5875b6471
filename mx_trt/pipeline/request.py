"""One bind, as the pipeline sees it: the request every front-end builds.

The front-ends (``simple_bind``/``bind`` hook, contrib API, Module, Gluon,
``optimize_for``, the CLI) each turn the user's call into one
:class:`BindRequest`. Every later stage reads what it needs from it; nothing
below the front-ends sees the user's keyword arguments.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Optional, Tuple

from mx_trt.builder.backends import Backend
from mx_trt.settings import Settings

#: MXNet's own ``simple_bind`` with the symbol first:
#: ``native_bind(symbol, ctx, grad_req=..., type_dict=..., shared_arg_names=..., shared_exec=..., shared_buffer=..., **shapes)``.
NativeBind = Callable[..., Any]


@dataclass(frozen=True)
class BindRequest:
    """What one accelerated bind is asked to do.

    Attributes:
        symbol: The user's MXNet symbol.
        shapes: Shapes of the data inputs (names the symbol has; tuples of ints).
        params: Known values by name: the weights and aux states (NDArrays or
            numpy arrays). A name that also has a shape stays an executor argument.
        settings: Options of this bind (environment, then explicit options).
        backend: The backend that builds the engines.
        ctx: The MXNet context to bind on (``None`` for analysis only).
        type_dict: Input dtypes, as for ``simple_bind``.
        native_bind: MXNet's own ``simple_bind``, which binds the optimized
            symbol; handed in by the front-end so the pipeline never imports the hook.
        shared_arg_names / shared_exec: Passed on to ``native_bind`` untouched.
        reuse_engines: Take engines built earlier in this process (the engine pool) when they
            fit. ``False`` for a bind that must find or build each engine in its own plan cache
            (an export), whatever other threads bind meanwhile.
    """

    symbol: Any
    shapes: Mapping[str, Tuple[int, ...]]
    params: Mapping[str, Any]
    settings: Settings
    backend: Optional[Backend]
    ctx: Any = None
    type_dict: Optional[Mapping[str, Any]] = None
    native_bind: Optional[NativeBind] = None
    shared_arg_names: Any = None
    shared_exec: Any = None
    reuse_engines: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "shapes", {k: tuple(int(d) for d in v) for k, v in self.shapes.items()})

    def with_(self, **changes: Any) -> "BindRequest":
        """A copy with some fields changed."""
        return replace(self, **changes)

    @property
    def device_id(self) -> int:
        """-1 for the CPU, else the GPU ordinal."""
        if self.ctx is None or self.ctx.device_type == "cpu":
            return -1
        return int(self.ctx.device_id)

    @property
    def checked(self) -> bool:
        """Whether the executor's engines will be compared with native MXNet on its own forwards
        (:mod:`mx_trt.runtime.arbiter`), if it gets any: ``settings.runtime_check``, whose auto
        (``None``) means CPU binds under the measured engine rule; never without MXNet's own bind."""
        on = self.settings.runtime_check
        if on is None:
            on = self.ctx is not None and self.ctx.device_type == "cpu" and self.settings.engine_rule == "measured"
        return bool(on) and self.native_bind is not None
