"""``Symbol.optimize_for('TensorRT')`` and ``Symbol.bind`` with the pass.

``Symbol.optimize_for(backend, args, aux, ctx, shape_dict, ...)`` with the
backend ``'TensorRT'`` (any case) or ``'mx_trt'`` returns the partitioned
symbol: fused nodes running engines, plus the native nodes. As MXNet 1.9.1 does
for its own backends, ``args`` and ``aux`` are updated in place: the weights
baked into engines are removed from them. Any other backend name goes to
MXNet's own ``optimize_for`` untouched. The environment switch plays no part:
naming the backend runs the pass.

Which inputs are data: the names in ``shape_dict``, the names of the
``data_names=[...]`` option and those of ``MXNET_TENSORRT_DATA_NAMES``; every
other entry of ``args`` and ``aux`` is a weight baked into the engines. Data
shapes come from ``shape_dict``, else from the data's arrays in ``args``.

An optimized symbol is **process-local**: its fused nodes name engines that live
in this process. They stay alive (pinned) until :func:`release` is called with
the symbol and no executor uses them (MXNet itself keeps the nodes, hence the
engines, of a symbol with custom operators once it has been serialized with
``tojson``/``save``). Saving the symbol and loading it in another process cannot find
them; loading one whose engines are gone raises :class:`MxTrtError` (rather
than MXNet crashing in the custom operator's constructor). The portable route
is ``mx_trt.export_model`` and ``mx_trt.load``.

``Symbol.bind`` runs the pass when ``MXNET_USE_TENSORRT=1`` and the bind is for
inference (no ``args_grad``, or every ``grad_req`` ``'null'``). Every argument
arrives as an array, so which are weights is a guess, made conservatively
(:func:`looks_like_parameter`): the aux states, plus the arguments whose names
end as parameters do (``_weight``, ``_bias``, ``_gamma``, ``_beta``,
``_moving_mean``, ...). ``MXNET_TENSORRT_DATA_NAMES=a,b`` names inputs that are
data whatever their names. A weight taken for data only stays an input of its
engine; data taken for a weight would be baked in and give wrong answers, hence
the rule. The optimized symbol is bound with MXNet's own ``bind`` on the
caller's arrays, so writing ``args['data']`` reaches the executor. Weights
baked into engines are read once, at bind time.

A symbol that already holds fused nodes is never optimized again: ``bind`` and
``simple_bind`` bind it natively.

Whatever stops the pass costs one warning and MXNet's own result for the call
(:func:`mx_trt.frontends.common.guarded`); the ``strict`` option or
``MXNET_TENSORRT_STRICT=1`` raises instead.
"""
from __future__ import annotations

import json
import logging
import re
import threading
import warnings
from typing import Any, Dict, FrozenSet, List, Mapping, MutableMapping, Optional, Sequence, Tuple

from mx_trt import patches
from mx_trt.errors import MxTrtError
from mx_trt.frontends import deferred, hook
from mx_trt.frontends.common import NativeFallback, call_backend, call_settings, grad_requests, guarded
from mx_trt.pipeline.bind import BindInfo, optimize
from mx_trt.pipeline.request import BindRequest
from mx_trt.settings import DATA_NAMES_ENV, masked_subgraph_backend
from mx_trt.runtime.forward import guard_forward
from mx_trt.runtime.fused_op import (
    OP_TYPE,
    FusedEngine,
    fused_engine_keys,
    holds_fused_nodes,
    lookup_engine,
    pin,
    unpin,
)

logger = logging.getLogger(__name__)

#: Backend names ``optimize_for`` answers for (compared in lower case); others go to MXNet.
BACKEND_NAMES = ("tensorrt", "mx_trt")
#: Name endings of the arguments ``Symbol.bind`` takes for weights (Gluon, Module and model zoo names).
PARAM_SUFFIXES = ("weight", "bias", "gamma", "beta", "alpha", "moving_mean", "moving_var",
                  "running_mean", "running_var")
_PARAM_RE = re.compile(r"(^|_)(" + "|".join(PARAM_SUFFIXES) + r")$")

_lock = threading.Lock()
_originals: Dict[str, Any] = {}


def is_our_backend(backend: Any) -> bool:
    """True when ``optimize_for``'s backend name means this pass (``'TensorRT'`` in any case, or ``'mx_trt'``)."""
    return isinstance(backend, str) and backend.strip().lower() in BACKEND_NAMES


