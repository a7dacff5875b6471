"""Run a callable right after ``mxnet`` is imported, without importing it (a ``sys.meta_path`` finder).

``import mx_trt`` before ``import mxnet`` must not import mxnet, yet the hook
has to go in once mxnet is there: :func:`call_when_imported` puts a finder at the front of
``sys.meta_path`` that answers only for the top-level ``mxnet``, wraps the
loader the finders after it return, and, once ``mxnet/__init__.py`` has run,
takes itself off ``sys.meta_path`` and calls the callable.

The start-up hook (the top-level ``mx_trt_autoload``, armed by its ``.pth``
file at every interpreter start) does the same before anything of mx_trt is
imported, so it keeps a finder of its own; both mark their class with the
:data:`MARKER` attribute, so that only one of them waits at a time and neither
wraps the other's loader. This module imports nothing of the start-up hook:
it is a leaf that the hook (:mod:`mx_trt.frontends.hook`) uses.
"""
from __future__ import annotations

import logging
import sys
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any, Callable, Optional, Sequence

logger = logging.getLogger(__name__)

#: The top-level package whose import is waited for.
TARGET = "mxnet"
#: Class attribute (value ``True``) of every finder that waits for mxnet on mx_trt's behalf,
#: this module's and the start-up hook's.
MARKER = "mx_trt_autoload"


def is_waiting_finder(finder: Any) -> bool:
    """True for a finder of this module or of the start-up hook (looked up on the class, so reloads keep it)."""
    return getattr(type(finder), MARKER, None) is True


def waiting() -> bool:
    """True when a finder (this module's or the start-up hook's) waits for ``mxnet``."""
    return any(is_waiting_finder(f) for f in sys.meta_path)


def disarm() -> None:
    """Take every waiting finder off ``sys.meta_path`` (a no-op if there is none)."""
    sys.meta_path[:] = [f for f in sys.meta_path if not is_waiting_finder(f)]


class _CallingLoader:
    """Wraps MXNet's own loader; after ``mxnet`` has executed, calls the callable."""

    def __init__(self, loader: Any, then: Callable[[], None]) -> None:
        self._loader = loader
        self._then = then

    def __getattr__(self, name: str) -> Any:
        # Anything else (get_resource_reader, is_package, ...) is MXNet's loader's.
        return getattr(self._loader, name)

    def create_module(self, spec: ModuleSpec) -> Optional[ModuleType]:
        return self._loader.create_module(spec)  # type: ignore[no-any-return]

    def exec_module(self, module: ModuleType) -> None:
        loader = self._loader
        # Give the module its real loader back, so mxnet looks untouched.
        module.__loader__ = loader
        spec = getattr(module, "__spec__", None)
        if spec is not None:
            spec.loader = loader
        try:
            loader.exec_module(module)
        finally:
            disarm()
        try:
            self._then()
        except Exception:
            # mxnet itself imported fine: it runs without the hook rather than not at all.
            logger.warning("mx_trt: could not hook mxnet after it was imported; MXNet runs natively", exc_info=True)


class MxnetFinder:
    """A ``sys.meta_path`` finder that answers only for the top-level ``mxnet``.

    It asks the finders after it for ``mxnet``'s spec and wraps the spec's
    loader; every other name costs one string comparison.

    Args:
        then: Called once, right after ``mxnet/__init__.py`` has run.
    """

    #: Marks the waiting finders (see :data:`MARKER`).
    mx_trt_autoload = True

    def __init__(self, then: Callable[[], None]) -> None:
        self._then = then

    def find_spec(self, fullname: str, path: Optional[Sequence[str]] = None,
                  target: Optional[ModuleType] = None) -> Optional[ModuleSpec]:
        if fullname != TARGET:
            return None
        spec = None
        for finder in list(sys.meta_path):
            if is_waiting_finder(finder):
                continue
            find_spec = getattr(finder, "find_spec", None)
            if find_spec is None:
                continue
            spec = find_spec(fullname, path, target)
            if spec is not None:
                break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            # Not found (the normal search will say so) or a kind of loader not wrapped: step aside.
            # (sys.meta_path is not changed here: the import system is iterating over it.)
            logger.debug("mx_trt: no loader to wrap for %s; the hook waits for the next import", fullname)
            return None
        spec.loader = _CallingLoader(spec.loader, self._then)
        return spec


def call_when_imported(then: Callable[[], None]) -> None:
    """Call ``then`` now if ``mxnet`` is imported, else right after it is (without importing it).

    When a finder already waits (the start-up hook's, which imports mx_trt and
    installs its hook, or an earlier call's), none is added and ``then`` is not
    called by this module: the waiting finder does the same work.

    Args:
        then: Installs the hook; it imports mxnet itself, so it must not run before mxnet finished loading.
    """
    if TARGET in sys.modules:
        then()
        return
    if waiting():
        return
    sys.meta_path.insert(0, MxnetFinder(then))
