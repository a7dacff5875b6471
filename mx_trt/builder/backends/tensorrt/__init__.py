"""TensorRT 10+ and TensorRT-RTX engines: one implementation, two flavours.

``tensorrt`` (TensorRT 10+) and ``tensorrt_rtx_bindings`` (TensorRT-RTX) expose
the same API; :class:`TensorRTBackend` is written against TensorRT's and
:class:`TensorRTRTXBackend` only names the other module and turns on RTX's
flavour (builds without a device, kernel specialization strategy, runtime cache).

=================  ==================================================================
module             responsibility
=================  ==================================================================
``backend``        the two backend classes: availability, build, stored engines
``flavours``       what differs between TensorRT 10+ and TensorRT-RTX
``builder``        ONNX -> network -> builder config -> plan bytes (shared)
``diagnostics``    parser errors and build logs mapped to ONNX and MXNet nodes
``shapes``         optimization profiles, profile selection, output shapes
``meta``           the JSON description stored with a plan, and its checks on load
``refit``          weight-stripped plans: builder flags, refit from the caller's host memory
``engine``         :class:`TrtEngine`: plan, description, shapes, deserialization (and refit)
``runtime``        deserializing, execution contexts, :class:`TrtRunner`
``caches``         timing cache, TensorRT-RTX runtime cache, atomic file writes
``logs``           TensorRT's ``ILogger`` forwarded to :mod:`logging`, captured for errors
``cuda``           a minimal ctypes binding of the CUDA runtime
=================  ==================================================================

Build (no device needed for TensorRT-RTX)::

    ONNX bytes (or a file, for external weights) -> OnnxParser -> strongly typed
    network -> builder config (workspace cap, profiles, timing cache, progress)
    -> build_serialized_network (weight-stripped: STRIP_PLAN + REFIT_IDENTICAL)
    -> plan bytes (TrtEngine.plan, what the plan cache stores)

Run (device needed): the plan is deserialized once per engine, on first use;
a stripped plan is refitted then from the caller's weights, without copying
them on the host (where a device is present, build and load do that already,
so a plan that cannot be refitted is rebuilt with its weights). Each executor
gets its own :class:`TrtRunner` (one ``IExecutionContext`` and one CUDA
stream) that binds MXNet's device pointers with ``set_tensor_address``.

``BuildOptions.extra`` keys:

========================  =================================================================
``profiles``              ``[{input: (min_shape, opt_shape, max_shape)}]``; none: static
``batch_ranges``          ``[(min, opt, max)]`` of dimension 0, when ``profiles`` is absent
``output_shape_rule``     ``"batch"`` / ``"static"`` / ``"engine"`` (default: inferred)
``progress``              ``callable(phase: str, step: int, total: int)``
``timing_cache_path``     timing cache file, loaded if present, saved after the build
``rtx_specialization``    ``lazy`` / ``eager`` / ``none`` (RTX; the bind's ``MXNET_TENSORRT_RTX_SPECIALIZATION``)
``workspace_mb``          cap of the workspace pool in MiB (the bind's ``MXNET_TENSORRT_WORKSPACE_MB``;
                          absent: no cap, TensorRT may use what the device has)
``runtime_cache_path``    RTX runtime cache file, loaded at context creation, saved after runs
``work_dir``              where temporary files of a build go (the plan cache's ``tmp/``)
``weights``               ``callable() -> {initializer name: numpy array}`` (every initializer of the
                          exported model, contiguous host arrays): refits stripped plans at build
                          (default: the exported model's own) and at load (required there)
``strip_weights``         ``False`` builds the plan with its weights (default ``True``: stripped)
========================  =================================================================

The keys a bind's settings give (``workspace_mb``, ``rtx_specialization``) come from
:meth:`mx_trt.settings.Settings.engine_options`; nothing here reads the environment.
"""
from __future__ import annotations

from mx_trt.builder.backends.tensorrt.backend import TensorRTBackend, TensorRTRTXBackend, backend_for, load_engine
from mx_trt.builder.backends.tensorrt.engine import TrtEngine
from mx_trt.builder.backends.tensorrt.runtime import TrtRunner

__all__ = ["TensorRTBackend", "TensorRTRTXBackend", "TrtEngine", "TrtRunner", "backend_for", "load_engine"]
