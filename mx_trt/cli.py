"""``mxtrt``: inspect, check and time the TensorRT pass on a saved MXNet checkpoint.

Every command takes a checkpoint prefix (``PREFIX-symbol.json`` and
``PREFIX-EPOCH.params``) and one ``--shape NAME=d0,d1,...`` per data input::

    mxtrt partition PREFIX --shape data=1,3,224,224 [--json] [--svg FILE] [--html FILE]
    mxtrt verify    PREFIX --shape data=1,3,224,224 [--input x.npz] [--rtol R --atol A]
    mxtrt bench     PREFIX --shape data=1,3,224,224 --batch 1,8,32 [--runs 20] [--json]

The pass's environment variables (``MXNET_TENSORRT_EXCLUDE_OPS``,
``MXNET_TENSORRT_MIN_SUBGRAPH_SIZE``, ``MXNET_TENSORRT_BACKEND``...) apply as
they do at bind time. Exit status: 0 success, 1 ``verify`` found a mismatch
(or the pass failed), 2 bad input (a missing file, a malformed option, shapes
that do not fit the model, an unknown input name), reported in one line.
"""
from __future__ import annotations

import argparse
import dataclasses
import glob
import importlib
import importlib.util
import json
import logging
import math
import os
import re
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, TextIO, Tuple

import numpy as np

from .errors import MxTrtError, ShapeError
from .settings import env_override

#: Named explicitly: run as ``python -m mx_trt.cli`` the module is ``__main__``.
logger = logging.getLogger("mx_trt.cli")

Shape = Tuple[int, ...]

#: (rtol, atol) per engine precision for ``verify``: an output passes when
#: ``max|accelerated - native| <= atol + rtol * max|native|`` (errors measured
#: against the output's own scale, as rounding over many layers grows with it).
TOLERANCES: Dict[str, Tuple[float, float]] = {"float32": (1e-3, 1e-4), "float16": (1e-2, 1e-2)}

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class UsageError(MxTrtError):
    """Bad command-line input: reported in one line, exit status 2."""


# ---------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------


def parse_shape(text: str) -> Tuple[str, Shape]:
    """``"data=1,3,224,224"`` -> ``("data", (1, 3, 224, 224))``.

    Raises:
        UsageError: not ``NAME=d0,d1,...`` with positive integers.
    """
    name, sep, dims = text.partition("=")
    name = name.strip()
    parts = [p.strip() for p in dims.replace("x", ",").split(",")] if sep else []
    if not name or not parts or not all(re.fullmatch(r"[0-9]+", p) for p in parts) or any(int(p) <= 0 for p in parts):
        raise UsageError(f"--shape {text!r}: expected NAME=d0,d1,... with positive integers, e.g. data=1,3,224,224")
    return name, tuple(int(p) for p in parts)


def parse_batches(text: str) -> List[int]:
    """``"1,8,32"`` -> ``[1, 8, 32]``.

    Raises:
        UsageError: not a comma-separated list of positive integers.
    """
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts or not all(re.fullmatch(r"[0-9]+", p) and int(p) > 0 for p in parts):
        raise UsageError(f"--batch {text!r}: expected positive integers separated by commas, e.g. 1,8,32")
    return [int(p) for p in parts]


def parse_ctx(text: str) -> Any:
    """``cpu``, ``gpu`` or ``gpu:N`` -> an MXNet context.

    Raises:
        UsageError: anything else.
    """
    import mxnet as mx

    m = re.fullmatch(r"(cpu|gpu)(?::([0-9]+))?", text.strip())
    if not m:
        raise UsageError(f"--ctx {text!r}: expected cpu, gpu or gpu:N")
    dev = int(m.group(2) or 0)
    return mx.cpu(dev) if m.group(1) == "cpu" else mx.gpu(dev)