def looks_like_parameter(name: str) -> bool:
    """True when an argument's name ends as a parameter's does (``conv0_weight``, ``bn_moving_var``, ...)."""
    return bool(_PARAM_RE.search(name))


def engines(symbol: Any) -> List[FusedEngine]:
    """The live engines the fused nodes of ``symbol`` run (``run_count`` counts their forwards)."""
    found: List[FusedEngine] = []
    for key in fused_engine_keys(symbol):
        try:
            found.append(lookup_engine(key))
        except MxTrtError:
            continue
    return found


def release(symbol: Any) -> int:
    """Stop keeping alive the engines of a symbol returned by ``optimize_for('TensorRT')``.

    Executors bound from the symbol keep their engines until they are freed;
    the symbol cannot be bound again once they are.

    Args:
        symbol: The optimized symbol (or its JSON text).

    For a TensorRT symbol whose engines are built at ``simple_bind``
    (``get_backend_symbol``, ``optimize_for`` without shapes), the weights kept
    with it are let go too: binding it afterwards needs them in ``shared_buffer``.

    Returns:
        How many engines were pinned and are released.
    """
    if isinstance(symbol, str):
        if deferred.PLACEHOLDER_OP in symbol or deferred.TOKEN_HIDDEN in symbol:
            deferred.release_tokens(deferred.tokens_of(json.loads(symbol)))
    else:
        deferred.release_tokens(deferred.tokens_in(symbol))
    return unpin(fused_engine_keys(symbol))


def check_engines_alive(json_text: str) -> None:
    """Raise if a symbol's JSON names fused engines this process does not have.

    Raises:
        MxTrtError: some engines are gone (released, or the symbol comes from another process).
    """
    keys = fused_engine_keys(json_text)
    gone = []
    for key in keys:
        try:
            lookup_engine(key)
        except MxTrtError:
            gone.append(key)
    if gone:
        raise MxTrtError(
            f"this symbol holds {len(keys)} mx_trt fused node(s) and the engine(s) {', '.join(gone[:5])}"
            f"{', ...' if len(gone) > 5 else ''} are not in this process (released, or the symbol was optimized "
            "in another process): an optimized symbol is process-local. Load the original symbol and optimize it "
            "again, or save the bound model with mx_trt.export_model and load it with mx_trt.load"
        )


# --------------------------------------------------------------------------- optimize_for


def _names_option(value: Any, where: str) -> FrozenSet[str]:
    if value is None:
        return frozenset()
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple, set, frozenset)) or not all(isinstance(x, str) for x in items):
        raise MxTrtError(f"{where}: data_names={value!r}: expected input names (a list, or one comma-separated string)")
    return frozenset(x.strip() for x in items if x.strip())


def _inputs_of(sym: Any, args: Optional[Mapping[str, Any]], aux: Optional[Mapping[str, Any]],
               shape_dict: Optional[Mapping[str, Any]], type_dict: Optional[Mapping[str, Any]],
               data: FrozenSet[str], where: str) -> Tuple[Dict[str, Tuple[int, ...]], Dict[str, Any], Dict[str, Any]]:
    """``optimize_for``'s arguments read as the pass needs them: data shapes, weights, dtypes.

    Raises:
        NativeFallback: no input has a shape (the graph cannot be analyzed), or an
            aux state has no value (it would become an argument of the new symbol).
    """
    arg_names, aux_names = list(sym.list_arguments()), list(sym.list_auxiliary_states())
    names = set(arg_names) | set(aux_names)
    given: Dict[str, Any] = {}
    for d in (aux or {}, args or {}):
        given.update({k: v for k, v in d.items() if k in names})
    shapes = {k: tuple(int(x) for x in v) for k, v in (shape_dict or {}).items() if k in names}
    for k in sorted(data):
        if k not in shapes and k in given:
            shapes[k] = tuple(int(x) for x in given[k].shape)
    params = {k: v for k, v in given.items() if k not in data and k not in shapes}
    # As MXNet: an array's own dtype, else type_dict (which only serves names without an array).
    types: Dict[str, Any] = {k: v for k, v in (type_dict or {}).items() if k in names}
    types.update({k: v.dtype for k, v in given.items() if hasattr(v, "dtype")})
    # An aux state without a value would become an input of its engine, hence an argument
    # of the new symbol, where copy_params_from(arg_params, aux_params) cannot reach it.
    no_value = [n for n in aux_names if n not in params and n not in shapes and n not in data]
    if no_value:
        raise NativeFallback(f"the aux states {', '.join(no_value[:3])}{', ...' if len(no_value) > 3 else ''} "
                             "have no value: pass aux=aux_params (the engines bake them in)")
    unknown = [n for n in arg_names if n not in params and n not in shapes]
    if unknown and not shapes:
        raise NativeFallback(
            f"no input shape is given ({', '.join(unknown[:3])} has none): pass "
            f"shape_dict={{{unknown[0]!r}: (...)}}, or name the data with data_names=[...] and give its arrays in args")
    ignored = sorted(set(shape_dict or {}) - names)
    if ignored:
        logger.info("%s: shape_dict names %s, which are not inputs of the symbol; ignored", where, ignored)
    return shapes, params, types


