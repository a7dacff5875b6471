"""What every ``mxtrt`` command shares: exit statuses, its one error type, option parsing, engine setup.

A :class:`UsageError` is bad input; :func:`mx_trt.tools.cli.main.main` prints
it in one line and exits with :data:`EXIT_USAGE`.
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import math
import re
from typing import Any, Dict, List, Mapping, Tuple

from mx_trt.builder.backends import select_backend
from mx_trt.errors import BackendUnavailableError, MxTrtError
from mx_trt.settings import Settings

logger = logging.getLogger(__name__)

Shape = Tuple[int, ...]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

#: Largest dimension (and, unless MXNet is built with ``USE_INT64_TENSOR_SIZE``,
#: largest element count) MXNet 1.9.1 handles: its shapes are 32-bit signed.
INT32_MAX = 2**31 - 1


class UsageError(MxTrtError):
    """Bad command-line input: reported in one line, exit status 2."""


def parse_shape(text: str) -> Tuple[str, Shape]:
    """``"data=1,3,224,224"`` -> ``("data", (1, 3, 224, 224))``.

    Raises:
        UsageError: not ``NAME=d0,d1,...`` with positive integers, or a
            dimension over :data:`INT32_MAX`. (The element count is checked
            against the model in :func:`~.checkpoint.resolve_shapes`.)
    """
    name, sep, dims = text.partition("=")
    name = name.strip()
    parts = [p.strip() for p in dims.replace("x", ",").split(",")] if sep else []
    if not name or not parts or not all(re.fullmatch(r"[0-9]+", p) and p.strip("0") for p in parts):
        raise UsageError(f"--shape {text!r}: expected NAME=d0,d1,... with positive integers, e.g. data=1,3,224,224")
    digits = [p.lstrip("0") for p in parts]
    if any(len(d) > 10 or int(d) > INT32_MAX for d in digits):
        raise UsageError(f"--shape {text!r}: a dimension is over {INT32_MAX}, the largest MXNet handles")
    return name, tuple(int(d) for d in digits)


def _number(text: str, kind: Any, what: str) -> Any:
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None


def tolerance(text: str) -> float:
    """An argparse type: a finite number >= 0 (``--rtol``, ``--atol``).

    Raises:
        argparse.ArgumentTypeError: anything else (``nan``, ``inf``, negative).
    """
    value = _number(text, float, "a finite number >= 0")
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    return float(value)


def int_in(lo: int, hi: int) -> Any:
    """An argparse type: an integer in ``[lo, hi]``.

    Raises:
        argparse.ArgumentTypeError: not an integer, or outside the range.
    """
    def parse(text: str) -> int:
        value = _number(text.strip(), int, f"an integer from {lo} to {hi}")
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"expected an integer from {lo} to {hi}, got {text!r}")
        return int(value)

    parse.__name__ = "integer"
    return parse


#: The argparse type of ``--seed``: numpy's ``RandomState`` takes 0 to 2**32 - 1.
SEED = int_in(0, 2**32 - 1)


def parse_batches(text: str) -> List[int]:
    """``"1,8,32"`` -> ``[1, 8, 32]``.

    Raises:
        UsageError: not a comma-separated list of positive integers.
    """
    parts = [p.strip().lstrip("0") or "0" for p in text.split(",") if p.strip()]
    if not parts or not all(re.fullmatch(r"[0-9]{1,10}", p) and 0 < int(p) <= INT32_MAX for p in parts):
        raise UsageError(f"--batch {text!r}: expected integers from 1 to {INT32_MAX} separated by commas, e.g. 1,8,32")
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
    return dataclasses.replace(settings, fp16=True, int8=False, bf16=False) if fp16 else settings


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
    p.add_argument("--max-batch", type=int_in(1, INT32_MAX), default=None, metavar="N",
                   help="dynamic batch engines for 1..N (MXNET_TENSORRT_MAX_BATCH_SIZE)")


def check_max_batch(args: argparse.Namespace) -> None:
    """Raises:
        UsageError: ``--max-batch`` given and outside ``[1, 2**31 - 1]`` (the parser checks it too).
    """
    if args.max_batch is not None and not 1 <= args.max_batch <= INT32_MAX:
        raise UsageError(f"--max-batch must be from 1 to {INT32_MAX}")


def engine_setup(args: argparse.Namespace) -> Tuple[Settings, Any, Any]:
    """Settings (``--fp16``, and ``--max-batch`` where the command has it), context and backend.

    Raises:
        UsageError: a malformed environment variable, a bad ``--ctx``, or no
            backend for the context.
    """
    settings = settings_from_env(args.fp16)
    chosen: Dict[str, Any] = {}
    if getattr(args, "precision", None):
        chosen["precision"] = args.precision
    if getattr(args, "calibration", None):
        chosen["calibration"] = args.calibration
    if chosen:
        if args.fp16 and chosen.get("precision", "fp16") != "fp16":
            raise UsageError(f"--fp16 and --precision {chosen['precision']} ask for two precisions")
        try:
            settings = settings.with_options(chosen, "command line")
        except MxTrtError as exc:
            raise UsageError(str(exc).replace("calibration option", "--calibration option")) from None
    try:
        settings.check_int8()
    except MxTrtError as exc:
        raise UsageError(str(exc).replace("calibration option", "--calibration option")) from None
    max_batch = getattr(args, "max_batch", None)
    if max_batch is not None:
        settings = dataclasses.replace(settings, max_batch_size=max_batch)
    ctx = parse_ctx(args.ctx)
    return settings, ctx, backend_for(ctx, settings)