def mxnet_message(exc: BaseException) -> str:
    """The informative line of an MXNet error, without the C++ trace, timestamps and file positions."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    picked = ""
    for ln in reversed(lines):
        if not ln.startswith(("File ", "Traceback", "Stack trace", "[bt]")):
            picked = ln
            break
    picked = re.sub(r"^(MXNetError: )+", "", picked or (lines[0] if lines else type(exc).__name__))
    picked = re.sub(r"\[\d\d:\d\d:\d\d\] \S+:\d+: ", "", picked)
    return picked


# ---------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------


@dataclass
class Checkpoint:
    """A loaded checkpoint.

    Attributes:
        prefix: The prefix it was loaded from.
        epoch: The epoch of the params file.
        symbol: The symbol.
        arg_params / aux_params: The weights (NDArrays).
    """

    prefix: str
    epoch: int
    symbol: Any
    arg_params: Dict[str, Any]
    aux_params: Dict[str, Any]

    @property
    def params(self) -> Dict[str, Any]:
        return {**self.arg_params, **self.aux_params}

    def data_inputs(self) -> List[str]:
        """Arguments and aux states without a value in the checkpoint, in symbol order."""
        args = [a for a in self.symbol.list_arguments() if a not in self.arg_params]
        aux = [a for a in self.symbol.list_auxiliary_states() if a not in self.aux_params]
        return args + aux


def _latest_epoch(prefix: str) -> int:
    found = []
    for path in glob.glob(glob.escape(prefix) + "-*.params"):
        m = re.fullmatch(r"-([0-9]+)\.params", path[len(prefix):])
        if m:
            found.append(int(m.group(1)))
    if not found:
        raise UsageError(f"no params file {prefix}-NNNN.params (save the checkpoint with mx.model.save_checkpoint)")
    return max(found)


def import_user_module(spec: str) -> None:
    """Import a module or a ``.py`` file, typically to register custom operators.

    Raises:
        UsageError: it cannot be imported.
    """
    try:
        if spec.endswith(".py") or os.sep in spec:
            if not os.path.isfile(spec):
                raise UsageError(f"--import {spec}: no such file")
            name = "mxtrt_user_" + re.sub(r"\W", "_", os.path.splitext(os.path.basename(spec))[0])
            mspec = importlib.util.spec_from_file_location(name, spec)
            if mspec is None or mspec.loader is None:
                raise UsageError(f"--import {spec}: not a Python file")
            module = importlib.util.module_from_spec(mspec)
            sys.modules[name] = module
            mspec.loader.exec_module(module)
        else:
            importlib.import_module(spec)
    except UsageError:
        raise
    except Exception as exc:  # any error of the user's module
        raise UsageError(f"--import {spec}: {type(exc).__name__}: {exc}") from None
    logger.debug("imported %s", spec)


def load_checkpoint(prefix: str, epoch: Optional[int] = None) -> Checkpoint:
    """Load ``PREFIX-symbol.json`` and ``PREFIX-EPOCH.params`` (the latest epoch by default).

    Raises:
        UsageError: a file is missing or unreadable, or the symbol uses an
            unregistered custom operator.
    """
    import mxnet as mx

    sym_path = f"{prefix}-symbol.json"
    if not os.path.isfile(sym_path):
        raise UsageError(f"no symbol file {sym_path} (give the checkpoint prefix, without -symbol.json)")
    if epoch is None:
        epoch = _latest_epoch(prefix)
    params_path = f"{prefix}-{epoch:04d}.params"
    if not os.path.isfile(params_path):
        raise UsageError(f"no params file {params_path}")
    try:
        sym = mx.sym.load(sym_path)
    except mx.base.MXNetError as exc:
        msg = mxnet_message(exc)
        m = re.search(r"Cannot find custom operator (\S+)", msg)
        if m:
            raise UsageError(f"{sym_path} uses the custom operator {m.group(1)!r}, which is not registered: "
                             "import the module that registers it with --import MODULE") from None
        raise UsageError(f"cannot read {sym_path}: {msg}") from None
    try:
        saved = mx.nd.load(params_path)
    except mx.base.MXNetError as exc:
        raise UsageError(f"cannot read {params_path}: {mxnet_message(exc)}") from None
    if not isinstance(saved, dict):
        raise UsageError(f"{params_path} holds a list of arrays, not named arg:/aux: parameters")
    args, aux = {}, {}
    for key, value in saved.items():
        kind, _, name = key.partition(":")
        if kind == "arg":
            args[name] = value
        elif kind == "aux":
            aux[name] = value
    logger.debug("loaded %s epoch %d: %d args, %d aux", prefix, epoch, len(args), len(aux))
    return Checkpoint(prefix, epoch, sym, args, aux)


def resolve_shapes(ckpt: Checkpoint, given: Mapping[str, Shape], arrays: Optional[Mapping[str, np.ndarray]] = None) -> Dict[str, Shape]:
    """Check the data-input shapes against the model.

    Args:
        ckpt: The checkpoint.
        given: ``--shape`` values.
        arrays: User input arrays (their shapes count as given).

    Returns:
        The shapes to bind with (given, or from the arrays).

    Raises:
        UsageError: an unknown input name, a weight named as an input, an
            array contradicting ``--shape``, an input without a shape, or
            shapes MXNet's inference rejects.
    """
    import mxnet as mx

    inputs = ckpt.data_inputs()
    params = ckpt.params

    def check_name(name: str, what: str) -> None:
        if name in inputs:
            return
        if name in params:
            raise UsageError(f"{what} {name!r} is a weight stored in the checkpoint, not an input "
                             f"(the model's inputs: {', '.join(inputs) or 'none'})")
        raise UsageError(f"{what}: unknown input {name!r} (the model's inputs: {', '.join(inputs) or 'none'})")

    shapes: Dict[str, Shape] = {}
    for name, shape in given.items():
        check_name(name, "--shape")
        shapes[name] = tuple(shape)
    for name, arr in (arrays or {}).items():
        check_name(name, "--input")
        if name in shapes and tuple(arr.shape) != shapes[name]:
            raise UsageError(f"--input array {name!r} has shape {tuple(arr.shape)}, but --shape says {shapes[name]}")
        shapes[name] = tuple(int(d) for d in arr.shape)
    known = {k: tuple(v.shape) for k, v in params.items()}
    known.update(shapes)
    sym = ckpt.symbol
    try:
        arg_shapes, out_shapes, aux_shapes = sym.infer_shape_partial(**known)
    except mx.base.MXNetError as exc:
        missing = [n for n in inputs if n not in shapes]
        if missing:
            raise UsageError(f"no shape for input {missing[0]!r}: add --shape {missing[0]}=d0,d1,...") from None
        raise UsageError(f"the shapes {_shapes_text(shapes)} do not fit the model: {mxnet_message(exc)}") from None
    inferred = dict(zip(sym.list_arguments(), arg_shapes or []))
    inferred.update(zip(sym.list_auxiliary_states(), aux_shapes or []))
    for name in inputs:
        s = inferred.get(name)
        if not s or any(d <= 0 for d in s):
            raise UsageError(f"no shape for input {name!r}: add --shape {name}=d0,d1,...")
    bad = [o for o, s in zip(sym.list_outputs(), out_shapes or []) if not s or any(d <= 0 for d in s)]
    if bad:
        raise UsageError(f"the shapes {_shapes_text(shapes)} leave the shapes of {', '.join(bad)} unknown")
    return shapes


def _shapes_text(shapes: Mapping[str, Shape]) -> str:
    return ", ".join(f"{k}={','.join(str(d) for d in v)}" for k, v in shapes.items()) or "(none)"


def load_inputs(path: str, inputs: Sequence[str]) -> Dict[str, np.ndarray]:
    """Read ``--input``: a ``.npy`` for a single-input model, or a ``.npz`` keyed by input name.

    Raises:
        UsageError: missing or unreadable file, a ``.npy`` for several inputs,
            or a ``.npz`` lacking an input.
    """
    if not os.path.isfile(path):
        raise UsageError(f"--input {path}: no such file")
    try:
        loaded = np.load(path, allow_pickle=False)
    except Exception as exc:  # numpy raises several types for a bad file
        raise UsageError(f"--input {path}: cannot read: {exc}") from None
    if isinstance(loaded, np.ndarray):
        if len(inputs) != 1:
            raise UsageError(f"--input {path}: a .npy holds one array but the model has inputs {', '.join(inputs)}; "
                             "use a .npz keyed by input name")
        return {inputs[0]: loaded}
    with loaded as npz:
        arrays = {k: npz[k] for k in npz.files}
    missing = [n for n in inputs if n not in arrays]
    if missing:
        raise UsageError(f"--input {path}: no array for input {missing[0]!r} (it holds {', '.join(arrays) or 'nothing'})")
    return arrays


def random_inputs(shapes: Mapping[str, Shape], seed: int) -> Dict[str, np.ndarray]:
    """Seeded uniform [-1, 1) float32 inputs, one generator for all in name order."""
    rng = np.random.RandomState(seed)
    return {k: rng.uniform(-1.0, 1.0, shapes[k]).astype("float32") for k in sorted(shapes)}


# ---------------------------------------------------------------------------
# Binding
# ---------------------------------------------------------------------------


def settings_from_env(fp16: bool = False) -> Any:
    """:meth:`Settings.from_env`, with ``fp16`` forced on if asked.

    Raises:
        UsageError: a malformed environment variable.
    """
    from .settings import Settings

    try:
        settings = Settings.from_env()
    except MxTrtError as exc:
        raise UsageError(str(exc)) from None
    return dataclasses.replace(settings, fp16=True) if fp16 else settings


def backend_for(ctx: Any, settings: Any) -> Any:
    """The engine backend for ``ctx``.

    Raises:
        UsageError: none can serve it (or the forced one is not installed).
    """
    from .backends import select_backend
    from .errors import BackendUnavailableError

    try:
        return select_backend(ctx.device_type, settings.backend)
    except BackendUnavailableError as exc:
        raise UsageError(str(exc)) from None


def bind_native(ckpt: Checkpoint, shapes: Mapping[str, Shape], ctx: Any) -> Any:
    """MXNet's own bind, whatever ``MXNET_USE_TENSORRT`` says."""
    from .hook import disabled

    with disabled():
        exe = ckpt.symbol.simple_bind(ctx, grad_req="null", shared_buffer=ckpt.params, **shapes)
    exe.copy_params_from(ckpt.arg_params, ckpt.aux_params, allow_extra_params=True)
    return exe