def _has_shapes(sym: Any, args: Optional[Mapping[str, Any]], aux: Optional[Mapping[str, Any]],
                shape_dict: Optional[Mapping[str, Any]], data: FrozenSet[str]) -> bool:
    """Whether ``optimize_for`` was given a shape for some input (``shape_dict``, or data arrays named as data)."""
    names = set(sym.list_arguments()) | set(sym.list_auxiliary_states())
    if any(k in names for k in (shape_dict or {})):
        return True
    return any(k in names and k in data for k in list((args or {})) + list((aux or {})))


def _update_in_place(old: Any, new: Any, args: Optional[MutableMapping[str, Any]],
                     aux: Optional[MutableMapping[str, Any]]) -> None:
    """Update the caller's dicts as MXNet's ``optimize_for`` does: drop what ``new`` no longer takes, add what it gained."""
    values: Dict[str, Any] = {}
    for d in (aux, args):
        values.update(d or {})
    for d, old_names, new_names in ((args, old.list_arguments(), new.list_arguments()),
                                    (aux, old.list_auxiliary_states(), new.list_auxiliary_states())):
        keep = set(new_names)
        gained = [n for n in new_names if n in values and (d is None or n not in d)]
        deleted = [n for n in old_names if n not in keep]
        if d is None:
            if deleted or gained:
                warnings.warn("A param was deleted during optimization, but no args dictionary was provided.\n"
                              "Please ensure that your model weights match the newly optimized model.")
            continue
        for n in gained:
            d[n] = values[n]
        for n in deleted:
            d.pop(n, None)


