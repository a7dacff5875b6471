"""Every change mx_trt makes to MXNet, in one table, and :func:`uninstall` to undo them all.

The front-ends (and the runtime's operator table, and the executors that
calibrate on their forwards) patch MXNet through :func:`wrap` and :func:`put`
only. Each patch records the owner, the attribute, what was there before
(whether the owner held it itself or inherited it) and what replaced it.
:func:`uninstall` puts back exactly what was there, newest patch first, and
calls the hooks registered with :func:`on_uninstall` (which reset the
front-ends' "installed" flags, so that installing again works).

MXNet's private names patched, with the MXNet version they were checked
against, are listed in :data:`PRIVATE`; a new MXNet release needs each one
checked again.

This module imports nothing of mx_trt and no MXNet: it sees MXNet only through
the objects handed to it.
"""
from __future__ import annotations

import logging
import sys
import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

logger = logging.getLogger(__name__)

#: MXNet's private names that mx_trt patches or replaces -> the MXNet version they were checked against.
PRIVATE: Dict[str, str] = {
    "mxnet.module.executor_group.DataParallelExecutorGroup._bind_ith_exec": "1.9.1",
    "mxnet.module.executor_group.DataParallelExecutorGroup._collect_arrays": "1.9.1",
    "mxnet.gluon.block.HybridBlock._build_cache": "1.9.1",
    "mxnet.gluon.parameter.Parameter._init_impl": "1.9.1",
    "mxnet.operator._registry.ref_holder": "1.9.1",
}

_MISSING = object()


@dataclass(frozen=True)
class Patch:
    """One attribute of MXNet replaced by mx_trt.

    Attributes:
        owner: The class or module whose attribute was replaced.
        name: The attribute.
        original: What ``getattr(owner, name)`` gave before (the value to restore).
        own: Whether the owner held it itself (``False``: inherited or absent, so it is deleted again).
        value: What replaced it.
        restore: A custom undo (for tables whose entries moved), called instead of ``setattr``.
    """

    owner: Any
    name: str
    original: Any
    own: bool
    value: Any
    restore: Optional[Callable[[], None]] = None

    @property
    def qualname(self) -> str:
        return f"{getattr(self.owner, '__module__', '')}.{getattr(self.owner, '__qualname__', getattr(self.owner, '__name__', '?'))}.{self.name}"


_lock = threading.RLock()
_patches: List[Patch] = []
_hooks: List[Callable[[], None]] = []


def _own(owner: Any, name: str) -> bool:
    d = getattr(owner, "__dict__", None)
    return d is not None and name in d


def wrap(owner: Any, name: str, make: Callable[[Any], Callable[..., Any]]) -> Callable[..., Any]:
    """Replace ``owner.name`` by ``make(original)``; the wrapper gets the original's name, doc and ``__wrapped__``.

    Returns:
        The wrapper.
    """
    with _lock:
        original = getattr(owner, name)
        wrapper = make(original)
        wrapper.__name__ = getattr(original, "__name__", name)
        wrapper.__doc__ = getattr(original, "__doc__", None)
        wrapper.__wrapped__ = original  # type: ignore[attr-defined]
        _patches.append(Patch(owner, name, original, _own(owner, name), wrapper))
        setattr(owner, name, wrapper)
        return wrapper


def put(owner: Any, name: str, value: Any, restore: Optional[Callable[[], None]] = None) -> None:
    """Set ``owner.name = value`` (a module, a table), recording what was there."""
    with _lock:
        original = getattr(owner, name, _MISSING)
        _patches.append(Patch(owner, name, original, _own(owner, name), value, restore))
        setattr(owner, name, value)


def put_module(fullname: str, module: Any) -> None:
    """Make ``import fullname`` give ``module`` (``sys.modules``), recording what was there."""
    with _lock:
        before: Any = sys.modules.get(fullname, _MISSING)

        def restore() -> None:
            if before is _MISSING:
                sys.modules.pop(fullname, None)
            else:
                sys.modules[fullname] = before

        _patches.append(Patch(sys.modules, fullname, before, before is not _MISSING, module, restore))
        sys.modules[fullname] = module  # type: ignore[assignment]


def original(owner: Any, name: str) -> Any:
    """What ``owner.name`` was before mx_trt patched it (the current value if it is not patched)."""
    with _lock:
        for p in reversed(_patches):
            if p.owner is owner and p.name == name:
                return p.original
    return getattr(owner, name)


def patched() -> List[Patch]:
    """The patches in force, oldest first."""
    with _lock:
        return list(_patches)


def on_uninstall(fn: Callable[[], None]) -> None:
    """Call ``fn`` after :func:`uninstall` has restored MXNet (to reset an "installed" flag)."""
    with _lock:
        if fn not in _hooks:
            _hooks.append(fn)


def uninstall() -> int:
    """Undo every patch, newest first, so MXNet is exactly as it was before mx_trt; returns how many.

    Executors and symbols made with the pass keep working (their engines live
    as long as they do); new binds are MXNet's own. Importing or calling mx_trt
    again installs the patches again.
    """
    with _lock:
        todo = list(reversed(_patches))
        _patches.clear()
        for p in todo:
            try:
                if p.restore is not None:
                    p.restore()
                elif p.original is _MISSING or not p.own:
                    if _own(p.owner, p.name):
                        delattr(p.owner, p.name)
                    if p.original is not _MISSING and getattr(p.owner, p.name, _MISSING) is not p.original:
                        setattr(p.owner, p.name, p.original)
                else:
                    setattr(p.owner, p.name, p.original)
            except Exception:  # noqa: BLE001 - undo the rest whatever one of them does
                logger.warning("could not restore %s", p.qualname, exc_info=True)
        hooks = list(_hooks)
    for fn in hooks:
        fn()
    logger.info("mx_trt: %d patch(es) of MXNet undone", len(todo))
    return len(todo)
