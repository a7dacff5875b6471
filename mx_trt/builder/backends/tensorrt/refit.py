"""Weight-stripped plans: the builder flags, and the refit of a deserialized engine from host memory.

A stripped plan (``BuilderFlag.STRIP_PLAN`` + ``REFIT_IDENTICAL``) holds the
engine without its weights; the plan cache stores that. ``REFIT_IDENTICAL``
keeps the builder's constant folding, so the weights given at refit must be
the build's own values: the plan cache key holds every weight's digest, so a
plan is only ever refitted with the weights it was built from.

Refit, once per deserialized engine::

    Refitter(engine, logger) -> for each name of get_all_weights() that is an
    initializer: set_named_weights(name, Weights(dtype, ptr, count)) over the
    caller's array (no copy) -> get_missing_weights() must be empty
    -> refit_cuda_engine() (TensorRT copies the weights to the device)

Weights are found by name: the ONNX parser names each weight after its ONNX
initializer. A weight TensorRT names otherwise (an ONNX ``Constant`` node's
value, a weight the parser made itself) is not among the initializers the
caller gives, so it stays missing. The builder refits every stripped plan it
can deserialize right after the build (:func:`~.builder.build_engine`) and
builds the plan again with its weights when any is missing: a plan is only
stored stripped when every weight it needs is an initializer.

Weights sources (``BuildOptions.extra["weights"]``): a zero-argument callable
returning ``{initializer name: numpy array}`` (contiguous host arrays, views
over the caller's memory where possible). Without one, a build takes them from
the exported model (:func:`mx_trt.export.subgraph.initializer_arrays`).
"""
from __future__ import annotations

import contextlib
import functools
import logging
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Tuple

from mx_trt.errors import EngineBuildError
from mx_trt.export.subgraph import initializer_arrays

if TYPE_CHECKING:
    import tensorrt as trt

logger = logging.getLogger(__name__)

#: ``BuildOptions.extra["weights"]``: every initializer of the subgraph's ONNX model, by name.
WeightsSource = Callable[[], Mapping[str, Any]]

#: The builder flags of a weight-stripped plan.
STRIP_FLAGS = ("STRIP_PLAN", "REFIT_IDENTICAL")

#: numpy dtype name -> TensorRT ``DataType`` member.
_TRT_DTYPES = {"float32": "FLOAT", "float16": "HALF", "bfloat16": "BF16", "int8": "INT8", "int32": "INT32",
               "int64": "INT64", "bool": "BOOL", "uint8": "UINT8"}


def missing_strip_flags(mod: Any) -> List[str]:
    """The flags of :data:`STRIP_FLAGS` that ``mod.BuilderFlag`` lacks (TensorRT before 10)."""
    return [f for f in STRIP_FLAGS if not hasattr(mod.BuilderFlag, f)]


def set_strip_flags(mod: Any, config: "trt.IBuilderConfig", on: bool) -> None:
    """Set (or clear) :data:`STRIP_FLAGS` on a builder config; the module must have them."""
    for f in STRIP_FLAGS:
        flag = getattr(mod.BuilderFlag, f)
        if on:
            config.set_flag(flag)
        else:
            config.clear_flag(flag)


def weights_source(extra: Mapping[str, Any], exported: Any = None) -> Optional[WeightsSource]:
    """Where a refit takes its weights: ``extra["weights"]``, else the exported model, else ``None``.

    Raises:
        EngineBuildError: ``extra["weights"]`` is given but is not callable.
    """
    given = extra.get("weights")
    if given is not None:
        if not callable(given):
            raise EngineBuildError(f"BuildOptions.extra['weights'] must be a callable returning "
                                   f"{{initializer name: array}}, got {type(given).__name__}")
        return given
    if exported is not None:
        return functools.partial(initializer_arrays, exported)
    return None


