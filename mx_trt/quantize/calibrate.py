"""INT8 calibration: native MXNet over the user's batches, a range per tensor the int8 export quantizes.

Stages, in order::

    batches       the user's data as dicts name -> array (any iterable, mx.io.DataIter)
    analyze       the bind's own analysis at the first batch's shapes (pipeline.plan):
                  the same partition decides which tensors are quantized
    tensors       the activation inputs of Convolution, FullyConnected, dot, batch_dot,
                  residual adds and pooling inside the subgraphs (export.calibration)
    forward       one native executor over those tensors (MXNet's own operators, with
                  MXNet's own subgraph fusion off so that every tensor is computed)
    collect       minmax, percentile or entropy per tensor (quantize.collectors)
    table         a CalibrationTable keyed by the graph's structure, saved if asked
"""
from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from mx_trt.builder.progress import TerminalLine, bar
from mx_trt.errors import CalibrationError, MxTrtError
from mx_trt.export.calibration import METHODS, CalibrationTable, activation_inputs, check_writable_table, graph_digest
from mx_trt.frontends import hook
from mx_trt.frontends.common import call_backend
from mx_trt.graph.importer import entries_symbol
from mx_trt.passes.ir import Entry
from mx_trt.passes.naming import entry_name
from mx_trt.pipeline.plan import analyze
from mx_trt.pipeline.request import BindRequest
from mx_trt.quantize.collectors import collector_range, make_collector
from mx_trt.settings import Settings, masked_subgraph_backend

logger = logging.getLogger(__name__)

#: Options of a bind that calibration ignores: it always runs in float.
_PRECISION_OPTIONS = ("precision", "calibration", "fp16")


def calibrate(sym: Any, params: Any, data: Any, num_batches: Optional[int] = None, method: str = "entropy",
              percentile: float = 99.99, ctx: Any = None, out: Any = None, progress: bool = True,
              data_names: Optional[Sequence[str]] = None, type_dict: Optional[Mapping[str, Any]] = None,
              **options: Any) -> CalibrationTable:
    """Calibrate ``sym`` for INT8 engines on the user's data.

    Runs native MXNet over ``data`` and records the range of every tensor the
    int8 export will quantize (the inputs of Convolution, FullyConnected, dot,
    batch_dot and residual adds inside the subgraphs the bind makes with the
    same options).

    Args:
        sym: The MXNet symbol (as bound for inference).
        params: The weights and aux states: one dict, or ``(arg_params, aux_params)``.
        data: The batches: an ``mx.io.DataIter``, or any iterable of dicts name ->
            array (NDArray or numpy), or of single arrays for a graph with one data input.
        num_batches: Stop after this many batches (``None``: all of ``data``).
        method: ``entropy`` (KL divergence, TensorRT's default), ``percentile`` or ``minmax``.
        percentile: The percentile of ``|x|`` kept by ``percentile`` (e.g. 99.99).
        ctx: Where MXNet runs (default ``mx.cpu()``).
        out: Save the table as JSON at this path.
        progress: Show a progress bar on a terminal (INFO log lines otherwise).
        data_names: The data inputs, when single arrays are given and the symbol has several unknowns.
        type_dict: Input dtypes, as for ``simple_bind``.
        **options: Bind options that shape the partition (``exclude_ops``,
            ``min_subgraph_size``, ``engine_rule``, ``backend``, ...; see
            :data:`mx_trt.settings.OPTIONS`): give the ones the int8 bind will use.

    Returns:
        The :class:`~mx_trt.export.calibration.CalibrationTable` (saved to ``out`` if given).

    Raises:
        CalibrationError: a bad method or percentile, no batch, a batch that does not
            fit the symbol, a tensor holding NaN/infinity, or ``out`` in a folder that
            does not exist (checked first) or that cannot be written.
        MxTrtError: a bad option, or the graph cannot be analysed.

    Complexity: one native forward per batch, plus O(tensor size) per tensor for
    the collectors (and O(2048 x 240) per tensor at the end for entropy).
    """
    import mxnet as mx

    if method not in METHODS:
        raise CalibrationError(f"method={method!r} is not one of {', '.join(METHODS)}")
    if not (isinstance(percentile, (int, float)) and 0 < percentile <= 100):
        raise CalibrationError(f"percentile={percentile!r} must be in (0, 100]")
    if num_batches is not None and (isinstance(num_batches, bool) or not isinstance(num_batches, int) or num_batches < 1):
        raise CalibrationError(f"num_batches={num_batches!r} must be a positive integer or None")
    if out is not None:
        check_writable_table(out)  # before the calibration runs, not after
    ctx = ctx if ctx is not None else mx.cpu()
    weights = _weights(params)
    settings = _settings(options)
    batches = _batches(data, sym, weights, data_names)
    first = next(batches, None)
    if first is None:
        raise CalibrationError("calibrate: the data gave no batch")
    shapes = {k: tuple(v.shape) for k, v in first.items()}
    cal = Calibrator(sym, weights, shapes, settings, ctx, type_dict, method, percentile)
    length = _length(data)
    bar = _Progress(min(n for n in (num_batches, length) if n is not None) if num_batches or length else None, progress)
    batch: Optional[Dict[str, Any]] = first
    while batch is not None:
        cal.add(batch)
        bar.step(cal.batches)
        if num_batches is not None and cal.batches >= num_batches:
            break
        batch = next(batches, None)
    bar.done()
    table = cal.table()
    if out is not None:
        table.save(out)
    return table


