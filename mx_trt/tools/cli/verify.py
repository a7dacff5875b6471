"""``mxtrt verify``: native vs accelerated outputs against the precision's tolerance."""
from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from mx_trt.tools.cli.binding import bind_accelerated, bind_native, run_executor
from mx_trt.tools.cli.checkpoint import load_model, random_inputs
from mx_trt.tools.cli.options import EXIT_FAILED, EXIT_OK, SEED, Shape, engine_setup, shapes_text, tolerance

#: (rtol, atol) per engine precision for ``verify``: an output passes when
#: ``max|accelerated - native| <= atol + rtol * max|native|`` (errors measured
#: against the output's own scale, as rounding over many layers grows with it).
#: int8 engines round every quantized tensor to 1/127 of its calibrated range (or clip it),
#: so their outputs are checked at a tenth of the output's range.
#: (rtol of max|native|, atol) per precision. bfloat16 keeps 8 bits of mantissa against float16's 11.
TOLERANCES: Dict[str, Tuple[float, float]] = {"float32": (1e-3, 1e-4), "float16": (1e-2, 1e-2), "bfloat16": (3e-2, 1e-2),
                                              "int8": (1e-1, 1e-4)}


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``verify`` and its options on the subcommand set ``sub``."""
    p = sub.add_parser("verify", parents=[common], help="compare accelerated outputs with native MXNet",
                       description="Bind natively and accelerated, run the same inputs, compare every output.")
    p.add_argument("--input", "--inputs", dest="input", metavar="FILE", help=".npy (single-input model) or .npz keyed by input name; "
                   "default: seeded random inputs")
    p.add_argument("--seed", type=SEED, default=0, help="seed of the random inputs (0 to 2**32 - 1)")
    p.add_argument("--rtol", type=tolerance, default=None,
                   help="relative tolerance (of max|native|), a finite number >= 0; default by precision")
    p.add_argument("--atol", type=tolerance, default=None, help="absolute tolerance, a finite number >= 0; "
                   "default by precision")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


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

    An output passes when its shape matches, every non-finite value (NaN,
    +-Inf) is the same in both at the same place, and ``max_abs <= atol + rtol *
    max|ref|`` over the finite values (``max|ref|`` too is over the finite ones).
    """
    out = []
    for name, r, g in zip(names, ref, got):
        r64 = r.astype(np.float64).ravel()
        g64 = g.astype(np.float64).ravel()
        if r.shape != g.shape:
            out.append(OutputCheck(name, tuple(g.shape), math.inf, math.inf, 0.0, 0.0, False))
            continue
        fin_r, fin_g = np.isfinite(r64), np.isfinite(g64)
        same_special = (~fin_r & ~fin_g) & ((np.isnan(r64) & np.isnan(g64)) | (r64 == g64))
        both = fin_r & fin_g
        scale = float(np.max(np.abs(r64[fin_r]))) if fin_r.any() else 0.0
        diff = np.abs(g64[both] - r64[both])
        max_abs = float(np.max(diff)) if diff.size else 0.0
        if not np.all(both | same_special):
            max_abs = math.inf
        r64, g64 = np.where(both, r64, 0.0), np.where(both, g64, 0.0)  # cosine over the finite values
        nr, ng = float(np.linalg.norm(r64)), float(np.linalg.norm(g64))
        cosine = 1.0 if nr == 0 and ng == 0 else (float(np.dot(r64, g64)) / (nr * ng) if nr and ng else 0.0)
        allowed = atol + rtol * scale
        out.append(OutputCheck(name, tuple(r.shape), max_abs, max_abs / scale if scale else max_abs, cosine,
                               allowed, max_abs <= allowed))
    return out


def _num(x: float) -> Optional[float]:
    return None if math.isinf(x) or math.isnan(x) else x


def _print_table(checks: Sequence[OutputCheck]) -> None:
    rows = [("output", "shape", "max abs err", "max rel err", "cosine", "allowed abs", "result")]
    for c in checks:
        rows.append((c.name, "x".join(str(d) for d in c.shape), f"{c.max_abs:.3g}", f"{c.max_rel:.3g}",
                     f"{c.cosine:.6f}", f"{c.allowed:.3g}", "pass" if c.ok else "FAIL"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for k, r in enumerate(rows):
        print("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip())
        if k == 0:
            print("  ".join("-" * w for w in widths))


def run(args: argparse.Namespace) -> int:
    """Bind natively and accelerated, run the same inputs, print the verdict per output.

    Returns:
        ``EXIT_OK`` if every output is within tolerance, else ``EXIT_FAILED``.
    """
    ckpt, shapes, arrays = load_model(args, args.input)
    settings, ctx, backend = engine_setup(args)
    precision = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}.get(settings.precision, settings.precision)
    rtol, atol = TOLERANCES[precision]
    rtol = args.rtol if args.rtol is not None else rtol
    atol = args.atol if args.atol is not None else atol
    if arrays is not None:
        feeds = {k: np.asarray(v, dtype="float32") for k, v in arrays.items() if k in shapes}
        source = args.input
    else:
        feeds = random_inputs(shapes, args.seed)
        source = f"seeded random uniform[0, 1), seed {args.seed}"
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
        print(f"model: {ckpt.prefix}  inputs: {shapes_text(shapes)}  ({source})")
        print(f"backend: {backend.name}, {len(info.engines)} engine(s) holding {inside} of {total} operators")
        _print_table(checks)
        verdict = "PASS" if ok else "FAIL"
        where = "set by --rtol/--atol" if args.rtol is not None or args.atol is not None else f"{precision} default"
        print(f"{verdict}: {sum(c.ok for c in checks)} of {len(checks)} outputs within max|err| <= "
              f"{atol:g} + {rtol:g} * max|native| ({where}; max rel err is relative to max|native|)")
    return EXIT_OK if ok else EXIT_FAILED
