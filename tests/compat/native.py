"""Precise expected failures for what native MXNet itself cannot run on a CPU.

A test that native MXNet cannot run here is marked ``xfail(strict=True)``
with :data:`raises` set to :class:`NativeMXNetFailure`; :func:`native_failure`
turns only the one known MXNet error (matched by its message) into that type.
Any other error still fails the test, and a pass fails it too (strict).
"""
from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Iterator

import pytest


class NativeMXNetFailure(Exception):
    """Native MXNet failed with the error the test's mark names."""


@contextlib.contextmanager
def native_failure(message: str) -> Iterator[None]:
    """Re-raise an exception whose text holds ``message`` as :class:`NativeMXNetFailure`."""
    try:
        yield
    except Exception as exc:  # MXNet raises MXNetError, or RuntimeError around it from simple_bind
        if message in str(exc):
            raise NativeMXNetFailure(f"{type(exc).__name__}: {message}") from exc
        raise


def fails_natively(message: str, reason: str) -> Callable[[Callable[..., Any]], Any]:
    """Mark a test expected to fail (strictly) because native MXNet raises an error holding ``message``."""
    def decorate(fn: Callable[..., Any]) -> Any:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with native_failure(message):
                return fn(*args, **kwargs)
        return pytest.mark.xfail(strict=True, raises=NativeMXNetFailure, reason=reason)(wrapper)
    return decorate