class Calibrator:
    """Ranges of the tensors an int8 export quantizes, collected batch by batch (native MXNet).

    Used by :func:`calibrate` over the user's data, and by the executors that
    calibrate on their first forwards (:mod:`mx_trt.quantize.online`).

    Args:
        sym: The symbol.
        weights: Weights and aux states by name (NDArrays).
        shapes: Data input shapes (those of the batches).
        settings: The bind's settings (their precision is ignored: calibration runs in float).
        ctx: Where MXNet runs.
        type_dict: Input dtypes, as for ``simple_bind``.
        method / percentile: As for :func:`calibrate`.

    Raises:
        MxTrtError: the graph cannot be analysed.
    """

    def __init__(self, sym: Any, weights: Mapping[str, Any], shapes: Mapping[str, Tuple[int, ...]], settings: Settings,
                 ctx: Any, type_dict: Optional[Mapping[str, Any]] = None, method: str = "entropy",
                 percentile: float = 99.99) -> None:
        self.method, self.percentile = method, float(percentile)
        self.shapes = dict(shapes)
        try:
            backend = call_backend(ctx, settings)
        except MxTrtError as exc:  # the partition is the one TensorRT would make
            logger.info("calibrate: no engine backend for %s (%s); partitioning as for TensorRT", ctx, exc)
            backend = None
        plan = analyze(BindRequest(symbol=sym, shapes=self.shapes, params=weights, settings=settings, backend=backend,
                                   ctx=ctx, type_dict=type_dict))
        self.graph = graph = plan.graph
        inside = [n for s in plan.partition.subgraphs for n in s.nodes]
        self.entries = sorted({e for acts in activation_inputs(graph, inside, plan.weights, True).values() for e in acts})
        if not self.entries:
            logger.warning("calibrate: no operator of the engines' subgraphs can be quantized (%d subgraph(s)): the "
                           "table is empty and int8 engines would run in float", len(plan.partition.subgraphs))
        self.variables = [e for e in self.entries if graph.nodes[e.node].is_variable]
        computed = [e for e in self.entries if not graph.nodes[e.node].is_variable]
        self.collectors = {e: make_collector(method) for e in self.entries}
        self.runner = _Runner(sym, graph, computed, weights, ctx, type_dict) if computed else None
        self.batches = self.samples = 0

    def add(self, batch: Mapping[str, Any]) -> None:
        """Collect one batch (dict name -> array, the data inputs of the first one).

        Raises:
            CalibrationError: the batch has other inputs, does not fit, or holds NaN/infinity.
        """
        if set(batch) != set(self.shapes):
            raise CalibrationError(f"calibrate: batch {self.batches + 1} has inputs {sorted(batch)}, the first had "
                                   f"{sorted(self.shapes)}")
        values = self.runner.forward(batch) if self.runner is not None else {}
        for e in self.variables:
            values[e] = _numpy(batch[self.graph.nodes[e.node].name])
        for e, v in values.items():
            self.collectors[e].update(v)
        self.batches += 1
        self.samples += int(next(iter(batch.values())).shape[0]) if batch else 0

    def table(self) -> CalibrationTable:
        """The table of what was collected."""
        graph = self.graph
        table = CalibrationTable(
            graph_digest=graph_digest(graph), method=self.method,
            tensors={(e.node, e.index): collector_range(self.collectors[e], self.method, self.percentile)
                     for e in self.entries},
            names={(e.node, e.index): entry_name(graph, e) for e in self.entries}, num_batches=self.batches,
            num_samples=self.samples, percentile=self.percentile if self.method == "percentile" else None)
        logger.info("calibrate: %d tensor(s) over %d batch(es), %d sample(s) (%s)", len(self.entries), self.batches,
                    self.samples, self.method)
        _warn_zero_ranges(table)
        return table