def bind_accelerated(ckpt: Checkpoint, shapes: Mapping[str, Shape], ctx: Any, settings: Any, backend: Any) -> Tuple[Any, Any]:
    """The pass's bind: ``(executor, BindInfo)``."""
    from .bind import bind_with_backend

    return bind_with_backend(ckpt.symbol, ctx, backend, settings, dict(ckpt.params), dict(shapes))


def run_executor(exe: Any, inputs: Mapping[str, np.ndarray]) -> List[np.ndarray]:
    """Copy ``inputs`` in, run one inference forward, return the outputs."""
    for k, v in inputs.items():
        exe.arg_dict[k][:] = v
    exe.forward(is_train=False)
    return [o.asnumpy() for o in exe.outputs]


class WholeModelEngine:
    """The engine of an executor whose single subgraph holds every operator, run without MXNet.

    The reference for the cost of the fused node: the same engine, called
    directly on numpy buffers.
    """

    def __init__(self, engine: Any) -> None:
        from .backends import Buffer

        self.engine = engine
        self.inputs = {t.name: np.zeros(t.shape, dtype=t.dtype) for t in engine.inputs}
        self.outputs = [np.zeros(t.shape, dtype=t.dtype) for t in engine.outputs]
        self._in = [Buffer(self.inputs[t.name].ctypes.data, tuple(t.shape), t.dtype) for t in engine.inputs]
        self._out = [Buffer(a.ctypes.data, tuple(a.shape), a.dtype.name) for a in self.outputs]

    @classmethod
    def from_bind(cls, info: Any) -> Optional["WholeModelEngine"]:
        """The whole-model engine of a bind, or ``None`` unless every operator is in one engine."""
        inside, total = info.plan.op_counts()
        if len(info.engines) != 1 or info.native_failures or inside != total:
            return None
        return cls(info.engines[0].engine)

    def set_inputs(self, inputs: Mapping[str, np.ndarray]) -> None:
        for name, buf in self.inputs.items():
            buf[...] = inputs[name]

    def run(self) -> None:
        self.engine.run(self._in, self._out)


def whole_model_note(info: Any) -> str:
    """Why the whole model is not one engine (for reports)."""
    inside, total = info.plan.op_counts()
    if inside != total:
        return f"{total - inside} of {total} operators stay native"
    if info.native_failures:
        return "an engine failed to build"
    return f"{len(info.engines)} engines"


# ---------------------------------------------------------------------------
# Timing and progress
# ---------------------------------------------------------------------------


