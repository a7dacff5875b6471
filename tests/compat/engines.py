"""Checks that an executor bound through the TensorRT API really built and ran engines.

MXNet's own tests compare the TensorRT path's outputs with native MXNet's. On a
machine where the pass quietly fell back to a native bind, those comparisons
pass without any engine: every ported test therefore also calls
:func:`assert_engines_ran` (or :func:`assert_engines_built` where the original
never runs a forward) on the executor of its TensorRT path.
"""
from __future__ import annotations

from typing import Any, List

import mx_trt
from mx_trt.runtime.fused_op import FusedEngine, fused_engine_keys, lookup_engine


def engines_of(executor: Any) -> List[FusedEngine]:
    """The fused engines an executor runs: those of its bind record, else those named by the fused nodes
    of the symbol it was bound from (a symbol that already held engines, as ``optimize_for`` returns)."""
    info = mx_trt.bind_info(executor)
    if info is not None and info.engines:
        return list(info.engines)
    symbol = getattr(executor, "_symbol", None)
    if symbol is None:
        return []
    return [lookup_engine(k) for k in fused_engine_keys(symbol)]


def assert_engines_built(executor: Any) -> List[FusedEngine]:
    """Fail unless the executor holds at least one engine; returns them."""
    engines = engines_of(executor)
    assert engines, ("the TensorRT path built no engine: the executor was bound natively "
                     f"(bind record: {mx_trt.bind_info(executor)!r})")
    return engines


def assert_engines_ran(executor: Any) -> List[FusedEngine]:
    """Fail unless the executor holds engines and every one of them has run a forward; returns them.

    Waits for MXNet's queued work first: ``forward`` returns before the operators have run.
    """
    import mxnet as mx

    engines = assert_engines_built(executor)
    mx.nd.waitall()
    idle = [e.name for e in engines if e.run_count == 0]
    assert not idle, f"engines built but never run: {idle}"
    return engines
