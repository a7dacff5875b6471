"""``mxtrt bench``: native vs accelerated vs the whole model as one engine, per batch size."""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from mx_trt.tools.cli.binding import WholeModelEngine, bind_accelerated, bind_native, run_executor, whole_model_note
from mx_trt.tools.cli.checkpoint import Checkpoint, load_model, random_inputs, resolve_shapes
from mx_trt.tools.cli.options import (
    EXIT_OK,
    INT32_MAX,
    SEED,
    Shape,
    UsageError,
    default_batches,
    engine_setup,
    int_in,
    parse_batches,
    shapes_text,
    with_batch,
)
from mx_trt.tools.cli.timing import SETTLE_S, Progress, forward_fn, latency_stats, measure, warm_check
from mx_trt.runtime.arbiter import ENGINES, NATIVE
from mx_trt.runtime.twin import served_shares
from mx_trt.tools.native_process import NativeProcess, equal_thread_workers

logger = logging.getLogger(__name__)

#: Timed runs are split into this many rounds, variants alternating, so that drift
#: (another process, thermal state) hits all of them alike.
BENCH_ROUNDS = 5


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``bench`` and its options on the subcommand set ``sub``."""
    p = sub.add_parser("bench", parents=[common], help="latency: native, accelerated, whole model as one engine",
                       description="Time native MXNet, the accelerated executor and (where every operator "
                                   "converts) the whole model as one engine, side by side.")
    p.add_argument("--batch", metavar="B1,B2,...", help="batch sizes (replace dim 0 of every --shape)")
    p.add_argument("--runs", type=int_in(1, INT32_MAX), default=20, help="timed runs per variant (default 20)")
    p.add_argument("--warmup", type=int_in(0, INT32_MAX), default=3, help="untimed runs first (default 3)")
    p.add_argument("--seed", type=SEED, default=0, help="seed of the random inputs (0 to 2**32 - 1)")
    p.add_argument("--no-whole", action="store_true", help="skip the whole-model engine")
    p.add_argument("--no-equal-threads", action="store_true",
                   help="skip native and accelerated MXNet with OMP_NUM_THREADS set to the CPUs this process may "
                        "use (timed in worker processes, interleaved with the others)")
    p.add_argument("--control", action="store_true",
                   help="also time native MXNet bound a second time, in the same rounds (at both thread counts): "
                        "an A/A control, whose ratio to native is what the measurement reads between two "
                        "identical executors")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


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
    #: Native MXNet with ``OMP_NUM_THREADS`` = :attr:`threads` (another process), or ``None``.
    native_threads: Optional[Dict[str, float]] = None
    threads: int = 0
    native_threads_note: str = ""
    #: The accelerated bind in a process with ``OMP_NUM_THREADS`` = :attr:`threads`, or ``None``.
    accelerated_threads: Optional[Dict[str, float]] = None
    #: Engines kept by each accelerated bind: ``{"default": [...], "equal": [...]}`` of "backend precision".
    kept: Dict[str, List[str]] = field(default_factory=dict)
    #: Each side's share of each accelerated executor's forwards, as its run-time check chose them
    #: (``engines``: the kept ones, ``native``, an alternate engine such as ``openvino fp32``:
    #: :func:`~mx_trt.runtime.twin.served_shares`), by the keys of :attr:`kept`; ``None``: no check.
    served: Dict[str, Optional[Dict[str, float]]] = field(default_factory=dict)
    #: Untimed forwards (and their seconds) each accelerated executor took before the timed ones for its
    #: run-time check's first probes (:func:`~mx_trt.tools.cli.timing.warm_check`), by the keys of :attr:`kept`.
    check_warmup: Dict[str, Tuple[int, float]] = field(default_factory=dict)
    #: The A/A control (``bench_one(control=True)``): native MXNet bound a second time and timed in the same
    #: rounds, in this process and at equal threads; ``None``: not measured.
    control: Optional[Dict[str, float]] = None
    control_threads: Optional[Dict[str, float]] = None

    def ratios(self) -> Dict[str, Optional[float]]:
        acc = self.accelerated["median_ms"]
        whole = self.whole_model["median_ms"] if self.whole_model else None
        best = self.whole_model["min_ms"] if self.whole_model else None
        return {
            "native/accelerated": self.native["median_ms"] / acc if acc else None,
            "native_equal_threads/accelerated": (self.native_threads["median_ms"] / acc
                                                 if acc and self.native_threads else None),
            # Both sides at equal threads: the comparison of a user who sets OMP_NUM_THREADS.
            "native_equal_threads/accelerated_equal_threads": (
                self.native_threads["median_ms"] / self.accelerated_threads["median_ms"]
                if self.native_threads and self.accelerated_threads else None),
            "accelerated/whole_model": acc / whole if whole else None,
            # Fastest runs: the least disturbed by other processes on the machine.
            "accelerated/whole_model_best": self.accelerated["min_ms"] / best if best else None,
            # Two identical native executors: what this measurement reads where there is no difference.
            "native/native_control": (self.native["median_ms"] / self.control["median_ms"]
                                      if self.control else None),
            "native_equal_threads/native_control_equal_threads": (
                self.native_threads["median_ms"] / self.control_threads["median_ms"]
                if self.native_threads and self.control_threads else None),
        }

    def to_json(self) -> Dict[str, Any]:
        return {
            "batch": self.batch, "shapes": {k: list(v) for k, v in self.shapes.items()},
            "native": self.native, "accelerated": self.accelerated, "whole_model": self.whole_model,
            "whole_model_note": self.whole_model_note, "engines": self.engines,
            "ops_in_engines": self.ops_in_engines, "ops_total": self.ops_total, "bind_s": self.bind_s,
            "native_equal_threads": self.native_threads, "threads": self.threads,
            "native_equal_threads_note": self.native_threads_note,
            "accelerated_equal_threads": self.accelerated_threads, "engines_kept": self.kept,
            "served": self.served, "ratios": self.ratios(),
            "native_control": self.control, "native_control_equal_threads": self.control_threads,
            "check_warmup": {k: {"forwards": n, "seconds": t} for k, (n, t) in self.check_warmup.items()},
        }


def bench_variants(control: bool = False) -> int:
    """Variants :func:`bench_one` times in this process: native, accelerated, the whole model, and the
    control's native MXNet with ``control``."""
    return 3 + int(control)


