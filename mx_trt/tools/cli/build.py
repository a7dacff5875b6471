"""``mxtrt build``: build the engines ahead of time into the plan cache."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Dict, List

from mx_trt.builder import engines
from mx_trt.cache import ENV_DIR, EngineCache
from mx_trt.errors import MxTrtError
from mx_trt.pipeline.int8 import subgraph_precisions
from mx_trt.settings import Settings
from mx_trt.tools.cli.binding import bind_accelerated, decision_json
from mx_trt.tools.cli.checkpoint import load_model, resolve_shapes
from mx_trt.tools.cli.options import (
    EXIT_FAILED,
    EXIT_OK,
    UsageError,
    add_max_batch,
    check_max_batch,
    default_batches,
    engine_setup,
    parse_batches,
    settings_from_env,
    with_batch,
)


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``build`` and its options on the subcommand set ``sub``."""
    p = sub.add_parser("build", parents=[common], help="fill the plan cache ahead of time",
                       description="Build the engines the bind would build and store them in the plan cache "
                                   "(MXNET_TENSORRT_CACHE_DIR), so that later binds load them.")
    p.add_argument("--batch", metavar="B1,B2,...", help="batch sizes to build for (replace dim 0 of every --shape)")
    add_max_batch(p)
    p.add_argument("--cache-dir", metavar="DIR", help="the plan cache folder (default: MXNET_TENSORRT_CACHE_DIR)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def _usable_cache(settings: Settings) -> EngineCache:
    """The plan cache ``settings`` name (the environment's, or ``--cache-dir``), checked to be usable.

    Raises:
        UsageError: a malformed cache variable, the cache disabled, or a folder
            that cannot be used.
    """
    try:
        cache = EngineCache.from_settings(settings)
    except MxTrtError as exc:
        raise UsageError(str(exc)) from None
    if cache is None:
        raise UsageError(f"the plan cache is disabled ({ENV_DIR} is empty): set it or pass --cache-dir DIR")
    problem = cache.probe()
    if problem is not None:
        raise UsageError(f"cannot use the plan cache {cache.directory}: {problem}")
    return cache


def run(args: argparse.Namespace) -> int:
    """Bind with the pass at every ``--batch`` so that the engines land in the plan cache.

    Returns:
        ``EXIT_OK``, or ``EXIT_FAILED`` when engines were built but none was stored.
    """
    batches = parse_batches(args.batch) if args.batch else None
    check_max_batch(args)
    folder = os.path.abspath(args.cache_dir) if args.cache_dir else None
    env = settings_from_env()
    cache = _usable_cache(env.with_cache_dir(folder) if folder else env)
    before = {e.key for e in cache.entries()}
    ckpt, shapes, _ = load_model(args)
    settings, ctx, backend = engine_setup(args)
    if folder:
        settings = settings.with_cache_dir(folder)
    if batches is None:
        batches = default_batches(shapes)
    per_batch = [with_batch(shapes, b) for b in batches]
    for bs in per_batch:
        resolve_shapes(ckpt, bs)
    rows: List[Dict[str, Any]] = []
    for b, bs in zip(batches, per_batch):
        engines.clear_pool()  # so every batch is looked up on disk, and stored there when built
        t = time.perf_counter()
        exe, info = bind_accelerated(ckpt, bs, ctx, settings, backend)
        dt = time.perf_counter() - t
        precisions = subgraph_precisions(info.plan, settings)
        rows.append({"batch": b, "engines": len(info.engines), "built": info.builds, "cached": info.loads,
                     "failed": dict(info.native_failures), "seconds": dt,
                     "precision": {name: _precision(p, info.decisions.get(name)) for name, p in precisions.items()
                                   if name not in info.native_failures},
                     "kept_float": {name: p.kept_float for name, p in precisions.items() if p.kept_float},
                     "decisions": {name: decision_json(d) for name, d in info.decisions.items()}})
        del exe, info
    engines.clear_pool()
    if args.json:
        print(json.dumps({"model": ckpt.prefix, "cache_dir": cache.directory, "backend": backend.name,
                          "fp16": settings.fp16, "precision": settings.precision, "max_batch_size": settings.max_batch_size, "batches": rows}, indent=2))
    else:
        print(f"model: {ckpt.prefix}  backend: {backend.name}  precision: {settings.precision}  plan cache: {cache.directory}"
              + (f"  dynamic batch up to {settings.max_batch_size}" if settings.max_batch_size else ""))
        for r in rows:
            print(f"batch {r['batch']}: {r['engines']} engine(s): {r['built']} built and stored, "
                  f"{r['cached']} already in the cache ({r['seconds']:.2f} s)")
            for name, text in r["precision"].items():
                print(f"  {name}: {text}")
            for name, d in r["decisions"].items():
                print(f"  {name}: {d['text']}" + (" (stored decision)" if d["stored"] else ""))
            for name, why in r["failed"].items():
                if name not in r["decisions"]:
                    print(f"  {name} stays native: {why}")
    built = sum(r["built"] for r in rows)
    if built and not {e.key for e in cache.entries()} - before:
        print(f"mxtrt: error: {built} engine(s) built but none stored in {cache.directory} (see the warnings above)",
              file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _precision(planned: Any, decision: Any) -> str:
    """What an engine was built in: the plan's precision, or the measured rule's fp32 where it fell back to it
    (a reduced precision slower than fp32, or a backend without it)."""
    if decision is not None and decision.engine is not None and decision.engine[1] != planned.precision:
        return str(decision.engine[1])
    return str(planned.describe())
