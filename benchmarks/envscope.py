"""Environment variables set for a block of a benchmark script, restored after.

A benchmark owns its process and runs one bind at a time, so it may set the
variables a user would set. The plugin itself never writes the environment
(only ``mx_trt/settings.py`` reads it).
"""
from __future__ import annotations

import contextlib
import os
from typing import Iterator, Mapping, Optional


@contextlib.contextmanager
def env_override(values: Mapping[str, Optional[str]]) -> Iterator[None]:
    """Set ``values`` (``None`` unsets one) for the block; the old values come back after. One thread only."""
    old = {k: os.environ.get(k) for k in values}

    def apply(vals: Mapping[str, Optional[str]]) -> None:
        for k, v in vals.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    apply(values)
    try:
        yield
    finally:
        apply(old)