def precision_env(settings: Any) -> Dict[str, Optional[str]]:
    """The environment that gives a worker's bind the precision of ``settings`` (``--precision``, ``--fp16`` and
    ``--calibration`` are not in this process's environment); a calibration table given as an object, not a
    path, stays the worker's environment's."""
    env: Dict[str, Optional[str]] = {"MXNET_TENSORRT_PRECISION": settings.precision, "MXNET_TENSORRT_USE_FP16": None}
    if isinstance(settings.calibration, str):
        env["MXNET_TENSORRT_CALIBRATION"] = settings.calibration
    return env


def bench_steps(runs: int, warmup: int) -> int:
    """Forward calls :func:`bench_one` makes per variant of this process (for a progress bar)."""
    return runs + warmup + max(0, min(BENCH_ROUNDS, runs) - 1)


def bench_one(ckpt: Checkpoint, shapes: Mapping[str, Shape], batch: int, ctx: Any, settings: Any, backend: Any,
              runs: int, warmup: int, progress: Progress, seed: int = 0, whole: bool = True,
              equal_threads: bool = True, control: bool = False) -> BenchRow:
    """Native, accelerated and whole-model latencies at one batch size, in this process.

    All executors are bound first; then ``runs`` timed runs per variant are
    taken in up to :data:`BENCH_ROUNDS` rounds that alternate the variants in a
    rotating order, each variant's turn starting with untimed runs: one at least
    (``warmup`` in the first round), and more until they took
    :data:`~mx_trt.tools.cli.timing.SETTLE_S`, so that no variant pays in its
    median for the OpenMP threads of the variant before it. With ``equal_threads``, native MXNet with ``OMP_NUM_THREADS``
    set to the CPUs this process may use runs in a worker process
    (:class:`~mx_trt.tools.native_process.NativeProcess`) in the same rounds:
    MXNet's thread count is fixed when it is imported. So does the accelerated
    bind, in a second worker: its native operators and its measured decisions
    then see MXNet at that thread count, as in the process of a user who sets
    ``OMP_NUM_THREADS``.

    Before its timed runs, each accelerated executor is run untimed until its
    run-time check has probed every side once (:func:`~mx_trt.tools.cli.timing.warm_check`:
    the twin's bind and first forward, as native MXNet's first forward is left out
    of its own times); what that took is reported (``check_warmup``).

    With ``control``, native MXNet is bound once more, in this process and (with
    ``equal_threads``) in a third worker, and timed in the same rounds: an A/A
    control. Its ratio to native MXNet is what this measurement reads between two
    identical executors; a ratio of the accelerated executor that is as close to
    1.0 is a tie the run cannot order.
    """
    bshapes = with_batch(shapes, batch)
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
    native_again = None
    if control:
        native_again = bind_native(ckpt, bshapes, ctx)
        run_executor(native_again, feeds)
        variants["native control"] = forward_fn(native_again)
    if engine is not None:
        engine.set_inputs(feeds)
        variants["whole model"] = engine.run
        note = "the accelerated executor's only engine, run directly on numpy buffers"
    else:
        progress.advance(bench_steps(runs, warmup))
        note = ("not measured" if not whole else "measured on CPU contexts only" if ctx.device_type != "cpu"
                else f"not one engine: {whole_model_note(info)}")
    workers: Dict[str, NativeProcess] = {}
    worker_note = "not measured"
    if equal_threads and ctx.device_type != "cpu":
        worker_note = "CPU contexts only"
    elif equal_threads:
        progress.phase(f"batch {batch}: binding natively and accelerated at equal threads")
        # The engines' own thread count (MXNET_TENSORRT_ORT_THREADS, else the usable CPUs).
        by_side, failed = equal_thread_workers(ckpt.symbol, ckpt.params, bshapes, feeds, threads=settings.ort_threads,
                                               control=control, env=precision_env(settings))
        workers = {f"{side} equal threads": w for side, w in by_side.items()}
        worker_note = "; ".join(f"{side} equal threads: {why}" for side, why in failed.items())
    check_warmup = {"default": warm_check(variants["accelerated"], exe)}
    if "accelerated equal threads" in workers:
        check_warmup["equal threads"] = workers["accelerated equal threads"].warm_check()
    rounds = max(1, min(BENCH_ROUNDS, runs))
    times: Dict[str, List[float]] = {k: [] for k in [*variants, *workers]}
    shares: Dict[str, Optional[Dict[str, float]]] = {}
    try:
        order = [*variants, *workers]
        for r in range(rounds):
            n = runs // rounds + (1 if r < runs % rounds else 0)
            # The order rotates: MXNet's OpenMP threads spin for a while after its forwards and
            # slow whatever runs next, so no variant always follows the same one.
            for name in order[r % len(order):] + order[:r % len(order)]:
                worker = workers.get(name)
                if worker is not None:
                    progress.phase(f"batch {batch}: {name} ({worker.threads}), round {r + 1}/{rounds}")
                    times[name] += worker.run(n, warmup if r == 0 else 1, SETTLE_S)
                    continue
                progress.phase(f"batch {batch}: {name}, round {r + 1}/{rounds}")
                times[name] += measure(variants[name], n, warmup if r == 0 else 1, progress.advance, SETTLE_S)
        shares["default"] = served_shares(exe)
        if "accelerated equal threads" in workers:
            shares["equal threads"] = workers["accelerated equal threads"].served_shares()
    finally:
        for worker in workers.values():
            worker.close()
    whole_stats = latency_stats(times["whole model"], batch) if engine is not None else None
    inside, total = info.plan.op_counts()
    nat_w, acc_w = workers.get("native equal threads"), workers.get("accelerated equal threads")
    ctl_w = workers.get("native control equal threads")
    kept = {"default": info.kept_engines()}
    if acc_w is not None:
        kept["equal threads"] = acc_w.backends
    row = BenchRow(batch, bshapes, latency_stats(times["native"], batch), latency_stats(times["accelerated"], batch),
                   whole_stats, note, len(info.engines), inside, total,
                   {"native": bind_native_s, "accelerated": bind_acc_s},
                   latency_stats(times["native equal threads"], batch) if nat_w is not None else None,
                   nat_w.threads if nat_w is not None else 0, worker_note,
                   latency_stats(times["accelerated equal threads"], batch) if acc_w is not None else None, kept,
                   shares, check_warmup,
                   latency_stats(times["native control"], batch) if native_again is not None else None,
                   latency_stats(times["native control equal threads"], batch) if ctl_w is not None else None)
    del exe, info, engine, native, variants, native_again
    return row


