"""``mx.mod.Module`` and ``BucketingModule`` with the pass: inference Modules run engines.

A Module binds through ``DataParallelExecutorGroup``, one executor per context,
before any weight is known, and reads its executors by position in the
original symbol's arguments. So the executors MXNet binds stay native: they
hold the weights (``get_params``, ``save_checkpoint`` and buckets read them), and
once the weights are known each native executor's own arrays are the weights
of one accelerated bind (:class:`~mx_trt.pipeline.request.BindRequest`). The
accelerated executors then run the forward passes, ``predict`` and ``score``.

When engines are built:

* at ``set_params`` / ``init_params`` / ``load_params``, and at ``bind`` when the
  parameters are already initialized (after ``Module.load``);
* at the first forward otherwise (a bucket, a new batch shape after ``reshape``);
* again only when the weights changed: ``set_params`` with the same values keeps
  the engines (checked by digest), new values rebuild them before the next
  forward. A ``set_params`` on one bucket, or ``Module.update`` on a Module
  sharing the weights, makes every group check its digests at its next forward.
  A raw in-place write to a weight array is not seen: call :func:`refresh`.

Shapes: each executor group keeps up to :data:`MAX_VARIANTS` accelerated
executors per context, one per input shape, so going back to a shape builds
nothing. With dynamic batch (``MXNET_TENSORRT_MAX_BATCH_SIZE``, profiles, or the
``max_batch_size`` / ``profiles`` options of :func:`configure`) a new batch size
reshapes an accelerated executor whose engines take it, which builds nothing
inside the profiles.

The switch (``MXNET_USE_TENSORRT``, or :func:`configure`'s ``enabled``) is read
at every ``bind`` and ``set_params``. A Module bound ``for_training=True`` (or
with ``inputs_need_grad``, or gradients asked for) stays native, with one
warning at bind; a forward with ``is_train=True`` runs the native executors.
Whatever stops the pass costs one warning and the native Module
(:func:`mx_trt.frontends.common.guarded`); ``MXNET_TENSORRT_STRICT=1`` raises.

Memory: each context keeps its native executor (the weights) next to the
accelerated ones (activations and engines).
"""
from __future__ import annotations

import contextlib
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Set, Tuple

import numpy as np

from mx_trt import patches
from mx_trt.frontends import deferred, hook
from mx_trt.frontends.common import (
    NativeFallback,
    call_backend,
    call_settings,
    calibrates_on_forwards,
    calibrating_bind,
    guarded,
)
from mx_trt.pipeline.bind import bind as pipeline_bind
from mx_trt.pipeline.request import BindRequest
from mx_trt.pipeline.weights import digest
from mx_trt.runtime.fused_op import data_ptr

logger = logging.getLogger(__name__)

#: Accelerated executors kept per context of an executor group (one per input shape), least recently used dropped.
MAX_VARIANTS = 4

#: One executor's inputs: (name, shape, dtype) in argument order.
Signature = Tuple[Tuple[str, Tuple[int, ...], str], ...]

_lock = threading.Lock()
_install_lock = threading.RLock()
_installed = False
_local = threading.local()
#: Bumped whenever weights may have changed outside one group's own ``set_params``
#: (another bucket's ``set_params``, ``Module.update``, :func:`refresh`).
_generation = 0


@dataclass(frozen=True)
class _Config:
    """What :func:`configure` gave one Module: ``enabled`` (``None``: the environment) and options."""

    enabled: Optional[bool] = None
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class _GroupState:
    """mx_trt's state on one ``DataParallelExecutorGroup`` (``group._mx_trt_state``).

    Attributes:
        config: The owning Module's :class:`_Config`.
        enabled: Whether the pass applies (read at bind and at every ``set_params``).
        natives: The executors MXNet bound (or reshaped), one per context; they hold the weights.
        default_natives: The native executors MXNet reshapes from (``group._default_execs``).
        variants: Per context, accelerated executors by input signature (LRU).
        active: Whether ``group.execs`` are accelerated executors.
        checked: The generation at which the variants' weights were last checked.
        failed: Input signatures the pass failed on since the last ``set_params`` (not retried).
    """

    config: _Config
    enabled: bool = False
    natives: List[Any] = field(default_factory=list)
    default_natives: Optional[List[Any]] = None
    variants: List["OrderedDict[Signature, Any]"] = field(default_factory=list)
    active: bool = False
    checked: int = -1
    failed: Set[Tuple[Signature, ...]] = field(default_factory=set)


def _bump() -> None:
    global _generation
    with _lock:
        _generation += 1


