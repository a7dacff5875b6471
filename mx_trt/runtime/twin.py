"""An accelerated executor's forwards served by its engines or by its native twin, as an :class:`Arbiter` decides.

The twin is MXNet's own executor of the symbol the user bound (made by the
pipeline, which hands :class:`RuntimeCheck` a ``make_twin`` function). It is
bound at its first use, reading the accelerated executor's input arrays and the
caller's weights in place (no copies of either, where MXNet can share them;
inputs it cannot share are copied before each of its forwards). Its outputs are
copied into the accelerated executor's, so a caller reading ``executor.outputs``
(or arrays it took from there earlier) sees the forward whichever side ran it.

The twin holds MXNet's own memory for the model while it is bound (activations,
and oneDNN's reordered weights: about 126 MB for ResNet-50 at batch 1). It is
dropped again when a probe finds native MXNet at least :data:`RELEASE_ABOVE`
times slower than the engines, the case where the next probe is far off
(binding it again costs milliseconds, and its first forward more: MXNet sets
up its oneDNN kernels and weight layouts, 282 ms against 73 ms after for VGG-11
at batch 1; the arbiter counts both in what that probe cost, so the next one
waits longer); while the two are close it stays bound.

Anything wrong with the twin (MXNet cannot bind the symbol alone, its outputs
differ in number, shape or type, a forward fails) turns the check off for that
executor with one warning; the engines keep serving. Nothing here changes what
the engines compute.

An executor whose one engine holds the whole model, kept at the bind without
timing it against anything (a model of seconds a forward: the measured rule's
``checked`` decisions), may also be handed *alternates*: the same model built by
the other candidate backends, each run on the caller's thread like the engine.
The arbiter then compares all of them and MXNet, one probe at a time, and any of
them may serve. An alternate is made off the forward path: when its first probe
is due, a thread of its own exports and builds it (seconds for a model of seconds
a forward), while the serving side goes on serving, its forwards not compared
(:meth:`Arbiter.wait_for`: the build takes a core and the interpreter from
them), and the probe comes at the first forward after the engine is ready. No
forward of the caller's waits for a build. An alternate that fails to build or run is
left out of the comparison with one warning (the engines serve that forward);
one found :data:`RELEASE_ABOVE` times slower than the serving side is dropped
until its next probe, as the twin is. An engine (the bind's or an alternate)
that takes over and then holds through a probe is reported to ``on_keep``, which
the pipeline uses to store it as the model's decision: a later bind starts with
it, and compares the others as alternates.
"""
from __future__ import annotations

import ctypes
import logging
import threading
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from mx_trt.runtime.arbiter import ENGINES, NATIVE, Arbiter, BindTimes, side_words
from mx_trt.runtime.direct import wait_to_write, write_inputs
from mx_trt.runtime.fused_op import data_ptr

logger = logging.getLogger(__name__)

#: A probe that finds native MXNet this many times slower than the engines drops the twin until the next probe.
RELEASE_ABOVE = 1.25
#: The checks' clock (seconds, monotonic): it times every forward and paces the arbiter's probes. Tests
#: replace it with one that only the forwards they make advance.
CLOCK: Callable[[], float] = time.perf_counter

#: The inference forward of an executor by an alternate engine: ``run(executor, kwargs)`` writes the
#: executor's ``outputs`` and returns them (raises ``TypeError``/``ValueError`` for the caller's inputs).
AlternateRun = Callable[[Any, Mapping[str, Any]], List[Any]]
#: ``(name, make)``: an alternate engine, ``make(executor)`` building its run (raises on failure).
Alternate = Tuple[str, Callable[[Any], AlternateRun]]


def runtime_stats(exe: Any) -> Optional[Dict[str, Any]]:
    """What the run-time check of an accelerated executor has seen, or ``None``: it has none.

    ``serving`` (``engines``, ``native``, or an alternate engine's label such as
    ``openvino fp32``), ``served`` (forwards per side), ``probes``, ``switches``,
    ``median_ms`` (each side's latest median), ``off`` (why the check stopped, or
    ``None``), ``dropped`` (side -> why it left the comparison).
    """
    check = getattr(exe, "_mx_trt_check", None)
    return None if check is None else check.stats()


def served_shares(exe: Any) -> Optional[Dict[str, float]]:
    """Each side's share of ``exe``'s inference forwards (``engines``, ``native``, an alternate engine's
    label), of all its forwards; sides that served none are left out; ``None``: no run-time check. O(sides)."""
    stats = runtime_stats(exe)
    if stats is None:
        return None
    served = stats["served"]
    total = sum(served.values())
    return {side: n / total for side, n in served.items() if n} if total else {}


