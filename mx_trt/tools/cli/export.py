"""``mxtrt export``: the optimized symbol, the remaining params and the engines, for :func:`mx_trt.load`."""
from __future__ import annotations

import argparse
import json
import os
import tempfile
from typing import Any

from mx_trt.artifacts import export_model
from mx_trt.tools.cli.checkpoint import load_model
from mx_trt.tools.cli.options import EXIT_OK, UsageError, add_max_batch, check_max_batch, engine_setup, shapes_text


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``export`` and its options on the subcommand set ``sub``."""
    p = sub.add_parser("export", parents=[common], help="write the optimized model and its engines to a folder",
                       description="Bind with the pass and write OUTDIR: the optimized symbol, the remaining "
                                   "params and the engines; mx_trt.load(OUTDIR, ctx) binds it again "
                                   "without building anything.")
    p.add_argument("outdir", metavar="OUTDIR", help="target folder (created)")
    add_max_batch(p)
    p.add_argument("--force", action="store_true", help="replace an earlier export in OUTDIR")
    p.add_argument("--json", action="store_true", help="print the manifest")
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
    check_max_batch(args)
    outdir = os.path.abspath(args.outdir)
    if os.path.exists(outdir) and not os.path.isdir(outdir):
        raise UsageError(f"{outdir} is a file, not a folder")
    if os.path.isdir(outdir) and os.listdir(outdir) and not args.force:
        raise UsageError(f"{outdir} is not empty (use --force to replace an earlier export)")
    ckpt, shapes, _ = load_model(args)
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
