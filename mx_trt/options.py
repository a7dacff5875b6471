"""The explicit options of a bind: keyword arguments (``optimize_for``, ``hybridize``, ``tensorrt_bind``, ...),
each parsed into a field of :class:`mx_trt.settings.Settings`.

Nothing here reads the environment: :mod:`mx_trt.settings` does, and applies
these options over it (:meth:`~mx_trt.settings.Settings.with_options`).
"""
from __future__ import annotations

import operator
import os
from typing import Any, Callable, Dict, FrozenSet, List, Mapping, Optional, Sequence, Tuple

from mx_trt.errors import MxTrtError

Profile = Dict[str, Tuple[Tuple[int, ...], Tuple[int, ...], Tuple[int, ...]]]

#: MXNet 1.9.1's shapes are 32-bit: no dimension (batch included) may be larger.
INT32_MAX = 2**31 - 1

#: The rules deciding which subgraphs become engines (``MXNET_TENSORRT_ENGINE_RULE``, option ``engine_rule``).
ENGINE_RULES = ("measured", "cost", "always")


def parse_profiles(raw: Any, where: str) -> List[Profile]:
    """Optimization profiles (``[{input: [min, opt, max]}]``) checked and made tuples.

    Raises:
        MxTrtError: not such a list; the message starts with ``where``.
    """
    if not isinstance(raw, (list, tuple)) or not raw:
        raise MxTrtError(f"{where}: expected a non-empty list of profiles, got {raw!r}")
    out: List[Profile] = []
    for p in raw:
        if not isinstance(p, Mapping) or not p:
            raise MxTrtError(f"{where}: each profile is a dict of input name -> [min, opt, max] shapes, got {p!r}")
        prof: Profile = {}
        for name, triple in p.items():
            try:
                if isinstance(triple, (str, bytes)) or len(triple) != 3:
                    raise TypeError("not three shapes")
                mn, op, mx = (_dims(s) for s in triple)
            except (TypeError, ValueError):
                raise MxTrtError(f"{where}: input {name!r} needs [min_shape, opt_shape, max_shape], each a list of "
                                 f"integers from 1 to {INT32_MAX}, got {triple!r}") from None
            if not len(mn) == len(op) == len(mx) or not all(a <= b <= c for a, b, c in zip(mn, op, mx)):
                raise MxTrtError(f"{where}: input {name!r} needs min <= opt <= max in every dimension, with one rank, "
                                 f"got {triple!r}")
            prof[str(name)] = (mn, op, mx)
        out.append(prof)
    return out


def _dims(shape: Any) -> Tuple[int, ...]:
    """A shape of integers from 1 to :data:`INT32_MAX` (raises ``TypeError`` / ``ValueError`` otherwise)."""
    if isinstance(shape, (str, bytes)) or any(isinstance(d, bool) for d in shape):
        raise TypeError("not a list of integers")
    dims = tuple(operator.index(d) for d in shape)
    if not dims or not all(1 <= d <= INT32_MAX for d in dims):
        raise ValueError("dimensions must be from 1 to 2**31 - 1")
    return dims


def _opt_bool(field_name: str) -> Callable[[Any], Tuple[str, bool]]:
    def parse(v: Any) -> Tuple[str, bool]:
        if isinstance(v, str) and v.strip().lower() in ("1", "true", "yes", "on", "0", "false", "no", "off"):
            return field_name, v.strip().lower() in ("1", "true", "yes", "on")
        if isinstance(v, (bool, int)) and v in (0, 1):
            return field_name, bool(v)
        raise ValueError("expected True or False")
    return parse


def _opt_auto_bool(field_name: str) -> Callable[[Any], Tuple[str, Optional[bool]]]:
    """``"auto"`` or ``None`` -> ``None``; else :func:`_opt_bool`'s values."""
    as_bool = _opt_bool(field_name)

    def parse(v: Any) -> Tuple[str, Optional[bool]]:
        if v is None or (isinstance(v, str) and v.strip().lower() == "auto"):
            return field_name, None
        try:
            return as_bool(v)
        except ValueError:
            raise ValueError("expected True, False or 'auto'") from None
    return parse