def _state(group: Any) -> Optional[_GroupState]:
    return getattr(group, "_mx_trt_state", None) if group is not None else None


# ---------------------------------------------------------------------------------------------- public API


def configure(module: Any, enabled: Optional[bool] = None, **options: Any) -> None:
    """Options of the pass for one ``Module`` or ``BucketingModule`` (they win over the environment).

    Call it before ``bind``, or after: engines built so far are dropped and built
    again with the new options at the next forward.

    Args:
        module: A ``mx.mod.Module`` or ``mx.mod.BucketingModule`` (its buckets follow it).
        enabled: ``True`` runs the pass for this Module whatever ``MXNET_USE_TENSORRT`` says,
            ``False`` never, ``None`` follows the environment.
        **options: The options of :data:`mx_trt.settings.OPTIONS` (``max_batch_size``,
            ``profiles``, ``fp16``/``precision``, ``exclude_ops``, ``engine_rule``, ...).

    Raises:
        MxTrtError: an unknown option or a value that is not allowed.
    """
    install()
    if options:
        call_settings(options, "mx_trt Module options")  # reject bad options now, not at the first forward
    config = _Config(enabled, dict(options))
    module._mx_trt_config = config
    for group in _groups_of(module):
        state = _state(group)
        if state is None:
            continue
        state.config = config
        state.failed.clear()
        _deactivate(group, state)
        for lru in state.variants:
            lru.clear()
        state.enabled = _eligible(group, state, at_bind=False)


def refresh(module: Any) -> None:
    """Make a Module (or every bucket of a ``BucketingModule``) check its weights at its next forward.

    Needed only after writing into a weight array in place: ``set_params``,
    ``init_params``, ``load_params`` and ``update`` are seen without it. Engines
    whose weights changed are built again; the others are kept.
    """
    for group in _groups_of(module):
        state = _state(group)
        if state is not None:
            state.checked = -1


def accelerated_executors(module: Any) -> List[Any]:
    """The executors a Module (or the current bucket of a ``BucketingModule``) runs, accelerated ones only.

    Each carries its :class:`~mx_trt.pipeline.bind.BindInfo` as ``executor._mx_trt``.
    """
    module = getattr(module, "_curr_module", None) or module
    group = getattr(module, "_exec_group", None)
    return [e for e in getattr(group, "execs", []) if getattr(e, "_mx_trt", None) is not None]


def _groups_of(module: Any) -> List[Any]:
    modules = list(getattr(module, "_buckets", {}).values()) or [module]
    return [m._exec_group for m in modules if getattr(m, "_exec_group", None) is not None]


# ---------------------------------------------------------------------------------------------- decisions


def _why_native(group: Any) -> Optional[str]:
    """Why a group cannot run engines whatever the switch says, or ``None``."""
    if group.for_training:
        return "the Module is bound for training (for_training=True) and engines are inference-only"
    if group.inputs_need_grad:
        return "the Module computes input gradients (inputs_need_grad=True) and engines are inference-only"
    asked = sorted(k for k, v in group.grad_req.items() if v != "null")
    if asked:
        return f"gradients are asked for ({', '.join(asked[:3])}) and engines are inference-only"
    return None


def _switch(state: _GroupState) -> bool:
    return state.config.enabled if state.config.enabled is not None else hook.pass_enabled()


def _eligible(group: Any, state: _GroupState, at_bind: bool) -> bool:
    """Whether the pass applies to ``group`` now; at bind, a training Module gets its one warning."""
    if not _switch(state):
        return False
    why = _why_native(group)
    if why is not None:
        if at_bind:
            logger.warning("MXNET_USE_TENSORRT=1 but %s: the Module runs natively", why)
        return False
    return True


def _inputs(group: Any) -> List[str]:
    """The executor arguments that are not weights: data, labels and states."""
    params = set(group.param_names)
    return [n for n in group.arg_names if n not in params]


def _signature(exe: Any, inputs: List[str]) -> Signature:
    return tuple((n, tuple(int(d) for d in exe.arg_dict[n].shape), np.dtype(exe.arg_dict[n].dtype).name)
                 for n in inputs if n in exe.arg_dict)


def _group_signature(group: Any, state: _GroupState) -> Tuple[Signature, ...]:
    inputs = _inputs(group)
    return tuple(_signature(exe, inputs) for exe in state.natives)


# ---------------------------------------------------------------------------------------------- executors


def _use(group: Any, state: _GroupState, execs: List[Any], active: bool) -> None:
    """Make ``execs`` the group's executors and collect its arrays again."""
    group.execs = list(execs)
    state.active = active
    group._collect_arrays()


