"""The user-facing functions, with the names of MXNet's old ``mx.contrib.tensorrt``.

Code written for ``mx.contrib.tensorrt`` switches by changing its import to
``import mx_trt as trt``.
"""
from __future__ import annotations

import logging
import os
from typing import Any, Dict, Mapping, Optional, Tuple

from mx_trt.errors import MxTrtError
from mx_trt.frontends import gluon, hook, module, symbol
from mx_trt.frontends.common import scoped_options
from mx_trt.settings import OPTIONS, get_optimization_profiles, get_use_fp16, set_optimization_profiles, set_use_fp16

logger = logging.getLogger(__name__)

__all__ = [
    "set_use_tensorrt", "get_use_tensorrt", "set_use_fp16", "get_use_fp16",
    "tensorrt_bind", "get_optimized_symbol", "init_tensorrt_params", "bind_info",
    "set_optimization_profiles", "get_optimization_profiles", "refresh", "release",
]


def set_use_tensorrt(status: bool) -> None:
    """Turn the pass on or off for the following binds (sets ``MXNET_USE_TENSORRT``)."""
    os.environ["MXNET_USE_TENSORRT"] = "1" if status else "0"
    os.environ.pop("MXNet_USE_TENSORRT", None)


def get_use_tensorrt() -> bool:
    """Whether the next bind runs the pass."""
    return hook.env_enabled()


def tensorrt_bind(symbol: Any, ctx: Any, all_params: Mapping[str, Any], type_dict: Any = None,
                  stype_dict: Any = None, group2ctx: Any = None, **kwargs: Any) -> Any:
    """Bind ``symbol`` with the pass on, whatever the environment says.

    Args:
        symbol: The symbol to bind.
        ctx: The context (``mx.cpu()``, ``mx.gpu(i)``).
        all_params: The merged ``arg_params`` and ``aux_params``.
        type_dict, stype_dict, group2ctx: As for ``simple_bind``.
        **kwargs: Input shapes, as for ``simple_bind``, and options of this bind
            (:data:`mx_trt.settings.OPTIONS`: ``precision="int8"``, ``calibration=``,
            ``max_batch_size``, ...), which win over the environment.

    Returns:
        The executor.
    """
    hook.install()
    # A keyword is a shape only if its value is a tuple (as MXNet reads them); options are the others.
    options = {k: kwargs.pop(k) for k in list(kwargs) if k in OPTIONS and not isinstance(kwargs[k], tuple)}
    with hook.forced(), scoped_options(options):
        return symbol.simple_bind(ctx, type_dict=type_dict, stype_dict=stype_dict, group2ctx=group2ctx,
                                  shared_buffer=dict(all_params), grad_req="null", **kwargs)


def bind_info(executor: Any) -> Optional[Any]:
    """The :class:`~mx_trt.pipeline.bind.BindInfo` of an accelerated executor, or ``None``."""
    return getattr(executor, "_mx_trt", None)


def get_optimized_symbol(executor: Any) -> Any:
    """The symbol the executor runs: fused nodes plus the native ones.

    For an executor bound without the pass, its own symbol.
    """
    info = bind_info(executor)
    if info is None:
        logger.debug("executor was bound natively; returning its own symbol")
        return executor._symbol
    return info.symbol


def init_tensorrt_params(sym: Any, arg_params: Mapping[str, Any], aux_params: Mapping[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """Keep only the params an optimized symbol still takes (the native nodes' weights).

    Raises:
        MxTrtError: ``sym`` is not a symbol.
    """
    if not hasattr(sym, "list_arguments"):
        raise MxTrtError("init_tensorrt_params expects a symbol (see get_optimized_symbol)")
    args = set(sym.list_arguments())
    aux = set(sym.list_auxiliary_states())
    return ({k: v for k, v in arg_params.items() if k in args}, {k: v for k, v in aux_params.items() if k in aux})


def refresh(obj: Any = None) -> None:
    """Make accelerated Gluon blocks or Modules check their weights before their next forward.

    Changes made through MXNet (``set_data``, ``load_parameters``, ``set_params``,
    a ``Trainer`` step, a training forward) are seen without it; call it after
    writing into a weight array in place (``p.data()[:] = v``). Engines whose
    weights changed are built again, the others kept.

    Args:
        obj: A Gluon block, a ``Module``/``BucketingModule``, or ``None`` for every Gluon block.

    Raises:
        MxTrtError: ``obj`` is neither.
    """
    import mxnet as mx

    if obj is None or isinstance(obj, mx.gluon.Block):
        gluon.refresh(obj)
    elif isinstance(obj, mx.mod.BaseModule):
        module.refresh(obj)
    else:
        raise MxTrtError(f"refresh takes a Gluon block or a Module, not {type(obj).__name__}")


def release(sym: Any) -> int:
    """Let the engines of a symbol returned by ``Symbol.optimize_for('TensorRT')`` go; returns how many."""
    return symbol.release(sym)