def _warn_zero_ranges(table: CalibrationTable) -> None:
    """One warning naming the tensors that held only zeros: their int8 values would all be zero."""
    zero = [table.names[k] for k, r in sorted(table.tensors.items()) if r.amax == 0]
    if zero:
        logger.warning("calibrate: %s held only zeros on the calibration data: %s int8 range is zero, so int8 engines "
                       "give %s zeros; calibrate on representative data",
                       ", ".join(zero[:5]) + (f" and {len(zero) - 5} more" if len(zero) > 5 else ""),
                       "its" if len(zero) == 1 else "their", "it" if len(zero) == 1 else "them")


def _numpy(a: Any) -> np.ndarray:
    return a.asnumpy() if hasattr(a, "asnumpy") else np.asarray(a)


def float_settings(settings: Settings) -> Settings:
    """``settings`` in float: calibration runs MXNet's float graph."""
    return dataclasses.replace(settings, int8=False, fp16=False, bf16=False, calibration=None, calibration_iters=0)


def _settings(options: Mapping[str, Any]) -> Settings:
    """The bind's settings for the partition, in float whatever the environment asks."""
    settings = float_settings(Settings.from_env())
    kept = {k: v for k, v in options.items() if k not in _PRECISION_OPTIONS}
    return settings.with_options(kept, "calibrate options") if kept else settings


def _weights(params: Any) -> Dict[str, Any]:
    import mxnet as mx

    if isinstance(params, tuple) and len(params) == 2 and all(isinstance(p, Mapping) for p in params):
        merged = dict(params[0])
        merged.update(params[1])
    elif isinstance(params, Mapping):
        merged = dict(params)
    else:
        raise CalibrationError("params must be a dict of weights and aux states, or (arg_params, aux_params)")
    return {k: v if isinstance(v, mx.nd.NDArray) else mx.nd.array(np.asarray(v), dtype=np.asarray(v).dtype)
            for k, v in merged.items()}


def _data_inputs(sym: Any, weights: Mapping[str, Any]) -> List[str]:
    """The symbol's inputs without a value (labels last): what a single array could feed."""
    names = [n for n in sym.list_arguments() if n not in weights]
    return sorted(names, key=lambda n: n.endswith("label"))