def _deactivate(group: Any, state: _GroupState) -> None:
    if state.active:
        _use(group, state, state.natives, False)


def _activate(group: Any, state: _GroupState, what: str) -> None:
    """Run the accelerated executors for the current shapes (built if needed); native on failure.

    Args:
        what: The end of the fallback warning (``"Module.forward runs natively"``).
    """
    sig = _group_signature(group, state)
    if sig in state.failed:
        _deactivate(group, state)
        return

    def accelerated() -> None:
        if state.checked != _generation:
            _check_weights(group, state)
        _use(group, state, [_variant(group, state, i) for i in range(len(state.natives))], True)

    def native() -> None:
        state.failed.add(sig)
        _deactivate(group, state)

    guarded(what, accelerated, native, state.config.options)


def _variant(group: Any, state: _GroupState, i: int) -> Any:
    """The accelerated executor of context ``i`` for its native executor's current shapes."""
    native = state.natives[i]
    inputs = _inputs(group)
    sig = _signature(native, inputs)
    lru = state.variants[i]
    exe = lru.get(sig)
    if exe is not None:
        lru.move_to_end(sig)
        return exe
    exe = _reshaped(lru, sig)
    if exe is None:
        exe = _build(group, state, i, sig)
    lru[sig] = exe
    while len(lru) > MAX_VARIANTS:
        lru.popitem(last=False)
    return exe


def _reshaped(lru: "OrderedDict[Signature, Any]", sig: Signature) -> Optional[Any]:
    """An accelerated executor reshaped to ``sig`` when its engines all take a variable batch, else ``None``.

    Inside the engines' profiles this builds nothing; outside them each engine is
    built again once (``FusedEngine.output_shapes``).
    """
    for old_sig, exe in reversed(list(lru.items())):
        info = exe._mx_trt
        if not all(f.engine.batch_ranges for f in info.engines):
            continue
        if [(n, len(s), s[1:], t) for n, s, t in old_sig] != [(n, len(s), s[1:], t) for n, s, t in sig]:
            continue
        try:
            new = exe.reshape(allow_up_sizing=True, **{n: s for n, s, _ in sig})
        except Exception as exc:  # noqa: BLE001 - an engine that cannot take the batch: build a new variant
            logger.debug("reshaping the accelerated executor to %s failed (%s): binding again", sig, exc)
            continue
        new._mx_trt = info
        logger.info("Module: accelerated executor reshaped to %s (engines reused)", [s for _, s, _ in sig])
        return new
    return None


def _build(group: Any, state: _GroupState, i: int, sig: Signature) -> Any:
    """Run the pass for context ``i``: the native executor's arrays are the weights, ``sig`` the inputs.

    Raises:
        NativeFallback: model parallelism or sparse storage.
        MxTrtError: the pass failed (the caller falls back).
    """
    native = state.natives[i]
    ctx = group.contexts[i]
    if group.group2ctxs[i]:
        raise NativeFallback("group2ctx (model parallelism) is not supported by the pass")
    params: Dict[str, Any] = {n: native.arg_dict[n] for n in group.param_names if n in native.arg_dict}
    params.update(native.aux_dict)
    sparse = sorted(n for n, v in params.items() if getattr(v, "stype", "default") != "default")
    if sparse:
        raise NativeFallback(f"sparse storage types are not supported by the pass ({', '.join(sparse[:3])})")
    settings = call_settings(state.config.options, "mx_trt Module options")
    request = BindRequest(symbol=group.symbol, shapes={n: s for n, s, _ in sig}, params=params, settings=settings,
                          backend=call_backend(ctx, settings), ctx=ctx, type_dict={n: t for n, _, t in sig},
                          native_bind=hook.original_simple_bind())
    if calibrates_on_forwards(settings):  # MXNet 1.9.1's calibration_iters: native first, int8 after
        return calibrating_bind(request)
    exe, info = pipeline_bind(request)
    logger.info("Module on %s, inputs %s: %d engine(s), %d weight(s) baked in (%d built, %d loaded, %d reused)",
                ctx, [s for _, s, _ in sig], len(info.engines), len(info.absorbed), info.builds, info.loads,
                info.reuses)
    return exe


def _check_weights(group: Any, state: _GroupState) -> None:
    """Drop the variants whose baked-in weights differ from the native executors'; refresh the others.

    The others get the current values of the weights that stayed native (aux
    states are copies in an accelerated executor).
    """
    import mxnet as mx

    mx.nd.waitall()  # weights written by another executor's backward are not write dependencies of ours
    weights = set(group.param_names)
    for native, lru in zip(state.natives, state.variants):
        if _baked_weights_changed(lru, native):
            logger.info("Module: weights changed; engines are built again for the next forward")
            lru.clear()  # variants share the weights: one stale means all are
        for exe in lru.values():
            _sync_native_weights(exe, native, weights)
    state.checked = _generation