def host_weights(mod: Any, refitter: "trt.Refitter", name: str, array: Any, subgraph: str,
                 label: str) -> Tuple[Any, "trt.Weights"]:
    """A ``Weights`` over ``array``'s own memory (no copy), checked against the engine's prototype.

    Returns:
        ``(array, weights)``: the array the pointer points into (a contiguous
        copy only if ``array`` was not contiguous) and the ``Weights``; the
        caller keeps both referenced until the refit returns.

    Raises:
        EngineBuildError: an element type TensorRT cannot take, or an element
            count or type other than the engine's for that name.
    """
    import numpy as np

    a = np.asarray(array)
    if not a.flags.c_contiguous:
        logger.debug("%s: weights %r are not contiguous: refitting from a contiguous copy", subgraph, name)
        a = np.ascontiguousarray(a)
    member = _TRT_DTYPES.get(a.dtype.name)
    dtype = getattr(mod.DataType, member, None) if member else None
    if dtype is None:
        raise EngineBuildError(f"{subgraph}: weights {name!r} are {a.dtype}, which {label} cannot refit")
    prototype = getattr(refitter, "get_weights_prototype", None)
    if prototype is not None:
        want = prototype(name)
        count = int(getattr(want, "size", -1))
        if count >= 0 and count != a.size:
            raise EngineBuildError(f"{subgraph}: the engine expects {count} values for weights {name!r}, "
                                   f"the given array has {a.size} {tuple(a.shape)}")
        want_type = getattr(want, "dtype", None)
        if count > 0 and want_type is not None and want_type != dtype:
            raise EngineBuildError(f"{subgraph}: the engine expects weights {name!r} as "
                                   f"{getattr(want_type, 'name', want_type)}, the given array is {a.dtype}")
    return a, mod.Weights(dtype, int(a.ctypes.data), int(a.size))


def refit_engine(mod: Any, engine: "trt.ICudaEngine", weights: Mapping[str, Any], log: Any, subgraph: str,
                 label: str) -> List[str]:
    """Give a deserialized stripped engine its weights from host arrays, without copying them.

    Every name of ``get_all_weights()`` found in ``weights`` is set from that
    array's memory; then no weight may be missing, and ``refit_cuda_engine``
    copies them to the device. The arrays stay referenced until it returns.
    O(weights) calls; the copy to the device is TensorRT's.

    Args:
        mod: The TensorRT module (``Refitter``, ``Weights``, ``DataType``).
        engine: The deserialized engine.
        weights: Initializer name -> host array.
        log: :func:`~.logs.logger_for` of ``mod`` (its ``capture`` quotes TensorRT in errors).
        subgraph: For messages.
        label: ``TensorRT`` or ``TensorRT-RTX``, for messages.

    Returns:
        The names that were set.

    Raises:
        EngineBuildError: TensorRT rejected a weight, some weights it needs are
            not in ``weights`` (named), or the refit failed.
    """
    held: List[Tuple[Any, Any]] = []  # every array and Weights handed to TensorRT, alive until the refit returns
    set_names: List[str] = []
    with log.capture() as cap:
        refitter: trt.Refitter = mod.Refitter(engine, log)
        for name in refitter.get_all_weights():
            array = weights.get(name)
            if array is None:
                continue  # reported below if the engine needs it
            a, w = host_weights(mod, refitter, name, array, subgraph, label)
            held.append((a, w))
            if not refitter.set_named_weights(name, w):
                raise EngineBuildError(f"{subgraph}: {label} rejected weights {name!r} ({a.dtype}, {a.size} values): "
                                       f"{'; '.join(cap.lines) or 'no message'}")
            set_names.append(name)
        missing = sorted(str(n) for n in refitter.get_missing_weights())
        if missing:
            shown = ", ".join(repr(n) if n else "(unnamed)" for n in missing[:20])
            more = f" and {len(missing) - 20} more" if len(missing) > 20 else ""
            raise EngineBuildError(f"{subgraph}: the stripped plan needs weights that are not among the "
                                   f"{len(weights)} given initializers: {shown}{more}")
        if not refitter.refit_cuda_engine():
            raise EngineBuildError(f"{subgraph}: {label} could not refit the stripped plan: "
                                   f"{'; '.join(cap.lines) or 'no message'}")
    del held
    logger.debug("%s: refitted %d weights from host memory", subgraph, len(set_names))
    return set_names


def weight_stats(mod: Any, engine: "trt.ICudaEngine") -> Dict[str, int]:
    """``stripped_weights_bytes`` / ``total_weights_bytes`` of an engine, where ``EngineStat`` gives them."""
    out: Dict[str, int] = {}
    stat = getattr(mod, "EngineStat", None)
    get = getattr(engine, "get_engine_stat", None)
    if stat is None or get is None:
        return out
    for key, member in (("stripped_weights_bytes", "STRIPPED_WEIGHTS_SIZE"), ("total_weights_bytes", "TOTAL_WEIGHTS_SIZE")):
        if hasattr(stat, member):
            with contextlib.suppress(Exception):  # a statistic is never worth a failure
                value = int(get(getattr(stat, member)))
                if value >= 0:
                    out[key] = value
    return out
