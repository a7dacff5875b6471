"""What every ``mxtrt`` command shares: exit statuses, its one error type, option parsing, engine setup.

A :class:`UsageError` is bad input; :func:`mx_trt.tools.cli.main.main` prints
it in one line and exits with :data:`EXIT_USAGE`.
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import re
from typing import Any, Dict, List, Mapping, Tuple

from mx_trt.build.backends import select_backend
from mx_trt.errors import BackendUnavailableError, MxTrtError
from mx_trt.settings import Settings

logger = logging.getLogger(__name__)

Shape = Tuple[int, ...]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class UsageError(MxTrtError):
    """Bad command-line input: reported in one line, exit status 2."""


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


def shapes_text(shapes: Mapping[str, Shape]) -> str:
    """``{"data": (1, 3, 8, 8)}`` -> ``"data=1,3,8,8"`` (``"(none)"`` when empty)."""
    return ", ".join(f"{k}={','.join(str(d) for d in v)}" for k, v in shapes.items()) or "(none)"


def with_batch(shapes: Mapping[str, Shape], batch: int) -> Dict[str, Shape]:
    """``shapes`` with dimension 0 of every input replaced by ``batch``."""
    return {k: (batch,) + tuple(v[1:]) for k, v in shapes.items()}


def default_batches(shapes: Mapping[str, Shape]) -> List[int]:
    """The batch of the first ``--shape`` (1 for a model without inputs), as a one-element list."""
    first = next(iter(shapes.values()), None)
    return [first[0] if first else 1]


def write_text(path: str, text: str) -> None:
    """Write ``text`` to ``path`` (UTF-8).

    Raises:
        UsageError: the file cannot be written.
    """
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


def settings_from_env(fp16: bool = False) -> Settings:
    """:meth:`Settings.from_env`, with ``fp16`` forced on if asked.

    Raises:
        UsageError: a malformed environment variable.
    """
    try:
        settings = Settings.from_env()
    except MxTrtError as exc:
        raise UsageError(str(exc)) from None
    return dataclasses.replace(settings, fp16=True) if fp16 else settings


def backend_for(ctx: Any, settings: Settings) -> Any:
    """The engine backend for ``ctx``.

    Raises:
        UsageError: none can serve it (or the forced one is not installed).
    """
    try:
        return select_backend(ctx.device_type, settings.backend)
    except BackendUnavailableError as exc:
        raise UsageError(str(exc)) from None


def add_max_batch(p: argparse.ArgumentParser) -> None:
    """Add ``--max-batch N`` (dynamic batch engines, as ``MXNET_TENSORRT_MAX_BATCH_SIZE``) to ``p``."""
    p.add_argument("--max-batch", type=int, default=None, metavar="N",
                   help="dynamic batch engines for 1..N (MXNET_TENSORRT_MAX_BATCH_SIZE)")


def check_max_batch(args: argparse.Namespace) -> None:
    """Raises:
        UsageError: ``--max-batch`` given and below 1.
    """
    if args.max_batch is not None and args.max_batch < 1:
        raise UsageError("--max-batch must be >= 1")


def engine_setup(args: argparse.Namespace) -> Tuple[Settings, Any, Any]:
    """Settings (``--fp16``, and ``--max-batch`` where the command has it), context and backend.

    Raises:
        UsageError: a malformed environment variable, a bad ``--ctx``, or no
            backend for the context.
    """
    settings = settings_from_env(args.fp16)
    max_batch = getattr(args, "max_batch", None)
    if max_batch is not None:
        settings = dataclasses.replace(settings, max_batch_size=max_batch)
    ctx = parse_ctx(args.ctx)
    return settings, ctx, backend_for(ctx, settings)
