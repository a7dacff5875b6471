"""Triton models that need no Python: the whole graph as one ONNX model (``onnxruntime_onnx``) or one TensorRT plan
(``tensorrt_plan``).

Only a graph whose every operator converts gets them
(:func:`whole_model_export`, the whole-model export of
:mod:`mx_trt.artifacts_onnx` with the backend's own support rules), and the
export must be batch-dynamic, so that Triton's batcher can form any batch from
1 to ``max_batch``. The ONNX model is the one the pass builds its engines from
(one file, or past protobuf's 2 GB the weights in ``model.onnx.data`` beside it). The
plan is built by the TensorRT backend with the weights in it (not stripped),
for the GPU of the machine that builds it: the model folder records that GPU's
compute capability and TensorRT's version in ``mx_trt_plan.json``, and Triton
can load the plan only on a GPU of the same compute capability with the same
TensorRT release.
"""
from __future__ import annotations

import json
import logging
import os
from typing import Any, List, Mapping, Optional, Sequence, Tuple

from mx_trt.artifacts_onnx import describe_refusal, save_onnx, whole_model
from mx_trt.builder.backends import Backend, BuildOptions
from mx_trt.errors import MxTrtError, NotConvertibleError, ServeError
from mx_trt.export.subgraph import ExportedSubgraph
from mx_trt.serving.executors import TensorSpec
from mx_trt.serving.repository import claim_model_dir, config_text, mark_model_dir
from mx_trt.settings import Settings

logger = logging.getLogger(__name__)

ONNX_FILE = "model.onnx"
PLAN_FILE = "model.plan"
PLAN_INFO = "mx_trt_plan.json"


def whole_model_export(symbol: Any, params: Mapping[str, Any], inputs: Sequence[TensorSpec],
                       outputs: Sequence[TensorSpec], max_batch: int, backend: Backend,
                       settings: Optional[Settings] = None) -> Tuple[Optional[ExportedSubgraph], str]:
    """The whole model as one batch-dynamic ONNX model (batch 1 to ``max_batch``), or ``None`` and why not.

    The export is :func:`mx_trt.artifacts_onnx.whole_model` with ``backend``'s
    rules (every operator, no cost rule); the ONNX names of the inputs and
    outputs must be the model's, so that every variant of the model has one
    interface.
    """
    settings = settings or Settings.from_env()
    shapes = {t.name: (max_batch,) + t.dims for t in inputs}
    try:
        whole = whole_model(symbol, params, shapes, settings, backend, type_dict={t.name: t.dtype for t in inputs})
    except NotConvertibleError as exc:
        return None, f"{len(exc.operators)} operators stay native: {describe_refusal(exc, 3)}"
    except MxTrtError as exc:
        return None, f"the export failed: {exc}"
    exported = whole.exported
    if not exported.batch_dim:
        return None, f"the ONNX model is not batch-dynamic ({whole.static_reason}), so Triton could not batch it"
    want_in, want_out = [t.name for t in inputs], [t.name for t in outputs]
    if list(exported.input_names) != want_in or list(exported.output_names) != want_out:
        return None, (f"the ONNX names {list(exported.input_names)} -> {list(exported.output_names)} differ from the "
                      f"model's {want_in} -> {want_out}")
    return exported, ""


def write_onnx_model(repo: str, name: str, exported: ExportedSubgraph, inputs: Sequence[TensorSpec],
                     outputs: Sequence[TensorSpec], max_batch: int, max_queue_delay_us: int, instances: int) -> str:
    """Write ``repo/name`` for Triton's ONNX Runtime backend (``platform: "onnxruntime_onnx"``, ``backend:
    "onnxruntime"``: no Python); returns the folder.

    Raises:
        ServeError: the folder cannot be written.
    """
    try:
        folder = claim_model_dir(repo, name)
        save_onnx(exported, os.path.join(folder, "1", ONNX_FILE))
        with open(os.path.join(folder, "config.pbtxt"), "w", encoding="utf-8") as f:
            f.write(config_text(name, "onnxruntime", inputs, outputs, max_batch, max_queue_delay_us, instances,
                                platform="onnxruntime_onnx"))
        mark_model_dir(folder)
    except OSError as exc:
        raise ServeError(f"cannot write the ONNX model {name!r} into {repo}: {exc}") from exc
    return folder


def write_plan_model(repo: str, name: str, exported: ExportedSubgraph, inputs: Sequence[TensorSpec],
                     outputs: Sequence[TensorSpec], max_batch: int, max_queue_delay_us: int, instances: int,
                     backend: Any, device_id: int = 0, engine_options: Optional[Mapping[str, Any]] = None) -> str:
    """Build a TensorRT plan (batch 1 to ``max_batch``, weights in it) and write ``repo/name`` for
    ``platform: "tensorrt_plan"``; returns the folder. ``engine_options``: the build's
    (:meth:`~mx_trt.settings.Settings.engine_options`: the workspace cap).

    Raises:
        EngineBuildError, BackendUnavailableError: the plan cannot be built here.
        ServeError: the folder cannot be written.
    """
    engine = backend.build(exported, BuildOptions(device_id=device_id, name=name, extra={
        **(engine_options or {}), "batch_ranges": [(1, max_batch, max_batch)], "strip_weights": False}))
    plan = bytes(engine.plan)
    info = {"backend": backend.version(), "device": backend.device_signature(device_id), "max_batch": max_batch,
            "bytes": len(plan)}
    try:
        folder = claim_model_dir(repo, name)
        with open(os.path.join(folder, "1", PLAN_FILE), "wb") as f:
            f.write(plan)
        with open(os.path.join(folder, "1", PLAN_INFO), "w", encoding="utf-8") as f:
            json.dump(info, f, indent=2)
        with open(os.path.join(folder, "config.pbtxt"), "w", encoding="utf-8") as f:
            f.write(config_text(name, "", inputs, outputs, max_batch, max_queue_delay_us, instances, "KIND_GPU",
                                platform="tensorrt_plan", gpus=[device_id]))
        mark_model_dir(folder)
    except OSError as exc:
        raise ServeError(f"cannot write the TensorRT model {name!r} into {repo}: {exc}") from exc
    logger.info("wrote %s: a %s plan for %s", folder, info["backend"], info["device"])
    return folder


def variants_note(written: List[str], skipped: List[str]) -> str:
    """One line per variant written or skipped, for the CLI."""
    return "\n".join([f"  wrote {w}" for w in written] + [f"  not written: {s}" for s in skipped])