def _opt_int(field_name: str, minimum: int) -> Callable[[Any], Tuple[str, Optional[int]]]:
    def parse(v: Any) -> Tuple[str, Optional[int]]:
        if isinstance(v, bool) or not isinstance(v, (int, str)) or not str(v).strip().lstrip("-").isdigit():
            raise ValueError("expected an integer")
        n = int(v)
        if n < minimum:
            raise ValueError(f"must be >= {minimum}")
        return field_name, n
    return parse


#: The precisions of a bind's engines (``MXNET_TENSORRT_PRECISION``, the ``precision`` option).
PRECISIONS = ("fp32", "fp16", "bf16", "int8")

_PRECISIONS = {"fp16": "fp16", "float16": "fp16", "fp32": "fp32", "float32": "fp32", "int8": "int8",
               "bf16": "bf16", "bfloat16": "bf16"}


def _opt_precision(v: Any) -> Tuple[str, str]:
    if not isinstance(v, str) or v.strip().lower() not in _PRECISIONS:
        raise ValueError("expected 'fp32', 'fp16', 'bf16' or 'int8'")
    return "precision", _PRECISIONS[v.strip().lower()]


def _opt_names(field_name: str) -> Callable[[Any], Tuple[str, FrozenSet[str]]]:
    def parse(v: Any) -> Tuple[str, FrozenSet[str]]:
        items = v.split(",") if isinstance(v, str) else list(v)
        if not all(isinstance(x, str) for x in items):
            raise ValueError("expected names (a list, or one comma-separated string)")
        return field_name, frozenset(x.strip() for x in items if x.strip())
    return parse


def _opt_calibration(v: Any) -> Tuple[str, Any]:
    """A path, or a calibration table object (anything with ``graph_digest`` and ``ranges``)."""
    if isinstance(v, (str, os.PathLike)) and os.fspath(v).strip():
        return "calibration", os.fspath(v)
    if hasattr(v, "graph_digest") and hasattr(v, "ranges"):
        return "calibration", v
    raise ValueError("expected the path of a calibration table or a CalibrationTable")


def _opt_ops(v: Any) -> Tuple[str, FrozenSet[str]]:
    items = v.split(",") if isinstance(v, str) else list(v)
    if not all(isinstance(x, str) for x in items):
        raise ValueError("expected operator names (a list, or one comma-separated string)")
    return "exclude_ops", frozenset(x.strip() for x in items if x.strip())


def _opt_choice(field_name: str, allowed: Sequence[str]) -> Callable[[Any], Tuple[str, str]]:
    def parse(v: Any) -> Tuple[str, str]:
        if not isinstance(v, str) or v.strip().lower() not in allowed:
            raise ValueError(f"expected one of {', '.join(allowed)}")
        return field_name, v.strip().lower()
    return parse


def _opt_str(field_name: str) -> Callable[[Any], Tuple[str, str]]:
    def parse(v: Any) -> Tuple[str, str]:
        if not isinstance(v, (str, os.PathLike)):
            raise ValueError("expected a string")
        return field_name, os.fspath(v)
    return parse


def _opt_profiles(v: Any) -> Tuple[str, List[Profile]]:
    try:
        return "profiles", parse_profiles(v, "profiles")
    except MxTrtError as exc:
        raise ValueError(str(exc)) from None


#: Option name -> parser giving (Settings field, value). The environment variable of each is in README.md.
OPTIONS: Dict[str, Callable[[Any], Tuple[str, Any]]] = {
    "fp16": _opt_bool("fp16"),
    "precision": _opt_precision,
    "max_batch_size": _opt_int("max_batch_size", 1),
    "profiles": _opt_profiles,
    "exclude_ops": _opt_ops,
    "min_subgraph_size": _opt_int("min_subgraph_size", 1),
    "engine_rule": _opt_choice("engine_rule", ENGINE_RULES),
    "backend": _opt_choice("backend", ("onnxruntime", "openvino", "tensorrt", "tensorrt_rtx")),
    "strict": _opt_bool("strict"),
    "cache_dir": _opt_str("cache_dir"),
    "calibration": _opt_calibration,
    "int8_exclude_ops": _opt_names("int8_exclude_ops"),
    "int8_exclude_nodes": _opt_names("int8_exclude_nodes"),
    "int8_keep_output_layer": _opt_bool("int8_keep_output_layer"),
    "calibration_iters": _opt_int("calibration_iters", 0),
    "runtime_check": _opt_auto_bool("runtime_check"),
}