class Progress:
    """A progress bar on stderr when it is a terminal; otherwise one log line per phase."""

    def __init__(self, total: int, stream: Optional[TextIO] = None, width: int = 28) -> None:
        self.total = max(1, total)
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.width = width
        self.label = ""
        self.started = time.perf_counter()
        self._drawn = 0.0

    def phase(self, label: str) -> None:
        """Start a named phase (logged when not on a terminal)."""
        self.label = label
        if self.tty:
            self._draw()
        else:
            logger.info("%s", label)

    def advance(self, n: int = 1) -> None:
        self.done = min(self.total, self.done + n)
        now = time.perf_counter()
        if self.tty and now - self._drawn >= 0.1:  # redraws cost time between timed runs
            self._draw()


    def _draw(self) -> None:
        frac = self.done / self.total
        filled = int(round(frac * self.width))
        elapsed = time.perf_counter() - self.started
        bar = "#" * filled + "-" * (self.width - filled)
        self.stream.write(f"\r[{bar}] {100 * frac:5.1f}% {elapsed:6.1f}s  {self.label[:48]:<48}")
        self.stream.flush()
        self._drawn = time.perf_counter()

    def close(self) -> None:
        if self.tty:
            self.done = self.total
            self._draw()
            self.stream.write("\n")
            self.stream.flush()


def measure(fn: Callable[[], None], runs: int, warmup: int, tick: Optional[Callable[[], None]] = None) -> List[float]:
    """Latencies (ms) of ``runs`` calls of ``fn`` after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
        if tick:
            tick()
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1e3)
        if tick:
            tick()
    return out


def forward_fn(exe: Any) -> Callable[[], None]:
    """One waited-for inference forward of ``exe``."""

    def run() -> None:
        exe.forward(is_train=False)
        for o in exe.outputs:
            o.wait_to_read()

    return run


def latency_stats(ms: Sequence[float], batch: int) -> Dict[str, float]:
    """Median, p90, mean, min (ms) and throughput (samples/s at the median)."""
    med = statistics.median(ms)
    return {
        "median_ms": med,
        "min_ms": min(ms),
        "p90_ms": float(np.percentile(ms, 90)),
        "mean_ms": statistics.fmean(ms),
        "throughput": batch * 1e3 / med if med > 0 else math.inf,
        "runs": len(ms),
    }


# ---------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------


@dataclass
class OutputCheck:
    """``verify``'s verdict on one output."""

    name: str
    shape: Shape
    max_abs: float
    max_rel: float
    cosine: float
    allowed: float
    ok: bool


def compare_outputs(names: Sequence[str], ref: Sequence[np.ndarray], got: Sequence[np.ndarray],
                    rtol: float, atol: float) -> List[OutputCheck]:
    """Per output: largest absolute error, largest error relative to ``max|ref|``, cosine similarity.

    An output passes when its shape matches, everything is finite where the
    reference is, and ``max_abs <= atol + rtol * max|ref|``.
    """
    out = []
    for name, r, g in zip(names, ref, got):
        r64 = r.astype(np.float64).ravel()
        g64 = g.astype(np.float64).ravel()
        if r.shape != g.shape:
            out.append(OutputCheck(name, tuple(g.shape), math.inf, math.inf, 0.0, 0.0, False))
            continue
        scale = float(np.max(np.abs(r64))) if r64.size else 0.0
        diff = np.abs(g64 - r64)
        finite = bool(np.all(np.isfinite(g64[np.isfinite(r64)])))
        max_abs = float(np.max(diff)) if diff.size else 0.0
        if not finite or math.isnan(max_abs):
            max_abs = math.inf
        nr, ng = float(np.linalg.norm(r64)), float(np.linalg.norm(g64))
        cosine = 1.0 if nr == 0 and ng == 0 else (float(np.dot(r64, g64)) / (nr * ng) if nr and ng else 0.0)
        allowed = atol + rtol * scale
        out.append(OutputCheck(name, tuple(r.shape), max_abs, max_abs / scale if scale else max_abs, cosine,
                               allowed, max_abs <= allowed))
    return out


def _load(args: argparse.Namespace, arrays_from: Optional[str] = None) -> Tuple[Checkpoint, Dict[str, Shape], Optional[Dict[str, np.ndarray]]]:
    for spec in args.imports:
        import_user_module(spec)
    given: Dict[str, Shape] = {}
    for text in args.shape:
        name, shape = parse_shape(text)
        if name in given:
            raise UsageError(f"--shape {name} is given twice")
        given[name] = shape
    ckpt = load_checkpoint(args.prefix, args.epoch)
    arrays = load_inputs(arrays_from, ckpt.data_inputs()) if arrays_from else None
    shapes = resolve_shapes(ckpt, given, arrays)
    return ckpt, shapes, arrays


def cmd_partition(args: argparse.Namespace) -> int:
    """``mxtrt partition``: the subgraphs, the shares in engines, the native nodes and why."""
    from . import report as rpt
    from .bind import analyze

    ckpt, shapes, _ = _load(args)
    settings = settings_from_env(args.fp16)
    ctx = parse_ctx(args.ctx)
    backend = backend_for(ctx, settings)
    failures: Dict[str, str] = {}
    if args.build:
        _, info = bind_accelerated(ckpt, shapes, ctx, settings, backend)
        plan, failures = info.plan, dict(info.native_failures)
    else:
        plan = analyze(ckpt.symbol, shapes, ckpt.params, settings, backend)
    report = rpt.build_report(plan, model=ckpt.prefix, backend=backend.name, failures=failures)
    for path, render in ((args.svg, rpt.render_svg), (args.html, rpt.render_html)):
        if path:
            text = render(report, plan, collapse=args.collapse)
            _write(path, text)
            logger.info("wrote %s", path)
    if args.json:
        print(json.dumps(rpt.report_to_json(report), indent=2))
    else:
        sys.stdout.write(rpt.render_table(report))
    return EXIT_OK


