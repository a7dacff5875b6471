"""Files the TensorRT backends keep beside the plans: timing caches, TensorRT-RTX runtime caches, plans.

* Timing cache (TensorRT 10+): tactic timings, loaded into the builder config
  before a build and saved after it. TensorRT-RTX accepts one but does not use
  it (and cannot read one without a GPU).
* Runtime cache (TensorRT-RTX): kernels compiled at run time for the shapes
  seen, loaded when an execution context is created and saved after runs
  that compiled new ones.

Every file is replaced atomically (:func:`replace_file`, over
:func:`mx_trt.fsutil.write_atomic`). The temporary file is named
``mx_trt_write_<pid>_*.tmp`` beside its target, so what a killed process left
behind is told apart from a live writer's file and removed by the next write
into that folder (:func:`mx_trt.cache.locking.sweep_orphans`).
A cache file that cannot be read is replaced by an empty cache, never an error:
caches are an optimisation.
"""
from __future__ import annotations

import logging
import os
import warnings
from typing import TYPE_CHECKING, Any, Optional

from mx_trt.cache.locking import sweep_orphans
from mx_trt.fsutil import write_atomic

if TYPE_CHECKING:
    import tensorrt as trt

logger = logging.getLogger(__name__)

def replace_file(path: str, data: bytes) -> None:
    """:func:`~mx_trt.fsutil.write_atomic` of a private file (mode 0600), after removing dead processes' temporary files beside it.

    O(len(data) + files in the folder).

    Raises:
        OSError: the folder or file cannot be written (the temporary file is removed).
    """
    sweep_orphans(os.path.dirname(os.path.abspath(path)))
    write_atomic(path, data, mode=0o600)


def read_if_present(path: str) -> Optional[bytes]:
    """The contents of ``path``, or ``None`` if it does not exist.

    Raises:
        OSError: it exists but cannot be read.
    """
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def load_timing_cache(config: "trt.IBuilderConfig", log: Any, path: str, subgraph: str,
                      level: int = logging.WARNING) -> "trt.ITimingCache":
    """The timing cache from ``path`` set on ``config``; an unreadable one is replaced by an empty cache.

    The replacement is logged at ``level`` (TensorRT-RTX, which does not use
    timing caches and cannot read one without a GPU, passes INFO); TensorRT's
    own complaints about the file go to DEBUG.

    Args:
        config: The builder config.
        log: The module's forwarding ``ILogger`` (:func:`.logs.logger_for`).
        path: The cache file; missing means empty.
        subgraph: For messages.
        level: Logging level of "the file is unusable".
    """
    data = b""
    try:
        data = read_if_present(path) or b""
    except OSError as exc:
        logger.warning("%s: cannot read timing cache %s (%s); starting an empty one", subgraph, path, exc)
    cache: Optional[trt.ITimingCache] = None
    with log.capture(quiet=True) as cap, warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # TensorRT-RTX: timing caches are no-ops there
        try:
            cache = config.create_timing_cache(data)
        except Exception as exc:
            cap.lines.append(f"[E] {exc}")
    complaints = [line for line in cap.lines if "cache" in line.lower() or line.startswith("[E]")]
    if data and (cache is None or complaints):
        logger.log(level, "%s: timing cache %s is corrupt, from another TensorRT version or GPU, or needs a GPU "
                   "to be read; ignoring it (%s)", subgraph, path, "; ".join(complaints) or "not loaded")
        cache = None
    if cache is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            cache = config.create_timing_cache(b"")
    if not config.set_timing_cache(cache, False):
        logger.warning("%s: TensorRT did not accept the timing cache from %s", subgraph, path)
    return cache


def save_timing_cache(config: "trt.IBuilderConfig", path: str, subgraph: str) -> None:
    """Write the config's timing cache to ``path``; a failure is only a warning."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            data = bytes(config.get_timing_cache().serialize())
        replace_file(path, data)
        logger.debug("%s: timing cache saved to %s (%d bytes)", subgraph, path, len(data))
    except Exception as exc:  # a cache is an optimisation: never fail a good build for it
        logger.warning("%s: could not save the timing cache to %s: %s", subgraph, path, exc)


class RuntimeCache:
    """TensorRT-RTX's runtime cache of one execution context, kept in a file.

    Attributes:
        path: The file.
        cache: The ``IRuntimeCache`` set on the context's runtime config.
    """

    def __init__(self, runtime_config: Any, path: str, subgraph: str) -> None:
        """Create the cache on ``runtime_config``, filled from ``path`` when it holds a usable one."""
        self.path = path
        self._subgraph = subgraph
        self.cache = runtime_config.create_runtime_cache()
        data = None
        try:
            data = read_if_present(path)
        except OSError as exc:
            logger.warning("%s: cannot read runtime cache %s: %s", subgraph, path, exc)
        if data and not self.cache.deserialize(data):
            logger.warning("%s: runtime cache %s does not match this GPU, driver or TensorRT-RTX version "
                           "(or is corrupt); starting an empty one", subgraph, path)
        runtime_config.set_runtime_cache(self.cache)

    def save(self) -> bool:
        """Write the cache to :attr:`path`; whether it was written (a failure is only a warning)."""
        try:
            replace_file(self.path, bytes(self.cache.serialize()))
        except Exception as exc:  # an optimisation only
            logger.warning("%s: could not save the runtime cache to %s: %s", self._subgraph, self.path, exc)
            return False
        return True
