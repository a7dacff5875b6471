"""The Triton Python-backend model that serves an mx_trt model: ``TritonPythonModel``.

A model folder written by :mod:`mx_trt.serving.repository` holds a
``model.py`` that imports this class, the checkpoint, and ``mx_trt_serve.json``
(inputs, outputs, maximum batch). Triton runs each instance of the model in a
stub process of its own (``instance_group``): each binds the checkpoint with
the pass (:class:`~mx_trt.serving.executors.ServedModel`); the plan cache
(``MXNET_TENSORRT_CACHE_DIR``) is shared by all of them, so the first instance
builds the engines and the others load them.

:meth:`TritonPythonModel.execute` receives the requests Triton's dynamic
batcher gathered. Each is checked on its own: a refused request gets an
``INVALID_ARG`` error (HTTP 400) naming the reason, and the others run as one
batch. A forward that raises (a plugin's exception becomes an
``EngineRunError``) fails only the request that made it raise, with an
internal error (HTTP 500) naming the exception; the instance stays healthy. ``triton_python_backend_utils`` exists only inside Triton's stub, so it
is imported in :meth:`~TritonPythonModel.initialize`.
"""
from __future__ import annotations

import logging
import os
from typing import Any, Dict, List

import numpy as np

from mx_trt.serving.executors import RequestFailure, ServedModel
from mx_trt.serving.spec import import_user_modules, load_checkpoint_files, read_spec

logger = logging.getLogger(__name__)


class TritonPythonModel:
    """Triton's Python-backend interface: ``initialize``, ``execute``, ``finalize``."""

    def initialize(self, args: Dict[str, str]) -> None:
        """Bind the model folder's checkpoint (Triton calls this once per instance).

        Raises:
            ServeError: the folder is damaged or the model cannot be bound (Triton then fails the load).
        """
        import mxnet as mx
        import triton_python_backend_utils as pb_utils  # only inside Triton's stub

        self.pb = pb_utils
        folder = os.path.join(args["model_repository"], str(args["model_version"]))
        spec = read_spec(folder)
        import_user_modules(folder, spec.imports)
        symbol, arg_params, aux_params = load_checkpoint_files(folder)
        kind = args.get("model_instance_kind", "CPU")
        ctx = mx.gpu(int(args.get("model_instance_device_id", 0) or 0)) if kind == "GPU" else mx.cpu()
        self.model = ServedModel(symbol, arg_params, aux_params, spec.inputs, spec.max_batch, ctx,
                                 accelerate=spec.accelerate, allow_nonfinite=spec.allow_nonfinite)
        logger.info("%s ready", args.get("model_instance_name", "model"))

    def execute(self, requests: List[Any]) -> List[Any]:
        """One response per request: outputs, an ``INVALID_ARG`` error for a refused request, or an internal
        error for a request whose forward raised. Never raises."""
        pb = self.pb
        arrays: List[Dict[str, np.ndarray]] = []
        for request in requests:
            got: Dict[str, np.ndarray] = {}
            for spec in self.model.inputs:
                tensor = pb.get_input_tensor_by_name(request, spec.name)
                if tensor is not None:
                    got[spec.name] = tensor.as_numpy()
            arrays.append(got)
        try:
            results = self.model.run_requests(arrays)
        except (Exception, SystemExit) as exc:  # nothing of a request may end the stub: every request gets it
            failure = RequestFailure.of(exc)
            logger.error("%s", failure.message)
            return [pb.InferenceResponse(output_tensors=[], error=pb.TritonError(failure.message)) for _ in requests]
        responses = []
        for result in results:
            if isinstance(result, str):
                responses.append(pb.InferenceResponse(
                    output_tensors=[], error=pb.TritonError(result, pb.TritonError.INVALID_ARG)))
            elif isinstance(result, RequestFailure):
                logger.error("%s", result.message)
                responses.append(pb.InferenceResponse(output_tensors=[], error=pb.TritonError(result.message)))
            else:
                responses.append(pb.InferenceResponse(output_tensors=[
                    pb.Tensor(spec.name, np.ascontiguousarray(out)) for spec, out in zip(self.model.outputs, result)]))
        return responses

    def finalize(self) -> None:
        """Drop the executor (Triton calls this when the model unloads or the server stops)."""
        self.model = None  # type: ignore[assignment]
