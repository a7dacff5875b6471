"""``mxtrt export PREFIX --onnx OUT.onnx``: the whole model as one ONNX file (:func:`mx_trt.export_onnx`)."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Dict

from mx_trt.artifacts_onnx import EXPORT_OPSET, MAX_OPSET, MIN_OPSET, ONNX_MAX_BYTES, export_onnx
from mx_trt.errors import NotConvertibleError
from mx_trt.tools.cli.checkpoint import load_model
from mx_trt.tools.cli.options import EXIT_FAILED, EXIT_OK, UsageError, int_in
from mx_trt.tools.cli.serve import parse_dtypes


def add_options(p: argparse.ArgumentParser) -> None:
    """Add ``--onnx`` and the options only it reads to the ``export`` parser ``p``."""
    p.add_argument("--onnx", metavar="OUT.onnx", default=None,
                   help="write the whole model as one ONNX file instead (no OUTDIR; fails, listing each operator "
                        "and why, unless every operator converts); --precision/--calibration/--fp16 as for a bind, "
                        "--dtype NAME=TYPE for integer inputs")
    p.add_argument("--opset", type=int_in(MIN_OPSET, MAX_OPSET), default=EXPORT_OPSET, metavar="N",
                   help=f"ONNX opset of --onnx, {MIN_OPSET} to {MAX_OPSET} (default {EXPORT_OPSET})")
    p.add_argument("--static-batch", action="store_true",
                   help="--onnx: keep the --shape batch fixed (by default dimension 0 is dynamic where the graph "
                        "allows it)")
    p.add_argument("--external-threshold", type=int_in(0, ONNX_MAX_BYTES), default=ONNX_MAX_BYTES, metavar="BYTES",
                   help="--onnx: from this size, the weights go to OUT.onnx.data beside the file (default: "
                        "protobuf's 2 GB limit)")


def _options(args: argparse.Namespace) -> Dict[str, Any]:
    """The bind options the command line asks for (``--fp16``, ``--precision``, ``--calibration``)."""
    if args.fp16 and args.precision not in (None, "fp16"):
        raise UsageError(f"--fp16 and --precision {args.precision} ask for two precisions")
    options: Dict[str, Any] = {}
    if args.fp16 or args.precision:
        options["precision"] = "fp16" if args.fp16 else args.precision
    if args.calibration:
        options["calibration"] = args.calibration
    return options


def run(args: argparse.Namespace) -> int:
    """Write ``args.onnx``; print what was written (``--json``: as JSON), or each operator that does not convert.

    Raises:
        UsageError: an OUTDIR given too, or bad options; the errors of :func:`mx_trt.export_onnx`.
    """
    if args.outdir:
        raise UsageError(f"--onnx writes one file: give no OUTDIR (got {args.outdir!r})")
    ckpt, shapes, _ = load_model(args)
    dtypes = parse_dtypes(args, ckpt.data_inputs())
    try:
        result = export_onnx(ckpt.symbol, ckpt.params, shapes, args.onnx, type_dict=dtypes or None, opset=args.opset,
                             dynamic_batch=not args.static_batch, external_threshold=args.external_threshold,
                             **_options(args))
    except NotConvertibleError as exc:
        print(f"mxtrt: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
        return EXIT_OK
    io = ", ".join(f"{n}{list(s)} {d}" for n, s, d in result.inputs)
    out = ", ".join(f"{n}{list(s)} {d}" for n, s, d in result.outputs)
    print(f"wrote {result.path}: {ckpt.prefix} whole, ONNX opset {result.opset}, {result.precision}, "
          f"{'batch-dynamic' if result.batch_dynamic else 'static batch'}, {result.bytes / 1e6:.1f} MB"
          + (f" (weights in {result.data_path})" if result.data_path else ""))
    print(f"  inputs {io}\n  outputs {out}")
    if result.static_reason:
        print(f"  static batch because {result.static_reason}")
    if result.precision == "int8":
        print(f"  int8: {len(result.quantized)} operator(s) quantized, {len(result.kept_float)} kept in float")
    print("run it with ONNX Runtime, TensorRT or Triton's onnxruntime backend; MXNet is not needed")
    return EXIT_OK