def optimize_for(sym: Any, backend: str, args: Optional[Dict[str, Any]] = None, aux: Optional[Dict[str, Any]] = None,
                 ctx: Any = None, shape_dict: Optional[Mapping[str, Any]] = None,
                 type_dict: Optional[Mapping[str, Any]] = None, stype_dict: Optional[Mapping[str, str]] = None,
                 skip_infer: bool = False, **kwargs: Any) -> Any:
    """``Symbol.optimize_for`` with the pass for ``'TensorRT'``/``'mx_trt'``; MXNet's own for other backends.

    Args:
        sym: The symbol.
        backend: The backend name.
        args / aux: Arrays by name: the weights to bake in (updated in place: the
            absorbed ones are removed), and possibly data arrays named by
            ``shape_dict`` or ``data_names``.
        ctx: The context the engines are built for (default: the current context).
        shape_dict: Shapes of the data inputs.
        type_dict: Dtypes of inputs without an array.
        stype_dict: Storage types; anything but dense keeps the symbol native.
        skip_infer: Ignored by the pass (it needs shape inference).
        **kwargs: Backend options: ``data_names`` and those of
            :data:`mx_trt.settings.OPTIONS` (``fp16``, ``max_batch_size``,
            ``profiles``, ``exclude_ops``, ``min_subgraph_size``, ``engine_rule``,
            ``backend``, ``strict``, ``cache_dir``); an option wins over the environment.

    Returns:
        The optimized symbol, whose engines stay alive until :func:`release`. If
        the pass cannot run (an unknown option, no input shape, any failure):
        MXNet's own result for the call, after one warning.

    Raises:
        MxTrtError: with the ``strict`` option (or ``MXNET_TENSORRT_STRICT=1``), whatever stopped the pass.
        BackendUnavailableError: a backend named by the ``backend`` option is missing.
    """
    original = _original("optimize_for")

    if not is_our_backend(backend) or not isinstance(args, (dict, type(None))) or not isinstance(aux, (dict, type(None))):
        return original(sym, backend, args, aux, ctx, shape_dict, type_dict, stype_dict, skip_infer, **kwargs)
    if holds_fused_nodes(sym):
        logger.info("Symbol.optimize_for(%r): the symbol is already optimized; returned unchanged", backend)
        return sym.__copy__()
    what = f"Symbol.optimize_for({backend!r})"
    given = {**(aux or {}), **(args or {})}

    def native() -> Any:
        # MXNet has no 'TensorRT' backend of its own: the symbol comes back as it is, with the weights
        # riding along, so that a later simple_bind without copy_params_from still computes the right outputs.
        return deferred.defer(sym, params=given, native_reason=f"{what} could not prepare the pass")

    def accelerated() -> Any:
        import mxnet as mx

        options = dict(kwargs)
        given_names = _names_option(options.pop("data_names", None), f"{what} options")
        settings = call_settings(options, f"{what} options")
        data = given_names | settings.data_names
        if stype_dict and any(v != "default" for v in stype_dict.values()):
            raise NativeFallback("sparse storage types are not supported by the pass")
        if skip_infer:
            logger.debug("%s: skip_infer is ignored (the pass infers shapes)", what)
        if not _has_shapes(sym, args, aux, shape_dict, data):
            # MXNet 1.9.1's way: no shapes yet, so the engines are built at the simple_bind that brings them.
            opts = {k: v for k, v in kwargs.items() if k != "data_names"}
            if settings.int8 and settings.calibration is None and not settings.calibration_iters:
                raise NativeFallback("precision='int8' needs calibration_iters=N or a calibration table")
            return deferred.defer(sym, options=opts, params=given)
        target = ctx if ctx is not None else mx.context.current_context()
        shapes, params, types = _inputs_of(sym, args, aux, shape_dict, type_dict, data, what)
        request = BindRequest(symbol=sym, shapes=shapes, params=params, settings=settings,
                              backend=call_backend(target, settings), ctx=target, type_dict=types)
        info = optimize(request)
        new = info.symbol
        _update_in_place(sym, new, args, aux)
        pin(info.engines)
        logger.info("%s: %d engine(s), %d weight(s) baked in; data inputs %s", what, len(info.engines),
                    len(info.absorbed), sorted(shapes))
        return new

    return guarded(what, accelerated, native, kwargs, prefix=f"backend {backend!r}:")


# --------------------------------------------------------------------------- bind


def _as_dict(values: Any, names: Sequence[str]) -> Optional[Dict[str, Any]]:
    """``bind``'s ``args``/``aux_states`` (a list in symbol order or a dict) as a dict; ``None`` if MXNet would refuse it."""
    import mxnet as mx

    if values is None:
        return None if names else {}
    if isinstance(values, (list, tuple)):
        if len(values) != len(names):
            return None
        out = dict(zip(names, values))
    elif isinstance(values, dict):
        if any(n not in values for n in names):
            return None
        out = {n: values[n] for n in names}
    else:
        return None
    if not all(isinstance(v, mx.nd.NDArray) for v in out.values()):
        return None
    return out


def _why_native(args_grad: Any, grad_req: Any, group2ctx: Any) -> Optional[str]:
    if args_grad is not None and any(r != "null" for r in grad_requests(grad_req)):
        return f"args_grad is given with grad_req={grad_req!r}: gradients are asked for and engines are inference-only"
    if group2ctx:
        return "group2ctx (model parallelism) is not supported by the pass"
    return None