def _write(path: str, text: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


def cmd_verify(args: argparse.Namespace) -> int:
    """``mxtrt verify``: native vs accelerated outputs against the precision's tolerance."""
    ckpt, shapes, arrays = _load(args, args.input)
    settings = settings_from_env(args.fp16)
    ctx = parse_ctx(args.ctx)
    backend = backend_for(ctx, settings)
    precision = "float16" if settings.fp16 else "float32"
    rtol, atol = TOLERANCES[precision]
    rtol = args.rtol if args.rtol is not None else rtol
    atol = args.atol if args.atol is not None else atol
    if arrays is not None:
        feeds = {k: np.asarray(v, dtype="float32") for k, v in arrays.items() if k in shapes}
        source = args.input
    else:
        feeds = random_inputs(shapes, args.seed)
        source = f"seeded random uniform[-1, 1), seed {args.seed}"
    native = bind_native(ckpt, shapes, ctx)
    ref = run_executor(native, feeds)
    del native
    exe, info = bind_accelerated(ckpt, shapes, ctx, settings, backend)
    got = run_executor(exe, feeds)
    names = ckpt.symbol.list_outputs()
    checks = compare_outputs(names, ref, got, rtol, atol)
    ok = all(c.ok for c in checks) and len(ref) == len(got)
    inside, total = info.plan.op_counts()
    if args.json:
        print(json.dumps({
            "model": ckpt.prefix, "inputs": {k: list(v) for k, v in shapes.items()}, "input_source": source,
            "backend": backend.name, "precision": precision, "rtol": rtol, "atol": atol,
            "engines": len(info.engines), "ops_in_engines": inside, "ops_total": total,
            "outputs": [{"name": c.name, "shape": list(c.shape), "max_abs_err": _num(c.max_abs),
                         "max_rel_err": _num(c.max_rel), "cosine": c.cosine, "allowed_abs_err": c.allowed,
                         "pass": c.ok} for c in checks],
            "pass": ok,
        }, indent=2))
    else:
        print(f"model: {ckpt.prefix}  inputs: {_shapes_text(shapes)}  ({source})")
        print(f"backend: {backend.name}, {len(info.engines)} engine(s) holding {inside} of {total} operators")
        rows = [("output", "shape", "max abs err", "max rel err", "cosine", "allowed abs", "result")]
        for c in checks:
            rows.append((c.name, "x".join(str(d) for d in c.shape), f"{c.max_abs:.3g}", f"{c.max_rel:.3g}",
                         f"{c.cosine:.6f}", f"{c.allowed:.3g}", "pass" if c.ok else "FAIL"))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for k, r in enumerate(rows):
            print("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip())
            if k == 0:
                print("  ".join("-" * w for w in widths))
        verdict = "PASS" if ok else "FAIL"
        where = "set by --rtol/--atol" if args.rtol is not None or args.atol is not None else f"{precision} default"
        print(f"{verdict}: {sum(c.ok for c in checks)} of {len(checks)} outputs within max|err| <= "
              f"{atol:g} + {rtol:g} * max|native| ({where}; max rel err is relative to max|native|)")
    return EXIT_OK if ok else EXIT_FAILED


def _num(x: float) -> Optional[float]:
    return None if math.isinf(x) or math.isnan(x) else x


@dataclass
class BenchRow:
    """``bench``'s measurements at one batch size."""

    batch: int
    shapes: Dict[str, Shape]
    native: Dict[str, float]
    accelerated: Dict[str, float]
    whole_model: Optional[Dict[str, float]]
    whole_model_note: str
    engines: int
    ops_in_engines: int
    ops_total: int
    bind_s: Dict[str, float] = field(default_factory=dict)

    def ratios(self) -> Dict[str, Optional[float]]:
        acc = self.accelerated["median_ms"]
        whole = self.whole_model["median_ms"] if self.whole_model else None
        best = self.whole_model["min_ms"] if self.whole_model else None
        return {
            "native/accelerated": self.native["median_ms"] / acc if acc else None,
            "accelerated/whole_model": acc / whole if whole else None,
            # Fastest runs: the least disturbed by other processes on the machine.
            "accelerated/whole_model_best": self.accelerated["min_ms"] / best if best else None,
        }

    def to_json(self) -> Dict[str, Any]:
        return {
            "batch": self.batch, "shapes": {k: list(v) for k, v in self.shapes.items()},
            "native": self.native, "accelerated": self.accelerated, "whole_model": self.whole_model,
            "whole_model_note": self.whole_model_note, "engines": self.engines,
            "ops_in_engines": self.ops_in_engines, "ops_total": self.ops_total, "bind_s": self.bind_s,
            "ratios": self.ratios(),
        }


#: Timed runs are split into this many rounds, variants alternating, so that drift
#: (another process, thermal state) hits all of them alike.
BENCH_ROUNDS = 5


def bench_steps(runs: int, warmup: int) -> int:
    """Forward calls :func:`bench_one` makes per variant (for a progress bar)."""
    return runs + warmup + max(0, min(BENCH_ROUNDS, runs) - 1)


def bench_one(ckpt: Checkpoint, shapes: Mapping[str, Shape], batch: int, ctx: Any, settings: Any, backend: Any,
              runs: int, warmup: int, progress: Progress, seed: int = 0, whole: bool = True) -> BenchRow:
    """Native, accelerated and whole-model latencies at one batch size, in this process.

    All executors are bound first; then ``runs`` timed runs per variant are
    taken in up to :data:`BENCH_ROUNDS` rounds that alternate the variants,
    each round starting with one untimed run (``warmup`` untimed runs before
    the first).
    """
    bshapes = {k: (batch,) + tuple(v[1:]) for k, v in shapes.items()}
    feeds = random_inputs(bshapes, seed)
    progress.phase(f"batch {batch}: binding natively")
    t = time.perf_counter()
    native = bind_native(ckpt, bshapes, ctx)
    bind_native_s = time.perf_counter() - t
    run_executor(native, feeds)
    progress.phase(f"batch {batch}: binding accelerated")
    t = time.perf_counter()
    exe, info = bind_accelerated(ckpt, bshapes, ctx, settings, backend)
    bind_acc_s = time.perf_counter() - t
    run_executor(exe, feeds)
    # The direct run hands the engine host buffers: CPU engines only for now.
    engine = WholeModelEngine.from_bind(info) if whole and ctx.device_type == "cpu" else None
    variants: Dict[str, Callable[[], None]] = {"native": forward_fn(native), "accelerated": forward_fn(exe)}
    if engine is not None:
        engine.set_inputs(feeds)
        variants["whole model"] = engine.run
        note = "the accelerated executor's only engine, run directly on numpy buffers"
    else:
        progress.advance(bench_steps(runs, warmup))
        note = ("not measured" if not whole else "measured on CPU contexts only" if ctx.device_type != "cpu"
                else f"not one engine: {whole_model_note(info)}")
    rounds = max(1, min(BENCH_ROUNDS, runs))
    times: Dict[str, List[float]] = {k: [] for k in variants}
    for r in range(rounds):
        n = runs // rounds + (1 if r < runs % rounds else 0)
        for name, fn in variants.items():
            progress.phase(f"batch {batch}: {name}, round {r + 1}/{rounds}")
            times[name] += measure(fn, n, warmup if r == 0 else 1, progress.advance)
    whole_stats = latency_stats(times["whole model"], batch) if engine is not None else None
    inside, total = info.plan.op_counts()
    row = BenchRow(batch, bshapes, latency_stats(times["native"], batch), latency_stats(times["accelerated"], batch),
                   whole_stats, note, len(info.engines), inside, total,
                   {"native": bind_native_s, "accelerated": bind_acc_s})
    del exe, info, engine, native, variants
    return row


def _fmt_ratio(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.2f}"


def bench_table(rows: Sequence[BenchRow]) -> str:
    """The side-by-side table of :func:`cmd_bench`."""
    head = ("batch", "native ms", "p90", "/s", "accel ms", "p90", "/s", "whole ms", "p90", "/s",
            "native/accel", "accel/whole")
    table: List[Tuple[str, ...]] = [head]
    for r in rows:
        cells = [str(r.batch)]
        for st in (r.native, r.accelerated, r.whole_model):
            if st is None:
                cells += ["-", "-", "-"]
            else:
                cells += [f"{st['median_ms']:.2f}", f"{st['p90_ms']:.2f}", f"{st['throughput']:.1f}"]
        ratios = r.ratios()
        cells += [_fmt_ratio(ratios["native/accelerated"]), _fmt_ratio(ratios["accelerated/whole_model"])]
        table.append(tuple(cells))
    widths = [max(len(t[i]) for t in table) for i in range(len(head))]
    lines = []
    for k, t in enumerate(table):
        lines.append("  ".join(c.rjust(w) for c, w in zip(t, widths)))
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines) + "\n"


def cmd_bench(args: argparse.Namespace) -> int:
    """``mxtrt bench``: native vs accelerated vs whole model, per batch size."""
    batches = parse_batches(args.batch) if args.batch else None
    if args.runs < 1 or args.warmup < 0:
        raise UsageError("--runs must be >= 1 and --warmup >= 0")
    ckpt, shapes, _ = _load(args)
    settings = settings_from_env(args.fp16)
    ctx = parse_ctx(args.ctx)
    backend = backend_for(ctx, settings)
    if batches is None:
        first = next(iter(shapes.values()), None)
        batches = [first[0] if first else 1]
    else:
        for b in batches:  # every batch must fit before anything is timed
            resolve_shapes(ckpt, {k: (b,) + tuple(v[1:]) for k, v in shapes.items()})
    progress = Progress(len(batches) * 3 * bench_steps(args.runs, args.warmup))
    rows = []
    try:
        for b in batches:
            rows.append(bench_one(ckpt, shapes, b, ctx, settings, backend, args.runs, args.warmup, progress,
                                  args.seed, whole=not args.no_whole))
    finally:
        progress.close()
    if args.json:
        print(json.dumps({
            "model": ckpt.prefix, "inputs": {k: list(v) for k, v in shapes.items()}, "backend": backend.name,
            "ctx": args.ctx, "runs": args.runs, "warmup": args.warmup, "results": [r.to_json() for r in rows],
        }, indent=2))
    else:
        print(f"model: {ckpt.prefix}  inputs: {_shapes_text(shapes)}  backend: {backend.name}  "
              f"{args.runs} runs after {args.warmup} warm-up, latency in ms, throughput in samples/s")
        sys.stdout.write(bench_table(rows))
        for r in rows:
            if r.whole_model is None:
                print(f"batch {r.batch}: whole model {r.whole_model_note}")
    return EXIT_OK


def cmd_build(args: argparse.Namespace) -> int:
    """``mxtrt build``: build the engines ahead of time into the plan cache."""
    from . import engines
    from .cache import ENV_DIR, EngineCache

    batches = parse_batches(args.batch) if args.batch else None
    if args.max_batch is not None and args.max_batch < 1:
        raise UsageError("--max-batch must be >= 1")
    with env_override({ENV_DIR: os.path.abspath(args.cache_dir)} if args.cache_dir else {}):
        try:
            cache = EngineCache.from_env()
        except MxTrtError as exc:
            raise UsageError(str(exc)) from None
        if cache is None:
            raise UsageError(f"the plan cache is disabled ({ENV_DIR} is empty): set it or pass --cache-dir DIR")
        problem = cache.probe()
        if problem is not None:
            raise UsageError(f"cannot use the plan cache {cache.directory}: {problem}")
        before = {e.key for e in cache.entries()}
        ckpt, shapes, _ = _load(args)
        settings, ctx, backend = _build_setup(args)
        if batches is None:
            first = next(iter(shapes.values()), None)
            batches = [first[0] if first else 1]
        per_batch = [{k: (b,) + tuple(v[1:]) for k, v in shapes.items()} for b in batches]
        for bs in per_batch:
            resolve_shapes(ckpt, bs)
        rows = []
        for b, bs in zip(batches, per_batch):
            engines.clear_pool()  # so every batch is looked up on disk, and stored there when built
            t = time.perf_counter()
            exe, info = bind_accelerated(ckpt, bs, ctx, settings, backend)
            dt = time.perf_counter() - t
            rows.append({"batch": b, "engines": len(info.engines), "built": info.builds, "cached": info.loads,
                         "failed": dict(info.native_failures), "seconds": dt})
            del exe, info
        engines.clear_pool()
    if args.json:
        print(json.dumps({"model": ckpt.prefix, "cache_dir": cache.directory, "backend": backend.name,
                          "fp16": settings.fp16, "max_batch_size": settings.max_batch_size, "batches": rows}, indent=2))
    else:
        print(f"model: {ckpt.prefix}  backend: {backend.name}  plan cache: {cache.directory}"
              + (f"  dynamic batch up to {settings.max_batch_size}" if settings.max_batch_size else ""))
        for r in rows:
            print(f"batch {r['batch']}: {r['engines']} engine(s): {r['built']} built and stored, "
                  f"{r['cached']} already in the cache ({r['seconds']:.2f} s)")
            for name, why in r["failed"].items():
                print(f"  {name} stays native: {why}")
    built = sum(r["built"] for r in rows)
    if built and not {e.key for e in cache.entries()} - before:
        print(f"mxtrt: error: {built} engine(s) built but none stored in {cache.directory} (see the warnings above)",
              file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _build_setup(args: argparse.Namespace) -> Tuple[Any, Any, Any]:
    """Settings (``--fp16``, ``--max-batch``), context and backend for ``build`` and ``export``."""
    settings = settings_from_env(args.fp16)
    if args.max_batch is not None:
        settings = dataclasses.replace(settings, max_batch_size=args.max_batch)
    ctx = parse_ctx(args.ctx)
    return settings, ctx, backend_for(ctx, settings)


def cmd_export(args: argparse.Namespace) -> int:
    """``mxtrt export``: optimized symbol, remaining params and engines, for :func:`mx_trt.load`."""
    from .export import export_model

    if args.max_batch is not None and args.max_batch < 1:
        raise UsageError("--max-batch must be >= 1")
    outdir = os.path.abspath(args.outdir)
    if os.path.exists(outdir) and not os.path.isdir(outdir):
        raise UsageError(f"{outdir} is a file, not a folder")
    if os.path.isdir(outdir) and os.listdir(outdir) and not args.force:
        raise UsageError(f"{outdir} is not empty (use --force to replace an earlier export)")
    ckpt, shapes, _ = _load(args)
    settings, ctx, backend = _build_setup(args)
    manifest = export_model(ckpt.symbol, ctx, ckpt.params, shapes, outdir, settings, backend, overwrite=args.force)
    if args.json:
        print(json.dumps(manifest, indent=2))
    else:
        print(f"exported {ckpt.prefix} to {outdir}: {len(manifest['engines'])} engine(s) "
              f"({manifest['backend_version']}, {manifest['device']}), inputs {_shapes_text(shapes)}")
        for name, why in manifest["native_failures"].items():
            print(f"  {name} stays native: {why}")
        print(f"bind it with: mx_trt.load({outdir!r}, mx.{ctx.device_type}())")
    return EXIT_OK


# ---------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are :class:`UsageError` (one line, exit 2)."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    """The ``mxtrt`` argument parser."""
    common = _Parser(add_help=False)
    common.add_argument("prefix", metavar="PREFIX", help="checkpoint prefix: PREFIX-symbol.json, PREFIX-EPOCH.params")
    common.add_argument("--epoch", type=int, default=None, help="params epoch (default: the latest found)")
    common.add_argument("--shape", action="append", default=[], metavar="NAME=d0,d1,...",
                        help="shape of a data input; once per input")
    common.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE|FILE.py",
                        help="import this first (registers your custom operators); repeatable")
    common.add_argument("--ctx", default="cpu", help="cpu (default), gpu or gpu:N")
    common.add_argument("--fp16", action="store_true", help="build fp16 engines (MXNET_TENSORRT_USE_FP16)")
    common.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv: debug)")
    common.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only")

    ap = _Parser(prog="mxtrt", formatter_class=argparse.RawDescriptionHelpFormatter,
                 description="Inspect, check and time the TensorRT pass on a saved MXNet checkpoint.\n\n"
                             "  mxtrt partition PREFIX --shape data=1,3,224,224 [--json] [--svg FILE]\n"
                             "  mxtrt verify PREFIX --shape data=1,3,224,224 [--input x.npz]\n"
                             "  mxtrt bench PREFIX --shape data=1,3,224,224 --batch 1,8,32 [--json]\n"
                             "  mxtrt build PREFIX --shape data=1,3,224,224 [--batch 1,8] [--cache-dir DIR]\n"
                             "  mxtrt export PREFIX OUTDIR --shape data=1,3,224,224\n\n"
                             "MXNET_TENSORRT_* environment variables apply as at bind time.",
                 epilog="Exit status: 0 ok, 1 verification failed, 2 bad input.")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("partition", parents=[common], help="subgraphs, shares in engines, native nodes and why",
                       description="Show how the pass partitions the model (no engine is built unless --build).")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    p.add_argument("--svg", metavar="FILE", help="draw the graph as SVG: subgraphs coloured, native nodes with reasons")
    p.add_argument("--html", metavar="FILE", help="an HTML page with the tables and the drawing")
    p.add_argument("--collapse", action=argparse.BooleanOptionalAction, default=None,
                   help="draw each subgraph as one box (default: from 1,000 operators)")
    p.add_argument("--build", action="store_true", help="also build the engines and report build failures")
    p.set_defaults(func=cmd_partition)

    p = sub.add_parser("verify", parents=[common], help="compare accelerated outputs with native MXNet",
                       description="Bind natively and accelerated, run the same inputs, compare every output.")
    p.add_argument("--input", "--inputs", dest="input", metavar="FILE", help=".npy (single-input model) or .npz keyed by input name; "
                   "default: seeded random inputs")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.add_argument("--rtol", type=float, default=None, help="relative tolerance (of max|native|); default by precision")
    p.add_argument("--atol", type=float, default=None, help="absolute tolerance; default by precision")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("bench", parents=[common], help="latency: native, accelerated, whole model as one engine",
                       description="Time native MXNet, the accelerated executor and (where every operator "
                                   "converts) the whole model as one engine, side by side.")
    p.add_argument("--batch", metavar="B1,B2,...", help="batch sizes (replace dim 0 of every --shape)")
    p.add_argument("--runs", type=int, default=20, help="timed runs per variant (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="untimed runs first (default 3)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.add_argument("--no-whole", action="store_true", help="skip the whole-model engine")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("build", parents=[common], help="fill the plan cache ahead of time",
                       description="Build the engines the bind would build and store them in the plan cache "
                                   "(MXNET_TENSORRT_CACHE_DIR), so that later binds load them.")
    p.add_argument("--batch", metavar="B1,B2,...", help="batch sizes to build for (replace dim 0 of every --shape)")
    p.add_argument("--max-batch", type=int, default=None, metavar="N",
                   help="dynamic batch engines for 1..N (MXNET_TENSORRT_MAX_BATCH_SIZE)")
    p.add_argument("--cache-dir", metavar="DIR", help="the plan cache folder (default: MXNET_TENSORRT_CACHE_DIR)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("export", parents=[common], help="write the optimized model and its engines to a folder",
                       description="Bind with the pass and write OUTDIR: the optimized symbol, the remaining "
                                   "params and the engines; mx_trt.load(OUTDIR, ctx) binds it again "
                                   "without building anything.")
    p.add_argument("outdir", metavar="OUTDIR", help="target folder (created)")
    p.add_argument("--max-batch", type=int, default=None, metavar="N",
                   help="dynamic batch engines for 1..N (MXNET_TENSORRT_MAX_BATCH_SIZE)")
    p.add_argument("--force", action="store_true", help="replace an earlier export in OUTDIR")
    p.add_argument("--json", action="store_true", help="print the manifest")
    p.set_defaults(func=cmd_export)
    return ap


@dataclass
class _LogState:
    handler: logging.Handler
    saved: List[Tuple[logging.Logger, int, bool]]


def _setup_logging(verbose: int, quiet: bool) -> _LogState:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s" if verbose else "mxtrt: %(message)s"))
    level = logging.DEBUG if verbose >= 2 else logging.INFO if verbose == 1 else logging.WARNING
    saved = []
    for name, lvl in (("mx_trt", level), ("passes", level), (logger.name, logging.WARNING if quiet else min(level, logging.INFO))):
        lg = logging.getLogger(name)
        saved.append((lg, lg.level, lg.propagate))
        lg.setLevel(lvl)
    top = logging.getLogger("mx_trt")
    top.addHandler(handler)
    top.propagate = False
    passes_log = logging.getLogger("passes")
    passes_log.addHandler(handler)
    passes_log.propagate = False
    return _LogState(handler, saved)


def _restore_logging(state: _LogState) -> None:
    for name in ("mx_trt", "passes"):
        logging.getLogger(name).removeHandler(state.handler)
    for lg, lvl, prop in state.saved:
        lg.setLevel(lvl)
        lg.propagate = prop


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run ``mxtrt`` with ``argv`` (default: ``sys.argv[1:]``) and return the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(list(argv) if argv is not None else None)
    except UsageError as exc:
        print(f"mxtrt: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except SystemExit as exc:  # --help
        return int(exc.code or 0) if isinstance(exc.code, int) or exc.code is None else EXIT_USAGE
    state = _setup_logging(args.verbose, args.quiet)
    # MXNet prints a line per native bind about its MKLDNN subgraph backend otherwise.
    quiet_mxnet = env_override({} if "MXNET_SUBGRAPH_VERBOSE" in os.environ else {"MXNET_SUBGRAPH_VERBOSE": "0"})
    try:
        with quiet_mxnet:
            return int(args.func(args))
    except (UsageError, ShapeError) as exc:
        print(f"mxtrt: error: {_one_line(exc)}", file=sys.stderr)
        if args.verbose >= 2:
            logger.debug("details", exc_info=True)
        return EXIT_USAGE
    except MxTrtError as exc:
        print(f"mxtrt: error: {_one_line(exc)}", file=sys.stderr)
        if args.verbose >= 2:
            logger.debug("details", exc_info=True)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("mxtrt: interrupted", file=sys.stderr)
        return 130
    finally:
        _restore_logging(state)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())
