"""A virtual clock for the run-time check (``mx_trt.runtime.twin.CLOCK``): seconds that only the test's forwards
advance, each side by what the test sets it to cost. The counts of forwards a probe takes then do not depend
on how loaded the machine running the tests is."""
from __future__ import annotations

from typing import Any, Iterable


class VirtualClock:
    """Seconds, advanced by the engines' forwards (:func:`slow_engines`) and the native twin's: ``native_s`` a
    forward, ``bind_s`` a bind. ``twin_forwards`` counts the twin's forwards."""

    def __init__(self, native_s: float = 0.001, bind_s: float = 0.0) -> None:
        self.now, self.native_s, self.bind_s = 100.0, native_s, bind_s
        self.twin_forwards = 0

    def __call__(self) -> float:
        return self.now


def install(monkeypatch: Any) -> VirtualClock:
    """The checks bound from now on run on a new :class:`VirtualClock`; their twins' binds and forwards advance it."""
    import mx_trt.pipeline.bind as pipeline_bind
    from mx_trt.runtime import twin as runtime_twin

    clock = VirtualClock()
    monkeypatch.setattr(runtime_twin, "CLOCK", clock)
    make = pipeline_bind.native_twin

    def timed_twin(request: Any, exe: Any) -> Any:
        clock.now += clock.bind_s
        twin = make(request, exe)
        forward = twin.forward

        def timed_forward(*a: Any, **k: Any) -> Any:
            clock.now += clock.native_s
            clock.twin_forwards += 1
            return forward(*a, **k)

        twin.forward = timed_forward
        return twin

    monkeypatch.setattr(pipeline_bind, "native_twin", timed_twin)
    return clock


def slow_engines(engines: Iterable[Any], monkeypatch: Any, clock: VirtualClock, seconds: float = 0.01) -> None:
    """Each run of these fused nodes' engines takes ``seconds`` on ``clock``."""
    for fused in engines:
        run = fused.engine.run

        def slow(ins: Any, outs: Any, run: Any = run) -> None:
            clock.now += seconds
            run(ins, outs)

        monkeypatch.setattr(fused.engine, "run", slow)
