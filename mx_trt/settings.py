"""Settings read from the environment at every bind.

Every variable is documented in README.md ("Environment variables").
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import FrozenSet, Optional

from .errors import MxTrtError

logger = logging.getLogger(__name__)

_fp16_override: Optional[bool] = None


def set_use_fp16(status: bool) -> None:
    """Ask for fp16 engines at the next binds (overrides ``MXNET_TENSORRT_USE_FP16``)."""
    global _fp16_override
    _fp16_override = bool(status)


def get_use_fp16() -> bool:
    """Whether the next bind builds fp16 engines."""
    if _fp16_override is not None:
        return _fp16_override
    return _env_bool("MXNET_TENSORRT_USE_FP16", False)


def _env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    v = raw.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise MxTrtError(f"{name}={raw!r}: expected 1 or 0")


def _env_int(name: str, default: int, minimum: int = 0) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        v = int(raw)
    except ValueError:
        raise MxTrtError(f"{name}={raw!r}: expected an integer") from None
    if v < minimum:
        raise MxTrtError(f"{name}={raw!r}: must be >= {minimum}")
    return v


@dataclass(frozen=True)
class Settings:
    """The knobs of one bind.

    Attributes:
        exclude_ops: Operator names kept native (``MXNET_TENSORRT_EXCLUDE_OPS``).
        min_subgraph_size: Smallest subgraph turned into an engine
            (``MXNET_TENSORRT_MIN_SUBGRAPH_SIZE``).
        backend: Forced backend name or ``None`` for the context's default
            (``MXNET_TENSORRT_BACKEND``).
        fp16: Build fp16 engines (``MXNET_TENSORRT_USE_FP16`` / :func:`set_use_fp16`).
    """

    exclude_ops: FrozenSet[str] = field(default_factory=frozenset)
    min_subgraph_size: int = 2
    backend: Optional[str] = None
    fp16: bool = False

    @classmethod
    def from_env(cls) -> "Settings":
        from passes.partition import DEFAULT_MIN_SUBGRAPH_SIZE

        excl = os.environ.get("MXNET_TENSORRT_EXCLUDE_OPS", "")
        backend = os.environ.get("MXNET_TENSORRT_BACKEND", "").strip() or None
        return cls(
            exclude_ops=frozenset(x.strip() for x in excl.split(",") if x.strip()),
            min_subgraph_size=_env_int("MXNET_TENSORRT_MIN_SUBGRAPH_SIZE", DEFAULT_MIN_SUBGRAPH_SIZE, 1),
            backend=backend,
            fp16=get_use_fp16(),
        )