def check_warm(exe: Any) -> bool:
    """Whether ``exe``'s run-time check has paid what it pays once: every other side probed once (the twin
    bound and its first forward run, each alternate engine built), or no check.

    A benchmark gives an accelerated executor untimed forwards until this holds
    (:func:`~mx_trt.tools.cli.timing.warm_check`), as it gives native MXNet its
    first forward, in which MXNet sets up its kernels: the timed forwards then hold
    the steady state, whose probes cost at most the check's budget, and not the
    first probe's one-time costs. O(sides).
    """
    stats = runtime_stats(exe)
    if stats is None or stats["off"] is not None:
        return True
    return stats["probing"] is None and not stats["unprobed"]


class _Making:
    """An alternate engine's run being made on a thread of its own: ``make(exe)``'s result, or what it raised.

    The thread is not a daemon: a process that ends while an engine is built
    waits for the build (seconds) instead of tearing the backend down under it.
    """

    def __init__(self, make: Callable[[Any], AlternateRun], exe: Any, name: str, clock: Callable[[], float]) -> None:
        self.run: Optional[AlternateRun] = None
        self.error: Optional[BaseException] = None
        #: How long the making took on the check's clock.
        self.seconds = 0.0
        self.thread = threading.Thread(target=self._make, args=(make, exe, clock), name=f"mx_trt make {name}")
        self.thread.start()

    def _make(self, make: Callable[[Any], AlternateRun], exe: Any, clock: Callable[[], float]) -> None:
        t0 = clock()
        try:
            self.run = make(exe)
        except Exception as exc:  # noqa: BLE001 - reported on the caller's thread, at its next forward
            self.error = exc
        self.seconds = clock() - t0


