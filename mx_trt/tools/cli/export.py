"""``mxtrt export``: the optimized symbol, the remaining params and the engines, for :func:`mx_trt.load`."""
from __future__ import annotations

import argparse
import json
import os
import tempfile
from typing import Any, List, Tuple

from mx_trt.artifacts import export_model
from mx_trt.builder.backends import BACKENDS
from mx_trt.builder.backends.tensorrt import TensorRTBackend
from mx_trt.errors import MxTrtError
from mx_trt.serving.engine_models import variants_note, whole_model_export, write_onnx_model, write_plan_model
from mx_trt.serving.repository import replace_problem, write_python_model
from mx_trt.serving.server import input_specs
from mx_trt.tools.cli import onnx_file
from mx_trt.tools.cli.checkpoint import load_model
from mx_trt.tools.cli.options import (
    EXIT_OK,
    UsageError,
    add_max_batch,
    check_max_batch,
    engine_setup,
    settings_from_env,
    shapes_text,
)
from mx_trt.tools.cli.serve import add_serve_options, parse_dtypes, serve_options


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``export`` and its options on the subcommand set ``sub``."""
    p = sub.add_parser("export", parents=[common], help="write the optimized model and its engines to a folder",
                       description="Bind with the pass and write OUTDIR: the optimized symbol, the remaining "
                                   "params and the engines; mx_trt.load(OUTDIR, ctx) binds it again "
                                   "without building anything. With --onnx OUT.onnx instead of OUTDIR: the whole "
                                   "model as one ONNX file that runs without MXNet.")
    p.add_argument("outdir", metavar="OUTDIR", nargs="?", default=None, help="target folder (created)")
    add_max_batch(p)
    p.add_argument("--force", action="store_true", help="replace an earlier export in OUTDIR")
    p.add_argument("--json", action="store_true", help="print the manifest")
    p.add_argument("--triton", action="store_true",
                   help="write a Triton model repository instead: OUTDIR/NAME with config.pbtxt and a Python-backend "
                        "model whose instances bind the checkpoint with mx_trt; a graph entirely in one engine also "
                        "gets OUTDIR/NAME_onnx (onnxruntime_onnx) and, where TensorRT builds, OUTDIR/NAME_trt "
                        "(tensorrt_plan, for this machine's GPU)")
    add_serve_options(p, max_batch=False)
    onnx_file.add_options(p)
    p.set_defaults(func=run)


def _check_writable(outdir: str) -> None:
    """Create ``outdir`` (and its parents) and check that a file can be written in it.

    Raises:
        UsageError: a file in the way, a read-only or missing parent, no permission.
    """
    try:
        os.makedirs(outdir, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".mxtrt-probe-", dir=outdir)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename and os.fspath(exc.filename) != outdir else ""
        raise UsageError(f"cannot create the export folder {outdir}: {exc.strerror or exc}{where}") from None


def run(args: argparse.Namespace) -> int:
    """Bind with the pass and write OUTDIR; print what was written and how to bind it again.

    Raises:
        UsageError: a bad ``--max-batch``, OUTDIR a file, not empty without
            ``--force``, or a folder that cannot be created or written.
    """
    if args.onnx:
        return onnx_file.run(args)
    if not args.outdir:
        raise UsageError("the following arguments are required: OUTDIR (or --onnx OUT.onnx)")
    check_max_batch(args)
    outdir = os.path.abspath(args.outdir)
    if os.path.exists(outdir) and not os.path.isdir(outdir):
        raise UsageError(f"{outdir} is a file, not a folder")
    if os.path.isdir(outdir) and os.listdir(outdir) and not args.force:
        raise UsageError(f"{outdir} is not empty (use --force to replace an earlier export)")
    ckpt, shapes, _ = load_model(args)
    if args.triton:
        return _triton(args, ckpt, shapes, outdir)
    settings, ctx, backend = engine_setup(args)
    _check_writable(outdir)
    manifest = export_model(ckpt.symbol, ctx, ckpt.params, shapes, outdir, settings, backend, overwrite=args.force)
    if args.json:
        print(json.dumps(manifest, indent=2))
    else:
        print(f"exported {ckpt.prefix} to {outdir}: {len(manifest['engines'])} engine(s) "
              f"({manifest['backend_version']}, {manifest['device']}), inputs {shapes_text(shapes)}")
        for name, why in manifest["native_failures"].items():
            print(f"  {name} stays native: {why}")
        print(f"bind it with: mx_trt.load({outdir!r}, mx.{ctx.device_type}())")
    return EXIT_OK


def _triton(args: argparse.Namespace, ckpt: Any, shapes: Any, outdir: str) -> int:
    """``--triton``: the Python-backend model ``OUTDIR/NAME`` (:mod:`mx_trt.serving.repository`) and, for a graph
    that is one engine, the models without Python (:func:`_engine_variants`)."""
    dtypes = parse_dtypes(args, ckpt.data_inputs())
    opts = serve_options(args, ckpt.prefix)
    name = str(opts.model_name)
    _check_writable(outdir)
    for folder in (name, f"{name}_onnx", f"{name}_trt"):  # before anything is written
        path = os.path.join(outdir, folder)
        problem = replace_problem(path, folder) if os.path.lexists(path) else None
        if problem is not None:
            raise UsageError(f"{path} {problem}: not replacing it (move it away, or export to another folder)")
    spec = write_python_model(outdir, name, ckpt.symbol, ckpt.arg_params, ckpt.aux_params,
                              input_specs(shapes, dtypes), opts.max_batch, opts.max_queue_delay_us, opts.instances,
                              allow_nonfinite=opts.allow_nonfinite, imports=list(opts.imports))
    written, skipped = _engine_variants(args, ckpt, spec, outdir, name, opts)
    if args.json:
        print(json.dumps({"repository": outdir, "model": name, **spec.to_json(), "variants": written,
                          "variants_not_written": skipped}, indent=2))
    else:
        print(f"wrote the Triton model {os.path.join(outdir, name)} (python backend, max batch {spec.max_batch}, "
              f"{opts.instances} instance(s)), inputs {', '.join(t.name for t in spec.inputs)}, outputs "
              f"{', '.join(t.name for t in spec.outputs)}")
        print(variants_note(written, skipped))
        print(f"serve it with: tritonserver --model-repository={outdir} (mx_trt[serve] installed in the server's Python)")
    return EXIT_OK


def _engine_variants(args: argparse.Namespace, ckpt: Any, spec: Any, outdir: str, name: str,
                     opts: Any) -> Tuple[List[str], List[str]]:
    """The models without Python (:mod:`mx_trt.serving.engine_models`): (folders written, reasons for the others)."""
    written: List[str] = []
    skipped: List[str] = []
    common = (spec.inputs, spec.outputs, spec.max_batch, opts.max_queue_delay_us, opts.instances)
    settings = settings_from_env(args.fp16)
    onnx, why = whole_model_export(ckpt.symbol, ckpt.params, spec.inputs, spec.outputs, spec.max_batch,
                                   BACKENDS["onnxruntime"](), settings)
    if onnx is None:
        skipped.append(f"{name}_onnx (onnxruntime_onnx): {why}")
        skipped.append(f"{name}_trt (tensorrt_plan): {why}")
        return written, skipped
    written.append(write_onnx_model(outdir, f"{name}_onnx", onnx, *common))
    trt = TensorRTBackend
    reason = trt.build_unavailable_reason()
    if reason is not None:
        skipped.append(f"{name}_trt (tensorrt_plan): {reason}")
        return written, skipped
    backend = trt()
    exported, why = whole_model_export(ckpt.symbol, ckpt.params, spec.inputs, spec.outputs, spec.max_batch, backend,
                                       settings)
    if exported is None:
        skipped.append(f"{name}_trt (tensorrt_plan): {why}")
        return written, skipped
    try:
        written.append(write_plan_model(outdir, f"{name}_trt", exported, *common, backend=backend,
                                        engine_options=settings.engine_options()))
    except MxTrtError as exc:
        skipped.append(f"{name}_trt (tensorrt_plan): {exc}")
    return written, skipped
