"""Pure-Python graph passes of the TensorRT integration (no MXNet, ONNX or TensorRT imports).

Modules, in pipeline order:

* :mod:`passes.ir` - the typed graph IR the passes work on.
* :mod:`passes.simplify` - remove inference-time identities before partitioning.
* :mod:`passes.partition` - maximal TensorRT-compatible subgraphs (the design's method, made exact),
  with :mod:`passes.groups` (incompatibility groups), :mod:`passes.contraction` (the exact check on
  the contracted graph, the maximality sweep) and :mod:`passes.order_list`.
* :mod:`passes.cost` - multiply-add estimates; which subgraphs are worth an engine.
* :mod:`passes.validate` - independent checks: acyclic contraction (run at every bind) and maximality (tests).
* :mod:`passes.fuse` - replace each subgraph by one fused node.

Nothing is re-exported here: the functions ``partition`` and ``fuse`` would
shadow their modules (``import passes.partition as p`` would get the function).
"""