class RuntimeCheck:
    """One accelerated executor's choice, per inference forward, between its engines and its native twin.

    Args:
        make_twin: ``make_twin(executor)`` binds MXNet's own executor of the original
            symbol for ``executor``'s input shapes (raises on failure).
        name: Used in log lines.
        expect: What the bind measured of the whole executor, or ``None``
            (:class:`~mx_trt.runtime.arbiter.Arbiter`'s ``expect``).
        clock: Seconds, monotonic (``None``: :data:`CLOCK`).
        alternates: Other engines of the whole model, compared too (see the module's docstring).
        on_keep: ``on_keep(side, medians_ms)``: an engine side other than the last one reported (at first
            :data:`~mx_trt.runtime.arbiter.ENGINES`) has served through a probe since it took over
            (``medians_ms``: each side's latest median). Its failure is logged, never raised.
    """

    def __init__(self, make_twin: Callable[[Any], Any], name: str = "executor",
                 expect: Optional[BindTimes] = None, clock: Optional[Callable[[], float]] = None,
                 alternates: Sequence[Alternate] = (),
                 on_keep: Optional[Callable[[str, Mapping[str, float]], None]] = None) -> None:
        self._clock = clock if clock is not None else CLOCK
        self.arbiter = Arbiter(ENGINES, clock=self._clock, name=name, expect=expect,
                               alternates=[n for n, _ in alternates])
        self._make_twin = make_twin
        self._name = name
        self.twin: Any = None
        self._copied: List[str] = []
        self._make_alt: Dict[str, Callable[[Any], AlternateRun]] = dict(alternates)
        self._alt_runs: Dict[str, AlternateRun] = {}
        self._making: Dict[str, _Making] = {}
        #: Side -> why it was left out of the comparison.
        self.dropped: Dict[str, str] = {}
        self.off: Optional[str] = None
        self._on_keep = on_keep
        self._kept = ENGINES  # the engine side last reported to on_keep (the bind's)

    def forward(self, exe: Any, engines_forward: Callable[[], List[Any]], kwargs: Mapping[str, Any]) -> List[Any]:
        """One inference forward of ``exe`` (``engines_forward`` runs its engines and waits), timed and recorded."""
        side = ENGINES
        if self.off is None and self._making:
            self._collect()  # an alternate that failed to build may leave the engines alone: the check is off
        if self.off is None:
            side = self.arbiter.next_side()
            if side not in (ENGINES, NATIVE) and side not in self._alt_runs:
                self._start_making(side, exe)
                side = self.arbiter.next_side()  # the serving side: no probe starts while one is made
        if side != ENGINES:
            t0 = self._clock()  # binding the twin: part of what this probe costs
            try:
                outs = self._native_forward(exe, kwargs) if side == NATIVE else self._alternate_forward(side, exe, kwargs)
            except (TypeError, ValueError):  # the caller's inputs: MXNet's own errors, as its forward raises them
                if self.arbiter.probing == side:
                    self.arbiter.abandon_probe()
                raise
            if outs is not None:
                self._record(side, self._clock() - t0)
                return outs
        t0 = self._clock()
        outs = engines_forward()
        self._record(ENGINES, self._clock() - t0)
        return outs

    def _record(self, side: str, seconds: float) -> None:
        arb = self.arbiter
        probes, switches = arb.probes, arb.switches
        arb.record(side, seconds)
        probed = arb.last_probed
        if arb.probes == probes or probed is None:
            return
        if arb.switches == switches and arb.current not in (NATIVE, self._kept):
            self._keep(arb.current)
        if probed == arb.current:
            return
        theirs, mine = arb.medians[probed], arb.medians[arb.current]
        if theirs is None or mine is None or theirs < RELEASE_ABOVE * mine:
            return
        if probed == NATIVE and self.twin is not None:
            self.twin, self._copied = None, []
        elif self._alt_runs.pop(probed, None) is None:
            return
        logger.debug("%s: %s dropped until its next probe (%.2f ms against %.2f ms)", self._name,
                     "the native twin" if probed == NATIVE else side_words(probed), theirs * 1e3, mine * 1e3)

    def _keep(self, side: str) -> None:
        """Report ``side``, an engine that held through a probe since it took over, to ``on_keep``."""
        self._kept = side
        if self._on_keep is None:
            return
        medians = {k: v * 1e3 for k, v in self.arbiter.medians.items() if v is not None}
        try:
            self._on_keep(side, medians)
        except Exception as exc:  # noqa: BLE001 - storing a choice never fails a forward
            logger.warning("mx_trt: %s: storing the engine the run-time check kept failed: %s: %s", self._name,
                           type(exc).__name__, exc)

    def _start_making(self, side: str, exe: Any) -> None:
        """Make the alternate ``side`` for ``exe`` on a thread of its own (unless it is under way), the arbiter
        waiting for it."""
        if side not in self._making:
            self._making[side] = _Making(self._make_alt[side], exe, f"{self._name}: {side}", self._clock)
            logger.info("mx_trt: %s: making the %s engine for the run-time check beside the forwards", self._name,
                        side)
        self.arbiter.wait_for(side)

    def _collect(self) -> None:
        """Take in the alternates made since the last forward: ready to be probed, or left out of the comparison
        (building them failed). O(alternates being made)."""
        for side, making in list(self._making.items()):
            if making.thread.is_alive():
                continue
            del self._making[side]
            if side not in self.arbiter.sides:  # dropped meanwhile
                continue
            if making.run is None:  # it raised (or its thread ended without an engine): never left waited for
                exc = making.error
                self._drop(side, "building it failed: " + (f"{type(exc).__name__}: {exc}" if exc is not None
                                                           else "its thread ended without an engine"))
            else:
                self._alt_runs[side] = making.run
                self.arbiter.ready(side, making.seconds)
                logger.info("mx_trt: %s: the %s engine made for the run-time check in %.2f s", self._name, side,
                            making.seconds)

    def wait_made(self, timeout: Optional[float] = None) -> bool:
        """Wait until every alternate being made is done (``timeout`` seconds at most, for each), and take them
        in; whether none is left under way."""
        for making in list(self._making.values()):
            making.thread.join(timeout)
        self._collect()
        return not self._making

    def _alternate_forward(self, side: str, exe: Any, kwargs: Mapping[str, Any]) -> Optional[List[Any]]:
        """``exe``'s forward by the alternate ``side`` (made: :meth:`_start_making`), or ``None``: its run
        failed, and it is left out of the comparison (the engines serve this forward)."""
        run = self._alt_runs.get(side)
        if run is None:  # not made, or dropped meanwhile: the engines serve
            return None
        try:
            return run(exe, kwargs)
        except (TypeError, ValueError):
            raise
        except Exception as exc:  # noqa: BLE001 - a failed run leaves the comparison, never fails the forward
            self._drop(side, f"its forward failed: {type(exc).__name__}: {exc}")
            return None

    def reshaped(self, args: Any, kwargs: Mapping[str, Any]) -> "RuntimeCheck":
        """The check of an executor reshaped from this one with ``args``/``kwargs`` (``Executor.reshape``'s).

        Its twin is this one's twin reshaped alike (MXNet shares their memory), or,
        when this one has none yet or that fails, a twin bound for it. Alternates are
        not passed on: they were built for this executor's shapes.
        """
        parent, make = self, self._make_twin

        def make_twin(exe: Any) -> Any:
            if parent.twin is not None:
                try:
                    return parent.twin.reshape(*args, **kwargs)
                except Exception as exc:  # noqa: BLE001 - MXNet refused: bind one instead
                    logger.debug("%s: reshaping the native twin failed (%s): binding one", self._name, exc)
            return make(exe)

        child = RuntimeCheck(make_twin, self._name, clock=self._clock)
        child.off = self.off
        return child

    def stats(self) -> Dict[str, Any]:
        """The arbiter's :meth:`~mx_trt.runtime.arbiter.Arbiter.stats`, with ``off`` (why the check stopped, or
        None) and ``dropped`` (side -> why it was left out of the comparison)."""
        return {**self.arbiter.stats(), "off": self.off, "dropped": dict(self.dropped)}

    def _drop(self, side: str, why: str) -> None:
        """Leave ``side`` out of the comparison; with the engines alone left, the check is off."""
        self.dropped[side] = why
        if side == NATIVE:
            self.twin, self._copied = None, []
        self._alt_runs.pop(side, None)
        self.arbiter.drop(side)
        if len(self.arbiter.sides) == 1:
            self.off = why
            self.arbiter.current = ENGINES
            logger.warning("mx_trt: %s: the engines serve every forward from now on (no comparison with native "
                           "MXNet): %s", self._name, why)
        else:
            logger.warning("mx_trt: %s: %s left out of the run-time check (%s serves): %s", self._name,
                           side_words(side), side_words(self.arbiter.current), why)

    def _twin_for(self, exe: Any) -> Any:
        if self.twin is not None:
            return self.twin
        t0 = self._clock()
        try:
            twin = self._make_twin(exe)
        except Exception as exc:  # noqa: BLE001 - MXNet cannot bind the symbol alone: no comparison, engines serve
            self._drop(NATIVE, f"binding the symbol natively failed: {type(exc).__name__}: {exc}")
            return None
        mine, theirs = list(exe.outputs), list(twin.outputs)
        if len(mine) != len(theirs) or any(tuple(a.shape) != tuple(b.shape) or np.dtype(a.dtype) != np.dtype(b.dtype)
                                           for a, b in zip(mine, theirs)):
            self._drop(NATIVE, f"the native executor's outputs {[(tuple(b.shape), np.dtype(b.dtype).name) for b in theirs]} "
                           f"differ from the accelerated one's {[(tuple(a.shape), np.dtype(a.dtype).name) for a in mine]}")
            return None
        names = set(twin.arg_dict)
        self._copied = [n for n, arr in exe.arg_dict.items() if n in names and data_ptr(arr) != data_ptr(twin.arg_dict[n])]
        self.twin = twin
        logger.debug("%s: native twin bound in %.1f ms (%d input(s) copied per forward: %s)", self._name,
                     (self._clock() - t0) * 1e3, len(self._copied), self._copied)
        return twin

    def _native_forward(self, exe: Any, kwargs: Mapping[str, Any]) -> Optional[List[Any]]:
        """``exe``'s forward by its native twin (bound first if it is not), or ``None``: MXNet failed, and it is
        left out of the comparison."""
        twin = self._twin_for(exe)
        if twin is None:
            return None
        try:
            return self._twin_forward(exe, twin, kwargs)
        except (TypeError, ValueError):
            raise
        except Exception as exc:  # noqa: BLE001 - any failure of the twin leaves the comparison, never fails the forward
            self._drop(NATIVE, f"native MXNet failed: {type(exc).__name__}: {exc}")
            return None

    def _twin_forward(self, exe: Any, twin: Any, kwargs: Mapping[str, Any]) -> List[Any]:
        write_inputs(exe, kwargs)  # as MXNet's Executor.forward checks and writes them
        args = exe.arg_dict
        for name in self._copied:
            args[name].copyto(twin.arg_dict[name])
        twin.forward(is_train=False)
        outs = exe.outputs
        queued = []
        for src, dst in zip(twin.outputs, outs):
            if src.context.device_type == "cpu" and dst.context.device_type == "cpu":
                _host_copy(src, dst)
            else:
                src.copyto(dst)
                queued.append(dst)
        for o in queued:
            o.wait_to_read()
        return outs


def _host_copy(src: Any, dst: Any) -> None:
    """``src`` into ``dst`` (CPU NDArrays of one shape and type) by ``memmove``, once MXNet is done with both.

    A ``copyto`` is one more operation through MXNet's engine: about 45 us a
    forward at two OpenMP threads, 2% of a 2.5 ms model.
    """
    src.wait_to_read()
    wait_to_write(dst)  # reads of the last forward's outputs still queued
    ctypes.memmove(data_ptr(dst), data_ptr(src), int(src.size) * np.dtype(src.dtype).itemsize)
