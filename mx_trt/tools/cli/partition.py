"""``mxtrt partition``: the subgraphs, the shares in engines, the native nodes and why."""
from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any, Dict

from mx_trt.export.converters import list_converters
from mx_trt.pipeline.int8 import subgraph_precisions
from mx_trt.pipeline.plan import analyze
from mx_trt.pipeline.request import BindRequest
from mx_trt.tools.report import build_report, render_html, render_svg, render_table, report_to_json
from mx_trt.tools.cli.binding import bind_accelerated, decision_json, decisions_text
from mx_trt.tools.cli.checkpoint import import_user_module, load_model
from mx_trt.tools.cli.options import EXIT_OK, engine_setup, write_text

logger = logging.getLogger(__name__)


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``partition`` and its options on the subcommand set ``sub``."""
    p = sub.add_parser("partition", parents=[common], help="subgraphs, shares in engines, native nodes and why",
                       description="Show how the pass partitions the model (no engine is built unless --build).")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    p.add_argument("--svg", metavar="FILE", help="draw the graph as SVG: subgraphs coloured, native nodes with reasons")
    p.add_argument("--html", metavar="FILE", help="an HTML page with the tables and the drawing")
    p.add_argument("--collapse", action=argparse.BooleanOptionalAction, default=None,
                   help="draw each subgraph as one box (default: from 1,000 operators)")
    p.add_argument("--build", action="store_true", help="also build the engines and report build failures")
    p.add_argument("--list-converters", action="store_true",
                   help="list every registered operator, its source (built-in, user: module.function or plugin: domain::op) "
                        "and backends; no PREFIX needed")
    p.set_defaults(func=run)


def print_converters(args: argparse.Namespace) -> int:
    """Print the converter registry (after ``--import``): op, source, backends, priority; JSON with ``--json``."""
    for spec in args.imports:
        import_user_module(spec)
    rows = list_converters()
    if args.json:
        print(json.dumps([{"op": r.op, "source": r.source, "backends": r.backends, "priority": r.priority,
                           "active": r.active} for r in rows], indent=2))
        return EXIT_OK
    width = max(len(r.op) for r in rows)
    lines = [f"{'operator':<{width}}  {'source':<10}  backends  priority"]
    for r in rows:
        note = "" if r.active else "  (not used: another comes first)"
        lines.append(f"{r.op:<{width}}  {r.source:<10}  {r.backends:<8}  {r.priority}{note}")
    sys.stdout.write("\n".join(lines) + "\n")
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    """Analyse (or, with ``--build``, bind) the model and print or draw its partition report."""
    if args.list_converters:
        return print_converters(args)
    ckpt, shapes, _ = load_model(args)
    settings, ctx, backend = engine_setup(args)
    failures: Dict[str, str] = {}
    decisions: Dict[str, Any] = {}
    if args.build:
        _, info = bind_accelerated(ckpt, shapes, ctx, settings, backend)
        plan, failures, decisions = info.plan, dict(info.native_failures), dict(info.decisions)
    else:
        plan = analyze(BindRequest(symbol=ckpt.symbol, shapes=shapes, params=ckpt.params, settings=settings, backend=backend))
    report = build_report(plan, model=ckpt.prefix, backend=backend.name, failures=failures,
                          precisions=subgraph_precisions(plan, settings))
    for path, render in ((args.svg, render_svg), (args.html, render_html)):
        if path:
            write_text(path, render(report, plan, collapse=args.collapse))
            logger.info("wrote %s", path)
    if args.json:
        doc = report_to_json(report)
        if decisions:
            doc["decisions"] = {k: decision_json(d) for k, d in decisions.items()}
        print(json.dumps(doc, indent=2))
    else:
        sys.stdout.write(render_table(report))
        sys.stdout.write(decisions_text(decisions))
    return EXIT_OK

