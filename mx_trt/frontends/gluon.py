"""Gluon with the pass: ``hybridize(backend='TensorRT')``, ``optimize_for`` and the environment switch.

Entry points (MXNet 1.9.1):

* ``block.hybridize(backend='TensorRT', **options)``; the backend name is
  case-insensitive and ``'mx_trt'`` is accepted too. The options are those of
  :data:`mx_trt.settings.OPTIONS` (``fp16``, ``max_batch_size``,
  ``exclude_ops``, ...) and win over the environment. They may also be given as
  one dict, ``backend_opts={...}`` (the spelling of MXNet 2.0).
* ``block.optimize_for(x, *args, backend='TensorRT', **options)`` builds the
  engines at once, before any forward.
* With ``MXNET_USE_TENSORRT=1``: a plain ``block.hybridize()``, and
  ``gluon.SymbolBlock.imports(...)`` (hybridized or not), with the settings of
  the environment. Options given to ``hybridize`` without a backend name are
  ignored, as MXNet ignores them.

Any other backend name goes to MXNet untouched. The switch and the settings are
read when the block builds its cache (``hybridize``/``optimize_for`` followed by
the first forward, or ``optimize_for`` itself).

How it works. ``HybridBlock._build_cache`` runs MXNet's own with no backend, so
the block keeps its original graph (``export()`` writes it, with every
parameter) and its native ``CachedOp``. That ``CachedOp`` is then wrapped by an
:class:`AcceleratedCachedOp`, which Gluon calls with the same arguments.

* Inference runs the executor that the pass binds (``pipeline.bind.bind``) with
  the block's own parameters. It does not run a ``CachedOp`` of the optimized
  graph. On this MXNet build, a fused node fed by a native MKLDNN operator
  gives wrong results now and then inside a ``CachedOp``, whatever its flags,
  and never in an executor. Inputs are copied into the executor, and copies
  of its outputs are returned. There is one executor per input signature
  (context, shapes, dtypes), kept in a small LRU (:data:`MAX_EXECUTORS`).
  With ``max_batch_size`` or profiles, another batch size reshapes the
  executor, and within the profiles no engine is built.
* Training (``autograd.record()``, or ``autograd.is_training()``) runs the
  native ``CachedOp``, with the flags ``static_alloc``/``static_shape`` given
  to ``hybridize``. So does a block with an op hook (``register_op_hook``), so
  that the hook sees every operator.
* Whatever fails in the pass costs one warning for that signature, which then
  runs natively (:func:`mx_trt.frontends.common.guarded`). ``strict`` raises
  instead.

Parameter changes. Weights are baked into the engines, so a later change must
reach them. Before each inference forward the block checks whether its
parameters may have changed since the engines were built. When a weight
baked into an engine has a different value (its digest differs), the engines are built again
for that forward. The same value rebuilds nothing. When a parameter that stayed
native has a different value, the executor is bound again, which builds no
engine. MXNet's executor cannot be trusted to read it in place: with the MKLDNN
subgraph backend, a fused FullyConnected keeps the weights of its first forward.
What is detected:

* ``Parameter.set_data``, ``initialize(force_reinit=True)``, ``cast``,
  ``reset_ctx``, ``Block.load_parameters`` and ``ParameterDict.load`` (through
  ``Parameter._init_impl``/``set_data``/``cast``);
* ``gluon.Trainer.step`` and ``Trainer.update`` (every parameter of the trainer);
* any training-mode scope anywhere in the process (``autograd.record()``,
  ``autograd.train_mode()``): BatchNorm running statistics move in place with
  no Python call, so the next inference forward compares every parameter.

**Not detected:** a raw in-place write into a parameter's array that bypasses
these calls, such as ``p.data()[:] = 0``, ``nd.random.uniform(out=p.data())``,
an optimizer updater or a kvstore pull applied to the arrays outside
``Trainer``, or a write from C++. The engines, and the executor's native
operators, would then keep the old values. Call :func:`refresh` (exported as
``mx_trt.refresh``) after such a write. It makes the next forward compare every
parameter and rebuild or bind again what changed.

Costs: with no signal, the check is three integer comparisons per forward.
After a signal, it is a digest (xxh3-128) of the parameters that moved. After training
or :func:`refresh`, it is one ``mx.nd.waitall()`` and a digest of all of them.
"""
from __future__ import annotations

