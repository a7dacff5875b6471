"""``mxtrt serve``: serve a checkpoint with Triton Inference Server, bound with the pass, until SIGTERM."""
from __future__ import annotations

import argparse
import math
import os
import re
from typing import Any, Dict

import numpy as np

from mx_trt.errors import ServeError
from mx_trt.serving.repository import TRITON_TYPES, check_model_name
from mx_trt.serving.server import GRACE_PERIOD_S, Endpoints, ServeOptions, serve
from mx_trt.tools.cli.checkpoint import load_model
from mx_trt.tools.cli.options import INT32_MAX, UsageError, int_in

#: Largest batch ``--max-batch`` takes (Triton's batches of Python-backend models are gathered in memory).
MAX_BATCH_LIMIT = 65536


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``serve`` and its options on the subcommand set ``sub``."""
    p = sub.add_parser("serve", parents=[common], help="serve the checkpoint with Triton Inference Server",
                       description="Serve the checkpoint through Triton (HTTP, gRPC, health, metrics), bound with "
                                   "the pass, with dynamic batching inside the engines' batch profile. Dimension 0 "
                                   "of --shape is the batch and is ignored. SIGTERM drains the requests in flight "
                                   "and stops within --grace-period.")
    add_serve_options(p)
    p.add_argument("--host", default="127.0.0.1", metavar="ADDR",
                   help="the IPv4 address HTTP, gRPC and metrics listen on (default 127.0.0.1, this machine only; "
                        "0.0.0.0: every interface)")
    p.add_argument("--grace-period", type=_seconds, default=GRACE_PERIOD_S, metavar="S",
                   help=f"on SIGTERM, seconds the requests in flight get to finish before the server stops "
                        f"(default {GRACE_PERIOD_S:g})")
    p.add_argument("--http-port", type=int_in(0, 65535), default=8000, help="HTTP port (default 8000; 0: a free one)")
    p.add_argument("--grpc-port", type=int_in(0, 65535), default=8001, help="gRPC port (default 8001; 0: a free one)")
    p.add_argument("--metrics-port", type=int_in(0, 65535), default=8002,
                   help="Prometheus metrics port (default 8002; 0: a free one)")
    p.set_defaults(func=run)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"{text!r}: give seconds in (0, 3600]")
    return value


def add_serve_options(p: argparse.ArgumentParser, max_batch: bool = True) -> None:
    """The options ``serve`` and ``export --triton`` share (``export`` has its own ``--max-batch``)."""
    if max_batch:
        p.add_argument("--max-batch", type=int_in(1, MAX_BATCH_LIMIT), default=32, metavar="N",
                       help="largest batch the dynamic batcher forms and the engines take (default 32)")
    p.add_argument("--max-queue-delay-us", type=int_in(0, INT32_MAX), default=2000, metavar="US",
                   help="how long the batcher waits to fill a batch, in microseconds (default 2000)")
    p.add_argument("--instances", type=int_in(1, 64), default=1, metavar="N",
                   help="model instances (processes sharing the plan cache; default 1)")
    p.add_argument("--model-name", default=None, metavar="NAME", help="model name (default: the checkpoint's base name)")
    p.add_argument("--dtype", action="append", default=[], metavar="NAME=TYPE",
                   help="dtype of a data input (default float32), e.g. token_ids=int32; once per input")
    p.add_argument("--allow-nonfinite", action="store_true", help="accept NaN and Inf inputs (refused by default)")


def parse_dtypes(args: argparse.Namespace, inputs: Any) -> Dict[str, str]:
    """``--dtype NAME=TYPE`` values, checked against the model's inputs and Triton's types.

    Raises:
        UsageError: malformed, repeated, an unknown input or a type Triton does not carry.
    """
    out: Dict[str, str] = {}
    for text in args.dtype:
        m = re.fullmatch(r"\s*([^=\s]+)\s*=\s*(\w+)\s*", text)
        if not m:
            raise UsageError(f"--dtype {text!r}: expected NAME=TYPE, e.g. token_ids=int32")
        name, kind = m.group(1), m.group(2)
        try:
            kind = np.dtype(kind).name
        except TypeError:
            raise UsageError(f"--dtype {text!r}: {m.group(2)!r} is not a dtype") from None
        if kind not in TRITON_TYPES:
            raise UsageError(f"--dtype {text!r}: Triton carries {', '.join(sorted(TRITON_TYPES))}")
        if name not in inputs:
            raise UsageError(f"--dtype {text!r}: unknown input {name!r} (the model's inputs: {', '.join(inputs)})")
        if name in out:
            raise UsageError(f"--dtype {name} is given twice")
        out[name] = kind
    return out


def serve_options(args: argparse.Namespace, prefix: str) -> ServeOptions:
    """:class:`ServeOptions` from the parsed options.

    Raises:
        UsageError: a model name Triton refuses, or two ports alike.
    """
    name = args.model_name or os.path.basename(os.path.abspath(prefix))
    try:
        check_model_name(name)
    except ServeError as exc:
        raise UsageError(f"{exc} (set one with --model-name)") from None
    ports = [getattr(args, k, 0) for k in ("http_port", "grpc_port", "metrics_port")]
    fixed = [p for p in ports if p]
    if len(set(fixed)) != len(fixed):
        raise UsageError(f"--http-port, --grpc-port and --metrics-port must differ, got {ports}")
    return ServeOptions(max_batch=args.max_batch or 32, max_queue_delay_us=args.max_queue_delay_us,
                        instances=args.instances, http_port=ports[0], grpc_port=ports[1], metrics_port=ports[2],
                        model_name=name, allow_nonfinite=args.allow_nonfinite,
                        host=getattr(args, "host", "127.0.0.1"),
                        grace_period_s=getattr(args, "grace_period", GRACE_PERIOD_S),
                        imports=[os.path.abspath(m) if m.endswith(".py") else m for m in args.imports])


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM or SIGINT; the exit status is the server's (0 after a clean drain).

    Raises:
        UsageError: bad options or a checkpoint that does not fit them.
        ServeError: the server cannot start or load the model.
    """
    ckpt, shapes, _ = load_model(args)
    dtypes = parse_dtypes(args, ckpt.data_inputs())
    opts = serve_options(args, ckpt.prefix)
    return serve(ckpt.prefix, ckpt.epoch, shapes, dtypes, opts, banner=_banner)


def _banner(e: Endpoints) -> None:
    where = " (every interface)" if e.http.startswith("0.0.0.0:") else ""
    print(f"serving {e.model}: HTTP {e.http}, gRPC {e.grpc}, metrics {e.metrics}{where} "
          "(SIGTERM or Ctrl-C stops)", flush=True)