def served_text(shares: Optional[Mapping[str, float]]) -> str:
    """``native 12%, openvino fp32 80%``: the sides of a run-time check other than the engines the bind kept
    that served any of its forwards, with their shares of all (:func:`~mx_trt.runtime.twin.served_shares`);
    empty when the kept engines served every forward or there is no check. O(sides)."""
    return ", ".join(f"{side} {share:.0%}" for side, share in sorted((shares or {}).items())
                     if side != ENGINES and share >= 0.005)


def served_cell(row: Mapping[str, Any], key: str) -> str:
    """`` (native 12%, openvino fp32 80%)``: what served a benchmark row's accelerated executor ``key``
    (``default``, ``equal threads``) besides its kept engines, or empty. Reads the row's ``served``; rows
    written before it was recorded hold only ``native_served``."""
    shares = (row.get("served") or {}).get(key)
    if shares is None and (row.get("native_served") or {}).get(key):
        shares = {NATIVE: row["native_served"][key]}
    text = served_text(shares)
    return f" ({text})" if text else ""


def served_note(shares: Optional[Mapping[str, float]]) -> str:
    """`` (served besides the kept engines: native 12%)``, or empty (:func:`served_text`)."""
    text = served_text(shares)
    return f" (served besides the kept engines: {text})" if text else ""


