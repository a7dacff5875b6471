"""The user-facing functions, with the names and signatures of MXNet's ``mx.contrib.tensorrt`` (1.3 to 1.9.1).

Once ``mxnet`` is imported (the start-up hook imports mx_trt then), they are
also ``mxnet.contrib.tensorrt`` (:func:`install_module`), so code written for
MXNet's own integration runs unchanged; ``import mx_trt as trt`` reaches the same
functions and a few more.
"""
from __future__ import annotations

import logging
import sys
import types
from typing import Any, Dict, Mapping, Optional, Tuple

from mx_trt import patches
from mx_trt.errors import MxTrtError, TrainingNotSupportedError
from mx_trt.frontends import deferred, gluon, hook, module, symbol
from mx_trt.frontends.common import grad_requests, scoped_options
from mx_trt.runtime.fused_op import holds_fused_nodes
from mx_trt.settings import OPTIONS, get_optimization_profiles, get_use_fp16, set_optimization_profiles, set_use_fp16

logger = logging.getLogger(__name__)

__all__ = [
    "set_use_tensorrt", "get_use_tensorrt", "set_use_fp16", "get_use_fp16",
    "tensorrt_bind", "get_optimized_symbol", "init_tensorrt_params", "bind_info",
    "set_optimization_profiles", "get_optimization_profiles", "refresh", "release",
]


def set_use_tensorrt(status: bool) -> None:
    """Turn the pass on or off for the following binds (MXNet 1.3/1.4's switch).

    Called in the main thread, it is every thread's default (set once, bind
    anywhere, as in MXNet); called in another thread, it applies to that
    thread's binds only. It wins over ``MXNET_USE_TENSORRT`` until the variable
    changes or it is called again; the environment is not written.
    """
    hook.set_use_tensorrt(bool(status))


def get_use_tensorrt() -> bool:
    """Whether the next bind runs the pass (:func:`set_use_tensorrt`, else the environment)."""
    return hook.pass_enabled()


def tensorrt_bind(symbol: Any, ctx: Any, all_params: Mapping[str, Any], type_dict: Any = None,
                  stype_dict: Any = None, group2ctx: Any = None, **kwargs: Any) -> Any:
    """Bind ``symbol`` with the pass on, whatever the switch says (MXNet 1.3/1.4's ``tensorrt_bind``).

    Args:
        symbol: The symbol to bind.
        ctx: The context (``mx.cpu()``, ``mx.gpu(i)``).
        all_params: The merged ``arg_params`` and ``aux_params``.
        type_dict, stype_dict, group2ctx: As for ``simple_bind``.
        **kwargs: Input shapes and every other ``simple_bind`` keyword
            (``grad_req``, ``shared_arg_names``, ``shared_exec``, ``force_rebind``,
            ...), passed through; and options of this bind
            (:data:`mx_trt.settings.OPTIONS`: ``precision="int8"``, ``calibration=``,
            ``max_batch_size``, ...), which win over the environment.

    Returns:
        The executor.

    Raises:
        TrainingNotSupportedError: ``grad_req`` asks for gradients (a ``RuntimeError``, as MXNet 1.4 raised).
    """
    hook.install()
    grad_req = kwargs.pop("grad_req", "null")
    if any(r != "null" for r in grad_requests(grad_req)):
        raise TrainingNotSupportedError(
            f"tensorrt_bind builds inference engines, but grad_req={grad_req!r} asks for gradients: bind with "
            "grad_req='null' for inference, or train with an ordinary simple_bind (pass off)")
    buffer = dict(all_params)
    buffer.update(kwargs.pop("shared_buffer", None) or {})
    # A keyword is a shape only if its value is a tuple (as MXNet reads them); options are the others.
    options = {k: kwargs.pop(k) for k in list(kwargs) if k in OPTIONS and not isinstance(kwargs[k], tuple)}
    with hook.forced(), scoped_options(options):
        return symbol.simple_bind(ctx, type_dict=type_dict, stype_dict=stype_dict, group2ctx=group2ctx,
                                  shared_buffer=buffer, grad_req=grad_req, **kwargs)


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
    """Attach the weights to a TensorRT symbol; return the params the executor still needs (MXNet 1.5 to 1.8).

    For a symbol from ``get_backend_symbol('TensorRT')`` (or ``optimize_for``
    without shapes) the weights are kept with the symbol, to be baked into its
    engines at ``simple_bind``, and the weights of the operators outside its
    TensorRT nodes are returned, for ``copy_params_from`` after the bind. For a
    symbol that already runs engines (``get_optimized_symbol``), the params it
    still takes. The input dicts are not changed.

    Raises:
        MxTrtError: ``sym`` is not a symbol.
    """
    if not hasattr(sym, "list_arguments"):
        raise MxTrtError("init_tensorrt_params expects a symbol (from get_backend_symbol('TensorRT'))")
    if not holds_fused_nodes(sym):
        return deferred.attach(sym, arg_params or {}, aux_params or {})
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


#: What ``mxnet.contrib.tensorrt`` holds: MXNet 1.3 to 1.9.1's names, then mx_trt's own extras.
MODULE_NAMES = ("set_use_tensorrt", "get_use_tensorrt", "set_use_fp16", "get_use_fp16", "tensorrt_bind",
                "get_optimized_symbol", "init_tensorrt_params", "bind_info", "set_optimization_profiles",
                "get_optimization_profiles", "release")


def install_module() -> None:
    """Make ``mxnet.contrib.tensorrt`` this module's functions (MXNet's CPU wheels have no such module).

    ``import mxnet.contrib.tensorrt``, ``from mxnet.contrib import tensorrt``
    and ``mx.contrib.tensorrt.<name>`` all work afterwards. A real
    ``mxnet.contrib.tensorrt`` (a GPU build of MXNet with its own TensorRT) is
    replaced too: its functions need MXNet's own TensorRT subgraph backend,
    which the pass stands in for.
    """
    import mxnet as mx

    mod = types.ModuleType("mxnet.contrib.tensorrt", "MXNet's TensorRT functions, served by mx_trt (see mx_trt.frontends.contrib).")
    this = sys.modules[__name__]
    for name in MODULE_NAMES:
        setattr(mod, name, getattr(this, name))
    mod.__all__ = list(MODULE_NAMES)  # type: ignore[attr-defined]
    patches.put_module("mxnet.contrib.tensorrt", mod)
    patches.put(mx.contrib, "tensorrt", mod)