def _batches(data: Any, sym: Any, weights: Mapping[str, Any], data_names: Optional[Sequence[str]]) -> Iterator[Dict[str, Any]]:
    """The user's data as dicts name -> array, batch by batch."""
    import mxnet as mx

    if isinstance(data, mx.io.DataIter):
        data.reset()
        names = [d.name if hasattr(d, "name") else d[0] for d in data.provide_data]
        for b in data:
            keep = b.data[0].shape[0] - int(b.pad or 0)
            yield {n: (a[:keep] if keep < a.shape[0] else a) for n, a in zip(names, b.data)}
        return
    if isinstance(data, (dict, mx.nd.NDArray, np.ndarray)):
        raise CalibrationError("data must be an iterable of batches (a list of dicts or arrays, or a DataIter), "
                               "not one batch; wrap it in a list")
    unknown = list(data_names) if data_names else [n for n in _data_inputs(sym, weights) if not n.endswith("label")]
    for b in data:
        if isinstance(b, Mapping):
            yield dict(b)
        elif isinstance(b, (mx.nd.NDArray, np.ndarray)):
            if len(unknown) != 1:
                raise CalibrationError(f"a batch is a single array but the symbol has data inputs {unknown}: give "
                                       "dicts name -> array, or data_names")
            yield {unknown[0]: b}
        elif isinstance(b, (list, tuple)) and data_names and len(b) == len(data_names):
            yield dict(zip(data_names, b))
        else:
            raise CalibrationError(f"a batch of type {type(b).__name__} is neither a dict nor an array")


def _length(data: Any) -> Optional[int]:
    try:
        return len(data)
    except TypeError:
        return None


class _Runner:
    """One native executor computing the calibrated tensors; rebound when a batch's shapes change."""

    def __init__(self, sym: Any, graph: Any, entries: Sequence[Entry], weights: Mapping[str, Any], ctx: Any,
                 type_dict: Optional[Mapping[str, Any]]) -> None:
        self.group = entries_symbol(sym, graph, list(entries))
        self.entries = list(entries)
        self.weights, self.ctx, self.type_dict = weights, ctx, type_dict
        self.exe: Any = None
        self.shapes: Dict[str, Tuple[int, ...]] = {}

    def _bind(self, shapes: Dict[str, Tuple[int, ...]]) -> None:
        args = set(self.group.list_arguments())
        types = {k: v for k, v in (self.type_dict or {}).items() if k in args}
        # MXNet's own oneDNN fusion (conv + bn) would hide the tensors asked for.
        with hook.disabled(), masked_subgraph_backend(every=True):
            exe = self.group.simple_bind(self.ctx, grad_req="null", type_dict=types or None,
                                         **{k: v for k, v in shapes.items() if k in args})
        for k, v in exe.arg_dict.items():
            if k in self.weights:
                self.weights[k].copyto(v)
        for k, v in exe.aux_dict.items():
            if k in self.weights:
                self.weights[k].copyto(v)
        self.exe, self.shapes = exe, shapes

    def forward(self, batch: Mapping[str, Any]) -> Dict[Entry, np.ndarray]:
        shapes = {k: tuple(v.shape) for k, v in batch.items()}
        if self.exe is None or shapes != self.shapes:
            try:
                self._bind(shapes)
            except Exception as exc:  # MXNet's message says which shape does not fit
                raise CalibrationError(f"calibrate: a batch with shapes {shapes} does not fit the symbol: "
                                       f"{' '.join(str(exc).split())[:400]}") from exc
        for k, v in batch.items():
            if k in self.exe.arg_dict:
                self.exe.arg_dict[k][:] = v
        self.exe.forward(is_train=False)
        return {e: o.asnumpy() for e, o in zip(self.entries, self.exe.outputs)}


class _Progress:
    """``calibrating [#####.....] 12/32 batches 3.1s`` on a terminal; INFO lines otherwise."""

    def __init__(self, total: Optional[int], enabled: bool, stream: Any = None) -> None:
        self.total, self.enabled = total, enabled
        self.line = TerminalLine(stream, enabled, width=80)
        self.t0 = time.perf_counter()

    def step(self, k: int) -> None:
        if not self.enabled:
            return
        elapsed = time.perf_counter() - self.t0
        of = f"/{self.total}" if self.total else ""
        if not self.line.tty:
            logger.info("calibrate: batch %d%s (%.1f s)", k, of, elapsed)
            return
        filled = bar(k, self.total) if self.total else bar(k % 21, 20)
        self.line.draw(f"[mx_trt] calibrating [{filled}] {k}{of} batches {elapsed:6.1f}s")

    def done(self) -> None:
        self.line.clear()