def accelerated_bind(sym: Any, ctx: Any, args: Any, args_grad: Any = None, grad_req: Any = "write",
                     aux_states: Any = None, group2ctx: Any = None, shared_exec: Any = None) -> Any:
    """``Symbol.bind`` with the pass (same arguments, same result type); the patched ``bind`` calls it when the switch is on.

    The aux states and the arguments whose names look like parameters
    (:func:`looks_like_parameter`, minus ``MXNET_TENSORRT_DATA_NAMES``) are baked
    into engines; the other arguments stay inputs. The optimized symbol is bound
    with MXNet's own ``bind`` on the caller's arrays.

    Returns:
        The executor; accelerated ones carry ``executor._mx_trt`` (a :class:`BindInfo`).

    Raises:
        MxTrtError: only with ``MXNET_TENSORRT_STRICT=1``, whatever stopped the pass.
        BackendUnavailableError: the backend forced by ``MXNET_TENSORRT_BACKEND`` is missing.
    """
    original = _original("bind")

    def native() -> Any:
        return original(sym, ctx, args, args_grad, grad_req, aux_states, group2ctx, shared_exec)

    if holds_fused_nodes(sym):
        logger.debug("Symbol.bind: the symbol is already optimized; bound natively")
        return native()
    why = _why_native(args_grad, grad_req, group2ctx)
    if why:
        logger.warning("MXNET_USE_TENSORRT=1 but %s: Symbol.bind runs natively", why)
        return native()
    argd = _as_dict(args, sym.list_arguments())
    auxd = _as_dict(aux_states, sym.list_auxiliary_states())
    if argd is None or auxd is None:
        return native()  # MXNet says what is wrong with the arrays
    if any(v.stype != "default" for v in list(argd.values()) + list(auxd.values())):
        logger.warning("MXNET_USE_TENSORRT=1 but sparse arrays are not supported by the pass: Symbol.bind runs natively")
        return native()

    def accelerated() -> Any:
        settings = call_settings()
        data = settings.data_names
        weights = {k: v for k, v in argd.items() if k not in data and looks_like_parameter(k)}
        weights.update({k: v for k, v in auxd.items() if k not in data})
        inputs = {k: v for k, v in argd.items() if k not in weights}
        request = BindRequest(symbol=sym, shapes={k: tuple(v.shape) for k, v in inputs.items()}, params=weights,
                              settings=settings, backend=call_backend(ctx, settings), ctx=ctx,
                              type_dict={k: v.dtype for d in (argd, auxd) for k, v in d.items()})
        info = optimize(request)
        exe = bind_optimized_on(info, ctx, {**auxd, **argd}, shared_exec)
        logger.info("Symbol.bind: %d engine(s), %d weight(s) baked in; inputs kept %s (set %s to name data inputs)",
                    len(info.engines), len(info.absorbed), sorted(inputs), DATA_NAMES_ENV)
        return exe

    return guarded("Symbol.bind", accelerated, native)


def deferred_bind(sym: Any, ctx: Any, args: Any, args_grad: Any = None, grad_req: Any = "write",
                  aux_states: Any = None, group2ctx: Any = None, shared_exec: Any = None) -> Any:
    """``Symbol.bind`` of a TensorRT symbol (``get_backend_symbol``/``optimize_for`` without shapes).

    The regions are expanded and the expanded symbol is bound with the pass on
    (:func:`accelerated_bind`), on the caller's arrays; arrays missing for weights
    kept with the symbol are taken from those.
    """
    full, captured = deferred.expand_symbol(sym)
    if isinstance(args, (list, tuple)):
        args = dict(zip(sym.list_arguments(), args))
    if isinstance(aux_states, (list, tuple)):
        aux_states = dict(zip(sym.list_auxiliary_states(), aux_states))
    if isinstance(args, dict):
        args = {**{k: v for k, v in captured.params.items() if k in set(full.list_arguments())}, **args}
    if isinstance(aux_states, dict) or aux_states is None:
        aux_states = {**{k: v for k, v in captured.params.items() if k in set(full.list_auxiliary_states())},
                      **(aux_states or {})}
    if captured.native_reason is not None:
        return _original("bind")(full, ctx, args, args_grad, grad_req, aux_states, group2ctx, shared_exec)
    with hook.forced():
        return accelerated_bind(full, ctx, args, args_grad, grad_req, aux_states, group2ctx, shared_exec)


def bind_optimized_on(info: BindInfo, ctx: Any, arrays: Mapping[str, Any], shared_exec: Any = None) -> Any:
    """MXNet's own ``bind`` of ``info.symbol`` on the caller's arrays (by name), for inference.

    Returns:
        The executor, with ``executor._mx_trt = info`` (which owns the engines).

    Raises:
        MxTrtError: the optimized symbol takes an input no array was given for.
    """
    new = info.symbol
    missing = [n for n in list(new.list_arguments()) + list(new.list_auxiliary_states()) if n not in arrays]
    if missing:
        raise MxTrtError(f"the optimized symbol takes {missing[:5]}, which the bind did not give")
    exe = _original("bind")(new, ctx, {n: arrays[n] for n in new.list_arguments()}, None, "null",
                            {n: arrays[n] for n in new.list_auxiliary_states()}, None, shared_exec)
    exe._mx_trt = info
    guard_forward(exe, info.engines)
    return exe


