"""INT8 the way MXNet 1.9.1 did it: the executor's first N forwards calibrate, then int8 engines run.

``sym.optimize_for('TensorRT', args=..., aux=..., ctx=ctx, precision='int8',
calibration_iters=N)`` (or the ``precision``/``calibration_iters`` options of any
front-end) with no calibration table binds an executor that:

1. runs natively for its first ``N`` forwards (the outputs are MXNet's own) and
   feeds each batch to a :class:`~mx_trt.quantize.calibrate.Calibrator`
   (entropy, TensorRT's default; the ``calibration_method`` is not an MXNet option);
2. after the ``N``-th forward, builds the int8 engines from the table
   (:func:`mx_trt.pipeline.bind.bind` with the table in the settings: the plan
   cache and the reports treat them as any int8 engines) and runs them from the
   next forward on, through the same executor object;
3. keeps the table: :func:`calibration_table` returns it, ``.save(path)`` writes
   it, and a later process binds with ``calibration=path`` and skips calibration.

A log line marks each step (calibration started, finished, engines in use). If
the int8 build fails, the executor stays native after one warning: outputs are
never wrong, and the table is still there.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Any, Callable, Dict, List, Optional

from mx_trt import patches
from mx_trt.errors import MxTrtError
from mx_trt.export.calibration import CalibrationTable
from mx_trt.frontends.common import one_line
from mx_trt.pipeline.bind import bind
from mx_trt.pipeline.request import BindRequest
from mx_trt.pipeline.weights import load_weights
from mx_trt.quantize.calibrate import Calibrator, float_settings

logger = logging.getLogger(__name__)

_installed = False
_install_lock = threading.Lock()


class OnlineCalibration:
    """The state of an executor that calibrates on its first forwards (``executor._mx_trt_calibration``).

    Attributes:
        iters: Forwards to calibrate on.
        seen: Forwards calibrated so far.
        table: The table, once calibration has ended.
        engine_executor: The int8 executor that runs the forwards after calibration, or ``None``.
        error: Why the int8 engines could not be built, if they could not.
    """

    def __init__(self, request: BindRequest, iters: int) -> None:
        self.request = request
        self.iters = int(iters)
        self.seen = 0
        self.table: Optional[CalibrationTable] = None
        self.engine_executor: Any = None
        self.error: Optional[str] = None
        self.data_names: List[str] = sorted(request.shapes)
        self._calibrator: Optional[Calibrator] = None
        self._lock = threading.Lock()

    @property
    def calibrating(self) -> bool:
        return self.table is None and self.error is None

    def forward(self, exe: Any, original: Callable[..., Any], is_train: bool, kwargs: Dict[str, Any]) -> Any:
        """One forward of the executor: native while calibrating, then the int8 executor's."""
        with self._lock:
            if self.engine_executor is not None:
                return self._delegate(exe, is_train, kwargs)
            outputs = original(exe, is_train, **kwargs)
            if not self.calibrating:
                return outputs
            batch = {n: exe.arg_dict[n] for n in self.data_names if n in exe.arg_dict}
            try:
                if self._calibrator is None:
                    self._calibrator = self._make_calibrator()
                self._calibrator.add(batch)
            except MxTrtError as exc:
                self.error = f"calibration failed: {one_line(exc)}"
                logger.warning("int8 calibration on the executor's forwards failed (%s): it keeps running natively",
                               one_line(exc))
                return outputs
            self.seen += 1
            logger.debug("int8 calibration: forward %d/%d", self.seen, self.iters)
            if self.seen >= self.iters:
                self._finish(exe)
            return outputs

    def _make_calibrator(self) -> Calibrator:
        r = self.request
        logger.info("int8 calibration: the first %d forwards run natively and record ranges (entropy)", self.iters)
        return Calibrator(r.symbol, r.params, r.shapes, float_settings(r.settings), r.ctx, r.type_dict)

    def _finish(self, native_exe: Any) -> None:
        assert self._calibrator is not None
        self.table = self._calibrator.table()
        self._calibrator = None
        settings = dataclasses.replace(self.request.settings, calibration=self.table, calibration_iters=0)
        try:
            exe, info = bind(self.request.with_(settings=settings))
        except Exception as exc:  # noqa: BLE001 - the native executor keeps serving, outputs stay right
            self.error = f"int8 engines failed: {one_line(exc)}"
            logger.warning("int8 calibration done after %d forwards, but the int8 engines failed (%s: %s): the "
                           "executor keeps running natively; the table is in mx_trt.calibration_table(executor)",
                           self.seen, type(exc).__name__, one_line(exc))
            return
        self.engine_executor = exe
        native_exe._mx_trt = info
        logger.info("int8 calibration done after %d forwards (%d tensors): %d int8 engine(s) run from the next forward",
                    self.seen, len(self.table.tensors), len(info.engines))

    def _delegate(self, exe: Any, is_train: bool, kwargs: Dict[str, Any]) -> Any:
        eng = self.engine_executor
        for name in self.data_names:  # inputs written in place (exe.arg_dict['data'][:] = x) reach the engines
            if name in exe.arg_dict and name in eng.arg_dict and name not in kwargs:
                exe.arg_dict[name].copyto(eng.arg_dict[name])
        outputs = eng.forward(is_train=is_train, **kwargs)
        exe.outputs = outputs
        return outputs


def calibrating_bind(request: BindRequest) -> Any:
    """A native executor of ``request`` that calibrates on its first forwards, then runs int8 engines.

    Raises:
        MxTrtError: the request has no native bind or context.
    """
    if request.native_bind is None or request.ctx is None:
        raise MxTrtError("calibrating on forwards needs the request's ctx and native_bind")
    install()
    exe = request.native_bind(request.symbol, request.ctx, grad_req="null", type_dict=request.type_dict,
                              shared_arg_names=request.shared_arg_names, shared_exec=request.shared_exec,
                              shared_buffer=dict(request.params), **request.shapes)
    load_weights(exe, request.params)
    exe._mx_trt_calibration = OnlineCalibration(request, request.settings.calibration_iters)
    logger.info("int8 with calibration_iters=%d: the executor calibrates on its first %d forwards",
                request.settings.calibration_iters, request.settings.calibration_iters)
    return exe


def calibration_table(executor: Any) -> CalibrationTable:
    """The table an executor calibrated on its first forwards (``.save(path)`` writes it).

    Raises:
        MxTrtError: the executor does not calibrate, or has not finished (the message says how far it is).
    """
    state = getattr(executor, "_mx_trt_calibration", None)
    if state is None:
        raise MxTrtError("this executor was not bound with precision='int8' and calibration_iters")
    if state.table is None:
        raise MxTrtError(f"calibration has not finished: {state.seen} of {state.iters} forwards so far"
                         + (f" ({state.error})" if state.error else ""))
    return state.table


def _uninstalled() -> None:
    global _installed
    with _install_lock:
        _installed = False


def install() -> None:
    """Route ``Executor.forward`` through :class:`OnlineCalibration` for executors that have one (once)."""
    global _installed
    with _install_lock:
        if _installed:
            return
        import mxnet as mx

        def make_forward(original: Callable[..., Any]) -> Callable[..., Any]:
            def forward(self: Any, is_train: bool = False, **kwargs: Any) -> Any:
                state = self.__dict__.get("_mx_trt_calibration")
                if state is None:
                    return original(self, is_train, **kwargs)
                return state.forward(self, original, is_train, kwargs)
            return forward

        patches.wrap(mx.executor.Executor, "forward", make_forward)
        patches.on_uninstall(_uninstalled)
        _installed = True