import collections
import logging
import threading
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from mx_trt.errors import MxTrtError
from mx_trt import patches
from mx_trt.frontends import hook
from mx_trt.frontends.common import (
    NativeFallback,
    call_backend,
    call_settings,
    calibrates_on_forwards,
    calibrating_bind,
    guarded,
)
from mx_trt.pipeline.bind import BindInfo, bind, bind_optimized
from mx_trt.pipeline.request import BindRequest
from mx_trt.pipeline.weights import digest
from mx_trt.settings import Settings

logger = logging.getLogger(__name__)

#: Backend names (lower case) that select the pass in ``hybridize``/``optimize_for``.
BACKEND_NAMES = frozenset({"tensorrt", "mx_trt"})
#: Executors (input signatures) kept per block; the least recently used goes first.
MAX_EXECUTORS = 8
#: Input signatures remembered as native (the pass failed on them) per block.
MAX_NATIVE_SIGNATURES = 64

Key = Tuple[Any, ...]


class _Clock:
    """Process-wide counters that make the parameter check O(1) when nothing happened.

    Attributes:
        params: Bumped by every parameter change seen (the parameter keeps the
            value in ``_mx_trt_gen``).
        training: Bumped at every entry into training mode.
        refresh: Bumped by ``refresh()`` with no block.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.params = 0
        self.training = 0
        self.refresh = 0

    def param_changed(self, param: Any) -> None:
        with self.lock:
            self.params += 1
            param._mx_trt_gen = self.params

    def training_entered(self) -> None:
        with self.lock:
            self.training += 1

    def refresh_all(self) -> None:
        with self.lock:
            self.refresh += 1

    def now(self) -> Tuple[int, int, int]:
        return self.params, self.training, self.refresh


_clock = _Clock()


def backend_options(opts: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """``hybridize``'s backend keywords as one dict of options.

    MXNet 1.9.1 stores ``**kwargs`` of ``hybridize``/``optimize_for`` as the
    options. A ``backend_opts={...}`` keyword (MXNet 2.0's spelling) is merged
    in; a key given both ways takes the keyword's value.

    Raises:
        MxTrtError: ``backend_opts`` is not a dict.
    """
    out = dict(opts or {})
    nested = out.pop("backend_opts", None)
    if nested is None:
        return out
    if not isinstance(nested, Mapping):
        raise MxTrtError(f"backend_opts must be a dict of options, got {type(nested).__name__}")
    return {**dict(nested), **out}


def _wants_pass(block: Any) -> Tuple[bool, bool]:
    """(run the pass, backend named explicitly) for a block about to build its cache."""
    backend = getattr(block, "_backend", None)
    if backend:
        return isinstance(backend, str) and backend.strip().lower() in BACKEND_NAMES, True
    return hook.pass_enabled(), False


class _Entry:
    """One bound variant: the executor for one input signature and the :class:`BindInfo` owning its engines.

    ``native`` holds the digest of every parameter that stayed native, as bound.
    MXNet's executor does not reliably see later in-place writes to them: with
    the MKLDNN subgraph backend (on by default for executors), a fused
    FullyConnected or Convolution+BatchNorm keeps the values of its first forward.
    So a change of value means binding the executor again (no engine is built).
    """

    def __init__(self, exe: Any, info: BindInfo, request: BindRequest, data_inputs: Sequence[Tuple[str, int]],
                 relaxed: Optional[Key], native: Optional[Dict[str, str]] = None) -> None:
        self.info = info
        self.request = request
        self.relaxed = relaxed
        self.reshapable = relaxed is not None
        self._data_inputs = list(data_inputs)
        self._use(exe)
        self.native = native if native is not None else self._digests()

    def _use(self, exe: Any) -> None:
        self.exe = exe
        args = exe.arg_dict
        self.inputs = [(args[name], pos) for name, pos in self._data_inputs if name in args]

    def _digests(self) -> Dict[str, str]:
        bound = set(self.exe.arg_dict) | set(self.exe.aux_dict)
        return {name: digest(arr) for name, arr in self.request.params.items()
                if name in bound and name not in self.info.absorbed}

    def run(self, cargs: Sequence[Any]) -> List[Any]:
        """Copy the data in, run the executor, and return copies of its outputs (it reuses them at the next call)."""
        for dst, pos in self.inputs:
            cargs[pos].copyto(dst)
        outs = self.exe.forward(is_train=False)
        return [o.copy() for o in outs]

    def rebind(self, params: Mapping[str, Any]) -> None:
        """Bind the optimized symbol again with the current native parameters (the engines are kept).

        Raises:
            MxTrtError: the new values do not fit (another shape, for example).
        """
        self.request = self.request.with_(params=dict(params))
        self._use(bind_optimized(self.request, self.info))
        self.native = self._digests()
        self.reshapable = self.relaxed is not None


class _ParamWatch:
    """Which parameters may have changed since the last check (see the module's docstring)."""

    def __init__(self, params: Sequence[Tuple[str, int, Any]]) -> None:
        self.params = list(params)  # (name, position among the CachedOp's inputs, Parameter)
        self.seen: Dict[str, Tuple[int, int]] = {}  # name -> (parameter generation, NDArray handle)
        self.clock = (-1, -1, -1)
        self.forced = True  # the first check looks at everything
        self.trained = False

    def due(self) -> Optional[bool]:
        """None: nothing to check; False: check the parameters that moved; True: check them all."""
        now = _clock.now()
        if now == self.clock and not self.forced and not self.trained:
            return None
        return self.forced or self.trained or now[1:] != self.clock[1:]

    def suspects(self, cargs: Sequence[Any], full: bool) -> Dict[str, Any]:
        """Name -> current array of every parameter to check."""
        out = {}
        for name, pos, param in self.params:
            arr = cargs[pos]
            if full or self.seen.get(name) != (getattr(param, "_mx_trt_gen", 0), arr.handle.value):
                out[name] = arr
        return out

    def mark(self, cargs: Sequence[Any], clock: Tuple[int, int, int]) -> None:
        """Everything as of ``clock`` has been checked."""
        self.seen = {name: (getattr(param, "_mx_trt_gen", 0), cargs[pos].handle.value) for name, pos, param in self.params}
        self.clock = clock
        self.forced = self.trained = False


class AcceleratedCachedOp:
    """Stands in for a block's ``CachedOp``: same call, engines for inference, the native op for training.

    Gluon calls it as it calls a ``CachedOp``: the data inputs and every parameter's
    array, in the order of the original graph's ``list_inputs()``.

    Attributes:
        name: The block's name.
        settings: The settings of this block's binds.
        passes: How many times the pass ran (each builds or reuses engines).
        rebinds: How many times an executor was bound again for changed native parameters.
    """

    def __init__(self, name: str, symbol: Any, data_inputs: Sequence[Tuple[str, int]],
                 param_inputs: Sequence[Tuple[str, int, Any]], native: Any, settings: Settings,
                 options: Mapping[str, Any]) -> None:
        self.name = name
        self.settings = settings
        self.passes = 0
        self.rebinds = 0
        self._symbol = symbol
        self._data_inputs = list(data_inputs)
        self._param_inputs = list(param_inputs)
        self._native = native
        self._options = dict(options)
        self._what = f"the Gluon block {name!r}"
        self._dynamic = bool(settings.max_batch_size or settings.profiles)
        self._entries: "collections.OrderedDict[Key, _Entry]" = collections.OrderedDict()
        self._native_keys: "collections.OrderedDict[Key, bool]" = collections.OrderedDict()
        self._watch = _ParamWatch(param_inputs)
        self._lock = threading.RLock()
        self._hooked = False

    @property
    def native(self) -> Any:
        """The block's own ``CachedOp`` (training, op hooks, and signatures the pass failed on)."""
        return self._native

    @property
    def infos(self) -> List[BindInfo]:
        """The :class:`BindInfo` of every live executor, most recently used last (one per pass run)."""
        with self._lock:
            out: List[BindInfo] = []
            for entry in self._entries.values():
                if not any(entry.info is i for i in out):
                    out.append(entry.info)
            return out

    @property
    def executors(self) -> int:
        """How many executors (input signatures) are kept."""
        return len(self._entries)

    def refresh(self) -> None:
        """Compare every parameter at the next inference forward."""
        self._watch.forced = True

    def _register_op_hook(self, callback: Any, monitor_all: bool = False) -> None:
        # Gluon registers the hook before every call when one is set: run natively so it sees every operator.
        if not self._hooked:
            logger.info("%s: an op hook is registered: the block runs natively so that the hook sees every operator",
                        self.name)
        self._hooked = True
        self._native._register_op_hook(callback, monitor_all)

    def __getattr__(self, name: str) -> Any:
        native = self.__dict__.get("_native")
        if native is None:
            raise AttributeError(name)
        return getattr(native, name)

    def __call__(self, *cargs: Any) -> Any:
        import mxnet as mx

        if self._hooked or mx.autograd.is_recording() or mx.autograd.is_training():
            self._watch.trained = True  # BatchNorm may update its running statistics in place
            return self._native(*cargs)
        with self._lock:
            key, entry = self._select(cargs)
            if entry is not None:
                run = entry.run
                out = guarded(self._what, lambda: run(cargs), lambda: self._give_up(key), self._options)
                if out is not None:
                    return out
        return self._native(*cargs)

    def prepare(self, cargs: Sequence[Any]) -> None:
        """Run the pass now for these inputs (``optimize_for``), if it has not run for their signature."""
        with self._lock:
            self._select(cargs)

    # -- the executor for a signature -------------------------------------------------------------------

    def _signature(self, cargs: Sequence[Any]) -> Tuple[Key, Optional[Key], Any]:
        import mxnet as mx

        ctx = None
        full: List[Any] = [mx.util.is_np_array()]
        relaxed: List[Any] = list(full)
        for name, pos in self._data_inputs:
            a = cargs[pos]
            ctx = ctx or getattr(a, "context", None)
            shape = tuple(getattr(a, "shape", ()))
            kind = (type(a).__name__, str(getattr(a, "dtype", "")), getattr(a, "stype", ""))
            full.append((name, shape) + kind)
            relaxed.append((name, shape[1:]) + kind)
        head = (str(ctx),)
        return head + tuple(full), (head + tuple(relaxed) if self._dynamic else None), ctx

    def _select(self, cargs: Sequence[Any]) -> Tuple[Key, Optional[_Entry]]:
        key, relaxed, ctx = self._signature(cargs)
        entry = self._entries.get(key)
        if entry is not None and self._watch.due() is None:
            self._entries.move_to_end(key)
            return key, entry
        if key in self._native_keys:
            return key, None

        def accelerated() -> Optional[_Entry]:
            self._check(cargs)
            found = self._entries.get(key)
            if found is None:
                found = self._reshaped(relaxed, cargs) or self._build(cargs, relaxed, ctx)
                self._entries[key] = found
                while len(self._entries) > MAX_EXECUTORS:
                    self._entries.popitem(last=False)
            self._entries.move_to_end(key)
            return found

        return key, guarded(self._what, accelerated, lambda: self._give_up(key), self._options)

    def _give_up(self, key: Key) -> None:
        """Run this signature natively from now on (the pass or its executor failed on it)."""
        self._entries.pop(key, None)
        self._native_keys[key] = True
        while len(self._native_keys) > MAX_NATIVE_SIGNATURES:
            self._native_keys.popitem(last=False)

    def _build(self, cargs: Sequence[Any], relaxed: Optional[Key], ctx: Any) -> _Entry:
        import mxnet as mx

        if mx.util.is_np_array():
            raise NativeFallback("numpy semantics (npx.set_np) are not supported by the pass")
        shapes: Dict[str, Tuple[int, ...]] = {}
        types: Dict[str, Any] = {}
        for name, pos in self._data_inputs:
            a = cargs[pos]
            if not isinstance(a, mx.nd.NDArray) or a.stype != "default":
                raise NativeFallback(f"input {name!r} is not a dense NDArray")
            shapes[name] = tuple(a.shape)
            types[name] = a.dtype
        params = {}
        for name, pos, _ in self._param_inputs:
            a = cargs[pos]
            if a.stype != "default":
                raise NativeFallback(f"parameter {name!r} has sparse storage ({a.stype})")
            params[name] = a
            types[name] = a.dtype
        if ctx is None:
            raise NativeFallback("the block has no data input")
        request = BindRequest(symbol=self._symbol, shapes=shapes, params=params, settings=self.settings,
                              backend=call_backend(ctx, self.settings), ctx=ctx, type_dict=types,
                              native_bind=hook.original_simple_bind())
        if calibrates_on_forwards(self.settings):  # MXNet 1.9.1's calibration_iters: native first, int8 after
            exe = calibrating_bind(request)
            info = BindInfo(symbol=self._symbol, original=self._symbol, plan=None, engines=[], absorbed={})  # type: ignore[arg-type]
            self.passes += 1
            return _Entry(exe, info, request, self._data_inputs, None)
        exe, info = bind(request)
        self.passes += 1
        logger.info("%s: %d engine(s) for inputs %s (%d weight(s) baked in, %d built)", self.name, len(info.engines),
                    shapes, len(info.absorbed), info.builds)
        return _Entry(exe, info, request, self._data_inputs, relaxed)

    def _reshaped(self, relaxed: Optional[Key], cargs: Sequence[Any]) -> Optional[_Entry]:
        """An executor for another batch size, reshaped from one bound with batch profiles (no pass, no build)."""
        if relaxed is None:
            return None
        shapes = {name: tuple(cargs[pos].shape) for name, pos in self._data_inputs}
        for base in reversed(list(self._entries.values())):
            if base.relaxed != relaxed or not base.reshapable:
                continue
            try:
                exe = base.exe.reshape(allow_up_sizing=True, **shapes)
            except Exception as exc:  # noqa: BLE001 - a static engine, or a batch MXNet cannot reshape to: bind again
                base.reshapable = False
                logger.info("%s: cannot reshape the executor to %s (%s): running the pass for it",
                            self.name, shapes, " ".join(str(exc).split())[:200])
                continue
            return _Entry(exe, base.info, base.request.with_(shapes=shapes), self._data_inputs, relaxed, dict(base.native))
        return None

    # -- parameter changes ------------------------------------------------------------------------------

    def _check(self, cargs: Sequence[Any]) -> None:
        """Drop the executors whose baked-in weights changed; bind again those whose native parameters changed."""
        import mxnet as mx

        due = self._watch.due()
        if due is None:
            return
        clock = _clock.now()
        if due:
            # MKLDNN BatchNorm writes its running statistics during backward without
            # declaring them as outputs to the engine: wait_to_read() on them can return
            # before the write. Only a full barrier is safe.
            mx.nd.waitall()
        suspects = self._watch.suspects(cargs, due)
        if suspects and self._entries:
            digests: Dict[str, str] = {}

            def changed(names: Mapping[str, str]) -> List[str]:
                out = []
                for name, want in names.items():
                    if name in suspects:
                        if name not in digests:
                            digests[name] = digest(suspects[name])
                        if digests[name] != want:
                            out.append(name)
                return out

            stale: List[str] = []
            moved: List[Key] = []
            for key in list(self._entries):
                entry = self._entries[key]
                baked = changed(entry.info.absorbed)
                if baked:
                    del self._entries[key]
                    stale.extend(baked)
                elif changed(entry.native):
                    moved.append(key)
            if stale:
                names = sorted(set(stale))
                logger.info("%s: parameter(s) baked into engines changed (%s): building them again", self.name,
                            ", ".join(names[:4]) + (", ..." if len(names) > 4 else ""))
            if moved:
                current = {name: cargs[pos] for name, pos, _ in self._param_inputs}
                for key in moved:
                    entry = self._entries.pop(key)  # gone if binding again fails
                    entry.rebind(current)
                    self._entries[key] = entry
                    self.rebinds += 1
        self._watch.mark(cargs, clock)


# -- the patches ----------------------------------------------------------------------------------------


def _cached_op_inputs(block: Any) -> Tuple[List[Tuple[str, int]], List[Tuple[str, int, Any]]]:
    """(data name, position) and (parameter name, position, Parameter) of the block's native CachedOp inputs."""
    _, out = block._cached_graph
    names = out.list_inputs()
    if len(names) != len(block._cached_op_args):
        raise MxTrtError(f"the cached graph has {len(names)} inputs and the CachedOp {len(block._cached_op_args)}")
    data: List[Tuple[str, int]] = []
    params: List[Tuple[str, int, Any]] = []
    for pos, (name, (is_data, item)) in enumerate(zip(names, block._cached_op_args)):
        if is_data:
            data.append((name, pos))
        elif getattr(item, "name", None) == name:
            params.append((name, pos, item))
        else:
            raise MxTrtError(f"input {pos} of the cached graph is {name!r} and the CachedOp's is {item!r}")
    return data, params


def _accelerate(block: Any, args: Sequence[Any], explicit: bool) -> None:
    """Wrap the block's fresh native CachedOp, and run the pass now when the inputs allow (``optimize_for``)."""
    import mxnet as mx

    try:
        options = backend_options(block._backend_opts) if explicit else {}
    except MxTrtError:
        options = {}  # reported as the pass's failure below

    def accelerated() -> AcceleratedCachedOp:
        opts = backend_options(block._backend_opts) if explicit else {}
        settings = call_settings(opts, where=f"backend options of {block.name!r}")
        data, params = _cached_op_inputs(block)
        return AcceleratedCachedOp(block.name, block._cached_graph[1], data, params, block._cached_op, settings, opts)

    op = guarded(f"the Gluon block {block.name!r}", accelerated, lambda: None, options)
    if op is None:
        return
    block._cached_op = op
    if mx.autograd.is_recording() or mx.autograd.is_training():
        return  # a training forward: engines are built at the first inference forward
    flat = [a for a in mx.gluon.block._flatten(list(args), "input")[0] if a is not None]
    if not flat or not all(isinstance(a, mx.nd.NDArray) for a in flat):
        return
    try:
        ctx = flat[0].context
        cargs = [flat[item] if is_data else item.data(ctx) for is_data, item in block._cached_op_args]
    except Exception:  # noqa: BLE001 - the forward that follows builds, or fails as MXNet fails
        logger.debug("%s: inputs not ready for the pass at build time", block.name, exc_info=True)
        return
    op.prepare(cargs)


_lock = threading.Lock()
_installed = False


def _wrap(owner: Any, attr: str, make: Callable[[Any], Callable[..., Any]]) -> None:
    patches.wrap(owner, attr, make)


def _uninstalled() -> None:
    global _installed
    with _lock:
        _installed = False


def install() -> None:
    """Patch Gluon once: ``HybridBlock._build_cache``, the parameter and trainer updates, and ``autograd.set_training``.

    Idempotent and thread-safe; imports mxnet. With the pass off and no
    TensorRT backend named, the patched methods behave exactly as MXNet's:
    the others only count changes.
    """
    global _installed
    if _installed:
        return
    with _lock:
        if _installed:
            return
        import mxnet as mx
        from mxnet.gluon import block as gblock, parameter as gparam, trainer as gtrainer

        def build_cache(original: Callable[..., Any]) -> Callable[..., Any]:
            def _build_cache(self: Any, *args: Any) -> Any:
                wanted, explicit = _wants_pass(self)
                if not wanted:
                    return original(self, *args)
                saved = self._backend
                self._backend = None  # MXNet's optimize_for knows no 'TensorRT' backend: keep the original graph
                try:
                    original(self, *args)
                finally:
                    self._backend = saved
                _accelerate(self, args, explicit)
                return None
            return _build_cache

        def param_update(original: Callable[..., Any]) -> Callable[..., Any]:
            def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
                try:
                    return original(self, *args, **kwargs)
                finally:
                    _clock.param_changed(self)
            return wrapper

        def trainer_update(original: Callable[..., Any]) -> Callable[..., Any]:
            def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
                try:
                    return original(self, *args, **kwargs)
                finally:
                    for p in getattr(self, "_params", ()):
                        _clock.param_changed(p)
            return wrapper

        def set_training(original: Callable[..., Any]) -> Callable[..., Any]:
            def wrapper(train_mode: Any) -> Any:
                if train_mode:
                    _clock.training_entered()
                return original(train_mode)
            return wrapper

        _wrap(gblock.HybridBlock, "_build_cache", build_cache)
        for attr in ("_init_impl", "set_data", "cast"):
            _wrap(gparam.Parameter, attr, param_update)
        for attr in ("step", "update"):
            _wrap(gtrainer.Trainer, attr, trainer_update)
        _wrap(mx.autograd, "set_training", set_training)
        patches.on_uninstall(_uninstalled)
        _installed = True
        logger.debug("mx_trt: Gluon hooked")


def _ops(block: Any) -> List[AcceleratedCachedOp]:
    """The accelerated CachedOps of ``block`` and its descendants."""
    out: List[AcceleratedCachedOp] = []
    todo, seen = [block], set()
    while todo:
        b = todo.pop()
        if id(b) in seen:
            continue
        seen.add(id(b))
        op = getattr(b, "_cached_op", None)
        if isinstance(op, AcceleratedCachedOp):
            out.append(op)
        todo.extend(getattr(b, "_children", {}).values())
    return out


def refresh(block: Any = None) -> int:
    """Make the next inference forward compare every parameter, and rebuild or bind again what changed.

    Use it after writing into a parameter's array in a way that the block cannot
    see (``p.data()[:] = v``; see the module's docstring).

    Args:
        block: A Gluon block (its children are included), or ``None`` for every block of the process.

    Returns:
        How many accelerated blocks were marked (0 for ``None``: all are).
    """
    if block is None:
        _clock.refresh_all()
        return 0
    ops = _ops(block)
    for op in ops:
        op.refresh()
    return len(ops)


def bind_infos(block: Any) -> List[BindInfo]:
    """The :class:`BindInfo` of every executor that ``block`` (children included) keeps; empty when it runs natively."""
    return [info for op in _ops(block) for info in op.infos]