# --------------------------------------------------------------------------- install


def _original(name: str) -> Any:
    install()
    return _originals[name]


def install() -> None:
    """Patch ``Symbol.optimize_for``, ``Symbol.bind`` and ``mx.sym.load``/``load_json`` once.

    Idempotent and thread-safe; imports mxnet and installs the ``simple_bind``
    hook first. With the switch off and no ``'TensorRT'`` backend named, every
    patched call is MXNet's own, except that loading a symbol whose fused
    engines are gone raises :class:`MxTrtError`.
    """
    if _originals:
        return
    hook.install()  # may run this installer itself (hook.add_installer)
    with _lock:
        if _originals:
            return
        import mxnet as mx

        cls = mx.symbol.Symbol
        sym_mod = mx.symbol.symbol
        real_bind = cls.bind

        def native_bind(*args: Any, **kwargs: Any) -> Any:
            with masked_subgraph_backend():  # MXNet itself has no 'TensorRT' subgraph backend
                return real_bind(*args, **kwargs)

        native_bind.__wrapped__ = real_bind  # type: ignore[attr-defined]
        found = {"optimize_for": cls.optimize_for, "bind": native_bind, "load": sym_mod.load,
                 "load_json": sym_mod.load_json, "get_backend_symbol": cls.get_backend_symbol}

        def optimize_for_(self: Any, backend: str, args: Any = None, aux: Any = None, ctx: Any = None,
                          shape_dict: Any = None, type_dict: Any = None, stype_dict: Any = None,
                          skip_infer: bool = False, **kwargs: Any) -> Any:
            return optimize_for(self, backend, args, aux, ctx, shape_dict, type_dict, stype_dict, skip_infer, **kwargs)

        def get_backend_symbol(self: Any, backend: str) -> Any:
            if is_our_backend(backend):
                return deferred.defer(self)
            return found["get_backend_symbol"](self, backend)

        def bind(self: Any, ctx: Any, args: Any, args_grad: Any = None, grad_req: Any = "write",
                 aux_states: Any = None, group2ctx: Any = None, shared_exec: Any = None) -> Any:
            if deferred.is_deferred(self):
                return deferred_bind(self, ctx, args, args_grad, grad_req, aux_states, group2ctx, shared_exec)
            if hook.pass_enabled():
                return accelerated_bind(self, ctx, args, args_grad, grad_req, aux_states, group2ctx, shared_exec)
            return found["bind"](self, ctx, args, args_grad, grad_req, aux_states, group2ctx, shared_exec)

        def load(fname: str) -> Any:
            text = _read_text(fname)
            if text is not None and OP_TYPE in text:
                check_engines_alive(text)
            return found["load"](fname)

        def load_json(json_str: str) -> Any:
            if isinstance(json_str, str) and OP_TYPE in json_str:
                check_engines_alive(json_str)
            return found["load_json"](json_str)

        wrappers: Dict[str, Any] = {"optimize_for": optimize_for_, "bind": bind, "get_backend_symbol": get_backend_symbol}
        for name, fn in wrappers.items():
            patches.wrap(cls, name, _constant(fn))
        for module in (sym_mod, mx.symbol):
            if getattr(module, "load", None) is found["load"]:
                patches.wrap(module, "load", lambda _original: load)
            if getattr(module, "load_json", None) is found["load_json"]:
                patches.wrap(module, "load_json", lambda _original: load_json)
        patches.on_uninstall(_originals.clear)
        _originals.update(found)
        logger.debug("mx_trt: Symbol.optimize_for, bind and load hooked")


def _constant(fn: Any) -> Any:
    """``make`` for :func:`mx_trt.patches.wrap` when the wrapper is already made."""
    return lambda _original: fn


def _read_text(fname: Any) -> Optional[str]:
    """The file's text, or ``None`` when Python cannot read it (MXNet then reads it, e.g. from a URI)."""
    try:
        with open(fname, encoding="utf-8") as f:
            return f.read()
    except (OSError, TypeError, ValueError):
        return None
