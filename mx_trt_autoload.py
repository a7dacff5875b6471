"""Start-up hook: MXNet's ``simple_bind`` is hooked as soon as ``mxnet`` is imported.

The wheel puts ``mx_trt_autoload.pth`` into site-packages, so :func:`install`
runs while every interpreter of that environment starts. It only puts a small
finder at the front of ``sys.meta_path``; it imports neither mxnet nor
mx_trt. When a program imports ``mxnet``, the finder lets MXNet's own loader
run and, once ``mxnet/__init__.py`` has finished, imports ``mx_trt`` (whose import
installs the hook) and takes itself off ``sys.meta_path``. User code
needs no ``import mx_trt``; ``MXNET_USE_TENSORRT=1`` is then the only switch.

Set ``MX_TRT_AUTOLOAD=0`` (or ``false``/``no``/``off``) to opt out. Nothing
here raises: a missing or broken mx_trt is logged at DEBUG on the
``mx_trt_autoload`` logger and MXNet works as though the plugin were absent.

This module runs at every interpreter start, so it imports nothing beyond
``os`` and ``sys`` (both already loaded by then) and ``typing`` only for the
type checker; mx_trt itself is imported only once mxnet has loaded. Imports
flow one way: this module imports mx_trt, nothing in mx_trt imports this
module. A program that imports mx_trt before mxnet without this hook armed
gets the same wait from mx_trt's own finder (``mx_trt.frontends.mxnet_import``,
whose finders carry the same ``mx_trt_autoload`` class marker, so that only
one finder waits at a time).
"""
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any, Optional, Sequence

#: Environment variable that turns the hook off when set to 0/false/no/off.
ENV_SWITCH = "MX_TRT_AUTOLOAD"
#: The top-level package whose import triggers the hook.
TARGET = "mxnet"

_OFF = ("0", "false", "no", "off")


def enabled() -> bool:
    """False when ``MX_TRT_AUTOLOAD`` asks to opt out; on by default."""
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in _OFF


def _is_ours(finder: "Any") -> bool:
    # Looked up on the class, so a finder with a permissive __getattr__ is not
    # mistaken for ours; true across reloads of this module.
    return getattr(type(finder), "mx_trt_autoload", None) is True


def _debug(msg: str, *args: "Any", exc_info: bool = False) -> None:
    # logging is imported only here, on a path that runs after mxnet (which
    # imports logging itself) or on failure: never at interpreter start-up.
    import logging

    logging.getLogger(__name__).debug(msg, *args, exc_info=exc_info)


class _HookingLoader:
    """Wraps MXNet's own loader; after ``mxnet`` has executed, installs the hook."""

    def __init__(self, loader: "Any") -> None:
        self._loader = loader

    def __getattr__(self, name: str) -> "Any":
        # Anything else (get_resource_reader, is_package, ...) is MXNet's loader's.
        return getattr(self._loader, name)

    def create_module(self, spec: "ModuleSpec") -> "Optional[ModuleType]":
        return self._loader.create_module(spec)  # type: ignore[no-any-return]

    def exec_module(self, module: "ModuleType") -> None:
        loader = self._loader
        # Give the module its real loader back, so mxnet looks untouched.
        module.__loader__ = loader
        spec = getattr(module, "__spec__", None)
        if spec is not None:
            spec.loader = loader
        try:
            loader.exec_module(module)
        finally:
            uninstall()
        _hook_mxnet()


class MxnetFinder:
    """A ``sys.meta_path`` finder that answers only for the top-level ``mxnet``.

    It asks the finders after it for ``mxnet``'s spec and wraps the spec's
    loader; every other name costs one string comparison.
    """

    #: Marks this class across reloads of the module (see ``_is_ours``).
    mx_trt_autoload = True

    def find_spec(self, fullname: str, path: "Optional[Sequence[str]]" = None,
                  target: "Optional[ModuleType]" = None) -> "Optional[ModuleSpec]":
        if fullname != TARGET:
            return None
        spec = None
        for finder in list(sys.meta_path):
            if _is_ours(finder):
                continue
            find_spec = getattr(finder, "find_spec", None)
            if find_spec is None:
                continue
            spec = find_spec(fullname, path, target)
            if spec is not None:
                break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            # Not found (the normal search will say so) or a kind of loader we
            # do not wrap: step aside. (Do not leave sys.meta_path here: the
            # import system is iterating over it.)
            _debug("mx_trt_autoload: no loader to wrap for %s; hook not installed", fullname)
            return None
        spec.loader = _HookingLoader(spec.loader)
        return spec


def _hook_mxnet() -> None:
    """Called right after ``mxnet/__init__.py`` ran: hook ``simple_bind``."""
    if not enabled() and "mx_trt" not in sys.modules:
        _debug("mx_trt_autoload: %s opts out, not hooking mxnet", ENV_SWITCH)
        return
    try:
        # Importing the package hands the hook the pass; then the hook goes in.
        import mx_trt  # noqa: F401
        from mx_trt.frontends.hook import install as install_hook

        install_hook()
    except Exception:
        _debug("mx_trt_autoload: could not hook mxnet; MXNet runs without mx_trt", exc_info=True)


def install() -> None:
    """Arm the finder (called from ``mx_trt_autoload.pth``). Never raises.

    Does nothing when opted out, when ``mxnet`` is already imported or when
    the finder is already in place.
    """
    try:
        if not enabled() or TARGET in sys.modules:
            return
        if any(_is_ours(f) for f in sys.meta_path):
            return
        sys.meta_path.insert(0, MxnetFinder())
    except Exception:
        pass


def uninstall() -> None:
    """Take the finder off ``sys.meta_path`` (a no-op if it is not there)."""
    sys.meta_path[:] = [f for f in sys.meta_path if not _is_ours(f)]