def _fmt_ratio(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.2f}"


def bench_table(rows: Sequence[BenchRow]) -> str:
    """The side-by-side table ``mxtrt bench`` prints (the A/A columns when a row has the control)."""
    threads = max((r.threads for r in rows), default=0)
    eq = f"{threads}t" if threads else "eq."
    control = any(r.control is not None or r.control_threads is not None for r in rows)
    head: Tuple[str, ...] = ("batch", "native ms", "p90", "/s", f"native {eq} ms", "p90", "/s", "accel ms", "p90",
                             "/s", f"accel {eq} ms", "p90", "/s", "whole ms", "p90", "/s",
                             "native/accel", f"native {eq}/accel {eq}", "accel/whole")
    if control:
        head += ("A/A", f"A/A {eq}")
    table: List[Tuple[str, ...]] = [head]
    for r in rows:
        cells = [str(r.batch)]
        for st in (r.native, r.native_threads, r.accelerated, r.accelerated_threads, r.whole_model):
            if st is None:
                cells += ["-", "-", "-"]
            else:
                cells += [f"{st['median_ms']:.2f}", f"{st['p90_ms']:.2f}", f"{st['throughput']:.1f}"]
        ratios = r.ratios()
        cells += [_fmt_ratio(ratios["native/accelerated"]),
                  _fmt_ratio(ratios["native_equal_threads/accelerated_equal_threads"]),
                  _fmt_ratio(ratios["accelerated/whole_model"])]
        if control:
            cells += [_fmt_ratio(ratios["native/native_control"]),
                      _fmt_ratio(ratios["native_equal_threads/native_control_equal_threads"])]
        table.append(tuple(cells))
    widths = [max(len(t[i]) for t in table) for i in range(len(head))]
    lines = []
    for k, t in enumerate(table):
        lines.append("  ".join(c.rjust(w) for c, w in zip(t, widths)))
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    """Time the variants at every ``--batch`` and print the table (or JSON)."""
    batches = parse_batches(args.batch) if args.batch else None
    if args.runs < 1 or args.warmup < 0:
        raise UsageError("--runs must be >= 1 and --warmup >= 0")
    ckpt, shapes, _ = load_model(args)
    settings, ctx, backend = engine_setup(args)
    if batches is None:
        batches = default_batches(shapes)
    else:
        for b in batches:  # every batch must fit before anything is timed
            resolve_shapes(ckpt, with_batch(shapes, b))
    progress = Progress(len(batches) * bench_variants(args.control) * bench_steps(args.runs, args.warmup))
    rows = []
    try:
        for b in batches:
            rows.append(bench_one(ckpt, shapes, b, ctx, settings, backend, args.runs, args.warmup, progress,
                                  args.seed, whole=not args.no_whole, equal_threads=not args.no_equal_threads,
                                  control=args.control))
    finally:
        progress.close()
    if args.json:
        print(json.dumps({
            "model": ckpt.prefix, "inputs": {k: list(v) for k, v in shapes.items()}, "backend": backend.name,
            "ctx": args.ctx, "runs": args.runs, "warmup": args.warmup, "results": [r.to_json() for r in rows],
        }, indent=2))
    else:
        threads = max((r.threads for r in rows), default=0)
        print(f"model: {ckpt.prefix}  inputs: {shapes_text(shapes)}  backend: {backend.name}  "
              f"{args.runs} runs after {args.warmup} warm-up, latency in ms, throughput in samples/s")
        omp = settings.omp_threads if settings.omp_threads is not None else "unset"
        print(f"native: MXNet's own threads (OMP_NUM_THREADS={omp}); "
              + (f"native/accel {threads}t: OMP_NUM_THREADS={threads}, the CPUs this process may use, "
                 "in worker processes" if threads else "equal threads not measured"))
        sys.stdout.write(bench_table(rows))
        if args.control:
            print("A/A: native MXNet against itself bound a second time, timed in the same rounds: a ratio of the "
                  "accelerated executor as close to 1.00 is a tie this run cannot order")
        for r in rows:
            kept = "; ".join(f"{k}: {', '.join(v) or 'none (all native)'}{served_note(r.served.get(k))}"
                             for k, v in r.kept.items())
            print(f"batch {r.batch}: engines kept ({kept})")
            warm = "; ".join(f"{k}: {n} forwards, {t:.2f} s" for k, (n, t) in r.check_warmup.items() if n)
            if warm:
                print(f"batch {r.batch}: untimed before the timed runs, for the run-time check's first probes ({warm})")
            if r.whole_model is None:
                print(f"batch {r.batch}: whole model {r.whole_model_note}")
    return EXIT_OK