def _baked_weights_changed(lru: "OrderedDict[Signature, Any]", native: Any) -> bool:
    """Whether a weight baked into some variant's engines differs from the native executor's value (by digest)."""
    current: Dict[str, Optional[str]] = {}
    for exe in lru.values():
        for name, baked in exe._mx_trt.absorbed.items():
            if name not in current:
                arr = native.arg_dict[name] if name in native.arg_dict else native.aux_dict.get(name)
                current[name] = None if arr is None else digest(arr)
            if current[name] != baked:
                return True
    return False


def _sync_native_weights(exe: Any, native: Any, weights: Set[str]) -> None:
    """Copy into an accelerated executor the native executor's values of the weights it did not absorb."""
    for dst_dict, src_dict in ((exe.arg_dict, native.arg_dict), (exe.aux_dict, native.aux_dict)):
        for name, dst in dst_dict.items():
            src = src_dict.get(name)
            if (src is None or name in exe._mx_trt.absorbed or (name not in weights and dst_dict is exe.arg_dict)
                    or tuple(src.shape) != tuple(dst.shape)):
                continue
            if src.context == dst.context and data_ptr(src) == data_ptr(dst):
                continue
            src.copyto(dst)


# ---------------------------------------------------------------------------------------------- patches


@contextlib.contextmanager
def _module_scope(module: Any) -> Iterator[None]:
    """The Module's :class:`_Config` for the groups bound inside (a bucket Module inherits its owner's)."""
    prev = getattr(_local, "config", None)
    _local.config = getattr(module, "_mx_trt_config", None) or prev
    try:
        yield
    finally:
        _local.config = prev


def _wrap(cls: Any, name: str, make: Callable[[Any], Any]) -> None:
    patches.wrap(cls, name, make)


def _patch_group(dpeg: Any) -> None:
    def make_bind_ith(original: Any) -> Any:
        def _bind_ith_exec(self: Any, i: Any, data_shapes: Any, label_shapes: Any, shared_group: Any) -> Any:
            # Always native; a bucket shares the weights of the shared group's native executors
            # (an accelerated one lacks the baked-in weights: MXNet would allocate zeros for them).
            shared = _state(shared_group)
            with hook.disabled():
                if shared is None or not shared.active:
                    return original(self, i, data_shapes, label_shapes, shared_group)
                running = shared_group.execs
                shared_group.execs = shared.natives
                try:
                    return original(self, i, data_shapes, label_shapes, shared_group)
                finally:
                    shared_group.execs = running
        return _bind_ith_exec

    def make_bind_exec(original: Any) -> Any:
        def bind_exec(self: Any, data_shapes: Any, label_shapes: Any, shared_group: Any = None,
                      reshape: bool = False) -> Any:
            state = _state(self)
            if not reshape:
                shared = _state(shared_group)
                config = getattr(_local, "config", None) or (shared.config if shared else _Config())
                state = _GroupState(config=config)
                self._mx_trt_state = state
                result = original(self, data_shapes, label_shapes, shared_group, reshape)
                state.natives = list(self.execs)
                state.variants = [OrderedDict() for _ in self.execs]
                state.enabled = _eligible(self, state, at_bind=True)
                return result
            if state is None:
                return original(self, data_shapes, label_shapes, shared_group, reshape)
            # MXNet reshapes its default executors: make them the native ones.
            _deactivate(self, state)
            if state.default_natives is None:
                state.default_natives = list(state.natives)
            self._default_execs = state.default_natives
            result = original(self, data_shapes, label_shapes, shared_group, reshape)
            state.natives = list(self.execs)
            return result  # accelerated at the next forward
        return bind_exec

    def make_collect(original: Any) -> Any:
        def _collect_arrays(self: Any) -> Any:
            state = _state(self)
            if state is None or not state.active:
                return original(self)
            # Weights, aux states and gradients by position in the original symbol: the native executors'.
            running = self.execs
            self.execs = state.natives
            try:
                original(self)
            finally:
                self.execs = running

            def arr(i: int, name: str) -> Any:
                exe = running[i]
                return exe.arg_dict[name] if name in exe.arg_dict else state.natives[i].arg_dict[name]

            slices = [self.slices[i] if self.slices else slice(i, i + 1) for i in range(len(running))]
            self.data_arrays = [[(slices[i], arr(i, name)) for i in range(len(running))] for name, _ in self.data_shapes]
            if self.label_shapes is not None:
                self.label_arrays = [[(slices[i], arr(i, name)) for i in range(len(running))]
                                     for name, _ in self.label_shapes]
            self.state_arrays = [[arr(i, name) for i in range(len(running))] for name in self.state_names]
            return None
        return _collect_arrays

    def make_set_params(original: Any) -> Any:
        def set_params(self: Any, arg_params: Any, aux_params: Any, allow_extra: bool = False) -> Any:
            state = _state(self)
            if state is None:
                return original(self, arg_params, aux_params, allow_extra)
            _bump()  # buckets sharing these arrays check their engines at their next forward
            for exe in state.natives:
                exe.copy_params_from(arg_params, aux_params, allow_extra_params=allow_extra)
            state.failed.clear()
            state.enabled = _eligible(self, state, at_bind=False)
            if not state.enabled:
                _deactivate(self, state)
                for lru in state.variants:
                    lru.clear()
                return None
            _activate(self, state, "Module.set_params")
            return None
        return set_params

    def make_forward(original: Any) -> Any:
        def forward(self: Any, data_batch: Any, is_train: Any = None) -> Any:
            state = _state(self)
            if state is not None and state.enabled:
                training = self.for_training if is_train is None else bool(is_train)
                if training:
                    _deactivate(self, state)  # engines are inference-only: a training-mode forward is native
                elif not state.active or state.checked != _generation:
                    _activate(self, state, "Module.forward")
            return original(self, data_batch, is_train)
        return forward

    _wrap(dpeg, "_bind_ith_exec", make_bind_ith)
    _wrap(dpeg, "bind_exec", make_bind_exec)
    _wrap(dpeg, "_collect_arrays", make_collect)
    _wrap(dpeg, "set_params", make_set_params)
    _wrap(dpeg, "forward", make_forward)


