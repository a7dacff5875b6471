"""Pure-Python graph passes of the TensorRT integration (no MXNet, ONNX or TensorRT imports).

Modules, in pipeline order:

* :mod:`mx_trt.passes.ir` - the typed graph IR the passes work on.
* :mod:`mx_trt.passes.naming` - the tensor names every later stage uses (:func:`~mx_trt.passes.naming.entry_name`).
* :mod:`mx_trt.passes.simplify` - remove inference-time identities before partitioning.
* :mod:`mx_trt.passes.partition` - maximal TensorRT-compatible subgraphs (the design's method, made exact),
  with :mod:`mx_trt.passes.groups` (incompatibility groups), :mod:`mx_trt.passes.contraction` (the exact check on
  the contracted graph, the maximality sweep) and :mod:`mx_trt.passes.order_list`.
* :mod:`mx_trt.passes.cost` - multiply-add estimates; which subgraphs are worth an engine.
* :mod:`mx_trt.passes.validate` - independent checks: acyclic contraction (run at every bind) and maximality (tests).
* :mod:`mx_trt.passes.fuse` - replace each subgraph by one fused node.

Nothing is re-exported here: the functions ``partition`` and ``fuse`` would
shadow their modules (``import mx_trt.passes.partition as p`` would get the function).
"""
