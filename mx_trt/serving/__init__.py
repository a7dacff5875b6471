"""Serving mx_trt models with Triton Inference Server (the ``serve`` extra: ``pip install 'mx_trt[serve]'``).

- :func:`serve` / :func:`running` (``server.py``): a checkpoint served by the
  ``tritonserver`` that ``nvidia-pytriton`` bundles, blocking or as a context.
- ``repository.py``: the Triton model repository (``config.pbtxt`` and a
  Python-backend model folder); ``spec.py``: what the folder holds;
  ``engine_models.py``: the models without Python (``onnxruntime_onnx``,
  ``tensorrt_plan``) for a graph that is one engine.
- ``backend.py``: the Python-backend model run in Triton's stub processes;
  ``executors.py``: one bound instance, batches of any size up to the maximum.
- ``runtime.py``: the bundled server's files, and the interpreter check.
- ``front.py`` / ``admission.py``: the HTTP front that checks every inference
  request before Triton allocates for it, and owns readiness and draining.
- ``process.py`` (the ``tritonserver`` child), ``supervisor.py`` (instances
  restarted, graceful shutdown), ``lifecycle.py`` (ports, host, the parent-death
  signal, folders of servers that died).

Binding never imports this package, and this package never imports Triton's
Python modules; only ``backend.py`` imports ``triton_python_backend_utils``,
inside Triton's stub.
"""
from __future__ import annotations

from mx_trt.serving.runtime import serve_problem
from mx_trt.serving.server import Endpoints, ServeOptions, running, serve

__all__ = ["Endpoints", "ServeOptions", "running", "serve", "serve_problem"]