def _take_tensorrt_symbol(module: Any) -> Optional[Dict[str, Any]]:
    """A Module made from a TensorRT symbol (``get_backend_symbol``): bind its expanded graph with the pass.

    Returns:
        The weights the symbol carries (to initialize the Module with), or ``None`` for an ordinary symbol.
    """
    sym = getattr(module, "_symbol", None)
    if sym is None or not deferred.is_deferred(sym):
        return None
    full, captured = deferred.expand_symbol(sym)
    module._symbol = full
    if getattr(module, "_mx_trt_config", None) is None:
        configure(module, enabled=captured.native_reason is None, **captured.options)
    logger.info("Module of a TensorRT symbol: its regions are expanded and the pass builds the engines")
    return captured.params


def _patch_modules(module_cls: Any, bucketing_cls: Any) -> None:
    def make_bind(original: Any) -> Any:
        def bind(self: Any, *args: Any, **kwargs: Any) -> Any:
            carried = _take_tensorrt_symbol(self)
            with _module_scope(self):
                out = original(self, *args, **kwargs)
            if carried and not getattr(self, "params_initialized", True):
                names = set(self._symbol.list_arguments())
                self.init_params(arg_params={k: v for k, v in carried.items() if k in names},
                                 aux_params={k: v for k, v in carried.items() if k not in names},
                                 allow_missing=True)
            return out
        return bind

    def make_update(original: Any) -> Any:
        def update(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return original(self, *args, **kwargs)
            finally:
                _bump()  # Modules sharing these weights check their engines at their next forward
        return update

    _wrap(module_cls, "bind", make_bind)
    _wrap(module_cls, "update", make_update)
    _wrap(bucketing_cls, "bind", make_bind)


def _uninstalled() -> None:
    global _installed
    with _install_lock:
        _installed = False


def install() -> None:
    """Patch MXNet's Module machinery once (``DataParallelExecutorGroup``, ``Module``, ``BucketingModule``).

    Idempotent and thread-safe; imports mxnet. With the pass off every patched
    method does what MXNet's own does. The originals stay reachable as
    ``__wrapped__`` on each wrapper. Executor groups bound before ``install`` stay native.
    """
    global _installed
    if _installed:
        return
    with _install_lock:
        if _installed:
            return
        from mxnet.module import executor_group
        from mxnet.module.bucketing_module import BucketingModule
        from mxnet.module.module import Module

        _patch_group(executor_group.DataParallelExecutorGroup)
        _patch_modules(Module, BucketingModule)
        patches.on_uninstall(_uninstalled)
        _installed = True
        logger.debug("mx_trt: Module and BucketingModule hooked")
