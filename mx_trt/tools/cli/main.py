"""``mxtrt``: inspect, check and time the TensorRT pass on a saved MXNet checkpoint.

Every command takes a checkpoint prefix (``PREFIX-symbol.json`` and
``PREFIX-EPOCH.params``) and one ``--shape NAME=d0,d1,...`` per data input::

    mxtrt partition PREFIX --shape data=1,3,224,224 [--json] [--svg FILE] [--html FILE]
    mxtrt verify    PREFIX --shape data=1,3,224,224 [--input x.npz] [--rtol R --atol A]
    mxtrt bench     PREFIX --shape data=1,3,224,224 --batch 1,8,32 [--runs 20] [--json]
    mxtrt build     PREFIX --shape data=1,3,224,224 [--batch 1,8] [--max-batch N] [--cache-dir DIR]
    mxtrt export    PREFIX OUTDIR --shape data=1,3,224,224 [--max-batch N] [--triton]
    mxtrt serve     PREFIX --shape data=1,3,224,224 [--max-batch 32] [--instances N] [--http-port P ...]

Each command is a module of this package (``add_parser`` registers its
options, ``run`` runs it); this one holds the options they share, the
logging setup and the entry point (``mxtrt``, ``python -m mx_trt.tools.cli``).
The pass's environment variables (``MXNET_TENSORRT_EXCLUDE_OPS``,
``MXNET_TENSORRT_MIN_SUBGRAPH_SIZE``, ``MXNET_TENSORRT_BACKEND``...) apply as
they do at bind time. Exit status: 0 success, 1 ``verify`` found a mismatch
(or the pass failed), 2 bad input (a missing file, a malformed option or
environment value, shapes that do not fit the model or the memory, an unknown
input name, a folder that cannot be created). Every error is one line on
stderr, never a traceback (``-vv`` logs it).
"""
from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

from mx_trt.errors import CalibrationError, MxTrtError, ShapeError
from mx_trt.settings import PRECISIONS, quiet_mxnet_subgraph_log
from mx_trt.tools.cli import bench, build, export, partition, serve, verify
from mx_trt.tools.cli.checkpoint import mxnet_message
from mx_trt.tools.cli.options import EXIT_FAILED, EXIT_USAGE, INT32_MAX, UsageError, int_in

logger = logging.getLogger(__name__)

#: The logger of the commands' own messages (progress, files written): INFO unless ``-q``.
_COMMANDS_LOGGER = __name__.rpartition(".")[0]


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are :class:`UsageError` (one line, exit 2)."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    """The ``mxtrt`` argument parser: the shared options, then each command's own."""
    common = _Parser(add_help=False)
    common.add_argument("prefix", metavar="PREFIX", nargs="?", default=None,
                        help="checkpoint prefix: PREFIX-symbol.json, PREFIX-EPOCH.params")
    common.add_argument("--epoch", type=int_in(0, INT32_MAX), default=None,
                        help="params epoch (default: the latest found)")
    common.add_argument("--shape", action="append", default=[], metavar="NAME=d0,d1,...",
                        help="shape of a data input; once per input")
    common.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE|FILE.py",
                        help="import this first (registers your custom operators); repeatable")
    common.add_argument("--ctx", default="cpu", help="cpu (default), gpu or gpu:N")
    common.add_argument("--fp16", action="store_true", help="build fp16 engines (MXNET_TENSORRT_USE_FP16)")
    common.add_argument("--precision", choices=PRECISIONS, default=None,
                        help="engine precision (MXNET_TENSORRT_PRECISION); int8 needs --calibration; bf16 where a "
                             "backend computes in bfloat16 (OpenVINO on AVX512-BF16/AMX CPUs, TensorRT on GPUs with bf16)")
    common.add_argument("--calibration", metavar="TABLE.json", default=None,
                        help="calibration table of int8 engines, from mx_trt.calibrate (MXNET_TENSORRT_CALIBRATION)")
    common.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv: debug)")
    common.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only")

    ap = _Parser(prog="mxtrt", formatter_class=argparse.RawDescriptionHelpFormatter,
                 description="Inspect, check and time the TensorRT pass on a saved MXNet checkpoint.\n\n"
                             "  mxtrt partition PREFIX --shape data=1,3,224,224 [--json] [--svg FILE]\n"
                             "  mxtrt verify PREFIX --shape data=1,3,224,224 [--input x.npz]\n"
                             "  mxtrt bench PREFIX --shape data=1,3,224,224 --batch 1,8,32 [--json]\n"
                             "  mxtrt build PREFIX --shape data=1,3,224,224 [--batch 1,8] [--cache-dir DIR]\n"
                             "        [--precision int8 --calibration TABLE.json]\n"
                             "  mxtrt export PREFIX OUTDIR --shape data=1,3,224,224 [--triton]\n"
                             "  mxtrt serve PREFIX --shape data=1,3,224,224 [--max-batch 32] [--instances N]\n\n"
                             "MXNET_TENSORRT_* environment variables apply as at bind time.",
                 epilog="Exit status: 0 ok, 1 verification failed, 2 bad input.")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in (partition, verify, bench, build, export, serve):
        command.add_parser(sub, common)
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
    for name, lvl in (("mx_trt", level), ("passes", level),
                      (_COMMANDS_LOGGER, logging.WARNING if quiet else min(level, logging.INFO))):
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
    try:
        with quiet_mxnet_subgraph_log():
            return int(args.func(args))
    except (UsageError, ShapeError, CalibrationError) as exc:  # bad input: exit 2
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
    except MemoryError:
        print("mxtrt: error: out of memory (try smaller --shape or --batch values)", file=sys.stderr)
        return EXIT_FAILED
    except Exception as exc:  # a failure nothing above names: still one line; -vv logs the traceback
        print(f"mxtrt: error: {type(exc).__name__}: {_one_line(mxnet_message(exc))}"
              + ("" if args.verbose >= 2 else " (run with -vv for the traceback)"), file=sys.stderr)
        if args.verbose >= 2:
            logger.debug("details", exc_info=True)
        return EXIT_FAILED
    finally:
        _restore_logging(state)


def _one_line(exc: Any) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
